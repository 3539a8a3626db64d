#!/usr/bin/env bash
# Checks the chart's alerts and dashboard with helm and promtool alone (no
# cluster needed):
#   - the PrometheusRule rendered with prometheusRule.enabled=true passes
#     `promtool check rules`, and every alert has a severity, a summary, a
#     description, a runbook_url and a docs/runbooks/<AlertName>.md;
#   - `promtool test rules e2e/alerts/alerts.test.yaml` passes against it
#     (every alert fires in one case and stays quiet in another);
#   - chart values reach the rules (thresholds, runbook base URL, labels),
#     and neither the rule nor the dashboard renders by default;
#   - charts/flashsale/files/dashboard.json is JSON, every panel has a
#     datasource and a target, and every query parses (promtool, with
#     Grafana's variables substituted); the rendered ConfigMap holds it.
# Exits non-zero when any check fails. Usage: e2e/alerts.sh
# shellcheck source-path=SCRIPTDIR source=stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack/lib.sh"

CHART=$REPO_DIR/charts/flashsale
TESTS=$REPO_DIR/e2e/alerts/alerts.test.yaml
RUNBOOKS=$REPO_DIR/docs/runbooks
DASHBOARD=$CHART/files/dashboard.json
HELM=$HELM_BIN/helm
PROMTOOL=$(command -v promtool || true)

[ -x "$HELM" ] || die "$HELM is missing: e2e/stack/build-k8s.sh helm"
[ -n "$PROMTOOL" ] || die "promtool is missing: e2e/stack/install.sh (Debian package prometheus)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

failed=0
pass() { printf '\033[1;32m  ok\033[0m %s\n' "$*"; }
fail() {
  printf '\033[1;31mFAIL\033[0m %s\n' "$*"
  failed=$((failed + 1))
}

# render NAME ARGS...: helm template with ARGS into $TMP/NAME.yaml, without
# helm's notice that the chart's CRD is a symbolic link.
render() {
  local name=$1
  shift
  "$HELM" template alerts "$CHART" --namespace flashsale-system "$@" >"$TMP/$name.yaml" 2>"$TMP/$name.err" || {
    grep -v 'found symbolic link in path' "$TMP/$name.err" >&2
    return 1
  }
}

# spec NAME OUT: the PrometheusRule's spec of rendering NAME, as a rule file.
spec() {
  python3 - "$TMP/$1.yaml" "$2" <<'PY'
import sys, yaml
rules = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"{len(rules)} PrometheusRule(s) rendered, expected 1")
# Multi-line expressions stay literal blocks, readable when promtool complains.
def text(dumper, s):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
yaml.SafeDumper.add_representer(str, text)
yaml.safe_dump(rules[0]["spec"], open(sys.argv[2], "w"), sort_keys=False, width=1000)
PY
}

# ---------------------------------------------------------------- rules ----
if render rules --set prometheusRule.enabled=true && spec rules "$TMP/rules.yaml"; then
  pass "helm template --set prometheusRule.enabled=true renders one PrometheusRule"
else
  die "cannot render the PrometheusRule"
fi

if "$PROMTOOL" check rules "$TMP/rules.yaml" >"$TMP/check.out" 2>&1; then
  pass "promtool check rules: $(grep -o '[0-9]* rules found' "$TMP/check.out")"
else
  cat "$TMP/check.out"
  fail "promtool check rules"
fi

# Every alert: severity critical or warning, the three annotations, a runbook
# URL ending in /<AlertName>.md and that runbook in docs/runbooks; and the
# test file has a case for it.
if python3 - "$TMP/rules.yaml" "$RUNBOOKS" "$TESTS" >"$TMP/meta.out" 2>&1 <<'PY'; then
import os, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
tests = yaml.safe_load(open(sys.argv[3]))
tested = {}
for t in tests["tests"]:
    for case in t.get("alert_rule_test", []):
        tested.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
bad = []
alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
for r in alerts:
    name, ann = r["alert"], r.get("annotations", {})
    if r.get("labels", {}).get("severity") not in ("critical", "warning"):
        bad.append(f"{name}: severity is not critical or warning")
    for key in ("summary", "description", "runbook_url"):
        if not ann.get(key):
            bad.append(f"{name}: no {key}")
    if not ann.get("runbook_url", "").endswith(f"/{name}.md"):
        bad.append(f"{name}: runbook_url does not end in /{name}.md")
    if not os.path.isfile(os.path.join(sys.argv[2], f"{name}.md")):
        bad.append(f"{name}: no docs/runbooks/{name}.md")
    if tested.get(name) != {True, False}:
        bad.append(f"{name}: alerts.test.yaml lacks a case where it fires and one where it does not")
for b in bad:
    print(b)
print(f"{len(alerts)} alerts")
sys.exit(1 if bad else 0)
PY
  pass "every alert has a severity, summary, description, runbook (docs/runbooks) and tests both ways ($(tail -1 "$TMP/meta.out"))"
else
  cat "$TMP/meta.out"
  fail "alerts' labels, annotations, runbooks and test cases"
fi

# The tests' rule_files name rules.yaml, next to them.
cp "$TESTS" "$TMP/alerts.test.yaml"
if (cd "$TMP" && "$PROMTOOL" test rules alerts.test.yaml) >"$TMP/test.out" 2>&1; then
  pass "promtool test rules e2e/alerts/alerts.test.yaml ($(grep -c '^  - name:' "$TESTS") cases)"
else
  cat "$TMP/test.out"
  fail "promtool test rules e2e/alerts/alerts.test.yaml"
fi

# Values reach the rules.
if render values --set prometheusRule.enabled=true --set prometheusRule.notWarmBefore=12 \
  --set prometheusRule.stalledAfter=40 --set-json prometheusRule.apiErrorRatio=0.2 \
  --set prometheusRule.runbookBaseUrl=https://runbooks.example/flashsale/ \
  --set prometheusRule.labels.release=kube-prometheus-stack &&
  spec values "$TMP/values-rules.yaml" &&
  grep -q 'time() + 12 \* 60' "$TMP/values-rules.yaml" &&
  grep -q '> 40 \* 60' "$TMP/values-rules.yaml" &&
  grep -q '> 0.2$' "$TMP/values-rules.yaml" &&
  grep -q 'runbook_url: https://runbooks.example/flashsale/FlashSaleDegraded.md' "$TMP/values-rules.yaml" &&
  grep -q '^    release: kube-prometheus-stack' "$TMP/values.yaml" &&
  "$PROMTOOL" check rules "$TMP/values-rules.yaml" >/dev/null 2>&1; then
  pass "prometheusRule values set the thresholds, the runbook URL and the labels"
else
  fail "prometheusRule values set the thresholds, the runbook URL and the labels"
fi

if render defaults && ! grep -Eq '^kind: (PrometheusRule|PodMonitor)$' "$TMP/defaults.yaml" &&
  ! grep -q 'grafana_dashboard' "$TMP/defaults.yaml"; then
  pass "by default no PrometheusRule, PodMonitor or dashboard is rendered"
else
  fail "by default no PrometheusRule, PodMonitor or dashboard is rendered"
fi

# ------------------------------------------------------------ dashboard ----
# Every panel (rows aside) queries the ${datasource} Prometheus; every query
# becomes a recording rule for promtool to parse, Grafana's variables
# replaced by what they stand for.
if python3 - "$DASHBOARD" "$TMP/panels.yaml" >"$TMP/dash.out" 2>&1 <<'PY'; then
import json, sys, yaml
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit(f"not JSON: {e}")
bad, rules = [], []
def panels(ps):
    for p in ps:
        if p.get("type") == "row":
            yield from panels(p.get("panels", []))
        else:
            yield p
found = list(panels(d.get("panels", [])))
titles = [p.get("title") for p in found]
for t in {t for t in titles if titles.count(t) > 1}:
    bad.append(f"two panels are called {t!r}")
names = {v.get("name") for v in d.get("templating", {}).get("list", [])}
for want in ("datasource", "namespace", "sale"):
    if want not in names:
        bad.append(f"no template variable {want}")
sub = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
       "$namespace": ".*", "$sale": ".*", "${datasource}": ""}
for p in found:
    title = p.get("title") or f"panel {p.get('id')}"
    if (p.get("datasource") or {}).get("uid") != "${datasource}":
        bad.append(f"{title}: its datasource is not ${{datasource}}")
    targets = p.get("targets") or []
    if not targets:
        bad.append(f"{title}: no target")
    for t in targets:
        expr = t.get("expr", "")
        if not expr.strip():
            bad.append(f"{title}: target {t.get('refId')} has no expr")
            continue
        for k, v in sub.items():
            expr = expr.replace(k, v)
        rules.append({"record": f"panel:{p.get('id')}:{t.get('refId')}", "expr": expr})
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"))
for b in bad:
    print(b)
print(f"{len(found)} panels, {len(rules)} queries")
sys.exit(1 if bad else 0)
PY
  pass "dashboard.json is JSON; every panel has the \${datasource} and a query ($(tail -1 "$TMP/dash.out"))"
  if "$PROMTOOL" check rules "$TMP/panels.yaml" >"$TMP/panels.out" 2>&1; then
    pass "promtool parses every dashboard query"
  else
    cat "$TMP/panels.out"
    fail "promtool parses every dashboard query"
  fi
else
  cat "$TMP/dash.out"
  fail "dashboard.json: JSON, panels' datasources and queries"
fi

if render dashboard --set dashboard.enabled=true &&
  python3 - "$TMP/dashboard.yaml" "$DASHBOARD" <<'PY'; then
import json, sys, yaml
maps = [d for d in yaml.safe_load_all(open(sys.argv[1]))
        if d and d.get("kind") == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
ok = len(maps) == 1 and json.loads(maps[0]["data"]["flashsale.json"]) == json.load(open(sys.argv[2]))
sys.exit(0 if ok else 1)
PY
  pass "dashboard.enabled renders a ConfigMap labelled grafana_dashboard=1 holding dashboard.json"
else
  fail "dashboard.enabled renders a ConfigMap labelled grafana_dashboard=1 holding dashboard.json"
fi

if [ "$failed" -gt 0 ]; then
  printf '\033[1;31malerts: %d check(s) failed\033[0m\n' "$failed"
  exit 1
fi
printf '\033[1;32malerts: all checks passed\033[0m\n'
