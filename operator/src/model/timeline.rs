//! A sale's instants, and the conversion between Kubernetes and chrono time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The instants that drive a sale's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// start - warmup.leadTime.
    pub warm_at: DateTime<Utc>,
    /// First purchase instant.
    pub start: DateTime<Utc>,
    /// First instant after the window.
    pub end: DateTime<Utc>,
    /// end + cleanup.after (and not before the orders are drained).
    pub cleanup_at: DateTime<Utc>,
    /// Periodic reconciliation while live.
    pub reconcile_every: Duration,
    /// How often lag is read while orders may flow.
    pub poll_every: Duration,
}

/// Kubernetes time to chrono.
pub fn to_chrono(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.0.as_millisecond()).unwrap_or_default()
}

/// chrono to Kubernetes time.
pub fn to_time(t: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(t.timestamp_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The timeline's next instant after `now` and what happens then: warm-up,
/// open, close or cleanup; `None` once the cleanup time has passed.
pub fn next_transition(
    timeline: &Timeline,
    now: DateTime<Utc>,
) -> Option<(&'static str, DateTime<Utc>)> {
    [
        ("warm-up", timeline.warm_at),
        ("open", timeline.start),
        ("close", timeline.end),
        ("cleanup", timeline.cleanup_at),
    ]
    .into_iter()
    .find(|(_, at)| *at > now)
}

/// Writes a duration the way people write one (`30m`, `1h30m`, `100ms`), not
/// as seconds (`1800s`): what the CRD's defaults show in `kubectl get -o yaml`.
pub fn duration_text<S: serde::Serializer>(
    d: &kube::core::Duration,
    out: S,
) -> Result<S::Ok, S::Error> {
    let d = std::time::Duration::from(*d);
    let mut text = String::new();
    let (secs, millis) = (d.as_secs(), d.subsec_millis());
    for (amount, unit) in [
        (secs / 3600, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (u64::from(millis), "ms"),
    ] {
        if amount > 0 {
            text.push_str(&format!("{amount}{unit}"));
        }
    }
    if text.is_empty() {
        text.push_str("0s");
    }
    out.serialize_str(&text)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    // The sale every table test plans against (plan.rs's too).
    pub(crate) const WARM_AT: i64 = 1_000;
    pub(crate) const START: i64 = 1_600;
    pub(crate) const END: i64 = 2_200;
    pub(crate) const CLEANUP_AT: i64 = 4_000;

    pub(crate) fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    pub(crate) fn timeline() -> Timeline {
        Timeline {
            warm_at: t(WARM_AT),
            start: t(START),
            end: t(END),
            cleanup_at: t(CLEANUP_AT),
            reconcile_every: Duration::from_secs(200),
            poll_every: Duration::from_secs(2),
        }
    }

    #[test]
    fn the_next_transition_is_the_first_instant_ahead() {
        for (now, next) in [
            (0, Some(("warm-up", WARM_AT))),
            (WARM_AT, Some(("open", START))),
            (START - 1, Some(("open", START))),
            (START, Some(("close", END))),
            (END, Some(("cleanup", CLEANUP_AT))),
            (CLEANUP_AT, None),
        ] {
            assert_eq!(
                next_transition(&timeline(), t(now)),
                next.map(|(what, at)| (what, t(at))),
                "at {now}"
            );
        }
    }
}
