#!/usr/bin/env bash
# test.sh MODULE...: `make test`. Builds what the tests need (cached), then runs every module's
# unit, integration and e2e tests on a real control plane and prints gotestsum's summary.
#
# In CI (CI=true), or with RACE=1, the tests run with the race detector and each user-facing
# validation is fuzzed for FUZZTIME inputs first. Locally, by default, the test binaries are built
# with `make demo`'s flags (CGO_ENABLED=0 -trimpath) and reuse every package it compiled; the race
# detector and the fuzzer each instrument every package and compile the whole build again (about
# 11 and 8 minutes on 2 cores from an empty cache). Fuzz seeds run as tests either way.
set -euo pipefail
cd "$(dirname "$0")/.."
echo ">> building test binaries (kube-apiserver, etcd, kube-controller-manager, kubectl, helm, gotestsum; cached in ${FLOTILLA_CACHE:-~/.cache/flotilla})"
bin=$(libs/builder/build.sh)
export KUBEBUILDER_ASSETS=$bin PATH=$bin:$PATH

pkgs=()
for m in "$@"; do pkgs+=("$(awk '/^module /{print $2}' "$m/go.mod")/..."); done

thorough=${RACE:-${CI:-}}
[[ $thorough == 1 || $thorough == true ]] && thorough=true || thorough=false
if ! $thorough; then
  export CGO_ENABLED=0
  echo ">> go test -trimpath ${pkgs[*]} (RACE=1 adds the race detector and the fuzzers)"
  exec gotestsum --format testname --format-hide-empty-pkg -- -trimpath -count=1 -timeout 40m "${pkgs[@]}"
fi

# A count, not a duration: with a duration, go1.26's fuzz coordinator can report its own deadline
# as a failure ("context deadline exceeded", golang/go#75804, fixed in go1.27).
fuzz() { # fuzz DIR TARGET PACKAGE WHAT
  echo ">> fuzzing $4 for ${FUZZTIME:=20000x} inputs"
  (cd "$1" && go test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" "$3")
}
fuzz services/tenant-controller FuzzValidate ./internal/tenancy/ "the Tenant validation"
fuzz services/app-catalog-controller FuzzAdmit ./internal/apiserver/ "the apps' value validation"
fuzz services/net-controller FuzzBlock ./internal/blocks/ "the net-controller's pool blocks"
fuzz services/net-controller FuzzDesired ./internal/routing/ "the net-controller's routing policies"

echo ">> go test -race ${pkgs[*]}"
gotestsum --format testname --format-hide-empty-pkg -- -race -count=1 -timeout 40m "${pkgs[@]}"
