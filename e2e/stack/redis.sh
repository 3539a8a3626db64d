#!/usr/bin/env bash
# Redis: one node on $REDIS_PORT and a Redis Cluster of 3 masters with a
# replica each on ${REDIS_CLUSTER_PORTS[*]}. A master that dies is replaced by
# its replica within seconds (cluster-node-timeout 2 s; replication is
# asynchronous, so the last writes may be lost: docs/reliability.md).
#
#   redis.sh up|down|status
#   redis.sh restart NAME    start NAME again if it is not running (redis, or
#                            redis-cluster-PORT): a killed node comes back empty,
#                            a cluster node rejoins as a replica
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

# Cluster nodes announce the bridge address when the node's bridge exists, so
# MOVED redirects send pods somewhere they can reach; loopback otherwise.
announce_ip() {
  if ip -4 addr show 2>/dev/null | grep -q "inet $BRIDGE_IP/"; then echo "$BRIDGE_IP"; else echo 127.0.0.1; fi
}

bind_addrs() {
  if [ "$(announce_ip)" = "$BRIDGE_IP" ]; then echo "127.0.0.1 $BRIDGE_IP"; else echo 127.0.0.1; fi
}

start_node() { # NAME PORT EXTRA_ARGS...
  local name=$1 port=$2
  shift 2
  local dir=$RUN_DIR/$name
  mkdir -p "$dir"
  # Started before the bridge existed (loopback only): restart it on both.
  # (Tests inject faults with DEBUG SLEEP: allowed from loopback only.)
  if is_running "$name" && bridge_up && ! listening "$BRIDGE_IP" "$port"; then
    log "$name does not listen on $BRIDGE_IP, restarting it"
    stop_pid "$name"
  fi
  # shellcheck disable=SC2046
  start_bg "$name" redis-server --port "$port" --bind $(bind_addrs) --dir "$dir" \
    --save '' --appendonly no --daemonize no --protected-mode no \
    --enable-debug-command local "$@"
}

up() {
  start_node redis "$REDIS_PORT"
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    start_node "redis-cluster-$port" "$port" --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --cluster-announce-ip "$(announce_ip)"
  done
  wait_until 10 redis redis-cli -p "$REDIS_PORT" ping
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    wait_until 10 "redis cluster node $port" redis-cli -p "$port" ping
  done
  local first=${REDIS_CLUSTER_PORTS[0]}
  if ! redis-cli -p "$first" cluster info | grep -q 'cluster_state:ok'; then
    if [ "$(redis-cli -p "$first" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')" = 1 ]; then
      local nodes=()
      for port in "${REDIS_CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
      redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$LOG_DIR/redis-cluster-create.log"
    fi
    wait_until 20 "redis cluster state ok" sh -c "redis-cli -p $first cluster info | grep -q cluster_state:ok"
  fi
  log "redis ready on $REDIS_PORT, cluster on ${REDIS_CLUSTER_PORTS[*]}"
}

restart() {
  local name=${1:?usage: redis.sh restart NAME}
  case $name in
    redis) start_node redis "$REDIS_PORT" ;;
    redis-cluster-*)
      start_node "$name" "${name#redis-cluster-}" --cluster-enabled yes \
        --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --cluster-announce-ip "$(announce_ip)"
      ;;
    *) die "no Redis named $name" ;;
  esac
  wait_until 10 "$name" redis-cli -p "$(port_of "$name")" ping
}

port_of() { if [ "$1" = redis ]; then echo "$REDIS_PORT"; else echo "${1#redis-cluster-}"; fi; }

down() {
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do stop_pid "redis-cluster-$port"; done
  stop_pid redis
}

status() {
  if redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then echo "redis          up    127.0.0.1:$REDIS_PORT"; else echo "redis          DOWN"; fi
  local state
  state=$(redis-cli -p "${REDIS_CLUSTER_PORTS[0]}" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p')
  echo "redis-cluster  ${state:-DOWN}    ${REDIS_CLUSTER_PORTS[*]}"
}

"${1:-up}" "${@:2}"
