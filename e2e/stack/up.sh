#!/usr/bin/env bash
# Starts the whole local stack (idempotent) and writes $RUN_DIR/env, the one
# place tests, benchmarks, the demo and people read its addresses from.
# The bridge comes first: Redis, PostgreSQL, Kafka and the apiserver bind its
# address too, so the cluster's pods reach them.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
"$STACK_DIR/preflight.sh"
claim_stack
"$STACK_DIR/install.sh"
"$STACK_DIR/bridge.sh" up
"$STACK_DIR/redis.sh" up
"$STACK_DIR/postgres.sh" up
"$STACK_DIR/kafka.sh" up
if [ "$STACK_TOPOLOGY" = replicated ]; then "$STACK_DIR/kafka.sh" replicated_up; fi
"$STACK_DIR/toxiproxy.sh" up
"$STACK_DIR/kube.sh" up
# Patroni keeps its leader key in the control plane's etcd.
if [ "$STACK_TOPOLOGY" = replicated ]; then "$STACK_DIR/patroni.sh" up; fi
"$STACK_DIR/node.sh" up
if [ "$STACK_TOPOLOGY" = replicated ]; then NODE_INDEX=2 "$STACK_DIR/node.sh" up; fi
"$STACK_DIR/build-k8s.sh" helm
"$STACK_DIR/prometheus.sh" up
"$STACK_DIR/schemathesis.sh" install
"$STACK_DIR/write-env.sh"
log "stack up in $((SECONDS - started)) s; run: . $ENV_FILE"
