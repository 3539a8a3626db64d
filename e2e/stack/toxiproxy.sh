#!/usr/bin/env bash
# Toxiproxy (Shopify's TCP fault proxy, built from the Go module proxy) in
# front of Redis, Kafka and PostgreSQL: a test or a chaos run connects a part
# through it and makes that service slow (latency on its replies, a stalled
# connection) without touching the service or the product's code. With no
# toxic set, the proxies only forward.
#
#   toxiproxy.sh up|down|status
#
# Proxies (name: listen -> upstream), addresses in $ENV_FILE:
#   redis:    127.0.0.1:$REDIS_PROXY_PORT -> the Redis node
#   kafka:    127.0.0.1:$KAFKA_PROXY_PORT -> the broker's PROXIED listener
#             (advertised here, so every connection stays behind the proxy)
#   postgres: 127.0.0.1:$PG_PROXY_PORT    -> PostgreSQL
#   postgres-pods: $BRIDGE_IP:$PG_PROXY_PORT -> PostgreSQL, for the pods
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

API=http://127.0.0.1:$TOXIPROXY_PORT
CONFIG=$RUN_DIR/toxiproxy.json

build() {
  [ -x "$TOXIPROXY_BIN/toxiproxy-server" ] && return 0
  local go tmp
  go=$(command -v go || echo /usr/local/go/bin/go)
  mkdir -p "$TOXIPROXY_BIN"
  tmp=$(mktemp -d "$TOXIPROXY_BIN/.tmp.XXXXXX")
  log "building toxiproxy v$TOXIPROXY_VERSION from the Go module proxy"
  GOMODCACHE=$CACHE_DIR/go/mod GOCACHE=$CACHE_DIR/go/build GOWORK=off GOTOOLCHAIN=local \
    CGO_ENABLED=0 GOBIN=$tmp "$go" install -trimpath -ldflags "-s -w" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@v$TOXIPROXY_VERSION"
  mv -f "$tmp/server" "$TOXIPROXY_BIN/toxiproxy-server"
  rm -rf "$tmp"
}

write_config() {
  cat >"$CONFIG" <<JSON
[
  {"name": "redis", "listen": "127.0.0.1:$REDIS_PROXY_PORT", "upstream": "127.0.0.1:$REDIS_PORT", "enabled": true},
  {"name": "kafka", "listen": "127.0.0.1:$KAFKA_PROXY_PORT", "upstream": "127.0.0.1:$KAFKA_PROXIED_PORT", "enabled": true},
  {"name": "postgres", "listen": "127.0.0.1:$PG_PROXY_PORT", "upstream": "127.0.0.1:$PG_PORT", "enabled": true},
  {"name": "postgres-pods", "listen": "$BRIDGE_IP:$PG_PROXY_PORT", "upstream": "127.0.0.1:$PG_PORT", "enabled": true}
]
JSON
}

proxies_ok() { [ "$(curl -fsS "$API/proxies" | grep -o '"name"' | wc -l)" -ge 4 ]; }

up() {
  build
  if is_running toxiproxy; then
    log "toxiproxy already running"
    return 0
  fi
  write_config
  start_bg toxiproxy "$TOXIPROXY_BIN/toxiproxy-server" -host 127.0.0.1 -port "$TOXIPROXY_PORT" \
    -config "$CONFIG"
  wait_until 30 toxiproxy proxies_ok
  log "toxiproxy ready on $TOXIPROXY_PORT (redis $REDIS_PROXY_PORT, kafka $KAFKA_PROXY_PORT, postgres $PG_PROXY_PORT)"
}

down() { stop_pid toxiproxy; }

status() {
  if proxies_ok 2>/dev/null; then echo "toxiproxy      up    127.0.0.1:$TOXIPROXY_PORT"; else echo "toxiproxy      DOWN"; fi
}

"${@:-up}"
