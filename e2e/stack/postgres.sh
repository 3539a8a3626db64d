#!/usr/bin/env bash
# PostgreSQL 15 on $PG_PORT, run as the `postgres` user (the server refuses
# root). Its data, socket and server log live in $PG_HOME, a directory of this
# clone's own that `postgres` owns outside the clone, so it works wherever the
# clone sits and no directory of the user's is opened up; the run dir's
# logs/postgres.log points at the log. Usage: postgres.sh up|down|status|crash|purge
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

PG_DATA=$PG_HOME/data
PG_SOCK=$PG_HOME/sock
PG_LOG=$PG_HOME/postgres.log
# Its TLS key and certificate (from $SERVICES_PKI): the server wants the key
# owned by itself and closed to others.
PG_TLS=$PG_HOME/tls
DB_NAME=flashsale

listen_addrs() {
  if ip -4 addr show 2>/dev/null | grep -q "inet $BRIDGE_IP/"; then echo "127.0.0.1,$BRIDGE_IP"; else echo 127.0.0.1; fi
}

up() {
  as_root install -d -m 0755 "$STATE_DIR"
  as_root install -d -m 0700 -o postgres -g postgres "$PG_HOME" "$PG_SOCK"
  # Whose data this is, for a person looking at $STATE_DIR.
  echo "$RUN_DIR" | as_root tee "$PG_HOME/clone" >/dev/null
  as_postgres touch "$PG_LOG"
  ln -sfn "$PG_LOG" "$LOG_DIR/postgres.log"
  if ! as_root test -f "$PG_DATA/PG_VERSION"; then
    as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 >"$LOG_DIR/postgres-initdb.log"
    # Pods on the test bridge connect over TCP too.
    echo "host all all $POD_CIDR trust" | as_postgres tee -a "$PG_DATA/pg_hba.conf" >/dev/null
  fi
  tls_files
  # Started before the bridge existed (loopback only), or without TLS (an
  # older stack): restart it.
  if as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    if bridge_up && ! listening "$BRIDGE_IP" "$PG_PORT"; then
      log "postgres does not listen on $BRIDGE_IP, restarting it"
      as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    elif [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc 'show ssl' 2>/dev/null)" != on ]; then
      log "postgres runs without TLS, restarting it"
      as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    elif [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc 'show synchronous_commit' 2>/dev/null)" != on ]; then
      log "postgres acknowledges commits before writing them (an older stack), restarting it"
      as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    fi
  fi
  # fsync=off loses writes only with the host (the kernel holds them);
  # synchronous_commit stays on: off, a commit is acknowledged while its WAL
  # is still in the server's memory, which a crash (the chaos kind
  # postgres-restart) loses — orders the consumer saw committed were gone.
  if ! as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 30 start \
      -o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=$(listen_addrs) -c max_connections=300 -c fsync=off -c full_page_writes=off -c ssl=on -c ssl_cert_file=$PG_TLS/server.crt -c ssl_key_file=$PG_TLS/server.key" >/dev/null
  fi
  record_pid postgres "$(as_root head -1 "$PG_DATA/postmaster.pid")"
  ensure_database "$PG_PORT" "$DB_NAME"
  log "postgres ready on $PG_PORT (database $DB_NAME)"
}

# tls_files: the services' certificate and key, copied where the server
# reads them (plain and TLS connections are both accepted).
tls_files() {
  services_pki
  as_root install -d -m 0700 -o postgres -g postgres "$PG_TLS"
  as_root install -m 0644 -o postgres -g postgres "$SERVICES_PKI/server.crt" "$PG_TLS/server.crt"
  as_root install -m 0600 -o postgres -g postgres "$SERVICES_PKI/server.key" "$PG_TLS/server.key"
}

down() {
  if as_root test -f "$PG_DATA/postmaster.pid"; then
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null 2>&1 || true
  fi
  stop_pid postgres
}

# crash: stop in immediate mode, as a crash would (make chaos); `up` starts
# it again, with crash recovery.
crash() {
  as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
}

# purge: this clone's data, socket and log (make clean), after down.
purge() {
  down
  as_root rm -rf "$PG_HOME"
  rm -f "$LOG_DIR/postgres.log"
}

status() {
  if pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; then echo "postgres       up    127.0.0.1:$PG_PORT/$DB_NAME"; else echo "postgres       DOWN"; fi
}

"${1:-up}"
