//! `flashsale consumer`: persists a sale's accepted orders from Kafka to
//! PostgreSQL, in batches, idempotently, with the database as final arbiter,
//! committing offsets only after the database committed.
//!
//! Per batch: parse → claim each reservation in Redis (RESERVED → CLAIMED; a
//! released one is dropped: the shopper was told no) → one transaction for
//! the claimed orders → commit offsets. A batch the arbiter refuses is split
//! until the offending orders are found; they become FAILED and their units go
//! back to Redis. A message that can never be persisted goes to the sale's
//! dead-letter topic, its units back to Redis.

mod supervisor;
mod sweeper;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::bus::lag::GroupLag;
use crate::bus::message::OrderMessage;
use crate::bus::receive_errors::ReceiveErrors;
use crate::bus::{client_config, topics};
use crate::domain::purchase::ReservationState;
use crate::domain::sale::SaleConfig;
use crate::metrics::{Metrics, SaleLabels};
use crate::orders::order::{NewOrder, PersistError, insert_failed, persist_batch};
use crate::redis::store::{ClaimOutcome, SaleStore, StoreError};

pub use supervisor::{Supervisor, run_all_sales};
pub use sweeper::sweep_forever;

/// How a consumer batches and retries.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerSettings {
    /// Most orders per transaction (2,000: measured in docs/performance.md).
    pub batch_size: usize,
    /// How long to wait for a batch to fill once its first message arrived.
    pub batch_linger: Duration,
    /// Tries before a message whose data the database rejects is dead-lettered.
    pub max_attempts: u32,
    /// How often unpaid orders past the payment timeout are cancelled.
    pub sweep_every: Duration,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            batch_size: 2000,
            batch_linger: Duration::from_millis(20),
            max_attempts: 5,
            sweep_every: Duration::from_secs(1),
        }
    }
}

/// How long a consumer waits for a message while the brokers hold messages
/// of its partitions that it has not been given, before it gives up its
/// client: librdkafka can leave a partition assigned and never fetch it
/// again after a broker restart (seen once in four controller kills; its
/// issue 5153 is open). Well above the few seconds a leader change takes.
pub const STALL_AFTER: Duration = Duration::from_secs(20);

/// Why [`SaleConsumer::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its stop token was cancelled.
    Stopped,
    /// It waited [`STALL_AFTER`] for `unreceived` messages of its
    /// partitions: the caller builds a new consumer (the group redelivers
    /// from the committed offsets; claims are idempotent).
    Stalled {
        /// Messages of its partitions it had not been given.
        unreceived: i64,
    },
}

/// One sale's consumer: a member of the sale's consumer group.
pub struct SaleConsumer {
    config: SaleConfig,
    bootstrap: String,
    consumer: StreamConsumer<RebalanceLog>,
    dead_letters: FutureProducer,
    db: PgPool,
    store: SaleStore,
    settings: ConsumerSettings,
    metrics: Arc<Metrics>,
    labels: SaleLabels,
    /// What this member asked to commit: what the group must hold once the
    /// commits went through.
    asked: std::sync::Mutex<AskedCommits>,
    receive_errors: ReceiveErrors,
}

/// The offsets a member asked to commit, and when it last asked.
#[derive(Default)]
struct AskedCommits {
    /// Each partition's next offset.
    offsets: BTreeMap<i32, i64>,
    /// The last commit's instant.
    at: Option<tokio::time::Instant>,
}

/// How long after its last commit a member trusts a lag read to show it:
/// the lag is read every 5 s, and a commit takes a moment to land.
const COMMIT_SEEN_AFTER: Duration = Duration::from_secs(12);

/// A message and what the batch made of it so far.
struct Item {
    message: OwnedMessage,
    state: ItemState,
}

enum ItemState {
    /// To be claimed and persisted (boxed: a batch holds thousands).
    Pending(Box<OrderMessage>),
    /// Can never be persisted: to be dead-lettered for this reason.
    Poison(&'static str),
    /// Persisted, dropped or dead-lettered.
    Done,
}

impl Item {
    fn pending(&self) -> Option<&OrderMessage> {
        match &self.state {
            ItemState::Pending(order) => Some(order),
            _ => None,
        }
    }
}

/// What to do with a message that will not be persisted.
enum Verdict {
    /// Its reservation was released: the shopper was told no.
    Drop,
    /// Nothing in Redis to give back.
    DeadLetter(&'static str),
    /// We claimed its reservation: give the units back too.
    DeadLetterAndRelease(&'static str),
}

/// Backoff for transient failures: 100 ms doubling to 5 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(6))).min(Duration::from_secs(5))
}

/// A database error caused by the data (a constraint, a bad value): the same
/// orders would fail again. Anything else (connection, timeout) is transient.
fn is_data_error(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().is_some_and(|c| c.starts_with("22") || c.starts_with("23")))
}

impl SaleConsumer {
    /// Joins the sale's consumer group on `bootstrap`.
    pub fn new(
        bootstrap: &str,
        config: SaleConfig,
        db: PgPool,
        store: SaleStore,
        settings: ConsumerSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, rdkafka::error::KafkaError> {
        // Eager (round-robin) rebalancing: with cooperative-sticky, a
        // partition taken over from a SIGKILLed member was seen assigned and
        // never fetched again (its lag frozen; the e2e test's drain timed
        // out twice), a failure librdkafka users report too. A member that
        // dies without leaving is noticed after the session timeout.
        let consumer: StreamConsumer<RebalanceLog> = client_config(bootstrap)
            .set("group.id", topics::consumer_group(&config.sale))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "roundrobin")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "2000")
            .create_with_context(RebalanceLog {
                sale: config.sale.to_string(),
            })?;
        consumer.subscribe(&[&topics::orders_topic(&config.sale)])?;
        let dead_letters = client_config(bootstrap)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .create()?;
        let labels = SaleLabels::from(&config.sale);
        Ok(Self {
            config,
            bootstrap: bootstrap.to_string(),
            consumer,
            dead_letters,
            db,
            store,
            settings,
            metrics,
            labels,
            asked: std::sync::Mutex::default(),
            receive_errors: ReceiveErrors::default(),
        })
    }

    /// Consumes until `stop` is cancelled, or until it stalls; the batch in
    /// hand is finished first.
    pub async fn run(&self, stop: CancellationToken) -> Ended {
        tracing::info!(sale = %self.config.sale, "consumer started");
        let (lag_tx, lag) = tokio::sync::watch::channel(GroupLag::default());
        let lag_gauge = self.report_lag(stop.clone(), lag_tx);
        let sweeper = tokio::spawn(sweep_forever(
            self.db.clone(),
            self.store.clone(),
            self.config.id,
            self.settings.sweep_every,
            stop.clone(),
        ));
        // Two batches in flight: while one is persisted and committed, the
        // next is fetched and its reservations claimed in Redis.
        let mut claimed: Option<(Vec<Item>, Vec<NewOrder>)> = None;
        let ended = loop {
            let persist = async {
                match claimed.take() {
                    Some((items, orders)) => self.finish(items, orders, &stop).await,
                    None => true,
                }
            };
            let next = async {
                let batch = self.next_batch(&stop, &lag).await?;
                self.prepare(batch, &stop).await.ok_or(Ended::Stopped)
            };
            let (persisted, next) = tokio::join!(persist, next);
            match next {
                Ok(batch) if persisted => claimed = Some(batch),
                Ok(_) => break Ended::Stopped,
                Err(ended) => break ended,
            }
        };
        lag_gauge.abort();
        sweeper.abort();
        tracing::info!(sale = %self.config.sale, ?ended, "consumer stopped");
        ended
    }

    /// Publishes the group's lag as a gauge every 5 s (the operator reads it
    /// itself for scaling; this is for dashboards), and to `latest` for the
    /// stall check.
    fn report_lag(
        &self,
        stop: CancellationToken,
        latest: tokio::sync::watch::Sender<GroupLag>,
    ) -> tokio::task::JoinHandle<()> {
        let gauge = self.metrics.lag.get_or_create(&self.labels).clone();
        let topic = topics::orders_topic(&self.config.sale);
        let reader = crate::bus::lag::LagReader::new(
            &self.bootstrap,
            &topics::consumer_group(&self.config.sale),
        );
        tokio::spawn(async move {
            let Ok(reader) = reader else { return };
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if let Ok(lag) = reader.read(&topic).await {
                    gauge.set(lag.total());
                    latest.send_replace(lag);
                }
            }
        })
    }

    /// Waits for a first message, then gathers up to `batch_size` for at most
    /// `batch_linger`. Ends once stopped, or after waiting [`STALL_AFTER`]
    /// while `lag` shows messages of its partitions it was not given.
    async fn next_batch(
        &self,
        stop: &CancellationToken,
        lag: &tokio::sync::watch::Receiver<GroupLag>,
    ) -> Result<Vec<OwnedMessage>, Ended> {
        let waiting = tokio::time::Instant::now();
        let every = Duration::from_secs(5);
        let mut check = tokio::time::interval_at(waiting + every, every);
        let first = loop {
            tokio::select! {
                () = stop.cancelled() => return Err(Ended::Stopped),
                _ = check.tick() => {
                    let (positions, lag) = (self.positions(), lag.borrow().clone());
                    self.commit_lost(&lag, &positions);
                    let unreceived = lag.unreceived(&positions);
                    if unreceived > 0 && waiting.elapsed() >= STALL_AFTER {
                        return Err(Ended::Stalled { unreceived });
                    }
                }
                received = self.consumer.recv() => match received {
                    Ok(m) => break m.detach(),
                    // Not slept on: a rebalance or an order may be next.
                    Err(e) => self.receive_errors.note(&self.config.sale, &e),
                },
            }
        };
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.settings.batch_linger;
        while batch.len() < self.settings.batch_size {
            match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Ok(Ok(m)) => batch.push(m.detach()),
                Ok(Err(e)) => {
                    self.receive_errors.note(&self.config.sale, &e);
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(batch)
    }

    /// Each assigned partition's next offset for this member (`None` before
    /// its first message).
    fn positions(&self) -> Vec<(i32, Option<i64>)> {
        self.consumer
            .position()
            .map(|list| {
                list.elements()
                    .iter()
                    .map(|e| match e.offset() {
                        Offset::Offset(o) => (e.partition(), Some(o)),
                        _ => (e.partition(), None),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Parses a batch, dead-letters what can never be persisted and claims
    /// the rest in Redis; transient failures are retried with backoff. `None`
    /// when stopped first.
    async fn prepare(
        &self,
        batch: Vec<OwnedMessage>,
        stop: &CancellationToken,
    ) -> Option<(Vec<Item>, Vec<NewOrder>)> {
        let mut items: Vec<Item> = batch
            .into_iter()
            .map(|message| {
                let state = match message.payload().map(OrderMessage::from_payload) {
                    // A wrong sale id under our name is checked once claimed.
                    Some(Ok(order)) if order.sale == self.config.sale => {
                        ItemState::Pending(Box::new(order))
                    }
                    Some(Ok(_)) => ItemState::Poison("message of another sale"),
                    _ => ItemState::Poison("unparseable order message"),
                };
                Item { message, state }
            })
            .collect();
        let mut attempt = 0;
        let orders = loop {
            match self.claim(&mut items).await {
                Ok(orders) => break orders,
                Err(e) => {
                    if !self
                        .back_off("claiming failed", &e, &mut attempt, stop)
                        .await
                    {
                        return None;
                    }
                }
            }
        };
        Some((items, orders))
    }

    /// After a transient failure: logs it and waits out the backoff of the
    /// next attempt. False when the consumer is stopped first.
    async fn back_off(
        &self,
        failure: &str,
        error: &BatchError,
        attempt: &mut u32,
        stop: &CancellationToken,
    ) -> bool {
        tracing::warn!(sale = %self.config.sale, error = %error, attempt = *attempt, "{failure}; retrying");
        *attempt += 1;
        tokio::select! {
            () = stop.cancelled() => false,
            () = tokio::time::sleep(backoff(*attempt)) => true,
        }
    }

    /// Persists a claimed batch and commits its offsets. Transient failures
    /// are retried (with backoff) until they pass or the consumer is stopped;
    /// returns false when stopped before the batch was done.
    async fn finish(
        &self,
        mut items: Vec<Item>,
        orders: Vec<NewOrder>,
        stop: &CancellationToken,
    ) -> bool {
        let mut attempt = 0;
        while let Err(e) = self.persist_splitting(orders.clone(), &mut items).await {
            if !self.back_off("batch failed", &e, &mut attempt, stop).await {
                return false;
            }
        }
        self.commit(&items);
        true
    }

    /// Dead-letters poison, claims every pending reservation and settles
    /// what will not be persisted (items end `Done`); returns the orders to
    /// persist. Claims are idempotent, so a retry after an `Err` is safe.
    async fn claim(&self, items: &mut [Item]) -> Result<Vec<NewOrder>, BatchError> {
        for item in items.iter_mut() {
            if let ItemState::Poison(reason) = item.state {
                self.dead_letter(&item.message, reason).await?;
                item.state = ItemState::Done;
            }
        }
        let pending: Vec<&OrderMessage> = items.iter().filter_map(Item::pending).collect();
        let (claimed, unreachable) = self.claim_reservations(pending).await?;
        let mut to_persist = Vec::new();
        let mut verdicts: HashMap<uuid::Uuid, Verdict> = HashMap::new();
        let mut missing = Vec::new();
        for (order, claim) in claimed {
            let verdict = match claim {
                // Written through PostgreSQL: inserting it again is a no-op.
                _ if order.persisted => {
                    to_persist.push(new_order(order));
                    continue;
                }
                ClaimOutcome::Claimed { .. } if order.sale_id != self.config.id => {
                    Verdict::DeadLetterAndRelease("message of an earlier sale of the same name")
                }
                ClaimOutcome::Claimed { quantity, shopper }
                    if quantity == order.quantity && shopper == order.shopper =>
                {
                    to_persist.push(new_order(order));
                    continue;
                }
                ClaimOutcome::Claimed { .. } => {
                    Verdict::DeadLetterAndRelease("message disagrees with its reservation")
                }
                // An accepted order of this sale whose reservation is gone:
                // a redelivery of an order persisted and since ended (its
                // record went with its units), or Redis lost the sale's
                // state (a restart, a flush, a failover that dropped
                // writes). The order stands — PostgreSQL decides — and in
                // the second case the sale is fenced until the operator
                // recovers it.
                ClaimOutcome::Missing if order.sale_id == self.config.id => {
                    missing.push(order.order_id);
                    to_persist.push(new_order(order));
                    continue;
                }
                ClaimOutcome::Missing => Verdict::DeadLetter("no reservation for this order"),
                // The shopper was told no: the order must never exist (I4).
                ClaimOutcome::Released => Verdict::Drop,
            };
            verdicts.insert(order.order_id, verdict);
        }
        for item in items.iter_mut() {
            let Some((order, verdict)) = item
                .pending()
                .and_then(|o| Some((o, verdicts.get(&o.order_id)?)))
            else {
                continue;
            };
            match verdict {
                Verdict::Drop => {
                    tracing::info!(order = %order.order_id, "dropping an order whose reservation was released")
                }
                Verdict::DeadLetter(reason) => self.dead_letter(&item.message, reason).await?,
                Verdict::DeadLetterAndRelease(reason) => {
                    self.dead_letter(&item.message, reason).await?;
                    self.store
                        .release(
                            &self.config.sale,
                            order.shard,
                            &order.order_id.to_string(),
                            ReservationState::Claimed,
                            0,
                        )
                        .await?;
                }
            }
            item.state = ItemState::Done;
        }
        // Unreachable, Redis is fenced by whoever recorded the loss once back.
        let state_lost = !unreachable
            && !missing.is_empty()
            && !crate::orders::order::all_persisted(&self.db, &missing).await?;
        if state_lost {
            self.fence_lost_state().await?;
        }
        Ok(to_persist)
    }

    /// Claims the reservations of `orders`, one call per shard, the shards in
    /// parallel; orders written through PostgreSQL have none (their outcome
    /// is ignored). Redis unreachable while the database records the sale's
    /// state lost (the operator fenced it to sell through the database): no
    /// reservation can be claimed or trusted, so each is missing, as in a
    /// lost state — PostgreSQL decides — and the second value says so.
    async fn claim_reservations<'a>(
        &self,
        orders: Vec<&'a OrderMessage>,
    ) -> Result<(Vec<(&'a OrderMessage, ClaimOutcome)>, bool), BatchError> {
        let mut by_shard: BTreeMap<u32, Vec<&OrderMessage>> = BTreeMap::new();
        let mut persisted = Vec::new();
        for order in orders {
            if order.persisted {
                persisted.push((order, ClaimOutcome::Missing));
            } else {
                by_shard.entry(order.shard).or_default().push(order);
            }
        }
        let claims = futures::future::try_join_all(by_shard.iter().map(|(shard, orders)| {
            let ids: Vec<String> = orders.iter().map(|o| o.order_id.to_string()).collect();
            async move { self.store.claim(&self.config.sale, *shard, &ids).await }
        }))
        .await;
        let (claims, unreachable) = match claims {
            Ok(claims) => (claims, false),
            Err(StoreError::Redis(e)) if self.recorded_lost().await? => {
                tracing::warn!(sale = %self.config.sale, error = %e, "redis is unreachable and the sale's state is recorded lost: persisting without claims");
                let missing = by_shard
                    .values()
                    .map(|orders| vec![ClaimOutcome::Missing; orders.len()])
                    .collect();
                (missing, true)
            }
            Err(e) => return Err(e.into()),
        };
        let claimed = by_shard
            .into_values()
            .zip(claims)
            .flat_map(|(orders, outcomes)| orders.into_iter().zip(outcomes))
            .chain(persisted)
            .collect();
        Ok((claimed, unreachable))
    }

    /// Whether the database records the sale's Redis state as lost.
    async fn recorded_lost(&self) -> Result<bool, BatchError> {
        let stored = crate::orders::sales::find_by_id(&self.db, self.config.id).await?;
        Ok(stored.is_some_and(|s| s.life.lost_since.is_some()))
    }

    /// Fences the sale whose Redis state a claim found lost: purchases stop
    /// at once (every shard that still has metadata is marked lost) and the
    /// database records it for the API and the operator, which recovers it.
    async fn fence_lost_state(&self) -> Result<(), BatchError> {
        self.store
            .fence(&self.config.sale, self.config.shards)
            .await?;
        if crate::orders::sales::mark_redis_lost(&self.db, self.config.id).await? {
            tracing::error!(sale = %self.config.sale, "an accepted order has no reservation: the sale's Redis state was lost; purchases are fenced until it is recovered");
        }
        Ok(())
    }

    /// Persists `orders`, splitting any group the database refuses until the
    /// offending orders stand alone; those become FAILED (arbiter) or are
    /// dead-lettered after `max_attempts` (data errors), their units released.
    async fn persist_splitting(
        &self,
        orders: Vec<NewOrder>,
        items: &mut [Item],
    ) -> Result<(), BatchError> {
        let mut stack = vec![orders];
        let mut attempts: HashMap<uuid::Uuid, u32> = HashMap::new();
        while let Some(group) = stack.pop() {
            if group.is_empty() {
                continue;
            }
            let started = std::time::Instant::now();
            let mut tx = self.db.begin().await?;
            match persist_batch(&mut tx, self.config.id, &group).await {
                Ok(persisted) => {
                    tx.commit().await?;
                    self.metrics
                        .persist_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.metrics.batch_size.observe(group.len() as f64);
                    self.metrics
                        .orders_persisted
                        .get_or_create(&self.labels)
                        .inc_by(persisted.inserted.len() as u64);
                    settle(items, &group);
                }
                Err(PersistError::Refused(refusal)) if group.len() == 1 => {
                    drop(tx);
                    self.fail(&group[0], refusal.reason()).await?;
                    settle(items, &group);
                }
                Err(PersistError::Db(e)) if is_data_error(&e) && group.len() == 1 => {
                    drop(tx);
                    let tries = attempts.entry(group[0].id).or_default();
                    *tries += 1;
                    if *tries < self.settings.max_attempts {
                        stack.push(group);
                        continue;
                    }
                    tracing::warn!(order = %group[0].id, error = %e, "dead-lettering an order the database keeps rejecting");
                    let message = items
                        .iter()
                        .find(|i| i.pending().is_some_and(|o| o.order_id == group[0].id))
                        .map(|i| i.message.clone());
                    if let Some(message) = message {
                        self.dead_letter(&message, &format!("database rejects it: {e}"))
                            .await?;
                    }
                    self.release(&group[0]).await?;
                    settle(items, &group);
                }
                Err(PersistError::Refused(_)) => {
                    drop(tx);
                    let mut left = group;
                    let right = left.split_off(left.len() / 2);
                    stack.push(right);
                    stack.push(left);
                }
                Err(PersistError::Db(e)) if is_data_error(&e) => {
                    drop(tx);
                    let mut left = group;
                    let right = left.split_off(left.len() / 2);
                    stack.push(right);
                    stack.push(left);
                }
                Err(PersistError::Db(e)) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Records the order as FAILED and gives its units back to Redis.
    async fn fail(&self, order: &NewOrder, reason: &str) -> Result<(), BatchError> {
        if fail_order(
            &self.db,
            &self.store,
            self.config.id,
            &self.config.sale,
            order,
            reason,
        )
        .await?
        {
            self.metrics.orders_failed.get_or_create(&self.labels).inc();
        }
        Ok(())
    }

    async fn release(&self, order: &NewOrder) -> Result<(), BatchError> {
        self.store
            .release(
                &self.config.sale,
                order.shard,
                &order.id.to_string(),
                ReservationState::Claimed,
                0,
            )
            .await?;
        Ok(())
    }

    /// Sends the message to the sale's dead-letter topic with the reason and
    /// its origin in headers; waits for the broker's acknowledgement.
    async fn dead_letter(&self, message: &OwnedMessage, reason: &str) -> Result<(), BatchError> {
        let topic = topics::dead_letter_topic(&self.config.sale);
        let origin = format!(
            "{}/{}/{}",
            message.topic(),
            message.partition(),
            message.offset()
        );
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "flashsale-reason",
                value: Some(reason),
            })
            .insert(Header {
                key: "flashsale-origin",
                value: Some(&origin),
            });
        let mut record = FutureRecord::to(&topic).headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        self.dead_letters
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| BatchError::Kafka(e))?;
        self.metrics.dead_lettered.get_or_create(&self.labels).inc();
        tracing::warn!(sale = %self.config.sale, origin, reason, "message dead-lettered");
        Ok(())
    }

    /// Commits, per partition, the offset after the batch's last message.
    fn commit(&self, items: &[Item]) {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for item in items {
            let offset = next.entry(item.message.partition()).or_insert(0);
            *offset = (*offset).max(item.message.offset() + 1);
        }
        self.commit_offsets(&next.into_iter().collect::<Vec<_>>());
    }

    /// Commits `offsets` (partition, next offset) of the sale's topic, and
    /// remembers them as asked.
    fn commit_offsets(&self, offsets: &[(i32, i64)]) {
        let topic = topics::orders_topic(&self.config.sale);
        let mut tpl = TopicPartitionList::new();
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        for &(partition, offset) in offsets {
            if let Err(e) = tpl.add_partition_offset(&topic, partition, Offset::Offset(offset)) {
                tracing::warn!(error = %e, "cannot build the offset commit");
            }
            let at = asked.offsets.entry(partition).or_insert(offset);
            *at = (*at).max(offset);
        }
        asked.at = Some(tokio::time::Instant::now());
        drop(asked);
        // Asynchronous: a commit lost to a crash only means a redelivery,
        // which changes nothing; one lost while this member lives is made
        // again by `commit_lost`.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(sale = %self.config.sale, error = %e, "offset commit failed; the batch will be redelivered");
        }
    }

    /// Commits again, on the partitions it holds (`positions`), what this
    /// member asked to commit and `lag` shows the group does not have, once
    /// its last commit is old enough for `lag` to show it.
    fn commit_lost(&self, lag: &GroupLag, positions: &[(i32, Option<i64>)]) {
        let asked: Vec<(i32, i64)> = {
            let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            if asked.at.is_none_or(|at| at.elapsed() < COMMIT_SEEN_AFTER) {
                return;
            }
            positions
                .iter()
                .filter_map(|(partition, _)| Some((*partition, *asked.offsets.get(partition)?)))
                .collect()
        };
        let lost = lag.lost_commits(&asked);
        if !lost.is_empty() {
            tracing::warn!(sale = %self.config.sale, ?lost, "the group lost committed offsets; committing them again");
            self.commit_offsets(&lost);
        }
    }
}

/// Logs every change of a consumer's partitions: which member reads which
/// partition is what an SRE needs when a lag does not move.
pub struct RebalanceLog {
    sale: String,
}

impl rdkafka::ClientContext for RebalanceLog {}

impl rdkafka::consumer::ConsumerContext for RebalanceLog {
    fn post_rebalance(
        &self,
        _consumer: &rdkafka::consumer::BaseConsumer<Self>,
        rebalance: &rdkafka::consumer::Rebalance<'_>,
    ) {
        use rdkafka::consumer::Rebalance;
        let partitions = |tpl: &TopicPartitionList| {
            tpl.elements()
                .iter()
                .map(|e| e.partition().to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match rebalance {
            Rebalance::Assign(tpl) => {
                tracing::info!(sale = %self.sale, partitions = %partitions(tpl), "partitions assigned")
            }
            Rebalance::Revoke(tpl) => {
                tracing::info!(sale = %self.sale, partitions = %partitions(tpl), "partitions revoked")
            }
            Rebalance::Error(e) => {
                tracing::warn!(sale = %self.sale, error = %e, "rebalance failed")
            }
        }
    }
}

/// The order a message carries, as the database stores it.
fn new_order(order: &OrderMessage) -> NewOrder {
    NewOrder {
        id: order.order_id,
        shopper: order.shopper.clone(),
        quantity: order.quantity,
        shard: order.shard,
        accepted_at: DateTime::<Utc>::from_timestamp_millis(order.accepted_at_ms)
            .unwrap_or_else(Utc::now),
        idempotency_key: order.idempotency_key.clone(),
        purchase_token: order.purchase_token,
    }
}

/// Records an order the database refused as FAILED with `reason` and gives
/// its claimed units back to Redis — unless the order is persisted and live:
/// another consumer (before a rebalance) stored it in between, and its units
/// are sold. Returns whether the units went back.
pub async fn fail_order(
    db: &PgPool,
    store: &SaleStore,
    sale_id: uuid::Uuid,
    sale: &crate::domain::sale::SaleRef,
    order: &NewOrder,
    reason: &str,
) -> Result<bool, BatchError> {
    if !insert_failed(db, sale_id, order, reason).await? {
        // A row is there already: FAILED by an earlier attempt of ours that
        // stopped before releasing (release again, exactly once), or live.
        let existing = crate::orders::order::find(db, order.id).await?;
        if existing.is_some_and(|o| o.status != crate::domain::order::OrderStatus::Failed) {
            tracing::info!(order = %order.id, "order persisted by another consumer; its units stay sold");
            return Ok(false);
        }
    }
    tracing::warn!(order = %order.id, reason, "order failed in the database");
    store
        .release(
            sale,
            order.shard,
            &order.id.to_string(),
            ReservationState::Claimed,
            0,
        )
        .await?;
    Ok(true)
}

/// Marks the messages of `orders` as done.
fn settle(items: &mut [Item], orders: &[NewOrder]) {
    let settled: std::collections::HashSet<uuid::Uuid> = orders.iter().map(|o| o.id).collect();
    for item in items.iter_mut() {
        if item
            .pending()
            .is_some_and(|o| settled.contains(&o.order_id))
        {
            item.state = ItemState::Done;
        }
    }
}

/// A batch step that failed transiently.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// PostgreSQL.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis.
    #[error("redis: {0}")]
    Redis(#[from] StoreError),
    /// The dead-letter produce.
    #[error("kafka: {0}")]
    Kafka(rdkafka::error::KafkaError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        let ms: Vec<u128> = (0..9).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }
}
