{{- define "cc.name" -}}{{ .Release.Name }}{{- end }}
{{- define "cc.labels" -}}
app.kubernetes.io/name: cluster-controller
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{- define "cc.selector" -}}
app.kubernetes.io/name: cluster-controller
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}
