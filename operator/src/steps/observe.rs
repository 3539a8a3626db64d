//! Step one of a reconcile: read the resource's world — the database row,
//! the topics, Redis, the consumer group's lag, the owned Deployment and Jobs,
//! the last reconciliation — without changing anything.

use chrono::Utc;
use flashsale_workload::bus::lag::GroupLag;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::{LoadedSale, SaleConfig, SaleRef};
use flashsale_workload::domain::stock::parse_shrink_id;
use flashsale_workload::orders::reconciliation::{RunSummary, latest_run};
use flashsale_workload::orders::sales::{self, StoredSale};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;

use crate::context::Context;
use crate::decide::plan::{JobPhase, Observed, RowFacts};
use crate::decide::queue::derived_rate;
use crate::decide::resources::{
    APPLIED_HASH, JOB_INDEX_LABEL, JOB_KIND_LABEL, SALE_LABEL, consumers_name,
};
use crate::error::ObserveError;
use crate::model::crd::FlashSale;
use crate::model::sale::sale_config;

/// The consumer Deployment as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentFacts {
    /// spec.replicas.
    pub replicas: i32,
    /// status.readyReplicas.
    pub ready: i32,
    /// The hash of what the operator last applied.
    pub applied_hash: Option<String>,
}

/// Everything a reconcile knows.
pub struct Observation {
    /// What the plan reads.
    pub observed: Observed,
    /// The sale as configured by its spec (stock and generation from the row, if any).
    pub config: SaleConfig,
    /// The row as stored.
    pub stored: Option<StoredSale>,
    /// The consumer Deployment.
    pub deployment: Option<DeploymentFacts>,
    /// Partitions of the order topic (0 until created).
    pub partitions: i32,
    /// The last reconciliation run.
    pub last_run: Option<RunSummary>,
    /// A queued sale's line length and refused challenges, while Redis
    /// holds the sale (`None` when it could not be read: only the status
    /// shows it).
    pub queue: Option<(u64, u64)>,
    /// Whether orders may flow (Redis holds the sale, or held it until it
    /// was lost): only then is the lag read.
    pub loaded: bool,
    /// The consumer group's offsets the lag was computed from.
    pub offsets: Option<GroupLag>,
}

fn job_phase(job: &Job) -> JobPhase {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    let has = |t: &str| {
        conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if has("Complete") {
        JobPhase::Succeeded
    } else if has("Failed") {
        JobPhase::Failed
    } else {
        JobPhase::Running
    }
}

/// Reads everything about `fs`.
pub async fn observe(ctx: &Context, fs: &FlashSale) -> Result<Observation, ObserveError> {
    let spec_config = sale_config(fs, i64::from(fs.spec.stock), 1)?;
    let stored = sales::find_by_id(&ctx.db, spec_config.id).await?;
    let mut config = match &stored {
        Some(stored) => SaleConfig {
            stock: i64::from(fs.spec.stock),
            generation: stored.config.generation,
            ..spec_config
        },
        None => spec_config,
    };
    if let (Some(rule), None) = (config.admission.as_mut(), fs.spec.admission.rate_per_second) {
        let stored_rate = stored
            .as_ref()
            .and_then(|s| s.config.admission.map(|a| a.rate_per_sec));
        rule.rate_per_sec = derived_rate(ctx.api_capacity, stored_rate, Utc::now() >= config.start);
    }
    let life = stored.as_ref().map(|s| s.life).unwrap_or_default();
    let row = stored.as_ref().map(|s| row_facts(s, &config));
    let sale = &config.sale;
    let (orders, dlq) = (topics::orders_topic(sale), topics::dead_letter_topic(sale));
    let partitions = ctx.admin.partitions(&[&orders, &dlq]).await?;
    let redis = ctx.store.loaded(sale, config.shards).await?;
    let pending_shrinks = pending_shrinks(ctx, &config, &redis).await?;
    // Orders exist only while Redis holds the sale (purchases need its
    // metadata) or held it until it was lost: a scheduled or cleaned-up sale
    // has no lag and keeps no Kafka client (each costs threads and memory).
    let loaded = redis.metas.iter().any(Option::is_some)
        || life.lost_since.is_some()
        || (life.opened && !stored.as_ref().is_some_and(|s| s.drained));
    let offsets = read_offsets(ctx, &config, loaded, partitions).await;
    let lag = if loaded {
        offsets.as_ref().map(GroupLag::total)
    } else {
        Some(0)
    };
    // The instant of the lag reading: scaling windows are measured from it.
    let now = Utc::now();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &sale.namespace);
    let owned = jobs
        .list(&ListParams::default().labels(&format!("{SALE_LABEL}={}", sale.name)))
        .await?;
    let seen = jobs_seen(&owned.items);
    let deployment = consumers(ctx, sale).await?;
    let last_run = latest_run(&ctx.db, config.id).await?;
    let queue = match config.admission {
        Some(_) if redis.warmed() => ctx.store.queue_facts(sale).await.ok(),
        _ => None,
    };
    Ok(Observation {
        observed: Observed {
            now,
            row,
            // maxReplicas is also the partition count: a raised one adds partitions.
            topics_ready: partitions > 0 && partitions >= fs.spec.consumers.max_replicas,
            redis,
            life,
            pending_shrinks,
            lag,
            final_job: seen.final_job,
            cleanup_job: seen.cleanup_job,
            periodic_job: seen.periodic_job,
            periodic_started: fs.status.as_ref().and_then(|s| s.periodic_reconciliations),
        },
        config,
        stored,
        deployment,
        partitions,
        last_run,
        queue,
        loaded,
        offsets,
    })
}

/// The stored row as the plan sees it, compared with the spec's config.
fn row_facts(stored: &StoredSale, config: &SaleConfig) -> RowFacts {
    let row = &stored.config;
    RowFacts {
        stock: row.stock,
        sold: stored.sold,
        generation: row.generation,
        matches_spec: row.sku == config.sku
            && row.start == config.start
            && row.end == config.end
            && row.purchase_limit == config.purchase_limit
            && row.shards == config.shards
            && row.payment_timeout == config.payment_timeout
            && row.purchase_token_ttl == config.purchase_token_ttl
            && row.admission == config.admission,
    }
}

/// Shrinks begun in Redis past the applied generation, to finish or undo.
async fn pending_shrinks(
    ctx: &Context,
    config: &SaleConfig,
    redis: &LoadedSale,
) -> Result<Vec<((i64, i64), i64)>, ObserveError> {
    let Some(applied) = redis.generation.filter(|_| redis.warmed()) else {
        return Ok(Vec::new());
    };
    Ok(ctx
        .store
        .pending_shrinks(&config.sale, config.shards, applied)
        .await?
        .into_iter()
        .filter_map(|(id, units)| Some((parse_shrink_id(&id)?, units)))
        .collect())
}

/// The consumer group's offsets: none for a sale that holds no orders, or
/// when they cannot be read.
async fn read_offsets(
    ctx: &Context,
    config: &SaleConfig,
    loaded: bool,
    partitions: i32,
) -> Option<GroupLag> {
    if !loaded || partitions == 0 {
        return None;
    }
    group_offsets(ctx, &config.sale).await
}

/// The lag of the sale's consumer group over its order topic, `None` when
/// it cannot be read.
pub async fn group_lag(ctx: &Context, config: &SaleConfig) -> Option<i64> {
    group_offsets(ctx, &config.sale)
        .await
        .as_ref()
        .map(GroupLag::total)
}

/// The offsets of `sale`'s consumer group on its order topic, `None` when
/// they cannot be read.
pub async fn group_offsets(ctx: &Context, sale: &SaleRef) -> Option<GroupLag> {
    let (group, topic) = (topics::consumer_group(sale), topics::orders_topic(sale));
    match ctx.lag.read_of(&group, &topic).await {
        Ok(offsets) => Some(offsets),
        Err(e) => {
            tracing::warn!(%sale, error = %e, "lag unreadable");
            None
        }
    }
}

/// The sale's Jobs by kind: the final and cleanup ones, the latest periodic.
#[derive(Debug, Default, PartialEq, Eq)]
struct JobsSeen {
    final_job: Option<JobPhase>,
    cleanup_job: Option<JobPhase>,
    periodic_job: Option<(u64, JobPhase)>,
}

fn jobs_seen(jobs: &[Job]) -> JobsSeen {
    let mut seen = JobsSeen::default();
    for job in jobs {
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let phase = job_phase(job);
        match labels.get(JOB_KIND_LABEL).map(String::as_str) {
            Some("final") => seen.final_job = Some(phase),
            Some("cleanup") => seen.cleanup_job = Some(phase),
            Some("periodic") => {
                let index = labels
                    .get(JOB_INDEX_LABEL)
                    .and_then(|i| i.parse().ok())
                    .unwrap_or_default();
                if seen.periodic_job.is_none_or(|(latest, _)| index > latest) {
                    seen.periodic_job = Some((index, phase));
                }
            }
            _ => {}
        }
    }
    seen
}

/// The sale's consumer Deployment, if it exists.
async fn consumers(ctx: &Context, sale: &SaleRef) -> Result<Option<DeploymentFacts>, ObserveError> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &sale.namespace);
    Ok(deployments
        .get_opt(&consumers_name(&sale.name))
        .await?
        .map(|d| DeploymentFacts {
            replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready: d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0),
            applied_hash: d
                .metadata
                .annotations
                .and_then(|mut a| a.remove(APPLIED_HASH)),
        }))
}
