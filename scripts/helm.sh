#!/usr/bin/env bash
# Helm v3 for the chart tests (deploy/helm/kubectl-runs), from the Go module proxy (helm.sh/helm/v3 pinned in
# tests/helm/go.mod/go.sum).
#
#   scripts/helm.sh     build helm (helm.sh/helm/v3/cmd/helm) unless cached; print the binary's path
#
# The binary is cached outside the repository in
#   ${KUBECTL_RUNS_HELM_CACHE:-$HOME/.cache/kubectl-runs/helm}/<version>/helm
# Only Go (the version tests/helm/go.mod names: helm v3.22 wants 1.26) and the Go module proxy are needed. The
# last line on stdout is the answer; progress and errors go to stderr.
#
# The -X flags are those of Helm's own Makefile: without them `helm version` says v3.22 with no patch, and
# `helm template`/`helm lint` assume Kubernetes 1.20 (chartutil's default), which fails the chart's
# kubeVersion (>= 1.30). Helm's Makefile takes that version from the k8s.io/client-go it is built with (major + 1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
moddir="$(cd "$here/../tests/helm" && pwd)"
tool=helm.sh
# shellcheck source=lib/gomodule.sh
source "$here/lib/gomodule.sh"

version="$(module_version "$moddir" helm.sh/helm/v3)"
client_go="$(awk '$1 == "k8s.io/client-go" && $2 ~ /^v0\./ { print $2; exit }' "$moddir/go.mod")"
[[ -n "$client_go" ]] || die "cannot read the k8s.io/client-go version from $moddir/go.mod"
k8s_minor="${client_go#v0.}"; k8s_minor="${k8s_minor%%.*}"
go="$(find_go "Go >= 1.26 is needed to build helm.sh/helm/v3 $version for the chart tests")"

ldflags="-X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

outdir="${KUBECTL_RUNS_HELM_CACHE:-$HOME/.cache/kubectl-runs/helm}/$version"
cached_build "$go" "$moddir" helm.sh/helm/v3/cmd/helm "$outdir" helm "a cold build takes a few minutes" "$ldflags"
echo "$outdir/helm"
