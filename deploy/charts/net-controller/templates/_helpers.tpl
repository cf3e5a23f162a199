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

{{/* Replicas spread over nodes (preferred), unless .Values.affinity says where they go. */}}
{{- define "nc.affinity" -}}
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
            matchLabels: {{- include "nc.selector" . | nindent 14 }}
{{- end }}
{{- end }}
