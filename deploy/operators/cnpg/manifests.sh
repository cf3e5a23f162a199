#!/usr/bin/env bash
# manifests.sh IMAGE prints CloudNativePG's operator as its own module describes it (config/default:
# its CRDs, RBAC, webhooks and Deployment, in cnpg-system), at the version libs/builder/cnpg pins,
# running IMAGE (this directory's image.yaml, as a release builds it into the platform's registry).
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
YAML
kubectl kustomize --load-restrictor LoadRestrictionsNone "$overlay"
