//! The `sales` table: one row per FlashSale, written by the operator.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::domain::sale::{SaleConfig, SaleRef};

#[derive(FromRow)]
struct SaleRow {
    id: Uuid,
    namespace: String,
    name: String,
    sku: String,
    stock: i32,
    start_at: DateTime<Utc>,
    end_at: DateTime<Utc>,
    purchase_limit: i32,
    shards: i32,
    generation: i64,
    payment_timeout_ms: i64,
}

const SALE_COLUMNS: &str = "id, namespace, name, sku, stock, start_at, end_at, purchase_limit, shards, generation, payment_timeout_ms";

impl SaleRow {
    /// Rows come from the operator, which validated names; a row that no
    /// longer parses is skipped with a warning rather than failing a listing.
    fn into_config(self) -> Option<SaleConfig> {
        let sale = match SaleRef::new(&self.namespace, &self.name) {
            Ok(sale) => sale,
            Err(e) => {
                tracing::warn!(id = %self.id, error = %e, "skipping a sale row with an invalid name");
                return None;
            }
        };
        Some(SaleConfig {
            id: self.id,
            sale,
            sku: self.sku,
            stock: i64::from(self.stock),
            start: self.start_at,
            end: self.end_at,
            purchase_limit: i64::from(self.purchase_limit),
            shards: u32::try_from(self.shards).unwrap_or(1),
            generation: self.generation,
            payment_timeout: Duration::from_millis(
                u64::try_from(self.payment_timeout_ms).unwrap_or(0),
            ),
        })
    }
}

/// The current (not deleted) sales of a namespace.
pub async fn list_current<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
) -> sqlx::Result<Vec<SaleConfig>> {
    let rows: Vec<SaleRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SALE_COLUMNS} FROM sales WHERE namespace = $1 AND deleted_at IS NULL ORDER BY name"
    )))
    .bind(namespace)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().filter_map(SaleRow::into_config).collect())
}

/// The current sale named `sale`, if any.
pub async fn find_current<'e>(
    db: impl PgExecutor<'e>,
    sale: &SaleRef,
) -> sqlx::Result<Option<SaleConfig>> {
    let row: Option<SaleRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SALE_COLUMNS} FROM sales WHERE namespace = $1 AND name = $2 AND deleted_at IS NULL"
    )))
    .bind(&sale.namespace)
    .bind(&sale.name)
    .fetch_optional(db)
    .await?;
    Ok(row.and_then(SaleRow::into_config))
}

/// The sale with this id (current or deleted) and the units it sold.
pub async fn find_by_id<'e>(
    db: impl PgExecutor<'e>,
    id: Uuid,
) -> sqlx::Result<Option<(SaleConfig, i64)>> {
    #[derive(FromRow)]
    struct WithSold {
        sold: i32,
        #[sqlx(flatten)]
        row: SaleRow,
    }
    let found: Option<WithSold> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT sold, {SALE_COLUMNS} FROM sales WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(found.and_then(|f| Some((f.row.into_config()?, i64::from(f.sold)))))
}

/// Marks the sale deleted (its resource is gone); its orders stay.
pub async fn mark_deleted<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE sales SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Creates the sale's row, or updates its configuration (idempotent). The
/// stock only changes when it stays at or above the units sold; the generation
/// is bumped when it changes. Returns the row as stored.
pub async fn upsert<'e>(db: impl PgExecutor<'e>, config: &SaleConfig) -> sqlx::Result<SaleConfig> {
    let row: SaleRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sales (id, namespace, name, sku, stock, start_at, end_at, purchase_limit, shards, payment_timeout_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (id) DO UPDATE SET
           stock = CASE WHEN EXCLUDED.stock >= sales.sold THEN EXCLUDED.stock ELSE sales.stock END,
           generation = sales.generation
             + CASE WHEN EXCLUDED.stock >= sales.sold AND EXCLUDED.stock <> sales.stock THEN 1 ELSE 0 END,
           start_at = EXCLUDED.start_at,
           end_at = EXCLUDED.end_at,
           purchase_limit = GREATEST(sales.purchase_limit, EXCLUDED.purchase_limit),
           payment_timeout_ms = EXCLUDED.payment_timeout_ms,
           updated_at = now()
         RETURNING {SALE_COLUMNS}"
    )))
    .bind(config.id)
    .bind(&config.sale.namespace)
    .bind(&config.sale.name)
    .bind(&config.sku)
    .bind(i32::try_from(config.stock).unwrap_or(i32::MAX))
    .bind(config.start)
    .bind(config.end)
    .bind(i32::try_from(config.purchase_limit).unwrap_or(i32::MAX))
    .bind(i32::try_from(config.shards).unwrap_or(i32::MAX))
    .bind(i64::try_from(config.payment_timeout.as_millis()).unwrap_or(i64::MAX))
    .fetch_one(db)
    .await?;
    Ok(row
        .into_config()
        .expect("the operator writes only valid sale names"))
}
