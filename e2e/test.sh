#!/usr/bin/env bash
# test.sh MODULE...: `make test`. Builds what the tests need (cached), then runs every module's
# unit, integration and e2e tests with -race on a real control plane, plus a short fuzz run of each
# user-facing validation, and prints gotestsum's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
echo ">> building test binaries (kube-apiserver, etcd, kube-controller-manager, kubectl, helm, gotestsum; cached in ${FLOTILLA_CACHE:-~/.cache/flotilla})"
bin=$(libs/builder/build.sh)
export KUBEBUILDER_ASSETS=$bin PATH=$bin:$PATH

pkgs=()
for m in "$@"; do pkgs+=("$(awk '/^module /{print $2}' "$m/go.mod")/..."); done

# A count, not a duration: with a duration, go1.26's fuzz coordinator can report its own deadline
# as a failure ("context deadline exceeded", golang/go#75804, fixed in go1.27).
echo ">> fuzzing the Tenant validation for ${FUZZTIME:=20000x} inputs"
(cd services/tenant-controller && go test -run '^$' -fuzz '^FuzzValidate$' -fuzztime "$FUZZTIME" ./internal/tenancy/)
echo ">> fuzzing the apps' value validation for $FUZZTIME inputs"
(cd services/app-catalog-controller && go test -run '^$' -fuzz '^FuzzAdmit$' -fuzztime "$FUZZTIME" ./internal/apiserver/)

echo ">> fuzzing the net-controller's pool blocks and routing policies for $FUZZTIME inputs"
(cd services/net-controller && go test -run '^$' -fuzz '^FuzzBlock$' -fuzztime "$FUZZTIME" ./internal/subnets/)
(cd services/net-controller && go test -run '^$' -fuzz '^FuzzDesired$' -fuzztime "$FUZZTIME" ./internal/routing/)

echo ">> go test -race ${pkgs[*]}"
gotestsum --format testname --format-hide-empty-pkg -- -race -count=1 -timeout 40m "${pkgs[@]}"
