{{/* gpud.name: the chart name, or nameOverride. */}}
{{- define "gpud.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
gpud.fullname: the release name when it already contains the chart name
(release "gpud" gives objects named "gpud", as in deploy/daemonset), else
"<release>-gpud".
*/}}
{{- define "gpud.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpud.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* gpud.selectorLabels: what the agent's DaemonSet and Service select on. */}}
{{- define "gpud.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpud.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* gpud.labels: on every object. */}}
{{- define "gpud.labels" -}}
app.kubernetes.io/name: {{ include "gpud.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{/* gpud.image: repository:tag, the tag defaulting to the appVersion. */}}
{{- define "gpud.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* gpud.dra: true in DRA mode. */}}
{{- define "gpud.dra" -}}
{{- if eq .Values.mode "dra" }}true{{ end -}}
{{- end -}}

{{/*
gpud.apiAccess: true when the agent talks to the API server: DRA mode, or
node labels asked for explicitly.
*/}}
{{- define "gpud.apiAccess" -}}
{{- if or (eq .Values.mode "dra") (eq (toString .Values.agent.nodeLabels) "true") }}true{{ end -}}
{{- end -}}

{{/* gpud.serviceAccount: the agent's service account name. */}}
{{- define "gpud.serviceAccount" -}}
{{- include "gpud.fullname" . -}}
{{- end -}}

{{/* gpud.monitoring: true when the cluster serves the Prometheus Operator's API. */}}
{{- define "gpud.monitoring" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- end -}}

{{/* gpud.schedulerSelectorLabels: what the scheduler's Deployment and Service select on. */}}
{{- define "gpud.schedulerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpud.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: scheduler
{{- end -}}
