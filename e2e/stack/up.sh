#!/usr/bin/env bash
# Starts the whole local stack (idempotent) and writes $RUN_DIR/env, the one
# place tests, benchmarks, the demo and people read its addresses from.
source "$(dirname "$0")/lib.sh"

started=$SECONDS
"$STACK_DIR/install.sh"
"$STACK_DIR/redis.sh" up
"$STACK_DIR/postgres.sh" up
"$STACK_DIR/kafka.sh" up
"$STACK_DIR/kube.sh" up
"$STACK_DIR/write-env.sh"
log "stack up in $((SECONDS - started)) s; run: . $ENV_FILE"
