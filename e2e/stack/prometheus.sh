#!/usr/bin/env bash
# Prometheus (Debian's package) on 127.0.0.1:$PROMETHEUS_PORT, evaluating the
# chart's alert rules as rendered from charts/flashsale, every 5 s. It scrapes
#   - the local loop (make up): the operator and the API's internal port;
#   - the cluster's FlashSale pods through the bridge (their metrics,
#     http-metrics and http-internal ports), listed by pod-targets.py:
#     Debian's Prometheus is built without Kubernetes discovery;
#   - what tests register: a file_sd JSON per test in $PROM_DIR/targets.
# `up` on a running one re-renders the rules and reloads them.
# Usage: prometheus.sh up|down|status
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

PROM_DIR=$RUN_DIR/prometheus
URL=http://127.0.0.1:$PROMETHEUS_PORT

# The chart's PrometheusRule, as a rule file: what a cluster's Prometheus
# Operator would load.
render_rules() {
  "$HELM_BIN/helm" template flashsale "$REPO_DIR/charts/flashsale" --set prometheusRule.enabled=true \
    --show-only templates/prometheusrule.yaml 2>/dev/null |
    python3 -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(sys.stdin)["spec"], sys.stdout, sort_keys=False)' \
      >"$PROM_DIR/rules.yaml.tmp"
  mv "$PROM_DIR/rules.yaml.tmp" "$PROM_DIR/rules.yaml"
}

# Series keep their own namespace label (the sale's), as the chart's monitors
# do with honorLabels; the pod's namespace is kubernetes_namespace.
write_config() {
  cat >"$PROM_DIR/prometheus.yml" <<YAML
global:
  scrape_interval: 5s
  scrape_timeout: 4s
  evaluation_interval: 5s
rule_files: [$PROM_DIR/rules.yaml]
scrape_configs:
  - job_name: local-loop
    honor_labels: true
    static_configs:
      - targets: [127.0.0.1:$OPERATOR_PORT]
        labels: {component: operator}
      - targets: [127.0.0.1:$API_INTERNAL_PORT]
        labels: {component: api}
  - job_name: tests
    honor_labels: true
    file_sd_configs:
      - files: [$PROM_DIR/targets/*.json]
  - job_name: pods
    honor_labels: true
    file_sd_configs:
      - files: [$PROM_DIR/pods.json]
YAML
}

ready() { curl -fsS "$URL/-/ready" >/dev/null; }

up() {
  command -v prometheus >/dev/null || die "prometheus is missing: e2e/stack/install.sh"
  [ -x "$HELM_BIN/helm" ] || die "$HELM_BIN/helm is missing: e2e/stack/build-k8s.sh helm"
  mkdir -p "$PROM_DIR/targets" "$PROM_DIR/data"
  render_rules
  write_config
  KUBECONFIG=$RUN_DIR/kubeconfig start_bg pod-targets "$STACK_DIR/pod-targets.py" "$K8S_BIN/kubectl" "$PROM_DIR/pods.json"
  if is_running prometheus; then
    curl -fsS -X POST "$URL/-/reload" >/dev/null || die "prometheus did not reload its rules"
    log "prometheus already running; rules reloaded"
    return 0
  fi
  start_bg prometheus prometheus --config.file="$PROM_DIR/prometheus.yml" \
    --storage.tsdb.path="$PROM_DIR/data" --storage.tsdb.retention.time=1d \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --web.enable-lifecycle
  wait_until 60 prometheus ready
  log "prometheus ready on $URL"
}

down() {
  stop_pid prometheus
  stop_pid pod-targets
}

status() {
  if ready 2>/dev/null; then echo "prometheus     up    $URL"; else echo "prometheus     DOWN"; fi
}

"${1:-up}"
