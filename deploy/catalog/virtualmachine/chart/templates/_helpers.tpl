{{/* Labels of every object of the release. */}}
{{- define "vm.labels" -}}
app.kubernetes.io/name: virtualmachine
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/* The root disk's source of an OS: chosen here, never by the customer. */}}
{{- define "vm.diskURL" -}}
{{- $urls := dict
  "ubuntu-24.04" "docker://quay.io/containerdisks/ubuntu:24.04"
  "debian-12" "docker://quay.io/containerdisks/debian:12"
  "fedora-41" "docker://quay.io/containerdisks/fedora:41" }}
{{- index $urls .Values.os | required (printf "unsupported OS %q" .Values.os) }}
{{- end }}
