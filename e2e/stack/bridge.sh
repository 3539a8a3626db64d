#!/usr/bin/env bash
# The test bridge: the one network the cluster's pods live on, and the
# address ($BRIDGE_IP) through which they reach the host's services. Made
# before anything else so Redis, PostgreSQL, Kafka and the apiserver can bind
# it too.
#
#   bridge.sh up      create $BRIDGE_NAME with $BRIDGE_IP/16, route the
#                     service range to it, enable forwarding (idempotent)
#   bridge.sh down    undo all of it, restoring the kernel settings it changed
#   bridge.sh status  one line
#
# Nothing may leave the machine: the service range is routed onto the bridge
# (an unprogrammed ClusterIP never takes the default route), and a FORWARD
# guard rejects whatever a pod sends anywhere but the bridge itself (and the
# reverse), so forwarding, needed for Services, routes nothing outside.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GUARD_CHAIN=FLASHSALE-ISOLATE
PREFIX_LEN=${POD_CIDR#*/}

# guard_rules: the guard chain's rules, as iptables arguments, one per line.
guard_rules() {
  echo "-i $BRIDGE_NAME ! -o $BRIDGE_NAME -j REJECT"
  echo "-o $BRIDGE_NAME ! -i $BRIDGE_NAME -j REJECT"
}

guard_up() {
  local rule
  as_root iptables -w -N "$GUARD_CHAIN" 2>/dev/null || true
  while read -r rule; do
    # shellcheck disable=SC2086 # a rule is several words
    as_root iptables -w -C "$GUARD_CHAIN" $rule 2>/dev/null || as_root iptables -w -A "$GUARD_CHAIN" $rule
  done < <(guard_rules)
  as_root iptables -w -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null || as_root iptables -w -I FORWARD 1 -j "$GUARD_CHAIN"
}

guard_down() {
  while as_root iptables -w -D FORWARD -j "$GUARD_CHAIN" 2>/dev/null; do :; done
  as_root iptables -w -F "$GUARD_CHAIN" 2>/dev/null || true
  as_root iptables -w -X "$GUARD_CHAIN" 2>/dev/null || true
}

up() {
  local was_up=false
  bridge_up && ip route show "$SERVICE_CIDR" | grep -q "dev $BRIDGE_NAME" &&
    as_root iptables -w -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null && was_up=true
  if ! ip link show dev "$BRIDGE_NAME" >/dev/null 2>&1; then
    as_root ip link add name "$BRIDGE_NAME" type bridge
    log "bridge $BRIDGE_NAME created"
  fi
  # IPv4 only: no IPv6 link-local chatter from the bridge.
  [ -e "/proc/sys/net/ipv6/conf/$BRIDGE_NAME/disable_ipv6" ] && set_sysctl bridge "net.ipv6.conf.$BRIDGE_NAME.disable_ipv6" 1
  # A fixed address: a bridge left to itself takes its lowest port's, so a
  # pod coming or going could change the gateway's MAC under every other
  # pod, whose ARP entries would then send to nowhere for up to a minute.
  as_root ip link set dev "$BRIDGE_NAME" address "$(bridge_mac 1)"
  bridge_up || as_root ip addr add "$BRIDGE_IP/$PREFIX_LEN" dev "$BRIDGE_NAME"
  as_root ip link set dev "$BRIDGE_NAME" up
  as_root ip route replace "$SERVICE_CIDR" dev "$BRIDGE_NAME"

  # Services need forwarding: a pod's packet to a ClusterIP is DNATed by the
  # host and routed back onto the bridge. br_netfilter makes iptables see
  # bridged traffic too (pod to pod, and hairpin through a Service).
  set_sysctl bridge net.ipv4.ip_forward 1
  if [ ! -d /proc/sys/net/bridge ] && command -v modprobe >/dev/null; then
    as_root modprobe br_netfilter 2>/dev/null || true
  fi
  if [ -d /proc/sys/net/bridge ]; then
    set_sysctl bridge net.bridge.bridge-nf-call-iptables 1
  else
    log "warning: br_netfilter is not available; a pod reaching a Service backed by itself may fail"
  fi
  guard_up
  $was_up || log "bridge $BRIDGE_NAME up: $BRIDGE_IP/$PREFIX_LEN, $SERVICE_CIDR routed to it"
}

down() {
  guard_down
  as_root ip route del "$SERVICE_CIDR" dev "$BRIDGE_NAME" 2>/dev/null || true
  if ip link show dev "$BRIDGE_NAME" >/dev/null 2>&1; then
    as_root ip link del dev "$BRIDGE_NAME"
    log "bridge $BRIDGE_NAME removed"
  fi
  restore_sysctls bridge
}

status() {
  if bridge_up; then
    printf '%-24s up        %s/%s, %s routed to it\n' "bridge $BRIDGE_NAME" "$BRIDGE_IP" "$PREFIX_LEN" "$SERVICE_CIDR"
  else
    printf '%-24s DOWN\n' "bridge $BRIDGE_NAME"
  fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
