//! The `order_risk` table: what the risk scorer saw of each order and what
//! it decided, and the cancel it applies.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use super::order::{EventOutcome, StockReturn, apply_event};
use crate::domain::order::{OrderEvent, OrderStatus};
use crate::domain::risk::{Hit, OrderFacts, Score, Verdict};

/// An order as the scorer first reads it from the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The order.
    pub order_id: Uuid,
    /// Its sale.
    pub sale_id: Uuid,
    /// The buyer.
    pub shopper: String,
    /// The client's network, if the API said.
    pub client_network: Option<String>,
    /// When the API accepted it.
    pub accepted_at: DateTime<Utc>,
    /// When its purchase token was issued.
    pub token_issued_at: Option<DateTime<Utc>>,
}

/// Records orders seen (idempotent: a redelivered message changes nothing).
pub async fn record_seen(db: &PgPool, seen: &[Seen]) -> sqlx::Result<()> {
    if seen.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&Seen) -> Option<String>| seen.iter().map(f).collect::<Vec<_>>();
    let ids: Vec<Uuid> = seen.iter().map(|s| s.order_id).collect();
    let sales: Vec<Uuid> = seen.iter().map(|s| s.sale_id).collect();
    let shoppers = column(|s| Some(s.shopper.clone()));
    let networks = column(|s| s.client_network.clone());
    let accepted: Vec<DateTime<Utc>> = seen.iter().map(|s| s.accepted_at).collect();
    let issued: Vec<Option<DateTime<Utc>>> = seen.iter().map(|s| s.token_issued_at).collect();
    sqlx::query(
        "INSERT INTO order_risk (order_id, sale_id, shopper, client_network, accepted_at, token_issued_at)
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[])
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&sales)
    .bind(&shoppers)
    .bind(&networks)
    .bind(&accepted)
    .bind(&issued)
    .execute(db)
    .await?;
    Ok(())
}

/// Where a seen order stands for the scorer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Not persisted yet: wait.
    Pending,
    /// Scored already (a redelivery): its verdict.
    Scored {
        /// The buyer.
        shopper: String,
        /// `PASS`, `CANCEL` or `REVIEW`.
        verdict: String,
    },
    /// Persisted at `payable_since` with these facts.
    Ready {
        /// The buyer.
        shopper: String,
        /// Its status now.
        status: OrderStatus,
        /// When it was persisted (payable from then).
        payable_since: DateTime<Utc>,
        /// What the rules read.
        facts: OrderFacts,
    },
}

#[derive(FromRow)]
struct StandingRow {
    order_id: Uuid,
    shopper: String,
    verdict: Option<String>,
    status: Option<String>,
    created_at: Option<DateTime<Utc>>,
    to_payment_ms: Option<f64>,
    token_to_purchase_ms: Option<f64>,
    shoppers_in_network: i64,
    other_orders: i64,
    other_cancelled: i64,
}

/// The standing of each of `order_ids` (all seen), in one query.
pub async fn standings(db: &PgPool, order_ids: &[Uuid]) -> sqlx::Result<Vec<(Uuid, Standing)>> {
    let rows: Vec<StandingRow> = sqlx::query_as(
        "WITH batch AS (SELECT * FROM order_risk WHERE order_id = ANY($1)),
         -- Each network of the batch counted once (a crowded /24 holds
         -- thousands of the sale's orders; counting it per order is quadratic).
         networks AS (
           SELECT n.sale_id, n.client_network, count(DISTINCT n.shopper) AS shoppers
           FROM order_risk n
           WHERE (n.sale_id, n.client_network) IN (SELECT sale_id, client_network FROM batch)
           GROUP BY n.sale_id, n.client_network
         )
         SELECT r.order_id, r.shopper, r.verdict, o.status, o.created_at,
                EXTRACT(EPOCH FROM (p.started_at - o.created_at))::float8 * 1000 AS to_payment_ms,
                EXTRACT(EPOCH FROM (r.accepted_at - r.token_issued_at))::float8 * 1000 AS token_to_purchase_ms,
                COALESCE(w.shoppers, 0) AS shoppers_in_network,
                h.other_orders, h.other_cancelled
         FROM batch r
         LEFT JOIN networks w ON w.sale_id = r.sale_id AND w.client_network = r.client_network
         LEFT JOIN orders o ON o.id = r.order_id
         LEFT JOIN LATERAL (SELECT min(started_at) AS started_at FROM payments WHERE order_id = r.order_id) p ON true
         LEFT JOIN LATERAL (
           SELECT count(*) AS other_orders,
                  count(*) FILTER (WHERE x.status IN ('CANCELLED', 'REFUNDED')) AS other_cancelled
           FROM orders x
           WHERE x.shopper = r.shopper AND x.id <> r.order_id AND x.status <> 'FAILED'
             AND NOT EXISTS (SELECT 1 FROM order_risk y WHERE y.order_id = x.id AND y.verdict = 'CANCEL')
         ) h ON true",
    )
    .bind(order_ids)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(StandingRow::standing).collect())
}

impl StandingRow {
    fn standing(self) -> (Uuid, Standing) {
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        let standing = match (self.verdict, self.status, self.created_at) {
            (Some(verdict), _, _) => Standing::Scored {
                shopper: self.shopper,
                verdict,
            },
            (None, Some(status), Some(created_at)) => Standing::Ready {
                shopper: self.shopper,
                status: OrderStatus::parse(&status).unwrap_or(OrderStatus::Failed),
                payable_since: created_at,
                facts: OrderFacts {
                    to_payment_ms: self.to_payment_ms.map(|ms| ms.round() as i64),
                    token_to_purchase_ms: self.token_to_purchase_ms.map(|ms| ms.round() as i64),
                    shoppers_in_network: count(self.shoppers_in_network),
                    other_orders: count(self.other_orders),
                    other_cancelled: count(self.other_cancelled),
                    tokens_requested: 0,
                },
            },
            _ => Standing::Pending,
        };
        (self.order_id, standing)
    }
}

/// An order scored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The order.
    pub order_id: Uuid,
    /// The buyer.
    pub shopper: String,
    /// Its score and why.
    pub score: Score,
    /// What it means.
    pub verdict: Verdict,
}

/// Records the orders' scores and verdicts, each once, in one statement.
pub async fn record_verdicts(db: &PgPool, judged: &[Judged]) -> sqlx::Result<()> {
    if judged.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = judged.iter().map(|j| j.order_id).collect();
    let scores: Vec<i32> = judged
        .iter()
        .map(|j| i32::try_from(j.score.total).unwrap_or(i32::MAX))
        .collect();
    let hits: Vec<serde_json::Value> = judged
        .iter()
        .map(|j| serde_json::to_value(&j.score.hits).unwrap_or_default())
        .collect();
    let verdicts: Vec<&str> = judged.iter().map(|j| j.verdict.as_str()).collect();
    sqlx::query(
        "UPDATE order_risk r SET scored_at = now(), score = v.score, hits = v.hits, verdict = v.verdict
         FROM UNNEST($1::uuid[], $2::int[], $3::jsonb[], $4::text[]) AS v(order_id, score, hits, verdict)
         WHERE r.order_id = v.order_id AND r.verdict IS NULL",
    )
    .bind(&ids)
    .bind(&scores)
    .bind(&hits)
    .bind(&verdicts)
    .execute(db)
    .await?;
    Ok(())
}

/// Forgets orders that will never be persisted (never scored, never counted
/// in their network).
pub async fn forget(db: &PgPool, order_ids: &[Uuid]) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM order_risk WHERE order_id = ANY($1) AND verdict IS NULL")
        .bind(order_ids)
        .execute(db)
        .await?;
    Ok(())
}

/// Cancels an order the scorer flagged, through the shopper's own cancel
/// path (an UNPAID order is CANCELLED, a PAID one REFUNDED, its units given
/// back to the sale and the shopper), and marks the money of a paid one
/// owed back. Idempotent: a retry finds it done and marks the refund again.
/// Returns the units to give back to Redis.
pub async fn cancel_flagged(
    db: &PgPool,
    order_id: Uuid,
    shopper: &str,
) -> sqlx::Result<Option<StockReturn>> {
    let (status, returned) = match apply_event(db, order_id, shopper, OrderEvent::Cancel).await? {
        EventOutcome::Changed { status, returned } => (Some(status), returned),
        EventOutcome::AlreadyDone(status) => (Some(status), None),
        EventOutcome::Illegal(_) | EventOutcome::NotFound => (None, None),
    };
    if status == Some(OrderStatus::Refunded) {
        sqlx::query(
            "UPDATE payments SET state = 'REFUND_DUE', settled_at = now()
             WHERE order_id = $1 AND state = 'SUCCEEDED'",
        )
        .bind(order_id)
        .execute(db)
        .await?;
    }
    Ok(returned)
}

/// The scorer's work on a sale so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, FromRow)]
pub struct RiskSummary {
    /// Orders seen.
    pub seen: i64,
    /// Of those, scored.
    pub scored: i64,
    /// Cancelled for risk.
    pub cancelled: i64,
    /// Held for review.
    pub held: i64,
}

/// What the scorer did for `sale_id`.
pub async fn summary(db: &PgPool, sale_id: Uuid) -> sqlx::Result<RiskSummary> {
    sqlx::query_as(
        "SELECT count(*) AS seen, count(verdict) AS scored,
                count(*) FILTER (WHERE verdict = 'CANCEL') AS cancelled,
                count(*) FILTER (WHERE verdict = 'REVIEW') AS held
         FROM order_risk WHERE sale_id = $1",
    )
    .bind(sale_id)
    .fetch_one(db)
    .await
}

/// A shopper among a sale's top scores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspect {
    /// The shopper.
    pub shopper: String,
    /// Their highest score.
    pub score: i64,
    /// Their orders scored.
    pub orders: i64,
    /// Of those, cancelled for risk.
    pub cancelled: i64,
    /// Of those, held for review.
    pub held: i64,
    /// The network of their highest-scored order.
    pub network: Option<String>,
    /// Why: the rules that fired on their highest-scored order.
    pub hits: Vec<Hit>,
}

#[derive(FromRow)]
struct SuspectRow {
    shopper: String,
    score: i64,
    orders: i64,
    cancelled: i64,
    held: i64,
    network: Option<String>,
    hits: Option<sqlx::types::Json<Vec<Hit>>>,
}

/// The `limit` shoppers of the sale with the highest scores over 0.
pub async fn suspects(db: &PgPool, sale_id: Uuid, limit: i64) -> sqlx::Result<Vec<Suspect>> {
    let rows: Vec<SuspectRow> = sqlx::query_as(
        "SELECT shopper, max(score)::int8 AS score, count(*) AS orders,
                count(*) FILTER (WHERE verdict = 'CANCEL') AS cancelled,
                count(*) FILTER (WHERE verdict = 'REVIEW') AS held,
                (array_agg(client_network ORDER BY score DESC))[1] AS network,
                (array_agg(hits ORDER BY score DESC))[1] AS hits
         FROM order_risk
         WHERE sale_id = $1 AND score > 0
         GROUP BY shopper
         ORDER BY max(score) DESC, shopper
         LIMIT $2",
    )
    .bind(sale_id)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Suspect {
            shopper: r.shopper,
            score: r.score,
            orders: r.orders,
            cancelled: r.cancelled,
            held: r.held,
            network: r.network,
            hits: r.hits.map(|h| h.0).unwrap_or_default(),
        })
        .collect())
}
