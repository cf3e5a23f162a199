{{- define "csi-node.labels" -}}
app.kubernetes.io/name: kubevirt-csi-node
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/* The infrastructure labels as the driver reads them: key=value pairs joined by commas, sorted. */}}
{{- define "csi-node.infraLabels" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.cluster.infraLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
