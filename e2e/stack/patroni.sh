#!/usr/bin/env bash
# The replicated topology's PostgreSQL (STACK_TOPOLOGY=replicated): a primary
# and a synchronous standby managed by Patroni (Debian's package), its
# leader key in the stack's etcd, and HAProxy on $PG_HA_PORT sending every
# connection to whichever member Patroni's REST API calls the primary, so
# clients keep one address through a failover. Beside the single PostgreSQL
# of postgres.sh, which the dev loop and most tests use.
# Usage: patroni.sh up|down|status|primary|crash MEMBER|rejoin MEMBER|
#        member_up MEMBER|switchover|purge
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

PATRONI_HOME=$STATE_DIR/patroni-$CLONE_KEY
# Its key prefix in etcd: one per clone, like its data.
PATRONI_NAMESPACE=/flashsale-$CLONE_KEY/
PATRONI_SCOPE=flashsale
DB_NAME=flashsale
MEMBERS=(a b)

# member_index a|b: its index in the port arrays.
member_index() {
  case $1 in a) echo 0 ;; b) echo 1 ;; *) die "no member $1 (a or b)" ;; esac
}
member_port() { echo "${PG_HA_MEMBER_PORTS[$(member_index "$1")]}"; }
rest_port() { echo "${PG_HA_REST_PORTS[$(member_index "$1")]}"; }
member_dir() { echo "$PATRONI_HOME/$1"; }

# Failover timing: the leader key lives 8 s without renewal (etcd lease),
# Patroni's loop runs every second, a DCS call gives up after 3 s
# (ttl > loop_wait + 2 * retry_timeout, as Patroni wants). Synchronous
# mode: a commit returns once the standby has it, and Patroni promotes only
# that standby, so no acknowledged commit is lost (strict off: with the
# standby gone the primary goes on alone rather than stopping writes).
write_config() {
  local m=$1 dir port rest
  dir=$(member_dir "$m") port=$(member_port "$m") rest=$(rest_port "$m")
  as_root install -d -m 0700 -o postgres -g postgres "$dir"
  as_root tee "$dir/patroni.yml" >/dev/null <<YAML
scope: $PATRONI_SCOPE
namespace: $PATRONI_NAMESPACE
name: pg-$m
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    ttl: 8
    loop_wait: 1
    retry_timeout: 3
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        synchronous_commit: "on"
        fsync: "off"
  initdb:
  - encoding: UTF8
  - auth: trust
postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $dir/data
  bin_dir: $PG_BIN
  pgpass: $dir/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $dir
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
YAML
  as_root chown postgres:postgres "$dir/patroni.yml"
}

member_up() {
  local m=$1
  write_config "$m"
  (cd / && STACK_USER=postgres start_bg "patroni-$m" /usr/bin/patroni "$(member_dir "$m")/patroni.yml")
}

# The REST API's answer to GET PATH on member M (200 or not).
answers() { curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$(rest_port "$1")$2"; }

# primary: the member Patroni calls the primary.
primary() {
  local m
  for m in "${MEMBERS[@]}"; do
    if answers "$m" /primary 2>/dev/null; then echo "$m" && return 0; fi
  done
  return 1
}

# whole: a primary, and a synchronous standby streaming from it.
whole() {
  local m
  primary >/dev/null || return 1
  for m in "${MEMBERS[@]}"; do answers "$m" /sync && return 0; done
  return 1
}

haproxy_config() {
  local binds="  bind 127.0.0.1:$PG_HA_PORT" m
  if bridge_up; then binds+=$'\n'"  bind $BRIDGE_IP:$PG_HA_PORT"; fi
  {
    cat <<CFG
# Written by e2e/stack/patroni.sh: one address for the primary, whichever
# member it is (Patroni's REST API answers 200 on /primary only there).
global
  maxconn 2000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
$binds
  option httpchk GET /primary
  http-check expect status 200
  # Checked twice a second; a member that stops being the primary has its
  # connections cut, so no client keeps writing to a demoted server.
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
CFG
    for m in "${MEMBERS[@]}"; do
      echo "  server pg-$m 127.0.0.1:$(member_port "$m") check port $(rest_port "$m")"
    done
  } >"$RUN_DIR/haproxy.cfg"
}

up() {
  as_root install -d -m 0755 "$STATE_DIR"
  as_root install -d -m 0700 -o postgres -g postgres "$PATRONI_HOME"
  echo "$RUN_DIR" | as_root tee "$PATRONI_HOME/clone" >/dev/null
  for m in "${MEMBERS[@]}"; do
    member_up "$m"
  done
  haproxy_config
  start_bg haproxy /usr/sbin/haproxy -db -f "$RUN_DIR/haproxy.cfg"
  wait_until 120 "PostgreSQL primary and synchronous standby (Patroni)" whole
  wait_until 30 "the primary behind HAProxy" pg_isready -q -h 127.0.0.1 -p "$PG_HA_PORT"
  ensure_database "$PG_HA_PORT" "$DB_NAME"
  log "postgres (replicated) ready on $PG_HA_PORT: primary pg-$(primary), synchronous standby"
}

down() {
  stop_pid haproxy
  for m in "${MEMBERS[@]}"; do stop_pid "patroni-$m"; done
  # A member whose Patroni was killed leaves its postgres running.
  for m in "${MEMBERS[@]}"; do
    if as_root test -f "$(member_dir "$m")/data/postmaster.pid"; then
      as_postgres "$PG_BIN/pg_ctl" -D "$(member_dir "$m")/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
  done
}

# crash M: member M lost as a machine is: its Patroni and its postgres
# SIGKILLed (its data kept). `member_up M` brings it back as a standby.
crash() {
  local m=$1 pid live
  pid=$(as_root head -1 "$(member_dir "$m")/data/postmaster.pid" 2>/dev/null) || true
  if live=$(live_pid "$(pid_file "patroni-$m")"); then kill -KILL "$live"; fi
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  log "pg-$m crashed (Patroni and postgres SIGKILLed)"
}

# rejoin M: member M started again once the other member is the primary
# (back sooner, it would find its own leader key still alive and simply
# carry on as the primary: no failover). It returns as the standby.
rejoin() {
  local m=$1
  wait_until 60 "a primary other than pg-$m" other_primary "$m"
  member_up "$m"
}
other_primary() { local p; p=$(primary) && [ "$p" != "$1" ]; }

# switchover: the primary hands over to the standby (patronictl, planned).
switchover() {
  local from to
  from=$(primary) || die "no primary to switch over from"
  to=$([ "$from" = a ] && echo b || echo a)
  patronictl -c "$(member_dir "$to")/patroni.yml" switchover --leader "pg-$from" --candidate "pg-$to" --force >/dev/null
  log "switched over from pg-$from to pg-$to"
}

purge() {
  down
  as_root rm -rf "$PATRONI_HOME"
}

status() {
  local p
  if ! is_running haproxy; then
    echo "postgres (HA)  off   (STACK_TOPOLOGY=replicated starts it)"
  elif p=$(primary 2>/dev/null) && pg_isready -q -h 127.0.0.1 -p "$PG_HA_PORT"; then
    echo "postgres (HA)  up    127.0.0.1:$PG_HA_PORT/$DB_NAME (primary pg-$p)"
  else
    echo "postgres (HA)  DOWN"
  fi
}

"${@:-up}"
