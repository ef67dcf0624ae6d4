#!/usr/bin/env bash
# krew for the end-to-end test of the README's `kubectl krew install` line, from the Go module proxy (the module
# pinned in tests/krew/go.mod/go.sum), when the machine has no krew of its own.
#
#   scripts/krew.sh     build krew (sigs.k8s.io/krew/cmd/krew) as kubectl-krew unless cached; print its directory
#                       (put it on PATH and `kubectl krew` finds it, as kubectl finds every plugin)
#
# The binary is cached outside the repository in
#   ${KUBECTL_RUNS_KREW_CACHE:-$HOME/.cache/kubectl-runs/krew}/<version>/kubectl-krew
# Only Go and the Go module proxy are needed. The last line on stdout is the answer; progress and errors go to
# stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/krew" && pwd)"
tool=krew.sh
# shellcheck source=lib/gomodule.sh
source "$here/lib/gomodule.sh"

version="$(module_version "$moddir" sigs.k8s.io/krew)"
go="$(find_go "Go is needed to build sigs.k8s.io/krew $version for the krew test")"
outdir="${KUBECTL_RUNS_KREW_CACHE:-$HOME/.cache/kubectl-runs/krew}/$version"
cached_build "$go" "$moddir" sigs.k8s.io/krew/cmd/krew "$outdir" kubectl-krew
echo "$outdir"
