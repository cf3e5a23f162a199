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

{{/* The image of a version, chosen here and never by the customer: the catalog's own build
(deploy/catalog/redis/image.yaml, from Debian's packages), from the registry the platform sets
(flotilla.registry, its mirror), by the digest a release pinned. */}}
{{- define "redis.image" -}}
{{- $tags := dict "7.0" "7.0" }}
{{- $tag := index $tags (toString .Values.version) | required (printf "unsupported Redis version %q" (toString .Values.version)) }}
{{- $repository := printf "%s/catalog-images/redis" (.Values.flotilla.registry | default "ghcr.io/flotilla-dev") }}
{{- with index (.Values.flotilla.imageDigests | default dict) $tag }}{{ $repository }}:{{ $tag }}@{{ . }}{{ else }}{{ $repository }}:{{ $tag }}{{ end }}
{{- end }}
