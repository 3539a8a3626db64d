//! What a sale does while Redis does not answer the operator
//! (`spec.degradation.redisDown`): keep refusing, or record the loss and —
//! once every order Redis accepted is persisted — sell through PostgreSQL.

use std::time::Duration;

use chrono::{DateTime, Utc};
use flashsale_workload::domain::sale::RedisLife;

use crate::model::crd::RedisDown;

/// How long Redis must fail the operator before a sale that may sell
/// through the database records its state lost: a blip of a second costs no
/// recovery, and an outage reaches the database within two polls.
pub const UNREACHABLE_BEFORE_LOSS: Duration = Duration::from_secs(3);

/// What the operator sees of a sale whose Redis does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisDownFacts {
    /// `spec.degradation.redisDown`.
    pub mode: RedisDown,
    /// `spec.paused`.
    pub paused: bool,
    /// Since the first of the failures in a row.
    pub unreachable_for: Duration,
    /// What the database knows of the sale's Redis state.
    pub life: RedisLife,
    /// The consumer group's lag (`None`: unreadable).
    pub lag: Option<i64>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// The one step to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisDownStep {
    /// Nothing now (refusing, or selling through the database already).
    Wait,
    /// Record the sale's Redis state lost: every API refuses Redis from
    /// then on, and consumers persist without claims.
    RecordLoss,
    /// Every order accepted before the loss is persisted: sell through
    /// PostgreSQL.
    SellThroughDatabase,
    /// The kill switch is on: stop selling through PostgreSQL.
    StopSellingThroughDatabase,
}

/// The step for `facts`; `grace` is the recovery's (no purchase that
/// reserved in Redis before the loss can still produce after it).
pub fn while_redis_down(facts: &RedisDownFacts, grace: Duration) -> RedisDownStep {
    let life = facts.life;
    if facts.mode == RedisDown::Reject {
        return RedisDownStep::Wait;
    }
    if facts.paused {
        return if life.through_database_since.is_some() {
            RedisDownStep::StopSellingThroughDatabase
        } else {
            RedisDownStep::Wait
        };
    }
    // Not opened: never warmed, cleaned up, or a recovery already reloading.
    if !life.opened || life.through_database_since.is_some() {
        return RedisDownStep::Wait;
    }
    let Some(since) = life.lost_since else {
        return if facts.unreachable_for >= UNREACHABLE_BEFORE_LOSS {
            RedisDownStep::RecordLoss
        } else {
            RedisDownStep::Wait
        };
    };
    let recorded_for = (facts.now - since).to_std().unwrap_or_default();
    if facts.lag == Some(0) && recorded_for >= grace {
        RedisDownStep::SellThroughDatabase
    } else {
        RedisDownStep::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(6);

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn opened() -> RedisLife {
        RedisLife {
            incarnation: Some(uuid::Uuid::nil()),
            opened: true,
            ..RedisLife::default()
        }
    }

    fn facts() -> RedisDownFacts {
        RedisDownFacts {
            mode: RedisDown::Database,
            paused: false,
            unreachable_for: Duration::from_secs(5),
            life: opened(),
            lag: Some(0),
            now: t(20),
        }
    }

    #[test]
    fn an_outage_is_recorded_drained_then_sold_through_the_database() {
        let lost = RedisLife {
            lost_since: Some(t(10)),
            ..opened()
        };
        let selling = RedisLife {
            through_database_since: Some(t(17)),
            ..lost
        };
        let cases = [
            (
                "a blip",
                Duration::from_secs(1),
                opened(),
                Some(0),
                t(20),
                RedisDownStep::Wait,
            ),
            (
                "down 3 s",
                UNREACHABLE_BEFORE_LOSS,
                opened(),
                Some(0),
                t(20),
                RedisDownStep::RecordLoss,
            ),
            (
                "recorded 5 s ago: a purchase may still produce",
                Duration::from_secs(8),
                lost,
                Some(0),
                t(15),
                RedisDownStep::Wait,
            ),
            (
                "orders still in the topic",
                Duration::from_secs(9),
                lost,
                Some(4),
                t(16),
                RedisDownStep::Wait,
            ),
            (
                "lag unreadable",
                Duration::from_secs(9),
                lost,
                None,
                t(16),
                RedisDownStep::Wait,
            ),
            (
                "drained after the grace",
                Duration::from_secs(9),
                lost,
                Some(0),
                t(16),
                RedisDownStep::SellThroughDatabase,
            ),
            (
                "selling already",
                Duration::from_secs(30),
                selling,
                Some(3),
                t(40),
                RedisDownStep::Wait,
            ),
        ];
        for (what, unreachable_for, life, lag, now, step) in cases {
            let seen = RedisDownFacts {
                unreachable_for,
                life,
                lag,
                now,
                ..facts()
            };
            assert_eq!(while_redis_down(&seen, GRACE), step, "{what}");
        }
    }

    #[test]
    fn reject_paused_and_unopened_sales_never_sell_through_the_database() {
        let lost = RedisLife {
            lost_since: Some(t(0)),
            ..opened()
        };
        let reject = RedisDownFacts {
            mode: RedisDown::Reject,
            life: lost,
            ..facts()
        };
        assert_eq!(while_redis_down(&reject, GRACE), RedisDownStep::Wait);
        let paused = RedisDownFacts {
            paused: true,
            life: lost,
            ..facts()
        };
        assert_eq!(while_redis_down(&paused, GRACE), RedisDownStep::Wait);
        let paused_selling = RedisDownFacts {
            life: RedisLife {
                through_database_since: Some(t(8)),
                ..lost
            },
            ..paused
        };
        assert_eq!(
            while_redis_down(&paused_selling, GRACE),
            RedisDownStep::StopSellingThroughDatabase
        );
        for life in [
            RedisLife::default(),
            RedisLife {
                opened: false,
                ..lost
            },
        ] {
            let unopened = RedisDownFacts { life, ..facts() };
            assert_eq!(
                while_redis_down(&unopened, GRACE),
                RedisDownStep::Wait,
                "{life:?}"
            );
        }
    }
}
