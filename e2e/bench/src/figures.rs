//! The rows of the benchmark's table: each figure, its baseline measured in
//! the same run, the result and the goal it is held to.

use serde::Serialize;

use crate::bare::Bare;
use crate::broker::PlainProducer;
use crate::cpu;
use crate::degraded::{self, ThroughDatabase};
use crate::funnel::CheapAnswers;
use crate::intake::{self, Intake};
use crate::operator::OperatorFigures;
use crate::persist::Persist;
use crate::risk::Scoring;

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figure {
    /// What is measured.
    pub figure: String,
    /// Its value.
    pub measured: String,
    /// What it is compared with, measured in the same run.
    pub baseline: String,
    /// The compared value (a ratio, a percentile).
    pub result: String,
    /// The goal.
    pub goal: String,
    /// Whether the goal is met.
    pub met: bool,
}

fn figure(
    figure: &str,
    measured: String,
    baseline: &str,
    result: String,
    goal: &str,
    met: bool,
) -> Figure {
    Figure {
        figure: figure.into(),
        measured,
        baseline: baseline.into(),
        result,
        goal: goal.into(),
        met,
    }
}

/// A CPU-per-operation row: `us` against `baseline_us`, goal `<= goal_us`.
fn cpu_row(name: &str, us: f64, baseline: &str, baseline_us: f64, goal_us: f64) -> Figure {
    figure(
        name,
        format!("{us:.0} µs"),
        &format!("{baseline}: {baseline_us:.0} µs"),
        format!("{:.1}x the baseline", us / baseline_us.max(1e-9)),
        &format!("<= {goal_us:.0} µs"),
        us <= goal_us,
    )
}

/// The funnel's cheap answers against the bare handler's rate (goal 0.8).
pub fn cheap_answers(cheap: &CheapAnswers, bare: &Bare) -> Vec<Figure> {
    let row = |name: &str, per_sec: f64, bare_name: &str, bare_per_sec: f64| {
        let ratio = per_sec / bare_per_sec.max(1.0);
        figure(
            name,
            format!("{per_sec:.0}/s"),
            &format!("{bare_name}: {bare_per_sec:.0}/s"),
            format!("ratio {ratio:.2}"),
            "ratio >= 0.8",
            ratio >= 0.8,
        )
    };
    vec![
        row(
            "status answers/s (GET /v1/sales/{sale}/status, from memory)",
            cheap.status.per_sec,
            "a bare axum handler of a fixed status",
            bare.status.per_sec,
        ),
        row(
            "sold-out purchases refused/s (409 SOLD_OUT, JWT shoppers)",
            cheap.sold_out_per_sec,
            "a bare axum handler answering every purchase 202",
            bare.requests_per_sec,
        ),
    ]
}

/// Purchases through PostgreSQL alone, against the Redis path of the same
/// run; the goal: the largest stock allowed there sells within a minute.
pub fn through_database(d: &ThroughDatabase, intake: &Intake) -> Figure {
    let per_sec = d.report.accepted_per_sec;
    let p99 = d.report.outcomes.get("202").map_or(f64::NAN, |l| l.p99_ms);
    let redis = intake.max_rate.accepted_per_sec;
    let goal = degraded::STOCK as f64 / 60.0;
    figure(
        "purchases through PostgreSQL alone (Redis down), closed loop",
        format!("{per_sec:.0}/s, p99 {p99:.0} ms ({} sold)", d.sold),
        &format!("through Redis in this run: {redis:.0}/s"),
        format!("ratio {:.2}", per_sec / redis.max(1.0)),
        &format!(">= {goal:.0}/s ({} units in a minute)", degraded::STOCK),
        per_sec >= goal,
    )
}

/// The queue of a million: its memory in Redis, its join rate, and
/// admission's rate with the crowd behind it.
pub fn queue(q: &crate::queue::QueueFigures, bare: &Bare) -> Vec<Figure> {
    use crate::queue::{CROWD, JOIN_MARGIN, RATE};
    let mb = q.redis_bytes as f64 / 1e6;
    let a = &q.admitted;
    let admitted_ratio = a.per_sec / f64::from(RATE);
    let join_goal = JOIN_MARGIN * f64::from(RATE);
    vec![
        figure(
            &format!("Redis memory of a queue of {CROWD} shoppers"),
            format!(
                "{mb:.0} MB ({} B per shopper)",
                q.redis_bytes / CROWD.max(1)
            ),
            &format!(
                "MEMORY USAGE of its key: {:.0} MB",
                q.key_bytes as f64 / 1e6
            ),
            format!("{mb:.0} MB"),
            "<= 200 MB",
            mb <= 200.0,
        ),
        figure(
            "queue joins/s through the API (JWT, Lua, signed ticket)",
            format!("{:.0}/s (p99 {:.1} ms)", q.joined.per_sec, q.joined.p99_ms),
            &format!(
                "a bare axum handler answering every purchase 202: {:.0}/s",
                bare.requests_per_sec
            ),
            format!(
                "ratio {:.2}",
                q.joined.per_sec / bare.requests_per_sec.max(1.0)
            ),
            &format!(">= {join_goal:.0}/s ({JOIN_MARGIN}x the admission rate)"),
            q.joined.per_sec >= join_goal && q.joined.other.is_empty(),
        ),
        figure(
            &format!("admitted/s with {CROWD} in line"),
            format!(
                "{:.0}/s, {} of {} due got a token; turn to token p99 {:.0} ms",
                a.per_sec, a.admitted, a.due, a.late_p99_ms
            ),
            &format!("ratePerSecond: {RATE}/s"),
            format!("ratio {admitted_ratio:.2}"),
            "ratio >= 0.95, every due shopper admitted",
            admitted_ratio >= 0.95 && a.admitted == a.due,
        ),
    ]
}

/// The purchase path: CPU per accepted purchase by part and in all, each
/// against its floor; throughput against raw EVALSHA; the tail at half rate.
pub fn purchase_path(intake: &Intake, bare: &Bare, plain: &PlainProducer) -> Vec<Figure> {
    let storm = &intake.max_rate_cpu;
    let accepted = intake.max_rate.accepted_per_sec;
    let ratio = accepted / intake.baseline.rps.max(1.0);
    let p99s = &intake.half_rate_p99_ms;
    let mut sorted = p99s.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let within = p99s.iter().filter(|&&p| p <= 10.0).count();
    let half = intake.half_rate.outcomes.get("202");
    vec![
        cpu_row(
            "API CPU per accepted purchase",
            cpu::part(storm, "API"),
            "a bare axum handler, same runtime and client, per request",
            bare.us_per_request(),
            30.0,
        ),
        cpu_row(
            "Kafka broker CPU per accepted purchase",
            cpu::part(storm, "Kafka"),
            &format!(
                "a plain rdkafka producer at {:.0}/s, per message",
                plain.per_sec
            ),
            plain.kafka_us_per_message(),
            15.0,
        ),
        cpu_row(
            "load generator CPU per purchase",
            cpu::part(storm, "load generator"),
            "redis-benchmark per EVALSHA",
            cpu::part(&intake.baseline_cpu, "redis-benchmark"),
            15.0,
        ),
        cpu_row(
            "whole machine CPU per accepted purchase",
            storm.total_us_per_purchase,
            "the machine per raw EVALSHA",
            intake.baseline_cpu.total_us_per_purchase,
            100.0,
        ),
        figure(
            "accepted purchases/s through the API (HTTP, JWT, Kafka ack)",
            format!("{accepted:.0}/s"),
            &format!(
                "redis-benchmark EVALSHA purchase.lua, {} clients: {:.0}/s",
                intake::CLIENTS,
                intake.baseline.rps
            ),
            format!("ratio {ratio:.2}"),
            "ratio >= 0.4",
            ratio >= 0.4,
        ),
        figure(
            &format!("half-rate p99 of accepted purchases, {} storms", p99s.len()),
            format!(
                "median {median:.1} ms ({:.1}-{:.1}); first storm p50 {:.2}, p99.9 {:.1} ms",
                sorted.first().copied().unwrap_or(f64::NAN),
                sorted.last().copied().unwrap_or(f64::NAN),
                half.map_or(f64::NAN, |l| l.p50_ms),
                half.map_or(f64::NAN, |l| l.p999_ms),
            ),
            &format!(
                "Redis round trip: p50 {:.2} ms, p99 {:.2} ms",
                intake.baseline.p50_ms, intake.baseline.p99_ms
            ),
            format!("{within} of {} <= 10 ms", p99s.len()),
            "p99 <= 10 ms in every storm",
            within == p99s.len(),
        ),
    ]
}

/// Persisted orders per second against COPY of the same rows.
pub fn persistence(persist: &Persist) -> Figure {
    let ratio = persist.consumer_per_sec / persist.copy_per_sec.max(1.0);
    figure(
        "persisted orders/s by a consumer",
        format!(
            "{:.0}/s ({} orders)",
            persist.consumer_per_sec, persist.orders
        ),
        &format!("COPY of the same rows: {:.0}/s", persist.copy_per_sec),
        format!("ratio {ratio:.2}"),
        "ratio >= 0.5",
        ratio >= 0.5,
    )
}

/// Risk scoring's pace against the storm's, same orders, same run. The
/// scorer's input is the accepted orders, bounded by the stock: the goal is
/// a sale of 100,000 units scored within a minute of its last purchase.
pub fn risk_scoring(scoring: &Scoring, persist: &Persist, intake: &Intake) -> Figure {
    let accepted = intake.max_rate.accepted_per_sec;
    let ratio = scoring.per_sec / accepted.max(1.0);
    let goal = 100_000.0 / 60.0;
    figure(
        "risk-scored orders/s by one consumer's scorer (every rule)",
        format!(
            "{:.0}/s ({} orders; persisted {:.0}/s)",
            scoring.per_sec, scoring.orders, persist.consumer_per_sec
        ),
        &format!("purchases accepted by the API in this run: {accepted:.0}/s"),
        format!("ratio {ratio:.2}"),
        &format!(">= {goal:.0}/s (100,000 units scored in a minute)"),
        scoring.per_sec >= goal,
    )
}

/// The API's memory under the storm.
pub fn memory(api_rss: f64) -> Figure {
    figure(
        "API RSS under the storm (peak)",
        format!("{api_rss:.1} MiB"),
        "-",
        format!("{api_rss:.1} MiB"),
        "<= 64 MiB",
        api_rss <= 64.0,
    )
}

/// The operator's reaction times and memory.
pub fn operator(ops: &OperatorFigures) -> Vec<Figure> {
    let transition_ms = ops.warm_error.max_ms.max(ops.live_error.max_ms);
    vec![
        figure(
            &format!(
                "kill switch: patch -> first PAUSED, {} trials",
                ops.kill_switch.samples_ms.len()
            ),
            format!(
                "p50 {:.0} ms, p99 {:.0} ms",
                ops.kill_switch.p50_ms, ops.kill_switch.p99_ms
            ),
            "-",
            format!("p99 {:.0} ms", ops.kill_switch.p99_ms),
            "p99 <= 1 s",
            ops.kill_switch.p99_ms <= 1000.0,
        ),
        figure(
            "warm-up / live vs their due instants, 5 sales",
            format!(
                "warm max {:.0} ms, live max {:.0} ms off",
                ops.warm_error.max_ms, ops.live_error.max_ms
            ),
            "-",
            format!("max {transition_ms:.0} ms"),
            "within 1 s",
            transition_ms <= 1000.0,
        ),
        figure(
            &format!(
                "lag crossing -> replicas updated, {} trials",
                ops.scaling_reaction.samples_ms.len()
            ),
            format!(
                "median {:.0} ms, max {:.0} ms",
                ops.scaling_reaction.p50_ms, ops.scaling_reaction.max_ms
            ),
            "KEDA's default poll: 30 s",
            format!(
                "max {:.1} s ({:.0}x faster than 30 s)",
                ops.scaling_reaction.max_ms / 1000.0,
                30_000.0 / ops.scaling_reaction.max_ms.max(1.0)
            ),
            "<= 5 s",
            ops.scaling_reaction.max_ms <= 5000.0,
        ),
        figure(
            &format!("operator RSS with {} sales", ops.sales),
            format!("{:.1} MiB", ops.operator_rss_mib),
            "-",
            format!("{:.1} MiB", ops.operator_rss_mib),
            "<= 32 MiB",
            ops.operator_rss_mib <= 32.0,
        ),
    ]
}
