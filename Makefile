# Flotilla: a fleet of independent controllers. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Modules in go.work, in dependency order. Each is tidy alone (GOWORK=off); the API modules also build alone.
SERVICES := tenant-controller app-catalog-controller storage-controller net-controller cluster-controller usage-api
MODULES  := libs/apis libs/runtime libs/testenv libs/release $(foreach s,$(SERVICES),services/$(s)/api services/$(s)) e2e

export FLOTILLA_CACHE ?= $(HOME)/.cache/flotilla
BIN := $(FLOTILLA_CACHE)/bin
export KUBEBUILDER_ASSETS := $(BIN)
export PATH := $(BIN):$(PATH)

##@ Everyday

.PHONY: help
help: ## Show this help
	@awk 'BEGIN{FS=":.*##"} /^##@/{printf "\n%s\n",substr($$0,5)} /^[a-z][a-zA-Z0-9_-]*:.*##/{printf "  %-14s %s\n",$$1,$$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the platform locally: control plane, CRDs, every controller, example tenants
	@bash e2e/demo.sh up

.PHONY: demo-down
demo-down: ## Stop what `make demo` started (state stays in .local/)
	@bash e2e/demo.sh down

.PHONY: test
test: tools ## Run all unit, integration and e2e tests on a real control plane (RACE=1, as CI: race detector and fuzzing)
	@bash e2e/test.sh $(MODULES)

.PHONY: bench
bench: tools ## Measure the figures in docs/benchmarks.md and rewrite it (about 14 minutes on 2 cores; the node's, as root)
	@for s in $(SERVICES); do \
	  if [ ! -d services/$$s/internal/bench ]; then echo "$$s: no benchmark yet"; continue; fi; \
	  (cd services/$$s && BENCH_OUT=$(CURDIR)/docs/benchmarks.md \
	    go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./internal/bench/); \
	done
	@cd e2e && BENCH_OUT=$(CURDIR)/docs/benchmarks.md go test -run '^$$' -bench 'BenchmarkNode|BenchmarkPlatformOnNode|BenchmarkCatalogAppsServe' -benchtime 1x -timeout 45m .

.PHONY: release
release: ## Build the release (images for linux/amd64+arm64, OCI charts, GitOps tree) into .local/release/bundle; REGISTRY=host/prefix also pushes it; PLATFORMS=linux/amd64 builds for one
	@go run ./libs/release/cmd/release build -out .local/release/bundle -work $(FLOTILLA_CACHE)/release-work \
	  $(if $(REGISTRY),-registry $(REGISTRY)) $(if $(PLATFORMS),-platforms $(PLATFORMS))

##@ Code

.PHONY: tools
tools: ## Build (once, cached in $FLOTILLA_CACHE) kube-apiserver, etcd, kubectl, helm, controller-gen, …
	@libs/builder/build.sh >/dev/null

.PHONY: tools-align
tools-align: ## Raise the builder's modules on the workspace's Kubernetes line to the workspace's versions (one compilation serves both)
	@libs/builder/align.sh

.PHONY: workspace
workspace: ## Regenerate go.work from MODULES (go.work.sum keeps the checksums that tests and vet need)
	@rm -f go.work && go work init $(MODULES)

.PHONY: generate
generate: tools ## Generate deepcopy, CRDs, RBAC and webhook manifests into the charts, and //go:generate code (OVN models)
	@for s in $(SERVICES); do \
	  chart=$(CURDIR)/deploy/charts/$$s; \
	  (cd services/$$s && go generate ./...); \
	  (cd services/$$s/api && controller-gen object paths=./... crd:maxDescLen=400 output:crd:dir=$$chart/crds); \
	  paths=$$(cd services/$$s && for d in controller webhook; do if [ -d internal/$$d ]; then echo "paths=./internal/$$d/..."; fi; done); \
	  if [ -n "$$paths" ]; then \
	    (cd services/$$s && controller-gen rbac:roleName=$$s webhook $$paths \
	       output:rbac:dir=$$chart/files output:webhook:dir=$$chart/files); \
	  fi; \
	  if [ -d services/$$s/internal/agent ]; then \
	    (cd services/$$s && controller-gen rbac:roleName=$$s-agent paths=./internal/agent/... \
	       output:rbac:artifacts:config=$$chart/files/agent); \
	  fi; \
	  if [ -d services/$$s/internal/apiserver ]; then \
	    (cd services/$$s && controller-gen rbac:roleName=$$s-apiserver paths=./internal/apiserver/... \
	       output:rbac:artifacts:config=$$chart/files/apiserver); \
	  fi; \
	done

.PHONY: tidy
# Without the module proxy (an air-gapped machine, or an outage), tidy cannot load the tests of
# dependencies; then each module is checked instead to build and test from its own go.mod and go.sum.
tidy: ## go mod tidy every module
	@for m in $(MODULES); do \
	  if out=$$(cd $$m && GOWORK=off go mod tidy 2>&1); then continue; fi; \
	  if ! grep -qE 'dial tcp|no such host|no route to host|connection refused|lookup disabled by GOPROXY=off' <<<"$$out"; then echo "$$out"; exit 1; fi; \
	  echo "$$m: go mod tidy needs the module proxy, which cannot be reached: checking that go.mod and go.sum hold every package and test instead"; \
	  (cd $$m && GOWORK=off GOFLAGS=-mod=readonly go list -deps -test ./... >/dev/null); \
	done

# The API modules, which services import from each other, also compile alone on their own go.mod's
# versions (cheap: apimachinery and little else). The other modules are checked tidy alone;
# compiling each on its own versions compiled client-go, controller-runtime (and apiserver) again
# for every module whose go.mod selects older versions than the workspace (all of them), for builds
# nothing ships: releases build in the workspace, on the versions the tests ran.
.PHONY: verify
verify: workspace generate tidy tools-align ## Fail if generated code, CRDs, go.work or go.mod files are stale
	@git diff --exit-code -- . ':!docs/benchmarks.md' || { echo "generated files are stale: run make workspace generate tidy tools-align and commit"; exit 1; }
	@for m in $(filter libs/apis %/api,$(MODULES)); do (cd $$m && GOWORK=off go build ./...); done

.PHONY: lint
lint: ## go vet and gofmt
	@for m in $(MODULES); do (cd $$m && go vet ./...); done
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
