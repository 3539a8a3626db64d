//! Purchases through PostgreSQL alone (issue 37, `spec.degradation.redisDown:
//! database`): a sale of the largest stock the CRD allows there, selling
//! through the database as it does while Redis is down, the same closed-loop
//! storm as the Redis path's, and the run's own checks in the database.

use std::path::Path;
use std::time::Duration;

use flashsale_workload::load::{self, StormReport};
use flashsale_workload::orders::sales;
use flashsale_workload::redis::store::SaleStore;
use sqlx::PgPool;

use crate::{intake, procs, sale};

/// `DATABASE_MODE_MAX_STOCK` of the CRD.
pub const STOCK: i64 = 10_000;
const API_PORT: u16 = 18380;

/// What the storm through the database did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThroughDatabase {
    /// The storm.
    pub report: StormReport,
    /// Units the database counted sold: every 202's, no more.
    pub sold: i64,
}

/// The storm for `duration` on a fresh sale selling through the database;
/// fails unless the database holds exactly the orders answered 202 (I3, I4),
/// within the stock (I1) and the limit (I2).
pub async fn run(
    db: &PgPool,
    store: &SaleStore,
    secret_file: &Path,
    secret: &[u8],
    duration: Duration,
) -> anyhow::Result<ThroughDatabase> {
    let suffix = chrono::Utc::now().format("%H%M%S");
    let config = sale::live(db, store, &format!("through-db-{suffix}"), STOCK, 8, 1).await?;
    // As the operator does once Redis is down and the topic drained.
    sales::mark_redis_lost(db, config.id).await?;
    sales::sell_through_database(db, config.id).await?;
    let api = procs::start_api("api-through-db", API_PORT, secret_file, &[]).await?;
    let url = format!("http://127.0.0.1:{API_PORT}");
    let (report, told) = load::storm(intake::storm(
        &url,
        &config.sale.name,
        secret,
        None,
        duration,
    ))
    .await?;
    api.stop().await;
    let (sold, orders, over_limit): (i32, i64, i64) = sqlx::query_as(
        "SELECT s.sold,
                (SELECT count(*) FROM orders o WHERE o.sale_id = s.id),
                (SELECT count(*) FROM shopper_units u WHERE u.sale_id = s.id AND u.units > 1)
         FROM sales s WHERE s.id = $1",
    )
    .bind(config.id)
    .fetch_one(db)
    .await?;
    let ids: Vec<uuid::Uuid> = told
        .accepted
        .keys()
        .map(|id| id.parse())
        .collect::<Result<_, _>>()?;
    let persisted: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(db)
        .await?;
    let units: i64 = told.accepted.values().map(|(_, units)| units).sum();
    anyhow::ensure!(
        i64::from(sold) == units
            && orders == ids.len() as i64
            && persisted == orders
            && over_limit == 0
            && i64::from(sold) <= STOCK
            && told.in_doubt.is_empty(),
        "through the database: {} answered 202 for {units} units; the database holds {orders} orders ({persisted} of them answered), {sold} units sold, {over_limit} shoppers over the limit, {} in doubt",
        ids.len(),
        told.in_doubt.len()
    );
    sale::remove(db, store, &config).await?;
    Ok(ThroughDatabase {
        report,
        sold: i64::from(sold),
    })
}
