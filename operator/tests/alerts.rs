//! The SRE's view against the stack's real Prometheus (e2e/stack/prometheus.sh,
//! which loads the chart's alert rules): during a live sale every query of
//! the chart's Grafana dashboard returns data, and a real fault fires a real
//! alert — Kafka stopped, the sale turns Degraded and `FlashSaleDegraded` is
//! firing within its `for` plus a scrape and an evaluation; Kafka back, the
//! status clears within the operator's retry backoff and the alert resolves. (This binary stops Kafka of the shared stack: it holds nothing
//! else.)

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use flashsale_operator::model::crd::FlashSale;
use flashsale_operator::steps::outage::MAX_BACKOFF;
use flashsale_testkit as stack;
use kube::Api;

/// The stack's scrape and evaluation interval (prometheus.sh).
const INTERVAL: Duration = Duration::from_secs(5);
/// FlashSaleDegraded's `for` (charts/flashsale/files/alerts.yaml).
const DEGRADED_FOR: Duration = Duration::from_secs(60);

/// A file_sd target file naming this test's processes; removed on drop.
struct Targets(PathBuf);

impl Targets {
    fn register(namespace: &str, addresses: &[&str]) -> Self {
        let path = stack::run_dir()
            .join("prometheus/targets")
            .join(format!("{namespace}.json"));
        let targets = serde_json::json!([{
            "targets": addresses,
            "labels": {"test": namespace},
        }]);
        std::fs::write(&path, targets.to_string())
            .unwrap_or_else(|e| panic!("{}: {e} (is the stack's Prometheus up?)", path.display()));
        Self(path)
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Kafka stopped through its script, started again on drop (panics too).
struct KafkaStopped;

impl KafkaStopped {
    fn stop() -> Self {
        stack::stack_script("kafka.sh", &["down"]);
        Self
    }
}

impl Drop for KafkaStopped {
    fn drop(&mut self) {
        stack::stack_script("kafka.sh", &["up"]);
    }
}

struct Prometheus {
    url: String,
    http: reqwest::Client,
}

impl Prometheus {
    fn new() -> Self {
        Self {
            url: stack::var("PROMETHEUS_URL"),
            http: reqwest::Client::new(),
        }
    }

    /// An instant query's result vector.
    async fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            [("query", promql)],
        )
        .unwrap();
        let body: serde_json::Value = self
            .http
            .get(url)
            .send()
            .await
            .expect("Prometheus answers")
            .json()
            .await
            .unwrap();
        assert_eq!(body["status"], "success", "{promql}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The state of `alert` for `namespace`, if it is pending or firing.
    async fn alert(&self, alert: &str, namespace: &str) -> Option<String> {
        let body: serde_json::Value = self
            .http
            .get(format!("{}/api/v1/alerts", self.url))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        body["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == alert && a["labels"]["namespace"] == namespace)
            .and_then(|a| a["state"].as_str().map(str::to_string))
    }
}

/// Every query of the chart's dashboard, by panel title, with Grafana's
/// variables set to this sale.
fn dashboard_queries(namespace: &str, sale: &str) -> Vec<(String, String)> {
    let path = stack::repo_dir().join("charts/flashsale/files/dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fn panels(list: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p["type"] == "row" {
                panels(&p["panels"], out);
            } else {
                out.push(p.clone());
            }
        }
    }
    let mut found = Vec::new();
    panels(&dashboard["panels"], &mut found);
    let mut queries = Vec::new();
    for panel in found {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_default()
                .replace("$__rate_interval", "1m")
                .replace("$__interval", "15s")
                .replace("$__range", "5m")
                .replace("$namespace", namespace)
                .replace("$sale", sale);
            queries.push((panel["title"].as_str().unwrap_or("?").to_string(), expr));
        }
    }
    queries
}

/// The queries of `pending` that return nothing now (the others are done).
async fn without_data(
    prometheus: &Prometheus,
    pending: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut left = Vec::new();
    for (title, expr) in pending {
        if prometheus.query(&expr).await.is_empty() {
            left.push((title, expr));
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_fires_the_degraded_alert_and_every_panel_has_data() {
    let prometheus = Prometheus::new();
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let operator_at = format!("127.0.0.1:{}", common::free_port());
    let _operator = common::Operator::start_serving(&ns, &db_url, "alerts", &operator_at);
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest("watched", &ns, 2, 900);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    // A periodic reconciliation Job soon: the drift panel has a value.
    manifest["spec"]["reconcile"] = serde_json::json!({"interval": "15s"});
    // Every order scored and held for review (one rule weighing 1, the
    // threshold 1), the webhook silent (its Secret does not exist): the
    // risk panels have values, and no unit moves.
    manifest["spec"]["risk"] = serde_json::json!({
        "action": "review",
        "threshold": 1,
        "rules": {
            "paidWithin": {"weight": 0, "within": "0s"},
            "shoppersPerNetwork": {"weight": 1, "over": 0},
        },
        "webhook": {
            "url": "http://127.0.0.1:9/risk",
            "secretRef": {"name": "no-such-secret", "key": "secret"},
        },
    });
    common::create_live(&sales, manifest).await;
    // A queued sale beside it, for the queue's panels.
    let mut queued = common::manifest("queued", &ns, 2, 900);
    queued["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    queued["spec"]["admission"] = serde_json::json!({
        "mode": "queue",
        "prequeue": "10m",
        "ratePerSecond": 1,
        "challenge": {"kind": "proofOfWork", "difficulty": 1},
    });
    common::create_live(&sales, queued).await;
    let api = common::ApiProcess::start(&ns, &db_url).await;
    let _targets = Targets::register(&ns, &[&operator_at, &api.internal]);
    for shopper in 0..20 {
        assert_eq!(api.buy("watched", &format!("s{shopper}")).await.0, 202);
    }
    let _ = api.buy("watched", "s0").await;
    let _ = api.buy("watched", "s0").await; // LIMIT_EXCEEDED: a refusal too
    for shopper in ["q0", "q1", "q2"] {
        assert_eq!(api.join_queue("queued", shopper, true).await.0, 202);
    }
    let (status, refused) = api.join_queue("queued", "q3", false).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (403, Some("CHALLENGE_FAILED"))
    );

    // The sale is in Prometheus, its orders persisted by the cluster's
    // consumers (scraped on the node through the bridge).
    let persisted = format!("flashsale_orders_persisted_total{{namespace=\"{ns}\"}}");
    common::wait_for(
        Duration::from_secs(120),
        "persisted orders in Prometheus",
        || async {
            (prometheus
                .query(&format!("sum({persisted}) >= 20"))
                .await
                .len()
                == 1)
                .then_some(())
        },
    )
    .await;
    // And the first periodic reconciliation finished (its Job needs Kafka).
    let drift = format!("flashsale_operator_sale_drift_found{{namespace=\"{ns}\"}}");
    common::wait_for(
        Duration::from_secs(90),
        "a reconciliation in Prometheus",
        || async { (prometheus.query(&drift).await.len() == 1).then_some(()) },
    )
    .await;
    let mut pending = dashboard_queries(&ns, "watched|queued");
    let queries = pending.len();
    // Rates need two samples in their window.
    tokio::time::sleep(2 * INTERVAL).await;
    pending = without_data(&prometheus, pending).await;
    println!(
        "live: {} of {queries} dashboard queries return data; waiting for the outage: {:?}",
        queries - pending.len(),
        pending.iter().map(|(t, _)| t).collect::<Vec<_>>()
    );
    assert!(prometheus.alert("FlashSaleDegraded", &ns).await.is_none());

    let down = KafkaStopped::stop();
    let degraded_at = common::wait_for(
        Duration::from_secs(60),
        "Degraded in the status",
        || async {
            let conditions = sales.get("watched").await.ok()?.status?.conditions;
            let degraded = conditions.iter().find(|c| c.type_ == "Degraded")?;
            (degraded.status == "True").then(|| {
                println!(
                    "Kafka stopped: Degraded {} — {}",
                    degraded.reason, degraded.message
                );
                Instant::now()
            })
        },
    )
    .await;
    // Pending from the first evaluation after the scrape that sees it,
    // firing at the first evaluation `for` later.
    let bound = DEGRADED_FOR + 3 * INTERVAL;
    common::wait_for(bound, "FlashSaleDegraded to fire", || async {
        (prometheus.alert("FlashSaleDegraded", &ns).await.as_deref() == Some("firing"))
            .then_some(())
    })
    .await;
    println!(
        "FlashSaleDegraded firing {:.1} s after the status said Degraded (bound {} s: for + scrape + 2 evaluations)",
        degraded_at.elapsed().as_secs_f64(),
        bound.as_secs()
    );
    pending = without_data(&prometheus, pending).await;
    let errors: BTreeMap<_, _> = pending.iter().cloned().collect();
    assert!(
        errors.is_empty(),
        "dashboard queries with no data, live or in the outage: {errors:#?}"
    );

    drop(down);
    let back = Instant::now();
    // The operator's next attempt comes within 1.5 × its longest backoff;
    // the rest is Kafka's start on a busy machine and the attempt itself.
    let recovery_bound = MAX_BACKOFF.mul_f64(1.5) + Duration::from_secs(45);
    let degraded_now = || async {
        let conditions = sales.get("watched").await.ok()?.status?.conditions;
        conditions.into_iter().find(|c| c.type_ == "Degraded")
    };
    let cleared = tokio::time::timeout(recovery_bound, async {
        loop {
            match degraded_now().await {
                Some(c) if c.status == "False" => return,
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    })
    .await;
    assert!(
        cleared.is_ok(),
        "still Degraded {} s after Kafka was back (bound {} s): {:?}",
        back.elapsed().as_secs(),
        recovery_bound.as_secs(),
        degraded_now().await
    );
    println!(
        "Kafka back: Degraded cleared in the status {:.1} s later (bound {} s)",
        back.elapsed().as_secs_f64(),
        recovery_bound.as_secs()
    );
    common::wait_for(
        Duration::from_secs(120),
        "FlashSaleDegraded to resolve",
        || async {
            prometheus
                .alert("FlashSaleDegraded", &ns)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    println!(
        "Kafka back: FlashSaleDegraded resolved {:.1} s later",
        back.elapsed().as_secs_f64()
    );
}
