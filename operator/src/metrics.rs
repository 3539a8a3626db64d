//! The operator's Prometheus metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::crd::SaleState;

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The failing step's category: invalid, observe, apply, status, finalizer.
    pub category: String,
}

/// Labels of a sale's state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `namespace/name`.
    pub sale: String,
    /// The state.
    pub state: String,
}

/// The operator's metrics.
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles failed, by category.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile latency.
    pub duration: Histogram,
    /// 1 for each sale's current state, 0 for the others.
    pub states: Family<StateLabels, Gauge>,
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
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        let errors = Family::default();
        registry.register(
            "reconcile_errors",
            "Reconciles failed, by category",
            errors.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile latency",
            duration.clone(),
        );
        let states = Family::default();
        registry.register(
            "sale_state",
            "1 for each sale's current state",
            states.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            duration,
            states,
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

    /// Sets the sale's state gauges.
    pub fn set_state(&self, sale: &str, state: SaleState) {
        for s in STATES {
            self.states
                .get_or_create(&StateLabels {
                    sale: sale.to_string(),
                    state: format!("{s:?}"),
                })
                .set(i64::from(s == state));
        }
    }

    /// Forgets a deleted sale.
    pub fn forget(&self, sale: &str) {
        for s in STATES {
            self.states.remove(&StateLabels {
                sale: sale.to_string(),
                state: format!("{s:?}"),
            });
        }
    }
}
