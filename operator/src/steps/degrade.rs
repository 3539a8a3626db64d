//! A sale whose Redis does not answer the operator: how long it has not,
//! and the step `spec.degradation.redisDown` asks for (decide::degradation):
//! record the loss, then sell through PostgreSQL until Redis is back.

use std::time::{Duration, Instant};

use chrono::Utc;
use flashsale_workload::orders::sales;
use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;

use crate::context::Context;
use crate::decide::degradation::{RedisDownFacts, RedisDownStep, while_redis_down};
use crate::error::{Error, ObserveError};
use crate::events::publish;
use crate::model::crd::{FlashSale, RedisDown};
use crate::model::sale::sale_config;
use crate::steps::observe::group_lag;
use crate::steps::outage;

/// How often a sale selling through the database, or about to, is looked
/// at: the drain and the grace are a few seconds, not the error backoff's.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Whether `error` is Redis failing the operator.
pub fn is_redis_down(error: &Error) -> bool {
    matches!(error, Error::Observe(ObserveError::Redis(_)))
}

/// Redis answered the operator for the sale `uid`.
pub fn redis_answered(ctx: &Context, uid: &str) {
    ctx.redis_unreachable
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(uid);
}

/// Redis failed the operator (`error`) for `fs`. A sale that refuses
/// meanwhile gets the error back (the Degraded condition and the backoff);
/// one that may sell through the database takes its step, says so in its
/// Degraded condition and is looked at again in a second.
pub async fn redis_down(ctx: &Context, fs: &FlashSale, error: Error) -> Result<Requeue, Error> {
    if fs.spec.degradation.redis_down == RedisDown::Reject {
        return Err(error);
    }
    let uid = fs.metadata.uid.clone().unwrap_or_default();
    let unreachable_for = ctx
        .redis_unreachable
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(uid)
        .or_insert_with(Instant::now)
        .elapsed();
    let config = sale_config(fs, i64::from(fs.spec.stock), 1)?;
    let Some(stored) = sales::find_by_id(&ctx.db, config.id)
        .await
        .map_err(ObserveError::Db)?
    else {
        return Err(error);
    };
    let facts = RedisDownFacts {
        mode: fs.spec.degradation.redis_down,
        paused: fs.spec.paused,
        unreachable_for,
        life: stored.life,
        lag: group_lag(ctx, &config).await,
        now: Utc::now(),
    };
    let grace = ctx.workload.purchase_budget.settled_after();
    let id = config.id;
    let sale = &config.sale;
    match while_redis_down(&facts, grace) {
        RedisDownStep::Wait => {}
        RedisDownStep::RecordLoss => {
            if sales::mark_redis_lost(&ctx.db, id)
                .await
                .map_err(ObserveError::Db)?
            {
                tracing::error!(%sale, "redis is unreachable: the sale's state is recorded lost; it sells through PostgreSQL once its orders are persisted");
                let note = format!(
                    "Redis has not answered for {:.0} s: purchases through Redis stop; once every order it accepted is persisted they go through PostgreSQL (spec.degradation.redisDown: database)",
                    unreachable_for.as_secs_f64()
                );
                publish(ctx, fs, EventType::Warning, "RedisStateLost", "Fence", note).await;
            }
        }
        RedisDownStep::SellThroughDatabase => {
            if sales::sell_through_database(&ctx.db, id)
                .await
                .map_err(ObserveError::Db)?
            {
                tracing::warn!(%sale, "selling through PostgreSQL while redis is down");
                let note = "every order Redis accepted is persisted: purchases go through PostgreSQL alone until Redis is back".to_string();
                publish(
                    ctx,
                    fs,
                    EventType::Warning,
                    "SellingThroughDatabase",
                    "Degrade",
                    note,
                )
                .await;
            }
        }
        RedisDownStep::StopSellingThroughDatabase => {
            stop_selling(ctx, fs, id, "the kill switch is on")
                .await
                .map_err(ObserveError::Db)?;
        }
    }
    let message = match stored.life.through_database_since {
        Some(since) => format!(
            "{error}; selling through PostgreSQL since {}",
            since.to_rfc3339()
        ),
        None => format!(
            "{error}; purchases are refused until every order Redis accepted is persisted, then go through PostgreSQL"
        ),
    };
    outage::report(ctx, fs, "RedisUnavailable", message).await;
    Ok(Requeue::requeue(LOOK_AGAIN))
}

/// Stops selling `fs` (row `id`) through PostgreSQL, `why`; an event says
/// for how long it did.
pub async fn stop_selling(
    ctx: &Context,
    fs: &FlashSale,
    id: uuid::Uuid,
    why: &str,
) -> sqlx::Result<()> {
    if let Some(sold_for) = sales::stop_selling_through_database(&ctx.db, id).await? {
        let note = format!(
            "{why}: purchases no longer go through PostgreSQL (they did for {:.1} s)",
            sold_for.as_secs_f64()
        );
        tracing::warn!(sale = %fs.name_any(), "{note}");
        publish(
            ctx,
            fs,
            EventType::Normal,
            "StoppedSellingThroughDatabase",
            "Degrade",
            note,
        )
        .await;
    }
    Ok(())
}
