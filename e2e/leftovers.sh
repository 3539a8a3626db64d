#!/usr/bin/env bash
# Run by `make test` after the tests, green or red: no namespace a test
# created (label flashsale.dev/test) may outlive it, none may stay
# Terminating, and no FlashSale of a test may keep a finalizer. Fails naming
# what was left, then removes it, so the next run (and `make bench`) starts
# from a quiet cluster. The topics of test sales are swept first, without
# failing: the workload's tests run no operator to clean them up.
set -euo pipefail
"$(dirname "$0")/stack/kafka.sh" sweep || echo "warning: the topics of test sales were not swept" >&2
LABEL=flashsale.dev/test
WAIT=${LEFTOVERS_WAIT:-120}

left() {
  kubectl get namespaces -l "$LABEL" -o name 2>/dev/null
  kubectl get namespaces --no-headers 2>/dev/null | awk '$2 == "Terminating" {print "namespace/" $1}'
}

# A namespace being removed waits for its pods' grace period: give it time.
deadline=$((SECONDS + WAIT))
while [ -n "$(left)" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 2; done
remaining=$(left | sort -u)
[ -z "$remaining" ] && exit 0

echo "make test left these behind after ${WAIT}s:" >&2
for ns in $remaining; do
  name=${ns#namespace/}
  phase=$(kubectl get namespace "$name" -o jsonpath='{.status.phase}' 2>/dev/null || true)
  echo "  $ns ($phase)" >&2
  kubectl get flashsales -n "$name" \
    -o jsonpath='{range .items[*]}{"    flashsale/"}{.metadata.name}{" finalizers="}{.metadata.finalizers}{"\n"}{end}' >&2 2>/dev/null || true
  # Clean up, so the machine is quiet again.
  for fs in $(kubectl get flashsales -n "$name" -o name 2>/dev/null); do
    kubectl patch "$fs" -n "$name" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
  kubectl delete namespace "$name" --wait=false >/dev/null 2>&1 || true
done
exit 1
