//! Runs the consumers of a process: one sale's (`--sale`), or every current
//! sale's of a namespace (`--all-sales`, the local loop's stand-in for the
//! operator's per-sale consumer Deployments), each in its sale's own
//! consumer group.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{ConsumerSettings, Ended, STALL_AFTER, SaleConsumer};
use crate::domain::sale::SaleConfig;
use crate::metrics::{Metrics, SaleLabels};
use crate::redis::store::SaleStore;
use crate::risk::Scorer;
use crate::risk::webhook::WebhookClient;

/// How often the set of sales is re-read.
const DISCOVER_EVERY: Duration = Duration::from_secs(2);

/// Shared by every consumer of the process.
#[derive(Clone)]
pub struct Supervisor {
    /// Kafka bootstrap servers.
    pub bootstrap: String,
    /// PostgreSQL.
    pub db: PgPool,
    /// Redis.
    pub store: SaleStore,
    /// Batching.
    pub settings: ConsumerSettings,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// How the sales' risk scorers ask the merchants' services.
    pub risk_webhook: WebhookClient,
}

impl Supervisor {
    /// Runs the sale's consumer, and its risk scorer beside it (idle while
    /// the sale has no `spec.risk`), until `stop`.
    fn spawn(&self, config: SaleConfig, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let scorer = Scorer::new(
            &self.bootstrap,
            config.clone(),
            self.db.clone(),
            self.store.clone(),
            self.metrics.clone(),
            self.risk_webhook.clone(),
        );
        let scoring = tokio::spawn({
            let stop = stop.clone();
            async move { scorer.run(stop).await }
        });
        let this = self.clone();
        tokio::spawn(async move {
            this.consume(config, stop).await;
            let _ = scoring.await;
        })
    }

    /// Runs the sale's consumer until `stop`, rebuilt when it stalls.
    async fn consume(&self, config: SaleConfig, stop: CancellationToken) {
        let sale = config.sale.clone();
        // A stalled consumer is replaced by a new client, in the group
        // again; its partitions are redelivered from the committed offsets.
        while !stop.is_cancelled() {
            let consumer = match SaleConsumer::new(
                &self.bootstrap,
                config.clone(),
                self.db.clone(),
                self.store.clone(),
                self.settings,
                self.metrics.clone(),
            ) {
                Ok(consumer) => consumer,
                Err(e) => {
                    tracing::error!(%sale, error = %e, "cannot start the consumer");
                    return;
                }
            };
            match consumer.run(stop.clone()).await {
                Ended::Stopped => return,
                Ended::Stalled { unreceived } => {
                    tracing::warn!(
                        %sale,
                        unreceived,
                        "no message for {STALL_AFTER:?} while its partitions hold some: rebuilding the Kafka consumer"
                    );
                    self.metrics
                        .consumer_rebuilds
                        .get_or_create(&SaleLabels::from(&sale))
                        .inc();
                }
            }
        }
    }

    /// Consumes `find`'s sale until `stop`: waits for its row to exist first.
    pub async fn run_one(
        &self,
        find: impl AsyncFn() -> anyhow::Result<Option<SaleConfig>>,
        stop: CancellationToken,
    ) {
        loop {
            match find().await {
                Ok(Some(config)) => {
                    let _ = self.spawn(config, stop).await;
                    return;
                }
                Ok(None) => tracing::info!("waiting for the sale's row to appear"),
                Err(e) => tracing::warn!(error = %e, "cannot read the sale; retrying"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(DISCOVER_EVERY) => {}
            }
        }
    }
}

/// Runs a consumer for every sale of `namespace` that still needs one,
/// starting and stopping them as sales appear, drain for good (completed, or
/// deleted after their orders drained) or disappear, until `stop`.
pub async fn run_all_sales(supervisor: Supervisor, namespace: &str, stop: CancellationToken) {
    let mut running: HashMap<Uuid, (CancellationToken, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    loop {
        match crate::orders::sales::list_consuming(&supervisor.db, namespace).await {
            Ok(sales) => {
                let current: Vec<Uuid> = sales.iter().map(|s| s.id).collect();
                running.retain(|id, (token, _)| {
                    let keep = current.contains(id);
                    if !keep {
                        token.cancel();
                    }
                    keep
                });
                for config in sales {
                    running.entry(config.id).or_insert_with(|| {
                        let token = stop.child_token();
                        (token.clone(), supervisor.spawn(config, token))
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list sales; retrying"),
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(DISCOVER_EVERY) => {}
        }
    }
    for (_, (_, handle)) in running {
        let _ = handle.await;
    }
}
