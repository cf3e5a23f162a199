{{- define "tc.name" -}}{{ .Release.Name }}{{- end }}
{{- define "tc.labels" -}}
app.kubernetes.io/name: tenant-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{- define "tc.selector" -}}
app.kubernetes.io/name: tenant-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
