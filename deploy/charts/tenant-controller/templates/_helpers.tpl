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

{{- define "tc.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}

{{/* Replicas spread over nodes (preferred), unless .Values.affinity says where they go. */}}
{{- define "tc.affinity" -}}
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
            matchLabels: {{- include "tc.selector" . | nindent 14 }}
{{- end }}
{{- end }}
