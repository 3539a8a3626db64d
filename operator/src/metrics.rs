//! The operator's Prometheus metrics: its own work, and each sale as its
//! status tells it (what the alert rules and the dashboard read).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use flashsale_workload::metrics::SaleLabels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::crd::{SaleState, StockStatus};
use crate::model::timeline::{Timeline, next_transition};

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The failing step: invalid, observe, apply, status, finalizer.
    pub step: String,
}

/// Labels of one of a sale's series: the sale, and what the series is of
/// (its state, a stock kind, a shard, a condition...).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct SaleDetail<D> {
    /// The sale.
    pub sale: SaleLabels,
    /// What of the sale.
    pub detail: D,
}

// By hand: the derive takes no generic structs.
impl<D: EncodeLabelSet> EncodeLabelSet for SaleDetail<D> {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.sale.encode(encoder)?;
        self.detail.encode(encoder)
    }
}

macro_rules! detail {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident),* }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: String,)*
        }
    };
}

detail!(
    /// No detail: one series per sale.
    Whole {}
);
detail!(
    /// A lifecycle state.
    StateDetail {
        /// The state's name.
        state
    }
);
detail!(
    /// A kind of a count (stock: total, reserved...; replicas: desired, ready).
    KindDetail {
        /// The kind.
        kind
    }
);
detail!(
    /// One Redis shard.
    ShardDetail {
        /// Its index.
        shard
    }
);
detail!(
    /// A status condition.
    ConditionDetail {
        /// Its type.
        condition,
        /// Its reason.
        reason
    }
);
detail!(
    /// An instant of the sale's timeline.
    InstantDetail {
        /// warm, start, end or cleanup.
        instant
    }
);
detail!(
    /// The next transition.
    TransitionDetail {
        /// warm-up, open, close or cleanup.
        transition
    }
);

/// A per-sale gauge family that keeps, per sale, only the series last set:
/// a shard gone, a condition's old reason or a passed transition vanish.
struct SaleGauges<D: EncodeLabelSet + Clone + Hash + Eq> {
    family: Family<SaleDetail<D>, Gauge>,
    set: Mutex<HashMap<SaleLabels, Vec<D>>>,
}

impl<D> SaleGauges<D>
where
    D: EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    fn register(registry: &mut Registry, name: &str, help: &str) -> Self {
        let family = Family::default();
        registry.register(name, help, family.clone());
        Self {
            family,
            set: Mutex::default(),
        }
    }

    fn replace(&self, sale: &SaleLabels, values: Vec<(D, i64)>) {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        let before = set.remove(sale).unwrap_or_default();
        for gone in before
            .into_iter()
            .filter(|d| !values.iter().any(|(v, _)| v == d))
        {
            self.family.remove(&SaleDetail {
                sale: sale.clone(),
                detail: gone,
            });
        }
        for (detail, value) in &values {
            self.family
                .get_or_create(&SaleDetail {
                    sale: sale.clone(),
                    detail: detail.clone(),
                })
                .set(*value);
        }
        set.insert(sale.clone(), values.into_iter().map(|(d, _)| d).collect());
    }

    fn forget(&self, sale: &SaleLabels) {
        self.replace(sale, Vec::new());
    }
}

/// What a reconcile learned of a sale, as plain values.
#[derive(Debug, Clone, PartialEq)]
pub struct SaleReading {
    /// The state decided.
    pub state: SaleState,
    /// Units, by where they are (and per Redis shard while loaded).
    pub stock: StockStatus,
    /// The consumer group's lag, when readable.
    pub lag: Option<i64>,
    /// spec.consumers.maxLag as in effect.
    pub max_lag: i64,
    /// Consumer replicas wanted.
    pub desired_replicas: i32,
    /// Consumer replicas ready.
    pub ready_replicas: i32,
    /// Backpressure on.
    pub backpressure: bool,
    /// Drift the last reconciliation found, if one ran.
    pub drift_found: Option<i64>,
    /// When the last reconciliation finished, if one ran.
    pub reconciled_at: Option<DateTime<Utc>>,
    /// The sale's instants.
    pub timeline: Timeline,
    /// The instant of the reading.
    pub now: DateTime<Utc>,
}

/// The operator's metrics.
pub struct Metrics {
    registry: Registry,
    /// 1 while this replica holds the Lease.
    pub leader: Gauge,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles failed, by step.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile latency.
    pub duration: Histogram,
    states: SaleGauges<StateDetail>,
    stock: SaleGauges<KindDetail>,
    shards: SaleGauges<ShardDetail>,
    lag: SaleGauges<Whole>,
    max_lag: SaleGauges<Whole>,
    replicas: SaleGauges<KindDetail>,
    backpressure: SaleGauges<Whole>,
    drift: SaleGauges<Whole>,
    instants: SaleGauges<InstantDetail>,
    next: SaleGauges<TransitionDetail>,
    conditions: SaleGauges<ConditionDetail>,
}

const STATES: [SaleState; 10] = [
    SaleState::Scheduled,
    SaleState::Warming,
    SaleState::Warm,
    SaleState::Live,
    SaleState::Paused,
    SaleState::SoldOut,
    SaleState::Ended,
    SaleState::CleaningUp,
    SaleState::Completed,
    SaleState::Failed,
];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("flashsale_operator");
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the Lease",
            leader.clone(),
        );
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        let errors = Family::default();
        registry.register(
            "reconcile_errors",
            "Reconciles failed, by step",
            errors.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile latency",
            duration.clone(),
        );
        let r = &mut registry;
        Self {
            states: SaleGauges::register(r, "sale_state", "1 for the sale's current state"),
            stock: SaleGauges::register(r, "sale_stock_units", "Units, by where they are"),
            shards: SaleGauges::register(
                r,
                "sale_shard_remaining_units",
                "Units left in each Redis shard",
            ),
            lag: SaleGauges::register(
                r,
                "sale_consumer_lag",
                "Orders not yet consumed (absent while unreadable)",
            ),
            max_lag: SaleGauges::register(r, "sale_max_lag", "The lag backpressure starts at"),
            replicas: SaleGauges::register(
                r,
                "sale_consumer_replicas",
                "Consumer replicas, desired and ready",
            ),
            backpressure: SaleGauges::register(
                r,
                "sale_backpressure",
                "1 while purchases are refused with BUSY",
            ),
            drift: SaleGauges::register(
                r,
                "sale_drift_found",
                "Differences the last reconciliation found",
            ),
            instants: SaleGauges::register(
                r,
                "sale_timestamp_seconds",
                "The sale's instants: warm-up, start, end, cleanup, last reconciliation",
            ),
            next: SaleGauges::register(
                r,
                "sale_next_transition_seconds",
                "Seconds until the sale's next transition",
            ),
            conditions: SaleGauges::register(
                r,
                "sale_condition",
                "1 while the condition is True, with its reason",
            ),
            registry,
            leader,
            reconciles,
            errors,
            duration,
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

    /// Sets the sale's series from what a reconcile learned.
    pub fn record_sale(&self, sale: &SaleLabels, reading: &SaleReading) {
        self.states.replace(
            sale,
            STATES
                .iter()
                .map(|s| {
                    let state = format!("{s:?}");
                    (StateDetail { state }, i64::from(*s == reading.state))
                })
                .collect(),
        );
        let kind = |kind: &str| KindDetail { kind: kind.into() };
        let stock = &reading.stock;
        self.stock.replace(
            sale,
            [
                ("total", stock.total),
                ("reserved", stock.reserved),
                ("persisted", stock.persisted),
                ("remaining", stock.remaining),
                ("sold", stock.sold),
            ]
            .into_iter()
            .map(|(k, v)| (kind(k), v))
            .collect(),
        );
        self.shards.replace(
            sale,
            (stock.shards.iter().enumerate())
                .map(|(i, units)| {
                    (
                        ShardDetail {
                            shard: i.to_string(),
                        },
                        *units,
                    )
                })
                .collect(),
        );
        self.lag.replace(
            sale,
            reading.lag.map(|lag| (Whole {}, lag)).into_iter().collect(),
        );
        self.max_lag
            .replace(sale, vec![(Whole {}, reading.max_lag)]);
        self.replicas.replace(
            sale,
            vec![
                (kind("desired"), i64::from(reading.desired_replicas)),
                (kind("ready"), i64::from(reading.ready_replicas)),
            ],
        );
        self.backpressure
            .replace(sale, vec![(Whole {}, i64::from(reading.backpressure))]);
        self.drift.replace(
            sale,
            reading
                .drift_found
                .map(|d| (Whole {}, d))
                .into_iter()
                .collect(),
        );
        let t = &reading.timeline;
        self.instants.replace(
            sale,
            [
                ("warm", Some(t.warm_at)),
                ("start", Some(t.start)),
                ("end", Some(t.end)),
                ("cleanup", Some(t.cleanup_at)),
                ("reconciled", reading.reconciled_at),
            ]
            .into_iter()
            .filter_map(|(instant, at)| Some((instant, at?)))
            .map(|(instant, at)| {
                let instant = instant.to_string();
                (InstantDetail { instant }, at.timestamp())
            })
            .collect(),
        );
        self.next.replace(
            sale,
            next_transition(t, reading.now)
                .map(|(transition, at)| {
                    (
                        TransitionDetail {
                            transition: transition.to_string(),
                        },
                        (at - reading.now).num_seconds(),
                    )
                })
                .into_iter()
                .collect(),
        );
    }

    /// Sets the sale's condition series from the conditions its status holds.
    pub fn record_conditions(&self, sale: &SaleLabels, conditions: &[Condition]) {
        self.conditions.replace(
            sale,
            conditions
                .iter()
                .map(|c| {
                    (
                        ConditionDetail {
                            condition: c.type_.clone(),
                            reason: c.reason.clone(),
                        },
                        i64::from(c.status == "True"),
                    )
                })
                .collect(),
        );
    }

    /// Forgets a deleted sale.
    pub fn forget(&self, sale: &SaleLabels) {
        self.states.forget(sale);
        self.stock.forget(sale);
        self.shards.forget(sale);
        self.lag.forget(sale);
        self.max_lag.forget(sale);
        self.replicas.forget(sale);
        self.backpressure.forget(sale);
        self.drift.forget(sale);
        self.instants.forget(sale);
        self.next.forget(sale);
        self.conditions.forget(sale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    fn sale() -> SaleLabels {
        SaleLabels {
            namespace: "shop".into(),
            sale: "drop".into(),
        }
    }

    fn reading(shards: Vec<i64>, lag: Option<i64>) -> SaleReading {
        let at = |m| Utc.with_ymd_and_hms(2026, 12, 1, 12, m, 0).unwrap();
        SaleReading {
            state: SaleState::Live,
            stock: StockStatus {
                total: 100,
                reserved: 5,
                persisted: 15,
                remaining: 80,
                sold: 20,
                shards,
            },
            lag,
            max_lag: 10_000,
            desired_replicas: 3,
            ready_replicas: 2,
            backpressure: false,
            drift_found: Some(0),
            reconciled_at: None,
            timeline: Timeline {
                warm_at: at(0),
                start: at(10),
                end: at(40),
                cleanup_at: at(50),
                reconcile_every: Duration::from_secs(60),
                poll_every: Duration::from_secs(5),
            },
            now: at(20),
        }
    }

    fn condition(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }
    }

    const S: &str = "namespace=\"shop\",sale=\"drop\"";

    #[test]
    fn a_reading_becomes_the_sale_series() {
        let m = Metrics::default();
        m.record_sale(&sale(), &reading(vec![40, 40], Some(7)));
        let text = m.encode();
        for line in [
            format!("flashsale_operator_sale_state{{{S},state=\"Live\"}} 1"),
            format!("flashsale_operator_sale_state{{{S},state=\"Warm\"}} 0"),
            format!("flashsale_operator_sale_stock_units{{{S},kind=\"remaining\"}} 80"),
            format!("flashsale_operator_sale_shard_remaining_units{{{S},shard=\"1\"}} 40"),
            format!("flashsale_operator_sale_consumer_lag{{{S}}} 7"),
            format!("flashsale_operator_sale_max_lag{{{S}}} 10000"),
            format!("flashsale_operator_sale_consumer_replicas{{{S},kind=\"ready\"}} 2"),
            format!("flashsale_operator_sale_backpressure{{{S}}} 0"),
            format!("flashsale_operator_sale_drift_found{{{S}}} 0"),
            format!(
                "flashsale_operator_sale_timestamp_seconds{{{S},instant=\"start\"}} 1796127000"
            ),
            format!(
                "flashsale_operator_sale_next_transition_seconds{{{S},transition=\"close\"}} 1200"
            ),
        ] {
            assert!(text.contains(&line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn series_that_no_longer_apply_vanish() {
        let m = Metrics::default();
        m.record_sale(&sale(), &reading(vec![40, 40], Some(7)));
        m.record_conditions(
            &sale(),
            &[condition("Degraded", "True", "KafkaUnavailable")],
        );
        m.record_sale(&sale(), &reading(vec![80], None));
        m.record_conditions(&sale(), &[condition("Degraded", "False", "AsExpected")]);
        let text = m.encode();
        assert!(!text.contains("shard=\"1\""), "{text}");
        assert!(!text.contains("sale_consumer_lag{"), "{text}");
        assert!(!text.contains("KafkaUnavailable"), "{text}");
        assert!(
            text.contains(&format!(
                "flashsale_operator_sale_condition{{{S},condition=\"Degraded\",reason=\"AsExpected\"}} 0"
            )),
            "{text}"
        );
        m.forget(&sale());
        assert!(!m.encode().contains("drop"), "{}", m.encode());
    }
}
