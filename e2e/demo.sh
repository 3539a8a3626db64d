#!/usr/bin/env bash
# The demo: for now, each real service of the stack answering, one by one.
set -euo pipefail
: "${KUBECONFIG:?source .run/env first (make demo does)}"
say() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

say "Redis (single node) at $REDIS_URL"
redis-cli -u "$REDIS_URL" ping
say "Redis Cluster (3 masters) at $REDIS_CLUSTER_URLS"
redis-cli -u "${REDIS_CLUSTER_URLS%%,*}" cluster info | grep -E 'cluster_state|cluster_size'
say "PostgreSQL at $DATABASE_URL"
psql "$DATABASE_URL" -Atc 'select version()'
target/debug/flashsale migrate --database-url "$DATABASE_URL"
say "Kafka at $KAFKA_BOOTSTRAP"
kcat -b "$KAFKA_BOOTSTRAP" -L -m 5 | head -3
say "Kubernetes at $(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')"
kubectl version
kubectl get --raw /readyz; echo
say "all services answer"
