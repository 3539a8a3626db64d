//! `make bench`: every performance figure of FlashSale next to the limit it is
//! measured against, in one run, on the local stack — and the invariants
//! I1–I6 of that same run. A run whose invariants fail prints FAIL and exits
//! non-zero. Results: a table on stdout; JSON and SVG plots in the results
//! directory.

mod cpu;
mod intake;
mod machine;
mod operator;
mod persist;
mod procs;
mod sale;
mod svg;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use flashsale_testkit as stack;
use flashsale_workload::domain::invariants;
use flashsale_workload::load::{self, StormReport};
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
use serde::Serialize;

/// Measure FlashSale against its limits, in one run.
#[derive(Parser)]
struct Args {
    /// Where the JSON report and the plots go (default results/bench-<time>).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Seconds of each storm.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Kill-switch and scaling trials.
    #[arg(long, default_value_t = 20)]
    trials: usize,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figure {
    figure: String,
    measured: String,
    baseline: String,
    result: String,
    goal: String,
    met: bool,
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

/// The width of the plots' time buckets.
const BUCKET_MS: f64 = 250.0;

/// The timeline in buckets, each folded from 0 by `fold(acc, latency)`.
fn per_bucket(report: &StormReport, fold: impl Fn(f64, f64) -> f64) -> Vec<(f64, f64)> {
    let mut buckets: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
    for &(offset, latency) in &report.timeline {
        let acc = buckets.entry((offset / BUCKET_MS) as u64).or_default();
        *acc = fold(*acc, latency);
    }
    buckets
        .into_iter()
        .map(|(b, v)| (b as f64 * BUCKET_MS / 1000.0, v))
        .collect()
}

fn throughput_series(report: &StormReport) -> Vec<(f64, f64)> {
    per_bucket(report, |n, _| n + 1000.0 / BUCKET_MS)
}

/// The slowest accepted purchase started in each 250 ms: stalls show as spikes.
fn slowest_series(report: &StormReport) -> Vec<(f64, f64)> {
    per_bucket(report, f64::max)
}

fn latency_cdf(report: &StormReport) -> Vec<(f64, f64)> {
    let mut latencies: Vec<f64> = report.timeline.iter().map(|&(_, l)| l).collect();
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len().max(1) as f64;
    let step = (latencies.len() / 400).max(1);
    latencies
        .iter()
        .enumerate()
        .step_by(step)
        .map(|(i, &l)| (l, 100.0 * (i + 1) as f64 / n))
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let results = args.results.unwrap_or_else(|| {
        stack::repo_dir().join(format!(
            "results/bench-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S")
        ))
    });
    std::fs::create_dir_all(&results)?;
    let pinning = if procs::cores() > 1 {
        "load generator on core 0 (make bench runs it under taskset -c 0); API, consumer and operator on core 1; Redis, Kafka, PostgreSQL, the apiserver and the node share both"
    } else {
        "one core: everything shares it"
    };
    let mut machine = machine::describe(pinning);
    machine.other_pods = machine::other_pods().await.context("Kubernetes")?;
    if !machine.other_pods.is_empty() {
        eprintln!(
            "WARNING: {} pods already run on the cluster and share its two cores ({}); \
             for figures worth comparing, stop them first (helm uninstall the demo)",
            machine.other_pods.len(),
            machine.other_pods.join(", ")
        );
    }
    eprintln!(
        "FlashSale bench on {} ({} cores, {:.0} GiB); results in {}",
        machine.cpu,
        machine.cores,
        machine.memory_gib,
        results.display()
    );
    for bin in ["flashsale", "flashsale-operator"] {
        anyhow::ensure!(
            procs::release_bin(bin).exists(),
            "target/release/{bin} is missing: make release"
        );
    }
    let db = flashsale_workload::orders::connect(&stack::database_url(), 4)
        .await
        .context("PostgreSQL")?;
    flashsale_workload::orders::migrate(&db).await?;
    let store = SaleStore::new(
        RedisConn::connect(&stack::redis_url().parse().map_err(anyhow::Error::msg)?)
            .await
            .context("Redis")?,
    );

    let intake = intake::run(&db, &store, &results, args.seconds).await?;
    eprintln!("{}", load::render(&intake.max_rate));
    eprintln!("{}", load::render(&intake.half_rate));
    eprintln!(
        "persist: a consumer drains the {} accepted orders",
        intake.told.accepted.len()
    );
    let units: i64 = intake.told.accepted.values().map(|(_, units)| units).sum();
    let persist = persist::run(&db, &intake.config, units).await?;
    eprintln!(
        "persist: {:.0} orders/s by the consumer, {:.0}/s by COPY",
        persist.consumer_per_sec, persist.copy_per_sec
    );
    eprintln!("invariants: gathering the evidence of this run");
    let evidence = load::gather(
        &db,
        &store,
        &stack::kafka_bootstrap(),
        &intake.config,
        &intake.told,
        Duration::from_secs(300),
    )
    .await?;
    let verdicts = invariants::evaluate(&evidence);
    for config in [&intake.config, &intake.baseline_sale] {
        sale::remove(&db, &store, config).await?;
    }

    let image = "docker.io/flashsale/flashsale:bench";
    let imported = std::process::Command::new(stack::repo_dir().join("e2e/stack/image.sh"))
        .args(["flashsale", "bench"])
        .arg(procs::release_bin("flashsale"))
        .env("FLASHSALE_RUN", stack::run_dir())
        .output()?;
    anyhow::ensure!(
        imported.status.success(),
        "image import failed: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let ops = operator::run(image, args.trials).await?;

    let accepted = intake.max_rate.accepted_per_sec;
    let half = intake.half_rate.outcomes.get("202").cloned();
    let (p50, p99, p999) = half
        .as_ref()
        .map_or((0.0, 0.0, 0.0), |l| (l.p50_ms, l.p99_ms, l.p999_ms));
    let api_rss = intake.api_rss_peak_mib;
    let api_ratio = accepted / intake.baseline.rps.max(1.0);
    let persist_ratio = persist.consumer_per_sec / persist.copy_per_sec.max(1.0);
    let transition_ms = ops.warm_error.max_ms.max(ops.live_error.max_ms);
    let figures = vec![
        figure(
            "accepted purchases/s through the API (HTTP, JWT, Kafka ack)",
            format!("{accepted:.0}/s"),
            &format!(
                "redis-benchmark EVALSHA purchase.lua, {} clients: {:.0}/s",
                intake::CLIENTS,
                intake.baseline.rps
            ),
            format!("ratio {api_ratio:.2}"),
            "ratio >= 0.5",
            api_ratio >= 0.5,
        ),
        figure(
            "accepted purchase latency at 50% of the max rate",
            format!("p50 {p50:.2} ms, p99 {p99:.2} ms, p99.9 {p999:.2} ms"),
            &format!(
                "Redis round trip: p50 {:.2} ms, p99 {:.2} ms",
                intake.baseline.p50_ms, intake.baseline.p99_ms
            ),
            format!("p99 {p99:.2} ms"),
            "p99 <= 10 ms",
            p99 <= 10.0,
        ),
        figure(
            "persisted orders/s by a consumer",
            format!(
                "{:.0}/s ({} orders)",
                persist.consumer_per_sec, persist.orders
            ),
            &format!("COPY of the same rows: {:.0}/s", persist.copy_per_sec),
            format!("ratio {persist_ratio:.2}"),
            "ratio >= 0.5",
            persist_ratio >= 0.5,
        ),
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
            "API RSS under the storm (peak)",
            format!("{api_rss:.1} MiB"),
            "-",
            format!("{api_rss:.1} MiB"),
            "<= 64 MiB",
            api_rss <= 64.0,
        ),
        figure(
            &format!("operator RSS with {} sales", ops.sales),
            format!("{:.1} MiB", ops.operator_rss_mib),
            "-",
            format!("{:.1} MiB", ops.operator_rss_mib),
            "<= 32 MiB",
            ops.operator_rss_mib <= 32.0,
        ),
    ];

    println!(
        "\nFlashSale bench — {} — {} cores, {:.0} GiB — {}",
        machine.cpu, machine.cores, machine.memory_gib, machine.pinning
    );
    if !machine.other_pods.is_empty() {
        println!(
            "NOT QUIET: {} other pods ran on the cluster during this run",
            machine.other_pods.len()
        );
    }
    println!(
        "{:<62} {:<44} {:<52} {:<26} {:<14}",
        "figure", "measured", "baseline (same run)", "result", "goal"
    );
    for f in &figures {
        println!(
            "{:<62} {:<44} {:<52} {:<26} {:<14} {}",
            f.figure,
            f.measured,
            f.baseline,
            f.result,
            f.goal,
            if f.met { "met" } else { "MISSED" }
        );
    }
    println!(
        "\nhow the cores were shared\n  closed-loop storm: {}\n  redis-benchmark:   {}",
        cpu::render(&intake.max_rate_cpu),
        cpu::render(&intake.baseline_cpu)
    );
    println!("\ninvariants of this run:");
    for v in &verdicts {
        let mark = match v.holds {
            Some(true) => "ok  ",
            Some(false) => "FAIL",
            None => "n/a ",
        };
        println!("  {mark} {} {:<17} {}", v.id, v.name, v.detail);
    }

    std::fs::write(
        results.join("throughput.svg"),
        svg::line_chart(
            "Accepted purchases per second (closed loop, max rate)",
            "seconds",
            "accepted/s",
            &[svg::Series {
                name: "accepted/s",
                points: &throughput_series(&intake.max_rate),
                color: "#1f77b4",
            }],
            false,
        ),
    )?;
    std::fs::write(
        results.join("latency.svg"),
        svg::line_chart(
            "Accepted purchase latency, cumulative (open loop, half the max rate)",
            "latency ms (log)",
            "% of purchases",
            &[svg::Series {
                name: "accepted at 50% rate",
                points: &latency_cdf(&intake.half_rate),
                color: "#d62728",
            }],
            true,
        ),
    )?;
    std::fs::write(
        results.join("stalls.svg"),
        svg::line_chart(
            "Slowest accepted purchase started in each 250 ms",
            "seconds into the storm",
            "ms",
            &[
                svg::Series {
                    name: "closed loop, max rate",
                    points: &slowest_series(&intake.max_rate),
                    color: "#1f77b4",
                },
                svg::Series {
                    name: "open loop, half rate",
                    points: &slowest_series(&intake.half_rate),
                    color: "#d62728",
                },
            ],
            false,
        ),
    )?;
    let report = serde_json::json!({
        "machine": machine,
        "figures": figures,
        "redisBaseline": intake.baseline,
        "maxRate": intake.max_rate,
        "halfRate": intake.half_rate,
        "cpuMaxRate": intake.max_rate_cpu,
        "cpuRedisBenchmark": intake.baseline_cpu,
        "persist": persist,
        "operator": ops,
        "invariants": verdicts,
    });
    std::fs::write(
        results.join("bench.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    println!(
        "\nreport: {}/bench.json, plots: throughput.svg, latency.svg, stalls.svg",
        results.display()
    );
    if !invariants::all_hold(&verdicts) {
        println!("FAIL: an invariant did not hold in this run");
        std::process::exit(1);
    }
    Ok(())
}
