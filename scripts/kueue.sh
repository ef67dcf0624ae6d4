#!/usr/bin/env bash
# Kueue for the integration tests, from the Go module proxy (the module pinned in tests/kueue/go.mod/go.sum).
#
#   scripts/kueue.sh crds      download the module into the Go module cache unless there; print the directory
#                              holding Kueue's real CRDs (config/components/crd/bases)
#   scripts/kueue.sh manager   build Kueue's manager (cmd/kueue) unless cached; print the binary's path
#
# The binary is cached outside the repository in
#   ${KUBECTL_RUNS_KUEUE_CACHE:-$HOME/.cache/kubectl-runs/kueue}/<version>/kueue
# Only Go (>= 1.24) and the Go module proxy are needed. The last line on stdout is the answer; progress and
# errors go to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/kueue" && pwd)"

tool=kueue.sh
# shellcheck source=lib/gomodule.sh
source "$here/lib/gomodule.sh"

version="$(module_version "$moddir" sigs.k8s.io/kueue)"
go="$(find_go "Go >= 1.24 is needed to download sigs.k8s.io/kueue $version for the integration tests")"

export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off

module_dir() {
    # go.sum is committed: the download is checked against it.
    (cd "$moddir" && "$go" mod download -json sigs.k8s.io/kueue) \
        | awk -F'"' '$2 == "Dir" { print $4 } $2 == "Error" { print "ERROR " $4 }'
}

crds() {
    local dir
    dir="$(module_dir)" || die "go mod download sigs.k8s.io/kueue@$version failed"
    [[ "$dir" != ERROR* && -n "$dir" ]] || die "go mod download sigs.k8s.io/kueue@$version: ${dir#ERROR }"
    [[ -d "$dir/config/components/crd/bases" ]] || die "$dir has no config/components/crd/bases"
    echo "$dir/config/components/crd/bases"
}

manager() {
    local outdir="${KUBECTL_RUNS_KUEUE_CACHE:-$HOME/.cache/kubectl-runs/kueue}/$version"
    cached_build "$go" "$moddir" sigs.k8s.io/kueue/cmd/kueue "$outdir" kueue "a cold build takes several minutes"
    echo "$outdir/kueue"
}

case "${1:-}" in
    crds) crds ;;
    manager) manager ;;
    *) echo "usage: $0 crds|manager" >&2; exit 2 ;;
esac
