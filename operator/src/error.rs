//! The reconcile's errors: one type for a failed action, one for the
//! reconcile, by step.

use crate::model::sale::InvalidSpec;

/// A failed observation.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The resource cannot be acted on.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    /// PostgreSQL.
    #[error("failed to read the sale's row: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis.
    #[error("failed to read the sale's Redis state: {0}")]
    Redis(#[from] flashsale_workload::redis::store::StoreError),
    /// Kafka topics.
    #[error("failed to read the sale's topics: {0}")]
    Kafka(#[from] flashsale_workload::bus::admin::AdminError),
    /// Kubernetes.
    #[error("failed to read the sale's Deployment or Jobs: {0}")]
    Kube(#[from] kube::Error),
}

/// A failed action.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// PostgreSQL.
    #[error("failed to write the sale's row: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis.
    #[error("failed to change the sale's Redis state: {0}")]
    Redis(#[from] flashsale_workload::redis::store::StoreError),
    /// Kafka.
    #[error("failed to create the sale's topics: {0}")]
    Kafka(#[from] flashsale_workload::bus::admin::AdminError),
    /// Kubernetes.
    #[error("failed to apply the sale's Deployment or Job: {0}")]
    Kube(#[from] kube::Error),
    /// The sale's Secret name is taken by a Secret it does not own.
    #[error(
        "the Secret {0} exists and does not belong to this FlashSale; it is left alone (rename or delete it)"
    )]
    SecretNotOwned(String),
}

/// A failed reconcile, by step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resource cannot be acted on until it changes.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    /// Reading failed.
    #[error(transparent)]
    Observe(ObserveError),
    /// An action failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Writing the status failed.
    #[error("failed to write the status: {0}")]
    Status(kube::Error),
    /// Removing the sale's state on delete failed.
    #[error("failed to clean up the deleted sale: {0}")]
    Finalizer(String),
    /// Deletion waits for something (an error, so the finalizer stays on).
    #[error("deletion waits for {0}")]
    Waiting(&'static str),
}

impl From<ObserveError> for Error {
    fn from(e: ObserveError) -> Self {
        match e {
            ObserveError::Invalid(i) => Self::Invalid(i),
            other => Self::Observe(other),
        }
    }
}

impl Error {
    /// The metric and event label of the failing step.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::Observe(_) => "observe",
            Self::Apply(_) => "apply",
            Self::Status(_) => "status",
            Self::Finalizer(_) => "finalizer",
            Self::Waiting(_) => "waiting",
        }
    }
}
