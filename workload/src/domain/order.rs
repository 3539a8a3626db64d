//! The order state machine. Every status change in the database is a
//! conditional update from the status this function expects, so two racing
//! changes cannot both win.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where an order is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Accepted by the API (stock reserved in Redis, message in Kafka), not yet persisted.
    Pending,
    /// Persisted, waiting for payment.
    Unpaid,
    /// Paid.
    Paid,
    /// Cancelled by the shopper or by the payment timeout; stock returned.
    Cancelled,
    /// Cancelled after payment; stock returned, money back.
    Refunded,
    /// Accepted but could not be persisted (refused by the database or poison); stock returned.
    Failed,
}

/// Something that happens to an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderEvent {
    /// A consumer persisted it.
    Persisted,
    /// The shopper paid.
    Pay,
    /// The shopper cancelled.
    Cancel,
    /// The payment timeout passed while unpaid.
    PaymentTimeout,
    /// The pipeline gave up on it.
    Fail,
}

/// What an event does to an order in a given status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Move to this status (from the current one, conditionally).
    To(OrderStatus),
    /// Already done: the answer is the current status, nothing changes (idempotent retry).
    AlreadyDone,
    /// Not allowed from the current status.
    Illegal,
    /// Not yet possible: retry later (paying a PENDING order).
    NotYet,
}

impl OrderStatus {
    /// The wire and database name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Unpaid => "UNPAID",
            Self::Paid => "PAID",
            Self::Cancelled => "CANCELLED",
            Self::Refunded => "REFUNDED",
            Self::Failed => "FAILED",
        }
    }

    /// Parses the database name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Unpaid,
            Self::Paid,
            Self::Cancelled,
            Self::Refunded,
            Self::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
    }

    /// Whether the order's units count against stock and the shopper's limit.
    pub fn holds_stock(self) -> bool {
        matches!(self, Self::Pending | Self::Unpaid | Self::Paid)
    }

    /// What `event` does to an order in this status.
    pub fn on(self, event: OrderEvent) -> Transition {
        use OrderEvent as E;
        use OrderStatus as S;
        use Transition::{AlreadyDone, Illegal, NotYet, To};
        match (self, event) {
            (S::Pending, E::Persisted) => To(S::Unpaid),
            (S::Pending, E::Fail) => To(S::Failed),
            (S::Pending, E::Pay | E::Cancel) => NotYet,
            (S::Unpaid, E::Pay) => To(S::Paid),
            (S::Unpaid, E::Cancel | E::PaymentTimeout) => To(S::Cancelled),
            (S::Paid, E::Cancel) => To(S::Refunded),
            (S::Paid, E::Pay) | (S::Cancelled, E::Cancel) | (S::Refunded, E::Cancel) => AlreadyDone,
            (S::Failed, E::Fail) | (S::Unpaid | S::Paid, E::Persisted) => AlreadyDone,
            _ => Illegal,
        }
    }
}

/// What one event of a batch does, applied after the batch's earlier events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchAnswer {
    /// The order moves `from` one status `to` another.
    Changed {
        /// Its status before this event.
        from: OrderStatus,
        /// Its status after.
        to: OrderStatus,
    },
    /// Nothing to do: the order is already there.
    AlreadyDone(OrderStatus),
    /// Not allowed (or not yet possible) from this status.
    Illegal(OrderStatus),
    /// No order of this shopper under that id.
    NotFound,
}

/// Applies `events` (order, shopper, event) in turn to the orders `found`
/// (order → its shopper and status, as locked): each event sees what the
/// earlier ones of the batch did, as if each had had its own transaction.
/// Answers one [`BatchAnswer`] per event and each changed order's status
/// before the batch and after it.
pub fn apply_in_turn(
    found: &std::collections::HashMap<uuid::Uuid, (String, OrderStatus)>,
    events: &[(uuid::Uuid, &str, OrderEvent)],
) -> (
    Vec<BatchAnswer>,
    std::collections::BTreeMap<uuid::Uuid, (OrderStatus, OrderStatus)>,
) {
    let mut changed = std::collections::BTreeMap::new();
    let answers = events
        .iter()
        .map(|&(id, shopper, event)| {
            let Some((_, before)) = found.get(&id).filter(|(owner, _)| owner == shopper) else {
                return BatchAnswer::NotFound;
            };
            let from = changed.get(&id).map_or(*before, |&(_, now)| now);
            match from.on(event) {
                Transition::To(to) => {
                    changed.insert(id, (*before, to));
                    BatchAnswer::Changed { from, to }
                }
                Transition::AlreadyDone => BatchAnswer::AlreadyDone(from),
                Transition::Illegal | Transition::NotYet => BatchAnswer::Illegal(from),
            }
        })
        .collect();
    (answers, changed)
}

/// How far an order id's time may sit outside its sale's window: the API
/// mints it when the purchase arrives, and its clock and Redis' may differ.
pub const ORDER_TIME_SLACK: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether `id` can name an order of a sale with one of `windows`. Order ids
/// are UUIDv7 minted at acceptance, inside the window: another version, or
/// a time outside every window (give or take `slack`), names no order.
pub fn may_name_an_order(
    id: uuid::Uuid,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
    slack: std::time::Duration,
) -> bool {
    if id.get_version_num() != 7 {
        return false;
    }
    let Some((secs, nanos)) = id.get_timestamp().map(|t| t.to_unix()) else {
        return false;
    };
    let Some(at) = DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), nanos) else {
        return false;
    };
    let slack = chrono::Duration::from_std(slack).unwrap_or_default();
    windows
        .iter()
        .any(|(start, end)| *start - slack <= at && at <= *end + slack)
}

/// A new order id for `shopper`: a UUIDv7 (minted at acceptance, so its
/// time says which sale windows it can belong to) whose last two bytes are a
/// stable hash of the shopper, so that a lookup tells an id that cannot be
/// this shopper's without any I/O.
pub fn mint_order_id(shopper: &str) -> uuid::Uuid {
    let mut bytes = *uuid::Uuid::now_v7().as_bytes();
    bytes[14..].copy_from_slice(&shopper_tag(shopper));
    uuid::Uuid::from_bytes(bytes)
}

/// Whether `id` may be an order of `shopper` ([`mint_order_id`]): false for
/// another shopper's order (but for one in 65,536) and most made-up ids.
pub fn may_be_shoppers(id: uuid::Uuid, shopper: &str) -> bool {
    id.as_bytes()[14..] == shopper_tag(shopper)
}

fn shopper_tag(shopper: &str) -> [u8; 2] {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(b"flashsale order of ");
    hasher.write(shopper.as_bytes());
    let hash = hasher.finish().to_be_bytes();
    [hash[0], hash[1]]
}

#[cfg(test)]
mod tests {
    use super::OrderEvent as E;
    use super::OrderStatus as S;
    use super::Transition::*;
    use super::{
        BatchAnswer, DateTime, apply_in_turn, may_be_shoppers, may_name_an_order, mint_order_id,
    };

    const ALL_STATUSES: [S; 6] = [
        S::Pending,
        S::Unpaid,
        S::Paid,
        S::Cancelled,
        S::Refunded,
        S::Failed,
    ];
    const ALL_EVENTS: [E; 5] = [E::Persisted, E::Pay, E::Cancel, E::PaymentTimeout, E::Fail];

    /// Every (status, event) pair, spelled out: the table is the specification.
    #[test]
    fn transition_table_is_exhaustive() {
        let table = [
            (S::Pending, E::Persisted, To(S::Unpaid)),
            (S::Pending, E::Pay, NotYet),
            (S::Pending, E::Cancel, NotYet),
            (S::Pending, E::PaymentTimeout, Illegal),
            (S::Pending, E::Fail, To(S::Failed)),
            (S::Unpaid, E::Persisted, AlreadyDone),
            (S::Unpaid, E::Pay, To(S::Paid)),
            (S::Unpaid, E::Cancel, To(S::Cancelled)),
            (S::Unpaid, E::PaymentTimeout, To(S::Cancelled)),
            (S::Unpaid, E::Fail, Illegal),
            (S::Paid, E::Persisted, AlreadyDone),
            (S::Paid, E::Pay, AlreadyDone),
            (S::Paid, E::Cancel, To(S::Refunded)),
            (S::Paid, E::PaymentTimeout, Illegal),
            (S::Paid, E::Fail, Illegal),
            (S::Cancelled, E::Persisted, Illegal),
            (S::Cancelled, E::Pay, Illegal),
            (S::Cancelled, E::Cancel, AlreadyDone),
            (S::Cancelled, E::PaymentTimeout, Illegal),
            (S::Cancelled, E::Fail, Illegal),
            (S::Refunded, E::Persisted, Illegal),
            (S::Refunded, E::Pay, Illegal),
            (S::Refunded, E::Cancel, AlreadyDone),
            (S::Refunded, E::PaymentTimeout, Illegal),
            (S::Refunded, E::Fail, Illegal),
            (S::Failed, E::Persisted, Illegal),
            (S::Failed, E::Pay, Illegal),
            (S::Failed, E::Cancel, Illegal),
            (S::Failed, E::PaymentTimeout, Illegal),
            (S::Failed, E::Fail, AlreadyDone),
        ];
        assert_eq!(table.len(), ALL_STATUSES.len() * ALL_EVENTS.len());
        for (status, event, expected) in table {
            assert_eq!(status.on(event), expected, "{status:?} on {event:?}");
        }
    }

    #[test]
    fn no_transition_leaves_a_final_status() {
        for status in [S::Cancelled, S::Refunded, S::Failed] {
            for event in ALL_EVENTS {
                assert!(
                    !matches!(status.on(event), To(_)),
                    "{status:?} is final but {event:?} moves it"
                );
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for status in ALL_STATUSES {
            assert_eq!(S::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert_eq!(S::parse("paid"), None);
    }

    #[test]
    fn only_live_orders_hold_stock() {
        let holding: Vec<_> = ALL_STATUSES
            .into_iter()
            .filter(|s| s.holds_stock())
            .collect();
        assert_eq!(holding, vec![S::Pending, S::Unpaid, S::Paid]);
    }

    #[test]
    fn only_a_v7_id_minted_near_a_window_may_name_an_order() {
        let at = |secs: i64| DateTime::from_timestamp(secs, 0).unwrap();
        let minted =
            |secs: u64| uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, 0));
        let windows = [(at(1_000_000), at(1_003_600))];
        let slack = std::time::Duration::from_secs(300);
        for (what, id, expected) in [
            ("inside the window", minted(1_001_000), true),
            (
                "just before the start, within the slack",
                minted(999_800),
                true,
            ),
            (
                "just after the end, within the slack",
                minted(1_003_800),
                true,
            ),
            ("long before", minted(900_000), false),
            ("long after", minted(1_010_000), false),
            ("a v4 id", uuid::Uuid::new_v4(), false),
            ("the nil id", uuid::Uuid::nil(), false),
        ] {
            assert_eq!(may_name_an_order(id, &windows, slack), expected, "{what}");
        }
        assert!(
            !may_name_an_order(minted(1_001_000), &[], slack),
            "no sale at all"
        );
    }

    #[test]
    fn an_order_id_carries_its_shoppers_tag() {
        let id = mint_order_id("alice");
        assert_eq!(id.get_version_num(), 7);
        assert!(may_be_shoppers(id, "alice"));
        let others = (0..1000)
            .filter(|i| may_be_shoppers(id, &format!("shopper-{i}")))
            .count();
        assert!(others <= 2, "{others} of 1,000 other shoppers match");
        assert_ne!(mint_order_id("alice"), id, "ids stay unique");
    }

    #[test]
    fn a_batch_applies_its_events_in_turn() {
        let (a, b, c) = (
            uuid::Uuid::from_u128(1),
            uuid::Uuid::from_u128(2),
            uuid::Uuid::from_u128(3),
        );
        let found = [
            (a, ("ann".to_string(), S::Unpaid)),
            (b, ("bob".to_string(), S::Paid)),
            (c, ("cy".to_string(), S::Cancelled)),
        ]
        .into_iter()
        .collect();
        let events = [
            (a, "ann", E::Cancel),
            (a, "ann", E::Cancel),
            (a, "ann", E::Pay),
            (a, "eve", E::Cancel),
            (b, "bob", E::Pay),
            (b, "bob", E::Cancel),
            (c, "cy", E::Cancel),
            (uuid::Uuid::from_u128(4), "dan", E::Cancel),
        ];
        let (answers, changed) = apply_in_turn(&found, &events);
        assert_eq!(
            answers,
            [
                BatchAnswer::Changed {
                    from: S::Unpaid,
                    to: S::Cancelled
                },
                BatchAnswer::AlreadyDone(S::Cancelled),
                BatchAnswer::Illegal(S::Cancelled),
                BatchAnswer::NotFound,
                BatchAnswer::AlreadyDone(S::Paid),
                BatchAnswer::Changed {
                    from: S::Paid,
                    to: S::Refunded
                },
                BatchAnswer::AlreadyDone(S::Cancelled),
                BatchAnswer::NotFound,
            ]
        );
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            [(a, (S::Unpaid, S::Cancelled)), (b, (S::Paid, S::Refunded))],
            "each changed order once, from its status before the batch"
        );
    }
}
