//! The purchase budget: one duration from which every deadline of the
//! purchase path and every limit that must outlast it are derived.
//!
//! A purchase starts its clock before its first Redis call; its reservation
//! is stamped by Redis after that. The answer "accepted" is given only when
//! the broker acknowledged the order within the budget, so an acknowledged
//! order's reservation is never older than the budget when its message lands.
//! Whoever releases reservations that look abandoned (the janitor, the
//! reconciliation Job) or reloads a lost state (recovery) waits longer than
//! the budget plus [`CLOCK_SLACK`]: by then every purchase that reserved has
//! either produced its message or given up.

use std::time::Duration;

/// Allowance for the clocks of the API and Redis (their rates, and a step of
/// either), on top of the budget.
pub const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// How long one purchase may take from its first Redis call to the broker's
/// acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurchaseBudget(Duration);

/// Why a budget was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a purchase budget must be between {min:?} and {max:?}, not {got:?}")]
pub struct BudgetError {
    got: Duration,
    min: Duration,
    max: Duration,
}

impl PurchaseBudget {
    /// The default: room for a Redis reply timeout and a retry, and the
    /// broker's acknowledgement after a leader change (about a second).
    pub const DEFAULT: Self = Self(Duration::from_secs(5));
    const MIN: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(60);

    /// A budget of `total`, within 200 ms and 60 s.
    pub fn new(total: Duration) -> Result<Self, BudgetError> {
        if (Self::MIN..=Self::MAX).contains(&total) {
            Ok(Self(total))
        } else {
            Err(BudgetError {
                got: total,
                min: Self::MIN,
                max: Self::MAX,
            })
        }
    }

    /// The budget itself.
    pub fn total(self) -> Duration {
        self.0
    }

    /// The librdkafka message timeout: a message never outlives the budget
    /// inside the producer (the purchase stops waiting at its deadline).
    pub fn produce_timeout(self) -> Duration {
        self.0
    }

    /// How long after a reservation was made (or after purchases were
    /// stopped: a fence, the pause before a deletion) every purchase that
    /// reserved has produced its message or given up. The janitor releases
    /// an unacknowledged reservation only past this age, reconciliation
    /// leaves younger ones alone, and a lost state is reloaded, or a deleted
    /// sale's topic drained, only this long after purchases stopped.
    pub fn settled_after(self) -> Duration {
        self.0 + CLOCK_SLACK
    }
}

impl Default for PurchaseBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl std::str::FromStr for PurchaseBudget {
    type Err = String;

    /// Parses a human duration (`5s`, `1500ms`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let total = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
        Self::new(total).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_outlasts_the_budget() {
        for total in [200, 1_000, 5_000, 60_000] {
            let budget = PurchaseBudget::new(Duration::from_millis(total)).unwrap();
            assert!(budget.produce_timeout() <= budget.total());
            assert!(budget.settled_after() > budget.total() + CLOCK_SLACK / 2);
        }
    }

    #[test]
    fn parses_and_bounds() {
        assert_eq!(
            "5s".parse::<PurchaseBudget>().unwrap(),
            PurchaseBudget::DEFAULT
        );
        assert_eq!(
            "1500ms".parse::<PurchaseBudget>().unwrap().total(),
            Duration::from_millis(1500)
        );
        for bad in ["0s", "100ms", "2m", "soon"] {
            assert!(bad.parse::<PurchaseBudget>().is_err(), "{bad}");
        }
    }
}
