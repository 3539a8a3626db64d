//! A circuit breaker: after `threshold` consecutive failures, calls are refused
//! for `cool_off` without touching the failing service, so a dead Redis or
//! Kafka costs shoppers a fast 503 instead of a timeout each, and no work piles
//! up behind it. After the cool-off, calls flow again; one more failure opens
//! it again at once.

use std::time::{Duration, Instant};

/// Breaker state; the caller supplies the clock.
#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u32,
    cool_off: Duration,
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

impl Breaker {
    /// Opens after `threshold` consecutive failures, for `cool_off`.
    pub fn new(threshold: u32, cool_off: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            cool_off,
            consecutive_failures: 0,
            open_until: None,
        }
    }

    /// Whether a call may go through at `now`.
    pub fn allows(&self, now: Instant) -> bool {
        self.open_until.is_none_or(|until| now >= until)
    }

    /// Records a call's result.
    pub fn record(&mut self, ok: bool, now: Instant) {
        if ok {
            self.consecutive_failures = 0;
            self.open_until = None;
            return;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let reopening = self.open_until.is_some();
        if reopening || self.consecutive_failures >= self.threshold {
            self.open_until = Some(now + self.cool_off);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_closes_after_cool_off() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Breaker::new(3, ms(500));
        assert!(b.allows(t0));
        b.record(false, t0);
        b.record(false, t0);
        assert!(b.allows(t0), "two failures stay closed");
        b.record(false, t0);
        assert!(!b.allows(t0), "third failure opens");
        assert!(!b.allows(t0 + ms(499)));
        assert!(b.allows(t0 + ms(500)), "half-open after the cool-off");
        b.record(false, t0 + ms(500));
        assert!(
            !b.allows(t0 + ms(600)),
            "one failure while half-open reopens"
        );
        b.record(true, t0 + ms(1100));
        assert!(b.allows(t0 + ms(1100)));
        b.record(false, t0 + ms(1100));
        assert!(b.allows(t0 + ms(1100)), "success reset the count");
    }

    #[test]
    fn success_resets_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = Breaker::new(2, Duration::from_secs(1));
        b.record(false, t0);
        b.record(true, t0);
        b.record(false, t0);
        assert!(b.allows(t0));
    }
}
