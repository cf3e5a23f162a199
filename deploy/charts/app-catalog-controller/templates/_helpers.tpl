{{- define "acc.name" -}}{{ .Release.Name }}{{- end }}
{{- define "acc.apiserver" -}}{{ .Release.Name }}-apiserver{{- end }}
{{- define "acc.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end }}
{{- define "acc.labels" -}}
app.kubernetes.io/name: app-catalog-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: flotilla
{{- end }}
{{/* Selectors name the component: the controller's and the apiserver's pods share all other labels. */}}
{{- define "acc.componentSelector" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: app-catalog-controller
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}
{{- define "acc.selector" -}}{{ include "acc.componentSelector" (list . "controller") }}{{- end }}
{{- define "acc.apiserver.selector" -}}{{ include "acc.componentSelector" (list . "apiserver") }}{{- end }}
{{/* (list . component): placement of a component's pods; replicas spread over nodes (preferred)
unless .Values.affinity says where they go. */}}
{{- define "acc.scheduling" -}}
{{- $ctx := index . 0 -}}
{{- with $ctx.Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $ctx.Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $ctx.Values.affinity }}
  {{- toYaml $ctx.Values.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {{- include "acc.componentSelector" . | nindent 14 }}
{{- end }}
{{- end }}

{{/* The namespaces whose Secrets catalog sources may name, comma-separated. */}}
{{- define "acc.catalogSecretNamespaces" -}}
{{- join "," (default (list .Release.Namespace) .Values.catalogSecrets.namespaces) -}}
{{- end }}
