{{- define "cni.labels" -}}
app.kubernetes.io/name: flannel
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}
