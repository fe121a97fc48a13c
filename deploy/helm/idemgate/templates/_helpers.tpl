{{/* Names and labels shared by every object of the release. */}}

{{- define "idemgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name: the release name, with the chart's name unless it has it. */}}
{{- define "idemgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "idemgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idemgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "idemgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "idemgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The config file: the user's TOML, then the [kafka] and [metrics] tables the chart writes
from `kafka` and `metrics.port` (after the user's text, so its top-level keys such as
`guarantee` stay top-level). JSON strings, numbers and booleans are TOML values too.
*/}}
{{- define "idemgate.config" -}}
{{- if regexMatch "(?m)^\\s*\\[\\s*(kafka|metrics)\\s*\\]" .Values.config }}
{{- fail "config: leave out [kafka] and [metrics]; the chart writes them from kafka.* and metrics.*" }}
{{- end }}
{{- if not .Values.kafka.bootstrapServers }}
{{- fail "kafka.bootstrapServers is required" }}
{{- end }}
{{- if not .Values.kafka.groupId }}
{{- fail "kafka.groupId is required" }}
{{- end }}
{{- range $key, $value := .Values.kafka.properties }}
{{- if has $key (list "bootstrap.servers" "group.id") }}
{{- fail (printf "kafka.properties: %s is set by kafka.%s" $key (ternary "bootstrapServers" "groupId" (eq $key "bootstrap.servers"))) }}
{{- end }}
{{- end }}
{{- .Values.config | trimSuffix "\n" }}

# Written by the chart from kafka.* and metrics.*.
[kafka]
"bootstrap.servers" = {{ .Values.kafka.bootstrapServers | toJson }}
"group.id" = {{ .Values.kafka.groupId | toJson }}
{{- range $key, $value := .Values.kafka.properties }}
{{ $key | toJson }} = {{ $value | toJson }}
{{- end }}

[metrics]
listen = {{ printf "0.0.0.0:%d" (int .Values.metrics.port) | toJson }}
{{- with .Values.metrics.outputStallAfter }}
output_stall_after = {{ . | toJson }}
{{- end }}
{{ end }}
