//! Gathers the evidence the invariants are judged on: waits for the sale's
//! orders to drain, then reads PostgreSQL and Redis.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use sqlx::PgPool;

use crate::bus::lag::LagReader;
use crate::bus::topics;
use crate::domain::invariants::Evidence;
use crate::domain::purchase::ReservationState;
use crate::domain::sale::SaleConfig;
use crate::orders::reconciliation;
use crate::redis::store::SaleStore;

/// The fewer of two "fewest units refused SOLD_OUT" (either may be none):
/// how every storm adds a refusal, or merges another storm's.
pub fn fewer(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).min()
}

/// What the shoppers were told during a run.
#[derive(Debug, Clone, Default)]
pub struct Told {
    /// Accepted orders: id → (shopper, units).
    pub accepted: BTreeMap<String, (String, i64)>,
    /// The fewest units a shopper asked for and was told SOLD_OUT.
    pub sold_out_smallest: Option<i64>,
    /// Shoppers whose purchase's answer never arrived.
    pub unanswered: BTreeSet<String>,
    /// Orders answered `OUTCOME_UNKNOWN`: they may or may not stand.
    pub in_doubt: BTreeSet<String>,
}

/// Evidence could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// A store failed.
    #[error("{0}")]
    Store(String),
    /// The orders did not drain.
    #[error("the sale's orders did not drain within {0:?}")]
    NotDrained(Duration),
}

/// Waits (up to `timeout`) until the consumer group has no lag and every
/// accepted order is persisted or released, then reads both stores at a
/// quiet moment: no stock return pending (a cancel or a payment timeout
/// commits in the database first and releases in Redis after) and the
/// database the same before and after Redis is read. Otherwise a
/// cancellation between the two reads looks like drift.
pub async fn gather(
    db: &PgPool,
    store: &SaleStore,
    bootstrap: &str,
    config: &SaleConfig,
    told: &Told,
    timeout: Duration,
) -> Result<Evidence, EvidenceError> {
    let err = |e: &dyn std::fmt::Display| EvidenceError::Store(e.to_string());
    let deadline = Instant::now() + timeout;
    let lag =
        LagReader::new(bootstrap, &topics::consumer_group(&config.sale)).map_err(|e| err(&e))?;
    let topic = topics::orders_topic(&config.sale);
    loop {
        let drained = lag.read(&topic).await.map_err(|e| err(&e))?.total() == 0;
        if drained {
            let snapshot = reconciliation::snapshot(db, config.id)
                .await
                .map_err(|e| err(&e))?;
            let released = released(store, config).await?;
            let settled = told
                .accepted
                .keys()
                .all(|id| snapshot.orders.contains_key(id) || released.contains(id));
            let quiet = returns_pending(db, config).await? == 0;
            if (settled && quiet) || Instant::now() >= deadline {
                let mut evidence = read(store, config, told, snapshot.clone(), released).await?;
                evidence.refused_for_stock = crate::orders::order::refused_for_stock(db, config.id)
                    .await
                    .map_err(|e| err(&e))?
                    .into_iter()
                    .map(|id| id.to_string())
                    .collect();
                let after = reconciliation::snapshot(db, config.id)
                    .await
                    .map_err(|e| err(&e))?;
                if after == snapshot || Instant::now() >= deadline {
                    return Ok(evidence);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(EvidenceError::NotDrained(timeout));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn returns_pending(db: &PgPool, config: &SaleConfig) -> Result<i64, EvidenceError> {
    crate::orders::order::stock_returns_pending(db, &config.sale)
        .await
        .map_err(|e| EvidenceError::Store(e.to_string()))
}

async fn released(
    store: &SaleStore,
    config: &SaleConfig,
) -> Result<BTreeSet<String>, EvidenceError> {
    let shards = try_join_all((0..config.shards).map(|s| store.reservations(&config.sale, s)))
        .await
        .map_err(|e| EvidenceError::Store(e.to_string()))?;
    Ok(shards
        .into_iter()
        .flatten()
        .filter(|(_, r)| {
            r.as_ref()
                .is_some_and(|r| r.state == ReservationState::Released)
        })
        .map(|(id, _)| id)
        .collect())
}

async fn read(
    store: &SaleStore,
    config: &SaleConfig,
    told: &Told,
    db: crate::domain::reconcile::DbSnapshot,
    released: BTreeSet<String>,
) -> Result<Evidence, EvidenceError> {
    let err = |e: &dyn std::fmt::Display| EvidenceError::Store(e.to_string());
    let loaded = store
        .shards_with_meta(&config.sale, config.shards)
        .await
        .map_err(|e| err(&e))?
        == config.shards;
    let (redis_remaining, redis_units) = if loaded {
        let shards = try_join_all((0..config.shards).map(|s| store.snapshot(&config.sale, s)))
            .await
            .map_err(|e| err(&e))?;
        let credited: BTreeSet<&String> = shards
            .iter()
            .flat_map(|r| r.snapshot.transfers_in.keys())
            .collect();
        let in_transit: i64 = shards
            .iter()
            .flat_map(|r| r.snapshot.transfers_out.iter())
            .filter(|(id, _)| !credited.contains(id))
            .map(|(_, t)| t.amount)
            .sum();
        let remaining = shards.iter().map(|r| r.snapshot.stock).sum::<i64>() + in_transit;
        let mut units = BTreeMap::new();
        for snapshot in shards.iter().map(|r| &r.snapshot) {
            units.extend(snapshot.units.iter().map(|(k, v)| (k.clone(), *v)));
        }
        (Some(remaining), Some(units))
    } else {
        (None, None)
    };
    Ok(Evidence {
        stock: db.stock,
        limit: config.purchase_limit,
        accepted: told.accepted.clone(),
        sold_out_smallest: told.sold_out_smallest,
        unanswered: told.unanswered.clone(),
        in_doubt: told.in_doubt.clone(),
        sold: db.sold,
        shopper_units: db.shopper_units,
        orders: db.orders,
        released,
        refused_for_stock: BTreeSet::new(),
        redis_remaining,
        redis_units,
    })
}
