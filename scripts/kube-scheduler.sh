#!/usr/bin/env bash
# kube-scheduler for the pending-GPU tests: the upstream scheduler built from the same k8s.io/kubernetes module
# as the test kube-apiserver (tests/controlplane/cmd/kube-scheduler; versions pinned in tests/controlplane's
# go.mod/go.sum), run against the test API server to judge `kubectl runs pending` and `explain pod`.
#
#   scripts/kube-scheduler.sh   build it unless cached; print the binary's path
#
# The binary is cached outside the repository in
#   ${KUBECTL_RUNS_SCHEDULER_CACHE:-$HOME/.cache/kubectl-runs/scheduler}/<k8s version>/kube-scheduler
# Only Go (>= 1.24) and the Go module proxy are needed. The last line on stdout is the answer; progress and
# errors go to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/controlplane" && pwd)"

tool=kube-scheduler.sh
# shellcheck source=lib/gomodule.sh
source "$here/lib/gomodule.sh"

version="$(module_version "$moddir" k8s.io/kubernetes)"
go="$(find_go "Go >= 1.24 is needed to build kube-scheduler $version for the pending-GPU tests")"
outdir="${KUBECTL_RUNS_SCHEDULER_CACHE:-$HOME/.cache/kubectl-runs/scheduler}/$version"
minor="${version#v1.}"; minor="${minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
cached_build "$go" "$moddir" ./cmd/kube-scheduler "$outdir" kube-scheduler "a cold build takes a few minutes" "${ldflags# }"
"$outdir/kube-scheduler" --version >/dev/null 2>&1 || die "the built kube-scheduler does not run"
echo "$outdir/kube-scheduler"
