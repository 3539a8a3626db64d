#!/usr/bin/env bash
# Writes $RUN_DIR/env: shell-sourceable addresses of everything the stack runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

cluster_urls=()
for port in "${REDIS_CLUSTER_PORTS[@]}"; do cluster_urls+=("redis://127.0.0.1:$port"); done
cluster_csv=$(IFS=,; echo "${cluster_urls[*]}")
sentinels=()
for port in "${REDIS_SENTINEL_PORTS[@]}"; do sentinels+=("127.0.0.1:$port"); done
sentinel_csv=$(IFS=,; echo "${sentinels[*]}")
replicated=() replicated_pods=()
for i in 0 1 2; do
  replicated+=("127.0.0.1:${KAFKA_REPLICATED_PORTS[$i]}")
  replicated_pods+=("$BRIDGE_IP:${KAFKA_REPLICATED_BRIDGE_PORTS[$i]}")
done
replicated_csv=$(IFS=,; echo "${replicated[*]}")
replicated_pods_csv=$(IFS=,; echo "${replicated_pods[*]}")

cat >"$ENV_FILE.tmp" <<ENV
# Written by e2e/stack/write-env.sh: source it (. $ENV_FILE).
# kubectl, etcd, helm, and the debug build (the kubectl flashsale plugin).
export PATH="$K8S_BIN:$ETCD_BIN:$HELM_BIN:$REPO_DIR/target/debug:\$PATH"
export KUBECONFIG='$RUN_DIR/kubeconfig'
export REDIS_URL='redis://127.0.0.1:$REDIS_PORT'
export REDIS_TLS_URL='rediss://127.0.0.1:$REDIS_TLS_PORT'
export REDIS_CLUSTER_URLS='$cluster_csv'
export REDIS_SENTINEL_URL='redis-sentinel://$sentinel_csv/$REDIS_SENTINEL_SERVICE'
export DATABASE_URL='postgres://postgres@127.0.0.1:$PG_PORT/flashsale'
# The replicated topology's PostgreSQL (patroni.sh): HAProxy, which follows
# the primary; pods reach it on the bridge at the same port.
export DATABASE_REPLICATED_URL='postgres://postgres@127.0.0.1:$PG_HA_PORT/flashsale'
export KAFKA_BOOTSTRAP='127.0.0.1:$KAFKA_PORT'
export KAFKA_TLS_BOOTSTRAP='ssl://127.0.0.1:$KAFKA_TLS_PORT'
# The replicated topology's three brokers (STACK_TOPOLOGY=replicated), from
# here and from the cluster's pods.
export KAFKA_REPLICATED_BOOTSTRAP='$replicated_csv'
export KAFKA_REPLICATED_POD_BOOTSTRAP='$replicated_pods_csv'
export KAFKA_SASL_BOOTSTRAP='sasl_ssl://$KAFKA_SASL_USER:$KAFKA_SASL_PASSWORD@127.0.0.1:$KAFKA_SASL_PORT'
# The same services behind toxiproxy (toxiproxy.sh), whose API at
# TOXIPROXY_URL makes them slow for the slow-service faults.
export TOXIPROXY_URL='http://127.0.0.1:$TOXIPROXY_PORT'
export REDIS_PROXIED_URL='redis://127.0.0.1:$REDIS_PROXY_PORT'
export KAFKA_PROXIED_BOOTSTRAP='127.0.0.1:$KAFKA_PROXY_PORT'
export DATABASE_PROXIED_URL='postgres://postgres@127.0.0.1:$PG_PROXY_PORT/flashsale'
export FLASHSALE_RUN='$RUN_DIR'
# The CA of the services' TLS certificate (PostgreSQL, Redis and Kafka TLS ports).
export FLASHSALE_SERVICES_CA='$SERVICES_CA'
export FLASHSALE_LOGS='$LOG_DIR'
# The local loop (e2e/stack/local.sh, run by make up): the shopper API, its
# metrics (the internal port) and the namespace its operator watches.
export FLASHSALE_API_URL='http://127.0.0.1:$API_PORT'
export FLASHSALE_API_METRICS_URL='http://127.0.0.1:$API_INTERNAL_PORT/metrics'
export FLASHSALE_NAMESPACE='default'
# Prometheus: the chart's alert rules over everything above (prometheus.sh).
export PROMETHEUS_URL='http://127.0.0.1:$PROMETHEUS_PORT'
# schemathesis, which fuzzes the API from its OpenAPI document (openapi_fuzz.rs).
export FLASHSALE_SCHEMATHESIS='$SCHEMATHESIS_VENV/bin/st'
ENV
mv "$ENV_FILE.tmp" "$ENV_FILE"
