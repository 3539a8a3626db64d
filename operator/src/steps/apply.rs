//! Step three of a reconcile: carry out the plan's actions, each idempotent,
//! each announced by an event when it changed something.

use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::{SaleConfig, SaleMeta, SaleRef};
use flashsale_workload::domain::stock::shrink_id;
use flashsale_workload::orders::sales;
use flashsale_workload::redis::store::ShrinkOutcome;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;

use crate::context::{Context, MANAGER};
use crate::decide::conditions::lag_words;
use crate::decide::plan::{Action, JobKind, Refused};
use crate::decide::resources::{
    APPLIED_HASH, consumer_deployment, consumer_disruption_budget, consumers_name, job, job_name,
    workload_secret,
};
use crate::error::ApplyError;
use crate::events::publish;
use crate::model::crd::FlashSale;
use crate::steps::observe::Observation;
use crate::steps::warm;

/// What applying found that the status must tell.
#[derive(Debug, Default)]
pub struct Applied {
    /// Warm-up verification failed: Redis did not match the database.
    pub warm_mismatch: Option<String>,
    /// A shrink found fewer unsold units than it removes; nothing changed.
    pub refused: Option<Refused>,
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
    let step = Step { ctx, fs, obs };
    let mut applied = Applied::default();
    for action in actions {
        match *action {
            Action::SyncSaleRow { stock } => step.sync_sale_row(stock).await?,
            Action::EnsureTopics => step.ensure_topics().await?,
            Action::Warm => {
                if let Some(why) = warm::warm(ctx, fs, obs).await? {
                    applied.warm_mismatch = Some(why);
                }
            }
            Action::FenceLostState => warm::fence(ctx, fs, obs).await?,
            Action::BeginRecovery => warm::begin_recovery(ctx, fs, obs).await?,
            Action::Restock => step.restock().await?,
            Action::Shrink { to, generation } => {
                if let Some(refused) = step.shrink(to, generation).await? {
                    applied.refused = Some(refused);
                }
            }
            Action::UndoShrink { generation, to } => step.undo_shrink(generation, to).await?,
            Action::RecordRowStock { stock, generation } => {
                sales::set_stock(&ctx.db, obs.config.id, stock, generation).await?;
            }
            Action::WriteMeta(meta) => step.write_meta(meta).await?,
            Action::ApplyConsumers { replicas } => step.apply_consumers(replicas).await?,
            Action::DeleteConsumers => step.delete_consumers().await?,
            Action::StartJob(kind) => step.start_job(kind).await?,
        }
    }
    Ok(applied)
}

/// One sale's actions, each with the event that tells what it changed.
struct Step<'a> {
    ctx: &'a Context,
    fs: &'a FlashSale,
    obs: &'a Observation,
}

impl Step<'_> {
    fn sale(&self) -> &SaleRef {
        &self.obs.config.sale
    }

    async fn tell(&self, reason: &str, action: &str, note: String) {
        publish(self.ctx, self.fs, EventType::Normal, reason, action, note).await;
    }

    async fn sync_sale_row(&self, stock: i64) -> Result<(), ApplyError> {
        let config = SaleConfig {
            stock,
            ..self.obs.config.clone()
        };
        let stored = sales::upsert(&self.ctx.db, &config).await?;
        match &self.obs.stored {
            None => {
                let note = format!("sale row created with {stock} units");
                self.tell("SaleRowCreated", "CreateRow", note).await;
            }
            Some(before) if before.config.stock != stored.stock => {
                let note = format!(
                    "stock {} -> {} in the database",
                    before.config.stock, stored.stock
                );
                self.tell("StockChanged", "UpdateRow", note).await;
            }
            Some(_) => {
                let note = "window, limit or payment timeout updated".into();
                self.tell("SaleRowUpdated", "UpdateRow", note).await;
            }
        }
        Ok(())
    }

    async fn ensure_topics(&self) -> Result<(), ApplyError> {
        let sale = self.sale();
        let (orders, dlq) = (topics::orders_topic(sale), topics::dead_letter_topic(sale));
        let partitions = self.fs.spec.consumers.max_replicas;
        self.ctx.admin.ensure_topics(&[&orders], partitions).await?;
        // Dead letters are rare and read by a person: one partition, so a
        // marketplace's thousand sales do not hold a thousand more per replica.
        self.ctx.admin.ensure_topics(&[&dlq], 1).await?;
        let reason = if self.obs.partitions == 0 {
            "TopicsCreated"
        } else {
            "PartitionsAdded"
        };
        let note = format!(
            "The topic {orders} has {partitions} partitions (consumers.maxReplicas), {dlq} one."
        );
        self.tell(reason, "CreateTopics", note).await;
        Ok(())
    }

    async fn restock(&self) -> Result<(), ApplyError> {
        let Some(row) = self.obs.stored.as_ref().map(|s| &s.config) else {
            return Ok(());
        };
        let restocked = self
            .ctx
            .store
            .restock(self.sale(), row.stock, row.generation)
            .await?;
        if let Some(delta) = restocked {
            let verb = if delta >= 0 { "added" } else { "removed" };
            let note = format!(
                "{} units {verb} in Redis (stock {})",
                delta.abs(),
                row.stock
            );
            self.tell("Restocked", "Restock", note).await;
        }
        Ok(())
    }

    /// Units leave Redis first, then the database; refused (nothing changed)
    /// when fewer units are unsold than the shrink removes.
    async fn shrink(&self, to: i64, generation: i64) -> Result<Option<Refused>, ApplyError> {
        let Some(row) = self.obs.stored.as_ref().map(|s| &s.config) else {
            return Ok(None);
        };
        let config = &self.obs.config;
        let outcome = self
            .ctx
            .store
            .shrink(self.sale(), config.shards, row.stock, to, generation)
            .await?;
        match outcome {
            ShrinkOutcome::Shrunk => {
                sales::set_stock(&self.ctx.db, config.id, to, generation).await?;
                let note = format!(
                    "stock {} -> {to}: the units left Redis first, then the database",
                    row.stock
                );
                self.tell("StockChanged", "Shrink", note).await;
                Ok(None)
            }
            ShrinkOutcome::NotEnoughUnsold { unsold } => Ok(Some(Refused::StockBelowSold {
                asked: to,
                sold: row.stock - unsold,
            })),
        }
    }

    async fn undo_shrink(&self, generation: i64, to: i64) -> Result<(), ApplyError> {
        let returned = self
            .ctx
            .store
            .undo_shrink(
                self.sale(),
                self.obs.config.shards,
                &shrink_id(generation, to),
            )
            .await?;
        if returned > 0 {
            let note =
                format!("{returned} units of an unfinished shrink to {to} are on sale again");
            self.tell("ShrinkUndone", "Shrink", note).await;
        }
        Ok(())
    }

    async fn write_meta(&self, meta: SaleMeta) -> Result<(), ApplyError> {
        let obs = self.obs;
        self.ctx
            .store
            .write_meta(self.sale(), obs.config.shards, &meta)
            .await?;
        let before = obs.observed.redis.metas.first().copied().flatten();
        // The kill switch's own events come from its first step
        // (steps::kill_switch), which flipped it already.
        if before.is_none_or(|b| b.busy == meta.busy) {
            return Ok(());
        }
        let lag = lag_words(obs.observed.lag);
        let (type_, reason, note) = if meta.busy {
            (
                EventType::Warning,
                "BackpressureOn",
                format!(
                    "{lag} orders wait for the consumers, above maxLag: purchases are refused with BUSY."
                ),
            )
        } else {
            (
                EventType::Normal,
                "BackpressureOff",
                format!("{lag} orders wait for the consumers: purchases are accepted again."),
            )
        };
        publish(self.ctx, self.fs, type_, reason, "Backpressure", note).await;
        Ok(())
    }

    async fn apply_consumers(&self, replicas: i32) -> Result<(), ApplyError> {
        let (ctx, fs, obs) = (self.ctx, self.fs, self.obs);
        let namespace = self.sale().namespace.as_str();
        let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
        let name = consumers_name(&self.sale().name);
        let mut desired = consumer_deployment(fs, &ctx.workload);
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
            // The plan's count goes with the apply: a Deployment created
            // without one starts a pod (the default is 1), which a
            // Scheduled sale must not run.
            if let Some(spec) = desired.spec.as_mut() {
                spec.replicas = Some(replicas);
            }
            let params = PatchParams::apply(MANAGER).force();
            api.patch(&name, &params, &Patch::Apply(desired)).await?;
            // Its budget with it: applied when the Deployment is, it is
            // owned by the sale and collected with it.
            let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), namespace);
            let budget = consumer_disruption_budget(fs);
            budgets.patch(&name, &params, &Patch::Apply(budget)).await?;
        }
        let current = obs.deployment.as_ref().map(|d| d.replicas);
        if current == Some(replicas) {
            return Ok(());
        }
        if !apply {
            let scale = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
            api.patch_scale(&name, &PatchParams::default(), &scale)
                .await?;
        }
        let from = current.map_or("none".to_string(), |c| c.to_string());
        let note = format!(
            "Consumers scaled from {from} to {replicas}: {} orders wait.",
            lag_words(obs.observed.lag)
        );
        self.tell("Scaled", "Scale", note).await;
        Ok(())
    }

    async fn delete_consumers(&self) -> Result<(), ApplyError> {
        // Consumers serving a whole namespace stop for it too.
        sales::mark_drained(&self.ctx.db, self.obs.config.id).await?;
        if self.obs.deployment.is_some() {
            let sale = self.sale();
            let api: Api<Deployment> = Api::namespaced(self.ctx.client.clone(), &sale.namespace);
            api.delete(&consumers_name(&sale.name), &DeleteParams::background())
                .await?;
            let budgets: Api<PodDisruptionBudget> =
                Api::namespaced(self.ctx.client.clone(), &sale.namespace);
            let deleted = budgets
                .delete(&consumers_name(&sale.name), &DeleteParams::background())
                .await;
            // One made before budgets were is not there.
            if let Err(e) = deleted
                && !matches!(&e, kube::Error::Api(status) if status.code == 404)
            {
                return Err(e.into());
            }
            let note = "the sale is over".into();
            self.tell("ConsumersRemoved", "Delete", note).await;
        }
        Ok(())
    }

    async fn start_job(&self, kind: JobKind) -> Result<(), ApplyError> {
        let (ctx, fs) = (self.ctx, self.fs);
        let sale = self.sale();
        apply_secret(ctx, fs, &sale.namespace).await?;
        let api: Api<Job> = Api::namespaced(ctx.client.clone(), &sale.namespace);
        let job = job(fs, &ctx.workload, kind);
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        // A reason per kind: the Recorder folds events of one reason into
        // a series, which would hide the later ones.
        let (reason, what) = match kind {
            JobKind::Periodic(n) => (
                "ReconcileJobStarted",
                format!("periodic reconciliation #{n}"),
            ),
            JobKind::Final => ("FinalReconcileJobStarted", "final reconciliation".into()),
            JobKind::Cleanup => ("CleanupJobStarted", "cleanup".into()),
        };
        let note = format!("{what}: Job {}", job_name(&sale.name, kind));
        self.tell(reason, "StartJob", note).await;
        Ok(())
    }
}
