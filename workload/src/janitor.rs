//! Finishes, within seconds, what an operation left half-done: transfers
//! between shards whose credit never came (an API process killed between the
//! halves), reservations whose purchase was abandoned (the process died
//! before producing, or Redis stopped answering), and stock returns of
//! cancelled orders that Redis did not take at once. Every API process runs
//! one; each step is idempotent, so replicas may overlap.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use sqlx::PgPool;
use uuid::Uuid;

use crate::bus::lag::GroupLag;
use crate::bus::sale_lag::SaleLags;
use crate::catalog::{Catalog, SaleView};
use crate::domain::budget::PurchaseBudget;
use crate::domain::purchase::ReservationState;
use crate::domain::sale::SaleRef;
use crate::orders::order::{StockReturn, forget_stock_returns, pending_stock_returns};
use crate::redis::store::{SaleStore, StoreError};

/// How often the janitor looks.
pub const EVERY: Duration = Duration::from_millis(500);
/// A transfer not credited this long after it left its donor was abandoned
/// (the API credits right after taking; this is far beyond a round trip).
const TRANSFER_STALE_MS: i64 = 1_000;
/// A stock return the API did not hand to Redis within this is retried.
const RETURN_STALE: Duration = Duration::from_secs(1);

/// Where the sale's consumer group stood at an instant of Redis time.
struct Reading {
    at_ms: i64,
    latest: Vec<i64>,
}

/// The janitor of one API process.
pub struct Janitor {
    catalog: Arc<Catalog>,
    store: SaleStore,
    db: PgPool,
    lags: Arc<SaleLags>,
    /// Past this age an unacknowledged reservation's purchase has answered
    /// or given up (the purchase budget and the clocks' slack).
    abandoned_after_ms: i64,
    /// Each sale's last lag reading.
    readings: std::sync::Mutex<HashMap<Uuid, Reading>>,
}

impl Janitor {
    /// A janitor for the sales of `catalog`.
    pub fn new(
        catalog: Arc<Catalog>,
        store: SaleStore,
        db: PgPool,
        lags: Arc<SaleLags>,
        budget: PurchaseBudget,
    ) -> Self {
        Self {
            catalog,
            store,
            db,
            lags,
            abandoned_after_ms: budget.settled_after().as_millis() as i64,
            readings: Default::default(),
        }
    }

    /// Runs every [`EVERY`] until the process ends.
    pub fn spawn(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                self.sweep().await;
            }
        })
    }

    /// One pass over every sale Redis holds, then the stock returns.
    pub async fn sweep(&self) {
        let sales: Vec<Arc<SaleView>> = self
            .catalog
            .all()
            .into_iter()
            .filter(|v| v.meta.is_some())
            .collect();
        join_all(sales.iter().map(|view| async move {
            if let Err(e) = self.sweep_sale(view).await {
                tracing::debug!(sale = %view.config.sale, error = %e, "janitor: sale not swept");
            }
        }))
        .await;
        match pending_stock_returns(&self.db, self.catalog.namespace(), RETURN_STALE).await {
            Ok(returns) if !returns.is_empty() => {
                tracing::info!(
                    returns = returns.len(),
                    "janitor: returning cancelled orders' units to redis"
                );
                return_to_redis(&self.db, &self.store, &returns).await;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "janitor: stock returns unreadable"),
        }
    }

    async fn sweep_sale(&self, view: &SaleView) -> Result<(), StoreError> {
        let sale = &view.config.sale;
        let shards = view.config.shards;
        let reservation_age = self.abandoned_after_ms;
        let found = join_all((0..shards).map(|shard| async move {
            for (id, to, amount) in self
                .store
                .stale_transfers(sale, shard, TRANSFER_STALE_MS)
                .await?
            {
                if self.store.transfer_in(sale, shard, to, &id, amount).await? {
                    tracing::info!(%sale, transfer = %id, amount, from = shard, to, "janitor: finished an abandoned transfer");
                }
            }
            let (now, stale) = self
                .store
                .stale_reservation_count(sale, shard, reservation_age)
                .await?;
            Ok::<_, StoreError>((shard, now, stale))
        }))
        .await;
        let mut stale_shards = Vec::new();
        let mut now_ms = i64::MAX;
        for result in found {
            let (shard, now, stale) = result?;
            now_ms = now_ms.min(now);
            if stale > 0 {
                stale_shards.push(shard);
            }
        }
        if stale_shards.is_empty() {
            return Ok(());
        }
        // Only a reservation whose message cannot be in the topic unread is
        // abandoned: everything acknowledged before `since` is persisted.
        // Asked before the reservations themselves: while consumers lag,
        // thousands are stale and none may be released yet (fetching them
        // every sweep cost every API replica more Redis replies to read than
        // its purchases did).
        let Some(since) = self.drained_since(view, now_ms).await else {
            return Ok(());
        };
        for shard in stale_shards {
            let abandoned = self
                .store
                .stale_reservations(sale, shard, reservation_age, since - reservation_age)
                .await?;
            for id in abandoned {
                let outcome = self
                    .store
                    .release(
                        sale,
                        shard,
                        &id,
                        ReservationState::Reserved,
                        reservation_age,
                    )
                    .await?;
                tracing::info!(%sale, order = %id, ?outcome, "janitor: released an abandoned reservation");
            }
        }
        Ok(())
    }

    /// The latest Redis instant (ms) before which every order message of the
    /// sale has been persisted and committed by its consumers: now, when the
    /// group has no lag; else the previous reading's instant, when the group
    /// has since committed past everything that was in the topic then.
    async fn drained_since(&self, view: &SaleView, now_ms: i64) -> Option<i64> {
        let lag = self
            .lags
            .read(view.config.id, &view.config.sale)
            .await
            .ok()?;
        let mut readings = self.readings.lock().unwrap_or_else(|p| p.into_inner());
        let since = drained_since(&lag, now_ms, readings.get(&view.config.id));
        readings.insert(
            view.config.id,
            Reading {
                at_ms: now_ms,
                latest: lag.partitions.iter().map(|p| p.latest).collect(),
            },
        );
        since
    }
}

/// Gives the units of orders that stopped holding stock back to Redis (their
/// claimed reservation is released and deleted, exactly once), then forgets
/// the returns Redis took. One that failed stays recorded in the database: a
/// janitor retries it within seconds.
pub async fn return_to_redis(db: &PgPool, store: &SaleStore, returns: &[StockReturn]) {
    let mut done = Vec::with_capacity(returns.len());
    for r in returns {
        let Ok(sale) = SaleRef::new(&r.namespace, &r.name) else {
            continue;
        };
        let shard = u32::try_from(r.shard).unwrap_or_default();
        let id = r.order_id.to_string();
        match store.return_units(&sale, shard, &id).await {
            Ok(_) => done.push(r.order_id),
            Err(e) => {
                tracing::warn!(order = %r.order_id, error = %e, "stock not returned to redis yet; retried shortly")
            }
        }
    }
    if done.is_empty() {
        return;
    }
    if let Err(e) = forget_stock_returns(db, &done).await {
        tracing::warn!(error = %e, "stock returns done but still recorded; released again harmlessly");
    }
}

/// See [`Janitor::drained_since`]; pure.
fn drained_since(lag: &GroupLag, now_ms: i64, previous: Option<&Reading>) -> Option<i64> {
    if lag.total() == 0 {
        return Some(now_ms);
    }
    let previous = previous?;
    let caught_up = lag.partitions.len() == previous.latest.len()
        && lag
            .partitions
            .iter()
            .zip(&previous.latest)
            .all(|(p, latest)| p.committed.unwrap_or(p.earliest).max(p.earliest) >= *latest);
    caught_up.then_some(previous.at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::lag::PartitionOffsets;

    fn lag(parts: &[(i64, Option<i64>)]) -> GroupLag {
        GroupLag {
            partitions: parts
                .iter()
                .enumerate()
                .map(|(i, (latest, committed))| PartitionOffsets {
                    partition: i as i32,
                    earliest: 0,
                    latest: *latest,
                    committed: *committed,
                })
                .collect(),
        }
    }

    #[test]
    fn drained_since_table() {
        let before = Reading {
            at_ms: 1_000,
            latest: vec![10, 5],
        };
        let cases = [
            (
                "no lag now",
                lag(&[(10, Some(10)), (5, Some(5))]),
                None,
                Some(2_000),
            ),
            (
                "empty, never committed",
                lag(&[(0, None)]),
                None,
                Some(2_000),
            ),
            (
                "lag, nothing to compare",
                lag(&[(12, Some(10)), (5, Some(5))]),
                None,
                None,
            ),
            (
                "lag, but past the earlier reading",
                lag(&[(12, Some(10)), (7, Some(5))]),
                Some(&before),
                Some(1_000),
            ),
            (
                "one partition behind the earlier reading",
                lag(&[(12, Some(9)), (7, Some(5))]),
                Some(&before),
                None,
            ),
            (
                "partitions added since",
                lag(&[(12, Some(10)), (7, Some(6)), (1, None)]),
                Some(&before),
                None,
            ),
        ];
        for (name, lag, previous, expected) in cases {
            assert_eq!(drained_since(&lag, 2_000, previous), expected, "{name}");
        }
    }
}
