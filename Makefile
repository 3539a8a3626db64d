# FlashSale. The two commands that matter: `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
STACK := e2e/stack
RUN ?= $(CURDIR)/.run
export FLASHSALE_RUN := $(RUN)
ENV := . $(RUN)/env &&
COUNTS ?= 1,100,1000

.PHONY: help demo test up stack down status clean build release build-tests test-images crds check-crds bench soak many chaos

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

demo: ## bring up the stack and run a live sale end to end, narrated
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack release
	@$(ENV) e2e/demo.sh

# The tests' stack has the replicated topology too (three Kafka nodes, a
# PostgreSQL primary and synchronous standby under Patroni), for
# the chaos kinds that take one away.
test: export STACK_TOPOLOGY = replicated
test: ## install and start everything the tests need, then lint and pass them all
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack build-tests
	@$(MAKE) --no-print-directory test-images check-crds
	@$(ENV) e2e/stack/node-check.sh
	@$(ENV) e2e/chart-check.sh
	@$(ENV) e2e/alerts.sh
	@$(ENV) e2e/chart-upgrade.sh
	@$(ENV) e2e/newcomer.sh
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	@# Whatever the tests did, nothing of theirs may stay on the cluster.
	cargo build --workspace --locked --bins
	$(ENV) cargo test --workspace --locked --no-fail-fast; status=$$?; \
	  $(ENV) target/debug/flashsale-chaos --short --runs 1 --results $(RUN)/chaos || status=1; \
	  $(ENV) e2e/leftovers.sh || status=1; exit $$status

up: ## start the stack and the local loop (operator, API, consumer on the host), write .run/env
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack build
	@$(STACK)/local.sh up

stack: ## start the services and the one-node cluster only (Redis, PostgreSQL, Kafka, Kubernetes)
	@$(STACK)/up.sh

down: ## stop everything `up` started
	@$(STACK)/down.sh

status: ## print the stack's addresses and health
	@$(STACK)/status.sh

clean: down ## stop the stack and delete its data, PostgreSQL's too (caches stay)
	@$(STACK)/postgres.sh purge
	@$(STACK)/patroni.sh purge
	rm -rf $(RUN)

build: ## build the binaries (debug)
	cargo build --workspace --locked --bins

release: ## build the binaries (release)
	cargo build --workspace --locked --bins --release

bench: ## every performance figure against its limit, in one run, with its invariants
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack release
	@$(ENV) taskset -c 0 target/release/flashsale-bench

soak: ## an hour-long sale at a quarter of the maximum purchase rate, sampled every 30 s, plotted (MINUTES=60)
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack release
	@$(ENV) taskset -c 0 target/release/flashsale-bench --soak $(or $(MINUTES),60)

many: ## sales at once under one operator (COUNTS=1,100,1000, POLL=2s): lateness, operator CPU and memory, partitions
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack release
	@$(ENV) taskset -c 0 target/release/flashsale-bench --many $(COUNTS) $(if $(POLL),--many-poll-interval $(POLL))

chaos: ## live sales under faults, I1-I6 after every run (RUNS=20 per kind, KINDS=a,b, SEED=n replays)
	@$(STACK)/preflight.sh
	@$(MAKE) --no-print-directory -j2 stack build
	@$(MAKE) --no-print-directory test-images
	@$(ENV) target/debug/flashsale-chaos

build-tests: ## compile the tests without running them
	cargo test --workspace --locked --no-run

test-images: ## import the debug build into the node as docker.io/flashsale/{flashsale,operator}:dev
	@e2e/stack/image.sh flashsale dev target/debug/flashsale >/dev/null
	@e2e/stack/image.sh operator dev target/debug/flashsale-operator >/dev/null

crds: ## regenerate crds/ from the Rust types
	cargo run --quiet --locked -p flashsale-operator --bin crdgen > crds/flashsale.yaml

check-crds: ## fail when the committed CRD differs from the Rust types
	@cargo run --quiet --locked -p flashsale-operator --bin crdgen | diff -u crds/flashsale.yaml - \
	  || { echo "crds/flashsale.yaml is stale: run 'make crds' and commit it"; exit 1; }
