//! The reconcile loop: `Controller` over FlashSales and what they own, the
//! finalizer, and the fixed steps observe → plan → apply → status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flashsale_workload::domain::sale::SaleMeta;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::Controller;
use kube::runtime::controller;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::context::{Context, FINALIZER};
use crate::decide::plan::{Plan, Wanted, plan};
use crate::decide::scaling::{self, ScalingDecision, desired_replicas, next_check};
use crate::error::Error;
use crate::model::crd::FlashSale;
use crate::steps::apply::apply;
use crate::steps::observe::{Observation, observe};
use crate::steps::{cleanup, degrade, kill_switch, lag_watch, outage, status};

/// One pass: observe, decide scaling and the plan.
async fn observe_and_plan(
    ctx: &Context,
    fs: &FlashSale,
) -> Result<(Observation, ScalingDecision, Plan), Error> {
    let obs = observe(ctx, fs).await?;
    let spec = scaling::spec_of(fs);
    let current = obs
        .deployment
        .as_ref()
        .map_or(spec.min_replicas, |d| d.replicas);
    let scaling = desired_replicas(
        &spec,
        obs.observed.lag,
        obs.partitions,
        current,
        scaling::memory_of(fs),
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

async fn reconcile_sale(fs: Arc<FlashSale>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    kill_switch::apply(&ctx, &fs).await?;
    let uid = fs.metadata.uid.clone().unwrap_or_default();
    match passes(&ctx, &fs).await {
        Err(e) if degrade::is_redis_down(&e) => degrade::redis_down(&ctx, &fs, e).await,
        passed => {
            degrade::redis_answered(&ctx, &uid);
            passed
        }
    }
}

/// Observe, plan and apply until the plan settles (three passes at most),
/// then write the status.
async fn passes(ctx: &Context, fs: &FlashSale) -> Result<Requeue, Error> {
    let mut pass = 0;
    let (obs, scaling, decided, applied) = loop {
        let (obs, scaling, decided) = observe_and_plan(ctx, fs).await?;
        let applied = apply(ctx, fs, &obs, &decided.actions).await?;
        pass += 1;
        if pass == 3
            || !decided.actions.iter().any(|a| a.changes_observation())
            || applied.warm_mismatch.is_some()
        {
            break (obs, scaling, decided, applied);
        }
    };
    lag_watch::keep(ctx, &obs, &decided);
    let outcome = status::Outcome {
        obs: &obs,
        scaling: &scaling,
        decided: &decided,
        applied: &applied,
    };
    status::write(ctx, fs, &outcome).await?;
    Ok(Requeue::requeue(decided.wake_in))
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
            Finalizer::Cleanup(fs) => cleanup::cleanup_deleted(fs, ctx.clone()).await,
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
        Ok(_) => outage::succeeded(&ctx, &uid),
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
            if let Some(reason) = outage::reason(e) {
                outage::report(&ctx, &fs, reason, e.to_string()).await;
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
            let failures = outage::failed(&ctx, &uid);
            Requeue::requeue(outage::backoff(failures - 1, rand::random::<f64>()))
        }
    }
}

/// Runs the controllers (one per watched namespace, or one for all), each
/// reconciling at most `concurrency` sales at once, until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespaces: Vec<String>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    use futures::FutureExt;
    let shutdown = shutdown.shared();
    // One controller per watched namespace (or one for all): each keeps its
    // own caches, as a watch is either one namespace or the whole cluster.
    let controllers = scopes(&namespaces)
        .into_iter()
        .map(|ns| run_in(ctx.clone(), ns, concurrency, shutdown.clone()));
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
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = &ctx.client;
    let sales: Api<FlashSale> = api(client, namespace.as_deref());
    let owned =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=flashsale-operator");
    let kill_switch = tokio::spawn(kill_switch_watch(ctx.clone(), sales.clone()));
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let lag_watch = tokio::spawn(lag_watch::run(ctx.clone(), namespace.clone(), wake));
    Controller::new(sales, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(woken)
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
    lag_watch.abort();
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
            && let Err(e) = kill_switch::apply(&ctx, &fs).await
        {
            tracing::debug!(error = %e, "kill switch not applied");
        }
    }
}
