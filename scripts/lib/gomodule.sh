# Shared by scripts/krew.sh and scripts/kueue.sh: build one command of a Go module pinned in a test directory's
# go.mod/go.sum, cached outside the repository. Source it after setting `tool` (the name in messages), e.g.
#   tool=krew.sh; source "$here/lib/gomodule.sh"
# Progress and errors go to stderr; functions print their answer on stdout.

die() { echo "$tool: error: $*" >&2; exit 1; }

# module_version MODDIR MODULE: the version MODDIR/go.mod requires (a `require` line or a require block entry).
module_version() {
    local v
    v="$(awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit } ($1 == m && $2 ~ /^v/) { print $2; exit }' "$1/go.mod")"
    [[ -n "$v" ]] || die "cannot read the $2 version from $1/go.mod"
    echo "$v"
}

# find_go WHY: the go binary (PATH, then /usr/local/go); WHY ends the error when there is none.
find_go() {
    local go
    go="$(command -v go || true)"
    if [[ -z "$go" && -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go; fi
    [[ -n "$go" ]] || die "'go' is not on PATH: $1"
    echo "$go"
}

# cached_build GO MODDIR PACKAGE OUTDIR BINARY [NOTE] [LDFLAGS]: build PACKAGE (go.sum checks every download) into
# OUTDIR/BINARY unless it is already there; one build at a time per cache (flock), atomic (temp dir + rename).
# LDFLAGS are added to "-s -w" (e.g. -X flags that set a version string the upstream Makefile sets).
cached_build() {
    local go="$1" moddir="$2" package="$3" outdir="$4" binary="$5" note="${6:-}" ldflags="${7:-}"
    if [[ -x "$outdir/$binary" ]]; then return 0; fi
    local cache_root
    cache_root="$(dirname "$outdir")"
    mkdir -p "$cache_root"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$cache_root/.build.lock"
        flock 9
        if [[ -x "$outdir/$binary" ]]; then return 0; fi
    fi
    local tmp start=$SECONDS
    tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
    echo "$tool: building $package into $outdir${note:+ ($note)}" >&2
    if ! (cd "$moddir" && GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off CGO_ENABLED=0 \
            "$go" build -trimpath -ldflags="-s -w${ldflags:+ $ldflags}" -o "$tmp/$binary" "$package") >&2; then
        rm -rf "$tmp"
        die "go build $package failed (see above)"
    fi
    mkdir -p "$outdir"
    mv -f "$tmp/$binary" "$outdir/$binary"
    rm -rf "$tmp"
    echo "$tool: built in $((SECONDS - start))s" >&2
}
