//! Consumer replicas from Kafka lag, and backpressure: pure functions over
//! plain data, KEDA's lag semantics with a faster loop (the operator owns both
//! the signal and the Deployment, so it reacts in one poll interval).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::crd::FlashSale;

/// The scaling knobs of a sale (its `spec.consumers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingSpec {
    /// Fewest replicas (0 allows scale to zero).
    pub min_replicas: i32,
    /// Most replicas.
    pub max_replicas: i32,
    /// Lag one replica absorbs.
    pub lag_per_replica: i64,
    /// How long lag must stay low before replicas are removed.
    pub scale_down_stabilization: Duration,
    /// Above this lag, purchases answer BUSY.
    pub max_lag: i64,
}

/// What the previous decisions left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScalingMemory {
    /// Since when the lag has asked for fewer replicas than there are.
    pub low_since: Option<DateTime<Utc>>,
    /// Whether purchases are being refused with BUSY.
    pub busy: bool,
}

/// A scaling decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingDecision {
    /// Replicas the Deployment should have.
    pub replicas: i32,
    /// What the lag alone asks for (clamped), before stabilization.
    pub target: i32,
    /// Memory for the next decision.
    pub memory: ScalingMemory,
}

/// Replicas for `lag` (messages not consumed) over `partitions` partitions,
/// with `current` replicas now.
///
/// - target = ceil(lag / lagPerReplica), clamped to [minReplicas, min(maxReplicas, partitions)]:
///   more consumers than partitions would idle.
/// - minReplicas 0 and no lag: 0 (scale to zero); any lag activates one.
/// - Up at once; down only after the target stayed below `current` for the
///   stabilization window.
/// - Unknown lag (Kafka unreachable): keep `current`, within bounds.
pub fn desired_replicas(
    spec: &ScalingSpec,
    lag: Option<i64>,
    partitions: i32,
    current: i32,
    memory: ScalingMemory,
    now: DateTime<Utc>,
) -> ScalingDecision {
    let cap = spec
        .max_replicas
        .min(partitions.max(1))
        .max(spec.min_replicas.min(spec.max_replicas));
    let floor = spec.min_replicas.min(cap);
    let busy = backpressure(spec, lag, memory.busy);
    let Some(lag) = lag else {
        let replicas = current.clamp(floor, cap);
        return ScalingDecision {
            replicas,
            target: replicas,
            memory: ScalingMemory { busy, ..memory },
        };
    };
    let raw = if lag <= 0 {
        0
    } else {
        let per = spec.lag_per_replica.max(1);
        ((lag + per - 1) / per).min(i64::from(i32::MAX)) as i32
    };
    let target = raw.clamp(floor, cap);
    if target >= current {
        return ScalingDecision {
            replicas: target,
            target,
            memory: ScalingMemory {
                low_since: None,
                busy,
            },
        };
    }
    let low_since = memory.low_since.unwrap_or(now);
    let waited = (now - low_since).to_std().unwrap_or_default();
    if waited >= spec.scale_down_stabilization {
        ScalingDecision {
            replicas: target,
            target,
            memory: ScalingMemory {
                low_since: None,
                busy,
            },
        }
    } else {
        ScalingDecision {
            replicas: current.clamp(floor, cap),
            target,
            memory: ScalingMemory {
                low_since: Some(low_since),
                busy,
            },
        }
    }
}

/// Backpressure with hysteresis: busy above `maxLag`, not busy again until the
/// lag fell below half of it. Unknown lag keeps the current state.
pub fn backpressure(spec: &ScalingSpec, lag: Option<i64>, busy: bool) -> bool {
    match lag {
        Some(lag) if lag > spec.max_lag => true,
        Some(lag) if lag < spec.max_lag / 2 => false,
        _ => busy,
    }
}

/// When a decision waiting for the stabilization window should be revisited.
pub fn next_check(spec: &ScalingSpec, memory: &ScalingMemory) -> Option<DateTime<Utc>> {
    let window = chrono::Duration::from_std(spec.scale_down_stabilization).ok()?;
    memory.low_since.map(|since| since + window)
}

/// The scaling settings of a sale's spec.
pub fn spec_of(fs: &FlashSale) -> ScalingSpec {
    let c = &fs.spec.consumers;
    ScalingSpec {
        min_replicas: c.min_replicas,
        max_replicas: c.max_replicas,
        lag_per_replica: i64::from(c.lag_per_replica),
        scale_down_stabilization: c.scale_down_stabilization.into(),
        max_lag: c.effective_max_lag(),
    }
}

/// What scaling remembers between passes, from the sale's status.
pub fn memory_of(fs: &FlashSale) -> ScalingMemory {
    let consumers = fs.status.as_ref().and_then(|s| s.consumers.as_ref());
    ScalingMemory {
        low_since: consumers
            .and_then(|c| c.low_since.as_ref())
            .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond())),
        busy: consumers.is_some_and(|c| c.busy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: i32, max: i32) -> ScalingSpec {
        ScalingSpec {
            min_replicas: min,
            max_replicas: max,
            lag_per_replica: 500,
            scale_down_stabilization: Duration::from_secs(60),
            max_lag: 25_000,
        }
    }

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    /// Named rows, KEDA style: (description, spec, lag, partitions, current, memory, now, replicas, low_since after).
    #[test]
    fn replicas_table() {
        let quiet = ScalingMemory::default();
        let low_at = |s| ScalingMemory {
            low_since: Some(t(s)),
            busy: false,
        };
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            &str,
            ScalingSpec,
            Option<i64>,
            i32,
            i32,
            ScalingMemory,
            i64,
            i32,
            Option<i64>,
        )> = vec![
            (
                "no lag keeps the minimum",
                spec(1, 12),
                Some(0),
                12,
                1,
                quiet,
                0,
                1,
                None,
            ),
            (
                "10k lag over 12 partitions reaches the partition cap",
                spec(1, 12),
                Some(10_000),
                12,
                1,
                quiet,
                0,
                12,
                None,
            ),
            (
                "exact multiple",
                spec(1, 12),
                Some(1_500),
                12,
                1,
                quiet,
                0,
                3,
                None,
            ),
            (
                "one message over a multiple rounds up",
                spec(1, 12),
                Some(1_501),
                12,
                1,
                quiet,
                0,
                4,
                None,
            ),
            (
                "fewer partitions than maxReplicas cap replicas",
                spec(1, 12),
                Some(10_000),
                4,
                1,
                quiet,
                0,
                4,
                None,
            ),
            (
                "lag on one hot partition still counts in total",
                spec(1, 12),
                Some(2_000),
                12,
                1,
                quiet,
                0,
                4,
                None,
            ),
            (
                "maxReplicas below partitions caps",
                spec(1, 3),
                Some(10_000),
                12,
                1,
                quiet,
                0,
                3,
                None,
            ),
            (
                "scale to zero when idle",
                spec(0, 12),
                Some(0),
                12,
                0,
                quiet,
                0,
                0,
                None,
            ),
            (
                "activation on the first message",
                spec(0, 12),
                Some(1),
                12,
                0,
                quiet,
                0,
                1,
                None,
            ),
            (
                "scale down waits: first low reading",
                spec(1, 12),
                Some(0),
                12,
                12,
                quiet,
                100,
                12,
                Some(100),
            ),
            (
                "scale down waits: inside the window",
                spec(1, 12),
                Some(0),
                12,
                12,
                low_at(100),
                159,
                12,
                Some(100),
            ),
            (
                "scale down at the window's end",
                spec(1, 12),
                Some(0),
                12,
                12,
                low_at(100),
                160,
                1,
                None,
            ),
            (
                "a high reading inside the window resets it",
                spec(1, 12),
                Some(6_000),
                12,
                12,
                low_at(100),
                150,
                12,
                None,
            ),
            (
                "partial scale down after the window",
                spec(1, 12),
                Some(2_000),
                12,
                12,
                low_at(0),
                61,
                4,
                None,
            ),
            (
                "unknown lag keeps current",
                spec(1, 12),
                None,
                12,
                5,
                quiet,
                0,
                5,
                None,
            ),
            (
                "unknown lag still respects bounds",
                spec(2, 4),
                None,
                12,
                9,
                quiet,
                0,
                4,
                None,
            ),
            (
                "zero partitions known: at least one",
                spec(1, 12),
                Some(10_000),
                0,
                1,
                quiet,
                0,
                1,
                None,
            ),
            (
                "zero stabilization scales down at once",
                ScalingSpec {
                    scale_down_stabilization: Duration::ZERO,
                    ..spec(1, 12)
                },
                Some(0),
                12,
                12,
                quiet,
                0,
                1,
                None,
            ),
        ];
        for (what, spec, lag, partitions, current, memory, now, replicas, low_since) in rows {
            let d = desired_replicas(&spec, lag, partitions, current, memory, t(now));
            assert_eq!(d.replicas, replicas, "{what}");
            assert_eq!(d.memory.low_since, low_since.map(t), "{what}");
        }
    }

    #[test]
    fn backpressure_has_hysteresis() {
        let s = spec(1, 12);
        let rows = [
            ("below max stays off", Some(20_000), false, false),
            ("above max turns on", Some(25_001), false, true),
            ("at max does not turn on", Some(25_000), false, false),
            ("between half and max stays on", Some(20_000), true, true),
            ("below half turns off", Some(12_499), true, false),
            ("unknown keeps on", None, true, true),
            ("unknown keeps off", None, false, false),
        ];
        for (what, lag, busy, expected) in rows {
            assert_eq!(backpressure(&s, lag, busy), expected, "{what}");
        }
    }

    #[test]
    fn next_check_is_the_end_of_the_window() {
        let s = spec(1, 12);
        assert_eq!(next_check(&s, &ScalingMemory::default()), None);
        let m = ScalingMemory {
            low_since: Some(t(10)),
            busy: false,
        };
        assert_eq!(next_check(&s, &m), Some(t(70)));
    }
}
