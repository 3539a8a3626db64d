//! Warm-up, and the recovery of a Redis state that was lost: load the sale
//! from the database alone, verify it, open it; fence a lost state first.

use flashsale_workload::orders::{reconciliation, sales};
use flashsale_workload::redis::store::WarmError;
use kube::runtime::events::EventType;

use crate::context::Context;
use crate::error::ApplyError;
use crate::events::publish;
use crate::model::crd::FlashSale;
use crate::steps::degrade::stop_selling;
use crate::steps::observe::Observation;

/// Loads the sale into Redis from one database snapshot under its
/// incarnation (recorded before any shard is loaded, so a warm-up that fails
/// half-way resumes), verifies and opens it. A recovered state gets its
/// shoppers' units, live reservations and idempotency keys back. Returns why
/// verification failed, if it did.
pub async fn warm(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
) -> Result<Option<String>, ApplyError> {
    let Some(stored) = &obs.stored else {
        return Ok(None);
    };
    let row = &stored.config;
    let incarnation = sales::incarnation(&ctx.db, row.id).await?;
    // Before the snapshot: no purchase through the database lands after it.
    stop_selling(ctx, fs, row.id, "Redis is back and is being reloaded").await?;
    let db = reconciliation::snapshot(&ctx.db, row.id).await?;
    let loaded = ctx
        .store
        .warm_from(row, &db, fs.spec.paused, &incarnation.to_string())
        .await;
    match loaded {
        Ok(()) => {}
        Err(WarmError::Mismatch(why)) => {
            let note = why.clone();
            publish(
                ctx,
                fs,
                EventType::Warning,
                "WarmVerifyFailed",
                "Warm",
                note,
            )
            .await;
            return Ok(Some(why));
        }
        Err(WarmError::Store(e)) => return Err(e.into()),
    }
    let unsold = db.stock - db.sold;
    match sales::mark_opened(&ctx.db, row.id, incarnation).await? {
        Some(closed) => {
            let note = format!(
                "Redis reloaded from the database ({unsold} units over {} shards, {} orders, {} shoppers) and reopened; purchases were refused for {:.1} s",
                row.shards,
                db.orders.len(),
                db.shopper_units.len(),
                closed.as_secs_f64()
            );
            tracing::warn!(sale = %row.sale, closed_secs = closed.as_secs_f64(), "redis state recovered");
            publish(
                ctx,
                fs,
                EventType::Normal,
                "RedisStateRecovered",
                "Recover",
                note,
            )
            .await;
        }
        None => {
            let note = format!(
                "{unsold} units over {} shards loaded and verified against the database",
                row.shards
            );
            publish(ctx, fs, EventType::Normal, "Warmed", "Warm", note).await;
        }
    }
    Ok(None)
}

/// Fences a lost state: every shard that still has metadata refuses
/// purchases, and the database records the loss (the APIs refuse them
/// before Redis from then on).
pub async fn fence(ctx: &Context, fs: &FlashSale, obs: &Observation) -> Result<(), ApplyError> {
    let config = &obs.config;
    ctx.store.fence(&config.sale, config.shards).await?;
    if sales::mark_redis_lost(&ctx.db, config.id).await? {
        tracing::error!(sale = %config.sale, "the sale's Redis state was lost; purchases are fenced");
        let note = "Redis no longer holds the sale's state (restarted, flushed or failed over): purchases are refused; it is reloaded from the database once its orders are drained".to_string();
        publish(ctx, fs, EventType::Warning, "RedisStateLost", "Fence", note).await;
    }
    Ok(())
}

/// Every order accepted before the loss is persisted: the lost incarnation
/// is replaced, so warm-up reloads Redis from the database.
pub async fn begin_recovery(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
) -> Result<(), ApplyError> {
    let Some(lost) = obs.observed.life.incarnation else {
        return Ok(());
    };
    sales::begin_recovery(&ctx.db, obs.config.id, lost).await?;
    let note = "orders drained: reloading the sale's Redis state from the database".to_string();
    publish(
        ctx,
        fs,
        EventType::Normal,
        "RecoveryStarted",
        "Recover",
        note,
    )
    .await;
    Ok(())
}
