#!/usr/bin/env bash
# A node of the cluster, $NODE_NAME: containerd (Debian's, with its own
# config, root, state and socket under $NODE_DIR), the kubelet and kube-proxy
# (iptables mode). Pods sit on the test bridge ($BRIDGE_NAME, made by
# bridge.sh) and reach the host's services at $BRIDGE_IP, the apiserver
# through the `kubernetes` Service ($FIRST_SERVICE_IP:443).
#
# NODE_INDEX chooses the node (lib.sh's use_node): 1, the one node, in the
# host's network; 2 (STACK_TOPOLOGY=replicated) in the network namespace
# $NODE_NETNS, its own bridge joined to $BRIDGE_NAME by a veth pair, its
# pods under a cgroup root of their own, so a drain or a stopped kubelet
# moves pods between two nodes.
#
#   node.sh up       build what is missing, write the configs and the node's
#                    certificates, start what is not running, import the
#                    pause and probe images, wait until the node is Ready
#   node.sh down     stop the kubelet and kube-proxy, kill every container,
#                    stop containerd, remove the node's iptables chains,
#                    mounts and cgroups, restore the kernel settings (the
#                    images and the Node object stay)
#   node.sh status   one line per component
#
# Images: no registry is reachable; e2e/stack/image.sh builds one from host
# files and imports it. Logs: $LOG_DIR/{containerd,kubelet,kube-proxy}.log.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COMPONENTS=(containerd kubelet kube-proxy)
CNI_BIN_DIR=/usr/lib/cni
CNI_CONF_DIR=$NODE_DIR/cni/net.d
CNI_IPAM_DIR=$NODE_DIR/cni/ipam
KUBELET_DIR=$NODE_DIR/kubelet
POD_LOGS_DIR=$NODE_DIR/pod-logs
KUBELET_KUBECONFIG=$NODE_DIR/kubelet.kubeconfig
PROXY_KUBECONFIG=$NODE_DIR/kube-proxy.kubeconfig
KUBELET_HEALTHZ_PORT=10248
PROXY_HEALTHZ_PORT=10256
PROXY_METRICS_PORT=10249
# Where the kubelet's and kube-proxy's health answers: loopback for the
# host's node; the node's own address for a node in a namespace, so the
# host reaches it without entering the namespace.
HEALTH_IP=127.0.0.1
[ -z "$NODE_NETNS" ] || HEALTH_IP=$NODE_IP
# The namespaced node's bridge and the two ends of its link to $BRIDGE_NAME.
NODE_BRIDGE=fsbr$NODE_INDEX
HOST_VETH=fsn${NODE_INDEX}h
NODE_VETH=fsn${NODE_INDEX}n
# The kubelet and kube-proxy change these; `down` puts the originals back.
NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
  net.netfilter.nf_conntrack_tcp_be_liberal)
# Registries a pod's image name might point at: containerd is told they live
# on a closed loopback port, so a missing image fails at once, locally.
REGISTRIES=(docker.io registry.k8s.io quay.io ghcr.io gcr.io)

kubectl() { "$K8S_BIN/kubectl" --kubeconfig "$RUN_DIR/kubeconfig" "$@"; }
# proc NAME: a component's process name (containerd, containerd-2, ...).
proc() { echo "$1$NODE_SUFFIX"; }
# What runs a command in the node's network namespace (nothing for node 1):
# nsenter, not `ip netns exec`, which remounts /sys for the namespace.
IN_NETNS=()
[ -z "$NODE_NETNS" ] || IN_NETNS=(nsenter --net="/run/netns/$NODE_NETNS" --)
# in_node CMD...: CMD in the node's network namespace.
in_node() {
  if [ -n "$NODE_NETNS" ]; then as_root "${IN_NETNS[@]}" "$@"; else "$@"; fi
}

# ---------------------------------------------------------- health ----

containerd_ok() { node_ctr version >/dev/null 2>&1; }
kubelet_ok() { [ "$(curl -sS --max-time 2 "http://$HEALTH_IP:$KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null)" = ok ]; }
proxy_ok() { curl -fsS --max-time 2 "http://$HEALTH_IP:$PROXY_HEALTHZ_PORT/healthz" >/dev/null 2>&1; }
# node_ready [SINCE]: the Node is Ready, by a heartbeat at or after SINCE
# (RFC 3339, UTC) when given: the Node object stays Ready for 40 s after its
# kubelet stopped, so only a fresh heartbeat says the new kubelet is up.
node_ready() {
  local cond
  cond=$(kubectl --request-timeout=2s get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null) || return 1
  [ "${cond%% *}" = True ] && [[ ! "${cond#* }" < "${1:-}" ]]
}
healthy() {
  case $1 in
    containerd) containerd_ok ;;
    kubelet) kubelet_ok ;;
    kube-proxy) proxy_ok ;;
  esac
}

# ------------------------------------------------------------ files ----

# The node's certificates, from the cluster CA (kube.sh's PKI). Reissued
# when missing or not signed by the current CA.
ensure_node_pki() {
  local f need=false
  [ -f "$PKI/ca.key" ] || die "no cluster CA in $PKI: run kube.sh up first"
  for f in "kubelet$NODE_SUFFIX" "kubelet-serving$NODE_SUFFIX" kube-proxy; do
    openssl verify -CAfile "$PKI/ca.crt" "$PKI/$f.crt" >/dev/null 2>&1 || need=true
  done
  $need || return 0
  (
    cd "$PKI"
    umask 077
    issue ca "kubelet$NODE_SUFFIX" "/O=system:nodes/CN=system:node:$NODE_NAME" "$CLIENT_EXT"
    issue ca "kubelet-serving$NODE_SUFFIX" "/O=system:nodes/CN=system:node:$NODE_NAME" "basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$NODE_NAME, IP:$NODE_IP"
    issue ca kube-proxy "/CN=system:kube-proxy" "$CLIENT_EXT"
  ) || die "issuing the node's certificates failed"
  log "node certificates issued in $PKI"
}

write_containerd_config() {
  local r
  mkdir -p "$CONTAINERD_DIR/root" "$CONTAINERD_DIR/state" "$CONTAINERD_DIR/certs.d" \
    "$CONTAINERD_DIR/opt" "$CNI_CONF_DIR" "$CNI_IPAM_DIR"
  for r in "${REGISTRIES[@]}"; do
    mkdir -p "$CONTAINERD_DIR/certs.d/$r"
    # containerd 1.6 rejects a hosts.toml without a [host] table.
    cat >"$CONTAINERD_DIR/certs.d/$r/hosts.toml" <<'EOF'
# No registry is reachable: fail fast on this closed loopback port.
server = "http://127.0.0.1:9"

[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
  done
  cat >"$CONTAINERD_DIR/config.toml" <<EOF
# Written by e2e/stack/node.sh.
version = 2
root = "$CONTAINERD_DIR/root"
state = "$CONTAINERD_DIR/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_DIR/opt"

# Unused, but the task service needs it loaded: keep it in our directories.
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "$CONTAINERD_DIR/runc-v1"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Without it every pod sandbox fails on this machine kind.
  restrict_oom_score_adj = true
  # Network namespaces under our state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CONTAINERD_DIR/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CONTAINERD_DIR/certs.d"
EOF
  # Node N's pods get 198.18.N.1-254; 198.18.0.0/24 holds the nodes'
  # own addresses. The host's bridge is every pod's gateway.
  local bridge=$BRIDGE_NAME is_gateway=true
  [ -z "$NODE_NETNS" ] || bridge=$NODE_BRIDGE is_gateway=false
  cat >"$CNI_CONF_DIR/10-flashsale.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "flashsale",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": $is_gateway,
      "hairpinMode": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CNI_IPAM_DIR",
        "ranges": [[{ "subnet": "$POD_CIDR", "rangeStart": "${NODE_POD_RANGE[0]}", "rangeEnd": "${NODE_POD_RANGE[1]}", "gateway": "$BRIDGE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
}

write_kubelet_config() {
  mkdir -p "$KUBELET_DIR" "$POD_LOGS_DIR"
  cat >"$NODE_DIR/kubelet.yaml" <<EOF
# Written by e2e/stack/node.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $HEALTH_IP
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving$NODE_SUFFIX.crt
tlsPrivateKeyFile: $PKI/kubelet-serving$NODE_SUFFIX.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$NODE_CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
podLogsDir: $POD_LOGS_DIR
volumePluginDir: $KUBELET_DIR/volume-plugins
enforceNodeAllocatable: []
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
EOF
}

write_proxy_config() {
  cat >"$NODE_DIR/kube-proxy.yaml" <<EOF
# Written by e2e/stack/node.sh.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
clientConnection:
  kubeconfig: $PROXY_KUBECONFIG
healthzBindAddress: $HEALTH_IP:$PROXY_HEALTHZ_PORT
metricsBindAddress: $HEALTH_IP:$PROXY_METRICS_PORT
# NodePorts answer on loopback and the bridge only, never on eth0.
nodePortAddresses: [127.0.0.1/32, $NODE_IP/32]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: true
  minSyncPeriod: 1s
  syncPeriod: 30s
EOF
}

# build_c NAME: $IMAGES_DIR/bin/NAME from node/NAME.c, static, when stale.
build_c() {
  local src=$STACK_DIR/node/$1.c bin=$IMAGES_DIR/bin/$1
  mkdir -p "$IMAGES_DIR/bin"
  [ -x "$bin" ] && [ "$bin" -nt "$src" ] && return 0
  command -v gcc >/dev/null || die "gcc not found (install.sh installs it)"
  gcc -static -O2 -s -Wall -o "$bin.tmp" "$src" || die "building $src failed"
  mv "$bin.tmp" "$bin"
}

# The pause image (the pod sandbox) and the probe image (tests, checks).
ensure_images() {
  build_c pause
  build_c probe
  "$STACK_DIR/image.sh" pause "${PAUSE_IMAGE##*:}" "$IMAGES_DIR/bin/pause" /usr/local/bin/pause >/dev/null
  "$STACK_DIR/image.sh" -c sleep probe "${PROBE_IMAGE##*:}" "$IMAGES_DIR/bin/probe" >/dev/null
}

# ------------------------------------------------ a node's own place ----

# The namespace, its bridge (the node's address on it), and the veth pair
# that joins it to the host's bridge: one L2 segment, so pods of both nodes,
# the nodes and the host's services reach each other directly. Nothing in
# the namespace has another way out: everything it sends crosses
# $BRIDGE_NAME, under bridge.sh's guard.
netns_up() {
  [ -e "/run/netns/$NODE_NETNS" ] || as_root ip netns add "$NODE_NETNS"
  ip link show dev "$HOST_VETH" >/dev/null 2>&1 ||
    as_root ip link add "$HOST_VETH" type veth peer name "$NODE_VETH" netns "$NODE_NETNS"
  as_root sysctl -qw "net.ipv6.conf.$HOST_VETH.disable_ipv6=1"
  as_root ip link set dev "$HOST_VETH" master "$BRIDGE_NAME" up
  in_node ip link show dev "$NODE_BRIDGE" >/dev/null 2>&1 || in_node ip link add name "$NODE_BRIDGE" type bridge
  in_node ip link set dev "$NODE_BRIDGE" address "$(bridge_mac "$NODE_INDEX")" # see bridge.sh
  in_node sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=1
  # Bridged pod traffic through iptables, as on the host (Services' hairpin).
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  in_node ip link set dev "$NODE_VETH" master "$NODE_BRIDGE" up
  in_node ip addr replace "$NODE_IP/${POD_CIDR#*/}" dev "$NODE_BRIDGE"
  in_node ip link set dev "$NODE_BRIDGE" up
  in_node ip link set dev lo up
  in_node ip route replace default via "$BRIDGE_IP"
}

# The namespace and, with it, its veth pair, bridge and iptables rules
# (once the last process in it is gone).
netns_down() {
  [ -e "/run/netns/$NODE_NETNS" ] && as_root ip netns del "$NODE_NETNS"
  as_root ip link del dev "$HOST_VETH" 2>/dev/null || true
}

# The kubelet insists its cgroup root exists in every hierarchy (cgroup v1
# here); a new cpuset takes its parent's CPUs and memory nodes.
cgroup_root_up() {
  local h d
  for h in /sys/fs/cgroup/*/; do
    d=$h$NODE_CGROUP_ROOT
    [ -d "$d" ] || as_root mkdir "$d"
    if [ -f "$h/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
      as_root tee "$d/cpuset.cpus" <"$h/cpuset.cpus" >/dev/null
      as_root tee "$d/cpuset.mems" <"$h/cpuset.mems" >/dev/null
    fi
  done
}

# The node's cgroup directories: node 1's kubepods, another node's root.
node_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/"${NODE_CGROUP_ROOT:-kubepods}" /sys/fs/cgroup/"${NODE_CGROUP_ROOT:-kubepods}"; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

# ---------------------------------------------------------- commands ----

# start_in_node COMPONENT CMD...: start_bg in the node's namespace, under
# the component's process name (nsenter execs CMD: its pid is CMD's).
start_in_node() {
  local name
  name=$(proc "$1")
  shift
  start_bg "$name" "${IN_NETNS[@]}" "$@"
}

start_kubelet() {
  start_in_node kubelet "$K8S_BIN/kubelet" \
    --config="$NODE_DIR/kubelet.yaml" \
    --kubeconfig="$KUBELET_KUBECONFIG" \
    --root-dir="$KUBELET_DIR" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP"
}

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

up() {
  local t0 all_up=true c since
  t0=$(date +%s.%N)
  for c in "${COMPONENTS[@]}"; do is_running "$(proc "$c")" && healthy "$c" || all_up=false; done
  if $all_up && node_ready ""; then
    ensure_images
    log "node $NODE_NAME already up"
    return 0
  fi

  "$STACK_DIR/build-k8s.sh" node
  "$STACK_DIR/bridge.sh" up
  [ "$(kubectl --request-timeout=5s get --raw /readyz 2>/dev/null)" = ok ] ||
    die "the apiserver at $APISERVER_URL is not ready: run kube.sh up first"
  for c in "$CNI_BIN_DIR"/{bridge,host-local,portmap,loopback}; do
    [ -x "$c" ] || die "$c missing (install.sh installs containernetworking-plugins)"
  done
  mkdir -p "$NODE_DIR"
  if [ -n "$NODE_NETNS" ]; then netns_up && cgroup_root_up; fi
  ensure_node_pki
  write_kubeconfig "$KUBELET_KUBECONFIG" "system:node:$NODE_NAME" "kubelet$NODE_SUFFIX"
  write_kubeconfig "$PROXY_KUBECONFIG" system:kube-proxy kube-proxy
  write_containerd_config
  write_kubelet_config
  write_proxy_config
  # The kernel-wide settings the kubelet changes, once, by the host's node.
  [ -n "$NODE_NETNS" ] || record_sysctls node "${NODE_SYSCTLS[@]}"

  start_in_node containerd containerd --config "$CONTAINERD_DIR/config.toml"
  wait_until 30 containerd containerd_ok
  ensure_images

  if ! is_running "$(proc kubelet)" && [ -n "$(in_node ss -Hltn "sport = :10250")" ]; then
    die "port 10250 for the kubelet is taken by another process"
  fi
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  start_kubelet
  start_in_node kube-proxy "$K8S_BIN/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml"

  wait_until 60 kubelet kubelet_ok
  wait_until 60 "node $NODE_NAME Ready" node_ready "$since"
  wait_until 60 kube-proxy proxy_ok
  log "node $NODE_NAME ready in $(elapsed "$t0") s"
}

# kill_containers: every task of our containerd killed and deleted, every
# container record removed (the kubelet makes new ones on the next `up`).
kill_containers() {
  local ns id ids
  for ns in $(node_ctr namespaces ls -q 2>/dev/null); do
    mapfile -t ids < <(node_ctr -n "$ns" tasks ls -q 2>/dev/null)
    for id in "${ids[@]}"; do
      node_ctr -n "$ns" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in "${ids[@]}"; do
      node_ctr -n "$ns" tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    mapfile -t ids < <(node_ctr -n "$ns" containers ls -q 2>/dev/null)
    for id in "${ids[@]}"; do
      node_ctr -n "$ns" containers delete "$id" >/dev/null 2>&1 || true
    done
    [ ${#ids[@]} -eq 0 ] || log "removed ${#ids[@]} containers in namespace $ns"
  done
}

# our_shims: pids of containerd shims serving our containerd's socket.
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $CONTAINERD_SOCK " && echo "${p#/proc/}"
  done
  return 0
}

# Processes left in the node's cgroups (a container whose shim died).
cgroup_procs() {
  local dirs
  mapfile -t dirs < <(node_cgroups)
  [ ${#dirs[@]} -eq 0 ] || find "${dirs[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}

kill_leftovers() {
  local pid pids any
  mapfile -t pids < <(our_shims; cgroup_procs)
  [ ${#pids[@]} -gt 0 ] || return 0
  log "killing leftover shims and container processes: ${pids[*]}"
  for pid in "${pids[@]}"; do as_root kill -KILL "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    any=false
    for pid in "${pids[@]}"; do alive "$pid" && any=true; done
    $any || break
    sleep 0.1
  done
}

# Every mount under $NODE_DIR (pod volumes, container root file systems,
# network namespaces), deepest first.
unmount_all() {
  local m n=0
  while read -r m; do
    as_root umount "$m" 2>/dev/null || as_root umount -l "$m" 2>/dev/null || log "cannot unmount $m"
    n=$((n + 1))
  done < <(awk -v d="$NODE_DIR/" 'index($5, d) == 1 { print length($5) "\t" $5 }' /proc/self/mountinfo |
    sort -rn | cut -f2-)
  [ "$n" -eq 0 ] || log "unmounted $n mounts under $NODE_DIR"
}

remove_cgroups() {
  local d
  while read -r d; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done < <(node_cgroups)
  return 0
}

# The chains kube-proxy, the kubelet (KUBE-*) and CNI's portmap (CNI-*) made,
# in every table of both families, and the jumps to them.
clean_iptables() {
  local ipt table line chains rule
  "$K8S_BIN/kube-proxy" --cleanup >>"$LOG_DIR/kube-proxy.log" 2>&1 || true
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      mapfile -t chains < <(as_root "$ipt" -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ { print $2 }')
      while read -r line; do
        eval "rule=(${line/#-A/-D})" # iptables -S quotes comments
        as_root "$ipt" -w -t "$table" "${rule[@]}" 2>/dev/null || true
      done < <(as_root "$ipt" -w -t "$table" -S 2>/dev/null | grep -E -- '^-A [A-Z]+ .*-j (KUBE|CNI)-')
      for line in "${chains[@]}"; do as_root "$ipt" -w -t "$table" -F "$line" 2>/dev/null || true; done
      for line in "${chains[@]}"; do as_root "$ipt" -w -t "$table" -X "$line" 2>/dev/null || true; done
    done
  done
}

down() {
  local was_up=false
  for c in "${COMPONENTS[@]}"; do [ -f "$(pid_file "$(proc "$c")")" ] && was_up=true; done
  stop_pid "$(proc kube-proxy)"
  stop_pid "$(proc kubelet)"
  if is_running "$(proc containerd)"; then kill_containers; fi
  stop_pid "$(proc containerd)"
  kill_leftovers
  unmount_all
  remove_cgroups
  # A namespaced node's rules go with its namespace.
  if [ -n "$NODE_NETNS" ]; then netns_down; else clean_iptables; fi
  # The pods are gone: so are their addresses, and their log links.
  rm -rf "${CNI_IPAM_DIR:?}"/*
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$POD_LOGS_DIR/*" -delete 2>/dev/null || true
  fi
  # Directories the kubelet and the shims insist on, when nothing else uses
  # them (empty).
  rmdir /var/log/containers /run/containerd/s /run/containerd 2>/dev/null || true
  [ -n "$NODE_NETNS" ] || restore_sysctls node
  if $was_up; then log "node $NODE_NAME down"; else log "node not running"; fi
}

status() {
  local c pid name
  for c in "${COMPONENTS[@]}"; do
    name=$(proc "$c")
    if is_running "$name"; then
      pid=$(cat "$(pid_file "$name")")
      if healthy "$c"; then
        printf '%-24s running (pid %s), healthy\n' "$name" "$pid"
      else
        printf '%-24s running (pid %s), UNHEALTHY  see %s\n' "$name" "$pid" "$LOG_DIR/$name.log"
      fi
    else
      printf '%-24s stopped\n' "$name"
    fi
  done
  if node_ready ""; then
    printf '%-24s Ready, %s pods\n' "node $NODE_NAME" \
      "$(kubectl get pods -A --field-selector "spec.nodeName=$NODE_NAME" --no-headers 2>/dev/null | wc -l)"
  else
    printf '%-24s NOT READY\n' "node $NODE_NAME"
  fi
}

# crash CONTAINER_ID: SIGKILLs a container's processes, as a crash does,
# on whichever node runs it. Deleting its pod cannot: the kubelet sends
# SIGTERM first, however short the grace, and a consumer that gets it
# leaves its group cleanly.
crash() {
  local n
  for n in "${NODE_INDICES[@]}"; do
    use_node "$n"
    node_ctr -n k8s.io tasks kill -a -s SIGKILL "$1" >/dev/null 2>&1 && return 0
  done
  die "no node runs container $1"
}

# index_of NAME: the index of the node called NAME (kubectl's name).
index_of() {
  local n
  for n in "${NODE_INDICES[@]}"; do
    use_node "$n"
    if [ "$NODE_NAME" = "$1" ]; then
      echo "$n"
      return 0
    fi
  done
  die "no node $1 here"
}

# kubelet_stop: stops the node's kubelet and nothing else, as a kubelet
# that died or hung would: its containers and kube-proxy keep running; the
# control plane marks the node NotReady after its grace period.
kubelet_stop() {
  stop_pid "$(proc kubelet)"
  log "kubelet of $NODE_NAME stopped; its containers run on"
}

# kubelet_start: starts the node's kubelet again and waits until the node
# is Ready (the kubelet adopts the containers that ran on).
kubelet_start() {
  local since
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  start_kubelet
  wait_until 60 kubelet kubelet_ok
  wait_until 90 "node $NODE_NAME Ready" node_ready "$since"
}

case ${1:-} in
  up) up ;;
  crash) crash "${2:?usage: $0 crash CONTAINER_ID}" ;;
  kubelet_stop | kubelet_start)
    # NODE by its name: every path above is the node of NODE_INDEX's, so
    # another node's runs this script again as that node.
    n=$(index_of "${2:?usage: $0 $1 NODE}")
    if [ "$n" != "$NODE_INDEX" ]; then NODE_INDEX=$n exec "$0" "$@"; fi
    "$1"
    ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status|crash CONTAINER_ID|kubelet_stop NODE|kubelet_start NODE" ;;
esac
