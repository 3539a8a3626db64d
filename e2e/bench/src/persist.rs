//! Persisted orders per second by a consumer, against `COPY` of the same rows
//! into the same database.

use std::time::{Duration, Instant};

use flashsale_testkit as stack;
use flashsale_workload::domain::sale::SaleConfig;
use sqlx::{Connection, PgPool};

use crate::procs;

/// The persistence measurements.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Persist {
    /// Orders persisted in the measured stretch.
    pub orders: i64,
    /// By the consumer, per second.
    pub consumer_per_sec: f64,
    /// By COPY, per second.
    pub copy_per_sec: f64,
}

/// Units the database counts as sold: one row read, so polling it every
/// 20 ms does not slow the database down the way `count(*)` over the orders
/// would (the storms buy one unit per order, so units are orders).
async fn persisted(db: &PgPool, sale: uuid::Uuid) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT sold::bigint FROM sales WHERE id = $1")
            .bind(sale)
            .fetch_one(db)
            .await?,
    )
}

/// Starts a consumer process for the sale (pinned to core 1, its output in
/// the `log` file) and measures how fast `count` grows from its first
/// movement to `expected`: (counted in that stretch, per second).
pub async fn consumer_rate<F, Fut>(
    config: &SaleConfig,
    log: &str,
    expected: i64,
    count: F,
) -> anyhow::Result<(i64, f64)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<i64>>,
{
    let consumer = procs::start_consumer(log, config)?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut first_at, mut first_count) = (None, 0);
    let mut counted;
    loop {
        counted = count().await?;
        if first_at.is_none() && counted > 0 {
            first_at = Some(Instant::now());
            first_count = counted;
        }
        if counted >= expected {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the {log} counted {counted} of {expected} in 10 min"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = first_at.map_or(Duration::ZERO, |t| t.elapsed());
    consumer.stop().await;
    let measured = counted - first_count;
    Ok((measured, measured as f64 / took.as_secs_f64().max(1e-3)))
}

/// Starts a consumer for the sale (whose orders wait in Kafka), measures from
/// its first persisted order to the last, then COPYs the same rows.
pub async fn run(db: &PgPool, config: &SaleConfig, expected: i64) -> anyhow::Result<Persist> {
    let (measured, consumer_per_sec) =
        consumer_rate(config, "consumer", expected, || persisted(db, config.id)).await?;

    // The same rows, by COPY, into a scratch copy of the table.
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(',', id, sale_id, shopper, quantity, shard, status, accepted_at, created_at, updated_at, version)
         FROM orders WHERE sale_id = $1",
    )
    .bind(config.id)
    .fetch_all(db)
    .await?;
    let data = rows.join("\n") + "\n";
    let mut conn = sqlx::PgConnection::connect(&stack::database_url()).await?;
    sqlx::query("DROP TABLE IF EXISTS bench_copy")
        .execute(&mut conn)
        .await?;
    sqlx::query("CREATE TABLE bench_copy (LIKE orders INCLUDING ALL)")
        .execute(&mut conn)
        .await?;
    let started = Instant::now();
    let mut copy = conn
        .copy_in_raw(
            "COPY bench_copy (id, sale_id, shopper, quantity, shard, status, accepted_at, created_at, updated_at, version) FROM STDIN (FORMAT csv)",
        )
        .await?;
    copy.send(data.as_bytes()).await?;
    let copied = copy.finish().await?;
    let copy_per_sec = copied as f64 / started.elapsed().as_secs_f64().max(1e-6);
    sqlx::query("DROP TABLE bench_copy")
        .execute(&mut conn)
        .await?;
    Ok(Persist {
        orders: measured,
        consumer_per_sec,
        copy_per_sec,
    })
}
