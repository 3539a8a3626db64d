//! A queue of a million shoppers (issue 36), joined through the API by the
//! load tool's queue mode: the memory it takes in Redis, the rate it was
//! joined at, and admission keeping its rate with the crowd behind it.

use std::time::Duration;

use chrono::Utc;
use flashsale_workload::domain::admission::Admission;
use flashsale_workload::load::queue::{self, Admitted, Crowd, Joined};
use flashsale_workload::redis::keys::QueueKeys;
use flashsale_workload::redis::store::SaleStore;
use sqlx::PgPool;

use crate::cpu::{self, CpuShare};
use crate::intake::CLIENTS;
use crate::{procs, sale};

/// Shoppers in the crowd.
pub const CROWD: u64 = 1_000_000;
/// The sale's admission rate.
pub const RATE: u32 = 1_000;
/// Seconds of turns followed once everyone is in line.
const WINDOW_SECS: i64 = 10;
/// Joins must outpace admission by this much: a crowd that arrives in the
/// first seconds must all be in line long before its turns come.
pub const JOIN_MARGIN: f64 = 10.0;
const API_PORT: u16 = 18280;

/// What the queue cost and how it admitted.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueFigures {
    /// How the crowd joined.
    pub joined: Joined,
    /// How the cores were shared while it joined (per join).
    pub join_cpu: CpuShare,
    /// Redis's `used_memory` growth over the joins, bytes.
    pub redis_bytes: u64,
    /// `MEMORY USAGE` of the queue's key, bytes.
    pub key_bytes: u64,
    /// The shoppers whose turn came in a window after the joins.
    pub admitted: Admitted,
}

async fn used_memory(store: &SaleStore) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut store.conn())
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO memory has no used_memory"))
}

/// Makes a queued sale, joins the crowd to it through a pinned API, then
/// follows the turns of the next `WINDOW_SECS`; removes the sale after.
pub async fn run(
    db: &PgPool,
    store: &SaleStore,
    results: &std::path::Path,
) -> anyhow::Result<QueueFigures> {
    let mut config = sale::config(
        &format!("queue-{}", Utc::now().format("%H%M%S")),
        10_000_000,
        8,
        1,
    )?;
    config.start = Utc::now();
    config.admission = Some(Admission {
        prequeue: Duration::from_secs(600),
        rate_per_sec: RATE,
        challenge: None,
    });
    let config = sale::create(db, store, config).await?;
    let line = QueueKeys::new(&config.sale).line;
    let secret: Vec<u8> = format!("queue-{}", uuid::Uuid::now_v7()).into_bytes();
    let (secret_file, ticket_file) = (results.join("queue-jwt"), results.join("queue-tickets"));
    std::fs::write(&secret_file, &secret)?;
    std::fs::write(&ticket_file, uuid::Uuid::now_v7().to_string())?;
    let api = procs::start_api(
        "queue-api",
        API_PORT,
        &secret_file,
        &[
            "--purchase-token-secret-file".as_ref(),
            ticket_file.as_os_str(),
        ],
    )
    .await?;
    let url = format!("http://127.0.0.1:{API_PORT}");
    let memory_before = used_memory(store).await?;
    let crowd = Crowd {
        url: url.clone(),
        sale: config.sale.name.clone(),
        shoppers: CROWD,
        concurrency: CLIENTS,
        secret: secret.clone(),
        start: config.start,
        rate_per_sec: RATE,
        keep_below: u64::from(RATE) * 400,
        progress: true,
    };
    let before = cpu::snapshot(&[(api.pid(), "API")], "exited children");
    let mut joined = queue::join(&crowd).await?;
    let join_cpu = cpu::share(
        &before,
        &cpu::snapshot(&[(api.pid(), "API")], "exited children"),
        joined.joined as usize,
    );
    let redis_bytes = used_memory(store).await?.saturating_sub(memory_before);
    let key_bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&line)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut store.conn())
        .await?;
    eprintln!(
        "queue: {} joined in {:.0} s ({:.0}/s); Redis grew {:.0} MB; following {WINDOW_SECS} s of turns",
        joined.joined,
        joined.seconds,
        joined.per_sec,
        redis_bytes as f64 / 1e6
    );
    let from = Utc::now() + chrono::Duration::seconds(2);
    let to = from + chrono::Duration::seconds(WINDOW_SECS);
    let due: Vec<_> = std::mem::take(&mut joined.kept)
        .into_iter()
        .filter(|w| (from..to).contains(&queue::turn(config.start, RATE, w.rank)))
        .collect();
    anyhow::ensure!(
        due.len() as i64 >= i64::from(RATE) * WINDOW_SECS * 9 / 10,
        "only {} kept places fall in the window: the joins ({:.0}/s) were too slow to keep",
        due.len(),
        joined.per_sec
    );
    let admitted = queue::follow(&url, &config.sale.name, &secret, due, config.start, RATE).await?;
    api.stop().await;
    sale::remove(db, store, &config).await?;
    Ok(QueueFigures {
        joined,
        join_cpu,
        redis_bytes,
        key_bytes,
        admitted,
    })
}
