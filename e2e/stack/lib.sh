# Sourced by every stack script: where things live, which versions and ports,
# and the few process helpers that make `up` idempotent and `down` exact.
# shellcheck shell=bash
# shellcheck disable=SC2034 # its variables are for the scripts that source it
set -euo pipefail

STACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$STACK_DIR/../.." && pwd)

# Downloads and builds, keyed by version; safe to delete at any time.
CACHE_DIR=${FLASHSALE_CACHE:-$HOME/.cache/flashsale}
# Everything a running stack owns: data, logs, pids, PKI, the env file.
RUN_DIR=$(realpath -m "${FLASHSALE_RUN:-$REPO_DIR/.run}")
LOG_DIR=$RUN_DIR/logs
PID_DIR=$RUN_DIR/pids
ENV_FILE=$RUN_DIR/env
# Machine-wide state, outside every clone: which clone owns the stack (the
# bridge, the node and the ports exist once per machine), and each clone's
# PostgreSQL data, which the `postgres` user must reach wherever the clone
# sits (a clone under root's home or `mktemp -d` is in a 0700 directory).
STATE_DIR=${FLASHSALE_STATE:-/var/lib/flashsale}
OWNER_FILE=$STATE_DIR/owner
# A key per run directory, so two clones never share PostgreSQL data.
CLONE_KEY=$(printf '%s' "$RUN_DIR" | sha256sum | cut -c1-12)
PG_HOME=$STATE_DIR/postgres-$CLONE_KEY

K8S_VERSION=1.34.4
ETCD_VERSION=3.6.16
KAFKA_VERSION=4.1.1
HELM_VERSION=3.19.5
SCHEMATHESIS_VERSION=4.32.5
TOXIPROXY_VERSION=2.5.0

K8S_BIN=$CACHE_DIR/kubernetes-v$K8S_VERSION/bin
ETCD_BIN=$CACHE_DIR/etcd-v$ETCD_VERSION/bin
HELM_BIN=$CACHE_DIR/helm-v$HELM_VERSION/bin
TOXIPROXY_BIN=$CACHE_DIR/toxiproxy-v$TOXIPROXY_VERSION/bin
KAFKA_HOME=$CACHE_DIR/kafka-$KAFKA_VERSION
# The OpenAPI fuzzer's venv (schemathesis.sh).
SCHEMATHESIS_VENV=$CACHE_DIR/schemathesis-$SCHEMATHESIS_VERSION

# Non-default loopback ports, so the stack never collides with a system service.
REDIS_PORT=${FLASHSALE_REDIS_PORT:-16379}
# The same node over TLS (the services' certificate).
REDIS_TLS_PORT=16380
# The Redis Cluster: 3 masters and a replica each (their cluster bus ports
# are these + 10000).
REDIS_CLUSTER_PORTS=(17001 17002 17003 17004 17005 17006)
# Redis with Sentinel: a primary and its replica (the first port starts as
# primary), watched by three Sentinels (quorum 2) as service "flashsale".
REDIS_REPLICATED_PORTS=(16381 16382)
REDIS_SENTINEL_PORTS=(26381 26382 26383)
REDIS_SENTINEL_SERVICE=flashsale
PG_PORT=${FLASHSALE_PG_PORT:-15432}
KAFKA_PORT=${FLASHSALE_KAFKA_PORT:-19092}
# The broker's TLS listeners (the services' certificate): one plain, one
# with a SASL PLAIN login (a test account).
KAFKA_TLS_PORT=19095
KAFKA_SASL_PORT=19096
KAFKA_SASL_USER=flashsale
KAFKA_SASL_PASSWORD=flashsale-test-password
KAFKA_CONTROLLER_PORT=19093
# A listener whose advertised address is toxiproxy's: clients bootstrapped
# through the proxy stay behind it (toxiproxy.sh).
KAFKA_PROXIED_PORT=19097
# The replicated topology (STACK_TOPOLOGY=replicated, kafka.sh): three KRaft
# nodes beside the single broker, each on its own ports and, so that one
# iptables rule can cut everything a node sends, under a group id of its own.
STACK_TOPOLOGY=${STACK_TOPOLOGY:-single}
KAFKA_REPLICATED_PORTS=(19201 19202 19203)
KAFKA_REPLICATED_CONTROLLER_PORTS=(19211 19212 19213)
KAFKA_REPLICATED_BRIDGE_PORTS=(19221 19222 19223)
KAFKA_REPLICATED_GROUPS=(19201 19202 19203)
# Its PostgreSQL (patroni.sh): two members, primary and synchronous standby,
# each with Patroni's REST API; HAProxy's one address follows the primary.
PG_HA_PORT=15440
PG_HA_MEMBER_PORTS=(15441 15442)
PG_HA_REST_PORTS=(15451 15452)
# Toxiproxy's API, and the proxies in front of Redis, Kafka and PostgreSQL
# through which the slow-service faults are injected.
TOXIPROXY_PORT=18474
REDIS_PROXY_PORT=16391
KAFKA_PROXY_PORT=19098
PG_PROXY_PORT=15433
ETCD_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=16443
CONTROLLER_MANAGER_PORT=10357
SCHEDULER_PORT=10359
API_PORT=18080
API_INTERNAL_PORT=18090
OPERATOR_PORT=18081
PROMETHEUS_PORT=19190

# The test cluster's own addresses: pods, services, and the bridge gateway
# through which pods reach the host's services. Routed locally, never out.
POD_CIDR=198.18.0.0/16
SERVICE_CIDR=198.19.0.0/16
BRIDGE_IP=198.18.0.1
BRIDGE_NAME=fsbr0
FIRST_SERVICE_IP=198.19.0.1
# The apiserver's address: it serves on the bridge, where the host and the
# pods both reach it.
APISERVER_URL=https://$BRIDGE_IP:$APISERVER_PORT
PKI=$RUN_DIR/pki
# The services' TLS (PostgreSQL, Redis, Kafka): a CA of their own and one server
# certificate for loopback and the bridge. Not under $PKI, which kube.sh
# replaces whole when it is incomplete.
SERVICES_PKI=$RUN_DIR/pki-services
SERVICES_CA=$SERVICES_PKI/ca.crt
# The nodes (node.sh), chosen by NODE_INDEX: 1, the host's own network, and
# in the replicated topology 2, in a network namespace of its own whose
# bridge is joined to $BRIDGE_NAME (one L2 segment, so every pod reaches
# every other and the host directly). Each has its name (also in its
# certificates), address, pod range, containerd (files and socket),
# cgroup root and process names. Images built with image.sh are called
# $IMAGE_PREFIX/NAME:TAG; tests' pods use PROBE_IMAGE.
# Every node the stack knows (up.sh starts node 2 only when replicated),
# and the images built for them all (image.sh imports into each running).
NODE_INDICES=(1 2)
IMAGES_DIR=$RUN_DIR/images
use_node() {
  NODE_INDEX=$1
  if [ "$NODE_INDEX" = 1 ]; then
    NODE_NAME=flashsale-node NODE_IP=$BRIDGE_IP NODE_DIR=$RUN_DIR/node NODE_NETNS=""
    NODE_SUFFIX="" NODE_CGROUP_ROOT=""
  else
    NODE_NAME=flashsale-node-$NODE_INDEX NODE_IP=198.18.0.$NODE_INDEX NODE_DIR=$RUN_DIR/node$NODE_INDEX
    NODE_NETNS=fsnode$NODE_INDEX NODE_SUFFIX=-$NODE_INDEX NODE_CGROUP_ROOT=$NODE_NAME
  fi
  NODE_POD_RANGE=(198.18.$NODE_INDEX.1 198.18.$NODE_INDEX.254)
  CONTAINERD_DIR=$NODE_DIR/containerd
  CONTAINERD_SOCK=$CONTAINERD_DIR/containerd.sock
}
use_node "${NODE_INDEX:-1}"
# bridge_mac N: node N's bridge's fixed, locally administered address.
bridge_mac() { printf '02:46:53:00:00:%02x\n' "$1"; }
IMAGE_PREFIX=docker.io/flashsale
PAUSE_IMAGE=$IMAGE_PREFIX/pause:3.10
PROBE_IMAGE=$IMAGE_PREFIX/probe:1

mkdir -p "$CACHE_DIR" "$RUN_DIR" "$LOG_DIR" "$PID_DIR"

log() { printf '\033[1;34m[stack]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[stack] error:\033[0m %s\n' "$*" >&2; exit 1; }

pid_file() { echo "$PID_DIR/$1.pid"; }

# alive PID: the process exists and is not a zombie (this machine's init
# reaps exited processes only about once a second).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case $stat in Z*) return 1 ;; esac
}

# started PID: when the process started, in clock ticks since boot.
started() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) } # past the command's name, which may hold spaces
  cut -d' ' -f20 <<<"$stat"
}

# record_pid NAME PID: PID is NAME's, with its start time beside it.
record_pid() {
  local f
  f=$(pid_file "$1")
  echo "$2" >"$f"
  started "$2" >"${f%.pid}.started"
}

# live_pid FILE: prints the pid recorded in FILE (a NAME.pid) while that
# process runs: alive, and started when it did at recording (NAME.started).
# start-stop-daemon's own match (--exec) cannot tell a recycled pid running
# the same binary: the Redis nodes and Sentinels are all redis-server.
# The stack's processes can die without `make down` (a killed container, a
# reboot), and their pids come back to others: `make stack` once took a
# Redis Sentinel for etcd and started no etcd; `make down` would have killed
# the Sentinel.
live_pid() {
  local f=$1 pid
  [ -f "$f" ] && pid=$(cat "$f") && alive "$pid" || return 1
  if [ -f "${f%.pid}.started" ] && [ "$(started "$pid")" != "$(cat "${f%.pid}.started")" ]; then
    return 1
  fi
  echo "$pid"
}

# is_running NAME: the process recorded for NAME is alive.
is_running() { live_pid "$(pid_file "$1")" >/dev/null; }

# start_bg NAME CMD...: run CMD detached in a session of its own, from the
# current directory, appending to $LOG_DIR/NAME.log, its pid in NAME.pid
# (Debian's start-stop-daemon does all four) and its start time beside it.
# Does nothing if NAME already runs; a stale NAME.pid (its pid recycled) goes
# first, or start-stop-daemon would take the stranger for NAME. With
# STACK_GROUP set, CMD runs under that group id (no /etc/group entry needed);
# with STACK_USER, as that user (its log still opened by root).
start_bg() {
  local name=$1 cmd f
  shift
  if is_running "$name"; then
    log "$name already running (pid $(cat "$(pid_file "$name")"))"
    return 0
  fi
  cmd=$(command -v "$1") || die "$1: not found"
  f=$(pid_file "$name")
  rm -f "$f"
  start-stop-daemon --start --background --make-pidfile --pidfile "$f" --chdir "$PWD" \
    ${STACK_GROUP:+--group "$STACK_GROUP"} ${STACK_USER:+--chuid "$STACK_USER"} \
    --output "$LOG_DIR/$name.log" --startas "$cmd" -- "${@:2}" ||
    die "$name did not start"
  record_pid "$name" "$(cat "$f")"
  log "$name started (pid $(cat "$f")), log $LOG_DIR/$name.log"
}

# stop_pid NAME: stop exactly the process recorded for NAME (TERM, then KILL).
# Not start-stop-daemon's --stop --retry: it counts a zombie as running, and
# this machine's init reaps only about once a second (a zombie "refused to
# die" for the whole TERM/2/KILL/1 schedule, 3 s, exit 2).
stop_pid() {
  local name=$1 f pid
  f=$(pid_file "$name")
  if pid=$(live_pid "$f"); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      log "$name did not stop in 10 s, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "$name stopped (pid $pid)"
  fi
  rm -f "$f" "${f%.pid}.started"
}

# other_owner: prints the run directory of the other clone that owns this
# machine's stack (one of its recorded processes still runs); fails when the
# stack is ours or nobody's.
other_owner() {
  local owner f
  owner=$(cat "$OWNER_FILE" 2>/dev/null) || return 1
  [ -n "$owner" ] && [ "$owner" != "$RUN_DIR" ] || return 1
  for f in "$owner"/pids/*.pid; do
    live_pid "$f" >/dev/null && echo "$owner" && return 0
  done
  return 1
}

# claim_stack: record this clone as the owner of the machine's stack.
claim_stack() {
  [ "$(cat "$OWNER_FILE" 2>/dev/null)" = "$RUN_DIR" ] && return 0
  as_root install -d -m 0755 "$STATE_DIR"
  echo "$RUN_DIR" | as_root tee "$OWNER_FILE" >/dev/null
}

# wait_until SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds.
wait_until() {
  local timeout=$1 what=$2
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      die "$what not ready after ${timeout}s (logs in $LOG_DIR)"
    fi
    sleep 0.2
  done
}

# PostgreSQL 15's server binaries (Debian), for postgres.sh and patroni.sh.
PG_BIN=/usr/lib/postgresql/15/bin
# as_postgres CMD...: run CMD as `postgres` from /, which it can always enter
# (the clone's directory may be closed to it).
as_postgres() {
  if [ "$(id -un)" = postgres ]; then (cd / && "$@"); else (cd / && as_root runuser -u postgres -- "$@"); fi
}
# ensure_database PORT NAME: database NAME exists on the server at PORT.
ensure_database() {
  psql -h 127.0.0.1 -p "$1" -U postgres -tAc "select 1 from pg_database where datname='$2'" | grep -q 1 ||
    psql -h 127.0.0.1 -p "$1" -U postgres -qc "create database $2"
}
# node_ctr ARGS...: ctr against the node's containerd.
node_ctr() { as_root ctr -a "$CONTAINERD_SOCK" "$@"; }

# bridge_up: the test bridge exists with its address (bridge.sh up made it).
bridge_up() { ip -4 addr show dev "$BRIDGE_NAME" 2>/dev/null | grep -q "inet $BRIDGE_IP/"; }

# listening ADDR PORT: some process listens on TCP ADDR:PORT.
listening() { [ -n "$(ss -Hltn "src $1 and sport = :$2" 2>/dev/null)" ]; }

# Kernel parameters the stack changes are recorded first, per owner, and
# restored by its `down`: $RUN_DIR/sysctl/OWNER holds KEY=ORIGINAL lines.
sysctl_path() { echo "/proc/sys/${1//.//}"; }

# record_sysctls OWNER KEY...: remember each KEY's current value, unless it
# was already recorded (a second `up` must not record its own settings).
record_sysctls() {
  local owner=$1 file key
  shift
  file=$RUN_DIR/sysctl/$owner
  mkdir -p "$RUN_DIR/sysctl"
  touch "$file"
  for key in "$@"; do
    [ -e "$(sysctl_path "$key")" ] || continue
    grep -q "^$key=" "$file" || echo "$key=$(cat "$(sysctl_path "$key")")" >>"$file"
  done
}

# set_sysctl OWNER KEY VALUE: record KEY for OWNER, then set it.
set_sysctl() {
  record_sysctls "$1" "$2"
  [ "$(cat "$(sysctl_path "$2")")" = "$3" ] || echo "$3" | as_root tee "$(sysctl_path "$2")" >/dev/null
}

# restore_sysctls OWNER: put back what OWNER recorded, then forget it.
restore_sysctls() {
  local file=$RUN_DIR/sysctl/$1 key value
  [ -f "$file" ] || return 0
  while IFS='=' read -r key value; do
    [ -e "$(sysctl_path "$key")" ] || continue
    [ "$(cat "$(sysctl_path "$key")")" = "$value" ] || echo "$value" | as_root tee "$(sysctl_path "$key")" >/dev/null || true
  done <"$file"
  rm -f "$file"
}

# ---------------------------------------------------------------- PKI ----
# Shared by kube.sh (the control plane's PKI) and node.sh (the node's certs).

# new_ca NAME CN: a self-signed CA in the current directory.
new_ca() {
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" \
    -days 3650 -sha256 -subj "/CN=$2" -config /dev/stdin 2>/dev/null <<'EOF'
[req]
distinguished_name = dn
x509_extensions = ca
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
EOF
}

# issue CA NAME SUBJECT EXTENSIONS: a 2048-bit RSA key and a certificate
# signed by CA, in the current directory.
issue() {
  local ca=$1 name=$2 subj=$3 ext=$4
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" \
    -subj "$subj" -out "$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

# services_pki: $SERVICES_PKI's CA and server certificate, made once.
services_pki() {
  [ -f "$SERVICES_PKI/server.crt" ] && [ -f "$SERVICES_PKI/server.key" ] && return 0
  rm -rf "$SERVICES_PKI"
  mkdir -p "$SERVICES_PKI.tmp"
  (
    cd "$SERVICES_PKI.tmp"
    new_ca ca "flashsale services CA"
    issue ca server "/CN=flashsale-services" "basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:$BRIDGE_IP, DNS:localhost"
    chmod 0644 server.crt ca.crt
  )
  mv "$SERVICES_PKI.tmp" "$SERVICES_PKI"
  log "made the services' CA and certificate in $SERVICES_PKI"
}

CLIENT_EXT='basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth'

# write_kubeconfig FILE USER CERT_NAME: a kubeconfig for the apiserver at
# $APISERVER_URL with $PKI/CERT_NAME.{crt,key} embedded. Rewritten only when
# its content would change (a new server URL, a new PKI), so it is cheap.
write_kubeconfig() {
  local file=$1 user=$2 cert=$3 content
  content="apiVersion: v1
kind: Config
clusters:
- name: flashsale
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: flashsale
  context:
    cluster: flashsale
    user: $user
current-context: flashsale"
  [ -f "$file" ] && [ "$(cat "$file")" = "$content" ] && return 0
  (umask 077 && printf '%s\n' "$content" >"$file.tmp")
  mv "$file.tmp" "$file"
  log "wrote $file (server $APISERVER_URL)"
}

# as_root CMD...: run CMD as root (directly when we are root, else via sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
