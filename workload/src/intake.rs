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
use crate::domain::sale::SaleRef;
use crate::domain::shard::{donors, home_shard};
use crate::domain::stock::{SoldOutVerdict, sold_out};
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
    /// The sale's Redis state was lost and is being recovered; nothing is
    /// reserved meanwhile.
    StateLost,
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

/// What the purchase script left for this request.
enum Reserved {
    /// A new reservation under this request's order id.
    New,
    /// The idempotency key names this earlier order.
    Earlier(Uuid),
}

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

    /// Buys `quantity` units of `view`'s sale for `shopper`. Run it to the
    /// end even when the shopper hangs up (the API spawns it): a purchase
    /// stopped half-way would leave units in transit or reserved.
    pub async fn purchase(
        &self,
        catalog: &Catalog,
        view: &SaleView,
        shopper: &str,
        quantity: i64,
        idempotency_key: Option<&str>,
    ) -> PurchaseResult {
        if view.life.lost_since.is_some() {
            return Err(Refusal::StateLost);
        }
        // A retry with a known key must get its first answer: only Redis has it.
        if idempotency_key.is_none() && catalog.is_sold_out(view) {
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
        match self
            .reserve(
                catalog,
                view,
                home,
                shopper,
                quantity,
                &order_text,
                idempotency_key,
            )
            .await?
        {
            Reserved::New => {}
            Reserved::Earlier(order_id) => {
                return Ok(Accepted {
                    order_id,
                    replay: true,
                });
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
            idempotency_key: idempotency_key.map(str::to_string),
        };
        let started = Instant::now();
        let produced = self.producer.send(&message).await;
        self.metrics
            .produce_seconds
            .observe(started.elapsed().as_secs_f64());
        Self::record(&self.kafka_breaker, produced.is_ok());
        let accepted = Accepted {
            order_id,
            replay: false,
        };
        let Err(e) = produced else {
            return Ok(accepted);
        };
        tracing::warn!(order = %order_id, error = %e, "purchase: produce failed, releasing the reservation");
        let released = self
            .store
            .release(sale, home, &order_text, ReservationState::Reserved, 0)
            .await;
        Self::record(
            &self.redis_breaker,
            !matches!(released, Err(StoreError::Redis(_))),
        );
        match released {
            Ok(ReleaseOutcome::Released(_)) => Err(Refusal::Unavailable),
            // A consumer already claimed it: the message did land after all.
            Ok(ReleaseOutcome::Found(ReservationState::Claimed)) => Ok(accepted),
            // The broker may have written the message and Redis could not be
            // told otherwise: the truth is "accepted, not confirmed yet". The
            // order is persisted if the message exists; if not, the janitor
            // releases the reservation and the order shows FAILED (I3, I4).
            Err(e) => {
                tracing::warn!(order = %order_id, error = %e, "purchase: release failed too; the order stays pending");
                Ok(accepted)
            }
            Ok(other) => {
                tracing::error!(order = %order_id, outcome = ?other, "purchase: unexpected release outcome");
                Err(Refusal::Unavailable)
            }
        }
    }

    /// Runs the purchase script in `home` under `order_id`, borrowing when
    /// the shard runs dry, until it reserves or refuses.
    #[allow(clippy::too_many_arguments)]
    async fn reserve(
        &self,
        catalog: &Catalog,
        view: &SaleView,
        home: u32,
        shopper: &str,
        quantity: i64,
        order_id: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Reserved, Refusal> {
        let sale = &view.config.sale;
        let mut rounds = 0;
        let mut redis_retries = 0;
        loop {
            let attempt = self
                .store
                .purchase(sale, home, shopper, quantity, order_id, idempotency_key)
                .await;
            // A timed-out script may have run: the retry, under the same order
            // id, gets its first answer back instead of reserving twice.
            if matches!(attempt, Err(StoreError::Redis(ref e)) if e.is_timeout()) {
                if redis_retries < PURCHASE_RETRIES {
                    redis_retries += 1;
                    continue;
                }
                return Err(self.give_up(sale, home, shopper, order_id).await);
            }
            match self.redis_result(attempt)? {
                ShardDecision::Accepted { .. } => return Ok(Reserved::New),
                // Our own earlier attempt reserved: carry on with it.
                ShardDecision::Replay { order_id: id, .. } if id == order_id => {
                    return Ok(Reserved::New);
                }
                // The idempotency key names an earlier order: answer with it.
                ShardDecision::Replay { order_id, state } => {
                    return match (state, order_id.parse()) {
                        (ReservationState::Released, _) | (_, Err(_)) => Err(Refusal::Unavailable),
                        (_, Ok(order_id)) => Ok(Reserved::Earlier(order_id)),
                    };
                }
                // Opened once and no metadata now: the state was lost.
                ShardDecision::NotWarmed if view.life.opened => return Err(Refusal::StateLost),
                ShardDecision::NotWarmed => return Err(Refusal::NotWarmed),
                ShardDecision::StateLost => return Err(Refusal::StateLost),
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
                    if self.borrow(view, home, quantity).await? {
                        continue;
                    }
                    // Only an empty home shard with empty donors may be sold
                    // out; a shard holding fewer units than asked is not.
                    if available > 0 {
                        return Err(Refusal::SoldOut);
                    }
                    match self.sold_out(view).await? {
                        SoldOutVerdict::SoldOut => {
                            catalog.mark_sold_out(view);
                            return Err(Refusal::SoldOut);
                        }
                        // Units in transit or on the move: try again.
                        SoldOutVerdict::UnitsLeft | SoldOutVerdict::Moving => {}
                    }
                }
            }
        }
    }

    /// The purchase script's replies timed out: it may have reserved, or may
    /// still run. Releasing under the order id (leaving a tombstone when
    /// nothing was reserved) makes "nothing reserved" true; if even that
    /// fails, no order was produced, so the janitor releases whatever the
    /// script reserved within seconds.
    async fn give_up(&self, sale: &SaleRef, home: u32, shopper: &str, order_id: &str) -> Refusal {
        match self.store.abandon(sale, home, order_id, shopper).await {
            Ok(_) => {
                tracing::warn!(order = %order_id, "purchase: redis timed out; nothing is reserved")
            }
            Err(e) => {
                Self::record(&self.redis_breaker, false);
                tracing::warn!(order = %order_id, error = %e, "purchase: redis timed out; the janitor releases what it may have reserved");
            }
        }
        Refusal::Unavailable
    }

    /// Two rounds of probes over every shard (`lua/probe.lua`): sold out only
    /// when both find nothing anywhere, in transit included, and nothing
    /// arrived between them.
    async fn sold_out(&self, view: &SaleView) -> Result<SoldOutVerdict, Refusal> {
        let (sale, shards) = (&view.config.sale, view.config.shards);
        let first = self.redis_result(self.store.probe(sale, shards).await)?;
        if sold_out(&first, None) == SoldOutVerdict::UnitsLeft {
            return Ok(SoldOutVerdict::UnitsLeft);
        }
        let second = self.redis_result(self.store.probe(sale, shards).await)?;
        Ok(sold_out(&first, Some(&second)))
    }

    /// Moves stock from another shard into `home`: taken from a donor first,
    /// then credited. Returns false when no donor had any.
    async fn borrow(&self, view: &SaleView, home: u32, quantity: i64) -> Result<bool, Refusal> {
        let sale = &view.config.sale;
        let transfer_id = Uuid::now_v7().to_string();
        let start = rand::random::<u32>();
        for donor in donors(home, view.config.shards, start) {
            let (taken, _) = self.redis_result(
                self.store
                    .transfer_out(sale, donor, home, &transfer_id, quantity)
                    .await,
            )?;
            if taken > 0 {
                self.redis_result(
                    self.store
                        .transfer_in(sale, donor, home, &transfer_id, taken)
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
