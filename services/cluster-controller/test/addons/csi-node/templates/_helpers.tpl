{{- define "csi-node.labels" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.cluster.infraLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
