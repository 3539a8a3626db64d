#!/usr/bin/env bash
# Proves the nodes work end to end, in a throwaway namespace, with the probe
# image (node/probe.c): a pod runs on the last node; from inside a pod on
# every node, Redis, the Redis Cluster, PostgreSQL, Kafka's bridge listener,
# the `kubernetes` Service, the server pod and its ClusterIP Service answer
# TCP (across nodes, with two), and an outside address is refused; from the
# host, a ClusterIP and a NodePort Service (on every node's address) answer
# HTTP; `kubectl logs` and `kubectl exec` work. Prints the pod start
# latency. Exits non-zero on the first failure. Needs `make up`.
#
#   node-check.sh [--keep]     --keep leaves the namespace for inspection
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NS=flashsale-node-check
NODE_PORT=30999
keep=false
[ "${1:-}" = --keep ] && keep=true

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$RUN_DIR/kubeconfig" "$@"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
pass() { printf '  ok    %s\n' "$*"; }
fail() {
  printf '  FAIL  %s\n' "$*"
  exit 1
}

cleanup() { $keep || kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$NS" >/dev/null
# The namespace's ServiceAccount comes from the controller-manager.
wait_until 30 "the default ServiceAccount in $NS" kubectl -n "$NS" get serviceaccount default

# The nodes, by name and address: node 2 only in the replicated topology.
nodes=() node_ips=()
for n in "${NODE_INDICES[@]}"; do
  [ "$n" = 1 ] || [ "$STACK_TOPOLOGY" = replicated ] || continue
  use_node "$n"
  nodes+=("$NODE_NAME") node_ips+=("$NODE_IP")
done
server_node=${nodes[-1]}

echo "== pods"
t0=$(date +%s%N)
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: $NS, labels: {app: server}}
spec:
  nodeName: $server_node
  containers:
  - name: probe
    image: $PROBE_IMAGE
    imagePullPolicy: IfNotPresent
    args: [serve, "8080", "hello from"]
    ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: $NS}
spec:
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: server-np, namespace: $NS}
spec:
  type: NodePort
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080, nodePort: $NODE_PORT}]
EOF
kubectl -n "$NS" wait --for=condition=Ready pod/server --timeout=60s >/dev/null || fail "pod server not Ready in 60 s"
server_ip=$(kubectl -n "$NS" get pod server -o jsonpath='{.status.podIP}')
pass "pod server Running on $PROBE_IMAGE on $server_node, Ready $(ms_since "$t0") ms after create, IP $server_ip"

cluster_ip=$(kubectl -n "$NS" get service server -o jsonpath='{.spec.clusterIP}')
# client_on NODE IP: a pod on NODE that connects to every target (the
# NodePort on its own node's address IP), run to its end.
client_on() {
  local node=$1 phase t0 targets
  targets=("$BRIDGE_IP:$REDIS_PORT" "$BRIDGE_IP:${REDIS_CLUSTER_PORTS[0]}" "$BRIDGE_IP:$PG_PORT"
    "$BRIDGE_IP:19094" "$FIRST_SERVICE_IP:443" "$cluster_ip:80" "$server_ip:8080" "$2:$NODE_PORT")
  t0=$(date +%s%N)
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client-$node, namespace: $NS}
spec:
  nodeName: $node
  restartPolicy: Never
  containers:
  - name: probe
    image: $PROBE_IMAGE
    imagePullPolicy: IfNotPresent
    args: [connect, $(list=$(printf '%s, ' "${targets[@]}") && echo "${list%, }")]
EOF
  for _ in $(seq 1 300); do
    phase=$(kubectl -n "$NS" get pod "client-$node" -o jsonpath='{.status.phase}')
    case $phase in Succeeded | Failed) break ;; esac
    sleep 0.2
  done
  echo "== from a pod on $node (kubectl logs client-$node)"
  kubectl -n "$NS" logs "client-$node" | sed 's/^/  /'
  [ "$phase" = Succeeded ] || fail "pod client-$node: $phase"
  pass "pod client-$node ran to completion $(ms_since "$t0") ms after create"
}
for i in "${!nodes[@]}"; do client_on "${nodes[$i]}" "${node_ips[$i]}"; done

echo "== isolation"
# Only with the guard in place: without it the packet would leave.
as_root iptables -w -C FORWARD -j FLASHSALE-ISOLATE 2>/dev/null || fail "no FLASHSALE-ISOLATE guard (bridge.sh up)"
out=$(kubectl -n "$NS" exec server -- /usr/local/bin/probe connect 203.0.113.1:9 2>/dev/null || true)
case $out in
  "FAIL "*refused*) pass "a pod's packet to an outside address is rejected on the host (kubectl exec: $out)" ;;
  *) fail "a pod reached outside the machine: $out" ;;
esac

echo "== from the host"
body=$(curl -sS --max-time 3 "http://$cluster_ip/") || fail "ClusterIP $cluster_ip:80"
pass "ClusterIP $cluster_ip:80 -> $body"
for addr in "127.0.0.1:$NODE_PORT" "${node_ips[@]/%/:$NODE_PORT}"; do
  body=$(curl -sS --max-time 3 "http://$addr/") || fail "NodePort $addr"
  pass "NodePort $addr -> $body"
done
# The server prints a request after it answered it, and the node copies a
# container's output to its log file on its own time: the lines may trail
# the answers by a moment.
logged=0
for _ in $(seq 1 25); do
  logged=$(kubectl -n "$NS" logs server 2>&1 | grep -c 'GET / ' || true)
  [ "$logged" -gt 0 ] && break
  sleep 0.2
done
[ "$logged" -gt 0 ] || fail "kubectl logs server shows no request in 5 s: $(kubectl -n "$NS" logs server 2>&1 | tail -5)"
pass "kubectl logs server: $logged requests logged"
echo "node check passed"
