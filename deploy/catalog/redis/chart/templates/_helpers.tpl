{{/* Labels of every object of the release. */}}
{{- define "redis.labels" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/* Labels selecting the release's pods. */}}
{{- define "redis.selector" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/* The image of a version: chosen here, never by the customer. */}}
{{- define "redis.image" -}}
{{- $images := dict "7.4" "docker.io/library/redis:7.4.2" "8.0" "docker.io/library/redis:8.0.3" }}
{{- index $images (toString .Values.version) | required (printf "unsupported Redis version %q" (toString .Values.version)) }}
{{- end }}
