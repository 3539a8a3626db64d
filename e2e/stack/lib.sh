# Sourced by every stack script: where things live, which versions and ports,
# and the few process helpers that make `up` idempotent and `down` exact.
# shellcheck shell=bash
set -euo pipefail

STACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$STACK_DIR/../.." && pwd)

# Downloads and builds, keyed by version; safe to delete at any time.
CACHE_DIR=${FLASHSALE_CACHE:-$HOME/.cache/flashsale}
# Everything a running stack owns: data, logs, pids, PKI, the env file.
RUN_DIR=${FLASHSALE_RUN:-$REPO_DIR/.run}
LOG_DIR=$RUN_DIR/logs
PID_DIR=$RUN_DIR/pids
ENV_FILE=$RUN_DIR/env

K8S_VERSION=1.34.4
ETCD_VERSION=3.6.16
KAFKA_VERSION=4.1.1
HELM_VERSION=3.19.5

K8S_BIN=$CACHE_DIR/kubernetes-v$K8S_VERSION/bin
ETCD_BIN=$CACHE_DIR/etcd-v$ETCD_VERSION/bin
HELM_BIN=$CACHE_DIR/helm-v$HELM_VERSION/bin
KAFKA_HOME=$CACHE_DIR/kafka-$KAFKA_VERSION

# Non-default loopback ports, so the stack never collides with a system service.
REDIS_PORT=${FLASHSALE_REDIS_PORT:-16379}
REDIS_CLUSTER_PORTS=(17001 17002 17003)
PG_PORT=${FLASHSALE_PG_PORT:-15432}
KAFKA_PORT=${FLASHSALE_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=19093
ETCD_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=16443
CONTROLLER_MANAGER_PORT=10357
SCHEDULER_PORT=10359
API_PORT=18080
OPERATOR_PORT=18081

# The test cluster's own addresses: pods, services, and the bridge gateway
# through which pods reach the host's services. Routed locally, never out.
POD_CIDR=198.18.0.0/16
SERVICE_CIDR=198.19.0.0/16
BRIDGE_IP=198.18.0.1
FIRST_SERVICE_IP=198.19.0.1

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

# is_running NAME: the process recorded for NAME is alive.
is_running() {
  local f
  f=$(pid_file "$1")
  [ -f "$f" ] && alive "$(cat "$f")"
}

# start_bg NAME CMD...: run CMD detached in its own session, log to
# $LOG_DIR/NAME.log, record its pid. Does nothing if NAME already runs.
start_bg() {
  local name=$1
  shift
  if is_running "$name"; then
    log "$name already running (pid $(cat "$(pid_file "$name")"))"
    return 0
  fi
  setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$(pid_file "$name")"
  log "$name started (pid $!), log $LOG_DIR/$name.log"
}

# stop_pid NAME: stop exactly the process recorded for NAME (TERM, then KILL).
stop_pid() {
  local name=$1 f pid
  f=$(pid_file "$name")
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
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
  rm -f "$f"
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

# as_root CMD...: run CMD as root (directly when we are root, else via sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
