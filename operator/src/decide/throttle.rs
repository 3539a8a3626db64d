//! Which status changes are written at once, and which wait: a storm moves
//! the counters (stock, lag, the counts in condition messages) on nearly
//! every pass, and every status write is a watch event and so another
//! reconcile. Transitions — state, condition status or reason, replicas,
//! backpressure, reconciliation results — are written at once; counters at
//! most once per `consumers.pollInterval`.

use std::time::{Duration, Instant};

use crate::model::crd::FlashSaleStatus;

/// What of a status is written at once when it changes.
#[derive(Debug, PartialEq)]
struct Shape<'a> {
    generation: Option<i64>,
    state: Option<crate::model::crd::SaleState>,
    conditions: Vec<(&'a str, &'a str, &'a str)>,
    consumers: Option<(
        i32,
        i32,
        bool,
        Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
    )>,
    last_reconciliation: Option<&'a crate::model::crd::ReconciliationSummary>,
    periodic: Option<u64>,
}

fn shape(s: &FlashSaleStatus) -> Shape<'_> {
    Shape {
        generation: s.observed_generation,
        state: s.state,
        conditions: s
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect(),
        consumers: s
            .consumers
            .as_ref()
            .map(|c| (c.replicas, c.desired_replicas, c.busy, c.low_since.as_ref())),
        last_reconciliation: s.last_reconciliation.as_ref(),
        periodic: s.periodic_reconciliations,
    }
}

/// Whether `next` must be written now: it differs from `previous` in more
/// than counters, or the counters were last written `every` or longer ago.
pub fn write_now(
    previous: Option<&FlashSaleStatus>,
    next: &FlashSaleStatus,
    last_write: Option<Instant>,
    every: Duration,
    now: Instant,
) -> bool {
    if previous == Some(next) {
        return false;
    }
    let transition = previous.map(shape) != Some(shape(next));
    transition || last_write.is_none_or(|at| now.duration_since(at) >= every)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::crd::{ConsumersStatus, SaleState, StockStatus};

    fn status(state: SaleState, remaining: i64, lag: i64) -> FlashSaleStatus {
        FlashSaleStatus {
            state: Some(state),
            stock: Some(StockStatus {
                remaining,
                ..StockStatus::default()
            }),
            consumers: Some(ConsumersStatus {
                lag,
                ..ConsumersStatus::default()
            }),
            ..FlashSaleStatus::default()
        }
    }

    #[test]
    fn counters_wait_transitions_do_not() {
        let t0 = Instant::now();
        let every = Duration::from_secs(2);
        let before = status(SaleState::Live, 10, 5);
        let soon = t0 + Duration::from_millis(500);
        let late = t0 + Duration::from_secs(3);
        let cases = [
            ("unchanged", status(SaleState::Live, 10, 5), late, false),
            (
                "counters, too soon",
                status(SaleState::Live, 8, 7),
                soon,
                false,
            ),
            (
                "counters, a poll later",
                status(SaleState::Live, 8, 7),
                late,
                true,
            ),
            ("a transition", status(SaleState::SoldOut, 0, 7), soon, true),
        ];
        for (name, next, now, expected) in cases {
            assert_eq!(
                write_now(Some(&before), &next, Some(t0), every, now),
                expected,
                "{name}"
            );
        }
        assert!(
            write_now(None, &before, None, every, soon),
            "the first status"
        );
    }
}
