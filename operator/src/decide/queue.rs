//! What the status says of a sale's admission queue, from the line's length
//! and the admission rule alone: admission keeps no other state, so who is
//! through and how long the rest will wait follow from the clock.

use chrono::{DateTime, Utc};
use flashsale_workload::domain::admission::{Admission, admitted};

use crate::model::crd::QueueStatus;

/// The API capacity the operator assumes when not told (`--api-capacity`):
/// a queue that names no rate then admits 1,000 shoppers a second.
pub const DEFAULT_API_CAPACITY: u32 = 1_250;

/// The rate of a queue whose spec names none: four fifths of the purchases
/// a second the API tier accepts (the rest is headroom for retries, pays
/// and page loads). Once the sale has started, the rate it started with
/// (`stored`) stays: an operator restarted with another capacity must not
/// make a waiting shopper's ETA rise.
pub fn derived_rate(api_capacity: u32, stored: Option<u32>, started: bool) -> u32 {
    match stored {
        Some(rate) if started => rate,
        _ => (api_capacity / 5 * 4).max(1),
    }
}

/// The queue of `length` shoppers at `now`, for a sale starting at `start`;
/// `closed`: sold out or over.
pub fn queue_status(
    admission: &Admission,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    length: u64,
    closed: bool,
    challenge_failures: u64,
) -> QueueStatus {
    let rate = admission.rate_per_sec.max(1);
    let through = admitted(rate, start.timestamp_millis(), now.timestamp_millis()).min(length);
    let waiting = if closed { 0 } else { length - through };
    let until_start = (start - now).num_seconds().max(0) as u64;
    // The k-th shopper still waiting is k / rate seconds from their turn.
    let wait = |share: f64| {
        if waiting == 0 {
            0
        } else {
            until_start + (waiting as f64 * share / f64::from(rate)).ceil() as u64
        }
    };
    QueueStatus {
        length,
        admitted: through,
        waiting,
        rate_per_second: rate,
        wait_p50_seconds: wait(0.5),
        wait_p95_seconds: wait(0.95),
        closed,
        challenge_failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn an_unnamed_rate_follows_the_api_until_the_start() {
        let cases = [
            // (capacity, stored, started) -> rate
            (DEFAULT_API_CAPACITY, None, false, 1_000),
            (10_000, None, false, 8_000),
            (10_000, Some(1_000), false, 8_000),
            (10_000, Some(1_000), true, 1_000),
            (10_000, None, true, 8_000),
            (1, None, false, 1),
        ];
        for (capacity, stored, started, rate) in cases {
            assert_eq!(
                derived_rate(capacity, stored, started),
                rate,
                "{capacity} {stored:?} {started}"
            );
        }
    }

    #[test]
    fn the_line_drains_at_the_rate_from_the_start() {
        let rule = Admission {
            prequeue: std::time::Duration::from_secs(600),
            rate_per_sec: 100,
            challenge: None,
        };
        let start = at(0);
        let cases = [
            // (now, length, closed) -> (admitted, waiting, p50, p95)
            (at(-60), 1_000, false, (0, 1_000, 65, 70)),
            (at(0), 1_000, false, (0, 1_000, 5, 10)),
            (at(4), 1_000, false, (400, 600, 3, 6)),
            (at(10), 1_000, false, (1_000, 0, 0, 0)),
            (at(30), 1_000, false, (1_000, 0, 0, 0)),
            (at(4), 1_000, true, (400, 0, 0, 0)),
            (at(4), 0, false, (0, 0, 0, 0)),
        ];
        for (now, length, closed, expected) in cases {
            let q = queue_status(&rule, start, now, length, closed, 7);
            assert_eq!(
                (
                    q.admitted,
                    q.waiting,
                    q.wait_p50_seconds,
                    q.wait_p95_seconds
                ),
                expected,
                "at {now}, {length} in line, closed {closed}"
            );
            assert_eq!(
                (q.length, q.rate_per_second, q.challenge_failures),
                (length, 100, 7)
            );
        }
    }
}
