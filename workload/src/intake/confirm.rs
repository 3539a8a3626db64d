//! Records, off the purchase's path, that the broker acknowledged orders
//! (`lua/confirm.lua`, R -> A): a retry of the purchase is then answered with
//! the order at once, and the janitor leaves the reservation alone. One
//! script call per shard for every order acknowledged meanwhile, so a storm
//! costs Redis a call per batch, not per purchase.
//!
//! Best effort by design: an acknowledgement within the purchase budget is
//! already safe from the janitor (see [`crate::domain::budget`]); one not
//! recorded here (Redis unreachable, the process gone) only makes a retry
//! wait until a consumer claims the order.

use std::collections::HashMap;

use tokio::sync::mpsc;

use crate::domain::sale::SaleRef;
use crate::redis::store::SaleStore;

/// Orders taken from the queue per round.
const BATCH: usize = 1024;

/// An acknowledged order to record.
struct Acknowledged {
    sale: SaleRef,
    shard: u32,
    order_id: String,
}

/// The queue of acknowledged orders and the task that records them.
pub struct Confirmer {
    queue: mpsc::UnboundedSender<Acknowledged>,
}

impl Confirmer {
    /// Starts the recording task over `store` (it ends with the last sender).
    pub fn spawn(store: SaleStore) -> Self {
        let (queue, received) = mpsc::unbounded_channel();
        tokio::spawn(record(store, received));
        Self { queue }
    }

    /// Queues `order_id` of `sale`'s `shard` to be recorded as acknowledged.
    pub fn acknowledged(&self, sale: &SaleRef, shard: u32, order_id: String) {
        let _ = self.queue.send(Acknowledged {
            sale: sale.clone(),
            shard,
            order_id,
        });
    }
}

async fn record(store: SaleStore, mut received: mpsc::UnboundedReceiver<Acknowledged>) {
    let mut batch = Vec::with_capacity(BATCH);
    while received.recv_many(&mut batch, BATCH).await > 0 {
        let mut by_shard: HashMap<(SaleRef, u32), Vec<String>> = HashMap::new();
        for ack in batch.drain(..) {
            by_shard
                .entry((ack.sale, ack.shard))
                .or_default()
                .push(ack.order_id);
        }
        futures::future::join_all(by_shard.iter().map(|((sale, shard), ids)| {
            let store = &store;
            async move {
                if let Err(e) = store.confirm(sale, *shard, ids).await {
                    tracing::warn!(%sale, shard, orders = ids.len(), error = %e, "acknowledged orders not recorded; their retries wait for a consumer");
                }
            }
        }))
        .await;
    }
}
