//! The status step: what the reconcile saw and decided, written to `.status` (throttled), with the sale's metrics and transition events.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use flashsale_workload::metrics::SaleLabels;
use flashsale_workload::orders::order as orders;
use flashsale_workload::orders::risk as risk_rows;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use crate::context::{Context, MANAGER};
use crate::decide::conditions::{Facts, Troubles, conditions, degradation, verdicts};
use crate::decide::plan::{Action, JobKind, Plan, Refused};
use crate::decide::queue::queue_status;
use crate::decide::scaling::ScalingDecision;
use crate::decide::throttle;
use crate::error::Error;
use crate::events::publish;
use crate::metrics::SaleReading;
use crate::model::crd::{
    ConsumersStatus, FlashSale, FlashSaleStatus, ReconciliationSummary, SaleState, SaleSummary,
    StockStatus,
};
use crate::model::risk::{RiskStatus, TOP_SUSPECTS};
use crate::model::timeline::to_time;
use crate::steps::apply::Applied;
use crate::steps::observe::Observation;

/// What one reconcile produced, for its status.
pub struct Outcome<'a> {
    /// What was read.
    pub obs: &'a Observation,
    /// The consumers' replicas and scaling memory.
    pub scaling: &'a ScalingDecision,
    /// The plan.
    pub decided: &'a Plan,
    /// What applying it found.
    pub applied: &'a Applied,
}

/// Writes the status (an unchanged one not at all, counters at most once per
/// poll interval), records the sale's metrics, and announces a new state once
/// the status says it.
pub async fn write(ctx: &Context, fs: &FlashSale, outcome: &Outcome<'_>) -> Result<(), Error> {
    let now = Utc::now();
    let previous = fs.status.clone().unwrap_or_default();
    let status = FlashSaleStatus {
        summary: summary(ctx, fs, outcome.obs, &previous).await,
        risk: risk(ctx, fs, outcome.obs, &previous).await,
        ..decided_status(fs, outcome, &previous, now)
    };
    record_metrics(ctx, fs, outcome.obs, outcome.decided.state, &status, now);
    // Every write is a watch event, and so another reconcile.
    let uid = fs.metadata.uid.clone().unwrap_or_default();
    let last_write = ctx
        .status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&uid)
        .copied();
    let every: Duration = fs.spec.consumers.poll_interval.into();
    if !throttle::write_now(
        fs.status.as_ref(),
        &status,
        last_write,
        every,
        Instant::now(),
    ) {
        return Ok(());
    }
    patch(ctx, fs, &status).await?;
    ctx.status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid, Instant::now());
    if let Some((reason, note)) = status
        .risk
        .as_ref()
        .and_then(|risk| risk.news(previous.risk.as_ref()))
    {
        publish(ctx, fs, EventType::Normal, reason, "ScoreOrders", note).await;
    }
    if previous.state != status.state {
        let from = previous
            .state
            .map_or("new".to_string(), |s| format!("{s:?}"));
        // The new state is the reason, so each transition is its own event.
        let reason = format!("{:?}", outcome.decided.state);
        let note = format!("The sale went from {from} to {reason}.");
        publish(ctx, fs, EventType::Normal, &reason, "Transition", note).await;
    }
    Ok(())
}

async fn patch(ctx: &Context, fs: &FlashSale, status: &FlashSaleStatus) -> Result<(), Error> {
    let api: Api<FlashSale> =
        Api::namespaced(ctx.client.clone(), &fs.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": FlashSale::api_version(&()),
        "kind": FlashSale::kind(&()),
        "status": status,
    });
    api.patch_status(
        &fs.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await
    .map_err(Error::Status)?;
    Ok(())
}

/// The status from what was observed and decided, but the summary and risk.
fn decided_status(
    fs: &FlashSale,
    outcome: &Outcome<'_>,
    previous: &FlashSaleStatus,
    now: DateTime<Utc>,
) -> FlashSaleStatus {
    let Outcome { obs, decided, .. } = outcome;
    let stock = stock_status(obs);
    let facts = Facts {
        state: decided.state,
        warmed: obs.observed.redis.warmed(),
        paused: fs.spec.paused,
        remaining: stock.remaining,
        consumers: (
            decided.replicas,
            obs.deployment.as_ref().map_or(0, |d| d.ready),
        ),
        reconciled: obs
            .last_run
            .as_ref()
            .map(|r| (r.drift_found, r.drift_repaired)),
        cleaned: decided.state == SaleState::Completed,
        degraded: degradation(&troubles(fs, outcome, stock.total)),
    };
    FlashSaleStatus {
        observed_generation: fs.metadata.generation,
        state: Some(decided.state),
        stock: Some(stock),
        consumers: Some(consumers_status(outcome, previous, now)),
        queue: obs
            .queue
            .zip(obs.config.admission.as_ref())
            .map(|((length, failures), rule)| {
                let closed = !matches!(
                    decided.state,
                    SaleState::Scheduled
                        | SaleState::Warming
                        | SaleState::Warm
                        | SaleState::Live
                        | SaleState::Paused
                );
                queue_status(rule, obs.config.start, now, length, closed, failures)
            }),
        periodic_reconciliations: decided
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::StartJob(JobKind::Periodic(n)) => Some(*n),
                _ => None,
            })
            .chain(previous.periodic_reconciliations)
            .max(),
        summary: None,
        risk: None,
        last_reconciliation: obs.last_run.as_ref().map(|r| ReconciliationSummary {
            time: to_time(r.finished_at),
            drift_found: r.drift_found,
            drift_repaired: r.drift_repaired,
        }),
        conditions: conditions(
            verdicts(&facts),
            &previous.conditions,
            fs.metadata.generation,
            now,
        ),
    }
}

fn troubles(fs: &FlashSale, outcome: &Outcome<'_>, stock_total: i64) -> Troubles {
    let Outcome {
        obs,
        scaling,
        decided,
        applied,
    } = outcome;
    let refused = applied.refused.as_ref().or(decided.refused.as_ref());
    Troubles {
        lost_since: obs.observed.life.lost_since,
        fencing: decided.actions.contains(&Action::FenceLostState),
        warm_mismatch: applied.warm_mismatch.clone(),
        stock_below_sold: refused
            .map(|Refused::StockBelowSold { asked, sold }| (*asked, *sold, stock_total)),
        backpressure: scaling
            .memory
            .busy
            .then(|| (obs.observed.lag, fs.spec.consumers.effective_max_lag())),
        job_failed: decided.state == SaleState::Failed,
        lag_unknown: obs.observed.lag.is_none() && obs.partitions > 0,
    }
}

fn consumers_status(
    outcome: &Outcome<'_>,
    previous: &FlashSaleStatus,
    now: DateTime<Utc>,
) -> ConsumersStatus {
    let Outcome {
        obs,
        scaling,
        decided,
        ..
    } = outcome;
    let observed_replicas = obs.deployment.as_ref().map(|d| d.replicas);
    let last_scale_time = match (&previous.consumers, observed_replicas) {
        (Some(c), Some(replicas)) if replicas == decided.replicas => c.last_scale_time.clone(),
        _ if observed_replicas != Some(decided.replicas) => Some(to_time(now)),
        (c, _) => c.as_ref().and_then(|c| c.last_scale_time.clone()),
    };
    ConsumersStatus {
        replicas: obs.deployment.as_ref().map_or(0, |d| d.ready),
        desired_replicas: decided.replicas,
        lag: obs.observed.lag.unwrap_or_default(),
        last_scale_time,
        low_since: scaling
            .memory
            .low_since
            .and_then(|t| k8s_openapi::jiff::Timestamp::from_microsecond(t.timestamp_micros()).ok())
            .map(MicroTime),
        busy: scaling.memory.busy,
    }
}

fn stock_status(obs: &Observation) -> StockStatus {
    let (total, persisted) = obs
        .stored
        .as_ref()
        .map_or((0, 0), |s| (s.config.stock, s.sold));
    let loaded = obs.observed.redis.metas.iter().any(Option::is_some);
    let remaining = if loaded {
        obs.observed.redis.remaining()
    } else {
        total - persisted
    };
    let reserved = (total - remaining - persisted).max(0);
    StockStatus {
        total,
        reserved,
        persisted,
        remaining,
        sold: reserved + persisted,
        shards: if loaded {
            obs.observed.redis.stocks.clone()
        } else {
            Vec::new()
        },
    }
}

/// The merchant's summary, once the window is over (the last one known
/// while PostgreSQL does not answer).
async fn summary(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
    previous: &FlashSaleStatus,
) -> Option<SaleSummary> {
    if obs.observed.now < fs.spec.timeline().end {
        return None;
    }
    match orders::summary(&ctx.db, obs.config.id).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(sale = %obs.config.sale, error = %e, "orders summary unreadable");
            previous.summary.clone()
        }
    }
}

/// What the risk scorer did, for a sale with `spec.risk` or that had it
/// (the last one known while PostgreSQL does not answer).
async fn risk(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
    previous: &FlashSaleStatus,
) -> Option<RiskStatus> {
    if fs.spec.risk.is_none() && previous.risk.is_none() {
        return None;
    }
    let id = obs.config.id;
    let read = async {
        let summary = risk_rows::summary(&ctx.db, id).await?;
        let suspects = risk_rows::suspects(&ctx.db, id, TOP_SUSPECTS).await?;
        Ok::<_, sqlx::Error>(RiskStatus::of(summary, suspects))
    };
    match read.await {
        Ok(status) => Some(status),
        Err(e) => {
            tracing::warn!(sale = %obs.config.sale, error = %e, "risk summary unreadable");
            previous.risk.clone()
        }
    }
}

/// The sale's series, from the status just decided (written or not).
fn record_metrics(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
    state: SaleState,
    status: &FlashSaleStatus,
    now: DateTime<Utc>,
) {
    let sale = SaleLabels::from(&obs.config.sale);
    let consumers = status.consumers.clone().unwrap_or_default();
    let reading = SaleReading {
        state,
        stock: status.stock.clone().unwrap_or_default(),
        lag: obs.observed.lag,
        max_lag: fs.spec.consumers.effective_max_lag(),
        desired_replicas: consumers.desired_replicas,
        ready_replicas: consumers.replicas,
        backpressure: consumers.busy,
        drift_found: obs.last_run.as_ref().map(|r| r.drift_found),
        reconciled_at: obs.last_run.as_ref().map(|r| r.finished_at),
        timeline: fs.spec.timeline(),
        now,
    };
    ctx.metrics.record_sale(&sale, &reading);
    ctx.metrics.record_conditions(&sale, &status.conditions);
}
