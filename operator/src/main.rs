//! `flashsale-operator`: runs each FlashSale's life, as the leader of its
//! replicas (a Lease), serving /metrics, /healthz and /readyz.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use flashsale_operator::cluster::fence;
use flashsale_operator::context::Context;
use flashsale_operator::controller;
use flashsale_operator::decide::resources::WorkloadSettings;
use flashsale_operator::metrics::Metrics;
use flashsale_operator::model::crd::FlashSale;
use flashsale_workload::bus::admin::{Admin, TopicDurability};
use flashsale_workload::bus::lag::LagReader;
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::redis::store::SaleStore;
use flashsale_workload::redis::{RedisConn, RedisTarget};
use kube::api::ListParams;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;

/// Runs FlashSales: warm-up, the kill switch, consumer scaling,
/// reconciliation and cleanup Jobs, status conditions and events.
#[derive(Parser)]
#[command(name = "flashsale-operator", version, about)]
struct Args {
    /// Watch FlashSales of these namespaces only, comma-separated (default:
    /// all namespaces).
    #[arg(long, env = "FLASHSALE_WATCH_NAMESPACE", value_delimiter = ',')]
    watch_namespace: Vec<String>,
    /// Redis, as the operator reaches it: redis://host:port or redis-cluster://h:p,h:p
    #[arg(long, env = "FLASHSALE_REDIS")]
    redis: String,
    /// PostgreSQL, as the operator reaches it.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Kafka bootstrap servers, as the operator reaches them.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    kafka: String,
    /// Redis as the sale's pods reach it (default: --redis).
    #[arg(long, env = "FLASHSALE_POD_REDIS")]
    pod_redis: Option<String>,
    /// PostgreSQL as the sale's pods reach it (default: --database-url).
    #[arg(long, env = "FLASHSALE_POD_DATABASE_URL")]
    pod_database_url: Option<String>,
    /// Kafka as the sale's pods reach it (default: --kafka).
    #[arg(long, env = "FLASHSALE_POD_KAFKA")]
    pod_kafka: Option<String>,
    /// The workload image the consumer Deployments and Jobs run.
    #[arg(long, env = "FLASHSALE_WORKLOAD_IMAGE", default_value = concat!("docker.io/flashsale/flashsale:", env!("CARGO_PKG_VERSION")))]
    workload_image: String,
    /// Its pull policy.
    #[arg(
        long,
        env = "FLASHSALE_IMAGE_PULL_POLICY",
        default_value = "IfNotPresent"
    )]
    image_pull_policy: String,
    /// Consumer CPU request.
    #[arg(long, env = "FLASHSALE_CONSUMER_CPU", default_value = "50m")]
    consumer_cpu: String,
    /// Consumer memory request.
    #[arg(long, env = "FLASHSALE_CONSUMER_MEMORY", default_value = "32Mi")]
    consumer_memory: String,
    /// Consumer memory limit.
    #[arg(long, env = "FLASHSALE_CONSUMER_MEMORY_LIMIT", default_value = "256Mi")]
    consumer_memory_limit: String,
    /// Replicas of each partition of a sale's topics (3 in production; 1 on
    /// a single broker).
    #[arg(long, env = "FLASHSALE_TOPIC_REPLICATION_FACTOR", default_value_t = 1)]
    topic_replication_factor: i32,
    /// The topics' min.insync.replicas (2 with 3 replicas in production).
    #[arg(long, env = "FLASHSALE_TOPIC_MIN_INSYNC_REPLICAS", default_value_t = 1)]
    topic_min_insync_replicas: i32,
    /// The API's purchase budget (the same setting as the API's: chart value
    /// `purchaseBudget`): a lost Redis state is reloaded only longer than
    /// this after it was fenced, and reconciliation Jobs leave younger
    /// reservations alone.
    #[arg(long, env = "FLASHSALE_PURCHASE_BUDGET", default_value = "5s")]
    purchase_budget: PurchaseBudget,
    /// Purchases a second the API tier accepts (chart: replicas ×
    /// `api.purchasesPerSecondPerReplica`): a queued sale whose spec names
    /// no `ratePerSecond` admits four fifths of it.
    #[arg(long, env = "FLASHSALE_API_CAPACITY", default_value_t = flashsale_operator::decide::queue::DEFAULT_API_CAPACITY)]
    api_capacity: u32,
    /// A private CA (PEM) that signed Redis's, PostgreSQL's or Kafka's
    /// certificate: every sale pod trusts it (the operator itself trusts
    /// it through `SSL_CERT_FILE`, as any pod does).
    #[arg(long, env = "FLASHSALE_SERVICES_CA_FILE")]
    services_ca_file: Option<std::path::PathBuf>,
    /// Apply the database migrations at start.
    #[arg(long, env = "FLASHSALE_MIGRATE")]
    migrate: bool,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "FLASHSALE_OPERATOR_LISTEN",
        default_value = "127.0.0.1:18081"
    )]
    listen: SocketAddr,
    /// The leader-election Lease's name.
    #[arg(
        long,
        env = "FLASHSALE_LEASE_NAME",
        default_value = "flashsale-operator"
    )]
    lease_name: String,
    /// The Lease's namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Lease (default: POD_NAME, else host and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a Lease is held without renewal before another replica may
    /// take it (at least 6: renewal, watchdog and takeover need the room).
    #[arg(long, env = "FLASHSALE_LEASE_SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(6..))]
    lease_seconds: u64,
    /// Sales reconciled at once (per watched namespace). Unbounded, 1,000
    /// sales created together sent so many requests at once that the
    /// Lease's renewal went unconfirmed and the operator stepped down.
    #[arg(long, env = "FLASHSALE_RECONCILE_CONCURRENCY", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..))]
    reconcile_concurrency: u16,
    /// Log format: json or text.
    #[arg(long, env = "FLASHSALE_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

fn identity(args: &Args) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    })
}

async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    leading: Arc<AtomicBool>,
) {
    use axum::http::StatusCode;
    use axum::routing::get;
    let scraped = leading.clone();
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let leading = leading.load(Ordering::Relaxed);
                async move {
                    // A standby is ready too: it is healthy and waiting for the lease.
                    (StatusCode::OK, if leading { "leader" } else { "standby" })
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                metrics
                    .leader
                    .set(i64::from(scraped.load(Ordering::Relaxed)));
                async move { metrics.encode() }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Fails with what to do when the operator cannot list FlashSales where it watches.
async fn check_can_list(client: &Client, namespaces: &[String]) -> anyhow::Result<()> {
    for sales in controller::scopes(namespaces)
        .iter()
        .map(|ns| controller::api::<FlashSale>(client, ns.as_deref()))
    {
        if let Err(e) = sales.list(&ListParams::default().limit(1)).await {
            anyhow::bail!(
                "cannot list FlashSales in {} ({e}); is the CRD installed, may the operator list them? kubectl apply -f crds/flashsale.yaml",
                sales.namespace().unwrap_or("any namespace")
            );
        }
    }
    Ok(())
}

/// How the sale's pods run, from the arguments.
fn workload_settings(args: &Args) -> anyhow::Result<WorkloadSettings> {
    Ok(WorkloadSettings {
        image: args.workload_image.clone(),
        pull_policy: args.image_pull_policy.clone(),
        redis: args.pod_redis.clone().unwrap_or_else(|| args.redis.clone()),
        database_url: args
            .pod_database_url
            .clone()
            .unwrap_or_else(|| args.database_url.clone()),
        kafka: args.pod_kafka.clone().unwrap_or_else(|| args.kafka.clone()),
        consumer_resources: (
            args.consumer_cpu.clone(),
            args.consumer_memory.clone(),
            args.consumer_memory_limit.clone(),
        ),
        purchase_budget: args.purchase_budget,
        services_ca: args
            .services_ca_file
            .as_ref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading the services' CA from {}", path.display()))
            })
            .transpose()?,
    })
}

/// Connects to PostgreSQL (migrating it if asked), Redis and Kafka.
async fn connect(
    args: &Args,
    client: &Client,
    identity: &str,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Arc<Context>> {
    let db = flashsale_workload::orders::connect(&args.database_url, 4)
        .await
        .context("failed to connect to PostgreSQL")?;
    if args.migrate {
        flashsale_workload::orders::migrate(&db)
            .await
            .context("failed to migrate the database")?;
    }
    let target: RedisTarget = args.redis.parse().map_err(anyhow::Error::msg)?;
    let redis = RedisConn::connect(&target)
        .await
        .context("failed to connect to Redis")?;
    let reporter = Reporter {
        controller: "flashsale-operator".into(),
        instance: Some(identity.to_string()),
    };
    Ok(Arc::new(Context {
        client: client.clone(),
        db,
        store: SaleStore::new(redis),
        admin: Admin::new(&args.kafka)?.with_durability(TopicDurability {
            replication_factor: args.topic_replication_factor,
            min_insync_replicas: args.topic_min_insync_replicas,
        }),
        recorder: Recorder::new(client.clone(), reporter),
        workload: workload_settings(args)?,
        lag: LagReader::new(&args.kafka, "flashsale-operator")?,
        watched: Mutex::new(HashMap::new()),
        metrics,
        failures: Mutex::new(HashMap::new()),
        redis_unreachable: Mutex::new(HashMap::new()),
        status_writes: Mutex::new(HashMap::new()),
        leading: Arc::new(AtomicBool::new(false)),
        api_capacity: args.api_capacity,
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(&args.log_format);
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration")?;
    check_can_list(&client, &args.watch_namespace).await?;
    let identity = identity(&args);
    let metrics = Arc::new(Metrics::default());
    let ctx = connect(&args, &client, &identity, metrics.clone()).await?;

    let lease = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(&identity)
        .with_duration(args.lease_seconds)
        .with_grace(fence::renewal_grace(args.lease_seconds))
        .build()
        .await
        .context("failed to set up leader election")?;
    let (mut leader, lease_task) = lease.watch().await;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    // The HTTP server sees a flag, not the lease channel: the lease is
    // released only once every receiver of that channel is gone.
    let leading = ctx.leading.clone();
    tokio::spawn(serve_http(listener, metrics, leading.clone()));
    tracing::info!(%identity, lease = %args.lease_name, "waiting to lead");
    loop {
        if *leader.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = leader.changed() => changed.context("leader election stopped")?,
            () = flashsale_workload::api::server::shutdown_signal() => return Ok(()),
        }
    }
    tracing::info!(%identity, "leading: reconciling FlashSales");
    leading.store(true, Ordering::Relaxed);
    let why = lead(&args, &client, &identity, ctx, leader.clone()).await;
    // Letting go of the channel releases the lease for the next replica.
    drop(leader);
    let _ = tokio::time::timeout(Duration::from_secs(5), lease_task).await;
    if why != "shutdown" {
        anyhow::bail!("{why}; exiting so only one replica acts");
    }
    Ok(())
}

/// Reconciles until a shutdown, the lease lost, or the fence; why it stopped.
async fn lead(
    args: &Args,
    client: &Client,
    identity: &str,
    ctx: Arc<Context>,
    mut lost: tokio::sync::watch::Receiver<bool>,
) -> &'static str {
    let leading = ctx.leading.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<&'static str>();
    let fence = fence::watch(
        Api::namespaced(client.clone(), &args.lease_namespace),
        args.lease_name.clone(),
        identity.to_string(),
        Duration::from_secs(args.lease_seconds),
        fence::fence_grace(args.lease_seconds),
    );
    let fenced = leading.clone();
    let reason = Arc::new(Mutex::new("shutdown"));
    let stopped_because = reason.clone();
    tokio::spawn(async move {
        let why = tokio::select! {
            () = flashsale_workload::api::server::shutdown_signal() => "shutdown",
            _ = async { while lost.changed().await.is_ok() { if !*lost.borrow() { break; } } } => "lost the lease",
            why = fence => match why {
                fence::Fenced::Taken => "lost the lease",
                fence::Fenced::Unconfirmed => "could not renew the lease",
            },
        };
        // No reconcile starts from here on, before the Lease could lapse.
        fenced.store(false, Ordering::Release);
        tracing::info!(reason = why, "stopped acting as the leader");
        *stopped_because.lock().unwrap_or_else(|p| p.into_inner()) = why;
        let _ = stop_tx.send(why);
    });
    // Graceful, but bounded: reconciles in flight get 10 s to finish.
    tokio::select! {
        () = controller::run(ctx, args.watch_namespace.clone(), args.reconcile_concurrency, async move {
            let _ = stop_rx.await;
        }) => {}
        () = async {
            while leading.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        } => tracing::warn!("reconciles still running 10 s after the stop; leaving them"),
    }
    *reason.lock().unwrap_or_else(|p| p.into_inner())
}
