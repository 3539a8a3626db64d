#!/usr/bin/env bash
# Installs the Debian packages the stack runs on. Only what is missing is
# installed, so a warm machine pays nothing. Services the packages would start
# on their default ports are held back: the stack runs its own, on its own ports.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

PACKAGES=(
  redis-server redis-tools        # Redis 7, single node and cluster
  postgresql-15 postgresql-client-15
  patroni haproxy                 # the replicated topology's PostgreSQL failover, one address for its primary
  kcat                            # Kafka metadata probe
  openssl iproute2 iptables conntrack
  containerd runc containernetworking-plugins   # the cluster node
  gcc libc6-dev python3           # its pause and probe images (node/*.c, oci-image.py)
  python3-yaml                    # the chart checks compare rendered YAML
  python3-venv                    # schemathesis's venv (schemathesis.sh)
  pkg-config zlib1g-dev libssl-dev   # builds the bundled librdkafka (TLS by OpenSSL)
  maven
  prometheus                      # promtool (e2e/alerts.sh checks and tests the alert rules) and Prometheus
  chromium chromium-driver        # the sale page's tests in a real browser (WebDriver)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

log "installing ${missing[*]}"
# policy-rc.d 101 = "do not start services": no system Redis or PostgreSQL.
policy=/usr/sbin/policy-rc.d
had_policy=0
[ -e "$policy" ] && had_policy=1
if [ "$had_policy" = 0 ]; then
  as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
  trap 'as_root rm -f '"$policy" EXIT
fi
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "packages installed"
