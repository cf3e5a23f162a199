{{- define "sc.name" -}}{{ .Release.Name }}{{- end }}
{{- define "sc.labels" -}}
app.kubernetes.io/name: storage-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{- define "sc.selector" -}}
app.kubernetes.io/name: storage-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sc.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}
