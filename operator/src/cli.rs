//! What `kubectl flashsale` prints, from plain data: a sale's status, the
//! plan of a manifest, a spec change, and the merchant's report.

use std::fmt::Write;

use anstyle::{AnsiColor, Style};
use chrono::{DateTime, Utc};

use crate::model::crd::{FlashSale, FlashSaleSpec, FlashSaleStatus, SaleState};
use crate::model::timeline::{Timeline, next_transition, to_chrono};

const BOLD: Style = Style::new().bold();
const GOOD: Style = AnsiColor::Green.on_default();
const BAD: Style = AnsiColor::Red.on_default().bold();
const DIM: Style = Style::new().dimmed();

fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// A recent event of the sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLine {
    /// When it last happened.
    pub at: DateTime<Utc>,
    /// Normal or Warning.
    pub kind: String,
    /// Its reason.
    pub reason: String,
    /// Its note.
    pub note: String,
}

/// An instant, and how far it is from `now`: "12:00:00Z (in 5m)".
pub fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (at - now).num_seconds();
    let span = humantime::format_duration(std::time::Duration::from_secs(secs.unsigned_abs()))
        .to_string()
        .split(' ')
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let relative = match secs {
        0 => "now".to_string(),
        s if s > 0 => format!("in {span}"),
        _ => format!("{span} ago"),
    };
    format!(
        "{} ({relative})",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// What the operator does, and when: warm-up, open, the periodic
/// reconciliation Jobs (the first three and their count), close with the
/// final reconciliation, cleanup.
pub fn steps(t: &Timeline) -> Vec<(DateTime<Utc>, String)> {
    let mut steps = vec![
        (
            t.warm_at,
            "warm-up: the sale's shards loaded into Redis and verified".to_string(),
        ),
        (
            t.start,
            "open: purchases accepted; consumers scale from the lag".to_string(),
        ),
    ];
    let every = chrono::Duration::from_std(t.reconcile_every).unwrap_or_default();
    if every > chrono::Duration::zero() {
        let periodic: Vec<_> = (1..)
            .map(|k| t.start + every * k)
            .take_while(|at| *at < t.end)
            .collect();
        for (k, at) in periodic.iter().take(3).enumerate() {
            steps.push((*at, format!("reconciliation Job {}", k + 1)));
        }
        if periodic.len() > 3 {
            steps.push((
                periodic[periodic.len() - 1],
                format!(
                    "reconciliation Job {} (the last of {}, every {})",
                    periodic.len(),
                    periodic.len(),
                    humantime::format_duration(t.reconcile_every)
                ),
            ));
        }
    }
    steps.push((
        t.end,
        "close: purchases refused with ENDED; the final reconciliation Job runs".to_string(),
    ));
    steps.push((
        t.cleanup_at,
        "cleanup Job: the sale's Redis state removed (once the orders are drained)".to_string(),
    ));
    steps
}

/// The state the timeline alone puts the sale in at `at` (stock, the kill
/// switch and faults aside).
pub fn state_at(t: &Timeline, at: DateTime<Utc>) -> &'static str {
    if at < t.warm_at {
        "Scheduled"
    } else if at < t.start {
        "Warming, then Warm"
    } else if at < t.end {
        "Live (SoldOut once every unit is sold)"
    } else if at < t.cleanup_at {
        "Ended"
    } else {
        "CleaningUp, then Completed"
    }
}

fn next_line(t: &Timeline, now: DateTime<Utc>) -> String {
    match next_transition(t, now) {
        Some((what, at)) => format!("{} at {}", paint(BOLD, what), when(at, now)),
        None => "none: the sale's life is over".to_string(),
    }
}

/// `kubectl flashsale plan`: the manifest as the API server accepted it.
pub fn plan_report(fs: &FlashSale, at: DateTime<Utc>) -> String {
    let spec = &fs.spec;
    let t = spec.timeline();
    let c = &spec.consumers;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}/{}: valid (the API server accepted it in a dry run)",
        paint(GOOD, "✓"),
        fs.metadata.namespace.as_deref().unwrap_or("default"),
        fs.metadata.name.as_deref().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "  stock {} of {} in {} shards, at most {} per shopper{}",
        spec.stock,
        spec.sku,
        spec.sharding.shards,
        spec.purchase_limit,
        if spec.paused {
            ", kill switch ON (paused)"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "{}", paint(BOLD, "Timeline"));
    for (instant, what) in steps(&t) {
        let mark = if instant <= at { "✓" } else { "·" };
        let _ = writeln!(out, "  {mark} {}  {what}", when(instant, at));
    }
    let _ = writeln!(
        out,
        "  at {}: {}; next: {}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        paint(BOLD, state_at(&t, at)),
        next_line(&t, at)
    );
    let _ = writeln!(out, "{}", paint(BOLD, "Consumers"));
    let _ = writeln!(
        out,
        "  {}..{} replicas, one per {} orders of lag, read every {}; the topics have {} partitions (maxReplicas)",
        c.min_replicas,
        c.max_replicas,
        c.lag_per_replica,
        humantime::format_duration(c.poll_interval.into()),
        c.max_replicas
    );
    let _ = writeln!(
        out,
        "  backpressure (purchases answer BUSY) above a lag of {}",
        c.effective_max_lag()
    );
    out
}

/// `kubectl flashsale status`: state, conditions, stock per shard, lag,
/// replicas, reconciliations, recent events, the next transition.
pub fn status_report(fs: &FlashSale, events: &[EventLine], now: DateTime<Utc>) -> String {
    let status = fs.status.clone().unwrap_or_default();
    let mut out = String::new();
    heading_lines(&mut out, fs, &status, now);
    stock_and_consumer_lines(&mut out, &status);
    queue_line(&mut out, &status);
    reconciliation_line(&mut out, &status, now);
    condition_lines(&mut out, &status);
    event_lines(&mut out, events, now);
    out
}

fn heading_lines(out: &mut String, fs: &FlashSale, status: &FlashSaleStatus, now: DateTime<Utc>) {
    let t = fs.spec.timeline();
    let state = status
        .state
        .map_or("(not reconciled yet)".to_string(), |s| format!("{s:?}"));
    let state_style = match status.state {
        Some(SaleState::Failed) => BAD,
        Some(SaleState::Live | SaleState::Completed) => GOOD,
        _ => BOLD,
    };
    let _ = writeln!(
        out,
        "{}/{}  {}{}",
        fs.metadata.namespace.as_deref().unwrap_or("default"),
        fs.metadata.name.as_deref().unwrap_or("?"),
        paint(state_style, state),
        if fs.spec.paused {
            paint(BAD, "  (kill switch ON)")
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "  window {} .. {}",
        when(t.start, now),
        when(t.end, now)
    );
    let _ = writeln!(out, "  next: {}", next_line(&t, now));
}

fn stock_and_consumer_lines(out: &mut String, status: &FlashSaleStatus) {
    if let Some(stock) = &status.stock {
        let _ = writeln!(
            out,
            "{}  total {}, sold {} ({} persisted, {} reserved), remaining {}",
            paint(BOLD, "Stock"),
            stock.total,
            stock.sold,
            stock.persisted,
            stock.reserved,
            stock.remaining
        );
        if !stock.shards.is_empty() {
            let shards: Vec<String> = (stock.shards.iter().enumerate())
                .map(|(i, units)| format!("#{i} {units}"))
                .collect();
            let _ = writeln!(out, "  per shard: {}", shards.join(", "));
        }
    }
    if let Some(c) = &status.consumers {
        let _ = writeln!(
            out,
            "{}  {} ready of {} desired, lag {}{}",
            paint(BOLD, "Consumers"),
            c.replicas,
            c.desired_replicas,
            c.lag,
            if c.busy {
                paint(BAD, ", backpressure ON (BUSY)")
            } else {
                String::new()
            }
        );
    }
}

fn queue_line(out: &mut String, status: &FlashSaleStatus) {
    let Some(q) = &status.queue else {
        return;
    };
    let line = if q.closed {
        paint(BAD, "closed (sold out or over), nobody waits")
    } else {
        format!(
            "{} waiting, wait p50 {} s, p95 {} s",
            q.waiting, q.wait_p50_seconds, q.wait_p95_seconds
        )
    };
    let _ = writeln!(
        out,
        "{}  {} joined, {} admitted at {}/s; {}; {} challenge answers refused",
        paint(BOLD, "Queue"),
        q.length,
        q.admitted,
        q.rate_per_second,
        line,
        q.challenge_failures
    );
}

fn reconciliation_line(out: &mut String, status: &FlashSaleStatus, now: DateTime<Utc>) {
    let _ = write!(out, "{}  ", paint(BOLD, "Reconciliations"));
    match &status.last_reconciliation {
        Some(r) => {
            let _ = writeln!(
                out,
                "last finished {}: drift found {}, repaired {}; {} periodic started",
                when(to_chrono(&r.time), now),
                r.drift_found,
                r.drift_repaired,
                status.periodic_reconciliations.unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(out, "none yet");
        }
    }
}

fn condition_lines(out: &mut String, status: &FlashSaleStatus) {
    let _ = writeln!(out, "{}", paint(BOLD, "Conditions"));
    for c in &status.conditions {
        // A problem, fine, or simply where the sale is in its life.
        let mark = match (c.type_.as_str(), c.status.as_str()) {
            ("Degraded", "True") | ("Ready" | "ConsumersReady", "False") => paint(BAD, "✗"),
            ("Degraded", _) | (_, "True") => paint(GOOD, "✓"),
            _ => paint(DIM, "·"),
        };
        let _ = writeln!(
            out,
            "  {mark} {:<15} {:<7} {:<22} {}",
            c.type_,
            c.status,
            c.reason,
            paint(DIM, &c.message)
        );
    }
}

fn event_lines(out: &mut String, events: &[EventLine], now: DateTime<Utc>) {
    let _ = writeln!(out, "{}", paint(BOLD, "Recent events"));
    if events.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for e in events {
        let kind = if e.kind == "Warning" {
            paint(BAD, &e.kind)
        } else {
            e.kind.clone()
        };
        let _ = writeln!(
            out,
            "  {}  {kind:<7} {:<14} {}",
            when(e.at, now),
            e.reason,
            e.note
        );
    }
}

/// One invariant as the report judges it: held, broken, or not judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// I1 .. I6.
    pub id: &'static str,
    /// What it promises.
    pub name: &'static str,
    /// Held, broken, or cannot be judged from the server side.
    pub holds: Option<bool>,
    /// The numbers behind it.
    pub detail: String,
}

/// I1–I6 as far as the status can judge them, after the end. I3 and I4
/// (every accepted order persisted or released; none the shopper was told
/// failed) are what the final reconciliation compares in Kafka, Redis and
/// PostgreSQL: they held when it ran after the end and left no drift.
pub fn judge(fs: &FlashSale) -> Vec<Judged> {
    let status = fs.status.clone().unwrap_or_default();
    let summary = status.summary.clone().unwrap_or_default();
    let stock = status.stock.clone().unwrap_or_default();
    let end = to_chrono(&fs.spec.window.end);
    let reconciled = status
        .last_reconciliation
        .as_ref()
        .filter(|r| to_chrono(&r.time) >= end);
    let clean = reconciled.map(|r| r.drift_found == r.drift_repaired);
    let by_reconciliation = |what: &str| match reconciled {
        Some(r) => format!(
            "the final reconciliation compared {what}: {} differences found, {} repaired",
            r.drift_found, r.drift_repaired
        ),
        None => "no reconciliation has run since the end yet".to_string(),
    };
    let judged = |id, name, holds, detail| Judged {
        id,
        name,
        holds,
        detail,
    };
    vec![
        judged(
            "I1",
            "no oversell",
            Some(summary.sold <= stock.total),
            format!("{} units sold of {}", summary.sold, stock.total),
        ),
        judged(
            "I2",
            "no over-limit",
            Some(summary.most_by_one_shopper <= i64::from(fs.spec.purchase_limit)),
            format!(
                "the most one shopper holds is {}, the limit {}",
                summary.most_by_one_shopper, fs.spec.purchase_limit
            ),
        ),
        judged(
            "I3",
            "no lost order",
            clean,
            by_reconciliation("Kafka's orders with PostgreSQL's"),
        ),
        judged(
            "I4",
            "no phantom order",
            clean,
            by_reconciliation("PostgreSQL's orders with Kafka's"),
        ),
        if stock.remaining == 0 {
            judged(
                "I5",
                "sell-through",
                Some(true),
                format!(
                    "every unit sold ({} sold or returned to shoppers' cancellations aside)",
                    summary.sold
                ),
            )
        } else {
            judged(
                "I5",
                "sell-through",
                None,
                format!(
                    "{} units left: held if demand fell short (the shoppers' side is not in the status)",
                    stock.remaining
                ),
            )
        },
        judged(
            "I6",
            "convergence",
            clean,
            by_reconciliation("Redis with PostgreSQL"),
        ),
    ]
}

/// `kubectl flashsale report`: the merchant's summary and I1–I6; an error
/// before the end (no summary yet).
pub fn report(fs: &FlashSale) -> Result<String, String> {
    let status = fs.status.clone().unwrap_or_default();
    let Some(summary) = &status.summary else {
        return Err(format!(
            "{} is {}: its report comes once the window is over ({})",
            fs.metadata.name.as_deref().unwrap_or("?"),
            status
                .state
                .map_or("not reconciled yet".to_string(), |s| format!("{s:?}")),
            fs.spec.window.end.0
        ));
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}/{} ({})",
        paint(BOLD, "Report"),
        fs.metadata.namespace.as_deref().unwrap_or("default"),
        fs.metadata.name.as_deref().unwrap_or("?"),
        status.state.map_or("?".to_string(), |s| format!("{s:?}"))
    );
    let total = status.stock.as_ref().map_or(0, |s| s.total);
    let _ = writeln!(
        out,
        "  sold {} of {total} units in {} orders: paid {}, awaiting payment {}",
        summary.sold, summary.orders, summary.paid, summary.unpaid
    );
    let _ = writeln!(
        out,
        "  back in stock: cancelled {}, payment timed out {}, failed {}",
        summary.cancelled, summary.timed_out, summary.failed
    );
    let _ = writeln!(out, "{}", paint(BOLD, "Per minute (units accepted)"));
    let peak = summary
        .per_minute
        .iter()
        .map(|m| m.units)
        .max()
        .unwrap_or(1);
    for m in &summary.per_minute {
        let width = (m.units * 40 + peak - 1) / peak.max(1);
        let bar = "█".repeat(usize::try_from(width).unwrap_or(0));
        let _ = writeln!(out, "  {}  {:>6}  {bar}", m.minute.format("%H:%M"), m.units);
    }
    let _ = writeln!(out, "{}", paint(BOLD, "Invariants"));
    for j in judge(fs) {
        let verdict = match j.holds {
            Some(true) => paint(GOOD, "held"),
            Some(false) => paint(BAD, "BROKEN"),
            None => paint(DIM, "not judged"),
        };
        let _ = writeln!(out, "  {} {:<17} {verdict:<6}  {}", j.id, j.name, j.detail);
    }
    Ok(out)
}

/// The risk scorer's view of a sale: what it scored and did, and the
/// highest-scored shoppers with what each rule saw.
pub fn risk_report(fs: &FlashSale) -> Result<String, String> {
    let name = fs.metadata.name.as_deref().unwrap_or("?");
    let status = fs.status.clone().unwrap_or_default();
    let Some(risk) = &status.risk else {
        return Err(match &fs.spec.risk {
            None => format!(
                "{name} does not score its orders: spec.risk is not set (examples/scalpers-scored.yaml shows one)"
            ),
            Some(_) => format!("{name} has not reported its risk scores yet"),
        });
    };
    let mut out = String::new();
    let policy = fs.spec.risk.as_ref().map_or("off now".to_string(), |r| {
        format!("{:?} at {}", r.action, r.threshold).to_lowercase()
    });
    let _ = writeln!(
        out,
        "{} {}/{name} ({policy})",
        paint(BOLD, "Risk"),
        fs.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let _ = writeln!(
        out,
        "  scored {} orders ({} waiting): {} cancelled for risk, {} held for review",
        risk.scored,
        risk.unscored,
        paint(if risk.cancelled > 0 { BAD } else { DIM }, risk.cancelled),
        risk.held
    );
    if risk.top.is_empty() {
        let _ = writeln!(out, "  no shopper scored above 0");
        return Ok(out);
    }
    let _ = writeln!(out, "{}", paint(BOLD, "Highest scores"));
    let _ = writeln!(
        out,
        "  {:>5}  {:<24} {:>6} {:>9} {:>5}  NETWORK",
        "SCORE", "SHOPPER", "ORDERS", "CANCELLED", "HELD"
    );
    for s in &risk.top {
        let _ = writeln!(
            out,
            "  {:>5}  {:<24} {:>6} {:>9} {:>5}  {}",
            s.score,
            s.shopper,
            s.orders,
            s.cancelled,
            s.held,
            s.network.as_deref().unwrap_or("-")
        );
        for why in &s.why {
            let _ = writeln!(out, "         {}", paint(DIM, why));
        }
    }
    Ok(out)
}

/// A spec change, field by field: "spec.paused: false → true".
pub fn change_report(before: &FlashSaleSpec, after: &FlashSaleSpec) -> String {
    let (b, a) = (
        serde_json::to_value(before).unwrap_or_default(),
        serde_json::to_value(after).unwrap_or_default(),
    );
    let mut out = String::new();
    for key in ["stock", "paused"] {
        if b[key] != a[key] {
            let _ = writeln!(out, "spec.{key}: {} → {}", b[key], paint(BOLD, &a[key]));
        }
    }
    if out.is_empty() {
        out.push_str("no change: the spec already says so\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn plain(text: &str) -> String {
        anstream::adapter::strip_str(text).to_string()
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
    }

    fn sale() -> FlashSale {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flashsale.dev/v1alpha1",
            "kind": "FlashSale",
            "metadata": {"name": "drop", "namespace": "shop"},
            "spec": {
                "sku": "SKU-1",
                "stock": 100,
                "window": {"start": "2026-12-01T12:00:00Z", "end": "2026-12-01T13:00:00Z"},
                "purchaseLimit": 2,
                "sharding": {"shards": 4},
                "reconcile": {"interval": "10m"},
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_queued_sale_s_status_shows_its_line() {
        let mut fs = sale();
        let mut queue = crate::model::crd::QueueStatus {
            length: 5_000,
            admitted: 1_200,
            waiting: 3_800,
            rate_per_second: 300,
            wait_p50_seconds: 7,
            wait_p95_seconds: 13,
            closed: false,
            challenge_failures: 42,
        };
        fs.status = Some(FlashSaleStatus {
            queue: Some(queue.clone()),
            ..Default::default()
        });
        let text = plain(&status_report(&fs, &[], at(12, 5)));
        assert!(
            text.contains("Queue  5000 joined, 1200 admitted at 300/s; 3800 waiting, wait p50 7 s, p95 13 s; 42 challenge answers refused"),
            "{text}"
        );
        queue.closed = true;
        fs.status = Some(FlashSaleStatus {
            queue: Some(queue),
            ..Default::default()
        });
        let text = plain(&status_report(&fs, &[], at(12, 5)));
        assert!(
            text.contains("closed (sold out or over), nobody waits"),
            "{text}"
        );
        fs.status = None;
        assert!(!plain(&status_report(&fs, &[], at(12, 5))).contains("Queue"));
    }

    #[test]
    fn instants_say_how_far_they_are() {
        assert_eq!(when(at(12, 5), at(12, 0)), "2026-12-01T12:05:00Z (in 5m)");
        assert_eq!(
            when(at(12, 0), at(13, 30)),
            "2026-12-01T12:00:00Z (1h 30m ago)"
        );
        assert_eq!(when(at(12, 0), at(12, 0)), "2026-12-01T12:00:00Z (now)");
    }

    #[test]
    fn the_plan_lists_every_step_in_order() {
        let t = sale().spec.timeline();
        let steps = steps(&t);
        let names: Vec<&str> = steps
            .iter()
            .map(|(_, s)| s.split([':', ' ']).next().unwrap())
            .collect();
        // An hour, every 10 minutes: Jobs at :10 .. :50, the first three and the last.
        assert_eq!(
            names,
            [
                "warm-up",
                "open",
                "reconciliation",
                "reconciliation",
                "reconciliation",
                "reconciliation",
                "close",
                "cleanup"
            ]
        );
        assert!(steps.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(
            steps[5].1.contains("Job 5 (the last of 5"),
            "{}",
            steps[5].1
        );
        for (instant, state) in [
            (at(11, 0), "Scheduled"),
            (at(11, 59), "Warming, then Warm"),
            (at(12, 30), "Live (SoldOut once every unit is sold)"),
            (at(13, 10), "Ended"),
            (at(14, 0), "CleaningUp, then Completed"),
        ] {
            assert_eq!(state_at(&t, instant), state);
        }
        let text = plain(&plan_report(&sale(), at(12, 30)));
        assert!(text.contains("at 2026-12-01T12:30:00Z: Live"), "{text}");
        assert!(
            text.contains("next: close at 2026-12-01T13:00:00Z (in 30m)"),
            "{text}"
        );
    }

    #[test]
    fn the_report_waits_for_the_end_and_judges_what_it_can() {
        let mut fs = sale();
        assert!(report(&fs).unwrap_err().contains("once the window is over"));
        fs.status = Some(
            serde_json::from_value(serde_json::json!({
                "state": "Ended",
                "stock": {"total": 100, "reserved": 0, "persisted": 100, "remaining": 0, "sold": 100},
                "lastReconciliation": {"time": "2026-12-01T13:00:05Z", "driftFound": 0, "driftRepaired": 0},
                "summary": {"orders": 60, "sold": 100, "paid": 90, "unpaid": 10, "cancelled": 3,
                            "timedOut": 1, "failed": 0, "mostByOneShopper": 2,
                            "perMinute": [{"minute": "2026-12-01T12:00:00Z", "units": 100}]},
            }))
            .unwrap(),
        );
        let text = plain(&report(&fs).unwrap());
        assert!(
            text.contains("sold 100 of 100 units in 60 orders: paid 90"),
            "{text}"
        );
        assert!(text.contains("12:00     100"), "{text}");
        let held: Vec<_> = judge(&fs).iter().map(|j| j.holds).collect();
        assert_eq!(held, [Some(true); 6]);
        // An over-limit shopper, and drift left unrepaired.
        let status = fs.status.as_mut().unwrap();
        status.summary.as_mut().unwrap().most_by_one_shopper = 3;
        status.last_reconciliation.as_mut().unwrap().drift_found = 1;
        let judged = judge(&fs);
        assert_eq!(judged[1].holds, Some(false));
        assert_eq!(judged[5].holds, Some(false));
        assert!(plain(&report(&fs).unwrap()).contains("I2 no over-limit     BROKEN"));
    }

    #[test]
    fn the_risk_view_lists_the_top_shoppers_and_why() {
        let mut fs = sale();
        assert!(
            risk_report(&fs)
                .unwrap_err()
                .contains("spec.risk is not set")
        );
        fs.spec.risk = Some(serde_json::from_value(serde_json::json!({})).unwrap());
        assert!(risk_report(&fs).unwrap_err().contains("not reported"));
        fs.status = Some(
            serde_json::from_value(serde_json::json!({
                "risk": {"scored": 246, "unscored": 3, "cancelled": 30, "held": 0,
                         "top": [{"shopper": "scalper-7", "score": 110, "orders": 1,
                                  "cancelled": 1, "held": 0, "network": "203.0.113.0/24",
                                  "why": ["paidWithin +60: paid 31 ms after the order was payable (under 2000 ms)",
                                          "shoppersPerNetwork +50: 30 shoppers bought from its network (over 5)"]}]},
            }))
            .unwrap(),
        );
        let text = plain(&risk_report(&fs).unwrap());
        assert!(text.contains("Risk shop/drop (cancel at 100)"), "{text}");
        assert!(
            text.contains(
                "scored 246 orders (3 waiting): 30 cancelled for risk, 0 held for review"
            ),
            "{text}"
        );
        assert!(text.contains("  110  scalper-7"), "{text}");
        assert!(text.contains("203.0.113.0/24"), "{text}");
        assert!(
            text.contains("shoppersPerNetwork +50: 30 shoppers"),
            "{text}"
        );
    }

    #[test]
    fn a_change_names_each_field_that_moved() {
        let before = sale().spec;
        let mut after = before.clone();
        after.paused = true;
        after.stock = 150;
        assert_eq!(
            plain(&change_report(&before, &after)),
            "spec.stock: 100 → 150\nspec.paused: false → true\n"
        );
        assert_eq!(
            change_report(&before, &before),
            "no change: the spec already says so\n"
        );
    }
}
