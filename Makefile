# Agent Mesh. The two commands a contributor needs: `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
# Lambda build flags from the developers' brief; GOARCH=arm64 for deploy.
LAMBDA_FLAGS := -tags lambda.norpc -trimpath -ldflags='-s -w'
FUNCTIONS := $(notdir $(wildcard functions/*))

.PHONY: latency run test bench bench-report bench-push bench-scale vet fmt lint fuzz build invoke services-up services-down clean

## run: the whole mesh locally (MariaDB, embedded Kafka, every route and schedule of template.yaml, demo agents)
run:
	@echo "==> building meshlocal"
	@$(GO) build -o .local/bin/meshlocal ./cmd/meshlocal
	@.local/bin/meshlocal

## test: start MariaDB + Kafka, go vet, all tests, API fuzz (schemathesis), the a2a-sdk client suite, template lint; stops what it started
test:
	@infra/with-services.sh bash -c '\
	  set -e; \
	  echo "==> go vet"; $(GO) vet ./...; \
	  echo "==> gofmt"; test -z "$$(gofmt -l $$(git ls-files "*.go") | tee /dev/stderr)"; \
	  echo "==> go test"; $(GO) test -count=1 -timeout 20m ./...; \
	  echo "==> schemathesis (openapi.yaml against the local stack)"; infra/fuzz-api.sh; \
	  echo "==> a2a-sdk 1.3.0 (the Python A2A client against a mesh agent)"; infra/a2a-sdk.sh'
	@infra/lint-template.sh

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

## build: every function as an arm64 Lambda bootstrap under dist/<name>/bootstrap
build:
	@for f in $(FUNCTIONS); do \
	  echo "==> $$f"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(LAMBDA_FLAGS) -o dist/$$f/bootstrap ./functions/$$f || exit 1; \
	done

# sam build (BuildMethod: makefile) calls build-<LogicalId>; the directory is
# the logical id without "Function", in kebab case (AuthTokenFunction -> auth-token).
# SAM runs the 40 rules at once; on a cold Go cache each would compile the
# same packages (the AWS SDK, ...) side by side, once per function. So
# the first rule of a build compiles the functions' library packages once,
# in one go command (no linking: under a second when warm), while the
# others wait on the lock (flock, where there is one); then each links from
# the cache. The stamp sits in SAM's build directory, new per build.
LAMBDA_ENV := CGO_ENABLED=0 GOOS=linux GOARCH=arm64
build-%:
	@warm=$(dir $(ARTIFACTS_DIR:/=)).go-warm; \
	  ( if command -v flock >/dev/null; then flock 9; fi; test -f $$warm || { \
	    $(LAMBDA_ENV) $(GO) build $(LAMBDA_FLAGS) $$($(LAMBDA_ENV) $(GO) list -tags lambda.norpc -deps \
	      -f '{{if and (not .Standard) (ne .Name "main")}}{{.ImportPath}}{{end}}' ./functions/...) && touch $$warm; } ) 9>$$warm.lock
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(LAMBDA_FLAGS) \
	  -o $(ARTIFACTS_DIR)/bootstrap ./functions/$$(echo '$*' | sed -E 's/Function$$//; s/([a-z0-9])([A-Z])/\1-\2/g' | tr 'A-Z' 'a-z')

## invoke: run one built function under aws-lambda-rie with its sample event: make invoke FN=health [EVENT=events/health.json]
invoke:
	@test -n "$(FN)" || { echo "usage: make invoke FN=<dir under functions/, e.g. health> [EVENT=events/<name>.json]" >&2; exit 2; }
	@infra/with-services.sh infra/rie.sh functions/$(FN) $(or $(EVENT),events/$(FN).json)

clean:
	rm -rf dist .aws-sam
