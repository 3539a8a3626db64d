#!/usr/bin/env bash
# Checks that `helm upgrade` from the previous chart version applies the
# current CRD schema (Helm never upgrades a chart's crds/; ours is a
# template), and that `helm uninstall` keeps the CRD (deleting it would
# delete every FlashSale). The previous chart is taken from git: the chart as
# it was before its version last changed. Needs the stack (make up) and the
# test images (make test-images). Usage: e2e/chart-upgrade.sh
# shellcheck source-path=SCRIPTDIR source=stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack/lib.sh"

CHART=$REPO_DIR/charts/flashsale
CRD=$REPO_DIR/crds/flashsale.yaml
HELM=$HELM_BIN/helm
KUBECTL=$K8S_BIN/kubectl
export KUBECONFIG=${KUBECONFIG:-$RUN_DIR/kubeconfig}
NS=chart-upgrade-$$
RELEASE=upgrade

[ -x "$HELM" ] || die "$HELM is missing: e2e/stack/build-k8s.sh helm"
"$KUBECTL" --request-timeout=5s get --raw /readyz >/dev/null 2>&1 ||
  die "the apiserver does not answer (make up)"

TMP=$(mktemp -d)
cleanup() {
  "$HELM" uninstall "$RELEASE" -n "$NS" >/dev/null 2>&1 || true
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  # The stack's CRD as the tests expect it, owned by no release.
  "$KUBECTL" apply --server-side --field-manager=flashsale-operator --force-conflicts -f "$CRD" >/dev/null
  "$KUBECTL" annotate crd flashsales.flashsale.dev meta.helm.sh/release-name- \
    meta.helm.sh/release-namespace- helm.sh/resource-policy- >/dev/null 2>&1 || true
  "$KUBECTL" label crd flashsales.flashsale.dev app.kubernetes.io/managed-by- >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
helm() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }

version_at() { git -C "$REPO_DIR" show "$1:charts/flashsale/Chart.yaml" 2>/dev/null | sed -n 's/^version: //p'; }
current=$(sed -n 's/^version: //p' "$CHART/Chart.yaml")
if [ "$(version_at HEAD)" != "$current" ]; then
  previous=HEAD
else
  bump=$(git -C "$REPO_DIR" log -1 --format=%H -G'^version: ' -- charts/flashsale/Chart.yaml)
  previous=$bump^
fi
[ -n "$(version_at "$previous")" ] ||
  die "no previous chart version in git history (a shallow clone? fetch its history)"
git -C "$REPO_DIR" archive "$previous" charts/flashsale crds | tar -x -C "$TMP"
log "previous chart: $(version_at "$previous") ($(git -C "$REPO_DIR" rev-parse --short "$previous")), current: $current"

# schema_diff: how many top-level schema entries differ between the live CRD
# and crds/flashsale.yaml (0: the live CRD is the current one).
schema_diff() {
  "$KUBECTL" get crd flashsales.flashsale.dev -o json | python3 -c '
import json, sys, yaml
live = {v["name"]: v for v in json.load(sys.stdin)["spec"]["versions"]}
want = {v["name"]: v for v in yaml.safe_load(open(sys.argv[1]))["spec"]["versions"]}
def flat(schema, path=""):
    out = {path: {k: v for k, v in schema.items() if k not in ("properties", "items")}}
    for name, sub in schema.get("properties", {}).items():
        out.update(flat(sub, f"{path}.{name}"))
    if "items" in schema:
        out.update(flat(schema["items"], f"{path}[]"))
    return out
differ = set()
for name in live.keys() | want.keys():
    a = flat(live.get(name, {}).get("schema", {}).get("openAPIV3Schema", {}), name)
    b = flat(want.get(name, {}).get("schema", {}).get("openAPIV3Schema", {}), name)
    differ |= {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}
    if live.get(name, {}).get("additionalPrinterColumns") != want.get(name, {}).get("additionalPrinterColumns"):
        differ.add(name + " columns")
print(len(differ))
' "$CRD"
}

failed=0
pass() { printf '\033[1;32m  ok\033[0m %s\n' "$*"; }
fail() {
  printf '\033[1;31mFAIL\033[0m %s\n' "$*"
  failed=$((failed + 1))
}

"$KUBECTL" create namespace "$NS" >/dev/null
"$KUBECTL" label namespace "$NS" flashsale.dev/test=true >/dev/null
# The cluster as the previous chart left it: its CRD (from its crds/, or its
# template), then the release.
old_crd=$TMP/charts/flashsale/crds/flashsale.yaml
[ -e "$old_crd" ] || old_crd=$TMP/crds/flashsale.yaml
"$KUBECTL" apply --server-side --field-manager=helm --force-conflicts -f "$old_crd" >/dev/null
before=$(schema_diff)
if [ "$before" = 0 ]; then
  # The same schema in both versions: mark the old one, or this proves nothing.
  python3 -c 'import sys,yaml; d=yaml.safe_load(open(sys.argv[1])); d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"]="previous"; print(yaml.safe_dump(d))' "$old_crd" |
    "$KUBECTL" apply --server-side --field-manager=helm --force-conflicts -f - >/dev/null
  before=$(schema_diff)
fi
log "the previous CRD differs from crds/flashsale.yaml in $before schema entries"
values=(-f "$TMP/charts/flashsale/ci/local-values.yaml" --set operator.watchNamespace="$NS" --set api.enabled=false)
if helm install "$RELEASE" "$TMP/charts/flashsale" -n "$NS" "${values[@]}" >/dev/null; then
  pass "helm install of chart $(version_at "$previous")"
else
  fail "helm install of chart $(version_at "$previous")"
fi

# --take-ownership: a CRD that came from crds/ belongs to no release yet.
values=(-f "$CHART/ci/local-values.yaml" --set operator.watchNamespace="$NS" --set api.enabled=false)
if helm upgrade "$RELEASE" "$CHART" -n "$NS" "${values[@]}" --take-ownership >/dev/null; then
  pass "helm upgrade to chart $current"
else
  fail "helm upgrade to chart $current"
fi
after=$(schema_diff)
if [ "$after" = 0 ]; then
  pass "the upgrade applied the changed CRD schema ($before entries differed, now none)"
else
  fail "after the upgrade the CRD still differs from crds/flashsale.yaml in $after entries"
fi
helm uninstall "$RELEASE" -n "$NS" --wait >/dev/null
if "$KUBECTL" get crd flashsales.flashsale.dev >/dev/null 2>&1; then
  pass "helm uninstall keeps the CRD (and every sale)"
else
  fail "helm uninstall deleted the CRD"
fi

if [ "$failed" -gt 0 ]; then
  printf '\033[1;31mchart-upgrade: %d check(s) failed\033[0m\n' "$failed"
  exit 1
fi
printf '\033[1;32mchart-upgrade: all checks passed\033[0m\n'
