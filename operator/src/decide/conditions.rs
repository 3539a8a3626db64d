//! The status conditions, pure: `metav1.Condition`-shaped, each with a reason,
//! the generation it describes, and a transition time that moves only when
//! the status does.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::model::crd::SaleState;

/// A condition before its bookkeeping fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Ready, Warmed, Live, ...
    pub type_: &'static str,
    /// True, False or Unknown.
    pub status: &'static str,
    /// PascalCase reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

fn verdict(
    type_: &'static str,
    on: bool,
    reason: &'static str,
    message: impl Into<String>,
) -> Verdict {
    Verdict {
        type_,
        status: if on { "True" } else { "False" },
        reason,
        message: message.into(),
    }
}

/// What the conditions are computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Lifecycle state.
    pub state: SaleState,
    /// Every shard warmed and verified.
    pub warmed: bool,
    /// The kill switch.
    pub paused: bool,
    /// Units left in Redis.
    pub remaining: i64,
    /// Consumer replicas wanted and ready.
    pub consumers: (i32, i32),
    /// The last reconciliation: (drift found, drift repaired), if any ran.
    pub reconciled: Option<(i64, i64)>,
    /// Redis state removed after the sale.
    pub cleaned: bool,
    /// Why the sale is degraded, if it is: (reason, message).
    pub degraded: Option<(&'static str, String)>,
}

/// Why a sale may be degraded, as observed and decided in one reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Troubles {
    /// Redis lost the sale's state at this instant (recorded in the row).
    pub lost_since: Option<DateTime<Utc>>,
    /// The plan fences a loss it just noticed.
    pub fencing: bool,
    /// Warm-up's verification failed: why.
    pub warm_mismatch: Option<String>,
    /// A shrink below the units sold was refused: (asked, sold, stock kept).
    pub stock_below_sold: Option<(i64, i64, i64)>,
    /// Purchases are refused with BUSY: (lag, maxLag).
    pub backpressure: Option<(Option<i64>, i64)>,
    /// A reconciliation or cleanup Job failed.
    pub job_failed: bool,
    /// The consumer group's lag could not be read though the topic exists.
    pub lag_unknown: bool,
}

/// The one degradation a person should see first, as (reason, message):
/// a lost Redis state above a failed verification above a refused shrink,
/// then backpressure, a failed Job, an unknown lag.
pub fn degradation(t: &Troubles) -> Option<(&'static str, String)> {
    if let Some(since) = t.lost_since {
        return Some((
            "RedisStateLost",
            format!(
                "Redis lost the sale's state at {}: purchases are refused until it is reloaded from the database, once its orders are drained",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ));
    }
    if t.fencing {
        return Some((
            "RedisStateLost",
            "Redis lost the sale's state: purchases are refused until it is reloaded".to_string(),
        ));
    }
    if let Some(why) = &t.warm_mismatch {
        return Some(("WarmVerifyFailed", why.clone()));
    }
    if let Some((asked, sold, kept)) = t.stock_below_sold {
        return Some((
            "StockBelowSold",
            format!(
                "spec.stock {asked} is below the {sold} units already sold; the stock stays {kept}"
            ),
        ));
    }
    if let Some((lag, max_lag)) = t.backpressure {
        return Some((
            "Backpressure",
            format!(
                "{} orders wait for the consumers, above maxLag {max_lag}: purchases are refused with BUSY",
                lag_words(lag)
            ),
        ));
    }
    if t.job_failed {
        return Some((
            "JobFailed",
            "a reconciliation or cleanup Job failed; delete it to retry".to_string(),
        ));
    }
    t.lag_unknown.then(|| {
        (
            "LagUnknown",
            "the consumer group's lag cannot be read from Kafka".to_string(),
        )
    })
}

/// A lag for people: the number, or "an unknown number of".
pub fn lag_words(lag: Option<i64>) -> String {
    lag.map_or("an unknown number of".to_string(), |l| l.to_string())
}

/// The nine conditions, in a stable order.
pub fn verdicts(f: &Facts) -> Vec<Verdict> {
    vec![
        ready(f),
        warmed(f),
        live(f),
        paused(f),
        sold_out(f),
        consumers_ready(f),
        reconciled(f),
        cleaned_up(f),
        degraded_verdict(f),
    ]
}

fn ready(f: &Facts) -> Verdict {
    let ready = f.degraded.is_none() && !matches!(f.state, SaleState::Failed | SaleState::Warming);
    let reason = if ready {
        "AsExpected"
    } else if f.degraded.is_some() {
        "Degraded"
    } else {
        "NotReady"
    };
    verdict("Ready", ready, reason, format!("state {:?}", f.state))
}

fn warmed(f: &Facts) -> Verdict {
    match (f.warmed, f.cleaned) {
        (true, _) => verdict(
            "Warmed",
            true,
            "Verified",
            "Redis holds the sale and matches the database",
        ),
        (false, true) => verdict(
            "Warmed",
            false,
            "CleanedUp",
            "the sale's Redis state was removed after the sale",
        ),
        (false, false) if f.state == SaleState::Warming => verdict(
            "Warmed",
            false,
            "Warming",
            "loading Redis from the database",
        ),
        (false, false) => verdict(
            "Warmed",
            false,
            "NotYetDue",
            "warm-up happens at start - warmup.leadTime",
        ),
    }
}

fn live(f: &Facts) -> Verdict {
    use SaleState as S;
    let reason = match f.state {
        S::Live => "WindowOpen",
        S::Scheduled | S::Warming | S::Warm => "BeforeStart",
        S::Paused => "Paused",
        S::SoldOut => "SoldOut",
        _ => "WindowClosed",
    };
    verdict(
        "Live",
        f.state == S::Live,
        reason,
        format!("state {:?}", f.state),
    )
}

fn paused(f: &Facts) -> Verdict {
    if f.paused {
        verdict(
            "Paused",
            true,
            "KillSwitch",
            "spec.paused is true: every purchase answers PAUSED",
        )
    } else {
        verdict("Paused", false, "NotPaused", "spec.paused is false")
    }
}

fn sold_out(f: &Facts) -> Verdict {
    if f.warmed && f.remaining <= 0 {
        verdict("SoldOut", true, "NoStockLeft", "every shard is empty")
    } else {
        verdict(
            "SoldOut",
            false,
            "StockLeft",
            format!("{} units left", f.remaining.max(0)),
        )
    }
}

fn consumers_ready(f: &Facts) -> Verdict {
    match f.consumers {
        (0, _) => verdict(
            "ConsumersReady",
            true,
            "ScaledToZero",
            "no lag: no consumer needed",
        ),
        (w, r) if r >= w => verdict(
            "ConsumersReady",
            true,
            "AllReady",
            format!("{r}/{w} consumers ready"),
        ),
        (w, r) => verdict(
            "ConsumersReady",
            false,
            "NotAllReady",
            format!("{r}/{w} consumers ready"),
        ),
    }
}

fn reconciled(f: &Facts) -> Verdict {
    match f.reconciled {
        None => Verdict {
            type_: "Reconciled",
            status: "Unknown",
            reason: "NotYetRun",
            message: "no reconciliation has run yet".into(),
        },
        Some((0, _)) => verdict(
            "Reconciled",
            true,
            "NoDrift",
            "Redis, Kafka and PostgreSQL agree",
        ),
        Some((found, repaired)) if repaired >= found => verdict(
            "Reconciled",
            true,
            "DriftRepaired",
            format!("{found} differences found and repaired"),
        ),
        Some((found, repaired)) => verdict(
            "Reconciled",
            false,
            "DriftUnrepaired",
            format!("{found} differences found, {repaired} repaired"),
        ),
    }
}

fn cleaned_up(f: &Facts) -> Verdict {
    if f.cleaned {
        verdict(
            "CleanedUp",
            true,
            "RedisStateRemoved",
            "Redis keys deleted; orders kept",
        )
    } else {
        verdict(
            "CleanedUp",
            false,
            "NotYet",
            "cleanup runs after end + cleanup.after, once drained",
        )
    }
}

fn degraded_verdict(f: &Facts) -> Verdict {
    match &f.degraded {
        Some((reason, message)) => verdict("Degraded", true, reason, message.clone()),
        None => verdict("Degraded", false, "AsExpected", "nothing is degraded"),
    }
}

/// Turns verdicts into conditions, keeping each one's transition time when its
/// status did not change.
pub fn conditions(
    verdicts: Vec<Verdict>,
    previous: &[Condition],
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let now =
        Time(Timestamp::from_millisecond(now.timestamp_millis()).unwrap_or(Timestamp::UNIX_EPOCH));
    verdicts
        .into_iter()
        .map(|v| {
            let since = previous
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == v.status)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: v.type_.to_string(),
                status: v.status.to_string(),
                reason: v.reason.to_string(),
                message: v.message,
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect()
}

/// The conditions to write when a reconcile could not finish: `Degraded`
/// with the failing dependency (or what a deletion waits for) as reason and
/// `Ready` false; the other conditions stay as they were written. Transition
/// times move only for a status that changed.
pub fn degraded(
    previous: &[Condition],
    reason: &'static str,
    message: String,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let replaced = conditions(
        vec![
            verdict("Ready", false, reason, message.clone()),
            verdict("Degraded", true, reason, message),
        ],
        previous,
        generation,
        now,
    );
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "Degraded")
        .cloned()
        .collect();
    out.splice(0..0, replaced.iter().take(1).cloned());
    out.extend(replaced.into_iter().skip(1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: SaleState) -> Facts {
        Facts {
            state,
            warmed: true,
            paused: false,
            remaining: 10,
            consumers: (1, 1),
            reconciled: None,
            cleaned: false,
            degraded: None,
        }
    }

    fn get<'a>(v: &'a [Verdict], t: &str) -> &'a Verdict {
        v.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn nine_conditions_in_a_stable_order() {
        let types: Vec<_> = verdicts(&facts(SaleState::Live))
            .iter()
            .map(|v| v.type_)
            .collect();
        assert_eq!(
            types,
            [
                "Ready",
                "Warmed",
                "Live",
                "Paused",
                "SoldOut",
                "ConsumersReady",
                "Reconciled",
                "CleanedUp",
                "Degraded"
            ]
        );
    }

    #[test]
    fn verdict_table() {
        let live = verdicts(&facts(SaleState::Live));
        assert_eq!(
            (get(&live, "Live").status, get(&live, "Live").reason),
            ("True", "WindowOpen")
        );
        assert_eq!(get(&live, "Ready").status, "True");
        assert_eq!(get(&live, "Reconciled").status, "Unknown");

        let paused = verdicts(&Facts {
            paused: true,
            ..facts(SaleState::Paused)
        });
        assert_eq!(
            (get(&paused, "Paused").status, get(&paused, "Paused").reason),
            ("True", "KillSwitch")
        );
        assert_eq!(get(&paused, "Live").reason, "Paused");

        let sold_out = verdicts(&Facts {
            remaining: 0,
            ..facts(SaleState::SoldOut)
        });
        assert_eq!(get(&sold_out, "SoldOut").status, "True");

        let degraded = verdicts(&Facts {
            degraded: Some(("Backpressure", "lag 30000 above maxLag 25000".into())),
            ..facts(SaleState::Live)
        });
        assert_eq!(
            (
                get(&degraded, "Degraded").status,
                get(&degraded, "Degraded").reason
            ),
            ("True", "Backpressure")
        );
        assert_eq!(
            (
                get(&degraded, "Ready").status,
                get(&degraded, "Ready").reason
            ),
            ("False", "Degraded")
        );

        let drift = verdicts(&Facts {
            reconciled: Some((3, 2)),
            ..facts(SaleState::Live)
        });
        assert_eq!(
            (
                get(&drift, "Reconciled").status,
                get(&drift, "Reconciled").reason
            ),
            ("False", "DriftUnrepaired")
        );
        let repaired = verdicts(&Facts {
            reconciled: Some((3, 3)),
            ..facts(SaleState::Live)
        });
        assert_eq!(get(&repaired, "Reconciled").reason, "DriftRepaired");

        let scaling = verdicts(&Facts {
            consumers: (4, 1),
            ..facts(SaleState::Live)
        });
        assert_eq!(get(&scaling, "ConsumersReady").status, "False");
        let zero = verdicts(&Facts {
            consumers: (0, 0),
            ..facts(SaleState::Scheduled)
        });
        assert_eq!(get(&zero, "ConsumersReady").reason, "ScaledToZero");

        let done = verdicts(&Facts {
            warmed: false,
            cleaned: true,
            ..facts(SaleState::Completed)
        });
        assert_eq!(get(&done, "CleanedUp").status, "True");
        assert_eq!(get(&done, "Warmed").reason, "CleanedUp");
        assert_eq!(get(&done, "Live").reason, "WindowClosed");

        let warming = verdicts(&Facts {
            warmed: false,
            ..facts(SaleState::Warming)
        });
        assert_eq!(get(&warming, "Warmed").reason, "Warming");
        assert_eq!(get(&warming, "Ready").status, "False");
    }

    #[test]
    fn the_first_trouble_in_order_is_the_degradation() {
        let since = DateTime::from_timestamp(1_000, 0).unwrap();
        let all = Troubles {
            lost_since: Some(since),
            fencing: true,
            warm_mismatch: Some("shard 2 holds 9 units, the database 10".into()),
            stock_below_sold: Some((5, 8, 10)),
            backpressure: Some((Some(30_000), 25_000)),
            job_failed: true,
            lag_unknown: true,
        };
        // Each row removes the trouble above it: the next one shows.
        // A change to the troubles, and the (reason, part of the message) then.
        type Row = (fn(&mut Troubles), Option<(&'static str, &'static str)>);
        let rows: [Row; 8] = [
            (|_| {}, Some(("RedisStateLost", "at 1970-01-01T00:16:40Z"))),
            (
                |t| t.lost_since = None,
                Some(("RedisStateLost", "until it is reloaded")),
            ),
            (
                |t| t.fencing = false,
                Some(("WarmVerifyFailed", "shard 2 holds 9")),
            ),
            (
                |t| t.warm_mismatch = None,
                Some((
                    "StockBelowSold",
                    "spec.stock 5 is below the 8 units already sold; the stock stays 10",
                )),
            ),
            (
                |t| t.stock_below_sold = None,
                Some((
                    "Backpressure",
                    "30000 orders wait for the consumers, above maxLag 25000",
                )),
            ),
            (
                |t| t.backpressure = None,
                Some(("JobFailed", "delete it to retry")),
            ),
            (
                |t| t.job_failed = false,
                Some(("LagUnknown", "cannot be read")),
            ),
            (|t| t.lag_unknown = false, None),
        ];
        let mut troubles = all;
        for (remove, expected) in rows {
            remove(&mut troubles);
            let got = degradation(&troubles);
            match (got, expected) {
                (None, None) => {}
                (Some((reason, message)), Some((want, part))) => {
                    assert_eq!(reason, want, "{troubles:?}");
                    assert!(message.contains(part), "{message} lacks {part}");
                }
                (got, want) => panic!("{troubles:?}: got {got:?}, want {want:?}"),
            }
        }
        let unknown = Troubles {
            backpressure: Some((None, 25_000)),
            ..Troubles::default()
        };
        assert!(
            degradation(&unknown)
                .unwrap()
                .1
                .starts_with("an unknown number of orders")
        );
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap();
        let t1 = DateTime::from_timestamp(2_000, 0).unwrap();
        let first = conditions(verdicts(&facts(SaleState::Live)), &[], Some(1), t0);
        let same = conditions(verdicts(&facts(SaleState::Live)), &first, Some(2), t1);
        let live = |c: &[Condition]| c.iter().find(|c| c.type_ == "Live").unwrap().clone();
        assert_eq!(
            live(&same).last_transition_time,
            live(&first).last_transition_time
        );
        assert_eq!(live(&same).observed_generation, Some(2));
        let paused = conditions(
            verdicts(&Facts {
                paused: true,
                ..facts(SaleState::Paused)
            }),
            &first,
            Some(2),
            t1,
        );
        assert_ne!(
            live(&paused).last_transition_time,
            live(&first).last_transition_time
        );
    }

    #[test]
    fn an_outage_degrades_and_unreadies_and_leaves_the_rest() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap();
        let t1 = DateTime::from_timestamp(2_000, 0).unwrap();
        let healthy = conditions(verdicts(&facts(SaleState::Live)), &[], Some(3), t0);
        let down = degraded(
            &healthy,
            "DatabaseUnavailable",
            "failed to read the sale's row".into(),
            Some(4),
            t1,
        );
        let find = |cs: &[Condition], t: &str| cs.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!(down.len(), 9);
        assert_eq!(down[0].type_, "Ready");
        assert_eq!(down[8].type_, "Degraded");
        let (ready, degraded_now) = (find(&down, "Ready"), find(&down, "Degraded"));
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "DatabaseUnavailable")
        );
        assert_eq!(degraded_now.status, "True");
        assert_eq!(
            degraded_now.last_transition_time,
            Time(Timestamp::from_second(2_000).unwrap())
        );
        assert_eq!(
            find(&down, "Live"),
            find(&healthy, "Live"),
            "the rest as it was"
        );
        // The same outage again moves no transition time.
        let again = degraded(
            &down,
            "DatabaseUnavailable",
            "still".into(),
            Some(4),
            t1 + chrono::Duration::seconds(5),
        );
        assert_eq!(
            find(&again, "Degraded").last_transition_time,
            degraded_now.last_transition_time
        );
    }
}
