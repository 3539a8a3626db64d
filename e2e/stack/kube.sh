#!/usr/bin/env bash
# A real local Kubernetes control plane: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler. All on loopback except the
# apiserver, which serves on the test bridge ($APISERVER_URL), the one
# address both the host and the pods reach (bridge.sh makes it).
#
#   kube.sh up       build what is missing, create the PKI and kubeconfigs
#                    once, start what is not running, wait until ready
#   kube.sh down     stop what `up` started (by pid), keep the data
#   kube.sh status   one line per component: running/stopped, healthy or not
#
# Admin kubeconfig: $RUN_DIR/kubeconfig. Logs: $LOG_DIR/<component>.log.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBECONFIG_ADMIN=$RUN_DIR/kubeconfig
KUBECONFIG_KCM=$RUN_DIR/kube-controller-manager.kubeconfig
KUBECONFIG_SCHED=$RUN_DIR/kube-scheduler.kubeconfig
ETCD_DATA=$RUN_DIR/etcd
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# ---------------------------------------------------------------- PKI ----

PKI_FILES=(ca.crt ca.key apiserver.crt apiserver.key admin.crt admin.key
  kube-controller-manager.crt kube-controller-manager.key
  kube-scheduler.crt kube-scheduler.key
  apiserver-kubelet-client.crt apiserver-kubelet-client.key
  front-proxy-ca.crt front-proxy-ca.key
  front-proxy-client.crt front-proxy-client.key sa.key sa.pub)

# A throwaway PKI for test clusters, created once. It is built in a
# temporary directory and renamed into place, so it is either whole or absent.
# An incomplete one (from an older version of this script) is replaced, and
# with it the kubeconfigs that embed its certificates.
ensure_pki() {
  local f tmp client server complete=true
  for f in "${PKI_FILES[@]}"; do [ -f "$PKI/$f" ] || complete=false; done
  $complete && return 0
  tmp=$(mktemp -d "$RUN_DIR/.pki.XXXXXX")
  (
    cd "$tmp"
    umask 077
    new_ca ca flashsale-test-ca
    # The aggregation layer's own CA: the apiserver proxies to extension
    # apiservers (metrics-server, ...) with a client cert from it.
    new_ca front-proxy-ca flashsale-test-front-proxy-ca
    client=$CLIENT_EXT
    server="basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, IP:127.0.0.1, IP:$BRIDGE_IP, IP:$FIRST_SERVICE_IP"
    issue ca apiserver "/CN=kube-apiserver" "$server"
    issue ca admin "/O=system:masters/CN=flashsale-admin" "$client"
    issue ca kube-controller-manager "/CN=system:kube-controller-manager" "$client"
    issue ca kube-scheduler "/CN=system:kube-scheduler" "$client"
    issue ca apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
    issue front-proxy-ca front-proxy-client "/CN=front-proxy-client" "$client"
    # The service-account token signing key pair.
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  ) || { rm -rf "$tmp"; die "creating the PKI failed"; }
  rm -rf "$PKI" "$KUBECONFIG_ADMIN" "$KUBECONFIG_KCM" "$KUBECONFIG_SCHED"
  mv "$tmp" "$PKI"
  log "PKI created in $PKI"
}

# ------------------------------------------------------------- health ----

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { [ "$(kubectl --request-timeout=2s get --raw /readyz 2>/dev/null)" = ok ]; }
# The controller-manager and the scheduler serve /healthz to anyone.
healthz() { [ "$(curl -ksS --max-time 2 "https://127.0.0.1:$1/healthz" 2>/dev/null)" = ok ]; }
kcm_healthy() { healthz "$CONTROLLER_MANAGER_PORT"; }
scheduler_healthy() { healthz "$SCHEDULER_PORT"; }
# The controller-manager works once it has created the default ServiceAccount.
default_sa_exists() { kubectl --request-timeout=2s -n default get serviceaccount default; }

healthy() {
  case $1 in
    etcd) etcd_healthy ;;
    kube-apiserver) apiserver_ready ;;
    kube-controller-manager) kcm_healthy ;;
    kube-scheduler) scheduler_healthy ;;
  esac
}

# port_free NAME PORT: refuse to start NAME when someone else holds PORT.
port_free() {
  is_running "$1" && return 0
  if [ -n "$(ss -Hltn "sport = :$2")" ]; then
    die "port $2 for $1 is taken by another process: $(ss -Hltnp "sport = :$2" | awk '{print $NF}')"
  fi
}

# ------------------------------------------------------------ commands ----

up() {
  local t0 all_up=true c
  t0=$(date +%s.%N)
  # A control plane started by an older version of this script serves on
  # loopback, and its clients' kubeconfigs say so: restart it on the bridge.
  if is_running kube-apiserver && ! listening "$BRIDGE_IP" "$APISERVER_PORT"; then
    log "kube-apiserver does not serve on $BRIDGE_IP:$APISERVER_PORT, restarting the control plane there"
    stop_pid kube-scheduler
    stop_pid kube-controller-manager
    stop_pid kube-apiserver
  fi
  for c in "${COMPONENTS[@]}"; do is_running "$c" && healthy "$c" || all_up=false; done
  if $all_up && default_sa_exists >/dev/null 2>&1; then
    log "control plane already running, kubeconfig $KUBECONFIG_ADMIN"
    return 0
  fi

  "$STACK_DIR/build-k8s.sh" control-plane
  "$STACK_DIR/bridge.sh" up
  ensure_pki
  write_kubeconfig "$KUBECONFIG_ADMIN" admin admin
  write_kubeconfig "$KUBECONFIG_KCM" system:kube-controller-manager kube-controller-manager
  write_kubeconfig "$KUBECONFIG_SCHED" system:kube-scheduler kube-scheduler

  # Test data only: no fsync. An existing data directory is reused.
  port_free etcd "$ETCD_PORT"
  port_free etcd "$ETCD_PEER_PORT"
  start_bg etcd "$ETCD_BIN/etcd" \
    --name=flashsale \
    --data-dir="$ETCD_DATA" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="flashsale=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync
  wait_until 60 etcd etcd_healthy

  # Serves on the bridge address only (--bind-address takes one address):
  # pods reach it there through the `kubernetes` Service, whose endpoint is
  # the advertised address, and the host and every kubeconfig use it too.
  port_free kube-apiserver "$APISERVER_PORT"
  start_bg kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$BRIDGE_IP" \
    --advertise-address="$BRIDGE_IP" \
    --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true
  wait_until 90 kube-apiserver apiserver_ready

  port_free kube-controller-manager "$CONTROLLER_MANAGER_PORT"
  start_bg kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_KCM" \
    --authentication-kubeconfig="$KUBECONFIG_KCM" \
    --authorization-kubeconfig="$KUBECONFIG_KCM" \
    --bind-address=127.0.0.1 \
    --secure-port="$CONTROLLER_MANAGER_PORT" \
    --leader-elect=false \
    --controllers='*,-nodeipam' \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key"

  port_free kube-scheduler "$SCHEDULER_PORT"
  start_bg kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig="$KUBECONFIG_SCHED" \
    --authentication-kubeconfig="$KUBECONFIG_SCHED" \
    --authorization-kubeconfig="$KUBECONFIG_SCHED" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false

  wait_until 60 kube-controller-manager kcm_healthy
  wait_until 60 kube-scheduler scheduler_healthy
  wait_until 60 "the default ServiceAccount" default_sa_exists
  log "control plane ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s; export KUBECONFIG=$KUBECONFIG_ADMIN"
}

down() {
  local i stopped=false
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    if [ -f "$(pid_file "${COMPONENTS[i]}")" ]; then
      stopped=true
      stop_pid "${COMPONENTS[i]}"
    fi
  done
  $stopped || log "control plane not running"
  return 0
}

status() {
  local c pid addr
  for c in "${COMPONENTS[@]}"; do
    case $c in
      etcd) addr=http://127.0.0.1:$ETCD_PORT ;;
      kube-apiserver) addr=$APISERVER_URL ;;
      kube-controller-manager) addr=https://127.0.0.1:$CONTROLLER_MANAGER_PORT ;;
      kube-scheduler) addr=https://127.0.0.1:$SCHEDULER_PORT ;;
    esac
    if is_running "$c"; then
      pid=$(cat "$(pid_file "$c")")
      if healthy "$c"; then
        printf '%-24s running (pid %s), healthy    %s\n' "$c" "$pid" "$addr"
      else
        printf '%-24s running (pid %s), UNHEALTHY  see %s\n' "$c" "$pid" "$LOG_DIR/$c.log"
      fi
    else
      printf '%-24s stopped\n' "$c"
    fi
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
