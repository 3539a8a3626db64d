//! The purchase path: one atomic Redis decision in the shopper's home shard
//! (borrowing stock from other shards when it runs dry), then a confirmed
//! Kafka produce. The shopper hears "accepted" only after the broker
//! acknowledged the order; a failed produce gives the stock back first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::bus::message::OrderMessage;
use crate::bus::producer::OrderProducer;
use crate::catalog::{Catalog, SaleView};
use crate::domain::breaker::Breaker;
use crate::domain::purchase::{ReleaseOutcome, ReservationState, ShardDecision};
use crate::domain::shard::{donors, home_shard};
use crate::metrics::Metrics;
use crate::redis::store::{SaleStore, StoreError};

/// Why a purchase was refused. Each has its own code in the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Redis does not hold the sale yet.
    NotWarmed,
    /// The kill switch is on.
    Paused,
    /// Before the window.
    NotStarted,
    /// After the window.
    Ended,
    /// No stock left in any shard.
    SoldOut,
    /// The shopper would exceed the purchase limit.
    LimitExceeded,
    /// The order backlog is too high, or stock kept moving away: retry soon.
    Busy,
    /// Redis or Kafka is unreachable; nothing stays reserved.
    Unavailable,
}

/// An accepted purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The order id the shopper can follow.
    pub order_id: Uuid,
    /// The same order was accepted before (idempotent retry): no new order.
    pub replay: bool,
}

/// What became of one purchase request.
pub type PurchaseResult = Result<Accepted, Refusal>;

/// Borrowing rounds before a purchase gives up with BUSY: stock that keeps
/// being bought away between a transfer and the retry.
const MAX_BORROW_ROUNDS: u32 = 8;
/// Retries of a purchase script whose reply timed out.
const PURCHASE_RETRIES: u32 = 2;
/// A transfer credit older than this is left to reconciliation, which finishes
/// transfers the API abandoned (see `lua/transfer_in.lua`).
pub const TRANSFER_MAX_AGE: Duration = Duration::from_secs(30);

/// The purchase path's dependencies and breakers.
pub struct Intake {
    store: SaleStore,
    producer: OrderProducer,
    metrics: Arc<Metrics>,
    redis_breaker: Mutex<Breaker>,
    kafka_breaker: Mutex<Breaker>,
}

/// Opens after 20 consecutive failures for a second: a dead service is
/// detected within a few requests under a storm, a slow reply or two is not.
fn breaker() -> Mutex<Breaker> {
    Mutex::new(Breaker::new(20, Duration::from_secs(1)))
}

impl Intake {
    /// A purchase path over `store` and `producer`.
    pub fn new(store: SaleStore, producer: OrderProducer, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            producer,
            metrics,
            redis_breaker: breaker(),
            kafka_breaker: breaker(),
        }
    }

    fn allows(breaker: &Mutex<Breaker>) -> bool {
        breaker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allows(Instant::now())
    }

    fn record(breaker: &Mutex<Breaker>, ok: bool) {
        breaker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(ok, Instant::now());
    }

    fn redis_result<T>(&self, result: Result<T, StoreError>) -> Result<T, Refusal> {
        Self::record(
            &self.redis_breaker,
            !matches!(result, Err(StoreError::Redis(_))),
        );
        result.map_err(|e| {
            tracing::warn!(error = %e, "purchase: redis call failed");
            Refusal::Unavailable
        })
    }

    /// Buys `quantity` units of `view`'s sale for `shopper`.
    pub async fn purchase(
        &self,
        catalog: &Catalog,
        view: &SaleView,
        shopper: &str,
        quantity: i64,
        idempotency_key: Option<&str>,
    ) -> PurchaseResult {
        if catalog.is_sold_out(view) {
            return Err(Refusal::SoldOut);
        }
        // Nothing is reserved while either service is known to be down.
        if !Self::allows(&self.redis_breaker) || !Self::allows(&self.kafka_breaker) {
            return Err(Refusal::Unavailable);
        }
        let sale = &view.config.sale;
        let home = home_shard(shopper, view.config.shards);
        let order_id = Uuid::now_v7();
        let order_text = order_id.to_string();
        let mut rounds = 0;
        let mut redis_retries = 0;
        loop {
            let attempt = self
                .store
                .purchase(sale, home, shopper, quantity, &order_text, idempotency_key)
                .await;
            // A timed-out script may have run: the retry, under the same order
            // id, gets its first answer back instead of reserving twice.
            if matches!(attempt, Err(StoreError::Redis(ref e)) if e.is_timeout())
                && redis_retries < PURCHASE_RETRIES
            {
                redis_retries += 1;
                continue;
            }
            match self.redis_result(attempt)? {
                ShardDecision::Accepted { .. } => break,
                // Our own earlier attempt reserved: carry on with it.
                ShardDecision::Replay { order_id, .. } if order_id == order_text => break,
                // The idempotency key names an earlier order: answer with it.
                ShardDecision::Replay { order_id, state } => {
                    return match (state, order_id.parse()) {
                        (ReservationState::Released, _) | (_, Err(_)) => Err(Refusal::Unavailable),
                        (_, Ok(order_id)) => Ok(Accepted {
                            order_id,
                            replay: true,
                        }),
                    };
                }
                ShardDecision::NotWarmed => return Err(Refusal::NotWarmed),
                ShardDecision::Paused => return Err(Refusal::Paused),
                ShardDecision::NotStarted { .. } => return Err(Refusal::NotStarted),
                ShardDecision::Ended => return Err(Refusal::Ended),
                ShardDecision::Busy => return Err(Refusal::Busy),
                ShardDecision::LimitExceeded { .. } => return Err(Refusal::LimitExceeded),
                ShardDecision::ShardDry { available } => {
                    rounds += 1;
                    if rounds > MAX_BORROW_ROUNDS {
                        return Err(Refusal::Busy);
                    }
                    if !self.borrow(view, home, quantity).await? {
                        // Only an empty home shard with empty donors is sold
                        // out; a shard holding fewer units than asked is not.
                        if available == 0 {
                            catalog.mark_sold_out(view);
                        }
                        return Err(Refusal::SoldOut);
                    }
                }
            }
        }

        let message = OrderMessage {
            order_id,
            sale_id: view.config.id,
            sale: sale.clone(),
            shopper: shopper.to_string(),
            quantity,
            shard: home,
            accepted_at_ms: chrono::Utc::now().timestamp_millis(),
        };
        let started = Instant::now();
        let produced = self.producer.send(&message).await;
        self.metrics
            .produce_seconds
            .observe(started.elapsed().as_secs_f64());
        Self::record(&self.kafka_breaker, produced.is_ok());
        let Err(e) = produced else {
            return Ok(Accepted {
                order_id,
                replay: false,
            });
        };
        tracing::warn!(order = %order_id, error = %e, "purchase: produce failed, releasing the reservation");
        let released = self
            .store
            .release(sale, home, &order_text, ReservationState::Reserved, 0)
            .await;
        match self.redis_result(released)? {
            // A consumer already claimed it: the message did land after all.
            ReleaseOutcome::Found(ReservationState::Claimed) => Ok(Accepted {
                order_id,
                replay: false,
            }),
            ReleaseOutcome::Released(_) => Err(Refusal::Unavailable),
            other => {
                tracing::error!(order = %order_id, outcome = ?other, "purchase: unexpected release outcome");
                Err(Refusal::Unavailable)
            }
        }
    }

    /// Moves stock from another shard into `home`: taken from a donor first,
    /// then credited. Returns false when no donor had any.
    async fn borrow(&self, view: &SaleView, home: u32, quantity: i64) -> Result<bool, Refusal> {
        let sale = &view.config.sale;
        let transfer_id = Uuid::now_v7().to_string();
        let start = rand::random::<u32>();
        for donor in donors(home, view.config.shards, start) {
            let (taken, created_ms) = self.redis_result(
                self.store
                    .transfer_out(sale, donor, home, &transfer_id, quantity)
                    .await,
            )?;
            if taken > 0 {
                let max_age = TRANSFER_MAX_AGE.as_millis() as i64;
                self.redis_result(
                    self.store
                        .transfer_in(sale, home, &transfer_id, taken, created_ms, max_age)
                        .await,
                )?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The store, for order lookups.
    pub fn store(&self) -> &SaleStore {
        &self.store
    }

    /// The producer, for readiness and shutdown.
    pub fn producer(&self) -> &OrderProducer {
        &self.producer
    }
}
