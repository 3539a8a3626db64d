#!/usr/bin/env bash
# Redis: one node on $REDIS_PORT (and over TLS on $REDIS_TLS_PORT), a
# Redis Cluster of 3 masters with a replica each on
# ${REDIS_CLUSTER_PORTS[*]}, and a primary with a replica on
# ${REDIS_REPLICATED_PORTS[*]} watched by three Sentinels on
# ${REDIS_SENTINEL_PORTS[*]}. A master that dies is replaced by its replica
# within seconds (cluster-node-timeout 2 s; Sentinel down-after 1 s;
# replication is asynchronous, so the last writes may be lost:
# docs/reliability.md).
#
#   redis.sh up|down|status
#   redis.sh restart NAME    start NAME again if it is not running (redis,
#                            redis-cluster-PORT or redis-replicated-PORT): a
#                            killed node comes back empty, a cluster node
#                            rejoins as a replica, a Sentinel-watched one is
#                            made a replica of the current primary
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

# The single node's TLS port, with the services' certificate; clients are
# not asked for one.
start_single_node() {
  services_pki
  if is_running redis && ! listening 127.0.0.1 "$REDIS_TLS_PORT"; then
    log "redis does not serve TLS on $REDIS_TLS_PORT, restarting it"
    stop_pid redis
  fi
  start_node redis "$REDIS_PORT" --tls-port "$REDIS_TLS_PORT" \
    --tls-cert-file "$SERVICES_PKI/server.crt" --tls-key-file "$SERVICES_PKI/server.key" \
    --tls-ca-cert-file "$SERVICES_CA" --tls-auth-clients no
}

up() {
  start_single_node
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
  up_sentinel
  log "redis ready on $REDIS_PORT, cluster on ${REDIS_CLUSTER_PORTS[*]}, Sentinel service $REDIS_SENTINEL_SERVICE on ${REDIS_SENTINEL_PORTS[*]}"
}

# The primary/replica pair and its Sentinels. Nodes already running keep
# their roles (a failover may have swapped them); a Sentinel that is not
# running starts from a fresh config naming the current primary.
up_sentinel() {
  local primary=${REDIS_REPLICATED_PORTS[0]} port
  for port in "${REDIS_REPLICATED_PORTS[@]}"; do
    if redis-cli -p "$port" role 2>/dev/null | head -1 | grep -q master; then primary=$port; fi
  done
  for port in "${REDIS_REPLICATED_PORTS[@]}"; do
    if [ "$port" = "$primary" ]; then
      start_replicated "$port"
    else
      start_replicated "$port" --replicaof "$(announce_ip)" "$primary"
    fi
  done
  for port in "${REDIS_REPLICATED_PORTS[@]}"; do
    wait_until 10 "redis node $port" redis-cli -p "$port" ping
  done
  for port in "${REDIS_SENTINEL_PORTS[@]}"; do
    local dir=$RUN_DIR/redis-sentinel-$port
    mkdir -p "$dir"
    is_running "redis-sentinel-$port" || cat >"$dir/sentinel.conf" <<CONF
port $port
bind $(bind_addrs)
dir $dir
sentinel resolve-hostnames no
sentinel announce-ip $(announce_ip)
sentinel monitor $REDIS_SENTINEL_SERVICE $(announce_ip) $primary 2
sentinel down-after-milliseconds $REDIS_SENTINEL_SERVICE 1000
sentinel failover-timeout $REDIS_SENTINEL_SERVICE 5000
sentinel parallel-syncs $REDIS_SENTINEL_SERVICE 1
CONF
    start_bg "redis-sentinel-$port" redis-server "$dir/sentinel.conf" --sentinel --daemonize no
  done
  for port in "${REDIS_SENTINEL_PORTS[@]}"; do
    wait_until 10 "redis sentinel $port" sh -c \
      "redis-cli -p $port sentinel get-master-addr-by-name $REDIS_SENTINEL_SERVICE | grep -q $(announce_ip)"
  done
}

# A Sentinel-watched node; one restarted while another is primary comes
# back as its replica (Sentinel would make it one anyway, seconds later).
start_replicated() { # PORT [EXTRA_ARGS...]
  local port=$1
  shift
  # shellcheck disable=SC2046
  start_bg "redis-replicated-$port" redis-server --port "$port" --bind $(bind_addrs) \
    --replica-announce-ip "$(announce_ip)" --dir "$RUN_DIR" --dbfilename "replicated-$port.rdb" \
    --save '' --appendonly no --daemonize no --protected-mode no --enable-debug-command local "$@"
}

restart() {
  local name=${1:?usage: redis.sh restart NAME}
  case $name in
    redis) start_single_node ;;
    redis-cluster-*)
      start_node "$name" "${name#redis-cluster-}" --cluster-enabled yes \
        --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --cluster-announce-ip "$(announce_ip)"
      ;;
    redis-replicated-*)
      local primary
      primary=$(redis-cli -p "${REDIS_SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name "$REDIS_SENTINEL_SERVICE" | sed -n 2p)
      if [ -n "$primary" ] && [ "$primary" != "${name#redis-replicated-}" ]; then
        start_replicated "${name#redis-replicated-}" --replicaof "$(announce_ip)" "$primary"
      else
        start_replicated "${name#redis-replicated-}"
      fi
      ;;
    *) die "no Redis named $name" ;;
  esac
  wait_until 10 "$name" redis-cli -p "$(port_of "$name")" ping
}

port_of() {
  case $1 in
    redis) echo "$REDIS_PORT" ;;
    redis-cluster-*) echo "${1#redis-cluster-}" ;;
    *) echo "${1#redis-replicated-}" ;;
  esac
}

down() {
  for port in "${REDIS_SENTINEL_PORTS[@]}"; do stop_pid "redis-sentinel-$port"; done
  for port in "${REDIS_REPLICATED_PORTS[@]}"; do stop_pid "redis-replicated-$port"; done
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do stop_pid "redis-cluster-$port"; done
  stop_pid redis
}

status() {
  if redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then echo "redis          up    127.0.0.1:$REDIS_PORT"; else echo "redis          DOWN"; fi
  local state
  state=$(redis-cli -p "${REDIS_CLUSTER_PORTS[0]}" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p')
  echo "redis-cluster  ${state:-DOWN}    ${REDIS_CLUSTER_PORTS[*]}"
  local primary
  primary=$(redis-cli -p "${REDIS_SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name "$REDIS_SENTINEL_SERVICE" 2>/dev/null | sed -n 2p)
  if [ -n "$primary" ]; then echo "redis-sentinel up    primary 127.0.0.1:$primary, Sentinels ${REDIS_SENTINEL_PORTS[*]}"; else echo "redis-sentinel DOWN"; fi
}

"${1:-up}" "${@:2}"
