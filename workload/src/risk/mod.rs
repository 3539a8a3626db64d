//! The risk scorer of a sale (`spec.risk`): a member of its own consumer
//! group on the sale's order topic, so persistence never waits for it. It
//! records each order it reads, waits until the order is persisted and the
//! payment rule had its time, scores it, and cancels (or holds) those over
//! the threshold. Offsets are committed only past scored orders, so a
//! restart scores again what it had not finished (a verdict is kept once).

pub mod webhook;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::bus::lag::LagReader;
use crate::bus::message::OrderMessage;
use crate::bus::receive_errors::ReceiveErrors;
use crate::bus::{client_config, topics};
use crate::domain::risk::{self, RiskAction, RiskPolicy, Score, Verdict};
use crate::domain::sale::SaleConfig;
use crate::janitor::return_to_redis;
use crate::metrics::{Metrics, RuleLabels, SaleLabels, VerdictLabels};
use crate::orders::risk::{self as rows, Judged, Seen, Standing};
use crate::redis::store::SaleStore;
use webhook::{RiskQuestion, WebhookClient};

/// How often the sale's policy is read again (switched on or off mid-sale).
const POLICY_EVERY: Duration = Duration::from_secs(2);
/// Most orders read ahead of the oldest one not scored.
const MAX_AHEAD: usize = 5_000;
/// Most orders looked up in one query.
const LOOKUP: usize = 500;
/// How long an order may stay unpersisted before the scorer asks whether
/// the persisting consumers passed it by.
const GONE_AFTER: chrono::Duration = chrono::Duration::seconds(5);
/// The scorer's database connections.
const SCORER_CONNECTIONS: u32 = 4;
/// Orders judged at once (each may wait on the merchant's webhook).
const CONCURRENT_ORDERS: usize = 32;
/// How long one round reads messages before it scores.
const READ_FOR: Duration = Duration::from_millis(200);

/// An order read and not yet scored.
struct Waiting {
    order_id: Uuid,
    partition: i32,
    offset: i64,
    accepted_at: DateTime<Utc>,
}

/// The scorer of one sale.
pub struct Scorer {
    config: SaleConfig,
    bootstrap: String,
    db: PgPool,
    store: SaleStore,
    metrics: Arc<Metrics>,
    webhook: WebhookClient,
    receive_errors: ReceiveErrors,
}

impl Scorer {
    /// A scorer of `config`'s sale (it reads the sale's policy itself).
    pub fn new(
        bootstrap: &str,
        config: SaleConfig,
        db: PgPool,
        store: SaleStore,
        metrics: Arc<Metrics>,
        webhook: WebhookClient,
    ) -> Self {
        // A pool of its own: the scorer never takes a connection the
        // persisting consumers wait for.
        let db = sqlx::postgres::PgPoolOptions::new()
            .max_connections(SCORER_CONNECTIONS)
            .connect_lazy_with((*db.connect_options()).clone());
        Self {
            config,
            bootstrap: bootstrap.to_string(),
            db,
            store,
            metrics,
            webhook,
            receive_errors: ReceiveErrors::default(),
        }
    }

    /// Scores until `stop`, while the sale has a policy; idles while it has none.
    pub async fn run(&self, stop: CancellationToken) {
        loop {
            let policy = match self.policy().await {
                Ok(policy) => policy,
                Err(e) => {
                    tracing::warn!(sale = %self.config.sale, error = %e, "cannot read the sale's risk policy");
                    None
                }
            };
            if let Some(policy) = policy {
                match self.score_while(&policy, &stop).await {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::warn!(sale = %self.config.sale, error = %e, "risk scoring failed; starting again")
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(POLICY_EVERY) => {}
            }
        }
    }

    async fn policy(&self) -> sqlx::Result<Option<RiskPolicy>> {
        Ok(crate::orders::sales::find_by_id(&self.db, self.config.id)
            .await?
            .and_then(|stored| stored.config.risk))
    }

    /// Scores under `policy` until it changes, or `stop`.
    async fn score_while(
        &self,
        policy: &RiskPolicy,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        let sale = &self.config.sale;
        let consumer: StreamConsumer = client_config(&self.bootstrap)
            .set("group.id", topics::risk_group(sale))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "2000")
            .create()?;
        consumer.subscribe(&[&topics::orders_topic(sale)])?;
        let persisted_by = LagReader::new(&self.bootstrap, &topics::consumer_group(sale))?;
        tracing::info!(%sale, "risk scorer started");
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        let mut policy_read = tokio::time::Instant::now();
        while !stop.is_cancelled() {
            let seen = self.read(&consumer, waiting.len(), stop).await;
            rows::record_seen(
                &self.db,
                &seen.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(),
            )
            .await?;
            waiting.extend(seen.into_iter().map(|(_, w)| w));
            let scored = self
                .score_ready(policy, &mut waiting, &persisted_by)
                .await?;
            if !scored.is_empty() {
                commit(&consumer, &topics::orders_topic(sale), &scored)?;
            }
            if policy_read.elapsed() >= POLICY_EVERY {
                policy_read = tokio::time::Instant::now();
                if self.policy().await?.as_ref() != Some(policy) {
                    // Orders read and not scored are read again under the new one.
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Messages for up to [`READ_FOR`], while fewer than [`MAX_AHEAD`] wait.
    async fn read(
        &self,
        consumer: &StreamConsumer,
        ahead: usize,
        stop: &CancellationToken,
    ) -> Vec<(Seen, Waiting)> {
        let mut seen = Vec::new();
        if ahead >= MAX_AHEAD {
            tokio::time::sleep(READ_FOR).await;
            return seen;
        }
        let deadline = tokio::time::Instant::now() + READ_FOR;
        while ahead + seen.len() < MAX_AHEAD {
            let received = tokio::select! {
                () = stop.cancelled() => break,
                r = tokio::time::timeout_at(deadline, consumer.recv()) => r,
            };
            let message = match received {
                Ok(Ok(message)) => message,
                Ok(Err(e)) => {
                    self.receive_errors.note(&self.config.sale, &e);
                    break;
                }
                Err(_) => break,
            };
            // Poison is the persisting consumers' business: nothing to score.
            let Some(order) = message
                .payload()
                .and_then(|p| OrderMessage::from_payload(p).ok())
            else {
                continue;
            };
            let accepted_at =
                DateTime::from_timestamp_millis(order.accepted_at_ms).unwrap_or_default();
            seen.push((
                Seen {
                    order_id: order.order_id,
                    sale_id: order.sale_id,
                    shopper: order.shopper,
                    client_network: order.signals.client_network,
                    accepted_at,
                    token_issued_at: order
                        .signals
                        .token_issued_ms
                        .and_then(DateTime::from_timestamp_millis),
                },
                Waiting {
                    order_id: order.order_id,
                    partition: message.partition(),
                    offset: message.offset(),
                    accepted_at,
                },
            ));
        }
        seen
    }

    /// Scores the orders at the front of `waiting` that are ready, in the
    /// order read, and returns them (the front stays where the first one not
    /// ready is: offsets are committed in order).
    async fn score_ready(
        &self,
        policy: &RiskPolicy,
        waiting: &mut VecDeque<Waiting>,
        persisted_by: &LagReader,
    ) -> anyhow::Result<Vec<Waiting>> {
        let wait = chrono::Duration::from_std(risk::observe_for(&policy.rules)).unwrap_or_default();
        let mut done = Vec::new();
        while !waiting.is_empty() {
            let ids: Vec<Uuid> = waiting.iter().take(LOOKUP).map(|w| w.order_id).collect();
            let mut standings: HashMap<Uuid, Standing> =
                rows::standings(&self.db, &ids).await?.into_iter().collect();
            let unpersisted: HashSet<Uuid> = ids
                .iter()
                .filter(|id| matches!(standings.get(id), None | Some(Standing::Pending)))
                .copied()
                .collect();
            let now = Utc::now();
            let ready: Vec<(Uuid, Standing)> = ids
                .iter()
                .map(|id| (*id, standings.remove(id).unwrap_or(Standing::Pending)))
                .take_while(|(_, standing)| match standing {
                    Standing::Pending => false,
                    Standing::Scored { .. } => true,
                    Standing::Ready { payable_since, .. } => now >= *payable_since + wait,
                })
                .collect();
            let (count, all) = (ready.len(), ready.len() == ids.len());
            self.settle(policy, ready).await?;
            {
                // The metric's guard must not live across an await (it is not Send).
                let labels = SaleLabels::from(&self.config.sale);
                let delay = self.metrics.risk.delay_seconds.get_or_create(&labels);
                for front in waiting.drain(..count) {
                    let waited = (now - front.accepted_at).num_milliseconds().max(0);
                    delay.observe(waited as f64 / 1000.0);
                    done.push(front);
                }
            }
            let stuck = waiting.front().is_some_and(|w| {
                unpersisted.contains(&w.order_id) && now - w.accepted_at > GONE_AFTER
            });
            if stuck
                && self
                    .forget_passed_by(persisted_by, waiting, &unpersisted, now)
                    .await?
            {
                continue;
            }
            if !all || count == 0 {
                break;
            }
        }
        Ok(done)
    }

    /// Forgets the orders of `waiting` that will never be persisted: the
    /// persisting consumers committed past their messages and no row came
    /// (dropped: the shopper was told no; dead-lettered). Without this one
    /// such message would hold every later order of its sale unscored.
    /// Returns whether any was forgotten.
    async fn forget_passed_by(
        &self,
        persisted_by: &LagReader,
        waiting: &mut VecDeque<Waiting>,
        unpersisted: &HashSet<Uuid>,
        now: DateTime<Utc>,
    ) -> anyhow::Result<bool> {
        let lag = persisted_by
            .read(&topics::orders_topic(&self.config.sale))
            .await?;
        let committed: HashMap<i32, i64> = lag
            .partitions
            .iter()
            .filter_map(|p| p.committed.map(|c| (p.partition, c)))
            .collect();
        let passed: Vec<Uuid> = waiting
            .iter()
            .take(LOOKUP)
            .filter(|w| unpersisted.contains(&w.order_id) && now - w.accepted_at > GONE_AFTER)
            .filter(|w| committed.get(&w.partition).is_some_and(|&c| c > w.offset))
            .map(|w| w.order_id)
            .collect();
        // Read after the offsets: a row is written before its commit, so one
        // persisted meanwhile shows now.
        let gone: HashSet<Uuid> = rows::standings(&self.db, &passed)
            .await?
            .into_iter()
            .filter(|(_, s)| matches!(s, Standing::Pending))
            .map(|(id, _)| id)
            .collect();
        if gone.is_empty() {
            return Ok(false);
        }
        tracing::info!(sale = %self.config.sale, orders = gone.len(), "orders never persisted (refused or dead-lettered) are not scored");
        rows::forget(&self.db, &gone.iter().copied().collect::<Vec<_>>()).await?;
        waiting.retain(|w| !gone.contains(&w.order_id));
        Ok(true)
    }

    /// Scores the `ready` orders side by side (a webhook's timeout is not
    /// paid once per order), records their verdicts in one statement, then
    /// cancels the flagged ones; an order scored before a restart has its
    /// cancel applied again (idempotent), in case the restart came between.
    async fn settle(
        &self,
        policy: &RiskPolicy,
        ready: Vec<(Uuid, Standing)>,
    ) -> anyhow::Result<()> {
        let mut cancels = Vec::new();
        let mut judged = Vec::new();
        for (id, standing) in ready {
            match standing {
                Standing::Scored { shopper, verdict } => {
                    if verdict == Verdict::Act(RiskAction::Cancel).as_str() {
                        cancels.push((id, shopper));
                    }
                }
                Standing::Ready {
                    shopper,
                    status,
                    facts,
                    ..
                } => judged.push(self.judge(policy, id, shopper, status, facts)),
                Standing::Pending => {}
            }
        }
        let judged: Vec<Judged> = futures::stream::iter(judged)
            .buffer_unordered(CONCURRENT_ORDERS)
            .collect()
            .await;
        rows::record_verdicts(&self.db, &judged).await?;
        for j in judged {
            self.observe(&j.score, j.verdict);
            if j.verdict == Verdict::Act(RiskAction::Cancel) {
                cancels.push((j.order_id, j.shopper));
            }
        }
        futures::stream::iter(cancels)
            .map(|(id, shopper)| async move { self.cancel(id, &shopper).await })
            .buffer_unordered(CONCURRENT_ORDERS)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Scores one persisted order.
    async fn judge(
        &self,
        policy: &RiskPolicy,
        order_id: Uuid,
        shopper: String,
        status: crate::domain::order::OrderStatus,
        mut facts: risk::OrderFacts,
    ) -> Judged {
        if policy.rules.tokens_per_shopper.weight > 0 {
            // A Redis that does not answer weakens one signal only.
            facts.tokens_requested = self
                .store
                .tokens_issued(&self.config.sale, self.config.shards, &shopper)
                .await
                .unwrap_or(0);
        }
        let mut score = risk::score(&policy.rules, &facts);
        if let Some(webhook) = &policy.webhook {
            let question = RiskQuestion {
                order_id,
                sale: self.config.sale.to_string(),
                shopper: &shopper,
                score: score.total,
                hits: &score.hits,
            };
            let answer = self.webhook.ask(webhook, &question).await;
            if answer.is_none() {
                self.bump(&self.metrics.risk.webhook_silent);
            }
            score = risk::with_webhook(score, webhook, answer);
        }
        // An order that no longer holds stock (failed, cancelled) has nothing to take back.
        let verdict = match risk::verdict(policy, score.total) {
            Verdict::Act(RiskAction::Cancel) if !status.holds_stock() => Verdict::Pass,
            verdict => verdict,
        };
        Judged {
            order_id,
            shopper,
            score,
            verdict,
        }
    }

    /// Cancels a flagged order and gives its units back to Redis (a failed
    /// give-back stays recorded for the janitors).
    async fn cancel(&self, order_id: Uuid, shopper: &str) -> sqlx::Result<()> {
        let returned = rows::cancel_flagged(&self.db, order_id, shopper).await?;
        return_to_redis(&self.db, &self.store, returned.as_slice()).await;
        Ok(())
    }

    fn bump(&self, family: &Family<SaleLabels, Counter>) {
        family
            .get_or_create(&SaleLabels::from(&self.config.sale))
            .inc();
    }

    fn observe(&self, score: &Score, verdict: Verdict) {
        let sale = &self.config.sale;
        self.bump(&self.metrics.risk.scored);
        for hit in &score.hits {
            self.metrics
                .risk
                .rule_hits
                .get_or_create(&RuleLabels {
                    sale: SaleLabels::from(sale),
                    rule: hit.rule.as_str(),
                })
                .inc();
        }
        if let Verdict::Act(action) = verdict {
            let verdict = match action {
                RiskAction::Cancel => "cancel",
                RiskAction::Review => "review",
            };
            self.metrics
                .risk
                .flagged
                .get_or_create(&VerdictLabels {
                    sale: SaleLabels::from(sale),
                    verdict,
                })
                .inc();
        }
    }
}

/// Commits past the scored orders: each partition's highest offset + 1
/// (they were read, and scored, in order).
fn commit(consumer: &StreamConsumer, topic: &str, scored: &[Waiting]) -> anyhow::Result<()> {
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for w in scored {
        let offset = next.entry(w.partition).or_default();
        *offset = (*offset).max(w.offset + 1);
    }
    let mut list = TopicPartitionList::new();
    for (partition, offset) in next {
        list.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    }
    consumer.commit(&list, CommitMode::Async)?;
    Ok(())
}
