{{- define "usage.name" -}}{{ .Release.Name }}{{- end }}
{{- define "usage.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}
{{- define "usage.labels" -}}
app.kubernetes.io/name: usage-api
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{- define "usage.selector" -}}
app.kubernetes.io/name: usage-api
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
