#!/usr/bin/env bash
# Stops exactly what up.sh started, by pid, in reverse order. Data stays in
# $RUN_DIR (`make clean` removes it).
source "$(dirname "$0")/lib.sh"

[ -x "$STACK_DIR/kube.sh" ] && "$STACK_DIR/kube.sh" down
"$STACK_DIR/kafka.sh" down
"$STACK_DIR/postgres.sh" down
"$STACK_DIR/redis.sh" down
# Anything else we started with start_bg (operator, API, consumers, ...).
for f in "$PID_DIR"/*.pid; do
  [ -e "$f" ] || continue
  stop_pid "$(basename "$f" .pid)"
done
log "stack down"
