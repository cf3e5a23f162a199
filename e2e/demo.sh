#!/usr/bin/env bash
# demo.sh up|down: the Flotilla platform on a local control plane. `make demo` / `make demo-down`.
#
# up:   builds what is missing (control-plane and Flux binaries into $FLOTILLA_CACHE, controllers
#       into .local/bin): first the core (the control plane, the tenant-controller and the app
#       catalog), which starts at once and answers kubectl while the other parts build in the
#       background, each starting when its build is done (`stages` below). It starts etcd +
#       kube-apiserver + kube-controller-manager, the real Flux
#       source-controller and helm-controller and a loopback Helm repository of the starter
#       catalog's charts (state in .local/), installs CRDs, webhooks and tenant roles, runs every
#       controller and the apps apiserver as its own process, and the LINSTOR test double (with a
#       Node per satellite) for the storage-controller, OVN for the net-controller, kube-scheduler
#       with the storage-controller's extender, Cluster API's real core manager and kubeadm
#       bootstrap provider with the local provider stand-in (Kamaji + KubeVirt) for the
#       cluster-controller, applies the starter catalog and deploy/examples/ and waits for Ready:
#       the tenant tree, a Postgres in tenant acme, the storage policies, the tenant subnets and
#       two tenants' networks; then acme orders a Kubernetes cluster and lists its nodes. As root, a
#       real node joins last; the catalog's images go into its registry and acme's Redis "sessions"
#       runs on it, on a volume of the node's disk, and answers PING.
# down: stops the controllers and the control plane; the state stays in .local/.
#
# FLOTILLA_STATE moves the state directory, FLOTILLA_PORT_BASE the local ports (19443: the
# tenant-controller's webhook, +1: the apps apiserver, +2: the Helm repository, +3: the
# storage-controller's webhooks, +4: the LINSTOR test double, +5: the storage-controller's
# kube-scheduler extender, +6: the Cluster API manager's webhooks, +7: the kubeadm bootstrap
# provider's webhooks, +8: the usage-api, +9: VictoriaMetrics, +10: kube-scheduler's metrics, +11/+12:
# kube-state-metrics' metrics and telemetry, +13: Flux's artifacts), so that a second demo (the e2e test's) can run beside yours. OVN's
# databases listen on unix sockets in a temporary directory; the customers' API servers (the
# local provider stand-in's) on free loopback ports kept in .local/local-provider/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
state=${FLOTILLA_STATE:-$root/.local}
mkdir -p "$state/bin" "$state/logs"
services=(tenant-controller app-catalog-controller storage-controller net-controller cluster-controller)
# What the cluster-controller's clusters are made by: Cluster API's real managers and the local
# provider stand-in for Kamaji and KubeVirt (nothing here runs pods or VMs).
capi_processes=(cluster-api-manager kubeadm-bootstrap-manager local-provider)
# What usage reports are made of: VictoriaMetrics scraping kube-scheduler's /metrics/resources and
# kube-state-metrics, and the usage-api answering from it.
usage_processes=(victoria-metrics kube-state-metrics usage-api)
base=${FLOTILLA_PORT_BASE:-19443}
# The storage-controller's Service's address in the node's Service range, for kube-scheduler (with a node).
extender_service_ip=11
# The label of the Nodes the demo makes by hand, which no kubelet runs.
stand_in_node=node.flotilla.dev/stand-in
webhook_port=$base apps_port=$((base + 1)) charts_port=$((base + 2)) linstor_port=$((base + 4)) extender_port=$((base + 5))
usage_port=$((base + 8)) vm_port=$((base + 9)) scheduler_metrics_port=$((base + 10)) ksm_port=$((base + 11))
# The demo scrapes every 10 s (a platform: every minute), so a report has figures within a minute.
usage_resolution=10s
# Each service with an admission webhook serves it on a port of its own.
declare -A webhook_ports=([tenant-controller]=$webhook_port [storage-controller]=$((base + 3)))
# Where each customer cluster's cloud-controller-manager, CSI controller and autoscaler run.
infra_ns=flotilla-cluster-infra
# Flags of the services beyond the common ones (the storage-controller's and the net-controller's
# once the control plane says where its stand-ins are). The cluster-controller's add-on charts come
# from the demo's Helm repository (below).
declare -A service_flags=([cluster-controller]="--addons-repository=http://127.0.0.1:$charts_port --infra-namespace=$infra_ns")
# The LINSTOR test double's satellites; the demo makes a Node of each.
linstor_nodes=node-1=zone-a,node-2=zone-a,node-3=zone-b,node-4=zone-b
cnpg=github.com/cloudnative-pg/cloudnative-pg@v1.27.1 # the Postgres chart's Cluster CRD
kubeovn=github.com/kubeovn/kube-ovn@v1.16.2             # Kube-OVN's Subnet CRD, for the net-controller
capi=sigs.k8s.io/cluster-api@v1.13.6                     # Cluster API's CRDs (core and kubeadm bootstrap), for the cluster-controller
capk=sigs.k8s.io/cluster-api-provider-kubevirt@v0.11.2   # CAPK's KubevirtCluster and KubevirtMachine(Template) CRDs
# The Cluster API contract labels the providers' kustomizations put on their CRDs (CRD=label=version).
contract_labels=(
  kubevirtclusters.infrastructure.cluster.x-k8s.io=cluster.x-k8s.io/v1beta1=v1alpha1
  kubevirtmachines.infrastructure.cluster.x-k8s.io=cluster.x-k8s.io/v1beta1=v1alpha1
  kubevirtmachinetemplates.infrastructure.cluster.x-k8s.io=cluster.x-k8s.io/v1beta1=v1alpha1
  kamajicontrolplanes.controlplane.cluster.x-k8s.io=cluster.x-k8s.io/v1beta2=v1alpha2
  kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io=cluster.x-k8s.io/v1beta2=v1beta2
  kubeadmconfigs.bootstrap.cluster.x-k8s.io=cluster.x-k8s.io/v1beta2=v1beta2
)
# kubectl's discovery cache of this control plane, so a previous one on the same port cannot
# stand in for it.
export KUBECACHEDIR=$state/kube-cache
say() { printf '\033[1m>> %s\033[0m\n' "$*"; }

# apply_retrying FILE|DIR TRIES [ON-FAILURE]: kubectl apply until it succeeds, every half second.
apply_retrying() {
  local out
  for i in $(seq "$2"); do
    if out=$(kubectl apply -f "$1" 2>&1); then return; fi
    sleep 0.5
  done
  echo "$out"
  ${3:-true}
  exit 1
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Each process is started as the leader of its own process group (setsid), so that stopping it
# also stops what it started (etcd, kube-apiserver, …) even if it does not exit cleanly.
stop() { # pidfile
  alive "$1" || { rm -f "$1"; return 0; }
  local pid; pid=$(cat "$1"); kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$1"
}

# run_bg NAME COMMAND...: (re)starts COMMAND as process NAME, logging to logs/NAME.log.
run_bg() {
  local name=$1; shift
  stop "$state/$name.pid"
  setsid nohup "$@" > "$state/logs/$name.log" 2>&1 &
  echo $! > "$state/$name.pid"
}

# What the demo builds: the core first (the control plane, the tenants and the app catalog), then,
# in the background while the core runs, each part in the order the demo shows it; a part starts
# once its stage is built. kube-controller-manager comes first, while the core starts: the app
# catalog waits for it (it aggregates the tenants' delivery role). An item is a binary of libs/builder/binaries.txt
# or NAME=PACKAGE, a program of this repository built into .local/bin/NAME.
core=(kube-apiserver etcd kubectl localcp=./libs/testenv/cmd/localcp
  tenant-controller=./services/tenant-controller/cmd app-catalog-controller=./services/app-catalog-controller/cmd
  apps-apiserver=./services/app-catalog-controller/cmd/apiserver)
stages=(
  "controller-manager: kube-controller-manager"
  "flux: helm source-controller helm-controller"
  "storage: kube-scheduler storage-controller=./services/storage-controller/cmd linstor-double=./services/storage-controller/internal/linstordouble/cmd/linstor-double"
  "net: net-controller=./services/net-controller/cmd net-agent=./services/net-controller/cmd/agent"
  "cluster: cluster-api-manager kubeadm-bootstrap-manager cluster-controller=./services/cluster-controller/cmd local-provider=./services/cluster-controller/cmd/local-provider"
  "usage: victoria-metrics kube-state-metrics usage-api=./services/usage-api/cmd"
  "node: kubelet kube-proxy containerd containerd-shim-runc-v2 cni-ptp cni-host-local cni-loopback registry coredns kube-router local-path-provisioner kustomize-controller release=./libs/release/cmd/release"
)

# build_items ITEM...: the builder's binaries in one build.sh call, then this repository's programs
# with the flags of `make release` (libs/release), so that one compilation of a package serves both,
# and the builder's too (libs/builder/align.sh).
build_items() {
  local tools=() i
  for i in "$@"; do [[ $i == *=* ]] || tools+=("$i"); done
  [[ ${#tools[@]} -eq 0 ]] || libs/builder/build.sh "${tools[@]}" >/dev/null
  for i in "$@"; do
    [[ $i != *=* ]] || CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$state/bin/${i%%=*}" "${i#*=}"
  done
}

# build_stages: `demo.sh build`, run by up in the background: builds each stage in order and marks
# it done in .local/built/STAGE (with the seconds it took).
build_stages() {
  mkdir -p "$state/built"
  local s t0
  for s in "${stages[@]}"; do
    t0=$SECONDS
    echo ">> building ${s%%:*}"
    # shellcheck disable=SC2086 # a stage's items
    build_items ${s#*:}
    echo $((SECONDS - t0)) > "$state/built/${s%%:*}"
  done
}

# building: "; still building: …" for the stages not built yet (nothing once all are).
building() {
  local left=() s
  for s in "${stages[@]}"; do [[ -f $state/built/${s%%:*} ]] || left+=("${s%%:*}"); done
  [[ ${#left[@]} -eq 0 ]] || echo "; still building: ${left[*]}"
}

# built STAGE: waits until the background build has built STAGE, saying so every minute.
built() {
  local said=$SECONDS
  until [[ -f $state/built/$1 ]]; do
    if ! alive "$state/build.pid" && [[ ! -f $state/built/$1 ]]; then
      tail -30 "$state/logs/build.log"
      echo "building $1 failed (.local/logs/build.log)"
      exit 1
    fi
    if (( SECONDS - said >= 60 )); then
      say "waiting for $1 to be built ($((SECONDS - start))s since \`make demo\`$(building))"
      said=$SECONDS
    fi
    sleep 1
  done
}

# await STAGE: built STAGE, starting every part built meanwhile.
await() {
  join
  built "$1"
  join
}

# start_service NAME: (re)starts one of the services, with its webhook server if it has one.
start_service() {
  local s=$1 webhook=(--webhook-port=0)
  say "starting $s"
  [[ -f deploy/charts/$s/files/manifests.yaml ]] && webhook=(--webhook-port="${webhook_ports[$s]}" --webhook-cert-dir="$WEBHOOK_CERT_DIR")
  # shellcheck disable=SC2086 # service_flags holds several flags
  run_bg "$s" "$state/bin/$s" --metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:0 \
    --leader-elect --leader-election-namespace=flotilla-system "${webhook[@]}" ${service_flags[$s]:-} --zap-devel
}

down() {
  for s in build "${services[@]}" "${capi_processes[@]}" "${usage_processes[@]}" apps-apiserver linstor-double net-agent node-netns; do stop "$state/$s.pid"; done
  stop "$state/localcp.pid"
  say "stopped (state kept in .local/; rm -rf .local to start afresh)"
}

usage_api() {
  local scrape=$state/victoria-metrics-scrape.yaml
  cat > "$scrape" <<YAML
global: {scrape_interval: $usage_resolution}
scrape_configs:
  - job_name: kube-scheduler
    scheme: https
    tls_config: {insecure_skip_verify: true}
    metrics_path: /metrics/resources
    static_configs: [{targets: ["127.0.0.1:$scheduler_metrics_port"]}]
  - job_name: kube-state-metrics
    static_configs: [{targets: ["127.0.0.1:$ksm_port"]}]
YAML
  say "starting VictoriaMetrics (real, built from the module proxy) scraping kube-scheduler's /metrics/resources and kube-state-metrics every $usage_resolution"
  run_bg victoria-metrics "$bin/victoria-metrics" -storageDataPath="$state/victoria-metrics" -httpListenAddr="$stand_ins:$vm_port" \
    -retentionPeriod=1y -search.latencyOffset=0s -promscrape.config="$scrape" -loggerLevel=WARN
  run_bg kube-state-metrics "$bin/kube-state-metrics" --kubeconfig="$KUBECONFIG" --host=127.0.0.1 --port="$ksm_port" \
    --telemetry-host=127.0.0.1 --telemetry-port=$((base + 12)) --resources=pods,persistentvolumeclaims,persistentvolumes \
    --metric-labels-allowlist='pods=[app.kubernetes.io/instance],persistentvolumeclaims=[app.kubernetes.io/instance]' \
    --custom-resource-state-config-file="$PWD/deploy/charts/usage-api/files/kube-state-metrics/apps.yaml"
  say "starting the usage-api (usage.flotilla.dev, through kube-apiserver's aggregator)"
  run_bg usage-api "$state/bin/usage-api" --bind-address=127.0.0.1 --secure-port="$usage_port" \
    --cert-dir="$state/usage-api" --kubeconfig="$KUBECONFIG" \
    --authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" \
    --metrics-url="http://$stand_ins:$vm_port" --resolution=$usage_resolution --retention=8760h
}

# usage_report: what acme used since the demo started, asked from acme's viewer's seat, once the
# scrapes hold acme's database (within a minute).
usage_report() {
  say "usage: what acme used since the demo started (a UsageReport, from acme's viewer's seat)"
  kubectl wait apiservice v1alpha1.usage.flotilla.dev --for=condition=Available --timeout=120s >/dev/null
  local as_viewer=(kubectl --kubeconfig "$state/users/acme-viewer.kubeconfig" --cache-dir "$state/kube-cache-acme-viewer")
  local since report
  since=$(date -u -d "@$(( $(date +%s) - SECONDS + start - 60 ))" +%Y-%m-%dT%H:%M:%SZ)
  for _ in $(seq 60); do
    cat > "$state/usagereport.yaml" <<YAML
apiVersion: usage.flotilla.dev/v1alpha1
kind: UsageReport
metadata: {namespace: tenant-acme}
spec: {startTimestamp: "$since", endTimestamp: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
YAML
    report=$("${as_viewer[@]}" create -f "$state/usagereport.yaml" -o yaml 2>&1 || true)
    grep -q 'name: orders' <<<"$report" && grep -q 'storageClassName: replicated' <<<"$report" && break
    sleep 2
  done
  echo "  \$ kubectl create -f $state/usagereport.yaml -o yaml   # as acme-viewer"
  sed -n '/^report:/,/^spec:/p' <<<"$report" | sed '$d' | sed 's/^/    /'
  echo
}

# node_pod NAME NAMESPACE IMAGE COMMAND [ENV] [SECRET]: a restricted pod on the real node from IMAGE
# (a catalog app's, which runs as its own non-root user). COMMAND is a script for its /bin/sh, or a
# command as a YAML list; ENV its container's env, a YAML list; SECRET a Secret mounted at /tls.
# RESTART=OnFailure runs the command until it succeeds (Never by default).
node_pod() {
  local command="[/bin/sh, -c, '$4']"
  [[ $4 == \[* ]] && command=$4
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $2}
spec:
  nodeSelector: {kubernetes.io/hostname: $name}
  restartPolicy: ${RESTART:-Never}
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: main
      image: $3
      command: $command
      env: ${5:-[]}
      resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [${6:+{name: tls, mountPath: /tls, readOnly: true\}}]
  volumes: [${6:+{name: tls, secret: {secretName: $6\}\}}]
---
YAML
}

# pod_output NAMESPACE POD: what a pod of node_pod printed, once it ended (at most 2 minutes); the
# pod is then deleted.
pod_output() {
  for _ in $(seq 120); do
    case $(kubectl get -n "$1" "pod/$2" -o jsonpath='{.status.phase}') in Succeeded | Failed) break ;; esac
    sleep 1
  done
  kubectl logs -n "$1" "$2" 2>&1
  kubectl delete -n "$1" "pod/$2" --wait=false >/dev/null
}

# claims: a tenant's Ingresses and Services claim only what is its own (the tenant-controller
# chart's admission policy flotilla-tenant-claims, in kube-apiserver).
claims() {
  say "a tenant claims only its own host names and addresses"
  echo "  \$ kubectl create ingress shop -n tenant-acme --rule=shop.beta.example.org/=web:80   # as acme's admin"
  "${as_acme[@]}" create ingress shop -n tenant-acme --rule='shop.beta.example.org/=web:80' 2>&1 | sed 's/^/    /' || true
  echo "  \$ kubectl create ingress shop -n tenant-acme --rule=shop.acme.example.org/=web:80"
  "${as_acme[@]}" create ingress shop -n tenant-acme --rule='shop.acme.example.org/=web:80' 2>&1 | sed 's/^/    /'
  "${as_acme[@]}" delete ingress shop -n tenant-acme >/dev/null
  echo "  \$ kubectl create service nodeport web -n tenant-acme --tcp=80"
  "${as_acme[@]}" create service nodeport web -n tenant-acme --tcp=80 2>&1 | sed 's/^/    /' || true
  echo
}

# real_node: the real node localcp starts once its stage is built (root only), and what it runs.
real_node() {
  if [[ $EUID -ne 0 ]]; then
    say "a real node: skipped (kubelet and containerd need root)"
    return
  fi
  await node
  local name
  name=worker-$(cat "$state/node-index")
  say "a real node: $name (kubelet, containerd with runc, kube-proxy, kube-router's NetworkPolicies, CoreDNS; images from its registry only)"
  kubectl wait --for=create "node/$name" --timeout=120s >/dev/null
  kubectl wait --for=condition=Ready "node/$name" --timeout=180s >/dev/null
  kubectl rollout status -n kube-system daemonset/coredns --timeout=180s >/dev/null
  kubectl get node "$name" -o wide
  kubectl get pods -n kube-system -o wide
  echo
  platform_pods
  say "acme's Redis on the real node: its image built here from Debian's packages (in the release), its volume on the node's disk"
  "${as_acme[@]}" apply -f - <<'YAML'
apiVersion: apps.flotilla.dev/v1alpha1
kind: Redis
metadata: {name: sessions, namespace: tenant-acme}
spec: {storage: {storageClass: local-path}}
YAML
  local release
  release=$(kubectl get helmreleases -A -l apps.flotilla.dev/kind=Redis,apps.flotilla.dev/name=sessions -o jsonpath='{.items[0].spec.releaseName}')
  # Ready once its server answers (its definition waits for its pods).
  "${as_acme[@]}" wait -n tenant-acme redis/sessions --for=condition=Ready --timeout=300s >/dev/null
  "${as_acme[@]}" get -n tenant-acme redis/sessions
  kubectl get -n tenant-acme "pod/$release-0" "pvc/data-$release-0" -o wide
  echo "  \$ kubectl exec -n tenant-acme $release-0 -- redis-cli ping   # as acme's admin"
  "${as_acme[@]}" exec -n tenant-acme "$release-0" -- redis-cli ping 2>&1 | sed 's/^/    /'
  echo
  isolation "$release"
  postgres_on_node
  etcd_on_node
  say "an app whose pods cannot be created is not Ready, and says why: acme orders a Redis asking for more CPU than its namespace's LimitRange allows a container"
  "${as_acme[@]}" apply -f - <<'YAML'
apiVersion: apps.flotilla.dev/v1alpha1
kind: Redis
metadata: {name: toobig, namespace: tenant-acme}
spec: {storage: {storageClass: local-path}, resources: {cpu: "8"}, volumePolicy: Delete}
YAML
  "${as_acme[@]}" wait -n tenant-acme redis/toobig --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=PodsCannotStart --timeout=120s >/dev/null || true
  "${as_acme[@]}" get -n tenant-acme redis/toobig
  echo "  \$ kubectl get -n tenant-acme redis/toobig -o jsonpath='{.status.message}'   # as acme's admin"
  "${as_acme[@]}" get -n tenant-acme redis/toobig -o jsonpath='{.status.message}{"\n"}' | sed 's/^/    /'
  "${as_acme[@]}" delete -n tenant-acme redis/toobig --wait=false >/dev/null
  echo
}

# etcd_on_node: acme's administrator orders an etcd (one member, its volume on the node's disk);
# it is Ready once its member is, and a pod of acme's asks it over TLS with the client certificate
# the chart hands acme's namespace (the Secret etcd-client, named in the app's status). The image
# has no shell: the pod runs etcdctl alone, restarted until it is answered (a new pod's packets
# pass a moment after kube-router has seen it).
etcd_on_node() {
  local image
  say "acme's etcd on the real node: etcd from the catalog's image (built here from its Go module), answering over TLS"
  "${as_acme[@]}" apply -f - <<'YAML'
apiVersion: apps.flotilla.dev/v1alpha1
kind: Etcd
metadata: {name: etcd, namespace: tenant-acme}
spec: {replicas: 1, storage: {storageClass: local-path}, volumePolicy: Delete}
YAML
  "${as_acme[@]}" wait -n tenant-acme etcd/etcd --for=condition=Ready --timeout=300s >/dev/null
  "${as_acme[@]}" get -n tenant-acme etcd/etcd -o wide
  image=$(kubectl get -n tenant-acme pod/etcd-0 -o jsonpath='{.spec.containers[0].image}')
  echo "  acme's pod runs etcdctl endpoint health with the client certificate in the Secret etcd-client:"
  RESTART=OnFailure node_pod etcd-client tenant-acme "$image" '[/usr/local/bin/etcdctl, --endpoints=https://etcd.tenant-acme.svc:2379,
        --cacert=/tls/ca.crt, --cert=/tls/tls.crt, --key=/tls/tls.key, --dial-timeout=3s, --command-timeout=5s, endpoint, health]' \
    '[]' etcd-client | "${as_acme[@]}" apply -f - >/dev/null
  printf '    tenant-acme/etcd-client: %s\n' "$(pod_output tenant-acme etcd-client 2>&1 | grep -v '^{' | tail -1)"
  "${as_acme[@]}" delete -n tenant-acme etcd/etcd --wait=false >/dev/null
  echo
}

# postgres_on_node: acme's Postgres "orders" runs on the real node. CloudNativePG's operator (built
# here, in the release; installed by Flux from the release's GitOps tree, flotilla-operators) runs
# PostgreSQL 15 of the catalog's image (Debian's packages). A pod of acme's connects with the
# credentials the operator hands acme's namespace; beta's gets no answer.
postgres_on_node() {
  local release image
  say "acme's Postgres \"orders\" runs on the real node: PostgreSQL 15 from Debian's packages, run by CloudNativePG's operator (both built here, in the release)"
  # Flux installs the operator from the release's GitOps tree (Kustomization flotilla-operators).
  kubectl wait -n flux-system kustomization/flotilla-operators --for=condition=Ready --timeout=300s >/dev/null
  # The operator's webhooks answer once it has made their certificate; an order before that fails.
  for _ in $(seq 60); do
    kubectl create --dry-run=server -f - >/dev/null 2>&1 <<'YAML' && break
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: probe, namespace: cnpg-system}
spec: {instances: 1, storage: {size: 1Gi}}
YAML
    sleep 2
  done
  # acme's Postgres "orders" (deploy/examples/apps/postgres.yaml, two instances) now runs.
  release=$(kubectl get helmreleases -A -l apps.flotilla.dev/kind=Postgres,apps.flotilla.dev/name=orders -o jsonpath='{.items[0].spec.releaseName}')
  for i in 1 2; do
    kubectl wait -n tenant-acme --for=create "pod/$release-$i" --timeout=240s >/dev/null
    kubectl wait -n tenant-acme --for=condition=Ready "pod/$release-$i" --timeout=240s >/dev/null
  done
  kubectl wait -n tenant-acme "clusters.postgresql.cnpg.io/$release" --for=condition=Ready --timeout=120s >/dev/null
  "${as_acme[@]}" wait -n tenant-acme postgres/orders --for=condition=Ready --timeout=60s >/dev/null
  "${as_acme[@]}" get -n tenant-acme postgres/orders -o wide
  kubectl get -n tenant-acme "pod/$release-1" "pod/$release-2" "pvc/$release-1" "pvc/$release-2" -o wide
  image=$(kubectl get -n tenant-acme "pod/$release-1" -o jsonpath='{.spec.containers[0].image}')
  echo "  acme's pod runs psql with the URI in the Secret $release-app (the operator's, named in the app's status):"
  # A new pod's packets pass a moment after kube-proxy and kube-router have seen the Service's
  # endpoint and the pod: each pod tries for 20 s (as the README's commands do).
  node_pod orders-client tenant-acme "$image" \
    'i=0; until echo select 1 | psql $DATABASE_URL -tA 2>/dev/null; do i=$((i+1)); [ $i -lt 20 ] || { echo select 1 | psql $DATABASE_URL -tA; exit 1; }; busybox sleep 1; done' \
    "[{name: DATABASE_URL, valueFrom: {secretKeyRef: {name: $release-app, key: uri}}}, {name: PGCONNECT_TIMEOUT, value: \"3\"}]" |
    "${as_acme[@]}" apply -f - >/dev/null
  printf '    tenant-acme/orders-client: %s\n' "$(pod_output tenant-acme orders-client | tr '\n' ' ')"
  echo "  beta's pod asks the same server whether it accepts connections:"
  node_pod orders-probe tenant-beta "$image" \
    "i=0; until pg_isready -q -t 1 -h $release-rw.tenant-acme.svc; do i=\$((i+1)); [ \$i -lt 20 ] || exec pg_isready -t 1 -h $release-rw.tenant-acme.svc; busybox sleep 1; done" |
    kubectl apply -f - >/dev/null
  printf '    tenant-beta/orders-probe: %s\n' "$(pod_output tenant-beta orders-probe | tr '\n' ' ')"
  echo
}

# isolation RELEASE: tenant isolation proven on packets. The tenant-controller's NetworkPolicies
# (enforced on the node by kube-router) let into a tenant's namespace its own pods, its ancestors',
# its descendants' and the platform's, never a sibling subtree's nor one outside the tenants. A pod
# of each tenant at every depth, of the platform's namespace and of one outside the tenants
# tries acme's Redis (RELEASE, through its Service's name) and a server in acme's child dev (by
# its address) for 20 s; whether one answered is printed.
isolation() {
  local release=$1 image dev_ip t from
  image=$(kubectl get -n tenant-acme "pod/$release-0" -o jsonpath='{.spec.containers[0].image}')
  say "tenant isolation on packets: who reaches acme's Redis and a server in acme's child dev (pods on $name)"
  # The node is in a zone, as beta's SchedulingClass (two-zones) wants of its pods' nodes.
  kubectl label --overwrite node "$name" topology.kubernetes.io/zone=zone-a >/dev/null
  node_pod isolation-server tenant-acme-dev "$image" 'exec redis-server --port 6379 --protected-mode no --save ""' | kubectl apply -f - >/dev/null
  kubectl wait -n tenant-acme-dev pod/isolation-server --for=condition=Ready --timeout=120s >/dev/null
  dev_ip=$(kubectl get -n tenant-acme-dev pod/isolation-server -o jsonpath='{.status.podIP}')
  # kube-router lets a new pod's packets in once it has seen the pod: each target is tried every
  # second for 20 s, in parallel; its first answer, or the last refusal, is what the pod says.
  local try='try() { i=0; while [ $i -lt 20 ]; do r=$(busybox timeout 3 redis-cli -h $1 ping 2>&1); case $r in *NOAUTH*|*PONG*) break;; esac; i=$((i+1)); busybox sleep 1; done; echo "$1: $r"; }; '
  try+="try $release.tenant-acme.svc & try $dev_ip & wait"
  # Each tenant at every depth, the platform's namespace and one outside any tenant.
  local namespaces=(tenant-root tenant-acme tenant-acme-dev tenant-beta flotilla-system default)
  for from in "${namespaces[@]}"; do node_pod isolation-client "$from" "$image" "$try"; done | kubectl apply -f - >/dev/null
  printf '  %-18s %-22s %s\n' FROM "ACME'S REDIS" "DEV'S SERVER"
  for from in "${namespaces[@]}"; do
    local out answers=()
    out=$(pod_output "$from" isolation-client)
    for t in "$release.tenant-acme.svc" "$dev_ip"; do
      t=$(grep -m1 "^$t: " <<<"$out" | sed "s/^$t: //")
      case $t in *NOAUTH* | *PONG*) answers+=("reached") ;; *) answers+=("refused") ;; esac
    done
    printf '  %-18s %-22s %s\n' "$from" "${answers[0]}" "${answers[1]}"
  done
  kubectl delete -n tenant-acme-dev pod/isolation-server --wait=false >/dev/null
  echo "  (reached: Redis answered, NOAUTH or PONG; refused: no answer for 20 s; flotilla-system is the platform's, default no tenant's)"
  echo
}

# platform_pods: the platform moves onto the real node, installed as a provider installs it: `make
# release` builds its images, charts and GitOps artifact into the node's registry, and Flux's
# kustomize-controller applies the release's ./platform (deploy/flux/platform) with the demo's
# settings as patches: the stand-ins' addresses on the machine's end of the node's link, one
# replica each on the real node (not the Nodes the demo makes by hand), the registry's plain HTTP. The controllers' processes hand over to their pods: they
# stop, what localcp pointed at them (webhook configurations, APIServices) goes, and what it
# applied from the charts (tenant roles, policies) is adopted by the charts' releases. A demo
# started again (localcp wires the processes anew; they wait for the pods' leases) comes back to
# the pods by a forced upgrade of the releases.
platform_pods() {
  local t0=$SECONDS out version cache=${FLOTILLA_CACHE:-$HOME/.cache/flotilla} rendered
  # The address kube-scheduler asks the extender at (localcp's {service-ip:N}).
  local extender_service=SERVICE_IP_$extender_service_ip
  extender_service=${!extender_service}
  say "the platform from its own release, as pods on $name: \`make release\` into the node's registry ($NODE_REGISTRY/flotilla)"
  mkdir -p "$state/release"
  out=$("$state/bin/release" build -platforms "linux/$(go env GOARCH)" -registry "$NODE_REGISTRY/flotilla" -insecure \
    -out "$state/release/bundle" -work "$cache/release-work" 2> "$state/logs/release.log") ||
    { tail -20 "$state/logs/release.log"; echo "building the release failed"; exit 1; }
  version=$(sed -n 's|^flux/flotilla:\([^ ]*\) .*|\1|p' <<<"$out")
  echo "  release $version: $(wc -l <<<"$out") artifacts, built and pushed in $((SECONDS - t0))s"
  local release_built=$SECONDS

  say "handing over: the controllers' processes stop; Flux installs their releases from the registry"
  for s in usage-api apps-apiserver "${services[@]}"; do stop "$state/$s.pid"; done
  for s in "${services[@]}" usage-api; do
    rendered=$state/release/$s.yaml
    helm template "$s" "deploy/charts/$s" --namespace flotilla-system --skip-crds > "$rendered"
    kubectl get -f "$rendered" --ignore-not-found -o jsonpath='{range .items[*]}{.kind} {.metadata.name} {.metadata.namespace}{"\n"}{end}' |
      while read -r kind obj ns; do
        case $kind in
          ValidatingWebhookConfiguration | MutatingWebhookConfiguration | APIService) kubectl delete "$kind" "$obj" >/dev/null ;;
          *)
            kubectl annotate --overwrite "$kind" "$obj" ${ns:+-n "$ns"} meta.helm.sh/release-name="$s" meta.helm.sh/release-namespace=flotilla-system >/dev/null
            kubectl label --overwrite "$kind" "$obj" ${ns:+-n "$ns"} app.kubernetes.io/managed-by=Helm >/dev/null ;;
        esac
      done
  done
  # localcp's ExternalName Services for the aggregated servers' processes.
  kubectl delete -n flotilla-system services apps-flotilla-dev usage-flotilla-dev --ignore-not-found >/dev/null
  # What `flux install` makes: the ServiceAccount the platform's releases install as.
  kubectl create serviceaccount -n flux-system helm-controller --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl create clusterrolebinding flux-helm-controller --clusterrole=cluster-admin --serviceaccount=flux-system:helm-controller \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # A demo started again: the releases exist, and localcp wired the processes anew; a forced
  # upgrade (Flux's forceAt) puts the releases' objects back.
  local now again; now=$(date +%s) again=$(kubectl get -n flux-system helmreleases -o name)
  kubectl annotate -n flux-system helmreleases --all --overwrite reconcile.fluxcd.io/requestedAt="$now" reconcile.fluxcd.io/forceAt="$now" >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: flotilla, namespace: flux-system}
spec:
  interval: 10m
  url: oci://$NODE_REGISTRY/flotilla/flux/flotilla
  ref: {tag: "$version"}
  insecure: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flotilla-platform, namespace: flux-system}
spec:
  interval: 10m
  retryInterval: 30s
  timeout: 5m
  sourceRef: {kind: OCIRepository, name: flotilla}
  path: ./platform
  prune: true
  wait: true
  postBuild:
    substitute: {FLOTILLA_REGISTRY: "$NODE_REGISTRY/flotilla", FLOTILLA_VERSION: "$version"}
  patches:
    - target: {kind: HelmRepository}
      patch: '[{"op": "add", "path": "/spec/insecure", "value": true}]'
    - target: {kind: OCIRepository}
      patch: '[{"op": "add", "path": "/spec/insecure", "value": true}]'
    - target: {kind: HelmRelease}
      patch: |
        - {op: replace, path: /spec/values/replicas, value: 1}
        - {op: add, path: /spec/values/nodeSelector, value: {kubernetes.io/hostname: $name}}
    - target: {kind: HelmRelease, name: app-catalog-controller}
      patch: '[{"op": "replace", "path": "/spec/values/apiserver/replicas", "value": 1}]'
    - target: {kind: HelmRelease, name: storage-controller}
      patch: |
        - {op: replace, path: /spec/values/linstor, value: {endpoint: "http://$stand_ins:$linstor_port", pollInterval: 5s}}
        - {op: add, path: /spec/values/service, value: {clusterIP: "$extender_service"}}
    - target: {kind: HelmRelease, name: net-controller}
      patch: |
        - {op: replace, path: /spec/values/ovn/northbound, value: "$OVN_NB_NODE"}
        - {op: add, path: /spec/values/agent, value: {nodeSelector: {kubernetes.io/hostname: $name}}}
    - target: {kind: HelmRelease, name: cluster-controller}
      patch: '[{"op": "replace", "path": "/spec/values/clusters/addons/repository", "value": "http://127.0.0.1:$charts_port"}]'
    - target: {kind: HelmRelease, name: usage-api}
      patch: '[{"op": "add", "path": "/spec/values/usage", "value": {"metricsURL": "http://$stand_ins:$vm_port", "resolution": "$usage_resolution", "retention": "8760h"}}]'
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flotilla-operators, namespace: flux-system}
spec:
  interval: 10m
  retryInterval: 30s
  timeout: 5m
  sourceRef: {kind: OCIRepository, name: flotilla}
  path: ./operators
  prune: true
  wait: true
  postBuild:
    substitute: {FLOTILLA_REGISTRY: "$NODE_REGISTRY/flotilla"}
  # Their pods on the real node, not on the Nodes the demo makes by hand (PodNodeSelector).
  patches:
    - target: {kind: Namespace}
      patch: '[{"op": "add", "path": "/metadata/annotations/scheduler.alpha.kubernetes.io~1node-selector", "value": "kubernetes.io/hostname=$name"}]'
YAML
  local hr=(kubectl wait -n flux-system helmreleases --all --timeout=300s)
  # Releases Ready from before (a demo started again) are waited for once the forced upgrade is done.
  if ! { kubectl wait -n flux-system kustomization/flotilla-platform --for=condition=Ready --timeout=600s &&
    { [[ -z $again ]] || "${hr[@]}" --for=jsonpath='{.status.lastHandledForceAt}'="$now"; } &&
    "${hr[@]}" --for=condition=Ready &&
    # The aggregated APIs, their APIServices made anew, answer again once the aggregator has them.
    kubectl wait apiservice v1alpha1.apps.flotilla.dev v1alpha1.usage.flotilla.dev --for=condition=Available --timeout=120s; } >/dev/null; then
    kubectl get -n flux-system kustomizations,helmreleases,ocirepositories,helmrepositories || true
    kubectl get pods -n flotilla-system -o wide || true
    echo "the platform's releases did not become Ready"
    exit 1
  fi
  for _ in $(seq 240); do kubectl get --raw /apis/apps.flotilla.dev/v1alpha1/redises >/dev/null 2>&1 && break; sleep 0.5; done
  kubectl get -n flux-system helmreleases
  kubectl get pods -n flotilla-system -o wide
  echo "  their images, pulled by digest from the node's registry:"
  kubectl get pods -n flotilla-system -o jsonpath='{range .items[*]}{.status.containerStatuses[0].imageID}{"\n"}{end}' | sort -u | sed 's/^/    /'
  echo "  the platform runs as pods $((SECONDS - release_built))s after Flux was given the release (built in $((release_built - t0))s)"
  echo
}

# node_agent: the net-controller's node agent for node-1 (one of the Nodes the demo makes by hand),
# managing a network namespace of its own that has a second interface, as a multi-NIC server would;
# it applies the example RoutingPolicy there and reports in node-1's NodeRouting. Needs root (a veth
# into the namespace) and iproute2; skipped otherwise.
node_agent() {
  if [[ $EUID -ne 0 ]] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
    say "policy routing: skipped (the demo's node namespace needs root and iproute2)"
    return
  fi
  say "policy routing: the node agent in node-1's network namespace (deploy/examples/network.yaml)"
  stop "$state/net-agent.pid"
  stop "$state/node-netns.pid"
  setsid nohup unshare --net sleep infinity >/dev/null 2>&1 &
  echo $! > "$state/node-netns.pid"
  local netns=/proc/$(cat "$state/node-netns.pid")/ns/net
  for _ in $(seq 50); do [[ -e $netns ]] && nsenter --net="$netns" true 2>/dev/null && break; sleep 0.1; done
  local host_if=fl${base}h
  ip link del "$host_if" 2>/dev/null || true
  ip link add "$host_if" type veth peer name eth1 netns "$(cat "$state/node-netns.pid")"
  ip link set "$host_if" up
  nsenter --net="$netns" sh -c 'ip link set lo up && ip link set eth1 up && ip addr add 203.0.113.2/24 dev eth1'
  setsid nohup "$state/bin/net-agent" --node-name=node-1 --netns="$netns" --metrics-bind-address=0 \
    --health-probe-bind-address=127.0.0.1:0 --zap-devel > "$state/logs/net-agent.log" 2>&1 &
  echo $! > "$state/net-agent.pid"
  kubectl wait routingpolicies --all --for=condition=Ready --timeout=60s >/dev/null
  # A demo started again: the policy is Ready from before, the namespace new until the agent acts.
  for _ in $(seq 300); do nsenter --net="$netns" ip rule | grep -q 'lookup 110' && break; sleep 0.1; done
  kubectl get routingpolicies,noderoutings
  echo "  ip rule; ip route show table 110 (in node-1's namespace):"
  nsenter --net="$netns" ip rule | sed 's/^/    /'
  nsenter --net="$netns" ip route show table 110 | sed 's/^/    /'
  echo
}

# kubernetes_cluster: acme's administrator orders a managed Kubernetes cluster through the apps API
# (the starter catalog's Kubernetes renders a KubernetesCluster); the cluster-controller makes Cluster
# API's objects, Cluster API's real managers the Machines, the local provider stand-in the customer's
# API server and a Node per worker VM. The demo prints the cluster's conditions as they change, then
# lists the nodes, the base add-ons (CNI, CSI node plugin) and the ingress add-on (installed by Flux's
# helm-controller; their charts are the cluster-controller's test fixtures, the platform's add-on
# charts do not exist yet) with the customer's own kubeconfig, and scales the node group through the
# apps API.
kubernetes_cluster() {
  local cluster=k8s-demo ns=tenant-acme
  say "managed Kubernetes: acme orders a cluster through the apps API (cluster-controller, Cluster API, the local provider stand-in)"
  "${as_acme[@]}" apply -f - <<'YAML'
apiVersion: apps.flotilla.dev/v1alpha1
kind: Kubernetes
metadata: {name: demo, namespace: tenant-acme}
spec:
  controlPlane: {replicas: 1}
  nodeGroups: [{name: default, minReplicas: 2, maxReplicas: 3, instanceType: small}]
  addons: {ingress: true}
YAML
  echo "  KubernetesCluster $ns/$cluster, its conditions as they change:"
  watch_cluster 240
  kubectl wait -n "$ns" "kubernetesclusters/$cluster" --for=condition=Ready --timeout=10s >/dev/null || cluster_diagnostics
  "${as_acme[@]}" get -n "$ns" kuberneteses
  kubectl get -n "$ns" kubernetesclusters -o wide
  echo "  Cluster API's view (its real managers):"
  kubectl get -n "$ns" machines.cluster.x-k8s.io | sed 's/^/    /'
  echo "  the etcd of each tenant hosting one (etcd: true), ordered by the catalog as an app; its pods cannot run here, and it says so:"
  kubectl wait etcds.apps.flotilla.dev --all -A --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=PodsCannotStart --timeout=120s >/dev/null 2>&1 || true
  kubectl get etcds.apps.flotilla.dev -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,STATUS:.status.message' | sed 's/^/    /'
  echo "  the Kamaji DataStore of its tenant's etcd (the stand-in keeps every control plane on the platform's etcd):"
  kubectl get datastores.kamaji.clastix.io -l cluster.flotilla.dev/etcd-namespace \
    -o custom-columns=NAME:.metadata.name,ENDPOINTS:.spec.endpoints,CA:.spec.tlsConfig.certificateAuthority.certificate.secretReference.name | sed 's/^/    /'
  echo "  its cloud-controller-manager, CSI controller and autoscaler, in $infra_ns (out of acme's reach; the stand-in plays their kubelet):"
  kubectl get -n "$infra_ns" deployments -l "cluster.flotilla.dev/namespace=$ns,cluster.flotilla.dev/cluster=$cluster" | sed 's/^/    /'
  echo "    \$ kubectl get deployments -n $infra_ns   # as acme's admin"
  "${as_acme[@]}" get deployments -n "$infra_ns" 2>&1 | sed 's/^/    /' || true
  echo "  the customer's kubeconfig (Secret $cluster-admin-kubeconfig, read by acme's admin), against the customer's own API server:"
  "${as_acme[@]}" get secret -n "$ns" "$cluster-admin-kubeconfig" -o jsonpath='{.data.kubeconfig}' | base64 -d > "$state/$cluster.kubeconfig"
  chmod 600 "$state/$cluster.kubeconfig"
  local customer=(kubectl --kubeconfig "$state/$cluster.kubeconfig" --cache-dir "$state/kube-cache-$cluster")
  echo "    \$ kubectl --kubeconfig $state/$cluster.kubeconfig get nodes"
  "${customer[@]}" get nodes | sed 's/^/    /'
  echo "    \$ kubectl --kubeconfig $state/$cluster.kubeconfig get daemonsets,configmaps -A -l app.kubernetes.io/managed-by=Helm   # the add-ons, put there by Flux (no kubelet runs their pods here)"
  "${customer[@]}" get daemonsets,configmaps -A -l app.kubernetes.io/managed-by=Helm | sed 's/^/    /'
  echo "    \$ kubectl --kubeconfig $state/$cluster.kubeconfig get csidrivers   # the CSI node plugin's driver, a base add-on"
  "${customer[@]}" get csidrivers | sed 's/^/    /'
  echo
  say "scaling acme's cluster through the apps API: node group default to 3"
  "${as_acme[@]}" patch -n "$ns" kubernetes demo --type=merge \
    -p '{"spec":{"nodeGroups":[{"name":"default","minReplicas":3,"maxReplicas":3,"instanceType":"small"}]}}'
  watch_cluster 120 "default 3/3 ready"
  echo "    \$ kubectl --kubeconfig $state/$cluster.kubeconfig get nodes"
  "${customer[@]}" get nodes | sed 's/^/    /'
  echo
}

# watch_cluster SECONDS [WORKERS]: prints the cluster's conditions whenever they change, until it
# is Ready (with that WorkersReady message).
watch_cluster() {
  local last="" now t0=$SECONDS
  for _ in $(seq "$1"); do
    now=$(kubectl get -n "$ns" kubernetesclusters "$cluster" --ignore-not-found \
      -o jsonpath='{range .status.conditions[*]}{.type}={.status} {end}{.status.conditions[?(@.type=="WorkersReady")].message}' 2>/dev/null || true)
    if [[ -n $now && $now != "$last" ]]; then printf '    %4ss  %s\n' $((SECONDS - t0)) "$now"; last=$now; fi
    if [[ $now == *"Ready=True "* && $(kubectl get -n "$ns" kubernetesclusters "$cluster" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True && $now == *"${2:-}" ]]; then
      return
    fi
    sleep 1
  done
  cluster_diagnostics
}

cluster_diagnostics() {
  kubectl get -n "$ns" kubernetesclusters,clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,helmreleases -o wide || true
  for p in cluster-controller cluster-api-manager local-provider; do echo "--- $p"; tail -20 "$state/logs/$p.log"; done
  exit 1
}

# join_STAGE: starts the parts built in STAGE (once, by join).
# localcp starts kube-controller-manager, Flux and the Helm repository once they are built.
join_controller-manager() { :; }
join_flux() { :; }
join_storage() {
  say "starting the LINSTOR test double and CSI provisioning stand-in (no LINSTOR, DRBD or CSI driver can run here) on $stand_ins:$linstor_port"
  run_bg linstor-double "$state/bin/linstor-double" --listen "$stand_ins:$linstor_port" --nodes "$linstor_nodes" --pool ssd=100Gi --provision
  # The Nodes the satellites run on, labelled with their zones. No kubelet registers them here, so
  # the demo gives them capacity and lifts the not-ready taint kube-apiserver puts on new Nodes:
  # kube-scheduler then binds pods to them (which nothing runs).
  for n in ${linstor_nodes//,/ }; do
    printf 'apiVersion: v1\nkind: Node\nmetadata: {name: %s, labels: {topology.kubernetes.io/zone: %s, kubernetes.io/hostname: %s, %s: "true"}}\n---\n' \
      "${n%%=*}" "${n#*=}" "${n%%=*}" "$stand_in_node"
  done | kubectl apply -f - >/dev/null
  for n in ${linstor_nodes//,/ }; do
    kubectl patch node "${n%%=*}" --type=merge -p '{"spec":{"taints":null}}' >/dev/null
    kubectl patch node "${n%%=*}" --subresource=status --type=merge \
      -p '{"status":{"capacity":{"cpu":"16","memory":"64Gi","pods":"110"},"allocatable":{"cpu":"16","memory":"64Gi","pods":"110"}}}' >/dev/null
  done

  start_service storage-controller
}
join_net() { start_service net-controller; }
join_cluster() {
  # Cluster API's managers serve webhooks that nothing points at (the cluster-controller writes
  # complete objects); their servers still need a certificate: localcp's serves.
  capi_flags=(--webhook-cert-dir="$WEBHOOK_CERT_DIR" --health-addr=127.0.0.1:0 --diagnostics-address=0 --insecure-diagnostics=true)
  say "starting Cluster API's core manager and kubeadm bootstrap provider (real, built from $capi)"
  run_bg cluster-api-manager "$bin/cluster-api-manager" --webhook-port=$((base + 6)) "${capi_flags[@]}"
  run_bg kubeadm-bootstrap-manager "$bin/kubeadm-bootstrap-manager" --webhook-port=$((base + 7)) "${capi_flags[@]}"
  say "starting the local provider STAND-IN for Kamaji and KubeVirt (a real kube-apiserver per customer control plane on the platform's etcd, a Node per worker VM; no pods or VMs run here)"
  # The clusters' infrastructure controllers' namespace and role, as the cluster-controller's chart
  # makes them. Their images cannot be had here: the namespace keeps their pods on the Nodes the
  # demo makes by hand (kube-apiserver's PodNodeSelector), where the stand-in plays their kubelet.
  kubectl create namespace "$infra_ns" --dry-run=client -o yaml | kubectl label --local -f - flotilla.dev/platform=true -o yaml |
    kubectl annotate --local -f - scheduler.alpha.kubernetes.io/node-selector="$stand_in_node=true" -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f deploy/charts/cluster-controller/templates/infra-clusterrole.yaml >/dev/null
  # With a real node, kube-controller-manager runs the Deployment controller: the stand-in plays
  # the kubelet of their pods alone.
  infra_pods=()
  [[ -n ${NODE_HOST_IP:-} ]] && infra_pods=(--infra-pods)
  run_bg local-provider "$state/bin/local-provider" --etcd-servers="$ETCD_URL" --state-dir="$state/local-provider" \
    --kube-apiserver="$bin/kube-apiserver" --infra-namespace="$infra_ns" "${infra_pods[@]}" --metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:0 --zap-devel

  start_service cluster-controller
}
join_usage() { usage_api; }
join_node() { :; } # localcp starts the node once its binaries are built

# join: starts the parts of every stage built by now and not started yet, so that each part runs as
# early as it can, whatever the demo shows at that moment.
join() {
  local s
  mkdir -p "$state/joined"
  for s in "${stages[@]}"; do
    s=${s%%:*}
    [[ -f $state/built/$s && ! -f $state/joined/$s ]] || continue
    "join_$s"
    touch "$state/joined/$s"
  done
}

up() {
  start=$SECONDS
  say "building the core: the control plane, the tenant-controller and the app catalog (cached in ${FLOTILLA_CACHE:-~/.cache/flotilla} and Go's build cache; a cold build takes minutes)"
  # Every binary's link first: one not built yet is missing until its stage is built, never an
  # older build (localcp starts kube-scheduler and Flux when they appear).
  local tools=()
  # shellcheck disable=SC2068 # each stage's items, word by word
  for i in "${core[@]}" ${stages[@]#*:}; do [[ $i == *=* ]] || tools+=("$i"); done
  bin=$(libs/builder/build.sh --link "${tools[@]}")
  export PATH=$bin:$PATH
  build_items "${core[@]}"
  say "core built in $((SECONDS - start))s; building ${stages[*]%%:*} while the core starts (.local/logs/build.log)"
  stop "$state/build.pid"
  rm -rf "$state/built" "$state/joined"
  # At a lower priority: the core starting matters more than the parts that join later.
  setsid nohup nice -n 10 bash "$root/e2e/demo.sh" build > "$state/logs/build.log" 2>&1 < /dev/null &
  echo $! > "$state/build.pid"
  charts=$(printf "%s," "$root"/deploy/catalog/*/chart)
  # The platform's add-on charts (the CNI, the CSI node plugin), and the cluster-controller's test
  # chart standing in for an ingress add-on, served from the same repository.
  charts+=$(printf "%s," "$root"/deploy/addons/*)
  charts+="$root/services/cluster-controller/test/addons/ingress,"

  crds=$(printf "$root/deploy/charts/%s/crds," "${services[@]}")
  moddir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
  crds+="$(moddir "$kubeovn")/charts/kube-ovn-v2/crds,"
  capi_dir=$(moddir "$capi")
  crds+="$capi_dir/config/crd/bases,$capi_dir/bootstrap/kubeadm/config/crd/bases,$(moddir "$capk")/config/crd/bases,"
  crds+="$root/services/cluster-controller/test/crds/kamaji,"
  hooks=$(for s in "${services[@]}"; do f=$root/deploy/charts/$s/files/manifests.yaml; if [[ -f $f ]]; then printf "%s=%s," "$f" "${webhook_ports[$s]}"; fi; done)
  # What tenants may do is what every chart's tenant-roles.yaml says, applied as the chart ships it
  # (TestTenantRolesInOneFile: no chart grants tenants anything elsewhere).
  tenant_roles=$(printf "%s," "$root"/deploy/charts/*/templates/tenant-roles.yaml)
  # A real node (kubelet, containerd, kube-proxy, CoreDNS) needs root: namespaces, cgroups, mounts.
  node_flag=() extenders=http://127.0.0.1:$extender_port
  # With a node, kube-scheduler also asks the storage-controller's pods, through their Service at a
  # fixed address of the node's Service range (platform_pods); each extender is ignorable.
  [[ $EUID -eq 0 ]] && node_flag=(--node) extenders+=",http://{service-ip:$extender_service_ip}:8099"
  if ! alive "$state/localcp.pid"; then
    say "starting the control plane (etcd, kube-apiserver; kube-controller-manager, Flux, the Helm repository and kube-scheduler once built)"
    rm -f "$state/kubeconfig"
    setsid nohup "$state/bin/localcp" --dir "$state" --crds "${crds%,}" --webhooks "${hooks%,}" \
      --module-crds "$cnpg" --flux --flux-storage-port $((base + 13)) --charts "${charts%,}" --charts-port "$charts_port" \
      --apiservices "apps.flotilla.dev/v1alpha1=$apps_port,usage.flotilla.dev/v1alpha1=$usage_port" \
      --apply "$tenant_roles$root/deploy/charts/storage-controller/templates/scheduling-gate-policy.yaml,$root/deploy/charts/cluster-controller/templates/cluster-secrets-policy.yaml,$root/deploy/charts/tenant-controller/templates/claims-policy.yaml,$root/deploy/charts/tenant-controller/templates/app-identity-policy.yaml" \
      --webhook-port "$webhook_port" --scheduler --scheduler-extenders "$extenders" --scheduler-metrics-port "$scheduler_metrics_port" --ovn \
      --users acme-admin=tenant-acme-admin,acme-user=tenant-acme-use,acme-viewer=tenant-acme-view,beta-admin=tenant-beta-admin "${node_flag[@]}" \
      > "$state/logs/localcp.log" 2>&1 &
    echo $! > "$state/localcp.pid"
    for _ in $(seq 900); do [[ -f $state/kubeconfig ]] && break; alive "$state/localcp.pid" || break; sleep 0.2; done
    [[ -f $state/kubeconfig ]] || { tail -20 "$state/logs/localcp.log"; echo "control plane did not start"; exit 1; }
  fi
  export KUBECONFIG=$state/kubeconfig
  # shellcheck disable=SC1091
  source "$state/webhook.env"
  : "${ETCD_URL:?the running control plane predates the cluster-controller in the demo: make demo-down first}"
  service_flags[net-controller]="--ovn-nb=$OVN_NB"
  # The stand-ins listen where the platform's pods on the node reach them too: the machine's end of
  # the node's link (without a node, loopback).
  stand_ins=${NODE_HOST_IP:-127.0.0.1}
  # The storage-controller talks to the LINSTOR test double (no LINSTOR can run here), and polls it
  # often so that the demo shows changes quickly.
  service_flags[storage-controller]="--linstor-endpoint=http://$stand_ins:$linstor_port --linstor-poll-interval=5s --extender-bind-address=127.0.0.1:$extender_port"
  # The controllers elect a leader in flotilla-system, as their pods do: once the platform runs as
  # pods (platform_pods), a process started again waits for its turn instead of acting beside them.
  kubectl create namespace flotilla-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  for l in "${contract_labels[@]}"; do
    IFS='=' read -r crd label version <<<"$l"
    kubectl label --overwrite crd "$crd" "$label=$version" >/dev/null
  done
  start_service tenant-controller
  start_service app-catalog-controller
  apps_diagnostics() {
    kubectl get apiservice v1alpha1.apps.flotilla.dev -o jsonpath='{.status.conditions}{"\n"}' || true
    kubectl api-resources --api-group=apps.flotilla.dev || true
    tail -30 "$state/logs/apps-apiserver.log"
  }
  say "starting the apps apiserver (apps.flotilla.dev, through kube-apiserver's aggregator)"
  # With a real node, the catalog's apps pull their images from its registry (real_node fills it).
  images=()
  [[ -n ${NODE_REGISTRY:-} ]] && images=(--image-registry="$NODE_REGISTRY/flotilla")
  run_bg apps-apiserver "$state/bin/apps-apiserver" --bind-address=127.0.0.1 --secure-port="$apps_port" \
    --cert-dir="$state/apps-apiserver" --kubeconfig="$KUBECONFIG" \
    --authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" "${images[@]}"

  say "applying deploy/examples/ (a tenant's namespace must exist before its children: retrying)"
  kubectl create namespace tenant-root --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  for f in deploy/examples/tenants.yaml deploy/examples/*.yaml; do apply_retrying "$f" 60; done
  say "waiting for the tenants to be Ready"
  kubectl wait tenants.tenancy.flotilla.dev --all -A --for=condition=Ready --timeout=120s >/dev/null

  say "installing the starter catalog (charts served from 127.0.0.1:$charts_port)"
  kubectl apply --server-side -f deploy/catalog/namespace.yaml >/dev/null
  sed "s|url: .*|url: http://127.0.0.1:$charts_port|" deploy/catalog/source.yaml | kubectl apply -f - >/dev/null
  kubectl apply -f deploy/catalog/delivery-roles.yaml >/dev/null
  for d in deploy/catalog/*/definition.yaml; do kubectl apply -f "$d" >/dev/null; done
  # A definition is Ready once the tenants' delivery role covers its chart: kube-controller-manager
  # aggregates that role, and builds while the core starts.
  built controller-manager
  kubectl wait applicationdefinitions --all --for=condition=Ready --timeout=60s >/dev/null
  kubectl get applicationdefinitions
  echo
  say "the platform answers kubectl, $((SECONDS - start))s after \`make demo\`: the tenants and the app catalog are Ready$(building)"
  echo

  # Every part built by now joins (warm: all of them), the core having answered first.
  await flux
  say "ordering a Postgres in tenant acme (deploy/examples/apps/): installed, and Ready once PostgreSQL runs (on the real node)"
  # The kinds are served once the aggregator has the apps apiserver Available and has refetched
  # its discovery (at once when the apiserver annotates its APIService, else within a minute).
  kubectl wait apiservice v1alpha1.apps.flotilla.dev --for=condition=Available --timeout=120s >/dev/null
  apply_retrying deploy/examples/apps/ 240 apps_diagnostics
  # Installed: its release is, and the app waits for its database (PodsStarting), or has it.
  for _ in $(seq 90); do
    case $(kubectl get -n tenant-acme postgres/orders -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}') in
      PodsStarting | *Succeeded) break ;;
    esac
    sleep 2
  done
  kubectl get -n tenant-acme postgres -o wide
  echo

  await storage
  say "storage: StoragePolicies on the LINSTOR test double (deploy/examples/storage.yaml)"
  kubectl wait storagepolicies --all --for=condition=Ready --timeout=60s >/dev/null
  kubectl get storagepolicies
  kubectl get storageclasses -l storage.flotilla.dev/policy
  echo


  say "acme's administrator orders a Redis: installed, not Ready while its pod cannot start, and saying why"
  as_acme=(kubectl --kubeconfig "$state/users/acme-admin.kubeconfig" --cache-dir "$state/kube-cache-acme-admin")
  "${as_acme[@]}" apply -f - <<'YAML'
apiVersion: apps.flotilla.dev/v1alpha1
kind: Redis
metadata: {name: cache, namespace: tenant-acme}
spec: {replicas: 1}
YAML
  "${as_acme[@]}" wait -n tenant-acme redis/cache --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=PodsCannotStart --timeout=120s
  "${as_acme[@]}" get -n tenant-acme postgres,redis
  echo "  \$ kubectl get -n tenant-acme redis/cache -o jsonpath='{.status.message}'   # no default StorageClass here, so its claim names none"
  "${as_acme[@]}" get -n tenant-acme redis/cache -o jsonpath='{.status.message}{"\n"}' | sed 's/^/    /'
  echo "  a claim larger than any two zones can hold, refused at once with the numbers:"
  "${as_acme[@]}" create -f - <<'YAML' 2>&1 | sed 's/^/    /' || true
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: too-big, namespace: tenant-acme}
spec:
  storageClassName: replicated
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 150Gi}}
YAML
  echo "  beta's administrator, in acme's namespace:"
  kubectl --kubeconfig "$state/users/beta-admin.kubeconfig" --cache-dir "$state/kube-cache-beta-admin" \
    get -n tenant-acme postgres 2>&1 | sed 's/^/    /' || true
  echo

  say "scheduling: acme's database and its volume placed together (kube-scheduler + the storage-controller's extender)"
  # The pod and its claim are labelled as the Postgres app's chart labels them: with its Helm release's name.
  orders_release=$(kubectl get helmreleases -A -l apps.flotilla.dev/kind=Postgres,apps.flotilla.dev/name=orders -o jsonpath='{.items[0].spec.releaseName}')
  "${as_acme[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-db, namespace: tenant-acme, labels: {app.kubernetes.io/instance: $orders_release}}
spec: {storageClassName: replicated, accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: tenant-acme, labels: {app.kubernetes.io/instance: $orders_release}}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 999, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: postgres
      image: postgres:17
      resources: {requests: {cpu: 100m, memory: 256Mi}}
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumes: [{name: data, persistentVolumeClaim: {claimName: data-db}}]
YAML
  "${as_acme[@]}" wait -n tenant-acme pod/db --for=condition=PodScheduled --timeout=60s
  "${as_acme[@]}" get -n tenant-acme pod/db pvc/data-db -o wide
  echo "  (the claim waited for its pod; the CSI stand-in made the volume with a replica on the pod's node)"
  echo

  say "tenant beta's pods spread over the zones (its SchedulingClass two-zones, deploy/examples/storage.yaml)"
  as_beta=(kubectl --kubeconfig "$state/users/beta-admin.kubeconfig" --cache-dir "$state/kube-cache-beta-admin")
  restricted_pod='  securityContext: {runAsNonRoot: true, runAsUser: 101, seccompProfile: {type: RuntimeDefault}}'
  restricted_container='securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}'
  for i in 1 2; do
    printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-%s, namespace: tenant-beta, labels: {app.kubernetes.io/instance: web}}\nspec:\n%s\n  containers: [{name: web, image: nginx, resources: {requests: {cpu: 50m, memory: 64Mi}}, %s}]\n' \
      "$i" "$restricted_pod" "$restricted_container"
  done | "${as_beta[@]}" apply -f - >/dev/null
  "${as_beta[@]}" wait -n tenant-beta pod/web-1 pod/web-2 --for=condition=PodScheduled --timeout=60s >/dev/null
  for p in web-1 web-2; do
    node=$(kubectl get -n tenant-beta pod "$p" -o jsonpath='{.spec.nodeName}')
    printf '  %s on %s in %s\n' "$p" "$node" "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')"
  done
  echo

  await net
  say "networking: tenant subnets on Kube-OVN, and acme's and beta's networks with one range, apart on OVN (deploy/examples/network.yaml)"
  # The net-controller has just started: a TenantSubnet for every tenant's namespace, then Ready.
  for n in $(kubectl get tenants.tenancy.flotilla.dev -A -o jsonpath='{.items[*].status.namespace}'); do
    kubectl wait --for=create "tenantsubnet/$n" --timeout=60s >/dev/null
  done
  kubectl wait tenantsubnets --all --for=condition=Ready --timeout=60s >/dev/null
  kubectl wait tenantnetworks --all -A --for=condition=Ready --timeout=60s >/dev/null
  kubectl get subnets.kubeovn.io -o custom-columns=SUBNET:.metadata.name,NAMESPACE:.spec.namespaces[0],CIDR:.spec.cidrBlock
  kubectl get tenantnetworks -A -o wide
  echo "  \$ kubectl get tenantnetworks -n tenant-acme   # as acme's admin"
  "${as_acme[@]}" get tenantnetworks -n tenant-acme 2>&1 | sed 's/^/    /'
  echo "  OVN northbound (ovn-nbctl): a gateway router per network, NAT toward the platform"
  LD_LIBRARY_PATH=$OVN_ROOT/usr/lib/x86_64-linux-gnu:$OVN_ROOT/lib/x86_64-linux-gnu "$OVN_ROOT/usr/bin/ovn-nbctl" --db="$OVN_NB" lr-list | sed 's/^/    /'
  echo

  await cluster
  kubernetes_cluster
  node_agent
  await usage
  usage_report
  real_node
  claims
  say "the tenant tree"
  kubectl get tenants.tenancy.flotilla.dev -A -o jsonpath='{range .items[*]}{.status.path}{"\t"}{.status.depth}{"\t"}{.metadata.name}{"\t"}{.status.namespace}{"\t"}{.status.host}{"\t"}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    sort | awk -F'\t' 'BEGIN{printf "%-28s %-22s %-26s %s\n","TENANT","NAMESPACE","HOST","READY"}
      {printf "%-28s %-22s %-26s %s\n", sprintf("%*s%s", $2*2, "", $3), $4, $5, $6}'
  echo
  kubectl get tenants.tenancy.flotilla.dev -A
  echo
  say "ready in $((SECONDS - start))s. Point kubectl at it:"
  echo "    export KUBECONFIG=$state/kubeconfig PATH=$bin:\$PATH"
  echo "    kubectl get tenants.tenancy.flotilla.dev -A; kubectl get postgres -A"
  echo "  or sit in a tenant's seat: export KUBECONFIG=$state/users/acme-admin.kubeconfig (also acme-user, acme-viewer, beta-admin)"
  echo "  acme's Kubernetes cluster, with the customer's kubeconfig: kubectl --kubeconfig $state/k8s-demo.kubeconfig get nodes"
  echo "  logs: .local/logs/   stop: make demo-down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  build) build_stages ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
