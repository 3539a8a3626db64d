//! The sales whose orders may flow, read between their reconciles (KEDA's
//! way: the signal apart from the loop that acts on it): each one's Redis
//! state and consumer-group offsets every poll, and a reconcile only when
//! they change (`decide::wake`). Idle live sales cost a Redis and a Kafka
//! read a poll, not a full pass of ~10 requests.

use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::decide::plan::Plan;
use crate::decide::wake::{Reading, Watched};
use crate::model::crd::FlashSale;
use crate::steps::observe::{Observation, group_offsets};

/// How often the watch looks for sales due a read.
const TICK: std::time::Duration = std::time::Duration::from_millis(500);
/// Sales read at once.
const READS_AT_ONCE: usize = 16;

/// After a reconcile: watch its sale from what it observed while its plan
/// asks for that, else no longer.
pub fn keep(ctx: &Context, obs: &Observation, plan: &Plan) {
    let uid = obs.config.id.to_string();
    let mut watched = ctx.watched.lock().unwrap_or_else(|p| p.into_inner());
    let Some(every) = plan.watch_every else {
        watched.remove(&uid);
        return;
    };
    let reading = Reading {
        redis: Some(obs.observed.redis.clone()),
        offsets: obs.offsets.clone(),
    };
    let now = Instant::now();
    let fresh = Watched::new(
        obs.config.sale.clone(),
        obs.config.shards,
        obs.loaded,
        every,
        reading,
        now,
    );
    match watched.get_mut(&uid) {
        Some(known) => known.settle(fresh, now),
        None => {
            watched.insert(uid, fresh);
        }
    }
}

/// Stops watching the sale with id `uid` (deleted).
pub fn forget(ctx: &Context, uid: &str) {
    ctx.watched
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(uid);
}

/// Reads the watched sales of `namespace` (all for `None`) as they fall
/// due, and sends those to reconcile to `wake`, while this replica leads.
pub async fn run(
    ctx: std::sync::Arc<Context>,
    namespace: Option<String>,
    wake: UnboundedSender<ObjectRef<FlashSale>>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !ctx.leading.load(std::sync::atomic::Ordering::Acquire) {
            continue;
        }
        let due = due(&ctx, namespace.as_deref(), Instant::now());
        let readings: Vec<(String, Reading)> = futures::stream::iter(due)
            .map(|(uid, watched)| {
                let ctx = ctx.clone();
                async move {
                    let reading = read(&ctx, &watched).await;
                    (uid, reading)
                }
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let now = Instant::now();
        let mut watched = ctx.watched.lock().unwrap_or_else(|p| p.into_inner());
        for (uid, reading) in readings {
            // A sale settled or forgotten meanwhile is left as it is now.
            if let Some(sale) = watched.get_mut(&uid)
                && sale.wakes(reading, now)
                && wake
                    .unbounded_send(ObjectRef::new(&sale.sale.name).within(&sale.sale.namespace))
                    .is_err()
            {
                return;
            }
        }
    }
}

/// The watched sales in `namespace` due a read at `now`, by uid.
fn due(ctx: &Context, namespace: Option<&str>, now: Instant) -> Vec<(String, Watched)> {
    ctx.watched
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(_, w)| w.due(now) && namespace.is_none_or(|ns| w.sale.namespace == ns))
        .map(|(uid, w)| (uid.clone(), w.clone()))
        .collect()
}

/// One look at a sale: its Redis state, and its offsets while orders flow.
async fn read(ctx: &Context, watched: &Watched) -> Reading {
    let redis = ctx.store.loaded(&watched.sale, watched.shards).await.ok();
    let offsets = match watched.reads_lag {
        true => group_offsets(ctx, &watched.sale).await,
        false => None,
    };
    Reading { redis, offsets }
}
