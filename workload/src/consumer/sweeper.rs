//! The payment-timeout sweeper: each sale's consumers cancel its orders left
//! unpaid past the timeout and give their units back to Redis. Safe with many
//! replicas (the database skips rows another sweeper holds).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::janitor::return_to_redis;
use crate::orders::order::sweep_unpaid;
use crate::redis::store::SaleStore;

/// Orders cancelled per database round trip.
const SWEEP_BATCH: i64 = 500;

/// Sweeps the sale every `every` until `stop` is cancelled.
pub async fn sweep_forever(
    db: PgPool,
    store: SaleStore,
    sale_id: Uuid,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        match sweep_unpaid(&db, sale_id, SWEEP_BATCH).await {
            Ok(returns) => {
                if !returns.is_empty() {
                    tracing::info!(
                        cancelled = returns.len(),
                        "payment timeout: orders cancelled"
                    );
                }
                return_to_redis(&db, &store, &returns).await;
                if returns.len() as i64 == SWEEP_BATCH {
                    continue;
                }
            }
            Err(e) => tracing::warn!(error = %e, "payment sweep failed; retrying"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}
