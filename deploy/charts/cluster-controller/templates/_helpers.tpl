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

{{/* Replicas spread over nodes (preferred), unless .Values.affinity says where they go. */}}
{{- define "cc.affinity" -}}
affinity:
{{- if .Values.affinity }}
  {{- toYaml .Values.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {{- include "cc.selector" . | nindent 14 }}
{{- end }}
{{- end }}
