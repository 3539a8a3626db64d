//! The jobs the operator runs for a sale: `flashsale job reconcile` and
//! `flashsale job cleanup`.

mod cleanup;
mod reconcile;

pub use cleanup::{CleanupReport, cleanup};
pub use reconcile::{FindingReport, ReconcileReport, reconcile};

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
}

impl JobContext {
    /// The sale's consumer-group lag now.
    pub async fn lag(&self, config: &SaleConfig) -> Result<i64, JobError> {
        let reader = LagReader::new(&self.bootstrap, &topics::consumer_group(&config.sale))?;
        Ok(reader
            .read(&topics::orders_topic(&config.sale))
            .await?
            .total())
    }
}
