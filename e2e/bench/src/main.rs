//! `make bench`: every performance figure of FlashSale next to the limit it is
//! measured against, in one run, on the local stack — and the invariants
//! I1–I6 of that same run. A run whose invariants fail prints FAIL and exits
//! non-zero. Results: a table on stdout; JSON and SVG plots in the results
//! directory.

mod bare;
mod broker;
mod cpu;
mod degraded;
mod figures;
mod footprint;
mod funnel;
mod intake;
mod machine;
mod many;
mod operator;
mod persist;
mod procs;
mod queue;
mod risk;
mod sale;
mod soak;
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
    /// Open-loop storms at half the maximum rate (the tail is judged on all).
    #[arg(long, default_value_t = 10)]
    half_rate_runs: u32,
    /// Seconds of each of them.
    #[arg(long, default_value_t = 6)]
    half_rate_seconds: u64,
    /// Leave out the operator's figures: the quicker loop for work on the
    /// purchase path or persistence.
    #[arg(long)]
    skip_operator: bool,
    /// Leave out the queue of a million shoppers (a minute or two).
    #[arg(long)]
    skip_queue: bool,
    /// Instead of the figures, soak: a sale of this many minutes at a
    /// quarter of the maximum purchase rate, sampled every 30 s (`make soak`: 60).
    #[arg(long, value_name = "MINUTES")]
    soak: Option<u64>,
    /// Instead of the figures, these counts of sales at once under one
    /// operator (`make many`: 1,100,1000).
    #[arg(long, value_name = "COUNTS", value_delimiter = ',')]
    many: Vec<usize>,
    /// The many sales' `consumers.pollInterval` (how often a live sale is
    /// reconciled).
    #[arg(long, default_value = "2s")]
    many_poll_interval: String,
    /// Serve the bare handler (the benchmark runs itself so, pinned).
    #[arg(long = bare::FLAG, hide = true, value_name = "ADDRESS")]
    serve_bare_handler: Option<String>,
}

/// The figures as a table, with what may have made the run noisy, then
/// how the cores were shared in each measurement.
fn print_table(
    machine: &machine::Machine,
    figures: &[figures::Figure],
    shares: &[(&str, &cpu::CpuShare)],
) {
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
    let stolen = shares
        .iter()
        .flat_map(|(_, share)| share.stolen_per_core.iter().copied())
        .fold(0.0, f64::max);
    if stolen > 0.05 {
        println!(
            "NOT QUIET: the hypervisor took up to {:.0}% of a core during a measurement (steal); figures of such runs vary widely",
            stolen * 100.0
        );
    }
    println!(
        "{:<62} {:<44} {:<52} {:<26} {:<14}",
        "figure", "measured", "baseline (same run)", "result", "goal"
    );
    for f in figures {
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
    println!("\nhow the cores were shared (µs per purchase, request or message)");
    for (what, share) in shares {
        println!("  {:<19}{}", format!("{what}:"), cpu::render(share));
    }
}

/// The intake's plots: throughput, latency, stalls.
fn plot(results: &std::path::Path, intake: &intake::Intake) -> anyhow::Result<()> {
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
    Ok(())
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

/// The operator's figures, with the release build imported as its image.
async fn operator_figures(trials: usize) -> anyhow::Result<operator::OperatorFigures> {
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
    operator::run(image, trials).await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(listen) = &args.serve_bare_handler {
        return bare::serve(listen).await;
    }
    let results = args.results.unwrap_or_else(|| {
        stack::repo_dir().join(format!(
            "results/{}-{}",
            match (&args.soak, args.many.is_empty()) {
                (Some(_), _) => "soak",
                (None, false) => "many",
                (None, true) => "bench",
            },
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
    if let Some(minutes) = args.soak {
        if !soak::run(&db, &store, &results, minutes).await? {
            println!("FAIL: a goal or an invariant of the soak did not hold");
            std::process::exit(1);
        }
        return Ok(());
    }
    if !args.many.is_empty() {
        let measured = many::run(&db, &args.many, &args.many_poll_interval).await?;
        std::fs::write(
            results.join("many.json"),
            serde_json::to_vec_pretty(
                &serde_json::json!({"machine": machine, "counts": measured}),
            )?,
        )?;
        println!(
            "\nFlashSale many sales — {} — {} cores",
            machine.cpu, machine.cores
        );
        for m in &measured {
            println!("{}", many::render(m));
        }
        return Ok(());
    }

    let half_rate = intake::HalfRate {
        runs: args.half_rate_runs,
        seconds: args.half_rate_seconds,
    };
    let baseline_secs = Duration::from_secs(args.seconds.min(10));
    let intake = intake::run(
        &db,
        &store,
        &results,
        args.seconds,
        half_rate,
        baseline_secs,
    )
    .await?;
    eprintln!("{}", load::render(&intake.max_rate));
    eprintln!("{}", load::render(&intake.half_rate));
    eprintln!("bare handler: the same storm against a bare axum handler, {baseline_secs:?}");
    let bare = bare::run(&intake.secret, baseline_secs).await?;
    eprintln!(
        "broker: a plain rdkafka producer at {:.0} messages/s, {baseline_secs:?}",
        intake.max_rate.accepted_per_sec
    );
    let plain = broker::run(
        intake.max_rate.accepted_per_sec,
        baseline_secs,
        sale::PARTITIONS,
    )
    .await?;
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
    eprintln!("risk: a scorer reads the same orders, every rule evaluated");
    let scoring = risk::run(&db, &intake.config, intake.told.accepted.len() as i64).await?;
    eprintln!(
        "risk: {:.0} orders/s scored ({} orders)",
        scoring.per_sec, scoring.orders
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
    let verdicts = invariants::evaluate(&evidence).verdicts;
    for config in [&intake.config, &intake.sold_out_sale] {
        sale::remove(&db, &store, config).await?;
    }
    eprintln!(
        "through the database: the same storm on a sale of {} selling through PostgreSQL alone, {baseline_secs:?}",
        degraded::STOCK
    );
    let through_database = degraded::run(
        &db,
        &store,
        &results.join("jwt-secret"),
        &intake.secret,
        baseline_secs,
    )
    .await?;

    let queued = if args.skip_queue {
        None
    } else {
        eprintln!(
            "queue: {} shoppers join a queued sale through the API",
            queue::CROWD
        );
        Some(queue::run(&db, &store, &results).await?)
    };

    let ops = if args.skip_operator {
        None
    } else {
        Some(operator_figures(args.trials).await?)
    };

    let mut figures = figures::purchase_path(&intake, &bare, &plain);
    figures.extend(figures::cheap_answers(&intake.cheap, &bare));
    if let Some(queued) = &queued {
        figures.extend(figures::queue(queued, &bare));
    }
    figures.push(figures::through_database(&through_database, &intake));
    figures.push(figures::persistence(&persist));
    figures.push(figures::risk_scoring(&scoring, &persist, &intake));
    figures.push(figures::memory(intake.api_rss_peak_mib));
    if let Some(ops) = &ops {
        figures.extend(figures::operator(ops));
    }

    let mut shares = vec![
        ("closed-loop storm", &intake.max_rate_cpu),
        ("redis-benchmark", &intake.baseline_cpu),
        ("bare handler", &bare.cpu),
        ("plain producer", &plain.cpu),
        ("status reads", &intake.cheap.status.cpu),
        ("bare status", &bare.status.cpu),
    ];
    if let Some(queued) = &queued {
        shares.push(("queue joins", &queued.join_cpu));
    }
    print_table(&machine, &figures, &shares);
    println!("\ninvariants of this run:");
    for v in &verdicts {
        println!("  {v}");
    }

    plot(&results, &intake)?;
    let report = serde_json::json!({
        "machine": machine,
        "figures": figures,
        "redisBaseline": intake.baseline,
        "maxRate": intake.max_rate,
        "halfRate": intake.half_rate,
        "halfRateP99Ms": intake.half_rate_p99_ms,
        "halfRateSlowest": slowest_series(&intake.half_rate),
        "bareHandler": bare,
        "cheapAnswers": intake.cheap,
        "throughDatabase": through_database,
        "queue": queued,
        "plainProducer": plain,
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
