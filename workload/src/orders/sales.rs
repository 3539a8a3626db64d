//! The `sales` table: one row per FlashSale, written by the operator.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::domain::admission::{Admission, ChallengeRule};
use crate::domain::risk::RiskPolicy;
pub use crate::domain::sale::RedisLife;
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
    purchase_token_ttl_ms: Option<i64>,
    admission_prequeue_ms: Option<i64>,
    admission_rate: Option<i32>,
    challenge_difficulty: Option<i16>,
    challenge_max_difficulty: Option<i16>,
    incarnation: Option<Uuid>,
    opened_at: Option<DateTime<Utc>>,
    redis_lost_at: Option<DateTime<Utc>>,
    selling_through_database_at: Option<DateTime<Utc>>,
    drained_at: Option<DateTime<Utc>>,
    risk: Option<sqlx::types::Json<RiskPolicy>>,
}

const SALE_COLUMNS: &str = "id, namespace, name, sku, stock, start_at, end_at, purchase_limit, shards, generation, payment_timeout_ms, purchase_token_ttl_ms, admission_prequeue_ms, admission_rate, challenge_difficulty, challenge_max_difficulty, incarnation, opened_at, redis_lost_at, selling_through_database_at, drained_at, risk";

/// A sale's row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSale {
    /// Its configuration.
    pub config: SaleConfig,
    /// Units in live orders.
    pub sold: i64,
    /// Its Redis state, as far as the database knows.
    pub life: RedisLife,
    /// Its order topic is drained for good (completed or being deleted).
    pub drained: bool,
}

impl SaleRow {
    fn life(&self) -> RedisLife {
        RedisLife {
            incarnation: self.incarnation,
            opened: self.opened_at.is_some(),
            lost_since: self.redis_lost_at,
            through_database_since: self.selling_through_database_at,
        }
    }

    /// Rows come from the operator, which validated names; a row that no
    /// longer parses is skipped with a warning rather than failing a listing.
    fn into_config(self) -> Option<SaleConfig> {
        let admission = self.admission();
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
            purchase_token_ttl: self
                .purchase_token_ttl_ms
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            admission,
            risk: self.risk.map(|policy| policy.0),
        })
    }

    /// A queue when its columns are set (all or none: the table checks it).
    fn admission(&self) -> Option<Admission> {
        let byte = |v: i16| u8::try_from(v).unwrap_or(u8::MAX);
        Some(Admission {
            prequeue: Duration::from_millis(
                u64::try_from(self.admission_prequeue_ms?).unwrap_or(0),
            ),
            rate_per_sec: u32::try_from(self.admission_rate?).unwrap_or(1),
            challenge: match (self.challenge_difficulty, self.challenge_max_difficulty) {
                (Some(difficulty), Some(max)) => Some(ChallengeRule {
                    difficulty: byte(difficulty),
                    max_difficulty: byte(max),
                }),
                _ => None,
            },
        })
    }
}

/// The current (not deleted) sales of a namespace.
pub async fn list_current<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
) -> sqlx::Result<Vec<SaleConfig>> {
    Ok(list(db, namespace, "deleted_at IS NULL")
        .await?
        .into_iter()
        .map(|(config, _)| config)
        .collect())
}

/// The current sales of a namespace with what the database knows of their
/// Redis state (the API's catalog).
pub async fn list_current_with_life<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
) -> sqlx::Result<Vec<(SaleConfig, RedisLife)>> {
    list(db, namespace, "deleted_at IS NULL").await
}

/// The current sales of a namespace that still need consumers: not deleted
/// and not drained for good ([`mark_drained`]).
pub async fn list_consuming<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
) -> sqlx::Result<Vec<SaleConfig>> {
    Ok(
        list(db, namespace, "deleted_at IS NULL AND drained_at IS NULL")
            .await?
            .into_iter()
            .map(|(config, _)| config)
            .collect(),
    )
}

/// The sales of `namespace` whose row matches `condition` (a constant of ours).
async fn list<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
    condition: &'static str,
) -> sqlx::Result<Vec<(SaleConfig, RedisLife)>> {
    let rows: Vec<SaleRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SALE_COLUMNS} FROM sales WHERE namespace = $1 AND {condition} ORDER BY name"
    )))
    .bind(namespace)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let life = row.life();
            Some((row.into_config()?, life))
        })
        .collect())
}

/// The windows of every sale the namespace ever had, deleted ones too:
/// an order id is minted inside one of them.
pub async fn windows<'e>(
    db: impl PgExecutor<'e>,
    namespace: &str,
) -> sqlx::Result<Vec<(DateTime<Utc>, DateTime<Utc>)>> {
    sqlx::query_as("SELECT start_at, end_at FROM sales WHERE namespace = $1")
        .bind(namespace)
        .fetch_all(db)
        .await
}

/// Records that the sale's topic is drained for good, so consumers serving a
/// whole namespace stop for it (idempotent). Returns whether this call set it.
pub async fn mark_drained<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<bool> {
    let done =
        sqlx::query("UPDATE sales SET drained_at = now() WHERE id = $1 AND drained_at IS NULL")
            .bind(id)
            .execute(db)
            .await?;
    Ok(done.rows_affected() == 1)
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

/// The sale with this id (current or deleted), the units it sold and what
/// the database knows of its Redis state.
pub async fn find_by_id<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<Option<StoredSale>> {
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
    Ok(found.and_then(|f| {
        let life = f.row.life();
        let drained = f.row.drained_at.is_some();
        Some(StoredSale {
            config: f.row.into_config()?,
            sold: i64::from(f.sold),
            life,
            drained,
        })
    }))
}

/// Records that the sale's Redis state was lost (idempotent: the first
/// notice stays): it takes no orders until the operator recovered it.
/// Returns whether this call noticed it first.
pub async fn mark_redis_lost<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE sales SET redis_lost_at = now() WHERE id = $1 AND redis_lost_at IS NULL",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Lets the sale sell through PostgreSQL alone while its Redis state is
/// lost (the loss recorded; the caller checked the topic is drained since).
/// Returns whether this call switched it.
pub async fn sell_through_database<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE sales SET selling_through_database_at = now()
         WHERE id = $1 AND redis_lost_at IS NOT NULL AND selling_through_database_at IS NULL",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Stops selling through PostgreSQL (a recovery loads Redis next, or the
/// kill switch): a purchase through the database that has not updated the
/// sale's row by now refuses (it re-checks under the row's lock). Returns
/// how long the sale sold through the database, if it did.
pub async fn stop_selling_through_database<'e>(
    db: impl PgExecutor<'e>,
    id: Uuid,
) -> sqlx::Result<Option<Duration>> {
    let secs: Option<Option<f64>> = sqlx::query_scalar(
        "WITH before AS (SELECT selling_through_database_at AS since FROM sales WHERE id = $1)
         UPDATE sales SET selling_through_database_at = NULL
         WHERE id = $1 AND selling_through_database_at IS NOT NULL
         RETURNING (SELECT extract(epoch FROM now() - since)::float8 FROM before)",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(secs.flatten().map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// Starts a recovery: the lost incarnation `lost` is replaced by a new one
/// that warm-up loads from the database (idempotent: a second call after the
/// switch leaves the new one). Returns the current incarnation.
pub async fn begin_recovery<'e>(
    db: impl PgExecutor<'e>,
    id: Uuid,
    lost: Uuid,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "UPDATE sales SET incarnation = CASE WHEN incarnation = $2 THEN $3 ELSE incarnation END,
                          opened_at = CASE WHEN incarnation = $2 THEN NULL ELSE opened_at END
         WHERE id = $1 RETURNING incarnation",
    )
    .bind(id)
    .bind(lost)
    .bind(Uuid::new_v4())
    .fetch_one(db)
    .await
}

/// Records that the sale's Redis state is being removed on purpose (cleanup,
/// deletion): from now on its absence is no loss.
pub async fn mark_closed<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE sales SET opened_at = NULL WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Records that `incarnation` is loaded, verified and open: a recovery ends.
/// Returns how long the sale was closed by a loss, if it was.
pub async fn mark_opened<'e>(
    db: impl PgExecutor<'e>,
    id: Uuid,
    incarnation: Uuid,
) -> sqlx::Result<Option<std::time::Duration>> {
    let closed: Option<Option<f64>> = sqlx::query_scalar(
        "WITH before AS (SELECT redis_lost_at FROM sales WHERE id = $1)
         UPDATE sales SET opened_at = now(), redis_lost_at = NULL
         WHERE id = $1 AND incarnation = $2
         RETURNING (SELECT extract(epoch FROM now() - redis_lost_at)::float8 FROM before)",
    )
    .bind(id)
    .bind(incarnation)
    .fetch_optional(db)
    .await?;
    Ok(closed
        .flatten()
        .map(|secs| std::time::Duration::from_secs_f64(secs.max(0.0))))
}

/// Marks the sale deleted (its resource is gone); its orders stay.
pub async fn mark_deleted<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("UPDATE sales SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Lowers (or sets) the sale's stock to `stock` as stock generation
/// `generation`, once: a shrink whose units already left Redis. Never below
/// the units sold. Returns whether the row changed.
pub async fn set_stock<'e>(
    db: impl PgExecutor<'e>,
    id: Uuid,
    stock: i64,
    generation: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE sales SET stock = $2, generation = $3, updated_at = now()
         WHERE id = $1 AND generation < $3 AND sold <= $2",
    )
    .bind(id)
    .bind(stock as i32)
    .bind(generation)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The incarnation of the sale's Redis state, chosen (and stored) on first
/// use: a warm-up records it before it loads any shard.
pub async fn incarnation<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<Uuid> {
    sqlx::query_scalar(
        "UPDATE sales SET incarnation = COALESCE(incarnation, $2) WHERE id = $1 RETURNING incarnation",
    )
    .bind(id)
    .bind(Uuid::new_v4())
    .fetch_one(db)
    .await
}

/// Creates the sale's row, or updates its configuration (idempotent). The
/// stock only changes when it stays at or above the units sold; the generation
/// is bumped when it changes. Returns the row as stored.
pub async fn upsert<'e>(db: impl PgExecutor<'e>, config: &SaleConfig) -> sqlx::Result<SaleConfig> {
    let admission = config.admission.as_ref();
    let challenge = admission.and_then(|a| a.challenge.as_ref());
    let row: SaleRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sales (id, namespace, name, sku, stock, start_at, end_at, purchase_limit, shards, payment_timeout_ms, purchase_token_ttl_ms,
                            admission_prequeue_ms, admission_rate, challenge_difficulty, challenge_max_difficulty, risk)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
         ON CONFLICT (id) DO UPDATE SET
           stock = CASE WHEN EXCLUDED.stock >= sales.sold THEN EXCLUDED.stock ELSE sales.stock END,
           generation = sales.generation
             + CASE WHEN EXCLUDED.stock >= sales.sold AND EXCLUDED.stock <> sales.stock THEN 1 ELSE 0 END,
           start_at = EXCLUDED.start_at,
           end_at = EXCLUDED.end_at,
           purchase_limit = GREATEST(sales.purchase_limit, EXCLUDED.purchase_limit),
           payment_timeout_ms = EXCLUDED.payment_timeout_ms,
           purchase_token_ttl_ms = EXCLUDED.purchase_token_ttl_ms,
           admission_prequeue_ms = EXCLUDED.admission_prequeue_ms,
           admission_rate = EXCLUDED.admission_rate,
           challenge_difficulty = EXCLUDED.challenge_difficulty,
           challenge_max_difficulty = EXCLUDED.challenge_max_difficulty,
           risk = EXCLUDED.risk,
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
    .bind(
        config
            .purchase_token_ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
    )
    .bind(
        admission.map(|a| i64::try_from(a.prequeue.as_millis()).unwrap_or(i64::MAX)),
    )
    .bind(admission.map(|a| i32::try_from(a.rate_per_sec).unwrap_or(i32::MAX)))
    .bind(challenge.map(|c| i16::from(c.difficulty)))
    .bind(challenge.map(|c| i16::from(c.max_difficulty)))
    .bind(config.risk.as_ref().map(sqlx::types::Json))
    .fetch_one(db)
    .await?;
    Ok(row
        .into_config()
        .expect("the operator writes only valid sale names"))
}
