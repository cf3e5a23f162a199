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

{{/* Replicas spread over nodes (preferred), unless .Values.affinity says where they go. */}}
{{- define "sc.affinity" -}}
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
            matchLabels: {{- include "sc.selector" . | nindent 14 }}
{{- end }}
{{- end }}
