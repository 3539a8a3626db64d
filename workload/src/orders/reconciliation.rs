//! What reconciliation reads from the database, and the `reconciliation_runs`
//! table where each run's report is kept.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::order::OrderStatus;
use crate::domain::purchase_token::UsedToken;
use crate::domain::reconcile::{DbOrder, DbSnapshot};

/// The sale's stock, sold count, orders and shoppers' units, from one
/// consistent snapshot (REPEATABLE READ).
pub async fn snapshot(db: &PgPool, sale_id: Uuid) -> sqlx::Result<DbSnapshot> {
    let mut tx = db.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let (stock, sold, generation): (i32, i32, i64) =
        sqlx::query_as("SELECT stock, sold, generation FROM sales WHERE id = $1")
            .bind(sale_id)
            .fetch_one(&mut *tx)
            .await?;
    type Row = (
        Uuid,
        String,
        i32,
        String,
        i32,
        DateTime<Utc>,
        Option<String>,
        Option<Uuid>,
        Option<DateTime<Utc>>,
    );
    let orders: Vec<Row> = sqlx::query_as(
        "SELECT id, shopper, quantity, status, shard, accepted_at, idempotency_key,
                purchase_token, purchase_token_until
         FROM orders WHERE sale_id = $1",
    )
    .bind(sale_id)
    .fetch_all(&mut *tx)
    .await?;
    let units: Vec<(String, i32)> =
        sqlx::query_as("SELECT shopper, units FROM shopper_units WHERE sale_id = $1 AND units > 0")
            .bind(sale_id)
            .fetch_all(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(DbSnapshot {
        stock: i64::from(stock),
        generation,
        sold: i64::from(sold),
        orders: orders
            .into_iter()
            .map(
                |(
                    id,
                    shopper,
                    quantity,
                    status,
                    shard,
                    accepted_at,
                    idempotency_key,
                    token,
                    until,
                )| {
                    (
                        id.to_string(),
                        DbOrder {
                            shopper,
                            quantity: i64::from(quantity),
                            status: OrderStatus::parse(&status).unwrap_or(OrderStatus::Failed),
                            shard: u32::try_from(shard).unwrap_or_default(),
                            accepted_ms: accepted_at.timestamp_millis(),
                            idempotency_key,
                            purchase_token: token.zip(until).map(|(nonce, until)| UsedToken {
                                nonce,
                                until_ms: until.timestamp_millis(),
                            }),
                        },
                    )
                },
            )
            .collect(),
        shopper_units: units.into_iter().map(|(s, u)| (s, i64::from(u))).collect(),
    })
}

/// The outcome of one reconciliation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// Differences found.
    pub drift_found: i64,
    /// Differences repaired.
    pub drift_repaired: i64,
}

/// Keeps a run's report.
pub async fn record_run(
    db: &PgPool,
    sale_id: Uuid,
    started_at: DateTime<Utc>,
    drift_found: i64,
    drift_repaired: i64,
    report: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO reconciliation_runs (sale_id, started_at, drift_found, drift_repaired, report)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(sale_id)
    .bind(started_at)
    .bind(drift_found as i32)
    .bind(drift_repaired as i32)
    .bind(report)
    .execute(db)
    .await?;
    Ok(())
}

/// The sale's latest run, if any.
pub async fn latest_run(db: &PgPool, sale_id: Uuid) -> sqlx::Result<Option<RunSummary>> {
    let row: Option<(DateTime<Utc>, i32, i32)> = sqlx::query_as(
        "SELECT finished_at, drift_found, drift_repaired FROM reconciliation_runs
         WHERE sale_id = $1 ORDER BY finished_at DESC, id DESC LIMIT 1",
    )
    .bind(sale_id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|(finished_at, found, repaired)| RunSummary {
        finished_at,
        drift_found: i64::from(found),
        drift_repaired: i64::from(repaired),
    }))
}
