//! What a purchase script reply means. The Redis adapter turns the raw reply
//! into [`ReplyField`]s; everything after that is decided here, purely.

/// One element of a script's array reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyField {
    /// A Lua number.
    Int(i64),
    /// A Lua string.
    Text(String),
}

/// The state of a reservation in Redis (see `lua/purchase.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationState {
    /// Stock deducted; the order is on its way through Kafka.
    Reserved,
    /// The broker acknowledged the order's message (`lua/confirm.lua`): it
    /// will be persisted, and a retry of the purchase is answered with it.
    Acknowledged,
    /// A consumer claimed it to persist the order.
    Claimed,
    /// Its units went back to the shard.
    Released,
}

impl ReservationState {
    /// Parses the one-letter state of a reservation record.
    pub fn from_letter(letter: &str) -> Option<Self> {
        match letter {
            "R" => Some(Self::Reserved),
            "A" => Some(Self::Acknowledged),
            "C" => Some(Self::Claimed),
            "X" => Some(Self::Released),
            _ => None,
        }
    }

    /// Its letter in a reservation record.
    pub fn letter(self) -> &'static str {
        match self {
            Self::Reserved => "R",
            Self::Acknowledged => "A",
            Self::Claimed => "C",
            Self::Released => "X",
        }
    }

    /// Whether the order's message is known to be in its topic: the shopper
    /// may be told the order was accepted.
    pub fn is_confirmed(self) -> bool {
        matches!(self, Self::Acknowledged | Self::Claimed)
    }
}

/// A reservation record as `lua/purchase.lua` writes it:
/// `<state>:<quantity>:<created_ms>:<shopper>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Where it is.
    pub state: ReservationState,
    /// Units reserved.
    pub quantity: i64,
    /// When Redis reserved it, Unix milliseconds (Redis's clock).
    pub created_ms: i64,
    /// Who bought.
    pub shopper: String,
}

impl Reservation {
    /// Parses a record; `None` for anything the scripts never write.
    pub fn parse(record: &str) -> Option<Self> {
        let mut parts = record.splitn(4, ':');
        let state = ReservationState::from_letter(parts.next()?)?;
        let quantity = parts.next()?.parse().ok()?;
        let created_ms = parts.next()?.parse().ok()?;
        let shopper = parts.next()?.to_string();
        Some(Self {
            state,
            quantity,
            created_ms,
            shopper,
        })
    }
}

/// The idempotency hash field of `shopper`'s `key`, exactly as
/// `lua/purchase.lua` writes it: the shopper's length first, so no two pairs
/// share a field.
pub fn idempotency_field(shopper: &str, key: &str) -> String {
    format!("{}:{shopper}|{key}", shopper.len())
}

/// What `lua/purchase.lua` decided for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardDecision {
    /// Reserved: stock deducted, the shopper's units counted.
    Accepted {
        /// The reservation's order id.
        order_id: String,
    },
    /// The sale is not warmed in Redis.
    NotWarmed,
    /// The kill switch is on.
    Paused,
    /// Before the window (by Redis's clock).
    NotStarted {
        /// Window start, Unix milliseconds.
        start_ms: i64,
    },
    /// After the window.
    Ended,
    /// The order backlog is too high (backpressure).
    Busy,
    /// This shard cannot cover the quantity: borrow from another shard, retry.
    ShardDry {
        /// Units the shard still holds (fewer than asked for).
        available: i64,
    },
    /// The shopper would exceed the purchase limit.
    LimitExceeded {
        /// Units the shopper holds already.
        held: i64,
        /// The sale's per-shopper limit.
        limit: i64,
    },
    /// The sale's Redis state was found lost (fenced): nothing reserved.
    StateLost,
    /// The purchase token shown was used by another order: nothing reserved.
    TokenUsed,
    /// The same order (or idempotency key) was decided before.
    Replay {
        /// The first attempt's order id.
        order_id: String,
        /// Where that reservation is now.
        state: ReservationState,
    },
}

/// A reply the scripts never give: a bug or a foreign script under our SHA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected purchase script reply {0:?}")]
pub struct UnexpectedReply(pub Vec<ReplyField>);

/// Reads `lua/purchase.lua`'s reply.
pub fn read_purchase_reply(reply: &[ReplyField]) -> Result<ShardDecision, UnexpectedReply> {
    use ReplyField::{Int, Text};
    let decision = match reply {
        [Int(0), Text(order_id), Int(_)] => ShardDecision::Accepted {
            order_id: order_id.clone(),
        },
        [Int(1)] => ShardDecision::NotWarmed,
        [Int(2)] => ShardDecision::Paused,
        [Int(3), Text(start)] => match start.parse() {
            Ok(start_ms) => ShardDecision::NotStarted { start_ms },
            Err(_) => return Err(UnexpectedReply(reply.to_vec())),
        },
        [Int(4)] => ShardDecision::Ended,
        [Int(5)] => ShardDecision::Busy,
        [Int(6), Int(available)] => ShardDecision::ShardDry {
            available: *available,
        },
        [Int(10)] => ShardDecision::StateLost,
        [Int(11)] => ShardDecision::TokenUsed,
        [Int(7), Int(held), Int(limit)] => ShardDecision::LimitExceeded {
            held: *held,
            limit: *limit,
        },
        [Int(8), Text(order_id), Text(state)] => match ReservationState::from_letter(state) {
            Some(state) => ShardDecision::Replay {
                order_id: order_id.clone(),
                state,
            },
            None => return Err(UnexpectedReply(reply.to_vec())),
        },
        _ => return Err(UnexpectedReply(reply.to_vec())),
    };
    Ok(decision)
}

/// What `lua/release.lua` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// Released now: this many units went back.
    Released(i64),
    /// The reservation was in another state than expected; nothing changed.
    Found(ReservationState),
    /// No such reservation.
    Missing,
    /// Younger than the minimum age asked for; left alone.
    TooYoung,
}

/// Reads `lua/release.lua`'s reply.
pub fn read_release_reply(reply: &[i64]) -> Result<ReleaseOutcome, UnexpectedReply> {
    Ok(match reply {
        [0, qty] => ReleaseOutcome::Released(*qty),
        [1] => ReleaseOutcome::Found(ReservationState::Reserved),
        [2] => ReleaseOutcome::Found(ReservationState::Claimed),
        [3] => ReleaseOutcome::Found(ReservationState::Released),
        [4] => ReleaseOutcome::Missing,
        [5] => ReleaseOutcome::TooYoung,
        [6] => ReleaseOutcome::Found(ReservationState::Acknowledged),
        _ => {
            return Err(UnexpectedReply(
                reply.iter().map(|&i| ReplyField::Int(i)).collect(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::ReplyField::{Int, Text};
    use super::*;

    fn t(s: &str) -> ReplyField {
        Text(s.to_string())
    }

    #[test]
    fn purchase_replies_table() {
        let cases: Vec<(Vec<ReplyField>, Result<ShardDecision, ()>)> = vec![
            (
                vec![Int(0), t("o1"), Int(5)],
                Ok(ShardDecision::Accepted {
                    order_id: "o1".into(),
                }),
            ),
            (vec![Int(1)], Ok(ShardDecision::NotWarmed)),
            (vec![Int(2)], Ok(ShardDecision::Paused)),
            (
                vec![Int(3), t("1700000000000")],
                Ok(ShardDecision::NotStarted {
                    start_ms: 1_700_000_000_000,
                }),
            ),
            (vec![Int(3), t("soon")], Err(())),
            (vec![Int(4)], Ok(ShardDecision::Ended)),
            (vec![Int(5)], Ok(ShardDecision::Busy)),
            (
                vec![Int(6), Int(1)],
                Ok(ShardDecision::ShardDry { available: 1 }),
            ),
            (
                vec![Int(7), Int(2), Int(2)],
                Ok(ShardDecision::LimitExceeded { held: 2, limit: 2 }),
            ),
            (
                vec![Int(8), t("o1"), t("C")],
                Ok(ShardDecision::Replay {
                    order_id: "o1".into(),
                    state: ReservationState::Claimed,
                }),
            ),
            (
                vec![Int(8), t("o1"), t("A")],
                Ok(ShardDecision::Replay {
                    order_id: "o1".into(),
                    state: ReservationState::Acknowledged,
                }),
            ),
            (vec![Int(11)], Ok(ShardDecision::TokenUsed)),
            (vec![Int(8), t("o1"), t("Z")], Err(())),
            (vec![Int(9)], Err(())),
            (vec![], Err(())),
            (vec![Int(0)], Err(())),
            (vec![t("0")], Err(())),
        ];
        for (reply, expected) in cases {
            assert_eq!(
                read_purchase_reply(&reply).map_err(|_| ()),
                expected,
                "{reply:?}"
            );
        }
    }

    #[test]
    fn release_replies_table() {
        let cases = [
            (vec![0, 2], Some(ReleaseOutcome::Released(2))),
            (
                vec![1],
                Some(ReleaseOutcome::Found(ReservationState::Reserved)),
            ),
            (
                vec![2],
                Some(ReleaseOutcome::Found(ReservationState::Claimed)),
            ),
            (
                vec![3],
                Some(ReleaseOutcome::Found(ReservationState::Released)),
            ),
            (vec![4], Some(ReleaseOutcome::Missing)),
            (vec![5], Some(ReleaseOutcome::TooYoung)),
            (
                vec![6],
                Some(ReleaseOutcome::Found(ReservationState::Acknowledged)),
            ),
            (vec![9], None),
            (vec![], None),
        ];
        for (reply, expected) in cases {
            assert_eq!(read_release_reply(&reply).ok(), expected, "{reply:?}");
        }
    }

    #[test]
    fn reservation_records() {
        assert_eq!(
            Reservation::parse("R:2:1700:alice"),
            Some(Reservation {
                state: ReservationState::Reserved,
                quantity: 2,
                created_ms: 1700,
                shopper: "alice".into()
            })
        );
        // Shopper ids may contain the separator: it is the last field.
        assert_eq!(
            Reservation::parse("X:1:5:tenant:alice").map(|r| r.shopper),
            Some("tenant:alice".into())
        );
        for bad in ["", "R", "R:2:1700", "Q:2:1700:a", "R:x:1700:a", "R:2:t:a"] {
            assert_eq!(Reservation::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reservation_letters() {
        use ReservationState::*;
        for (letter, state, confirmed) in [
            ("R", Reserved, false),
            ("A", Acknowledged, true),
            ("C", Claimed, true),
            ("X", Released, false),
        ] {
            assert_eq!(ReservationState::from_letter(letter), Some(state));
            assert_eq!(state.letter(), letter);
            assert_eq!(state.is_confirmed(), confirmed, "{letter}");
        }
        assert_eq!(ReservationState::from_letter("r"), None);
    }
}
