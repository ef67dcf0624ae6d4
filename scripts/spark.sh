#!/usr/bin/env bash
# Spark for the archive's Spark test (tests/spark): PySpark from PyPI, in a virtualenv of its own so that the
# project's .venv stays lean, and a Java runtime when the machine has none.
#
#   scripts/spark.sh    install pyspark==$version into the cache unless there; print the cache directory, whose
#                       bin/python imports pyspark and whose bin/spark-sql is Spark's SQL shell
#
# The virtualenv is cached outside the repository in
#   ${KUBECTL_RUNS_SPARK_CACHE:-$HOME/.cache/kubectl-runs/spark}/<version>
# A cold install downloads the pyspark distribution (about 450 MB) and takes a few minutes. Spark 4 runs on
# Java 17 or 21: where `java` is absent, openjdk-17-jre-headless is installed with apt-get (as root), and only
# then. The last line on stdout is the answer; progress and errors go to stderr.
set -euo pipefail

version=4.3.0   # pyspark; bump it here (the test reports the version it ran)
tool=spark.sh
die() { echo "$tool: error: $*" >&2; exit 1; }

java_runtime() {
    if command -v java >/dev/null 2>&1; then return 0; fi
    command -v apt-get >/dev/null 2>&1 || die "'java' is not on PATH and there is no apt-get: install Java 17 or 21"
    [[ "$(id -u)" == 0 ]] || die "'java' is not on PATH: install Java 17 or 21 (apt-get install openjdk-17-jre-headless)"
    echo "$tool: installing openjdk-17-jre-headless (no 'java' on PATH)" >&2
    local start=$SECONDS
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openjdk-17-jre-headless; } >&2 || die "apt-get install openjdk-17-jre-headless failed"
    command -v java >/dev/null 2>&1 || die "openjdk-17-jre-headless is installed but 'java' is not on PATH"
    echo "$tool: Java installed in $((SECONDS - start))s" >&2
}

pyspark() {
    local root="${KUBECTL_RUNS_SPARK_CACHE:-$HOME/.cache/kubectl-runs/spark}"
    local outdir="$root/$version"
    if [[ -e "$outdir/.complete" ]]; then echo "$outdir"; return 0; fi
    mkdir -p "$root"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$root/.install.lock"
        flock 9
        if [[ -e "$outdir/.complete" ]]; then echo "$outdir"; return 0; fi
    fi
    # A virtualenv is not relocatable, so it is made in place; .complete marks a finished install, and an
    # unfinished one (a killed run) is made again from scratch.
    rm -rf "$outdir"
    local python start=$SECONDS
    python="$(command -v python3 || true)"
    [[ -n "$python" ]] || die "'python3' is not on PATH"
    echo "$tool: installing pyspark==$version into $outdir (a cold install downloads about 450 MB)" >&2
    "$python" -m venv "$outdir" >&2 || die "python3 -m venv $outdir failed"
    if ! "$outdir/bin/python" -m pip install --disable-pip-version-check --no-input --quiet "pyspark==$version" >&2; then
        rm -rf "$outdir"
        die "pip install pyspark==$version failed (see above)"
    fi
    touch "$outdir/.complete"
    echo "$tool: installed in $((SECONDS - start))s" >&2
    echo "$outdir"
}

java_runtime
pyspark
