#!/usr/bin/env bash
# manifests.sh IMAGE prints CloudNativePG's operator as its own module describes it (config/default:
# its CRDs, RBAC, webhooks and Deployment, in cnpg-system), at the version libs/builder/cnpg pins,
# running IMAGE (repository:tag of this directory's image.yaml, as a release builds it into the
# platform's registry), its namespace labelled the platform's.
# Needs kubectl (its kustomize) and the Go module proxy or cache.
set -euo pipefail
image=${1:?usage: manifests.sh IMAGE}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=$(cd "$here/../../../libs/builder/cnpg" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' github.com/cloudnative-pg/cloudnative-pg)
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
# kustomize takes another tree only by a relative path.
cat > "$overlay/kustomization.yaml" <<YAML
resources: [$(realpath --relative-to="$overlay" "$module/config/default")]
images: [{name: controller, newName: "${image%:*}", newTag: "${image##*:}"}]
# The operator's namespace is the platform's: tenants' NetworkPolicies let it reach the instance
# managers of their PostgreSQL pods.
patches:
  - target: {kind: Namespace}
    patch: '[{"op": "add", "path": "/metadata/labels/flotilla.dev~1platform", "value": "true"}]'
YAML
kubectl kustomize --load-restrictor LoadRestrictionsNone "$overlay"
