#!/usr/bin/env bash
# Checks the Helm chart charts/flashsale against the running stack (make up):
#   - its CRD is the repository's crds/flashsale.yaml, byte for byte, also
#     inside the packaged chart;
#   - helm lint --strict, with the default values and the local stack's;
#   - helm template | kubectl apply --dry-run=server against the real
#     apiserver, for the default values and a few variants (the CRD is
#     applied first);
#   - values.schema.json refuses bad values, and no connection string or key
#     is rendered into a pod spec.
# Exits non-zero when any check fails. Usage: e2e/chart-check.sh
# shellcheck source-path=SCRIPTDIR source=stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack/lib.sh"

CHART=$REPO_DIR/charts/flashsale
CRD=$REPO_DIR/crds/flashsale.yaml
LOCAL_VALUES=$CHART/ci/local-values.yaml
HELM=$HELM_BIN/helm
KUBECTL=$K8S_BIN/kubectl
export KUBECONFIG=${KUBECONFIG:-$RUN_DIR/kubeconfig}
# Rendered objects land (in dry run only) in this existing namespace, under a
# release name no real install uses.
NS=default
RELEASE=chart-check

[ -x "$HELM" ] || die "$HELM is missing: e2e/stack/build-k8s.sh helm"
[ -x "$KUBECTL" ] || die "$KUBECTL is missing: make up"
"$KUBECTL" --request-timeout=5s get --raw /readyz >/dev/null 2>&1 ||
  die "the apiserver does not answer (make up)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

failed=0
pass() { printf '\033[1;32m  ok\033[0m %s\n' "$*"; }
fail() {
  printf '\033[1;31mFAIL\033[0m %s\n' "$*"
  failed=$((failed + 1))
}

# helm ARGS...: the stack's helm, without its notice that the chart's CRD is a
# symbolic link (expected: files/crd.yaml points at crds/flashsale.yaml).
helm() {
  local rc=0
  "$HELM" "$@" 2>"$TMP/helm.err" || rc=$?
  grep -v 'found symbolic link in path' "$TMP/helm.err" >&2 || true
  return "$rc"
}

# ---------------------------------------------------------------- CRD ----
link=$CHART/files/crd.yaml
if [ -L "$link" ]; then
  if [ "$(readlink -f "$link")" = "$(readlink -f "$CRD")" ]; then
    pass "charts/flashsale/files/crd.yaml links to crds/flashsale.yaml"
  else
    fail "charts/flashsale/files/crd.yaml links to $(readlink "$link"), not crds/flashsale.yaml"
  fi
elif cmp -s "$link" "$CRD"; then
  pass "charts/flashsale/files/crd.yaml equals crds/flashsale.yaml"
else
  fail "charts/flashsale/files/crd.yaml differs from crds/flashsale.yaml (copy it again)"
fi
if [ -e "$CHART/crds" ]; then
  fail "charts/flashsale/crds/ exists: Helm would install it once and never upgrade it"
fi
if helm package "$CHART" -d "$TMP/pkg" >/dev/null &&
  tar -xzOf "$TMP"/pkg/flashsale-*.tgz flashsale/files/crd.yaml | cmp -s - "$CRD"; then
  pass "the packaged chart carries crds/flashsale.yaml byte for byte"
else
  fail "the packaged chart's CRD differs from crds/flashsale.yaml"
fi

# --------------------------------------------------------------- lint ----
if helm lint --strict "$CHART" >"$TMP/lint" 2>&1; then
  pass "helm lint --strict (default values)"
else
  cat "$TMP/lint"
  fail "helm lint --strict (default values)"
fi
if helm lint --strict "$CHART" -f "$LOCAL_VALUES" >"$TMP/lint" 2>&1; then
  pass "helm lint --strict (local stack values)"
else
  cat "$TMP/lint"
  fail "helm lint --strict (local stack values)"
fi

# ------------------------------------------- render, then server dry run ----
"$KUBECTL" apply --server-side --field-manager=flashsale-operator --force-conflicts -f "$CRD" >/dev/null ||
  die "cannot apply $CRD"
"$KUBECTL" wait --for=condition=Established --timeout=30s crd/flashsales.flashsale.dev >/dev/null ||
  die "the FlashSale CRD is not established"

# render NAME ARGS...: helm template with ARGS into $TMP/NAME.yaml.
render() {
  local name=$1
  shift
  helm template "$RELEASE" "$CHART" --namespace "$NS" "$@" >"$TMP/$name.yaml"
}

# dry_run NAME ARGS...: render, then have the apiserver validate every object
# (schema, strict fields, admission) without persisting anything.
dry_run() {
  local name=$1
  if ! render "$@" 2>"$TMP/$name.err"; then
    cat "$TMP/$name.err"
    fail "helm template ($name)"
    return 0
  fi
  if "$KUBECTL" apply --dry-run=server --validate=strict -f "$TMP/$name.yaml" >"$TMP/$name.out" 2>&1; then
    pass "helm template | kubectl apply --dry-run=server ($name: $(grep -c '^kind:' "$TMP/$name.yaml") objects)"
  else
    cat "$TMP/$name.out"
    fail "kubectl apply --dry-run=server ($name)"
  fi
}

dry_run defaults
dry_run local -f "$LOCAL_VALUES"
dry_run local-one-namespace -f "$LOCAL_VALUES" \
  --set operator.watchNamespace="$NS" --set api.devIdentity=true --set jwt.hs256.enabled=false \
  --set api.service.type=NodePort --set api.service.nodePort=30080 \
  --set rbac.ownerReferencesPermissionEnforcement=true \
  --set database.password='p@ss w/rd+%' --set database.sslMode=disable
dry_run existing-secrets -f "$LOCAL_VALUES" \
  --set database.existingSecret=pg --set database.existingSecretPodKey=pod-url \
  --set redis.existingSecret=redis --set jwt.hs256.existingSecret=jwt \
  --set jwt.rs256.existingSecret=jwt-rs256 --set payments.existingSecret=payments \
  --set purchaseTokens.existingSecret=tokens --set kafka.existingSecret=kafka \
  --set operator.serviceAccount.create=false --set operator.serviceAccount.name=op
dry_run jwks-configmap --set jwt.hs256.enabled=false --set jwt.jwks.existingConfigMap=idp-jwks
dry_run jwks-url --set jwt.hs256.enabled=false --set jwt.jwks.url=https://id.example/.well-known/jwks.json
dry_run behind-an-ingress --set 'api.trustedProxies={10.0.0.0/8,192.168.0.7}'
dry_run services-ca --set-file servicesCa.certificate="$SERVICES_CA" \
  --set redis.url=rediss://redis:6380 --set database.sslMode=verify-full
dry_run services-ca-configmap --set servicesCa.existingConfigMap=corp-ca --set servicesCa.existingConfigMapKey=root.pem
dry_run redis-sentinel --set 'redis.url=redis-sentinel://redis-sentinel:26379\,redis-sentinel-1:26379/flashsale'
dry_run operator-only --set api.enabled=false --set rbac.create=false \
  --set operator.podDisruptionBudget.enabled=false --set crds.enabled=false
dry_run spread-own --set api.spreadAcrossNodes=false --set api.podDisruptionBudget.minAvailable=2 \
  --set 'api.topologySpreadConstraints[0].maxSkew=1' \
  --set 'api.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone' \
  --set 'api.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule'
# The example values for services people already run (charts/flashsale/examples).
for example in "$CHART"/examples/*.yaml; do
  dry_run "example-$(basename "$example" .yaml)" -f "$example"
done

# The rendered objects are what they should be.
expect() {
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
# kinds NAME: "KIND=COUNT ..." of a rendering, sorted by kind.
kinds() { grep '^kind:' "$TMP/$1.yaml" | sort | uniq -c | awk '{ printf "%s%s=%s", sep, $3, $1; sep = " " }'; }
# no_inline_url NAME: no pod spec of a rendering carries a database URL.
no_inline_url() { ! grep -Eq 'value: "?postgres(ql)?://' "$TMP/$1.yaml"; }
expect "defaults: a ClusterRole and binding, the leader-election Role, 2 Deployments, 2 PDBs, 3 Services (operator metrics, API, API internal)" \
  test "$(kinds defaults)" = "ClusterRole=1 ClusterRoleBinding=1 CustomResourceDefinition=1 Deployment=2 PodDisruptionBudget=2 Role=1 RoleBinding=1 Secret=4 Service=3 ServiceAccount=2"
expect "watchNamespace: Roles only, no ClusterRole; the development identity: no JWT Secret" \
  test "$(kinds local-one-namespace)" = "CustomResourceDefinition=1 Deployment=2 PodDisruptionBudget=2 Role=2 RoleBinding=2 Secret=3 Service=3 ServiceAccount=2"
# spread NAME: "COMPONENT:TOPOLOGY_KEYS:PDB_LIMIT ..." of a rendering.
spread() {
  python3 - "$TMP/$1.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
pdbs = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
out = []
for d in sorted((d for d in docs if d["kind"] == "Deployment"), key=lambda d: d["metadata"]["name"]):
    component = d["metadata"]["labels"]["app.kubernetes.io/component"]
    keys = ",".join(c["topologyKey"] for c in d["spec"]["template"]["spec"].get("topologySpreadConstraints", []))
    limit = ",".join(f"{k}={v}" for k, v in pdbs.get(component, {}).items() if k != "selector")
    out.append(f"{component}:{keys}:{limit}")
print(" ".join(out))
PY
}
expect "defaults: the API and the operator spread over nodes, evicted one at a time" \
  test "$(spread defaults)" = "api:kubernetes.io/hostname:maxUnavailable=1 operator:kubernetes.io/hostname:maxUnavailable=1"
expect "spreadAcrossNodes=false with constraints of one's own, minAvailable instead of maxUnavailable" \
  test "$(spread spread-own)" = "api:topology.kubernetes.io/zone:minAvailable=2 operator:kubernetes.io/hostname:maxUnavailable=1"
expect "crds.enabled=false: no CRD" \
  test "$(grep -c '^kind: CustomResourceDefinition' "$TMP/operator-only.yaml")" = 0
# same_crd NAME: the rendering's CRD is crds/flashsale.yaml's, kept on uninstall.
same_crd() {
  python3 - "$TMP/$1.yaml" "$CRD" <<'PY'
import sys, yaml
rendered = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "CustomResourceDefinition"]
crd = yaml.safe_load(open(sys.argv[2]))
ok = len(rendered) == 1 and rendered[0]["spec"] == crd["spec"] \
    and rendered[0]["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
sys.exit(0 if ok else 1)
PY
}
expect "the rendered CRD is crds/flashsale.yaml, with helm.sh/resource-policy: keep" \
  same_crd defaults
expect "kafka.existingSecret: the bootstrap lists (a SASL password among them) from that Secret, none in a pod spec" \
  eval '[ "$(grep -c "name: kafka$" "$TMP/existing-secrets.yaml")" = 3 ] && ! grep -q "value: \"198.18.0.1:19094\"" "$TMP/existing-secrets.yaml"'
expect "existing Secrets: the chart makes none" \
  test "$(grep -c '^kind: Secret' "$TMP/existing-secrets.yaml")" = 0
expect "the database password is percent-encoded into the URL" \
  grep -q '"postgres://postgres:p%40ss%20w%2Frd%2B%25@198.18.0.1:15432/flashsale?sslmode=disable"' "$TMP/local-one-namespace.yaml"
expect "no connection string or key in a pod spec (all from Secrets)" \
  no_inline_url defaults
expect "jwt.jwks.existingConfigMap: the document mounted as /etc/flashsale/jwt/jwks.json, no JWT Secret" \
  eval 'grep -q "name: idp-jwks" "$TMP/jwks-configmap.yaml" && grep -q "value: \"/etc/flashsale/jwt/jwks.json\"" "$TMP/jwks-configmap.yaml" && [ "$(grep -c "^kind: Secret" "$TMP/jwks-configmap.yaml")" = 3 ]'
expect "jwt.jwks.url: the URL passed as is, nothing mounted" \
  eval 'grep -q "value: \"https://id.example/.well-known/jwks.json\"" "$TMP/jwks-url.yaml" && ! grep -q "mountPath: /etc/flashsale/jwt" "$TMP/jwks-url.yaml"'
expect "api.trustedProxies: passed to the API as one list; none by default" \
  eval 'grep -q "value: \"10.0.0.0/8,192.168.0.7\"" "$TMP/behind-an-ingress.yaml" && ! grep -q FLASHSALE_TRUSTED_PROXIES "$TMP/defaults.yaml"'
expect "servicesCa: a ConfigMap with the CA, mounted as SSL_CERT_FILE by the operator and the API (and passed on to the sale pods); nothing by default" \
  eval '[ "$(grep -c "^kind: ConfigMap" "$TMP/services-ca.yaml")" = 1 ] && [ "$(grep -c "value: /etc/flashsale/services-ca/ca.crt" "$TMP/services-ca.yaml")" = 3 ] && ! grep -q "/etc/flashsale/services-ca" "$TMP/defaults.yaml"'
expect "servicesCa.existingConfigMap: that ConfigMap and key, none made" \
  eval 'grep -q "name: corp-ca" "$TMP/services-ca-configmap.yaml" && grep -q "key: root.pem" "$TMP/services-ca-configmap.yaml" && [ "$(grep -c "^kind: ConfigMap" "$TMP/services-ca-configmap.yaml")" = 0 ]'
expect "the API pods mount no ServiceAccount token" \
  grep -q 'automountServiceAccountToken: false' "$TMP/defaults.yaml"
# env_from NAME DEPLOYMENT VAR: where VAR of DEPLOYMENT's first container
# in a rendering comes from: its value, or secret:NAME/KEY.
env_from() {
  python3 - "$TMP/$1.yaml" "$2" "$3" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment" and d["metadata"]["name"].endswith(sys.argv[2]):
        for e in d["spec"]["template"]["spec"]["containers"][0].get("env", []):
            if e["name"] == sys.argv[3]:
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                print(f"secret:{ref['name']}/{ref['key']}" if ref else e.get("value"))
PY
}
expect "examples/strimzi: the bootstrap list from its Secret, the cluster CA mounted, topics with 3 replicas and min.insync.replicas 2" \
  eval '[ "$(env_from example-strimzi operator KAFKA_BOOTSTRAP)" = secret:flashsale-kafka/bootstrap ] && [ "$(env_from example-strimzi operator FLASHSALE_TOPIC_REPLICATION_FACTOR)" = 3 ] && [ "$(env_from example-strimzi operator FLASHSALE_TOPIC_MIN_INSYNC_REPLICAS)" = 2 ] && grep -q "name: services-ca$" "$TMP/example-strimzi.yaml"'
expect "examples/cloudnativepg: the operator and the API take the URL from CloudNativePG's app Secret (key uri), the chart makes no database Secret" \
  eval '[ "$(env_from example-cloudnativepg operator DATABASE_URL)" = secret:orders-app/uri ] && [ "$(env_from example-cloudnativepg api DATABASE_URL)" = secret:orders-app/uri ] && ! grep -q "name: chart-check-flashsale-database$" "$TMP/example-cloudnativepg.yaml"'
expect "examples/managed-redis: the Redis URL (with its password) from its Secret" \
  eval '[ "$(env_from example-managed-redis operator FLASHSALE_REDIS)" = secret:flashsale-redis/url ] && [ "$(env_from example-managed-redis api FLASHSALE_REDIS)" = secret:flashsale-redis/url ]'

# ServiceMonitors and the consumers' PodMonitor: rendered only when enabled;
# sent to the apiserver only where the Prometheus Operator's CRDs exist.
if render service-monitor --set serviceMonitor.enabled=true 2>"$TMP/sm.err" &&
  [ "$(grep -c '^kind: ServiceMonitor' "$TMP/service-monitor.yaml")" = 2 ] &&
  [ "$(grep -c '^kind: PodMonitor' "$TMP/service-monitor.yaml")" = 1 ] &&
  [ "$(grep -Ec '^kind: (ServiceMonitor|PodMonitor)' "$TMP/defaults.yaml")" = 0 ]; then
  pass "serviceMonitor.enabled renders 2 ServiceMonitors and a PodMonitor (none by default)"
  if "$KUBECTL" get crd servicemonitors.monitoring.coreos.com podmonitors.monitoring.coreos.com >/dev/null 2>&1; then
    dry_run service-monitor --set serviceMonitor.enabled=true
  fi
else
  cat "$TMP/sm.err"
  fail "serviceMonitor.enabled renders 2 ServiceMonitors and a PodMonitor (none by default)"
fi
# The dashboard's ConfigMap goes to the apiserver; the PrometheusRule only
# where its CRD exists (e2e/alerts.sh checks the rules themselves).
if helm lint --strict "$CHART" --set serviceMonitor.enabled=true --set prometheusRule.enabled=true \
  --set dashboard.enabled=true >"$TMP/lint" 2>&1; then
  pass "helm lint --strict (monitoring: ServiceMonitors, PodMonitor, PrometheusRule, dashboard)"
else
  cat "$TMP/lint"
  fail "helm lint --strict (monitoring: ServiceMonitors, PodMonitor, PrometheusRule, dashboard)"
fi
if "$KUBECTL" get crd prometheusrules.monitoring.coreos.com >/dev/null 2>&1; then
  dry_run dashboard-and-rules --set dashboard.enabled=true --set prometheusRule.enabled=true
else
  dry_run dashboard --set dashboard.enabled=true
fi

# ---------------------------------------------------- refused values ----
refused() {
  local what=$1
  shift
  if render refused "$@" >/dev/null 2>&1; then
    fail "values refused: $what (it rendered)"
  else
    pass "values refused: $what"
  fi
}
refused "an unknown service type" --set api.service.type=Ingress
refused "an unknown pull policy" --set images.flashsale.pullPolicy=Sometimes
refused "an unknown key" --set operator.replicas=3
refused "a Redis URL without scheme" --set redis.url=redis:6379
refused "a string replica count" --set-string api.replicaCount=two
refused "no way to know shoppers" --set jwt.hs256.enabled=false
refused "an HS256 secret under 32 bytes" --set jwt.hs256.secret=too-short
refused "a payment callback secret under 32 bytes" --set payments.secret=too-short
refused "a purchase token secret under 32 bytes" --set purchaseTokens.secret=too-short
refused "a trusted proxy that is not an address" --set 'api.trustedProxies={ingress}'
refused "the development identity with JWT keys" --set api.devIdentity=true
refused "the development identity with a JWKS" --set api.devIdentity=true --set jwt.hs256.enabled=false \
  --set jwt.jwks.url=https://id.example/jwks.json
refused "a JWKS URL and a JWKS ConfigMap" --set jwt.jwks.url=https://id.example/jwks.json \
  --set jwt.jwks.existingConfigMap=idp-jwks
refused "a services CA that is not a PEM certificate" --set servicesCa.certificate=not-a-certificate
refused "a JWKS URL that is not http(s)" --set jwt.jwks.url=id.example/jwks.json

if [ "$failed" -gt 0 ]; then
  printf '\033[1;31mchart-check: %d check(s) failed\033[0m\n' "$failed"
  exit 1
fi
printf '\033[1;32mchart-check: all checks passed\033[0m\n'
