# Agent Mesh. The two commands a contributor needs: `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
# Lambda build flags from the developers' brief; GOARCH=arm64 for deploy.
LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w'
FUNCTIONS := $(notdir $(wildcard functions/*))

.PHONY: latency run test faults bench bench-report bench-push bench-scale vet fmt lint fuzz build invoke sam-api services-up services-down clean

## run: the whole mesh locally (MariaDB, embedded Kafka, every route and schedule of template.yaml, demo agents)
run:
	@echo "==> building meshlocal"
	@$(GO) build -o .local/bin/meshlocal ./cmd/meshlocal
	@.local/bin/meshlocal

## test: start MariaDB + Kafka, go vet, all tests, API fuzz (schemathesis), the a2a-sdk client suite, the SAM tier (Podman), template lint; stops what it started
test:
	@infra/with-services.sh bash -c '\
	  set -e; \
	  echo "==> go vet"; $(GO) vet ./...; \
	  echo "==> go vet of bench/ (its own module: make bench must build)"; (cd bench && $(GO) vet ./...); \
	  echo "==> gofmt"; test -z "$$(gofmt -l $$(git ls-files "*.go") | tee /dev/stderr)"; \
	  echo "==> go test"; $(GO) test -count=1 -timeout 20m ./...; \
	  echo "==> fault tests on a three-broker Kafka cluster (make faults)"; mkdir -p .local/faults; rm -f .local/faults/report.md; \
	  rc=0; MESH_FAULTS=1 MESH_FAULTS_REPORT=$(CURDIR)/.local/faults/report.md $(GO) test -count=1 -timeout 20m ./shared/faults/ || rc=$$?; \
	  test $$rc = 0; cat .local/faults/report.md 2>/dev/null || true; \
	  echo "==> schemathesis (openapi.yaml against the local stack)"; infra/fuzz-api.sh; \
	  echo "==> a2a-sdk 1.3.0 (the Python A2A client against a mesh agent)"; infra/a2a-sdk.sh; \
	  echo "==> SAM tier (sam build, then sam local start-api and invoke on Podman: infra/sam-test.sh)"; infra/sam-test.sh'
	@infra/lint-template.sh

## faults: issue 19's faults under load on a three-broker KRaft cluster of its own (infra/kafka.sh, MESH_KAFKA_NODES=3, ports 29392-29394): leader kill, lost quorum, rolling restart, controller failover, a moved leader; counts per case, recovery times and the relay rate at replication 3 vs 1 -> .local/faults/report.md
faults:
	@mkdir -p .local/faults && infra/with-services.sh bash -c 'MESH_FAULTS=1 MESH_FAULTS_REPORT=$(CURDIR)/.local/faults/report.md $(GO) test -count=1 -v -timeout 20m ./shared/faults/'

## lint: template.yaml through cfn-lint and sam validate --lint (pip, into .local/venv)
lint:
	@infra/lint-template.sh

## fuzz: schemathesis over openapi.yaml against a private local stack (pip, into .local/venv-fuzz; needs MariaDB)
fuzz:
	@infra/with-services.sh infra/fuzz-api.sh

## bench: speed and memory targets, then the side-by-side comparison (bench/, its own module) writing bench/report.md and its plots
bench:
	@infra/with-services.sh bash -c 'rc=0; \
	  echo "==> go benchmarks"; $(GO) test -run "^$$" -bench . -benchmem ./... || rc=$$?; \
	  echo "==> bench/: peers, send path, meshd, init and latency in one run -> bench/report.md"; \
	  (cd bench && $(GO) test -count=1 -v -run "^TestReport$$" -timeout 30m . -args -report) || rc=$$?; \
	  exit $$rc'

## bench-report: only the comparison of bench/ (bench/report.md), without the go benchmarks
bench-report:
	@infra/with-services.sh bash -c 'cd bench && $(GO) test -count=1 -v -run "^TestReport$$" -timeout 30m . -args -report'

## bench-push: only the push channel's figures of bench/ (idle cost of 10,000 connections; latency push vs Kafka vs poll) -> .local/bench-push/report.md
bench-push:
	@mkdir -p .local/bench-push && infra/with-services.sh bash -c 'cd bench && $(GO) test -count=1 -v -run "^TestReport$$" -timeout 30m . -args -report -only idle,latency -out ../.local/bench-push'

## bench-scale: cost as tables grow (1,000,000-row outbox, 100,000 agents; EXPLAIN of each query) -> bench/report-scale.md
bench-scale:
	@infra/with-services.sh bash -c 'cd bench && $(GO) test -count=1 -v -run "^TestReport$$" -timeout 60m . -args -scale'

## latency: 2xx->handler latency through the local stack with meshd in push, Kafka and poll mode side by side, 1 and 50 msg/s for 3 min each (figures, not a test)
latency:
	@infra/with-services.sh $(GO) test -count=1 -run '^$$' -bench DeliveryLatency -benchtime 1x -timeout 30m ./shared/localstack/ -args -latency

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

services-up:
	@infra/services.sh up

services-down:
	@infra/services.sh down

# The Lambda architecture (x86_64 or arm64) of `make build`, and of a
# `sam build` that leaves no build graph to read it from (below).
LAMBDA_ARCH ?= arm64
goarch = $(if $(filter x86_64,$(1)),amd64,$(if $(filter arm64,$(1)),arm64,$(error LAMBDA_ARCH must be x86_64 or arm64, not "$(1)")))

## build: every function as a Lambda bootstrap under dist/<name>/bootstrap (arm64; LAMBDA_ARCH=x86_64 for the other)
build:
	@for f in $(FUNCTIONS); do \
	  echo "==> $$f"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(call goarch,$(LAMBDA_ARCH)) $(GO) build $(LAMBDA_FLAGS) -o dist/$$f/bootstrap ./functions/$$f || exit 1; \
	done

# sam build (BuildMethod: makefile) calls build-<LogicalId>; the directory is
# the logical id without "Function", in kebab case (AuthTokenFunction -> auth-token).
# SAM runs the 40 rules at once; on a cold Go cache each would compile the
# same packages (the AWS SDK, ...) side by side, once per function. So
# the first rule of a build compiles the functions' library packages once,
# in one go command (no linking: under a second when warm), while the
# others wait on the lock (flock, where there is one); then each links from
# the cache. The stamp sits in SAM's build directory, new per build.
#
# The architecture is the one SAM builds the function for (its
# Architectures). SAM tells make only ARTIFACTS_DIR, but it writes its build
# graph, the architecture of each function included, to build.toml beside
# the build directory before building; a `sam build <function>` does not
# rewrite it, and without an entry the rule uses LAMBDA_ARCH. A binary of
# another architecture would fail only when invoked (exec format error).
build-%:
	@dir=$(dir $(ARTIFACTS_DIR:/=)); warm=$$dir.go-warm; \
	  arch=$$(awk -v fn='"$*"' '/^\[/ { a = "" } /^architecture = / { a = $$3 } /^functions = / && index($$0, fn) { gsub(/"/, "", a); print a; exit }' \
	    $${dir}../build.toml 2>/dev/null); arch=$${arch:-$(LAMBDA_ARCH)}; \
	  case $$arch in x86_64) goarch=amd64 ;; arm64) goarch=arm64 ;; \
	    *) echo "build-$*: unknown architecture '$$arch' (x86_64 or arm64)" >&2; exit 1 ;; esac; \
	  export CGO_ENABLED=0 GOOS=linux GOARCH=$$goarch; \
	  ( if command -v flock >/dev/null; then flock 9; fi; test -f $$warm.$$goarch || { \
	    $(GO) build $(LAMBDA_FLAGS) $$($(GO) list -tags lambda.norpc -deps \
	      -f '{{if and (not .Standard) (ne .Name "main")}}{{.ImportPath}}{{end}}' ./functions/...) && touch $$warm.$$goarch; } ) 9>$$warm.lock && \
	  $(GO) build $(LAMBDA_FLAGS) -o $(ARTIFACTS_DIR)/bootstrap \
	    ./functions/$$(echo '$*' | sed -E 's/Function$$//; s/([a-z0-9])([A-Z])/\1-\2/g' | tr 'A-Z' 'a-z')

## invoke: run one function with its sample event, under `sam local invoke` when Podman is up (infra/podman.sh up), else under aws-lambda-rie: make invoke FN=health [EVENT=events/health.json]
invoke:
	@test -n "$(FN)" || { echo "usage: make invoke FN=<dir under functions/, e.g. health> [EVENT=events/<name>.json]" >&2; exit 2; }
	@if infra/podman.sh status >/dev/null 2>&1; then \
	  infra/with-services.sh infra/sam-local.sh invoke $(FN) $(or $(EVENT),events/$(FN).json); \
	else \
	  infra/with-services.sh infra/rie.sh functions/$(FN) $(or $(EVENT),events/$(FN).json); \
	fi

## sam-api: the HTTP API under the stock SAM CLI (sam build, sam local start-api on :3000) on a private Podman engine; make run is the quicker way
sam-api:
	@infra/podman.sh up
	@infra/with-services.sh infra/sam-local.sh api

clean:
	rm -rf dist .aws-sam
