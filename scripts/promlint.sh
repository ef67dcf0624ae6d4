#!/usr/bin/env bash
# The Prometheus metrics linter for the tests: `promtool check metrics`'s checks without promtool. A small Go
# command (tests/promlint/main.go) that parses exposition text with the Go client library's own parser
# (github.com/prometheus/common/expfmt) and lints it with its promlint package
# (github.com/prometheus/client_golang/prometheus/testutil/promlint), the versions pinned in
# tests/promlint/go.mod/go.sum.
#
#   scripts/promlint.sh build   build it unless cached; print the binary's path
#   scripts/promlint.sh check   build it unless cached, then lint the text on stdin (exit 1: lint problems,
#                               one per line; exit 2: the text does not parse)
#
# The binary is cached outside the repository in
#   ${KUBECTL_RUNS_PROMLINT_CACHE:-$HOME/.cache/kubectl-runs/promlint}/<client_golang version>-<go.sum hash>/promlint
# Only Go (>= 1.25) and the Go module proxy are needed. The last line on stdout of `build` is the answer;
# progress and errors go to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/promlint" && pwd)"

tool=promlint.sh
# shellcheck source=lib/gomodule.sh
source "$here/lib/gomodule.sh"

version="$(module_version "$moddir" github.com/prometheus/client_golang)"
go="$(find_go "Go >= 1.25 is needed to build the metrics linter (client_golang $version) for the tests")"
# the sources are ours: a change to them (or to the pins) is a new cache entry
stamp="$(cat "$moddir/go.mod" "$moddir/go.sum" "$moddir"/*.go | sha256sum | cut -c1-12)"
outdir="${KUBECTL_RUNS_PROMLINT_CACHE:-$HOME/.cache/kubectl-runs/promlint}/$version-$stamp"

build() {
    cached_build "$go" "$moddir" . "$outdir" promlint
    echo "$outdir/promlint"
}

case "${1:-}" in
    build) build ;;
    check) build >/dev/null && exec "$outdir/promlint" ;;
    *) echo "usage: $0 build|check" >&2; exit 2 ;;
esac
