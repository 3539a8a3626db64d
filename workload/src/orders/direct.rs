//! A purchase decided by PostgreSQL alone, while the sale sells through the
//! database (`spec.degradation.redisDown: database`): the idempotency key,
//! the purchase token, the per-shopper limit, the conditional stock update
//! and the order row, in one transaction.

use sqlx::PgPool;
use uuid::Uuid;

use crate::orders::order::NewOrder;

/// What the database decided for one purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectDecision {
    /// The order is persisted UNPAID and its units counted.
    Accepted,
    /// The idempotency key names this earlier order of the shopper.
    Replay(Uuid),
    /// The purchase token was used by another of the shopper's orders.
    TokenUsed,
    /// The shopper would exceed the purchase limit.
    LimitExceeded,
    /// No stock left.
    SoldOut,
    /// The sale no longer sells through the database (the recovery began,
    /// or it never did): nothing was written.
    NotSelling,
}

/// Decides and, when accepted, persists `order` of the sale `sale_id`. The
/// shopper's purchases serialize on an advisory lock (so a key or a token
/// is looked up and written by one at a time); the sale's row is updated
/// last, so its lock is held only until the commit. The update re-checks
/// that the sale still sells through the database: the recovery clears
/// that under the same row lock, so no purchase lands after its snapshot.
pub async fn purchase(
    db: &PgPool,
    sale_id: Uuid,
    order: &NewOrder,
) -> sqlx::Result<DirectDecision> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2, 0))")
        .bind(sale_id)
        .bind(&order.shopper)
        .execute(&mut *tx)
        .await?;
    if let Some(earlier) = earlier(&mut tx, sale_id, order).await? {
        return Ok(earlier);
    }
    insert_unpaid(&mut tx, sale_id, order).await?;
    let within_limit = sqlx::query(
        "INSERT INTO shopper_units (sale_id, shopper, units, purchase_limit)
         SELECT id, $2, $3, purchase_limit FROM sales WHERE id = $1 AND $3 <= purchase_limit
         ON CONFLICT (sale_id, shopper) DO UPDATE
           SET units = shopper_units.units + EXCLUDED.units, purchase_limit = EXCLUDED.purchase_limit
           WHERE shopper_units.units + EXCLUDED.units <= EXCLUDED.purchase_limit",
    )
    .bind(sale_id)
    .bind(&order.shopper)
    .bind(order.quantity as i32)
    .execute(&mut *tx)
    .await?;
    if within_limit.rows_affected() == 0 {
        return Ok(DirectDecision::LimitExceeded);
    }
    let counted = sqlx::query(
        "UPDATE sales SET sold = sold + $2, updated_at = now()
         WHERE id = $1 AND sold + $2 <= stock AND selling_through_database_at IS NOT NULL",
    )
    .bind(sale_id)
    .bind(order.quantity as i32)
    .execute(&mut *tx)
    .await?;
    if counted.rows_affected() == 1 {
        tx.commit().await?;
        return Ok(DirectDecision::Accepted);
    }
    let selling: Option<bool> = sqlx::query_scalar(
        "SELECT selling_through_database_at IS NOT NULL FROM sales WHERE id = $1",
    )
    .bind(sale_id)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(if selling == Some(true) {
        DirectDecision::SoldOut
    } else {
        DirectDecision::NotSelling
    })
}

/// The shopper's earlier order under the same idempotency key (a replay),
/// or the one that used the same purchase token.
async fn earlier(
    tx: &mut sqlx::PgConnection,
    sale_id: Uuid,
    order: &NewOrder,
) -> sqlx::Result<Option<DirectDecision>> {
    let earlier: Option<(Uuid, Option<String>)> = sqlx::query_as(
        "SELECT id, idempotency_key FROM orders
         WHERE sale_id = $1 AND shopper = $2 AND (idempotency_key = $3 OR purchase_token = $4)
         ORDER BY id LIMIT 1",
    )
    .bind(sale_id)
    .bind(&order.shopper)
    .bind(order.idempotency_key.as_deref())
    .bind(order.purchase_token.map(|t| t.nonce))
    .fetch_optional(&mut *tx)
    .await?;
    Ok(earlier.map(|(id, key)| {
        if key.is_some() && key == order.idempotency_key {
            DirectDecision::Replay(id)
        } else {
            DirectDecision::TokenUsed
        }
    }))
}

/// The order's row, UNPAID.
async fn insert_unpaid(
    tx: &mut sqlx::PgConnection,
    sale_id: Uuid,
    order: &NewOrder,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO orders (id, sale_id, shopper, quantity, shard, status, accepted_at,
                             idempotency_key, purchase_token, purchase_token_until)
         VALUES ($1, $2, $3, $4, $5, 'UNPAID', $6, $7, $8, $9)",
    )
    .bind(order.id)
    .bind(sale_id)
    .bind(&order.shopper)
    .bind(order.quantity as i32)
    .bind(order.shard as i32)
    .bind(order.accepted_at)
    .bind(order.idempotency_key.as_deref())
    .bind(order.purchase_token.map(|t| t.nonce))
    .bind(
        order
            .purchase_token
            .and_then(|t| chrono::DateTime::from_timestamp_millis(t.until_ms)),
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
