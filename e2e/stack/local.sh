#!/usr/bin/env bash
# The local loop: the operator, the shopper API (development identity on,
# loopback only) and one consumer for every sale, run as host processes from
# the debug build for the `default` namespace, so that
#   kubectl apply -f examples/flashsale.yaml; curl $FLASHSALE_API_URL/...
# is a live sale. Other namespaces are left to other operators (tests, the
# demo's in-cluster one). Usage: local.sh up|down|status
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

NAMESPACE=default
BIN=${FLASHSALE_BIN:-$REPO_DIR/target/debug}
REDIS=redis://127.0.0.1:$REDIS_PORT
DATABASE=postgres://postgres@127.0.0.1:$PG_PORT/flashsale
KAFKA=127.0.0.1:$KAFKA_PORT

up() {
  for b in flashsale flashsale-operator; do
    [ -x "$BIN/$b" ] || die "$BIN/$b is missing: build it first (make build)"
  done
  # The operator's Jobs and consumer Deployments run this image on the node.
  "$STACK_DIR/image.sh" flashsale dev "$BIN/flashsale" >/dev/null
  export KUBECONFIG=$RUN_DIR/kubeconfig FLASHSALE_REDIS=$REDIS DATABASE_URL=$DATABASE KAFKA_BOOTSTRAP=$KAFKA
  "$BIN/flashsale" migrate >/dev/null
  "$K8S_BIN/kubectl" apply --server-side --field-manager=flashsale-operator -f "$REPO_DIR/crds/flashsale.yaml" >/dev/null
  start_bg operator env \
    FLASHSALE_POD_REDIS="redis://$BRIDGE_IP:$REDIS_PORT" \
    FLASHSALE_POD_DATABASE_URL="postgres://postgres@$BRIDGE_IP:$PG_PORT/flashsale" \
    FLASHSALE_POD_KAFKA="$BRIDGE_IP:19094" \
    FLASHSALE_WORKLOAD_IMAGE="$IMAGE_PREFIX/flashsale:dev" MALLOC_ARENA_MAX=2 \
    "$BIN/flashsale-operator" --watch-namespace "$NAMESPACE" --lease-namespace "$NAMESPACE" \
    --listen "127.0.0.1:$OPERATOR_PORT"
  # The payment provider's callback secret: sign a callback with it to pay
  # (docs: README, "Paying").
  # And the one purchase tokens (spec.antiBot) are signed with.
  for secret in payment-secret purchase-token-secret; do
    [ -s "$RUN_DIR/$secret" ] || head -c 36 /dev/urandom | base64 >"$RUN_DIR/$secret"
    chmod 600 "$RUN_DIR/$secret"
  done
  start_bg api "$BIN/flashsale" api --namespace "$NAMESPACE" --dev-identity \
    --payment-secret-file "$RUN_DIR/payment-secret" \
    --purchase-token-secret-file "$RUN_DIR/purchase-token-secret" --rate-limit-ip 0 \
    --listen "127.0.0.1:$API_PORT" --internal-listen "127.0.0.1:$API_INTERNAL_PORT"
  start_bg consumer "$BIN/flashsale" consumer --all-sales --namespace "$NAMESPACE"
  wait_until 30 "the shopper API" curl -fsS "http://127.0.0.1:$API_INTERNAL_PORT/healthz"
  wait_until 30 "the operator" curl -fsS "http://127.0.0.1:$OPERATOR_PORT/healthz"
  log "local loop up: API http://127.0.0.1:$API_PORT serving namespace $NAMESPACE (metrics on :$API_INTERNAL_PORT)"
}

down() {
  stop_pid consumer
  stop_pid api
  stop_pid operator
}

status() {
  local p
  for p in operator api consumer; do
    if is_running "$p"; then echo "local-$p$(printf '%*s' $((8 - ${#p})) '') up    pid $(cat "$(pid_file "$p")")"; else echo "local-$p DOWN"; fi
  done
}

"${1:-up}"
