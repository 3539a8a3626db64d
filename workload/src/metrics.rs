//! Prometheus metrics of the workload processes, served at `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::domain::sale::SaleRef;

/// Labels of an HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route pattern, e.g. `/v1/sales/{sale}/orders`.
    pub route: String,
    /// The HTTP method.
    pub method: &'static str,
    /// The HTTP status code.
    pub status: u16,
}

/// Labels of a route's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route pattern.
    pub route: String,
}

/// Labels of a purchase outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The sale, both labels empty when the request named no known sale
    /// (names shoppers make up must not become series).
    #[prometheus(flatten)]
    pub sale: SaleLabels,
    /// ACCEPTED, REPLAY or the refusal code.
    pub outcome: String,
}

/// Labels of a per-sale measurement: the FlashSale's namespace and name, as
/// the operator's metrics label it, so the two join.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SaleLabels {
    /// The FlashSale's namespace.
    pub namespace: String,
    /// The FlashSale's name.
    pub sale: String,
}

impl From<&SaleRef> for SaleLabels {
    fn from(sale: &SaleRef) -> Self {
        Self {
            namespace: sale.namespace.clone(),
            sale: sale.name.clone(),
        }
    }
}

/// Labels of a payment callback's settlement.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettlementLabels {
    /// pay, refund, decline, repeat or contradiction.
    pub settlement: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.1 ms .. ~3.3 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

/// Every metric of a workload process; each process uses its part.
pub struct Metrics {
    registry: Registry,
    /// HTTP requests by route, method and status.
    pub requests: Family<RequestLabels, Counter>,
    /// HTTP latency by route.
    pub request_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// Purchases by outcome.
    pub purchases: Family<OutcomeLabels, Counter>,
    /// Time from produce to broker acknowledgement.
    pub produce_seconds: Histogram,
    /// Orders per persisted batch.
    pub batch_size: Histogram,
    /// Time to persist one batch (one transaction).
    pub persist_seconds: Histogram,
    /// Orders persisted.
    pub orders_persisted: Family<SaleLabels, Counter>,
    /// Messages sent to the dead-letter topic.
    pub dead_lettered: Family<SaleLabels, Counter>,
    /// Orders recorded FAILED (their units released).
    pub orders_failed: Family<SaleLabels, Counter>,
    /// Consumer-group lag as the consumer last saw it.
    pub lag: Family<SaleLabels, Gauge>,
    /// Kafka consumers rebuilt after a stall (partitions assigned, messages
    /// on the brokers, none received: `consumer::STALL_AFTER`).
    pub consumer_rebuilds: Family<SaleLabels, Counter>,
    /// Orders accepted through PostgreSQL alone, while the sale's Redis
    /// state was lost or unreachable (`spec.degradation.redisDown: database`).
    pub orders_through_database: Family<SaleLabels, Counter>,
    /// Payment callbacks by what they did (`refund`: money taken for an
    /// order that could no longer be paid, owed back).
    pub payment_settlements: Family<SettlementLabels, Counter>,
    /// The admission queues.
    pub queue: QueueMetrics,
    /// The risk scorers.
    pub risk: RiskMetrics,
}

/// Labels of a refusal's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// A fixed word per reason.
    pub reason: &'static str,
}

/// The admission queues' metrics (`spec.admission`).
pub struct QueueMetrics {
    /// Shoppers who joined (a shopper joining again counts again).
    pub joins: Family<SaleLabels, Counter>,
    /// Shoppers in line, as the last join or poll found it.
    pub length: Family<SaleLabels, Gauge>,
    /// Places admitted per second (the spec's rate).
    pub admission_rate: Family<SaleLabels, Gauge>,
    /// The wait promised to each shopper joining after the start, until
    /// admission (the lottery's places are known only at the start).
    pub promised_wait_seconds: Family<SaleLabels, Histogram, fn() -> Histogram>,
    /// Challenge answers refused, by sale and reason.
    pub challenge_failures: Family<ChallengeLabels, Counter>,
}

/// Labels of a refused challenge answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChallengeLabels {
    /// The FlashSale's namespace.
    pub namespace: String,
    /// The FlashSale's name.
    pub sale: String,
    /// Why: missing, forged, expired, another shopper's, reused...
    pub reason: &'static str,
}

/// The risk scorers' metrics (`spec.risk`).
pub struct RiskMetrics {
    /// Orders scored.
    pub scored: Family<SaleLabels, Counter>,
    /// Orders over the threshold, by what was done (`cancel`, `review`).
    pub flagged: Family<VerdictLabels, Counter>,
    /// Rules that fired, by rule.
    pub rule_hits: Family<RuleLabels, Counter>,
    /// From an order's acceptance to its score: the scorer's lag (the
    /// payment rule's wait included).
    pub delay_seconds: Family<SaleLabels, Histogram, fn() -> Histogram>,
    /// Webhook calls that got no score in time.
    pub webhook_silent: Family<SaleLabels, Counter>,
}

/// Labels of a risk verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// The sale.
    #[prometheus(flatten)]
    pub sale: SaleLabels,
    /// `cancel` or `review`.
    pub verdict: &'static str,
}

/// Labels of a risk rule.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    /// The sale.
    #[prometheus(flatten)]
    pub sale: SaleLabels,
    /// The rule's name (`paidWithin`, `shoppersPerNetwork`, ...).
    pub rule: &'static str,
}

/// Buckets of a scoring delay: 0.1 s to ~55 min.
fn delay_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 16))
}

impl RiskMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            scored: Family::default(),
            flagged: Family::default(),
            rule_hits: Family::default(),
            delay_seconds: Family::new_with_constructor(delay_histogram),
            webhook_silent: Family::default(),
        };
        let risk = registry.sub_registry_with_prefix("risk");
        risk.register("scored", "Orders scored", metrics.scored.clone());
        risk.register(
            "flagged",
            "Orders over the risk threshold, by verdict",
            metrics.flagged.clone(),
        );
        risk.register(
            "rule_hits",
            "Risk rules that fired, by rule",
            metrics.rule_hits.clone(),
        );
        risk.register(
            "delay_seconds",
            "From an order's acceptance to its risk score",
            metrics.delay_seconds.clone(),
        );
        risk.register(
            "webhook_silent",
            "Risk webhook calls that got no score in time",
            metrics.webhook_silent.clone(),
        );
        metrics
    }
}

/// Buckets of a promised wait: 0.5 s to ~4.5 h.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
}

impl QueueMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            joins: Family::default(),
            length: Family::default(),
            admission_rate: Family::default(),
            promised_wait_seconds: Family::new_with_constructor(wait_histogram),
            challenge_failures: Family::default(),
        };
        let queue = registry.sub_registry_with_prefix("queue");
        queue.register(
            "joins",
            "Shoppers who joined the queue",
            metrics.joins.clone(),
        );
        queue.register("length", "Shoppers in line", metrics.length.clone());
        queue.register(
            "admission_rate",
            "Places admitted per second",
            metrics.admission_rate.clone(),
        );
        queue.register(
            "promised_wait_seconds",
            "The wait promised to shoppers joining after the start, until admission",
            metrics.promised_wait_seconds.clone(),
        );
        queue.register(
            "challenge_failures",
            "Challenge answers refused, by reason",
            metrics.challenge_failures.clone(),
        );
        metrics
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("flashsale");
        let requests = Family::default();
        registry.register("http_requests", "HTTP requests", requests.clone());
        let request_seconds =
            Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            request_seconds.clone(),
        );
        let purchases = Family::default();
        registry.register("purchases", "Purchases by outcome", purchases.clone());
        let produce_seconds = latency_histogram();
        registry.register(
            "produce_duration_seconds",
            "Time until Kafka acknowledged an order",
            produce_seconds.clone(),
        );
        let batch_size = batch_histogram();
        registry.register(
            "consumer_batch_size",
            "Orders per persisted batch",
            batch_size.clone(),
        );
        let persist_seconds = latency_histogram();
        registry.register(
            "consumer_persist_duration_seconds",
            "Time to persist one batch",
            persist_seconds.clone(),
        );
        let orders_persisted = Family::default();
        registry.register(
            "orders_persisted",
            "Orders persisted",
            orders_persisted.clone(),
        );
        let dead_lettered = Family::default();
        registry.register(
            "orders_dead_lettered",
            "Orders sent to the dead-letter topic",
            dead_lettered.clone(),
        );
        let orders_failed = Family::default();
        registry.register(
            "orders_failed",
            "Orders recorded FAILED, their units released",
            orders_failed.clone(),
        );
        let lag = Family::default();
        registry.register("consumer_lag", "Consumer-group lag", lag.clone());
        let consumer_rebuilds = Family::default();
        registry.register(
            "consumer_rebuilds",
            "Kafka consumers rebuilt after stalling with messages on the brokers",
            consumer_rebuilds.clone(),
        );
        let orders_through_database = Family::default();
        registry.register(
            "orders_through_database",
            "Orders accepted through PostgreSQL alone while Redis was down",
            orders_through_database.clone(),
        );
        let payment_settlements = Family::default();
        registry.register(
            "payment_settlements",
            "Payment callbacks by what they did",
            payment_settlements.clone(),
        );
        let queue = QueueMetrics::register(&mut registry);
        let risk = RiskMetrics::register(&mut registry);
        Self {
            registry,
            queue,
            risk,
            requests,
            request_seconds,
            purchases,
            produce_seconds,
            batch_size,
            persist_seconds,
            orders_persisted,
            dead_lettered,
            orders_failed,
            orders_through_database,
            lag,
            consumer_rebuilds,
            payment_settlements,
        }
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Counts a purchase outcome of `sale` (`None`: no known sale).
    pub fn purchase(&self, sale: Option<&SaleRef>, outcome: &str) {
        self.purchases
            .get_or_create(&OutcomeLabels {
                sale: sale.map(SaleLabels::from).unwrap_or_default(),
                outcome: outcome.to_string(),
            })
            .inc();
    }
}

/// `/healthz` (the process answers) and `/metrics`: the routes of every
/// process's internal port.
pub fn router(metrics: std::sync::Arc<Metrics>) -> axum::Router {
    use axum::http::header;
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
}

/// Serves an internal port's `app` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::warn!(error = %e, "internal port stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_registered_metrics() {
        let m = Metrics::default();
        let sale = SaleRef::new("shop", "drop").unwrap();
        m.purchase(Some(&sale), "ACCEPTED");
        m.purchase(None, "UNAUTHORIZED");
        m.produce_seconds.observe(0.002);
        let text = m.encode();
        assert!(
            text.contains(
                "flashsale_purchases_total{namespace=\"shop\",sale=\"drop\",outcome=\"ACCEPTED\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "flashsale_purchases_total{namespace=\"\",sale=\"\",outcome=\"UNAUTHORIZED\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("flashsale_produce_duration_seconds_bucket"),
            "{text}"
        );
    }
}
