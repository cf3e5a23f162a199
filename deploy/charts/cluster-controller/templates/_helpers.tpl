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

{{- define "cc.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}
