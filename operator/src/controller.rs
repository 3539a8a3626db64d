//! The reconcile loop: `Controller` over FlashSales and what they own, the
//! finalizer, and the fixed steps observe → plan → apply → status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use flashsale_workload::bus::admin::AdminError;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::SaleMeta;
use flashsale_workload::metrics::SaleLabels;
use flashsale_workload::orders::{order as orders, sales};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use rdkafka::error::RDKafkaErrorCode;

use crate::apply::{Applied, apply};
use crate::conditions::{Facts, conditions, verdicts};
use crate::context::{Context, FINALIZER, MANAGER, sale_config, to_time};
use crate::crd::{
    ConsumersStatus, FlashSale, FlashSaleStatus, MinuteSales, ReconciliationSummary, SaleState,
    SaleSummary, StockStatus,
};
use crate::error::Error;
use crate::events::publish;
use crate::metrics::SaleReading;
use crate::observe::{Observation, observe};
use crate::plan::{Action, JobKind, Plan, Refused, Wanted, plan};
use crate::resources::consumers_name;
use crate::scaling::{ScalingDecision, ScalingMemory, ScalingSpec, desired_replicas, next_check};

fn scaling_spec(fs: &FlashSale) -> ScalingSpec {
    let c = &fs.spec.consumers;
    ScalingSpec {
        min_replicas: c.min_replicas,
        max_replicas: c.max_replicas,
        lag_per_replica: i64::from(c.lag_per_replica),
        scale_down_stabilization: c.scale_down_stabilization.into(),
        max_lag: c.effective_max_lag(),
    }
}

fn scaling_memory(fs: &FlashSale) -> ScalingMemory {
    let consumers = fs.status.as_ref().and_then(|s| s.consumers.as_ref());
    ScalingMemory {
        low_since: consumers
            .and_then(|c| c.low_since.as_ref())
            .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond())),
        busy: consumers.is_some_and(|c| c.busy),
    }
}

/// One pass: observe, decide scaling and the plan.
async fn decide(
    ctx: &Context,
    fs: &FlashSale,
) -> Result<(Observation, ScalingDecision, Plan), Error> {
    let obs = observe(ctx, fs).await?;
    let spec = scaling_spec(fs);
    let current = obs
        .deployment
        .as_ref()
        .map_or(spec.min_replicas, |d| d.replicas);
    let scaling = desired_replicas(
        &spec,
        obs.observed.lag,
        obs.partitions,
        current,
        scaling_memory(fs),
        obs.observed.now,
    );
    let meta = SaleMeta {
        warmed: true,
        ..obs.config.meta(true, fs.spec.paused, scaling.memory.busy)
    };
    let wanted = Wanted {
        stock: i64::from(fs.spec.stock),
        paused: fs.spec.paused,
        meta,
        replicas: scaling.replicas,
        scaling_check: next_check(&spec, &scaling.memory),
        recovery_grace: ctx.workload.purchase_budget.settled_after(),
    };
    let decided = plan(&fs.spec.timeline(), &wanted, &obs.observed);
    Ok((obs, scaling, decided))
}

/// Whether an action changes what the next observation sees in a way the plan
/// must look at again before the status is written.
fn changes_observation(action: &Action) -> bool {
    matches!(
        action,
        Action::SyncSaleRow { .. }
            | Action::EnsureTopics
            | Action::Warm
            | Action::Restock
            | Action::Shrink { .. }
            | Action::UndoShrink { .. }
            | Action::RecordRowStock { .. }
            | Action::FenceLostState
            | Action::BeginRecovery
    )
}

/// The kill switch first, from the spec alone: PostgreSQL or Kafka being
/// down must not delay `spec.paused` reaching the shards.
async fn kill_switch(ctx: &Context, fs: &FlashSale) -> Result<(), Error> {
    let config = sale_config(fs, i64::from(fs.spec.stock), 1)?;
    match ctx
        .store
        .set_paused(&config.sale, config.shards, fs.spec.paused)
        .await
    {
        Ok(true) => {
            let (reason, note) = if fs.spec.paused {
                (
                    "Paused",
                    "The kill switch is on: purchases are refused with PAUSED.",
                )
            } else {
                (
                    "Resumed",
                    "The kill switch is off: purchases are accepted again.",
                )
            };
            publish(
                ctx,
                fs,
                EventType::Normal,
                reason,
                "KillSwitch",
                note.into(),
            )
            .await;
        }
        Ok(false) => {}
        // Redis down: nothing sells anyway; the next pass tries again.
        Err(e) => tracing::warn!(sale = %config.sale, error = %e, "kill switch not applied"),
    }
    Ok(())
}

async fn reconcile_sale(fs: Arc<FlashSale>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    kill_switch(&ctx, &fs).await?;
    let mut pass = 0;
    let (obs, scaling, decided, applied) = loop {
        let (obs, scaling, decided) = decide(&ctx, &fs).await?;
        let applied = apply(&ctx, &fs, &obs, &decided.actions).await?;
        pass += 1;
        if pass == 3
            || !decided.actions.iter().any(changes_observation)
            || applied.warm_mismatch.is_some()
        {
            break (obs, scaling, decided, applied);
        }
    };
    if matches!(decided.state, SaleState::Completed) {
        ctx.forget_lag_reader(&obs.config.id.to_string());
    }
    write_status(&ctx, &fs, &obs, &scaling, &decided, &applied).await?;
    Ok(Requeue::requeue(decided.wake_in))
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
        Ok(s) => Some(SaleSummary {
            orders: s.orders,
            sold: s.paid + s.unpaid,
            paid: s.paid,
            unpaid: s.unpaid,
            cancelled: s.cancelled,
            timed_out: s.timed_out,
            failed: s.failed,
            most_by_one_shopper: s.most_by_one_shopper,
            per_minute: (s.per_minute.into_iter())
                .map(|(minute, units)| MinuteSales {
                    minute: to_time(minute),
                    units,
                })
                .collect(),
        }),
        Err(e) => {
            tracing::warn!(sale = %obs.config.sale, error = %e, "orders summary unreadable");
            previous.summary.clone()
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

async fn write_status(
    ctx: &Context,
    fs: &FlashSale,
    obs: &Observation,
    scaling: &ScalingDecision,
    decided: &Plan,
    applied: &Applied,
) -> Result<(), Error> {
    let now = Utc::now();
    let previous = fs.status.clone().unwrap_or_default();
    let stock = stock_status(obs);
    let degraded = if let Some(since) = obs.observed.life.lost_since {
        Some((
            "RedisStateLost",
            format!(
                "Redis lost the sale's state at {}: purchases are refused until it is reloaded from the database, once its orders are drained",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ))
    } else if decided
        .actions
        .contains(&crate::plan::Action::FenceLostState)
    {
        Some((
            "RedisStateLost",
            "Redis lost the sale's state: purchases are refused until it is reloaded".to_string(),
        ))
    } else if let Some(why) = &applied.warm_mismatch {
        Some(("WarmVerifyFailed", why.clone()))
    } else if let Some(Refused::StockBelowSold { asked, sold }) =
        applied.refused.as_ref().or(decided.refused.as_ref())
    {
        Some((
            "StockBelowSold",
            format!(
                "spec.stock {asked} is below the {sold} units already sold; the stock stays {}",
                stock.total
            ),
        ))
    } else if scaling.memory.busy {
        Some((
            "Backpressure",
            format!(
                "{} orders wait for the consumers, above maxLag {}: purchases are refused with BUSY",
                crate::apply::lag_words(obs.observed.lag),
                fs.spec.consumers.effective_max_lag()
            ),
        ))
    } else if decided.state == SaleState::Failed {
        Some((
            "JobFailed",
            "a reconciliation or cleanup Job failed; delete it to retry".to_string(),
        ))
    } else if obs.observed.lag.is_none() && obs.partitions > 0 {
        Some((
            "LagUnknown",
            "the consumer group's lag cannot be read from Kafka".to_string(),
        ))
    } else {
        None
    };
    let ready_consumers = obs.deployment.as_ref().map_or(0, |d| d.ready);
    let facts = Facts {
        state: decided.state,
        warmed: obs.observed.redis.warmed(),
        paused: fs.spec.paused,
        remaining: stock.remaining,
        consumers: (decided.replicas, ready_consumers),
        reconciled: obs
            .last_run
            .as_ref()
            .map(|r| (r.drift_found, r.drift_repaired)),
        cleaned: decided.state == SaleState::Completed,
        degraded,
    };
    let observed_replicas = obs.deployment.as_ref().map(|d| d.replicas);
    let last_scale_time = match (&previous.consumers, observed_replicas) {
        (Some(c), Some(replicas)) if replicas == decided.replicas => c.last_scale_time.clone(),
        _ if observed_replicas != Some(decided.replicas) => Some(to_time(now)),
        (c, _) => c.as_ref().and_then(|c| c.last_scale_time.clone()),
    };
    let status = FlashSaleStatus {
        observed_generation: fs.metadata.generation,
        state: Some(decided.state),
        stock: Some(stock),
        consumers: Some(ConsumersStatus {
            replicas: ready_consumers,
            desired_replicas: decided.replicas,
            lag: obs.observed.lag.unwrap_or_default(),
            last_scale_time,
            low_since: scaling
                .memory
                .low_since
                .and_then(|t| {
                    k8s_openapi::jiff::Timestamp::from_microsecond(t.timestamp_micros()).ok()
                })
                .map(MicroTime),
            busy: scaling.memory.busy,
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
        summary: summary(ctx, fs, obs, &previous).await,
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
    };
    record_metrics(ctx, fs, obs, decided.state, &status, now);
    let transition = (previous.state != status.state).then(|| {
        let from = previous
            .state
            .map_or("new".to_string(), |s| format!("{s:?}"));
        // The new state is the reason, so each transition is its own event.
        let reason = format!("{:?}", decided.state);
        let note = format!("The sale went from {from} to {reason}.");
        (reason, note)
    });
    // Every write is a watch event, and so another reconcile: an unchanged
    // status is not written, counters at most once per poll interval.
    let uid = fs.metadata.uid.clone().unwrap_or_default();
    let last_write = ctx
        .status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&uid)
        .copied();
    let every: Duration = fs.spec.consumers.poll_interval.into();
    if !crate::throttle::write_now(
        fs.status.as_ref(),
        &status,
        last_write,
        every,
        Instant::now(),
    ) {
        return Ok(());
    }
    let api: Api<FlashSale> = Api::namespaced(ctx.client.clone(), &obs.config.sale.namespace);
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
    ctx.status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid, Instant::now());
    // Announced once the status says it.
    if let Some((reason, note)) = transition {
        publish(ctx, fs, EventType::Normal, &reason, "Transition", note).await;
    }
    Ok(())
}

/// On delete: stop intake, let the orders drain (however long it takes: the
/// finalizer stays and the status says why), then remove the sale's Redis
/// state and topics and mark its row deleted. Orders stay.
async fn cleanup_deleted(fs: Arc<FlashSale>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let config = sale_config(&fs, i64::from(fs.spec.stock), 1)?;
    let sale = &config.sale;
    let failed = |e: &dyn std::fmt::Display| Error::Finalizer(e.to_string());
    let loaded = ctx
        .store
        .shards_with_meta(sale, config.shards)
        .await
        .map_err(|e| failed(&e))?;
    if loaded > 0 {
        ctx.store
            .set_paused_everywhere(sale, config.shards, true)
            .await
            .map_err(|e| failed(&e))?;
    }
    let deleted_for = fs
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Utc::now() - crate::context::to_chrono(t))
        .and_then(|d| d.to_std().ok())
        .unwrap_or_default();
    let orders = topics::orders_topic(sale);
    // A topic that holds unpersisted orders is never deleted: an unreadable
    // lag is not a zero lag, and no deadline ends the wait.
    let partitions = ctx
        .admin
        .partitions(&[&orders])
        .await
        .map_err(|e| failed(&e))?;
    let lag = if partitions == 0 {
        Ok(0)
    } else {
        match flashsale_workload::bus::lag::LagReader::new(
            &ctx.bootstrap,
            &topics::consumer_group(sale),
        ) {
            Ok(reader) => reader.read(&orders).await.map(|l| l.total()),
            Err(e) => Err(e),
        }
    };
    // A purchase that passed the script just before the pause may still be
    // producing (at most the API's produce timeout): its order must be
    // counted in the lag before the lag can say "drained".
    // After the pause, no purchase accepted before can still produce.
    let in_flight = loaded > 0 && deleted_for < ctx.workload.purchase_budget.settled_after();
    let waiting = match &lag {
        Err(e) => Some(format!(
            "The sale's lag cannot be read ({e}); its topic is kept until every order in it is persisted."
        )),
        Ok(n) if *n > 0 => Some(format!(
            "{n} orders are still in the sale's topic; it is deleted once the consumers persisted them."
        )),
        Ok(_) if in_flight => {
            Some("Purchases are paused; the last ones may still be reaching the topic.".to_string())
        }
        Ok(_) => None,
    };
    if let Some(why) = waiting {
        // A condition, and an event when it starts (not one every pass).
        crate::outage::report(&ctx, &fs, "DeletionWaitsForDrain", why).await;
        return Err(Error::Waiting("the sale's orders to drain"));
    }
    // Drained for good: consumers serving a whole namespace (the local loop's)
    // stop for this sale, and the ones of its Deployment go next.
    sales::mark_drained(&ctx.db, config.id)
        .await
        .map_err(|e| failed(&e))?;
    // The consumers must leave the group before it can go.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &sale.namespace);
    let consumers = consumers_name(&sale.name);
    if deployments
        .get_opt(&consumers)
        .await
        .map_err(|e| failed(&e))?
        .is_some()
    {
        deployments
            .delete(&consumers, &DeleteParams::foreground())
            .await
            .map_err(|e| failed(&e))?;
    }
    match ctx.admin.delete_group(&topics::consumer_group(sale)).await {
        Err(AdminError::Refused {
            code: RDKafkaErrorCode::NonEmptyGroup,
            ..
        }) => {
            return Err(Error::Waiting("the consumers to leave their group"));
        }
        other => other.map_err(|e| failed(&e))?,
    }
    // Removed on purpose: no loss to recover.
    sales::mark_closed(&ctx.db, config.id)
        .await
        .map_err(|e| failed(&e))?;
    ctx.store
        .delete(sale, config.shards)
        .await
        .map_err(|e| failed(&e))?;
    ctx.admin
        .delete_topics(&[&orders, &topics::dead_letter_topic(sale)])
        .await
        .map_err(|e| failed(&e))?;
    sales::mark_deleted(&ctx.db, config.id)
        .await
        .map_err(|e| failed(&e))?;
    ctx.forget_lag_reader(&config.id.to_string());
    ctx.status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(fs.metadata.uid.as_deref().unwrap_or_default());
    ctx.metrics.forget(&SaleLabels::from(sale));
    publish(
        &ctx,
        &fs,
        EventType::Normal,
        "Deleted",
        "Delete",
        "Redis state, topics and consumer group removed; orders kept".into(),
    )
    .await;
    Ok(Requeue::await_change())
}

/// The reconcile entry point: the finalizer helper around apply and cleanup.
pub async fn reconcile(fs: Arc<FlashSale>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    // A replica that may have lost the Lease acts on nothing: another may
    // lead already, with a newer view of the spec.
    if !ctx.leading.load(std::sync::atomic::Ordering::Acquire) {
        return Ok(Requeue::await_change());
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let namespace = fs.namespace().unwrap_or_default();
    let api: Api<FlashSale> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, fs.clone(), |event| async {
        match event {
            Finalizer::Apply(fs) => reconcile_sale(fs, ctx.clone()).await,
            Finalizer::Cleanup(fs) => cleanup_deleted(fs, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    });
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    let uid = fs.metadata.uid.clone().unwrap_or_default();
    match &result {
        Ok(_) => crate::outage::succeeded(&ctx, &uid),
        Err(Error::Waiting(what)) => {
            tracing::info!(sale = %format!("{namespace}/{}", fs.name_any()), "deletion waits for {what}");
        }
        Err(e) => {
            ctx.metrics
                .errors
                .get_or_create(&crate::metrics::ErrorLabels {
                    step: e.category().into(),
                })
                .inc();
            tracing::warn!(sale = %format!("{namespace}/{}", fs.name_any()), category = e.category(), error = %e, "reconcile failed");
            // The status tells which dependency failed (an event only when
            // that changes): Ready no longer says True through an outage.
            if let Some(reason) = crate::outage::reason(e) {
                crate::outage::report(&ctx, &fs, reason, e.to_string()).await;
            }
        }
    }
    result
}

/// An invalid resource waits for a change; a deletion waiting for its orders
/// looks again in 2 s; anything else backs off, 1 s doubling to 10 s,
/// jittered so sales failing on one outage do not retry in step.
pub fn error_policy(fs: Arc<FlashSale>, error: &Error, ctx: Arc<Context>) -> Requeue {
    match error {
        Error::Invalid(_) => Requeue::requeue(Duration::from_secs(300)),
        Error::Waiting(_) => Requeue::requeue(Duration::from_secs(2)),
        _ => {
            let uid = fs.metadata.uid.clone().unwrap_or_default();
            let failures = crate::outage::failed(&ctx, &uid);
            Requeue::requeue(crate::outage::backoff(failures - 1, rand::random::<f64>()))
        }
    }
}

/// Runs the controllers (one per watched namespace, or one for all) until
/// `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespaces: Vec<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    use futures::FutureExt;
    let shutdown = shutdown.shared();
    // One controller per watched namespace (or one for all): each keeps its
    // own caches, as a watch is either one namespace or the whole cluster.
    let controllers = scopes(&namespaces)
        .into_iter()
        .map(|ns| run_in(ctx.clone(), ns, shutdown.clone()));
    futures::future::join_all(controllers).await;
}

/// What to watch: every namespace (None) or each of `namespaces`.
pub fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    let named: Vec<Option<String>> = namespaces
        .iter()
        .map(|ns| ns.trim())
        .filter(|ns| !ns.is_empty())
        .map(|ns| Some(ns.to_string()))
        .collect();
    if named.is_empty() { vec![None] } else { named }
}

/// An API for `namespace`, or for all namespaces.
pub fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn run_in(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = &ctx.client;
    let sales: Api<FlashSale> = api(client, namespace.as_deref());
    let owned =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=flashsale-operator");
    let kill_switch = tokio::spawn(kill_switch_watch(ctx.clone(), sales.clone()));
    Controller::new(sales, watcher::Config::default())
        .owns(
            api::<Deployment>(client, namespace.as_deref()),
            owned.clone(),
        )
        .owns(api::<Job>(client, namespace.as_deref()), owned)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile did not complete");
            }
        })
        .await;
    kill_switch.abort();
}

/// The kill switch on a watch of its own: a change of `spec.paused` reaches
/// the shards at once, even while that sale's reconcile waits on a database
/// or Kafka that is down (reconciles of one object run one at a time).
async fn kill_switch_watch(ctx: Arc<Context>, sales: Api<FlashSale>) {
    use kube::runtime::WatchStreamExt;
    let changes = watcher(sales, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        // A sale being deleted stays paused: its finalizer paused it.
        if let Ok(fs) = change
            && fs.metadata.deletion_timestamp.is_none()
            && ctx.leading.load(std::sync::atomic::Ordering::Acquire)
            && let Err(e) = kill_switch(&ctx, &fs).await
        {
            tracing::debug!(error = %e, "kill switch not applied");
        }
    }
}
