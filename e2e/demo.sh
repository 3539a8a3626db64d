#!/usr/bin/env bash
# make demo: a live flash sale end to end on the real one-node cluster,
# narrated. The chart installs the operator and the shopper API; a merchant
# applies a FlashSale; a storm of shoppers buys through the API Service; the
# consumers the operator scales persist the orders; the sale ends, reconciles
# and cleans up; a report closes it. Runs again without cleanup by hand.
# Expects the stack (make stack) and the release build (make release).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KUBECONFIG:?source .run/env first (make demo does)}"
# `kubectl flashsale` (the plugin) from the release build.
export PATH="$PWD/target/release:$PATH"

NS=flashsale-demo
SALE=iphone-drop
RELEASE=flashsale
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
RESULTS=results/demo
mkdir -p "$RESULTS"
WATCH_PID='' SAMPLER_PID=''
trap '[ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null; [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null; true' EXIT

step() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }
say() { printf '    %s\n' "$*"; }
state() { kubectl get fs "$SALE" -n "$NS" -o jsonpath='{.status.state}' 2>/dev/null || true; }
wait_state() { # STATE TIMEOUT
  local deadline=$((SECONDS + $2))
  until [ "$(state)" = "$1" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "no $1 within $2 s (state: $(state))"; kubectl describe fs "$SALE" -n "$NS" | tail -30; exit 1; }
    sleep 0.5
  done
}

step "1/8 Images: the release binaries, imported into the node (no registry)"
e2e/stack/image.sh flashsale "$VERSION" target/release/flashsale
e2e/stack/image.sh operator "$VERSION" target/release/flashsale-operator

step "2/8 The chart: operator (2 replicas, leader election) and shopper API (2 replicas) in $NS"
# The chart brings the CRD; --take-ownership adopts one the tests applied.
helm upgrade --install "$RELEASE" charts/flashsale -n "$NS" --create-namespace --take-ownership \
  -f charts/flashsale/ci/local-values.yaml \
  --set images.operator.tag="$VERSION" --set images.flashsale.tag="$VERSION" \
  --set operator.watchNamespace="$NS" \
  --wait --timeout 5m >/dev/null
kubectl get pods -n "$NS" -o wide

step "3/8 A clean slate: the previous demo's sale, if any, is deleted (its orders stay)"
if kubectl get fs "$SALE" -n "$NS" >/dev/null 2>&1; then
  kubectl delete fs "$SALE" -n "$NS" --timeout=5m
else
  say "none"
fi

step "4/8 The merchant applies the sale: start in 60 s, warm-up 20 s before, 140 s long"
start=$(date -u -d '+60 seconds' +%Y-%m-%dT%H:%M:%SZ)
end=$(date -u -d '+200 seconds' +%Y-%m-%dT%H:%M:%SZ)
manifest=$(mktemp)
sed -e "s/start: \".*\"/start: \"$start\"/" -e "s/end: \".*\"/end: \"$end\"/" examples/flashsale.yaml >"$manifest"
say "kubectl flashsale plan: what the manifest will do, and when, before it is applied"
kubectl flashsale plan -n "$NS" -f "$manifest" | sed 's/^/    /'
kubectl apply -n "$NS" -f "$manifest"
rm -f "$manifest"
say "kubectl get fs -w (every change, as the SRE sees it):"
kubectl get fs -n "$NS" -w --output-watch-events 2>/dev/null | sed 's/^/    | /' &
WATCH_PID=$!
# Consumer replicas over time, for the report.
(while :; do
  echo "$(date +%s) $(kubectl get deploy "$SALE-consumers" -n "$NS" -o jsonpath='{.spec.replicas}' 2>/dev/null || echo 0)"
  sleep 1
done) >"$RESULTS/replicas.txt" &
SAMPLER_PID=$!

api=$(kubectl get svc "$RELEASE-api" -n "$NS" -o jsonpath='{.spec.clusterIP}:{.spec.ports[0].port}')
# The sale page as a shopper's phone shows it, headless (3 s of the page's
# own time: its clock, status and countdown settle).
shot() { # NAME
  timeout 60 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=412,915 --virtual-time-budget=3000 \
    --screenshot="$RESULTS/page-$1.png" "http://$api/s/$SALE" >/dev/null 2>&1 &&
    say "the sale page, $1: $RESULTS/page-$1.png" ||
    say "no screenshot of the page ($1): is chromium installed? (make test installs it)"
}

wait_state Warm 90
say "warmed: Redis loaded from the database and verified"
shot countdown
wait_state Live 60
shot live

step "5/8 The storm: 40,000 purchases by 30,000 shoppers through the API Service"
jwt=$(mktemp)
payments=$(mktemp)
kubectl get secret "$RELEASE-jwt" -n "$NS" -o jsonpath='{.data.hs256-secret}' | base64 -d >"$jwt"
kubectl get secret "$RELEASE-payments" -n "$NS" -o jsonpath='{.data.callback-secret}' | base64 -d >"$payments"
say "half the buyers pay: the load generator starts each payment and, as the payment provider, confirms it with a signed callback"
say "kubectl get pods -A: the operator, the API and the sale's consumers run on the node"
kubectl get pods -A -o wide | sed 's/^/    /'
FLASHSALE_REDIS=$REDIS_URL target/release/flashsale load --url "http://$api" --sale "$SALE" \
  --namespace "$NS" --jwt-secret-file "$jwt" --payment-secret-file "$payments" --shoppers 30000 --requests 40000 --concurrency 100 \
  --pay 0.5 --cancel 0.05 --check --json "$RESULTS/load.json"
say "the merchant finds 10 more units (kubectl flashsale restock); one shopper buys on the page, in a real"
say "browser driven over WebDriver: the button, the order followed to UNPAID, the pay step"
kubectl flashsale restock -n "$NS" "$SALE" "$(( $(kubectl get fs "$SALE" -n "$NS" -o jsonpath='{.spec.stock}') + 10 ))" | sed 's/^/    /'
target/release/flashsale-page-shopper "http://$api/s/$SALE" "$jwt" page-shopper "$RESULTS/page-unpaid.png" 2>/dev/null &&
  say "the sale page, a purchase followed to UNPAID: $RESULTS/page-unpaid.png" ||
  say "no purchase on the page: is chromium-driver installed? (make test installs it)"
rm -f "$jwt" "$payments"
kubectl get pods -n "$NS" -o wide | sed 's/^/    /'
shot after-the-storm
say "kubectl flashsale status, mid-sale:"
kubectl flashsale status -n "$NS" "$SALE" | sed 's/^/    /'

step "6/8 The kill switch: paused, then resumed"
kubectl flashsale pause -n "$NS" "$SALE" | sed 's/^/    /'
sleep 2
kubectl get fs "$SALE" -n "$NS" -o jsonpath='    Paused condition: {.status.conditions[?(@.type=="Paused")].status} ({.status.conditions[?(@.type=="Paused")].reason}){"\n"}'
kubectl flashsale resume -n "$NS" "$SALE" | sed 's/^/    /'

step "7/8 The end: final reconciliation, cleanup, completed"
wait_state Ended 150
wait_state Completed 240
kill "$WATCH_PID" "$SAMPLER_PID" 2>/dev/null || true
WATCH_PID='' SAMPLER_PID=''

step "8/8 Report"
python3 - "$RESULTS" "$NS" "$SALE" <<'PY'
import json, sys
results, ns, sale = sys.argv[1:4]
load = json.load(open(f"{results}/load.json"))
storm = load["storm"]
print(f"    {storm['mode']}: {storm['requests']} purchases in {storm['durationSecs']:.1f} s "
      f"({storm['requestsPerSec']:.0f}/s), {storm['acceptedOrders']} orders / {storm['acceptedUnits']} units accepted, "
      f"{storm['paid']} paid, {storm['cancelled']} cancelled")
print(f"    {'outcome':<32}{'count':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'max ms':>9}")
for outcome, l in storm["outcomes"].items():
    print(f"    {outcome:<32}{l['count']:>8}{l['p50Ms']:>9.2f}{l['p90Ms']:>9.2f}{l['p99Ms']:>9.2f}{l['p999Ms']:>10.2f}{l['maxMs']:>9.2f}")
samples = [line.split() for line in open(f"{results}/replicas.txt") if len(line.split()) == 2]
if samples:
    t0, last, steps = int(samples[0][0]), None, []
    for t, r in samples:
        if r != last:
            steps.append(f"t+{int(t) - t0}s: {r}")
            last = r
    print("    consumer replicas over time: " + ", ".join(steps))
failed = False
print("    invariants (checked right after the storm, orders drained):")
for v in load["invariants"] or []:
    mark = {True: "ok  ", False: "FAIL", None: "n/a "}[v["holds"]]
    failed |= v["holds"] is False
    print(f"      {mark} {v['id']} {v['name']:<17} {v['detail']}")
sys.exit(1 if failed else 0)
PY
psql "$DATABASE_URL" -Atc "select '    persisted orders by status: ' || string_agg(status || ' ' || n, ', ') from (
  select o.status, count(*) n from orders o join sales s on s.id = o.sale_id
  where s.namespace = '$NS' and s.name = '$SALE' and s.id = (
    select id from sales where namespace = '$NS' and name = '$SALE' order by created_at desc limit 1)
  group by o.status order by o.status) t"
say "kubectl flashsale report: the merchant's summary, I1-I6 as the operator judges them"
kubectl flashsale report -n "$NS" "$SALE" | sed 's/^/    /'
kubectl get fs -n "$NS"
kubectl get fs "$SALE" -n "$NS" -o jsonpath='{range .status.conditions[*]}    {.type}={.status} ({.reason}){"\n"}{end}'
say "events:"
uid=$(kubectl get fs "$SALE" -n "$NS" -o jsonpath='{.metadata.uid}')
events=$(kubectl get events -n "$NS" --field-selector "involvedObject.kind=FlashSale,involvedObject.uid=$uid" \
  --sort-by=.metadata.creationTimestamp -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers)
sed 's/^/    /' <<<"$events"
# The states the sale went through, as its state-change events tell them.
reached=$(sed -n 's/^[A-Za-z]* *The sale went from [A-Za-z]* to \([A-Za-z]*\)\.$/\1/p' <<<"$events" | paste -sd' ' | sed 's/ / -> /g')
say "lifecycle reached: $reached; report in $RESULTS/"
