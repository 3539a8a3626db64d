//! `make soak` (issue 38): an hour-long sale. Open-loop purchases at a
//! quarter of the maximum purchase rate, with payments on top and a
//! payment timeout that expires the unpaid; a restock halfway, a pause at three quarters.
//! Every 30 s: each part's memory and open files, the data's size, CPU per
//! purchase and the p99; then plots, and each figure judged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use flashsale_testkit as stack;
use flashsale_workload::domain::invariants;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::load::{self, StormConfig, StormReport};
use flashsale_workload::orders;
use flashsale_workload::redis::store::SaleStore;
use hdrhistogram::Histogram;
use serde::Serialize;
use sqlx::PgPool;

use crate::cpu::{self, CpuShare};
use crate::footprint::{self, Footprint, Storage};
use crate::{intake, procs, sale, svg};

/// One sample's stretch of traffic.
const SEGMENT: Duration = Duration::from_secs(30);
/// Units at the start, and added by the restock: more than the soak sells at
/// the rates this machine reaches, so the mix stays the same all hour.
const STOCK: i64 = 10_000_000;
/// Shares of accepted orders paid (a signed callback) and cancelled; the
/// rest expire after [`PAYMENT_TIMEOUT`] (a sweep returns their units in
/// batches). Cancels go through the API's order desk, many to a
/// transaction (before it, each took the sale's row on its own and queued
/// behind the consumer's batches: 3.6–3.9 s at 50 a second, 2026-12-07).
const PAY: f64 = 0.3;
const CANCEL: f64 = 0.1;
const PAYMENT_TIMEOUT: Duration = Duration::from_secs(60);
const SHOPPERS: usize = 100_000;
/// The purchase rate as a share of the maximum of purchases alone. The
/// follow-ups about double a purchase's cost (a payment and its callback
/// are each a database transaction on the API's path): at half, the first
/// 30 s accepted 1,454 of 1,890 a second at a p99 of 273 ms, a saturated
/// stack rather than one at half its capacity.
const RATE_SHARE: f64 = 0.25;
const API_PORT: u16 = 18480;

/// What happened at one sample.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Minutes since the soak's traffic began, at the sample.
    pub minute: f64,
    /// What the merchant did before this stretch, if anything.
    pub event: Option<&'static str>,
    /// Purchase attempts per second in the stretch.
    pub requests_per_sec: f64,
    /// Accepted per second.
    pub accepted_per_sec: f64,
    /// The stretch's p99 of accepted purchases, ms (none while paused).
    pub p99_ms: Option<f64>,
    /// Answers other than 202, by outcome.
    pub refused: BTreeMap<String, u64>,
    /// Each part's footprint.
    pub parts: BTreeMap<String, Footprint>,
    /// The data's size.
    pub storage: Storage,
    /// Orders accepted since the soak began.
    pub accepted_total: usize,
    /// How the cores were shared in the stretch.
    pub cpu: CpuShare,
}

/// One figure of the summary: its level in the first, middle and last
/// window and whether it met its goal.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Judged {
    /// The figure.
    pub figure: String,
    /// Its level in the first window.
    pub first: f64,
    /// Before the restock.
    pub middle: f64,
    /// At the end.
    pub last: f64,
    /// The goal, in words.
    pub goal: &'static str,
    /// Met.
    pub met: bool,
}

/// The soak's report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Soak {
    /// The closed-loop maximum of purchases alone the rate is a share of,
    /// purchases/s.
    pub max_per_sec: f64,
    /// The open-loop rate, purchase attempts/s.
    pub rate: u64,
    /// Minutes in each judged window.
    pub window_minutes: u64,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// The figures judged.
    pub judged: Vec<Judged>,
    /// I1–I6 over every order of the soak (empty until they were read).
    pub invariants: Vec<invariants::Verdict>,
}

/// Runs the soak for `minutes` and writes its report and plots to
/// `results`; returns whether every goal and invariant held.
pub async fn run(
    db: &PgPool,
    store: &SaleStore,
    results: &Path,
    minutes: u64,
) -> anyhow::Result<bool> {
    let mut config = sale::config(
        &format!("soak-{}", chrono::Utc::now().format("%H%M%S")),
        STOCK,
        8,
        1_000_000,
    )?;
    config.payment_timeout = PAYMENT_TIMEOUT;
    let mut config = sale::create(db, store, config).await?;
    let jwt = secret_file(results, "jwt-secret")?;
    let payment = secret_file(results, "payment-secret")?;
    let api = procs::start_api(
        "soak-api",
        API_PORT,
        &jwt.0,
        &["--payment-secret-file".as_ref(), payment.0.as_os_str()],
    )
    .await?;
    let consumer = procs::start_consumer("soak-consumer", &config)?;
    let url = format!("http://127.0.0.1:{API_PORT}");
    let sale_name = config.sale.name.clone();
    let storm = |rate, duration| StormConfig {
        shoppers: SHOPPERS,
        pay: PAY,
        cancel: CANCEL,
        payment_secret: Some(payment.1.clone()),
        progress: false,
        ..intake::storm(&url, &sale_name, &jwt.1, rate, duration)
    };

    // The maximum as make bench measures it: purchases alone, closed loop.
    // With the follow-ups a closed loop measures its shoppers' waits (a
    // payment waits for its order to be persisted), not the stack.
    let purchases_only = |duration| StormConfig {
        pay: 0.0,
        cancel: 0.0,
        ..storm(None, duration)
    };
    eprintln!("soak: warming up, then the closed-loop maximum of purchases alone, 10 s");
    let (_, mut told) = load::storm(purchases_only(Duration::from_secs(5))).await?;
    let (max, max_told) = load::storm(purchases_only(Duration::from_secs(10))).await?;
    intake::merge_told(&mut told, max_told);
    let rate = (max.requests_per_sec * RATE_SHARE).max(1.0) as u64;
    let segments = (minutes * 60 / SEGMENT.as_secs()).max(4) as usize;
    eprintln!(
        "soak: {rate} purchases/s ({RATE_SHARE} of {:.0}/s) for {minutes} min; a sample every {SEGMENT:?}",
        max.requests_per_sec
    );

    let parts = footprint::stack_parts(store, api.pid(), consumer.pid()).await?;
    let named = [(api.pid(), "API"), (consumer.pid(), "consumer")];
    let started = Instant::now();
    let mut samples = Vec::with_capacity(segments);
    let mut latencies = Vec::with_capacity(segments);
    for segment in 0..segments {
        let event = merchant_acts(db, store, &mut config, segment, segments).await?;
        let before = cpu::snapshot(&named, "exited children");
        let (report, segment_told) = load::storm(storm(Some(rate), SEGMENT)).await?;
        let cpu = cpu::share(
            &before,
            &cpu::snapshot(&named, "exited children"),
            report.accepted_orders,
        );
        intake::merge_told(&mut told, segment_told);
        latencies.push(histogram(&report)?);
        let sample = Sample {
            minute: started.elapsed().as_secs_f64() / 60.0,
            event,
            requests_per_sec: report.requests_per_sec,
            accepted_per_sec: report.accepted_per_sec,
            p99_ms: report.outcomes.get("202").map(|l| l.p99_ms),
            refused: report
                .outcomes
                .iter()
                .filter(|(outcome, _)| *outcome != "202")
                .map(|(outcome, l)| (outcome.clone(), l.count))
                .collect(),
            parts: footprint::sample(&parts),
            storage: footprint::storage(db, store, config.id).await?,
            accepted_total: told.accepted.len(),
            cpu,
        };
        eprintln!("soak: {}", line(&sample));
        samples.push(sample);
    }

    let window = (minutes / 6).max(1);
    let mut soak = Soak {
        max_per_sec: max.requests_per_sec,
        rate,
        window_minutes: window,
        judged: judge(&samples, &latencies, window as usize * 2),
        samples,
        invariants: Vec::new(),
    };
    // Reported before the evidence is gathered: reading an hour's
    // reservations back can fail (a 40-minute soak's timed out), and the
    // samples must not go with it.
    print_judged(results, &soak);
    save(results, &soak)?;
    plot(results, &soak.samples)?;
    eprintln!("soak: traffic over; waiting for every order to settle, then I1-I6");
    let evidence = load::gather(
        db,
        store,
        &stack::kafka_bootstrap(),
        &config,
        &told,
        Duration::from_secs(900),
    )
    .await?;
    soak.invariants = invariants::evaluate(&evidence).verdicts;
    api.stop().await;
    consumer.stop().await;
    sale::remove(db, store, &config).await?;
    println!("\ninvariants of this run:");
    for v in &soak.invariants {
        println!("  {v}");
    }
    save(results, &soak)?;
    Ok(invariants::all_hold(&soak.invariants) && soak.judged.iter().all(|j| j.met))
}

/// A random secret (two UUIDs) in `results/name`: (its file, itself).
fn secret_file(results: &Path, name: &str) -> anyhow::Result<(std::path::PathBuf, Vec<u8>)> {
    let path = results.join(name);
    let secret = format!("soak-{}-{}", uuid::Uuid::new_v4(), uuid::Uuid::new_v4()).into_bytes();
    std::fs::write(&path, &secret)?;
    Ok((path, secret))
}

/// The merchant's moves, as the operator makes them: halfway the stock is
/// raised (the row first, then Redis); at three quarters the kill switch
/// pauses the sale for one stretch.
async fn merchant_acts(
    db: &PgPool,
    store: &SaleStore,
    config: &mut SaleConfig,
    segment: usize,
    segments: usize,
) -> anyhow::Result<Option<&'static str>> {
    let pause_at = segments * 3 / 4;
    if segment == segments / 2 {
        config.stock += STOCK;
        *config = orders::sales::upsert(db, config).await?;
        store
            .restock(&config.sale, config.stock, config.generation)
            .await?;
        return Ok(Some("restock"));
    }
    if segment == pause_at || segment == pause_at + 1 {
        let paused = segment == pause_at;
        store
            .set_paused(&config.sale, config.shards, paused)
            .await?;
        return Ok(Some(if paused { "pause" } else { "resume" }));
    }
    Ok(None)
}

/// The accepted purchases' latencies of one stretch, µs.
fn histogram(report: &StormReport) -> anyhow::Result<Histogram<u64>> {
    let mut h = Histogram::new_with_bounds(1, 120_000_000, 3)?;
    for &(_, ms) in &report.timeline {
        h.saturating_record((ms * 1000.0) as u64);
    }
    Ok(h)
}

/// One sample for the log.
fn line(s: &Sample) -> String {
    let parts: Vec<String> = s
        .parts
        .iter()
        .map(|(name, f)| format!("{name} {:.0} MiB {} fds", f.memory_mib, f.fds))
        .collect();
    format!(
        "{:5.1} min{}: {:.0} accepted/s, p99 {}; {}; orders {:.0}+{:.0} MiB ({} dead), Kafka log {:.0} MiB, Redis {:.0} MiB",
        s.minute,
        s.event.map_or(String::new(), |e| format!(" [{e}]")),
        s.accepted_per_sec,
        s.p99_ms.map_or("-".into(), |p| format!("{p:.1} ms")),
        parts.join(", "),
        s.storage.orders_table_mib,
        s.storage.orders_indexes_mib,
        s.storage.orders_dead,
        s.storage.kafka_log_mib,
        s.storage.redis_used_mib,
    )
}

/// The mean of `value` over samples `range`.
fn mean(samples: &[Sample], range: std::ops::Range<usize>, value: impl Fn(&Sample) -> f64) -> f64 {
    let n = range.len().max(1) as f64;
    samples[range].iter().map(value).sum::<f64>() / n
}

/// Judges the soak: each part's memory and open files level off (the last
/// window within 10 % of the one before the restock, plus a little slack
/// for small numbers); the orders' bytes per row, and the Kafka log's bytes
/// per order, stay flat; autovacuum keeps the dead rows under a quarter of
/// the live ones; the last window's p99 within 20 % of the first's.
pub fn judge(samples: &[Sample], latencies: &[Histogram<u64>], window: usize) -> Vec<Judged> {
    let n = samples.len();
    let window = window.clamp(1, (n / 3).max(1));
    let first = 0..window;
    let middle = (n / 2).saturating_sub(window)..n / 2;
    let last = n - window..n;
    let mut judged = Vec::new();
    let levels = |figure: String, value: &dyn Fn(&Sample) -> f64, slack: f64| {
        let (a, b, c) = (
            mean(samples, first.clone(), value),
            mean(samples, middle.clone(), value),
            mean(samples, last.clone(), value),
        );
        Judged {
            figure,
            first: a,
            middle: b,
            last: c,
            goal: "levels off: last ≤ middle × 1.1 (+ slack)",
            met: c <= b * 1.1 + slack,
        }
    };
    let names: Vec<String> = samples
        .first()
        .map(|s| s.parts.keys().cloned().collect())
        .unwrap_or_default();
    for name in &names {
        let memory = |s: &Sample| s.parts.get(name).map_or(0.0, |f| f.memory_mib);
        judged.push(levels(format!("{name} memory, MiB"), &memory, 4.0));
        let fds = |s: &Sample| s.parts.get(name).map_or(0.0, |f| f.fds as f64);
        judged.push(levels(format!("{name} open files"), &fds, 16.0));
    }
    let per_row = |s: &Sample| {
        (s.storage.orders_table_mib + s.storage.orders_indexes_mib) * 1024.0 * 1024.0
            / s.storage.orders_live.max(1) as f64
    };
    let rows = Judged {
        goal: "flat: last ≤ middle × 1.2",
        met: mean(samples, last.clone(), per_row) <= mean(samples, middle.clone(), per_row) * 1.2,
        ..levels(
            "orders: bytes per live row (heap + indexes)".into(),
            &per_row,
            0.0,
        )
    };
    judged.push(rows);
    let dead_share =
        |s: &Sample| s.storage.orders_dead as f64 / s.storage.orders_live.max(1) as f64;
    let dead = levels("orders: dead rows per live row".into(), &dead_share, 0.0);
    judged.push(Judged {
        goal: "autovacuum keeps up: ≤ 0.25",
        met: dead.last <= 0.25,
        ..dead
    });
    let base = &samples[0];
    let log_per_order = |s: &Sample| {
        (s.storage.kafka_log_mib - base.storage.kafka_log_mib) * 1024.0 * 1024.0
            / (s.accepted_total - base.accepted_total).max(1) as f64
    };
    let log = levels(
        "Kafka log: bytes per accepted order".into(),
        &log_per_order,
        0.0,
    );
    judged.push(Judged {
        goal: "flat: last ≤ middle × 1.2",
        met: log.last <= log.middle * 1.2,
        ..log
    });
    // An order keeps its reservation while it holds stock: Redis grows with
    // the units held (bounded by the stock), judged per unit like the log.
    let redis_per_unit = |s: &Sample| {
        (s.storage.redis_used_mib - base.storage.redis_used_mib) * 1024.0 * 1024.0
            / (s.storage.units_held - base.storage.units_held).max(1) as f64
    };
    let redis = levels(
        "Redis used_memory: bytes per unit held".into(),
        &redis_per_unit,
        0.0,
    );
    judged.push(Judged {
        goal: "flat: last ≤ middle × 1.2",
        met: redis.last <= redis.middle * 1.2,
        ..redis
    });
    let p99 = |range: std::ops::Range<usize>| {
        let mut merged = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("bounds");
        for h in &latencies[range] {
            merged.add(h).expect("same bounds");
        }
        merged.value_at_quantile(0.99) as f64 / 1000.0
    };
    let (a, b, c) = (p99(first), p99(middle), p99(last));
    judged.push(Judged {
        figure: "p99 of accepted purchases, ms".into(),
        first: a,
        middle: b,
        last: c,
        goal: "last ≤ first × 1.2",
        // A window without an accepted purchase proves nothing.
        met: a > 0.0 && c > 0.0 && c <= a * 1.2,
    });
    judged
}

/// Writes the report as `soak.json`.
fn save(results: &Path, soak: &Soak) -> anyhow::Result<()> {
    std::fs::write(results.join("soak.json"), serde_json::to_vec_pretty(soak)?)?;
    Ok(())
}

/// Prints the judged figures and where the report and plots go.
fn print_judged(results: &Path, soak: &Soak) {
    println!(
        "\nFlashSale soak — {} min at {}/s ({RATE_SHARE} of {:.0}/s), windows of {} min",
        soak.samples.last().map_or(0.0, |s| s.minute).round(),
        soak.rate,
        soak.max_per_sec,
        soak.window_minutes
    );
    println!(
        "{:<48} {:>12} {:>12} {:>12}  {:<44}",
        "figure", "first", "middle", "last", "goal"
    );
    for j in &soak.judged {
        println!(
            "{:<48} {:>12.2} {:>12.2} {:>12.2}  {:<44} {}",
            j.figure,
            j.first,
            j.middle,
            j.last,
            j.goal,
            if j.met { "met" } else { "MISSED" }
        );
    }
    println!(
        "\nreport: {}/soak.json, plots: soak-memory.svg, soak-files.svg, soak-storage.svg, soak-latency.svg",
        results.display()
    );
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One series of a chart: its legend and its value in a sample (none: no
/// point there).
type Line<'a> = (String, Box<dyn Fn(&Sample) -> Option<f64> + 'a>);

/// One chart of several series over the soak's minutes.
fn chart(
    results: &Path,
    file: &str,
    title: &str,
    y_label: &str,
    samples: &[Sample],
    lines: &[Line<'_>],
) -> anyhow::Result<()> {
    let points: Vec<Vec<(f64, f64)>> = lines
        .iter()
        .map(|(_, value)| {
            samples
                .iter()
                .filter_map(|s| value(s).map(|v| (s.minute, v)))
                .collect()
        })
        .collect();
    let drawn: Vec<svg::Series<'_>> = lines
        .iter()
        .zip(&points)
        .zip(COLORS.iter().cycle())
        .map(|(((name, _), points), color)| svg::Series {
            name,
            points,
            color,
        })
        .collect();
    std::fs::write(
        results.join(file),
        svg::line_chart(title, "minutes", y_label, &drawn, false),
    )?;
    Ok(())
}

fn plot(results: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    let names: Vec<String> = samples
        .first()
        .map(|s| s.parts.keys().cloned().collect())
        .unwrap_or_default();
    let per_part = |pick: fn(&Footprint) -> f64| -> Vec<Line<'_>> {
        names
            .iter()
            .map(|name| -> Line<'_> {
                (
                    name.clone(),
                    Box::new(move |s: &Sample| s.parts.get(name).map(pick)),
                )
            })
            .collect()
    };
    chart(
        results,
        "soak-memory.svg",
        "Memory of each part (RSS; PostgreSQL: PSS of its processes)",
        "MiB",
        samples,
        &per_part(|f| f.memory_mib),
    )?;
    chart(
        results,
        "soak-files.svg",
        "Open file descriptors of each part",
        "descriptors",
        samples,
        &per_part(|f| f.fds as f64),
    )?;
    let storage = |name: &str, value: fn(&Storage) -> f64| -> Line<'static> {
        (
            name.to_string(),
            Box::new(move |s: &Sample| Some(value(&s.storage))),
        )
    };
    chart(
        results,
        "soak-storage.svg",
        "The data: orders table and indexes, Kafka log, Redis",
        "MiB",
        samples,
        &[
            storage("orders heap", |s| s.orders_table_mib),
            storage("orders indexes", |s| s.orders_indexes_mib),
            storage("Kafka log", |s| s.kafka_log_mib),
            storage("Redis used_memory", |s| s.redis_used_mib),
            storage("dead order rows (thousands)", |s| {
                s.orders_dead as f64 / 1000.0
            }),
        ],
    )?;
    chart(
        results,
        "soak-latency.svg",
        "p99 of accepted purchases in each 30 s, and accepted per second (thousands)",
        "ms / thousands a second",
        samples,
        &[
            ("p99 ms".to_string(), Box::new(|s: &Sample| s.p99_ms)),
            (
                "accepted/s (thousands)".to_string(),
                Box::new(|s: &Sample| Some(s.accepted_per_sec / 1000.0)),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample at `minute` with the API's memory `api_mib` and the
    /// consumer's `consumer_mib`, 1,000 orders more than the last.
    fn sample(minute: usize, api_mib: f64, consumer_mib: f64) -> Sample {
        let part = |memory_mib| Footprint {
            memory_mib,
            fds: 20,
            processes: 1,
        };
        Sample {
            minute: minute as f64 / 2.0,
            event: None,
            requests_per_sec: 100.0,
            accepted_per_sec: 100.0,
            p99_ms: Some(5.0),
            refused: BTreeMap::new(),
            parts: BTreeMap::from([
                ("API".to_string(), part(api_mib)),
                ("consumer".to_string(), part(consumer_mib)),
            ]),
            storage: Storage {
                orders_table_mib: minute as f64,
                orders_indexes_mib: minute as f64 / 2.0,
                orders_live: 10_000 * (minute as i64 + 1),
                orders_dead: 1_000,
                kafka_log_mib: minute as f64 * 3.0,
                redis_used_mib: 50.0 + minute as f64,
                units_held: 10_000 * minute as i64,
                ..Storage::default()
            },
            accepted_total: 1_000 * minute,
            cpu: CpuShare {
                busy_per_core: vec![],
                stolen_per_core: vec![],
                groups: vec![],
                total_us_per_purchase: 0.0,
            },
        }
    }

    fn latencies(ms: &[u64]) -> Vec<Histogram<u64>> {
        ms.iter()
            .map(|&ms| {
                let mut h = Histogram::new_with_bounds(1, 120_000_000, 3).unwrap();
                h.record(ms * 1000).unwrap();
                h
            })
            .collect()
    }

    #[test]
    fn a_part_that_keeps_growing_misses_and_one_that_levels_off_meets() {
        // The API levels off after its first minutes; the consumer grows
        // 10 MiB a sample to the end.
        let samples: Vec<Sample> = (0..12)
            .map(|i| sample(i, 100.0 + 10.0 * i.min(3) as f64, 100.0 + 10.0 * i as f64))
            .collect();
        let judged = judge(&samples, &latencies(&[5; 12]), 2);
        let met = |figure: &str| {
            judged
                .iter()
                .find(|j| j.figure == figure)
                .unwrap_or_else(|| panic!("{figure} in {judged:?}"))
                .met
        };
        assert!(met("API memory, MiB"));
        assert!(!met("consumer memory, MiB"));
        assert!(met("API open files"));
        assert!(met("Redis used_memory: bytes per unit held"));
        assert!(met("orders: bytes per live row (heap + indexes)"));
        assert!(met("orders: dead rows per live row"));
        assert!(met("Kafka log: bytes per accepted order"));
        assert!(met("p99 of accepted purchases, ms"));
    }

    #[test]
    fn redis_growing_while_the_units_held_do_not_misses() {
        // Orders that ended keep costing Redis: memory grows, units held stay.
        let samples: Vec<Sample> = (0..12)
            .map(|i| {
                let mut s = sample(i, 100.0, 100.0);
                s.storage.units_held = 10_000 * i.min(4) as i64;
                s
            })
            .collect();
        let judged = judge(&samples, &latencies(&[5; 12]), 2);
        let redis = judged
            .iter()
            .find(|j| j.figure == "Redis used_memory: bytes per unit held")
            .unwrap();
        assert!(!redis.met, "{redis:?}");
    }

    #[test]
    fn a_tail_a_fifth_slower_at_the_end_misses() {
        let samples: Vec<Sample> = (0..12).map(|i| sample(i, 100.0, 100.0)).collect();
        let judged = judge(
            &samples,
            &latencies(&[5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7]),
            2,
        );
        let p99 = judged.last().unwrap();
        assert_eq!(p99.figure, "p99 of accepted purchases, ms");
        assert!(!p99.met, "{p99:?}");
        assert!((p99.first - 5.0).abs() < 0.1 && (p99.last - 7.0).abs() < 0.1);
    }
}
