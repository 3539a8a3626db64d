#!/usr/bin/env bash
# Prints the stack's addresses and each service's health.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

if [ -f "$ENV_FILE" ]; then
  echo "== $ENV_FILE"
  grep '^export' "$ENV_FILE" | sed 's/^export /  /'
else
  echo "no $ENV_FILE: the stack was never started (make up)"
fi
echo "== services"
"$STACK_DIR/bridge.sh" status
"$STACK_DIR/redis.sh" status
"$STACK_DIR/postgres.sh" status
"$STACK_DIR/patroni.sh" status
"$STACK_DIR/kafka.sh" status
"$STACK_DIR/toxiproxy.sh" status
"$STACK_DIR/kube.sh" status
"$STACK_DIR/node.sh" status
if [ "$STACK_TOPOLOGY" = replicated ] || [ -d "$RUN_DIR/node2" ]; then NODE_INDEX=2 "$STACK_DIR/node.sh" status; fi
"$STACK_DIR/prometheus.sh" status
"$STACK_DIR/local.sh" status
