//! `flashsale job reconcile`: observe, plan (pure, in
//! [`crate::domain::reconcile`]), confirm with a second observation, repair,
//! report.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use serde::Serialize;

use super::{JobContext, JobError};
use crate::domain::reconcile::{Finding, Observation, Policy, in_flight_units, plan};
use crate::domain::sale::SaleConfig;
use crate::orders::{reconciliation, sales};

/// One finding and whether it was repaired.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FindingReport {
    /// What was found and the repair planned.
    #[serde(flatten)]
    pub finding: Finding,
    /// Whether the repair changed Redis.
    pub repaired: bool,
}

/// The machine-readable report, printed and kept in `reconciliation_runs`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// `namespace/name`.
    pub sale: String,
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// The consumer group's lag when observed.
    pub lag: i64,
    /// Whether the topic was drained (all checks ran).
    pub drained: bool,
    /// Confirmed differences.
    pub drift_found: i64,
    /// Differences repaired.
    pub drift_repaired: i64,
    /// Every confirmed finding, drift and housekeeping.
    pub details: Vec<FindingReport>,
}

/// Observes the sale: the database first (one snapshot), then each Redis shard
/// atomically, then the lag — in that order, so an order persisted meanwhile
/// is seen in Redis as pending rather than missed.
async fn observe(ctx: &JobContext, config: &SaleConfig) -> Result<(Observation, i64), JobError> {
    let lag = ctx.lag(config).await?;
    let db = reconciliation::snapshot(&ctx.db, config.id).await?;
    let life = sales::find_by_id(&ctx.db, config.id)
        .await?
        .map(|s| s.life)
        .unwrap_or_default();
    let shards =
        try_join_all((0..config.shards).map(|s| ctx.store.snapshot(&config.sale, s))).await?;
    // A lost state is the operator's to recover: repairing toward the
    // database on it would write stock into shards that have no metadata.
    if let Some(incarnation) = life.incarnation.filter(|_| life.opened) {
        let incarnation = incarnation.to_string();
        if let Some(shard) = shards
            .iter()
            .position(|r| r.incarnation.as_deref() != Some(incarnation.as_str()))
        {
            return Err(JobError::StateLost(shard as u32));
        }
    }
    let now_ms = shards.iter().map(|r| r.now_ms).max().unwrap_or_default();
    let redis_generation = shards.first().and_then(|r| r.generation);
    let observation = Observation {
        shards: shards.into_iter().map(|r| r.snapshot).collect(),
        db,
        redis_generation,
        drained: lag == 0,
        now_ms,
    };
    Ok((observation, lag))
}

/// Reconciles the sale once and records the report.
pub async fn reconcile(
    ctx: &JobContext,
    config: &SaleConfig,
    policy: &Policy,
) -> Result<ReconcileReport, JobError> {
    let started_at = Utc::now();
    let (first, mut lag) = observe(ctx, config).await?;
    let mut drained = first.drained;
    let mut findings = plan(&first, policy);
    if findings.iter().any(|f| f.drift) {
        // Only what a second look confirms is drift: a purchase, transfer or
        // cancellation racing the first look is not.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (second, second_lag) = observe(ctx, config).await?;
        lag = second_lag;
        drained &= second.drained;
        let again = plan(&second, policy);
        findings = again
            .into_iter()
            .filter(|f| {
                findings
                    .iter()
                    .any(|g| g.kind == f.kind && g.repair == f.repair)
            })
            .collect();
    }
    let mut details = Vec::with_capacity(findings.len());
    for finding in findings {
        let repaired = ctx.store.repair(&config.sale, &finding.repair).await?;
        details.push(FindingReport { finding, repaired });
    }
    let drift_found = details.iter().filter(|d| d.finding.drift).count() as i64;
    let drift_repaired = details
        .iter()
        .filter(|d| d.finding.drift && d.repaired)
        .count() as i64;
    let report = ReconcileReport {
        sale: config.sale.to_string(),
        started_at,
        lag,
        drained,
        drift_found,
        drift_repaired,
        details,
    };
    let json = serde_json::to_value(&report).expect("reports serialize");
    reconciliation::record_run(
        &ctx.db,
        config.id,
        started_at,
        drift_found,
        drift_repaired,
        &json,
    )
    .await?;
    Ok(report)
}

/// The reconciliation after the end: waits for the sale's orders to drain,
/// then reconciles until a fresh look finds nothing to repair and no
/// reservation without its order (Redis and PostgreSQL agree on the stock
/// and every shopper's units), at most `timeout` in all. Only then is the
/// sale Reconciled; otherwise the Job fails and says what still differs.
pub async fn final_reconcile(
    ctx: &JobContext,
    config: &SaleConfig,
    policy: &Policy,
    timeout: Duration,
) -> Result<ReconcileReport, JobError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        ctx.wait_drained(config, deadline, timeout).await?;
        let report = reconcile(ctx, config, policy).await?;
        let (after, _) = observe(ctx, config).await?;
        let left: Vec<String> = plan(&after, policy)
            .into_iter()
            .filter(|f| f.drift)
            .map(|f| f.detail)
            .collect();
        let in_flight = in_flight_units(&after);
        if after.drained && left.is_empty() && in_flight == 0 {
            return Ok(report);
        }
        if std::time::Instant::now() >= deadline {
            let mut why = left;
            if in_flight > 0 {
                why.push(format!(
                    "{in_flight} units held by reservations without an order"
                ));
            }
            return Err(JobError::NotConverged(timeout, why.join("; ")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
