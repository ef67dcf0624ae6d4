#!/usr/bin/env bash
# Build (once) the kube-apiserver and etcd binaries used by the integration tests.
#
#   scripts/controlplane.sh build   build both binaries unless already cached; print the directory
#   scripts/controlplane.sh dir     print the cache directory (built or not)
#
# The binaries come from the Go module in tests/controlplane (k8s.io/kubernetes and
# go.etcd.io/etcd/server/v3 at the versions pinned in its go.mod/go.sum) and are cached outside
# the repository in
#   ${KUBECTL_RUNS_CP_CACHE:-$HOME/.cache/kubectl-runs/controlplane}/<k8s version>-<etcd version>/
# Only Go (>= 1.24) and the Go module proxy are needed. The last line on stdout is the directory;
# progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/controlplane" && pwd)"

die() { echo "controlplane.sh: error: $*" >&2; exit 1; }

# Versions are read from go.mod, the single source of truth.
modversion() {
    awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$moddir/go.mod"
}
k8s_version="$(modversion k8s.io/kubernetes)"
etcd_version="$(modversion go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || die "cannot read versions from $moddir/go.mod"

cache_root="${KUBECTL_RUNS_CP_CACHE:-$HOME/.cache/kubectl-runs/controlplane}"
outdir="$cache_root/${k8s_version}-${etcd_version}"

built() { [[ -x "$outdir/kube-apiserver" && -x "$outdir/etcd" ]]; }

do_build() {
    if built; then
        echo "$outdir"
        return 0
    fi
    local go
    go="$(command -v go || true)"
    if [[ -z "$go" && -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go; fi
    [[ -n "$go" ]] || die "'go' is not on PATH: Go >= 1.24 is needed to build kube-apiserver $k8s_version and etcd $etcd_version for the integration tests; install Go and run again"
    mkdir -p "$cache_root"

    # Serialise concurrent builds (e.g. several pytest workers).
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$cache_root/.build.lock"
        flock 9
        if built; then
            echo "$outdir"
            return 0
        fi
    fi

    tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
    trap 'rm -rf "${tmp:-}"' EXIT

    local minor="${k8s_version#v1.}"; minor="${minor%%.*}"
    local x="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        x+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done

    echo "controlplane.sh: building kube-apiserver $k8s_version and etcd $etcd_version into $outdir (a cold build takes several minutes)" >&2
    local start=$SECONDS
    (
        cd "$moddir"
        # go.sum is committed: -mod=readonly makes the build use exactly what it pins.
        export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
        "$go" build -trimpath -ldflags="-s -w$x" -o "$tmp/" ./cmd/kube-apiserver ./cmd/etcd
    ) >&2 || die "go build failed (see above)"
    "$tmp/etcd" --version >/dev/null 2>&1 || die "the built etcd does not run"
    "$tmp/kube-apiserver" --version >/dev/null 2>&1 || die "the built kube-apiserver does not run"

    mkdir -p "$outdir"
    mv -f "$tmp/etcd" "$outdir/etcd"
    mv -f "$tmp/kube-apiserver" "$outdir/kube-apiserver"
    echo "controlplane.sh: built in $((SECONDS - start))s" >&2
    echo "$outdir"
}

case "${1:-build}" in
    build) do_build ;;
    dir) echo "$outdir" ;;
    -h|--help|help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (use: build | dir)" ;;
esac
