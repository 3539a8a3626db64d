//! The purchase path: one atomic Redis decision in the shopper's home shard
//! (borrowing stock from other shards when it runs dry), then a confirmed
//! Kafka produce. The shopper hears "accepted" only after the broker
//! acknowledged the order within the purchase budget; a failed produce gives
//! the stock back first, and a purchase whose outcome cannot be known yet
//! says so instead of promising.

mod confirm;
mod database;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::time::timeout_at;
use uuid::Uuid;

use crate::bus::message::OrderMessage;
use crate::bus::producer::OrderProducer;
use crate::catalog::{Catalog, SaleView};
use crate::domain::breaker::Breaker;
use crate::domain::budget::PurchaseBudget;
use crate::domain::order::mint_order_id;
use crate::domain::purchase::{ReleaseOutcome, ReservationState, ShardDecision};
use crate::domain::risk::PurchaseSignals;
use crate::domain::sale::SaleRef;
use crate::domain::shard::{donors, home_shard};
use crate::domain::stock::{SoldOutVerdict, sold_out};
use crate::metrics::Metrics;
use crate::redis::store::{SaleStore, StoreError, TokenUse};
use confirm::Confirmer;
use database::ThroughDatabase;

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
    /// The purchase token was used by another purchase; nothing reserved.
    TokenUsed,
    /// This order (or the earlier one its Idempotency-Key names) may or may
    /// not become an order: its message may be in the topic, and nothing
    /// could say so in time. A retry with the same key, or the order's own
    /// status, tells which once it is known.
    OutcomeUnknown {
        /// The order to follow.
        order_id: Uuid,
    },
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
/// How often a retry looks at an earlier attempt still in flight.
const REPLAY_POLL: Duration = Duration::from_millis(25);

/// What the purchase script left for this request.
enum Reserved {
    /// A new reservation under this request's order id.
    New,
    /// The idempotency key names this earlier order, acknowledged.
    Earlier(Uuid),
}

/// One purchase request, as the path sees it.
pub struct Purchase<'a> {
    /// The buyer.
    pub shopper: &'a str,
    /// Units.
    pub quantity: i64,
    /// The shopper's `Idempotency-Key`, if any.
    pub idempotency_key: Option<&'a str>,
    /// The purchase token it uses up, for a sale that needs one.
    pub token: Option<TokenUse>,
    /// What the risk scorer reads of it.
    pub signals: PurchaseSignals,
}

/// The purchase path's dependencies and breakers.
pub struct Intake {
    store: SaleStore,
    producer: OrderProducer,
    metrics: Arc<Metrics>,
    budget: PurchaseBudget,
    confirmer: Confirmer,
    database: ThroughDatabase,
    redis_breaker: Mutex<Breaker>,
    kafka_breaker: Mutex<Breaker>,
}

/// Opens after 20 consecutive failures for a second: a dead service is
/// detected within a few requests under a storm, a slow reply or two is not.
fn breaker() -> Mutex<Breaker> {
    Mutex::new(Breaker::new(20, Duration::from_secs(1)))
}

/// A call that did not answer before the purchase's deadline.
fn past_deadline() -> StoreError {
    StoreError::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the purchase budget ran out",
    )))
}

impl Intake {
    /// A purchase path over `store` and `producer` (and `db` while a sale
    /// sells through the database), each purchase within `budget`. Starts
    /// the task that records acknowledged orders.
    pub fn new(
        store: SaleStore,
        producer: OrderProducer,
        db: sqlx::PgPool,
        metrics: Arc<Metrics>,
        budget: PurchaseBudget,
    ) -> Self {
        Self {
            confirmer: Confirmer::spawn(store.clone()),
            database: ThroughDatabase::new(db),
            store,
            producer,
            metrics,
            budget,
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

    /// Runs a Redis call of the purchase, failing as a timeout at `deadline`.
    async fn before<T>(
        deadline: tokio::time::Instant,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(past_deadline()))
    }

    /// Buys for `request` in `view`'s sale. Run it to the end even when the
    /// shopper hangs up (the API spawns it): a purchase stopped half-way
    /// would leave units in transit or reserved.
    pub async fn purchase(
        &self,
        catalog: &Catalog,
        view: &SaleView,
        request: &Purchase<'_>,
    ) -> PurchaseResult {
        // Every deadline of this purchase comes from here: see domain::budget.
        let deadline = tokio::time::Instant::now() + self.budget.total();
        // The database decides every purchase meanwhile, sold out included:
        // what this process remembers of Redis is stale.
        if view.life.through_database_since.is_some() {
            return self
                .database
                .purchase(view, request, &self.producer, &self.metrics, deadline)
                .await;
        }
        if view.life.lost_since.is_some() {
            return Err(Refusal::StateLost);
        }
        // A retry with a known key must get its first answer: only Redis has it.
        if request.idempotency_key.is_none() && catalog.is_sold_out(view) {
            return Err(Refusal::SoldOut);
        }
        // Nothing is reserved while either service is known to be down.
        if !Self::allows(&self.redis_breaker) || !Self::allows(&self.kafka_breaker) {
            return Err(Refusal::Unavailable);
        }
        let sale = &view.config.sale;
        let home = home_shard(request.shopper, view.config.shards);
        let order_id = mint_order_id(request.shopper);
        let order_text = order_id.to_string();
        match self
            .reserve(catalog, view, home, request, &order_text, deadline)
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

        let accepted_at_ms = chrono::Utc::now().timestamp_millis();
        let message = OrderMessage {
            order_id,
            sale_id: view.config.id,
            sale: sale.clone(),
            shopper: request.shopper.to_string(),
            quantity: request.quantity,
            shard: home,
            accepted_at_ms,
            idempotency_key: request.idempotency_key.map(str::to_string),
            purchase_token: request.token.map(|t| t.used_until(accepted_at_ms)),
            persisted: false,
            signals: request.signals.clone(),
        };
        let started = Instant::now();
        let produced = timeout_at(deadline, self.producer.send(&message)).await;
        self.metrics
            .produce_seconds
            .observe(started.elapsed().as_secs_f64());
        let failure = match produced {
            // Acknowledged within the budget: no one releases it now.
            Ok(Ok(())) => {
                Self::record(&self.kafka_breaker, true);
                self.confirmer.acknowledged(sale, home, order_text);
                return Ok(Accepted {
                    order_id,
                    replay: false,
                });
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "not acknowledged within the purchase budget".to_string(),
        };
        Self::record(&self.kafka_breaker, false);
        tracing::warn!(order = %order_id, error = %failure, "purchase: produce failed, releasing the reservation");
        self.settle_unacknowledged(sale, home, order_id, request.token.as_ref())
            .await
    }

    /// The broker did not acknowledge `order_id` in time, though it may still
    /// write it: the reservation's state after the release decides the
    /// answer. Released: nothing was bought (its message, if it lands, is
    /// dropped). Claimed: the message did land. Unknown: say so.
    async fn settle_unacknowledged(
        &self,
        sale: &SaleRef,
        home: u32,
        order_id: Uuid,
        token: Option<&TokenUse>,
    ) -> PurchaseResult {
        let released = self
            .store
            .release_unacknowledged(sale, home, &order_id.to_string(), token.map(|t| &t.nonce))
            .await;
        Self::record(
            &self.redis_breaker,
            !matches!(released, Err(StoreError::Redis(_))),
        );
        let accepted = Accepted {
            order_id,
            replay: false,
        };
        match released {
            Ok(ReleaseOutcome::Released(_) | ReleaseOutcome::Found(ReservationState::Released)) => {
                Err(Refusal::Unavailable)
            }
            Ok(ReleaseOutcome::Found(state)) if state.is_confirmed() => Ok(accepted),
            Ok(other) => {
                tracing::warn!(order = %order_id, outcome = ?other, "purchase: not acknowledged and not released; its outcome is unknown");
                Err(Refusal::OutcomeUnknown { order_id })
            }
            Err(e) => {
                tracing::warn!(order = %order_id, error = %e, "purchase: not acknowledged, and the release failed; its outcome is unknown");
                Err(Refusal::OutcomeUnknown { order_id })
            }
        }
    }

    /// Runs the purchase script in `home` under `order_id`, borrowing when
    /// the shard runs dry, until it reserves or refuses.
    async fn reserve(
        &self,
        catalog: &Catalog,
        view: &SaleView,
        home: u32,
        request: &Purchase<'_>,
        order_id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Reserved, Refusal> {
        let sale = &view.config.sale;
        let mut rounds = 0;
        loop {
            let attempt = Self::before(
                deadline,
                self.store.purchase(
                    sale,
                    home,
                    request.shopper,
                    request.quantity,
                    order_id,
                    request.idempotency_key,
                    request.token.as_ref(),
                ),
            )
            .await;
            // A timed-out script may have run: the retry, under the same order
            // id, gets its first answer back instead of reserving twice.
            if matches!(attempt, Err(StoreError::Redis(ref e)) if e.is_timeout()) {
                if tokio::time::Instant::now() < deadline {
                    continue;
                }
                return Err(self.give_up(sale, home, request.shopper, order_id).await);
            }
            match self.redis_result(attempt)? {
                ShardDecision::Accepted { .. } => return Ok(Reserved::New),
                // Our own earlier attempt: carry on with it while it is ours
                // to produce (not released since, by a janitor or a tombstone).
                ShardDecision::Replay {
                    order_id: id,
                    state,
                } if id == order_id => {
                    return match state {
                        ReservationState::Reserved => Ok(Reserved::New),
                        other => {
                            tracing::warn!(order = %id, state = ?other, "purchase: its reservation moved on before the produce");
                            Err(Refusal::Unavailable)
                        }
                    };
                }
                // The idempotency key names an earlier order: answer with it
                // once its outcome is known.
                ShardDecision::Replay { order_id, state } => {
                    return self.earlier(sale, home, &order_id, state, deadline).await;
                }
                // Opened once and no metadata now: the state was lost.
                ShardDecision::NotWarmed if view.life.opened => return Err(Refusal::StateLost),
                ShardDecision::NotWarmed => return Err(Refusal::NotWarmed),
                ShardDecision::StateLost => return Err(Refusal::StateLost),
                ShardDecision::TokenUsed => return Err(Refusal::TokenUsed),
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
                    if self.borrow(view, home, request.quantity, deadline).await? {
                        continue;
                    }
                    // Only an empty home shard with empty donors may be sold
                    // out; a shard holding fewer units than asked is not.
                    if available > 0 {
                        return Err(Refusal::SoldOut);
                    }
                    match self.sold_out(view, deadline).await? {
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

    /// The earlier order `id` an idempotency key names, found in `state`: an
    /// acknowledged or claimed one is the answer; one still reserved is
    /// watched until its purchase decides (the first attempt started before
    /// this one, so by `deadline` it has answered or given up). Still
    /// undecided then: its outcome is unknown.
    async fn earlier(
        &self,
        sale: &SaleRef,
        home: u32,
        id: &str,
        mut state: ReservationState,
        deadline: tokio::time::Instant,
    ) -> Result<Reserved, Refusal> {
        let Ok(order_id) = id.parse::<Uuid>() else {
            return Err(Refusal::Unavailable);
        };
        loop {
            match state {
                s if s.is_confirmed() => return Ok(Reserved::Earlier(order_id)),
                ReservationState::Released => return Err(Refusal::Unavailable),
                _ => {}
            }
            if tokio::time::Instant::now() + REPLAY_POLL >= deadline {
                return Err(Refusal::OutcomeUnknown { order_id });
            }
            tokio::time::sleep(REPLAY_POLL).await;
            let seen = Self::before(deadline, self.store.reservation(sale, home, id)).await;
            Self::record(
                &self.redis_breaker,
                !matches!(seen, Err(StoreError::Redis(_))),
            );
            state = match seen {
                Ok(Some(reservation)) => reservation.state,
                // Gone with a lost state, or unreadable: the first attempt's
                // outcome is not known here.
                Ok(None) | Err(_) => return Err(Refusal::OutcomeUnknown { order_id }),
            };
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
    async fn sold_out(
        &self,
        view: &SaleView,
        deadline: tokio::time::Instant,
    ) -> Result<SoldOutVerdict, Refusal> {
        let (sale, shards) = (&view.config.sale, view.config.shards);
        let probe = || Self::before(deadline, self.store.probe(sale, shards));
        let first = self.redis_result(probe().await)?;
        if sold_out(&first, None) == SoldOutVerdict::UnitsLeft {
            return Ok(SoldOutVerdict::UnitsLeft);
        }
        let second = self.redis_result(probe().await)?;
        Ok(sold_out(&first, Some(&second)))
    }

    /// Moves stock from another shard into `home`: taken from a donor first,
    /// then credited (a transfer cut off at the deadline is finished by the
    /// janitor). Returns false when no donor had any.
    async fn borrow(
        &self,
        view: &SaleView,
        home: u32,
        quantity: i64,
        deadline: tokio::time::Instant,
    ) -> Result<bool, Refusal> {
        let sale = &view.config.sale;
        let transfer_id = Uuid::now_v7().to_string();
        let start = rand::random::<u32>();
        for donor in donors(home, view.config.shards, start) {
            let (taken, _) = self.redis_result(
                Self::before(
                    deadline,
                    self.store
                        .transfer_out(sale, donor, home, &transfer_id, quantity),
                )
                .await,
            )?;
            if taken > 0 {
                self.redis_result(
                    Self::before(
                        deadline,
                        self.store
                            .transfer_in(sale, donor, home, &transfer_id, taken),
                    )
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
