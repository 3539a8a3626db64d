//! The jobs the operator runs for a sale: `flashsale job reconcile` and
//! `flashsale job cleanup`.

mod cleanup;
mod reconcile;

pub use cleanup::{CleanupReport, cleanup};
pub use reconcile::{FindingReport, ReconcileReport, final_reconcile, reconcile};

use sqlx::PgPool;

use crate::bus::lag::LagReader;
use crate::bus::topics;
use crate::domain::sale::SaleConfig;
use crate::redis::store::SaleStore;

/// What a job works with.
pub struct JobContext {
    /// PostgreSQL.
    pub db: PgPool,
    /// Redis.
    pub store: SaleStore,
    /// Kafka bootstrap servers.
    pub bootstrap: String,
}

/// A job step that failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// PostgreSQL.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis.
    #[error("redis: {0}")]
    Redis(#[from] crate::redis::store::StoreError),
    /// Kafka lag.
    #[error(transparent)]
    Lag(#[from] crate::bus::lag::LagError),
    /// The topic did not drain in time.
    #[error("the sale's orders did not drain within {0:?} (lag {1})")]
    NotDrained(std::time::Duration, i64),
    /// The sale's Redis state was lost (a shard without its metadata or of
    /// another incarnation): nothing is repaired until the operator
    /// recovered it.
    #[error("shard {0} of the sale lost its Redis state; the operator recovers it first")]
    StateLost(u32),
    /// Redis and PostgreSQL still disagreed at the deadline.
    #[error("redis and the database still disagree after {0:?}: {1}")]
    NotConverged(std::time::Duration, String),
}

impl JobContext {
    /// Waits until the sale's consumer group has no lag, polling each
    /// second, at most until `deadline`.
    pub async fn wait_drained(
        &self,
        config: &SaleConfig,
        deadline: std::time::Instant,
        timeout: std::time::Duration,
    ) -> Result<(), JobError> {
        loop {
            let lag = self.lag(config).await?;
            if lag == 0 {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(JobError::NotDrained(timeout, lag));
            }
            tracing::info!(sale = %config.sale, lag, "waiting for the orders to drain");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    /// The sale's consumer-group lag now.
    pub async fn lag(&self, config: &SaleConfig) -> Result<i64, JobError> {
        let reader = LagReader::new(&self.bootstrap, &topics::consumer_group(&config.sale))?;
        Ok(reader
            .read(&topics::orders_topic(&config.sale))
            .await?
            .total())
    }
}
