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
{{- define "acc.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
