//! Purchases while the sale sells through PostgreSQL alone (its Redis state
//! lost or Redis unreachable, `spec.degradation.redisDown: database`): each
//! decided and persisted in one transaction (`orders::direct`), a few at a
//! time so the database keeps serving everything else, then produced to the
//! sale's topic for whoever reads it after the consumers.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout, timeout_at};

use super::{Accepted, Purchase, PurchaseResult, Refusal};
use crate::bus::message::OrderMessage;
use crate::bus::producer::OrderProducer;
use crate::catalog::SaleView;
use crate::domain::order::mint_order_id;
use crate::domain::risk::PurchaseSignals;
use crate::domain::shard::home_shard;
use crate::metrics::{Metrics, SaleLabels};
use crate::orders::direct::{self, DirectDecision};
use crate::orders::order::NewOrder;

/// Purchases in the database at once, per API process: half its pool (16),
/// the rest left to order lookups, payments and the catalog. The sale's row
/// is the one lock they all take, so more would only queue there.
const CONCURRENT_PURCHASES: usize = 8;
/// How long a purchase waits for one of them before it is answered BUSY.
const PERMIT_WAIT: Duration = Duration::from_millis(250);

/// The database side of the purchase path.
pub(super) struct ThroughDatabase {
    db: PgPool,
    permits: Semaphore,
}

impl ThroughDatabase {
    pub(super) fn new(db: PgPool) -> Self {
        Self {
            db,
            permits: Semaphore::new(CONCURRENT_PURCHASES),
        }
    }

    /// Buys for `request` in `view`'s sale through PostgreSQL, by `deadline`.
    /// Accepted once committed: the produce after it is for the topic's
    /// other readers, and its failure is logged, not the shopper's.
    pub(super) async fn purchase(
        &self,
        view: &SaleView,
        request: &Purchase<'_>,
        producer: &OrderProducer,
        metrics: &Metrics,
        deadline: Instant,
    ) -> PurchaseResult {
        let config = &view.config;
        let now = chrono::Utc::now();
        if now < config.start {
            return Err(Refusal::NotStarted);
        }
        if now >= config.end {
            return Err(Refusal::Ended);
        }
        let Ok(Ok(_permit)) = timeout(PERMIT_WAIT, self.permits.acquire()).await else {
            return Err(Refusal::Busy);
        };
        let order = NewOrder {
            id: mint_order_id(request.shopper),
            shopper: request.shopper.to_string(),
            quantity: request.quantity,
            shard: home_shard(request.shopper, config.shards),
            accepted_at: now,
            idempotency_key: request.idempotency_key.map(str::to_string),
            purchase_token: request.token.map(|t| t.used_until(now.timestamp_millis())),
        };
        let decided = timeout_at(deadline, direct::purchase(&self.db, config.id, &order)).await;
        let decision = match decided {
            Ok(Ok(decision)) => decision,
            // The commit may have landed: the order's own status tells.
            Ok(Err(e)) => {
                tracing::warn!(order = %order.id, error = %e, "purchase through the database failed; its outcome is unknown");
                return Err(Refusal::OutcomeUnknown { order_id: order.id });
            }
            Err(_) => {
                tracing::warn!(order = %order.id, "purchase through the database ran out of budget; its outcome is unknown");
                return Err(Refusal::OutcomeUnknown { order_id: order.id });
            }
        };
        match decision {
            DirectDecision::Accepted => {}
            DirectDecision::Replay(order_id) => {
                return Ok(Accepted {
                    order_id,
                    replay: true,
                });
            }
            DirectDecision::TokenUsed => return Err(Refusal::TokenUsed),
            DirectDecision::LimitExceeded => return Err(Refusal::LimitExceeded),
            DirectDecision::SoldOut => return Err(Refusal::SoldOut),
            DirectDecision::NotSelling => return Err(Refusal::StateLost),
        }
        metrics
            .orders_through_database
            .get_or_create(&SaleLabels::from(&config.sale))
            .inc();
        publish(view, &order, &request.signals, producer, deadline).await;
        Ok(Accepted {
            order_id: order.id,
            replay: false,
        })
    }
}

/// Produces the persisted `order` to its sale's topic, marked persisted,
/// by `deadline`; a failure is logged (the order stands on its commit).
async fn publish(
    view: &SaleView,
    order: &NewOrder,
    signals: &PurchaseSignals,
    producer: &OrderProducer,
    deadline: Instant,
) {
    let config = &view.config;
    let message = OrderMessage {
        order_id: order.id,
        sale_id: config.id,
        sale: config.sale.clone(),
        shopper: order.shopper.clone(),
        quantity: order.quantity,
        shard: order.shard,
        accepted_at_ms: order.accepted_at.timestamp_millis(),
        idempotency_key: order.idempotency_key.clone(),
        purchase_token: order.purchase_token,
        persisted: true,
        signals: signals.clone(),
    };
    let failure = match timeout_at(deadline, producer.send(&message)).await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "not acknowledged within the purchase budget".to_string(),
    };
    tracing::warn!(order = %order.id, error = %failure, "an order persisted through the database was not produced to its topic");
}
