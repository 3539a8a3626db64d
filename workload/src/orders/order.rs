//! The `orders` table.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::{FromRow, PgExecutor, Row};
use uuid::Uuid;

use crate::domain::order::OrderStatus;
use crate::domain::purchase_token::UsedToken;

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
    /// What the sale's risk scorer decided of it (`PASS`, `CANCEL`,
    /// `REVIEW`), once scored.
    pub risk_verdict: Option<String>,
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
    risk_verdict: Option<String>,
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
            risk_verdict: self.risk_verdict,
        }
    }
}

/// Whether every order of `ids` is persisted.
pub async fn all_persisted(db: &sqlx::PgPool, ids: &[Uuid]) -> sqlx::Result<bool> {
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE id = ANY($1)")
        .bind(ids)
        .fetch_one(db)
        .await?;
    Ok(found == ids.len() as i64)
}

/// The order with this id, if persisted.
pub async fn find<'e>(db: impl PgExecutor<'e>, id: Uuid) -> sqlx::Result<Option<OrderRecord>> {
    let row: Option<OrderRow> = sqlx::query_as(
        "SELECT o.id, o.sale_id, s.name AS sale_name, o.shopper, o.quantity, o.shard, o.status,
                o.failure_reason, o.accepted_at, o.created_at, o.updated_at, r.verdict AS risk_verdict
         FROM orders o JOIN sales s ON s.id = o.sale_id
         LEFT JOIN order_risk r ON r.order_id = o.id
         WHERE o.id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(OrderRow::into_record))
}

/// An accepted order, claimed in Redis, on its way into the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    /// UUIDv7 from the API.
    pub id: Uuid,
    /// The buyer.
    pub shopper: String,
    /// Units.
    pub quantity: i64,
    /// The stock shard holding the reservation.
    pub shard: u32,
    /// When the API accepted it.
    pub accepted_at: DateTime<Utc>,
    /// The shopper's Idempotency-Key, if any.
    pub idempotency_key: Option<String>,
    /// The purchase token it used, if any.
    pub purchase_token: Option<UsedToken>,
}

/// Why the database, the final arbiter, refused a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `sold + n <= stock` failed: more units than the sale has.
    StockExhausted,
    /// `units <= purchase_limit` failed for a shopper.
    LimitExceeded,
}

impl Refusal {
    /// What the shopper reads on the order the database refused (FAILED).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::StockExhausted => "the sale has no stock left in the database",
            Refusal::LimitExceeded => "the shopper's purchase limit is reached in the database",
        }
    }
}

/// Orders of a sale that the database refused for want of stock: units a
/// shopper was told were accepted with no unit behind them.
pub async fn refused_for_stock(db: &sqlx::PgPool, sale_id: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM orders WHERE sale_id = $1 AND status = 'FAILED' AND failure_reason = $2",
    )
    .bind(sale_id)
    .bind(Refusal::StockExhausted.reason())
    .fetch_all(db)
    .await
}

/// A batch that could not be persisted.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The arbiter refused it: roll back and find the offending orders.
    #[error("the database refused the batch: {0:?}")]
    Refused(Refusal),
    /// The database failed: retry later.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// The orders a batch inserted (ids already present are skipped: redelivery
/// changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persisted {
    /// Newly inserted order ids.
    pub inserted: Vec<Uuid>,
    /// Their units.
    pub units: i64,
}

/// Persists one sale's batch inside the caller's transaction: inserts the new
/// orders as UNPAID, adds their units to `sold` only if that stays within
/// `stock`, and adds each shopper's units within the limit. On a refusal the
/// caller must roll back.
pub async fn persist_batch(
    tx: &mut sqlx::PgConnection,
    sale_id: Uuid,
    orders: &[NewOrder],
) -> Result<Persisted, PersistError> {
    let inserted = insert_unpaid(tx, sale_id, orders).await?;
    if inserted.is_empty() {
        return Ok(Persisted::default());
    }
    let units: i64 = inserted.iter().map(|o| o.quantity).sum();
    let arbiter = sqlx::query(
        "UPDATE sales SET sold = sold + $2, updated_at = now() WHERE id = $1 AND sold + $2 <= stock",
    )
    .bind(sale_id)
    .bind(units as i32)
    .execute(&mut *tx)
    .await?;
    if arbiter.rows_affected() == 0 {
        return Err(PersistError::Refused(Refusal::StockExhausted));
    }
    let mut per_shopper: std::collections::BTreeMap<&str, i32> = std::collections::BTreeMap::new();
    for order in &inserted {
        *per_shopper.entry(order.shopper.as_str()).or_default() += order.quantity as i32;
    }
    let (names, amounts): (Vec<&str>, Vec<i32>) = per_shopper.into_iter().unzip();
    let limit = sqlx::query(
        "INSERT INTO shopper_units (sale_id, shopper, units, purchase_limit)
         SELECT $1, t.shopper, t.units, s.purchase_limit
         FROM UNNEST($2::text[], $3::int[]) AS t(shopper, units), sales s WHERE s.id = $1
         ON CONFLICT (sale_id, shopper) DO UPDATE
           SET units = shopper_units.units + EXCLUDED.units, purchase_limit = EXCLUDED.purchase_limit",
    )
    .bind(sale_id)
    .bind(&names)
    .bind(&amounts)
    .execute(&mut *tx)
    .await;
    match limit {
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("units_within_limit") => {
            Err(PersistError::Refused(Refusal::LimitExceeded))
        }
        Err(e) => Err(e.into()),
        Ok(_) => Ok(Persisted {
            inserted: inserted.into_iter().map(|o| o.id).collect(),
            units,
        }),
    }
}

/// Inserts orders as UNPAID, given the order of its columns as UNNEST's
/// parameters $2.. ($1 the sale).
macro_rules! insert_unpaid_orders {
    () => {
        "INSERT INTO orders (id, sale_id, shopper, quantity, shard, status, accepted_at, idempotency_key,
                             purchase_token, purchase_token_until)
         SELECT t.id, $1, t.shopper, t.quantity, t.shard, 'UNPAID', t.accepted_at, t.idempotency_key,
                t.token, t.token_until
         FROM UNNEST($2::uuid[], $3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::text[],
                     $8::uuid[], $9::timestamptz[])
              AS t(id, shopper, quantity, shard, accepted_at, idempotency_key, token, token_until)"
    };
}

/// Inserts the orders as UNPAID and answers those it inserted. A batch is
/// new but for a redelivery after a consumer's crash: it goes in by a plain
/// INSERT, and only a batch that meets an order already present goes in
/// again skipping those (ON CONFLICT costs every row a speculative insertion,
/// a third of the statement's time).
async fn insert_unpaid<'a>(
    tx: &mut sqlx::PgConnection,
    sale_id: Uuid,
    orders: &'a [NewOrder],
) -> sqlx::Result<Vec<&'a NewOrder>> {
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let shoppers: Vec<&str> = orders.iter().map(|o| o.shopper.as_str()).collect();
    let quantities: Vec<i32> = orders.iter().map(|o| o.quantity as i32).collect();
    let shards: Vec<i32> = orders.iter().map(|o| o.shard as i32).collect();
    let accepted: Vec<DateTime<Utc>> = orders.iter().map(|o| o.accepted_at).collect();
    let keys: Vec<Option<&str>> = orders
        .iter()
        .map(|o| o.idempotency_key.as_deref())
        .collect();
    let tokens: Vec<Option<Uuid>> = orders
        .iter()
        .map(|o| o.purchase_token.map(|t| t.nonce))
        .collect();
    let tokens_until: Vec<Option<DateTime<Utc>>> = orders
        .iter()
        .map(|o| {
            o.purchase_token
                .and_then(|t| DateTime::from_timestamp_millis(t.until_ms))
        })
        .collect();
    let bind = |sql| {
        sqlx::query(sql)
            .bind(sale_id)
            .bind(&ids)
            .bind(&shoppers)
            .bind(&quantities)
            .bind(&shards)
            .bind(&accepted)
            .bind(&keys)
            .bind(&tokens)
            .bind(&tokens_until)
    };
    sqlx::query("SAVEPOINT new_orders")
        .execute(&mut *tx)
        .await?;
    match bind(insert_unpaid_orders!()).execute(&mut *tx).await {
        Ok(_) => {
            sqlx::query("RELEASE SAVEPOINT new_orders")
                .execute(&mut *tx)
                .await?;
            return Ok(orders.iter().collect());
        }
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("orders_pkey") => {
            sqlx::query("ROLLBACK TO SAVEPOINT new_orders")
                .execute(&mut *tx)
                .await?;
        }
        Err(e) => return Err(e),
    }
    let mut inserted: std::collections::HashSet<Uuid> = bind(concat!(
        insert_unpaid_orders!(),
        " ON CONFLICT (id) DO NOTHING RETURNING id"
    ))
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect();
    // An id twice in the batch was inserted once.
    Ok(orders.iter().filter(|o| inserted.remove(&o.id)).collect())
}

/// Records an order the pipeline gave up on as FAILED (it holds no stock).
/// An order already present is left alone.
pub async fn insert_failed<'e>(
    db: impl PgExecutor<'e>,
    sale_id: Uuid,
    order: &NewOrder,
    reason: &str,
) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "INSERT INTO orders (id, sale_id, shopper, quantity, shard, status, failure_reason, accepted_at, idempotency_key)
         VALUES ($1, $2, $3, $4, $5, 'FAILED', $6, $7, $8)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.id)
    .bind(sale_id)
    .bind(&order.shopper)
    .bind(order.quantity as i32)
    .bind(order.shard as i32)
    .bind(reason)
    .bind(order.accepted_at)
    .bind(&order.idempotency_key)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Units that left the database's count and must go back to Redis: release
/// the claimed reservation `order_id` in `shard` of sale `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct StockReturn {
    /// The order.
    pub order_id: Uuid,
    /// Its sale's namespace.
    pub namespace: String,
    /// Its sale's name.
    pub name: String,
    /// The stock shard of its reservation.
    pub shard: i32,
}

/// What an order event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
    /// The status changed; `returned` is set when its units left the sale's count.
    Changed {
        /// The new status.
        status: OrderStatus,
        /// Units to give back to Redis.
        returned: Option<StockReturn>,
    },
    /// Nothing to do: the order is already there (idempotent retry).
    AlreadyDone(OrderStatus),
    /// Not allowed from this status.
    Illegal(OrderStatus),
    /// No persisted order of this shopper under that id.
    NotFound,
}

/// Applies `event` to the shopper's order: [`apply_events`] with one event.
pub async fn apply_event(
    db: &sqlx::PgPool,
    id: Uuid,
    shopper: &str,
    event: crate::domain::order::OrderEvent,
) -> sqlx::Result<EventOutcome> {
    let mut outcomes = apply_events(db, &[(id, shopper, event)]).await?;
    Ok(outcomes.remove(0))
}

/// Applies `events` (order, shopper, event) in one transaction, in turn:
/// the orders are locked (in id order, so two batches cannot deadlock), the
/// pure state machine decides, each changed order is updated once, and the
/// units of orders that stop holding stock go back to their sale and
/// shoppers in one update per sale. A sale's row, which every consumer batch
/// also updates, is touched once per batch rather than once per event.
/// Answers one outcome per event, as if each had its own transaction.
pub async fn apply_events(
    db: &sqlx::PgPool,
    events: &[(Uuid, &str, crate::domain::order::OrderEvent)],
) -> sqlx::Result<Vec<EventOutcome>> {
    use crate::domain::order::{BatchAnswer, apply_in_turn};
    let mut tx = db.begin().await?;
    let ids: Vec<Uuid> = events.iter().map(|(id, ..)| *id).collect();
    let rows: Vec<LockedOrder> = sqlx::query_as(
        "SELECT o.id, o.shopper, o.status, o.quantity, o.sale_id, o.shard, s.namespace, s.name
         FROM orders o JOIN sales s ON s.id = o.sale_id
         WHERE o.id = ANY($1) ORDER BY o.id FOR UPDATE OF o",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let rows: std::collections::HashMap<Uuid, LockedOrder> =
        rows.into_iter().map(|row| (row.id, row)).collect();
    let found = rows
        .iter()
        .map(|(id, row)| {
            let status = OrderStatus::parse(&row.status).unwrap_or(OrderStatus::Failed);
            (*id, (row.shopper.clone(), status))
        })
        .collect();
    let (answers, changed) = apply_in_turn(&found, events);
    update_statuses(&mut tx, &changed).await?;
    let mut units_back: std::collections::BTreeMap<Uuid, Vec<(String, i32)>> = Default::default();
    let mut returns = Vec::new();
    let outcomes = answers
        .into_iter()
        .zip(events)
        .map(|(answer, (id, ..))| match answer {
            BatchAnswer::Changed { from, to } => {
                let row = &rows[id];
                let returned = (from.holds_stock() && !to.holds_stock()).then(|| {
                    units_back
                        .entry(row.sale_id)
                        .or_default()
                        .push((row.shopper.clone(), row.quantity));
                    let returned = StockReturn {
                        order_id: *id,
                        namespace: row.namespace.clone(),
                        name: row.name.clone(),
                        shard: row.shard,
                    };
                    returns.push(returned.clone());
                    returned
                });
                EventOutcome::Changed {
                    status: to,
                    returned,
                }
            }
            BatchAnswer::AlreadyDone(status) => EventOutcome::AlreadyDone(status),
            BatchAnswer::Illegal(status) => EventOutcome::Illegal(status),
            BatchAnswer::NotFound => EventOutcome::NotFound,
        })
        .collect();
    // In sale id order, as the locks of two batches must be taken.
    for (sale_id, units) in &units_back {
        give_back(&mut tx, *sale_id, units).await?;
    }
    record_stock_returns(&mut tx, &returns).await?;
    tx.commit().await?;
    Ok(outcomes)
}

/// An order as [`apply_events`] locks it.
#[derive(FromRow)]
struct LockedOrder {
    id: Uuid,
    shopper: String,
    status: String,
    quantity: i32,
    sale_id: Uuid,
    shard: i32,
    namespace: String,
    name: String,
}

/// Moves each order of `changed` from its first status to its last.
async fn update_statuses(
    tx: &mut sqlx::PgConnection,
    changed: &std::collections::BTreeMap<Uuid, (OrderStatus, OrderStatus)>,
) -> sqlx::Result<()> {
    if changed.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = changed.keys().copied().collect();
    let (from, to): (Vec<&str>, Vec<&str>) = changed
        .values()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .unzip();
    sqlx::query(
        "UPDATE orders o SET status = t.to_status, version = o.version + 1, updated_at = now()
         FROM UNNEST($1::uuid[], $2::text[], $3::text[]) AS t(id, from_status, to_status)
         WHERE o.id = t.id AND o.status = t.from_status",
    )
    .bind(&ids)
    .bind(&from)
    .bind(&to)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Takes units out of a sale's `sold` and its shoppers' counts.
async fn give_back(
    tx: &mut sqlx::PgConnection,
    sale_id: Uuid,
    units: &[(String, i32)],
) -> sqlx::Result<()> {
    let total: i32 = units.iter().map(|(_, q)| q).sum();
    sqlx::query("UPDATE sales SET sold = sold - $2, updated_at = now() WHERE id = $1")
        .bind(sale_id)
        .bind(total)
        .execute(&mut *tx)
        .await?;
    let (shoppers, amounts): (Vec<&str>, Vec<i32>) =
        units.iter().map(|(s, q)| (s.as_str(), *q)).unzip();
    sqlx::query(
        "UPDATE shopper_units u SET units = u.units - t.units
         FROM (SELECT shopper, sum(units)::int AS units FROM UNNEST($2::text[], $3::int[]) AS x(shopper, units) GROUP BY shopper) t
         WHERE u.sale_id = $1 AND u.shopper = t.shopper",
    )
    .bind(sale_id)
    .bind(&shoppers)
    .bind(&amounts)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Cancels up to `limit` orders of the sale left UNPAID past its payment
/// timeout (counted from when they were persisted, so a shopper always has
/// the whole timeout to pay). Rows locked by another sweeper are skipped, so
/// many replicas can sweep at once; the partial index on unpaid orders keeps
/// it cheap. Returns the units to give back to Redis.
pub async fn sweep_unpaid(
    db: &sqlx::PgPool,
    sale_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<StockReturn>> {
    use crate::domain::order::{OrderEvent, Transition};
    let Transition::To(cancelled) = OrderStatus::Unpaid.on(OrderEvent::PaymentTimeout) else {
        unreachable!("an unpaid order can always time out");
    };
    let mut tx = db.begin().await?;
    let due: Vec<(Uuid, Uuid, String, i32, i32, String, String)> = sqlx::query_as(
        "WITH due AS (
           SELECT o.id FROM orders o
           WHERE o.sale_id = $1 AND o.status = 'UNPAID'
             AND o.created_at < now() - (SELECT payment_timeout_ms FROM sales WHERE id = $1) * interval '1 millisecond'
           ORDER BY o.created_at LIMIT $2
           FOR UPDATE OF o SKIP LOCKED)
         UPDATE orders o SET status = $3, version = o.version + 1, updated_at = now(),
                failure_reason = 'payment timeout'
         FROM due, sales s WHERE o.id = due.id AND s.id = o.sale_id
         RETURNING o.id, o.sale_id, o.shopper, o.quantity, o.shard, s.namespace, s.name",
    )
    .bind(sale_id)
    .bind(limit)
    .bind(cancelled.as_str())
    .fetch_all(&mut *tx)
    .await?;
    let mut by_sale: std::collections::HashMap<Uuid, Vec<(String, i32)>> = Default::default();
    for (_, sale_id, shopper, quantity, ..) in &due {
        by_sale
            .entry(*sale_id)
            .or_default()
            .push((shopper.clone(), *quantity));
    }
    for (sale_id, units) in &by_sale {
        give_back(&mut tx, *sale_id, units).await?;
    }
    let returns: Vec<StockReturn> = due
        .into_iter()
        .map(|(order_id, _, _, _, shard, namespace, name)| StockReturn {
            order_id,
            namespace,
            name,
            shard,
        })
        .collect();
    record_stock_returns(&mut tx, &returns).await?;
    tx.commit().await?;
    Ok(returns)
}

/// Records, in the transaction that took the units out of the database's
/// count, that they must go back to Redis (the `stock_returns` outbox).
async fn record_stock_returns(
    tx: &mut sqlx::PgConnection,
    returns: &[StockReturn],
) -> sqlx::Result<()> {
    if returns.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = returns.iter().map(|r| r.order_id).collect();
    let namespaces: Vec<&str> = returns.iter().map(|r| r.namespace.as_str()).collect();
    let names: Vec<&str> = returns.iter().map(|r| r.name.as_str()).collect();
    let shards: Vec<i32> = returns.iter().map(|r| r.shard).collect();
    sqlx::query(
        "INSERT INTO stock_returns (order_id, namespace, name, shard)
         SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int[])
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&namespaces)
    .bind(&names)
    .bind(&shards)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Stock returns of `namespace` recorded more than `older_than` ago and not
/// yet handed to Redis (at most 500, oldest first).
pub async fn pending_stock_returns(
    db: &sqlx::PgPool,
    namespace: &str,
    older_than: std::time::Duration,
) -> sqlx::Result<Vec<StockReturn>> {
    sqlx::query_as(
        "SELECT order_id, namespace, name, shard FROM stock_returns
         WHERE namespace = $1 AND created_at < now() - $2 * interval '1 millisecond'
         ORDER BY created_at LIMIT 500",
    )
    .bind(namespace)
    .bind(older_than.as_millis() as i64)
    .fetch_all(db)
    .await
}

/// Stock returns of `sale` recorded and not yet taken by Redis.
pub async fn stock_returns_pending(
    db: &sqlx::PgPool,
    sale: &crate::domain::sale::SaleRef,
) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM stock_returns WHERE namespace = $1 AND name = $2")
        .bind(&sale.namespace)
        .bind(&sale.name)
        .fetch_one(db)
        .await
}

/// Forgets stock returns Redis took.
pub async fn forget_stock_returns(db: &sqlx::PgPool, order_ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM stock_returns WHERE order_id = ANY($1)")
        .bind(order_ids)
        .execute(db)
        .await?;
    Ok(())
}

/// The orders of a sale that is over, in units, as PostgreSQL holds them:
/// the merchant's summary in the FlashSale's status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleSummary {
    /// Orders persisted, whatever became of them.
    pub orders: i64,
    /// Units in live orders: paid or awaiting payment.
    pub sold: i64,
    /// Units paid.
    pub paid: i64,
    /// Units still awaiting payment.
    pub unpaid: i64,
    /// Units the shoppers cancelled (refunds included), back in stock.
    pub cancelled: i64,
    /// Units whose payment timed out, back in stock.
    pub timed_out: i64,
    /// Units the pipeline could not persist, back in stock.
    pub failed: i64,
    /// The most units one shopper holds (at most the purchase limit: I2).
    pub most_by_one_shopper: i64,
    /// Units accepted per minute of the window, for minutes that sold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_minute: Vec<MinuteSales>,
}

/// Units accepted in one minute.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MinuteSales {
    /// The minute's first instant.
    pub minute: DateTime<Utc>,
    /// Units accepted in it.
    pub units: i64,
}

/// The summary of `sale_id`'s orders (a few aggregate queries).
pub async fn summary(db: &sqlx::PgPool, sale_id: Uuid) -> sqlx::Result<SaleSummary> {
    let by_status: Vec<(String, bool, i64, i64)> = sqlx::query_as(
        "SELECT status, coalesce(failure_reason = 'payment timeout', false),
                count(*), sum(quantity)::bigint
         FROM orders WHERE sale_id = $1 GROUP BY 1, 2",
    )
    .bind(sale_id)
    .fetch_all(db)
    .await?;
    let mut summary = SaleSummary::default();
    for (status, timed_out, orders, units) in by_status {
        summary.orders += orders;
        let bucket = match (OrderStatus::parse(&status), timed_out) {
            (Some(OrderStatus::Paid), _) => &mut summary.paid,
            (Some(OrderStatus::Unpaid), _) => &mut summary.unpaid,
            (Some(OrderStatus::Cancelled), true) => &mut summary.timed_out,
            (Some(OrderStatus::Cancelled | OrderStatus::Refunded), _) => &mut summary.cancelled,
            _ => &mut summary.failed,
        };
        *bucket += units;
    }
    summary.most_by_one_shopper = sqlx::query_scalar(
        "SELECT coalesce(max(units), 0)::bigint FROM shopper_units WHERE sale_id = $1",
    )
    .bind(sale_id)
    .fetch_one(db)
    .await?;
    summary.sold = summary.paid + summary.unpaid;
    let per_minute: Vec<(DateTime<Utc>, i64)> = sqlx::query_as(
        "SELECT date_trunc('minute', accepted_at), sum(quantity)::bigint
         FROM orders WHERE sale_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(sale_id)
    .fetch_all(db)
    .await?;
    summary.per_minute = per_minute
        .into_iter()
        .map(|(minute, units)| MinuteSales { minute, units })
        .collect();
    Ok(summary)
}
