{{- define "nc.name" -}}{{ .Release.Name }}{{- end }}
{{- define "nc.labels" -}}
app.kubernetes.io/name: net-controller
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{- define "nc.selector" -}}
app.kubernetes.io/name: net-controller
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: controller
{{- end }}
{{- define "nc.agentSelector" -}}
app.kubernetes.io/name: net-controller
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: agent
{{- end }}
{{- define "nc.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}
