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

die() { echo "kueue.sh: error: $*" >&2; exit 1; }

version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" { print $3; exit }' "$moddir/go.mod")"
[[ -n "$version" ]] || version="$(awk '$1 == "sigs.k8s.io/kueue" && $2 ~ /^v/ { print $2; exit }' "$moddir/go.mod")"
[[ -n "$version" ]] || die "cannot read the sigs.k8s.io/kueue version from $moddir/go.mod"

go="$(command -v go || true)"
if [[ -z "$go" && -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go; fi
[[ -n "$go" ]] || die "'go' is not on PATH: Go >= 1.24 is needed to download sigs.k8s.io/kueue $version for the integration tests"

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
    local cache_root="${KUBECTL_RUNS_KUEUE_CACHE:-$HOME/.cache/kubectl-runs/kueue}"
    local outdir="$cache_root/$version"
    if [[ -x "$outdir/kueue" ]]; then echo "$outdir/kueue"; return 0; fi
    mkdir -p "$cache_root"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$cache_root/.build.lock"
        flock 9
        if [[ -x "$outdir/kueue" ]]; then echo "$outdir/kueue"; return 0; fi
    fi
    local tmp
    tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
    trap 'rm -rf "${tmp:-}"' EXIT
    echo "kueue.sh: building Kueue's manager $version into $outdir (a cold build takes several minutes)" >&2
    local start=$SECONDS
    (cd "$moddir" && CGO_ENABLED=0 "$go" build -trimpath -ldflags="-s -w" -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue) >&2 \
        || die "go build sigs.k8s.io/kueue/cmd/kueue failed (see above)"
    mkdir -p "$outdir"
    mv -f "$tmp/kueue" "$outdir/kueue"
    echo "kueue.sh: built in $((SECONDS - start))s" >&2
    echo "$outdir/kueue"
}

case "${1:-}" in
    crds) crds ;;
    manager) manager ;;
    *) echo "usage: $0 crds|manager" >&2; exit 2 ;;
esac
