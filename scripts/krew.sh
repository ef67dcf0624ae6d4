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

die() { echo "krew.sh: error: $*" >&2; exit 1; }

version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/krew" { print $3; exit }' "$moddir/go.mod")"
[[ -n "$version" ]] || die "cannot read the sigs.k8s.io/krew version from $moddir/go.mod"

go="$(command -v go || true)"
if [[ -z "$go" && -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go; fi
[[ -n "$go" ]] || die "'go' is not on PATH: Go is needed to build sigs.k8s.io/krew $version for the krew test"

export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off

cache_root="${KUBECTL_RUNS_KREW_CACHE:-$HOME/.cache/kubectl-runs/krew}"
outdir="$cache_root/$version"
if [[ -x "$outdir/kubectl-krew" ]]; then echo "$outdir"; exit 0; fi
mkdir -p "$cache_root"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache_root/.build.lock"
    flock 9
    if [[ -x "$outdir/kubectl-krew" ]]; then echo "$outdir"; exit 0; fi
fi
tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "${tmp:-}"' EXIT
echo "krew.sh: building krew $version into $outdir" >&2
start=$SECONDS
# go.sum is committed: every download is checked against it.
(cd "$moddir" && CGO_ENABLED=0 "$go" build -trimpath -ldflags="-s -w" -o "$tmp/kubectl-krew" sigs.k8s.io/krew/cmd/krew) >&2 \
    || die "go build sigs.k8s.io/krew/cmd/krew failed (see above)"
mkdir -p "$outdir"
mv -f "$tmp/kubectl-krew" "$outdir/kubectl-krew"
echo "krew.sh: built in $((SECONDS - start))s" >&2
echo "$outdir"
