//! `flashsale job cleanup`: once the sale's orders are drained, a last
//! reconciliation, then the sale's Redis keys go. Orders stay. Idempotent.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::{JobContext, JobError, ReconcileReport, reconcile};
use crate::domain::reconcile::Policy;
use crate::domain::sale::SaleConfig;

/// What cleanup did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupReport {
    /// `namespace/name`.
    pub sale: String,
    /// The last reconciliation, unless an earlier run had started deleting.
    pub reconciliation: Option<ReconcileReport>,
    /// Whether Redis keys were deleted by this run (false: already gone).
    pub deleted: bool,
}

/// Waits up to `drain_timeout` for lag 0, reconciles, deletes the keys.
pub async fn cleanup(
    ctx: &JobContext,
    config: &SaleConfig,
    policy: &Policy,
    drain_timeout: Duration,
) -> Result<CleanupReport, JobError> {
    ctx.wait_drained(config, Instant::now() + drain_timeout, drain_timeout)
        .await?;
    let with_meta = ctx
        .store
        .shards_with_meta(&config.sale, config.shards)
        .await?;
    // Metadata is deleted last: all of it present means nothing was deleted
    // yet and the state is whole enough to reconcile.
    let reconciliation = if with_meta == config.shards {
        Some(reconcile(ctx, config, policy).await?)
    } else {
        None
    };
    if with_meta > 0 {
        // Removed on purpose: the operator must not take it for a loss.
        crate::orders::sales::mark_closed(&ctx.db, config.id).await?;
        ctx.store.delete(&config.sale, config.shards).await?;
    }
    Ok(CleanupReport {
        sale: config.sale.to_string(),
        reconciliation,
        deleted: with_meta > 0,
    })
}
