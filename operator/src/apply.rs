//! Step three of a reconcile: carry out the plan's actions, each idempotent,
//! each announced by an event when it changed something.

use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::domain::stock::shrink_id;
use flashsale_workload::orders::sales;
use flashsale_workload::redis::store::ShrinkOutcome;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;

use crate::context::{Context, MANAGER};
use crate::crd::FlashSale;
use crate::error::ApplyError;
use crate::events::publish;
use crate::observe::Observation;
use crate::plan::{Action, JobKind, Refused};
use crate::resources::{
    APPLIED_HASH, consumer_deployment, consumers_name, job, job_name, workload_secret,
};
use crate::warm;

/// What applying found that the status must tell.
#[derive(Debug, Default)]
pub struct Applied {
    /// Warm-up verification failed: Redis did not match the database.
    pub warm_mismatch: Option<String>,
    /// A shrink found fewer unsold units than it removes; nothing changed.
    pub refused: Option<Refused>,
}

/// A lag for people: the count, or that it could not be read.
pub fn lag_words(lag: Option<i64>) -> String {
    lag.map_or("an unknown number of".to_string(), |l| l.to_string())
}

/// Server-side applies the sale's Secret (idempotent), never over a Secret
/// of that name that the sale does not own.
async fn apply_secret(ctx: &Context, fs: &FlashSale, namespace: &str) -> Result<(), ApplyError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = workload_secret(fs, &ctx.workload);
    let name = secret.metadata.name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        let uid = fs.metadata.uid.as_deref();
        let owned = existing
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(o.uid.as_str()) == uid);
        if !owned {
            return Err(ApplyError::SecretNotOwned(name));
        }
    }
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(secret),
    )
    .await?;
    Ok(())
}

/// Runs `actions` in order.
pub async fn apply(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
    actions: &[Action],
) -> Result<Applied, ApplyError> {
    let mut applied = Applied::default();
    let config = &obs.config;
    let sale = &config.sale;
    let namespace = sale.namespace.as_str();
    let normal = EventType::Normal;
    for action in actions {
        match *action {
            Action::SyncSaleRow { stock } => {
                let stored = sales::upsert(
                    &ctx.db,
                    &SaleConfig {
                        stock,
                        ..config.clone()
                    },
                )
                .await?;
                match &obs.stored {
                    None => {
                        publish(
                            ctx,
                            fs,
                            normal,
                            "SaleRowCreated",
                            "CreateRow",
                            format!("sale row created with {stock} units"),
                        )
                        .await
                    }
                    Some(before) if before.config.stock != stored.stock => {
                        publish(
                            ctx,
                            fs,
                            normal,
                            "StockChanged",
                            "UpdateRow",
                            format!(
                                "stock {} -> {} in the database",
                                before.config.stock, stored.stock
                            ),
                        )
                        .await;
                    }
                    Some(_) => {
                        publish(
                            ctx,
                            fs,
                            normal,
                            "SaleRowUpdated",
                            "UpdateRow",
                            "window, limit or payment timeout updated".into(),
                        )
                        .await
                    }
                }
            }
            Action::EnsureTopics => {
                let (orders, dlq) = (topics::orders_topic(sale), topics::dead_letter_topic(sale));
                ctx.admin
                    .ensure_topics(&[&orders, &dlq], fs.spec.consumers.max_replicas)
                    .await?;
                publish(
                    ctx,
                    fs,
                    normal,
                    if obs.partitions == 0 {
                        "TopicsCreated"
                    } else {
                        "PartitionsAdded"
                    },
                    "CreateTopics",
                    format!(
                        "The topics {orders} and {dlq} have {} partitions (consumers.maxReplicas).",
                        fs.spec.consumers.max_replicas
                    ),
                )
                .await;
            }
            Action::Warm => {
                if let Some(why) = warm::warm(ctx, fs, obs).await? {
                    applied.warm_mismatch = Some(why);
                }
            }
            Action::FenceLostState => warm::fence(ctx, fs, obs).await?,
            Action::BeginRecovery => warm::begin_recovery(ctx, fs, obs).await?,
            Action::Restock => {
                let Some(row) = obs.stored.as_ref().map(|s| &s.config) else {
                    continue;
                };
                if let Some(delta) = ctx.store.restock(sale, row.stock, row.generation).await? {
                    let verb = if delta >= 0 { "added" } else { "removed" };
                    publish(
                        ctx,
                        fs,
                        normal,
                        "Restocked",
                        "Restock",
                        format!(
                            "{} units {verb} in Redis (stock {})",
                            delta.abs(),
                            row.stock
                        ),
                    )
                    .await;
                }
            }
            Action::Shrink { to, generation } => {
                let Some(row) = obs.stored.as_ref().map(|s| &s.config) else {
                    continue;
                };
                let outcome = ctx
                    .store
                    .shrink(sale, config.shards, row.stock, to, generation)
                    .await?;
                match outcome {
                    ShrinkOutcome::Shrunk => {
                        sales::set_stock(&ctx.db, config.id, to, generation).await?;
                        let note = format!(
                            "stock {} -> {to}: the units left Redis first, then the database",
                            row.stock
                        );
                        publish(ctx, fs, normal, "StockChanged", "Shrink", note).await;
                    }
                    ShrinkOutcome::NotEnoughUnsold { unsold } => {
                        let accepted = row.stock - unsold;
                        applied.refused = Some(Refused::StockBelowSold {
                            asked: to,
                            sold: accepted,
                        });
                    }
                }
            }
            Action::UndoShrink { generation, to } => {
                let returned = ctx
                    .store
                    .undo_shrink(sale, config.shards, &shrink_id(generation, to))
                    .await?;
                if returned > 0 {
                    let note = format!(
                        "{returned} units of an unfinished shrink to {to} are on sale again"
                    );
                    publish(ctx, fs, normal, "ShrinkUndone", "Shrink", note).await;
                }
            }
            Action::RecordRowStock { stock, generation } => {
                sales::set_stock(&ctx.db, config.id, stock, generation).await?;
            }
            Action::WriteMeta(meta) => {
                ctx.store.write_meta(sale, config.shards, &meta).await?;
                let before = obs.observed.redis.metas.first().copied().flatten();
                // The kill switch's own events come from its first step
                // (controller::kill_switch), which flipped it already.
                if before.is_some_and(|b| b.busy != meta.busy) {
                    let (type_, reason, note) = if meta.busy {
                        (
                            EventType::Warning,
                            "BackpressureOn",
                            format!(
                                "{} orders wait for the consumers, above maxLag: purchases are refused with BUSY.",
                                lag_words(obs.observed.lag)
                            ),
                        )
                    } else {
                        (
                            normal,
                            "BackpressureOff",
                            format!(
                                "{} orders wait for the consumers: purchases are accepted again.",
                                lag_words(obs.observed.lag)
                            ),
                        )
                    };
                    publish(ctx, fs, type_, reason, "Backpressure", note).await;
                }
            }
            Action::ApplyConsumers { replicas } => {
                let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
                let name = consumers_name(&sale.name);
                let desired = consumer_deployment(fs, &ctx.workload);
                let hash = desired
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(APPLIED_HASH))
                    .cloned();
                // Applying an unchanged object costs the API server a merge
                // on every reconcile: only what changed is applied.
                let apply = obs.deployment.as_ref().and_then(|d| d.applied_hash.clone()) != hash;
                if apply {
                    apply_secret(ctx, fs, namespace).await?;
                    // The plan's count goes with the apply: a Deployment
                    // created without one starts a pod (the default is 1),
                    // which a Scheduled sale must not run.
                    let mut desired = desired;
                    if let Some(spec) = desired.spec.as_mut() {
                        spec.replicas = Some(replicas);
                    }
                    api.patch(
                        &name,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(desired),
                    )
                    .await?;
                }
                let current = obs.deployment.as_ref().map(|d| d.replicas);
                if current != Some(replicas) {
                    if !apply {
                        api.patch_scale(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
                        )
                        .await?;
                    }
                    let from = current.map_or("none".to_string(), |c| c.to_string());
                    let note = format!(
                        "Consumers scaled from {from} to {replicas}: {} orders wait.",
                        lag_words(obs.observed.lag)
                    );
                    publish(ctx, fs, normal, "Scaled", "Scale", note).await;
                }
            }
            Action::DeleteConsumers => {
                // Consumers serving a whole namespace stop for it too.
                sales::mark_drained(&ctx.db, config.id).await?;
                if obs.deployment.is_some() {
                    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
                    api.delete(&consumers_name(&sale.name), &DeleteParams::background())
                        .await?;
                    publish(
                        ctx,
                        fs,
                        normal,
                        "ConsumersRemoved",
                        "Delete",
                        "the sale is over".into(),
                    )
                    .await;
                }
            }
            Action::StartJob(kind) => {
                apply_secret(ctx, fs, namespace).await?;
                let api: Api<Job> = Api::namespaced(ctx.client.clone(), namespace);
                match api
                    .create(&PostParams::default(), &job(fs, &ctx.workload, kind))
                    .await
                {
                    Ok(_) => {
                        // A reason per kind: the Recorder folds events of one
                        // reason into a series, which would hide the later ones.
                        let (reason, what) = match kind {
                            JobKind::Periodic(n) => (
                                "ReconcileJobStarted",
                                format!("periodic reconciliation #{n}"),
                            ),
                            JobKind::Final => {
                                ("FinalReconcileJobStarted", "final reconciliation".into())
                            }
                            JobKind::Cleanup => ("CleanupJobStarted", "cleanup".into()),
                        };
                        publish(
                            ctx,
                            fs,
                            normal,
                            reason,
                            "StartJob",
                            format!("{what}: Job {}", job_name(&sale.name, kind)),
                        )
                        .await;
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(applied)
}
