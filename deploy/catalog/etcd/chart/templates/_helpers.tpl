{{/*
The objects' names are fixed, not derived from the release: the cluster-controller finds a
tenant's etcd by them (Service etcd, Secrets etcd-ca and etcd-client; docs/operations.md), so a
namespace holds one such etcd. A second release fails to install, naming the object it would
have taken over.
*/}}

{{/* Labels of every object of the release. */}}
{{- define "etcd.labels" -}}
app.kubernetes.io/name: etcd
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/* Labels selecting the etcd members. */}}
{{- define "etcd.selector" -}}
app.kubernetes.io/name: etcd
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/* The image, never the customer's choice: the etcd release kubeadm pairs with this Kubernetes
line, the catalog's own build (deploy/catalog/etcd/image.yaml), from the registry the platform
sets (flotilla.registry, its mirror), by the digest a release pinned. */}}
{{- define "etcd.image" -}}
{{- $tag := "3.7.0" }}
{{- $repository := printf "%s/catalog-images/etcd" (.Values.flotilla.registry | default "ghcr.io/flotilla-dev") }}
{{- with index (.Values.flotilla.imageDigests | default dict) $tag }}{{ $repository }}:{{ $tag }}@{{ . }}{{ else }}{{ $repository }}:{{ $tag }}{{ end }}
{{- end }}

{{/* The peers' stable names (the headless Service's domain). */}}
{{- define "etcd.peers" -}}
{{- printf "etcd-peers.%s.svc" .Release.Namespace }}
{{- end }}

{{/* --initial-cluster: every member by its peer URL. */}}
{{- define "etcd.initialCluster" -}}
{{- $peers := include "etcd.peers" . }}
{{- $members := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $members = append $members (printf "etcd-%d=https://etcd-%d.%s:2380" $i $i $peers) }}
{{- end }}
{{- join "," $members }}
{{- end }}

{{/* The client-TLS flags etcdctl needs, as the root user (the etcd-client Secret). */}}
{{- define "etcd.etcdctl" -}}
- --endpoints=https://etcd.{{ .Release.Namespace }}.svc:2379
- --cacert=/etc/etcd/client/ca.crt
- --cert=/etc/etcd/client/tls.crt
- --key=/etc/etcd/client/tls.key
- --dial-timeout=5s
- --command-timeout=10s
{{- end }}

{{/* Bytes of a size in Mi or Gi (the schema admits no other form). */}}
{{- define "etcd.bytes" -}}
{{- $s := toString . }}
{{- if hasSuffix "Gi" $s }}
{{- mul (trimSuffix "Gi" $s | int64) 1073741824 }}
{{- else if hasSuffix "Mi" $s }}
{{- mul (trimSuffix "Mi" $s | int64) 1048576 }}
{{- else }}
{{- fail (printf "quotaBackendBytes %q is not a size in Mi or Gi" $s) }}
{{- end }}
{{- end }}

{{/* A container running one etcdctl command as the root user; dict: root (the chart's context), args. */}}
{{- define "etcd.etcdctlContainer" -}}
image: {{ include "etcd.image" .root }}
imagePullPolicy: IfNotPresent
command: ["/usr/local/bin/etcdctl"]
args:
  {{- include "etcd.etcdctl" .root | nindent 2 }}
  {{- range .args }}
  - {{ . }}
  {{- end }}
resources:
  requests:
    cpu: 10m
    memory: 32Mi
  limits:
    memory: 64Mi
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
volumeMounts:
  - name: client
    mountPath: /etc/etcd/client
    readOnly: true
{{- end }}
