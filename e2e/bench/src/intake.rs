//! Accepted purchases per second through the API (HTTP, JWT, Kafka ack)
//! against `redis-benchmark` EVALSHA of the same script, and latency at half
//! the maximum rate against the Redis round trip alone.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use flashsale_testkit as stack;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::load::{self, Identity, StormConfig, StormReport, Told};
use flashsale_workload::redis::keys::ShardKeys;
use flashsale_workload::redis::scripts::SCRIPTS;
use flashsale_workload::redis::store::SaleStore;
use sqlx::PgPool;

use crate::cpu::{self, CpuShare};
use crate::funnel::{self, CheapAnswers};
use crate::procs;
use crate::sale;

/// What redis-benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RedisBaseline {
    /// EVALSHA per second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

/// The intake measurements.
pub struct Intake {
    /// The sale the storms bought from.
    pub config: SaleConfig,
    /// redis-benchmark's figures.
    pub baseline: RedisBaseline,
    /// The closed-loop storm at the maximum rate.
    pub max_rate: StormReport,
    /// The first open-loop storm at half that rate (for the plots).
    pub half_rate: StormReport,
    /// The p99 of accepted purchases in each open-loop storm at half the
    /// rate, ms: the tail varies from storm to storm, so it is judged on
    /// several.
    pub half_rate_p99_ms: Vec<f64>,
    /// The API's peak resident memory, MiB.
    pub api_rss_peak_mib: f64,
    /// What the shoppers were told in both storms.
    pub told: Told,
    /// How the cores were shared while redis-benchmark ran.
    pub baseline_cpu: CpuShare,
    /// How the cores were shared during the closed-loop storm.
    pub max_rate_cpu: CpuShare,
    /// The HS256 secret the shoppers' tokens were signed with.
    pub secret: Vec<u8>,
    /// Statuses and sold-out purchases answered per second.
    pub cheap: CheapAnswers,
    /// The sale sold out from the start (stock 0).
    pub sold_out_sale: SaleConfig,
}

/// Clients, as in the redis-benchmark baseline.
pub const CLIENTS: usize = 50;
const API_PORT: u16 = 18180;
/// The unmeasured storm before the measured ones.
const WARM_UP: Duration = Duration::from_secs(5);

fn redis_benchmark(keys: &ShardKeys, requests: u64) -> anyhow::Result<RedisBaseline> {
    let url: url_parts::Parts = url_parts::parse(&stack::redis_url());
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            &url.host,
            "-p",
            &url.port,
            "-c",
            &CLIENTS.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args([
            "-r",
            "100000000",
            "--csv",
            "EVALSHA",
            SCRIPTS.purchase.get_hash(),
            "6",
        ])
        .args([
            &keys.meta,
            &keys.stock,
            &keys.units,
            &keys.reservations,
            &keys.idempotency,
            &keys.pending,
        ])
        .args(["shopper:__rand_int__", "1", "order:__rand_int__", ""])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text
        .lines()
        .find(|l| l.starts_with("\"EVALSHA"))
        .ok_or_else(|| anyhow::anyhow!("redis-benchmark printed no EVALSHA row: {text}"))?;
    let cols: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(0.0))
        .collect();
    Ok(RedisBaseline {
        rps: cols[0],
        p50_ms: cols[3],
        p99_ms: cols[5],
    })
}

/// Host and port of a redis:// URL.
mod url_parts {
    pub struct Parts {
        pub host: String,
        pub port: String,
    }
    pub fn parse(url: &str) -> Parts {
        let rest = url.trim_start_matches("redis://");
        let (host, port) = rest.split_once(':').unwrap_or((rest, "6379"));
        Parts {
            host: host.to_string(),
            port: port.trim_end_matches('/').to_string(),
        }
    }
}

/// The benchmark's storm: 50 shoppers at a time (closed loop) or `rate`
/// purchases a second (open loop), one unit each, JWT identities.
pub fn storm(
    url: &str,
    sale: &str,
    secret: &[u8],
    rate: Option<u64>,
    duration: Duration,
) -> StormConfig {
    StormConfig {
        url: url.to_string(),
        sale: sale.to_string(),
        shoppers: 200_000,
        requests: u64::MAX,
        duration,
        concurrency: CLIENTS,
        rate,
        think: Duration::ZERO,
        max_quantity: 1,
        pay: 0.0,
        payment_secret: None,
        cancel: 0.0,
        identity: Identity::Jwt(secret.to_vec()),
        progress: true,
    }
}

/// The open-loop storms at half the maximum rate.
#[derive(Debug, Clone, Copy)]
pub struct HalfRate {
    /// How many.
    pub runs: u32,
    /// Seconds each.
    pub seconds: u64,
}

/// Adds what the shoppers of another storm were told.
pub fn merge_told(told: &mut Told, other: Told) {
    told.accepted.extend(other.accepted);
    told.unanswered.extend(other.unanswered);
    told.in_doubt.extend(other.in_doubt);
    told.sold_out_smallest =
        flashsale_workload::load::evidence::fewer(told.sold_out_smallest, other.sold_out_smallest);
}

/// Runs the intake measurements; the API process serves the `bench` namespace.
pub async fn run(
    db: &PgPool,
    store: &SaleStore,
    results: &Path,
    seconds: u64,
    half_rate: HalfRate,
    cheap_for: Duration,
) -> anyhow::Result<Intake> {
    let suffix = chrono::Utc::now().format("%H%M%S");
    let baseline_sale = sale::live(
        db,
        store,
        &format!("baseline-{suffix}"),
        10_000_000,
        8,
        1_000_000,
    )
    .await?;
    let config = sale::live(db, store, &format!("intake-{suffix}"), 10_000_000, 8, 1_000).await?;
    let sold_out_sale = sale::live(db, store, &format!("sold-out-{suffix}"), 0, 8, 1).await?;
    SCRIPTS
        .purchase
        .prepare_invoke()
        .load_async(&mut store.conn())
        .await?;
    eprintln!("intake: redis-benchmark EVALSHA of purchase.lua, {CLIENTS} clients");
    let before = cpu::snapshot(&[], "redis-benchmark");
    let baseline = redis_benchmark(&ShardKeys::new(&baseline_sale.sale, 0), 300_000)?;
    let baseline_cpu = cpu::share(&before, &cpu::snapshot(&[], "redis-benchmark"), 300_000);
    // Gone before the API starts: the baseline's 300,000 reservations have
    // no order behind them, and the API's janitor would spend the rest of
    // the run releasing them (1,500/s, on the API's core and Redis's).
    sale::remove(db, store, &baseline_sale).await?;

    let secret_file = results.join("jwt-secret");
    let secret: Vec<u8> = format!("bench-{}", uuid::Uuid::now_v7()).into_bytes();
    std::fs::write(&secret_file, &secret)?;
    let api = procs::start_api("api", API_PORT, &secret_file, &[]).await?;
    let url = format!("http://127.0.0.1:{API_PORT}");

    // Unmeasured: connections, the JIT of Kafka's JVM and the allocators
    // settle before the clock starts. Its orders count in the invariants.
    eprintln!("intake: warming up, {WARM_UP:?}");
    let (_, mut told) = load::storm(storm(&url, &config.sale.name, &secret, None, WARM_UP)).await?;
    eprintln!("intake: closed loop, {CLIENTS} shoppers at a time, {seconds} s");
    let before = cpu::snapshot(&[(api.pid(), "API")], "exited children");
    let (max_rate, max_told) = load::storm(storm(
        &url,
        &config.sale.name,
        &secret,
        None,
        Duration::from_secs(seconds),
    ))
    .await?;
    let max_rate_cpu = cpu::share(
        &before,
        &cpu::snapshot(&[(api.pid(), "API")], "exited children"),
        max_rate.accepted_orders,
    );
    anyhow::ensure!(half_rate.runs >= 1, "at least one storm at half the rate");
    let half = (max_rate.accepted_per_sec / 2.0).max(1.0) as u64;
    let mut half_rates = Vec::new();
    for run in 1..=half_rate.runs {
        eprintln!(
            "intake: open loop at {half}/s (half the maximum), {} s, storm {run} of {}",
            half_rate.seconds, half_rate.runs
        );
        let (report, half_told) = load::storm(storm(
            &url,
            &config.sale.name,
            &secret,
            Some(half),
            Duration::from_secs(half_rate.seconds),
        ))
        .await?;
        half_rates.push(report);
        merge_told(&mut told, half_told);
    }
    merge_told(&mut told, max_told);
    let half_rate_p99_ms = half_rates
        .iter()
        .map(|r| r.outcomes.get("202").map_or(f64::NAN, |l| l.p99_ms))
        .collect();
    let half_rate = half_rates.swap_remove(0);
    let cheap = cheap_answers(&url, api.pid(), &config, &sold_out_sale, &secret, cheap_for).await?;
    let api_rss_peak_mib = api.rss_mib().1;
    // The API's own histograms (request, Redis, produce) say where a slow
    // purchase spent its time.
    if let Ok(metrics) = reqwest::get(format!("http://127.0.0.1:{}/metrics", API_PORT + 10)).await {
        std::fs::write(results.join("api-metrics.txt"), metrics.text().await?)?;
    }
    api.stop().await;
    Ok(Intake {
        config,
        baseline,
        max_rate,
        half_rate,
        half_rate_p99_ms,
        api_rss_peak_mib,
        told,
        baseline_cpu,
        max_rate_cpu,
        secret,
        cheap,
        sold_out_sale,
    })
}

/// The status of the live sale, then purchases of the sold-out one, each
/// for `duration`; every purchase must be refused SOLD_OUT.
async fn cheap_answers(
    url: &str,
    api: u32,
    live: &SaleConfig,
    sold_out: &SaleConfig,
    secret: &[u8],
    duration: Duration,
) -> anyhow::Result<CheapAnswers> {
    eprintln!("intake: the status of a live sale, {CLIENTS} readers at a time, {duration:?}");
    let status = funnel::statuses(url, &live.sale.name, api, CLIENTS, duration).await?;
    eprintln!("intake: purchases of a sold-out sale, {CLIENTS} shoppers at a time, {duration:?}");
    let (report, told) =
        load::storm(storm(url, &sold_out.sale.name, secret, None, duration)).await?;
    let refused = report.outcomes.get("409 SOLD_OUT").map_or(0, |l| l.count);
    anyhow::ensure!(
        refused == report.requests && told.accepted.is_empty(),
        "a sale of no stock answered other than SOLD_OUT: {:?}",
        report.outcomes.keys().collect::<Vec<_>>()
    );
    Ok(CheapAnswers {
        status,
        sold_out_per_sec: report.requests_per_sec,
    })
}
