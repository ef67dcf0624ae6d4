//go:build tools

// Helm v3 for the chart tests (deploy/helm/kubectl-runs): its command, helm.sh/helm/v3/cmd/helm, built by
// scripts/helm.sh from the module version pinned in go.mod (checked against go.sum) into
// ~/.cache/kubectl-runs/helm, outside the repository.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
