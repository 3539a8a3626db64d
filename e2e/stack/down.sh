#!/usr/bin/env bash
# Stops exactly what up.sh started, by pid, in reverse order. Data stays in
# $RUN_DIR (`make clean` removes it). A clone that does not own the machine's
# stack stops nothing: the bridge and the node are the owner's.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

if owner=$(other_owner); then
  log "the stack on this machine belongs to $owner: left running (stop it from that clone)"
  exit 0
fi

"$STACK_DIR/local.sh" down
"$STACK_DIR/prometheus.sh" down
NODE_INDEX=2 "$STACK_DIR/node.sh" down
"$STACK_DIR/node.sh" down
# Before etcd goes: without its leader key, Patroni would demote the primary.
"$STACK_DIR/patroni.sh" down
"$STACK_DIR/kube.sh" down
"$STACK_DIR/toxiproxy.sh" down
"$STACK_DIR/kafka.sh" down
"$STACK_DIR/kafka.sh" replicated_down
"$STACK_DIR/postgres.sh" down
"$STACK_DIR/redis.sh" down
# Anything else we started with start_bg (operator, API, consumers, ...).
for f in "$PID_DIR"/*.pid; do
  [ -e "$f" ] || continue
  stop_pid "$(basename "$f" .pid)"
done
# Last: everything above may listen on the bridge's address.
"$STACK_DIR/bridge.sh" down
[ "$(cat "$OWNER_FILE" 2>/dev/null)" = "$RUN_DIR" ] && as_root rm -f "$OWNER_FILE"
log "stack down"
