//! The payment-timeout sweeper: each sale's consumers cancel its orders left
//! unpaid past the timeout and give their units back to Redis. Safe with many
//! replicas (the database skips rows another sweeper holds).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::domain::purchase::ReservationState;
use crate::domain::sale::SaleRef;
use crate::orders::order::{StockReturn, sweep_unpaid};
use crate::redis::store::SaleStore;

/// Orders cancelled per database round trip.
const SWEEP_BATCH: i64 = 500;

/// Gives the units of orders that stopped holding stock back to Redis (their
/// claimed reservation moves to released, exactly once). A failure here is
/// repaired by reconciliation, which releases reservations of cancelled orders.
pub async fn return_to_redis(store: &SaleStore, returns: &[StockReturn]) {
    for r in returns {
        let Ok(sale) = SaleRef::new(&r.namespace, &r.name) else {
            continue;
        };
        let shard = u32::try_from(r.shard).unwrap_or_default();
        if let Err(e) = store
            .release(
                &sale,
                shard,
                &r.order_id.to_string(),
                ReservationState::Claimed,
                0,
            )
            .await
        {
            tracing::warn!(order = %r.order_id, error = %e, "stock not returned to redis yet; reconciliation will");
        }
    }
}

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
                return_to_redis(&store, &returns).await;
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
