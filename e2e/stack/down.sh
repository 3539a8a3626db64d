#!/usr/bin/env bash
# Stops exactly what up.sh started, by pid, in reverse order. Data stays in
# $RUN_DIR (`make clean` removes it).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

"$STACK_DIR/local.sh" down
"$STACK_DIR/node.sh" down
"$STACK_DIR/kube.sh" down
"$STACK_DIR/kafka.sh" down
"$STACK_DIR/postgres.sh" down
"$STACK_DIR/redis.sh" down
# Anything else we started with start_bg (operator, API, consumers, ...).
for f in "$PID_DIR"/*.pid; do
  [ -e "$f" ] || continue
  stop_pid "$(basename "$f" .pid)"
done
# Last: everything above may listen on the bridge's address.
"$STACK_DIR/bridge.sh" down
log "stack down"
