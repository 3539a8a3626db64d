//! The `orders` table.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::domain::order::OrderStatus;

/// A persisted order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRecord {
    /// UUIDv7.
    pub id: Uuid,
    /// The sale's id.
    pub sale_id: Uuid,
    /// The sale's name.
    pub sale_name: String,
    /// The buyer.
    pub shopper: String,
    /// Units.
    pub quantity: i64,
    /// The stock shard that held the reservation.
    pub shard: u32,
    /// Where it is.
    pub status: OrderStatus,
    /// Why it failed, for FAILED orders.
    pub failure_reason: Option<String>,
    /// When the API accepted it.
    pub accepted_at: DateTime<Utc>,
    /// When it was persisted.
    pub created_at: DateTime<Utc>,
    /// Last status change.
    pub updated_at: DateTime<Utc>,
}

#[derive(FromRow)]
struct OrderRow {
    id: Uuid,
    sale_id: Uuid,
    sale_name: String,
    shopper: String,
    quantity: i32,
    shard: i32,
    status: String,
    failure_reason: Option<String>,
    accepted_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl OrderRow {
    fn into_record(self) -> OrderRecord {
        OrderRecord {
            id: self.id,
            sale_id: self.sale_id,
            sale_name: self.sale_name,
            shopper: self.shopper,
            quantity: i64::from(self.quantity),
            shard: u32::try_from(self.shard).unwrap_or_default(),
            // The CHECK constraint admits only the statuses we parse.
            status: OrderStatus::parse(&self.status).unwrap_or(OrderStatus::Failed),
            failure_reason: self.failure_reason,
            accepted_at: self.accepted_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// The order with this id, if persisted.
pub async fn find<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<Option<OrderRecord>> {
    let row: Option<OrderRow> = sqlx::query_as(
        "SELECT o.id, o.sale_id, s.name AS sale_name, o.shopper, o.quantity, o.shard, o.status,
                o.failure_reason, o.accepted_at, o.created_at, o.updated_at
         FROM orders o JOIN sales s ON s.id = o.sale_id
         WHERE o.id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(OrderRow::into_record))
}
