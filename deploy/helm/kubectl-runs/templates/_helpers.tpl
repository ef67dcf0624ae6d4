{{/*
The full name: the prefix of every object's name. "kubectl-runs" for a release named kubectl-runs (so the
default objects carry the names of the kustomize base), "<release>-kubectl-runs" otherwise.
*/}}
{{- define "kubectl-runs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubectl-runs.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "kubectl-runs.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The reconciler's name: its Deployment, ServiceAccount, ClusterRole(Binding) and PodDisruptionBudget. */}}
{{- define "kubectl-runs.reconciler" -}}
{{- include "kubectl-runs.fullname" . }}-reconciler
{{- end -}}

{{/* The lease archiver's name: its ServiceAccount and ClusterRole(Binding). */}}
{{- define "kubectl-runs.archiver" -}}
{{- include "kubectl-runs.fullname" . }}-archiver
{{- end -}}

{{/* The leader-election Lease: its name and namespace. */}}
{{- define "kubectl-runs.leaseName" -}}
{{- default (include "kubectl-runs.reconciler" .) .Values.leaderElection.id -}}
{{- end -}}

{{- define "kubectl-runs.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}

{{- define "kubectl-runs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Labels: app.kubernetes.io/name and component as in the kustomize base, then Helm's own (chart, instance,
version, managed-by). Call with (dict "ctx" $ "component" "reconciler").
*/}}
{{- define "kubectl-runs.labels" -}}
{{ include "kubectl-runs.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{/*
Selector labels: the base's two, and the release (app.kubernetes.io/instance) so that two releases, or a
release beside the kustomize base, never select each other's pods.
*/}}
{{- define "kubectl-runs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubectl-runs.name" .ctx }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}
