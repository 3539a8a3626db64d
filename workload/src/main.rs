//! `flashsale`: the workload binary. One image, one subcommand per role.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use flashsale_workload::api::auth::AuthConfig;
use flashsale_workload::api::client_ip::TrustedProxies;
use flashsale_workload::api::jwks::JwksSource;
use flashsale_workload::api::limits::LimitConfig;
use std::sync::Arc;

use flashsale_workload::api::server::{ApiConfig, serve, shutdown_signal};
use flashsale_workload::api::transport::TransportLimits;
use flashsale_workload::bus::producer::ProducerSettings;
use flashsale_workload::consumer::{ConsumerSettings, Supervisor, run_all_sales};
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::domain::invariants;
use flashsale_workload::domain::reconcile::Policy;
use flashsale_workload::domain::sale::{SaleConfig, SaleRef};
use flashsale_workload::jobs::{self, JobContext};
use flashsale_workload::load::{self, Identity, StormConfig};
use flashsale_workload::metrics::Metrics;
use flashsale_workload::redis::store::SaleStore;
use flashsale_workload::redis::{RedisConn, RedisTarget};
use flashsale_workload::risk::webhook::WebhookClient;
use tokio_util::sync::CancellationToken;

/// FlashSale workload: the shopper API, the order consumers and the jobs the
/// operator runs for each sale.
#[derive(Parser)]
#[command(name = "flashsale", version, about, long_about = None)]
struct Cli {
    /// Log format: `json` for machines, `text` for people.
    #[arg(
        long,
        env = "FLASHSALE_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the shopper HTTP API: sale info, purchase (one atomic Redis
    /// decision, then a confirmed Kafka produce), order status, pay and cancel.
    Api(Box<ApiArgs>),
    /// Persist a sale's accepted orders from Kafka to PostgreSQL in batches,
    /// idempotently, and cancel orders left unpaid past the payment timeout.
    Consumer(Box<ConsumerArgs>),
    /// Jobs the operator runs for a sale.
    Job(Box<JobArgs>),
    /// Apply the database schema migrations (idempotent).
    Migrate(Database),
    /// Run a shopper storm against the API and check the invariants after it.
    Load(Box<LoadArgs>),
}

#[derive(Subcommand, Clone, Copy)]
enum Job {
    /// Compare Redis, Kafka and PostgreSQL for a sale, repair drift toward the
    /// database, print a machine-readable report.
    Reconcile {
        /// The reconciliation after the sale's end: wait for its orders to
        /// drain, then repair until Redis and PostgreSQL agree (or fail).
        #[arg(long = "final")]
        after_end: bool,
    },
    /// Once a sale's orders are drained: a last reconciliation, then delete
    /// the sale's Redis keys. Never deletes orders.
    Cleanup,
}

#[derive(Args)]
struct SaleName {
    /// The FlashSale's namespace.
    #[arg(long, env = "FLASHSALE_NAMESPACE", default_value = "default")]
    namespace: String,
    /// The FlashSale's name.
    #[arg(long, env = "FLASHSALE_SALE")]
    sale: Option<String>,
}

#[derive(Args)]
struct JobArgs {
    #[command(subcommand)]
    job: Job,
    #[command(flatten)]
    name: SaleName,
    #[command(flatten)]
    services: Services,
    /// The API's purchase budget (chart value `purchaseBudget`): a
    /// reservation younger than the time it takes to settle may still have
    /// its message in flight and is never touched.
    #[arg(long, env = "FLASHSALE_PURCHASE_BUDGET", default_value = "5s")]
    purchase_budget: PurchaseBudget,
    /// How long cleanup waits for the sale's orders to drain.
    #[arg(long, env = "FLASHSALE_DRAIN_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
}

#[derive(Args)]
struct LoadArgs {
    /// The API's base URL.
    #[arg(long, env = "FLASHSALE_API_URL")]
    url: String,
    #[command(flatten)]
    name: SaleName,
    /// Distinct shoppers.
    #[arg(long, default_value_t = 2000)]
    shoppers: usize,
    /// Purchase attempts in all.
    #[arg(long, default_value_t = 10_000)]
    requests: u64,
    /// Longest the storm runs.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Closed loop: concurrent shoppers.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Open loop instead: purchase attempts per second.
    #[arg(long)]
    rate: Option<u64>,
    /// A shopper's pause between requests (closed loop).
    #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
    think: Duration,
    /// Units per purchase: 1 to this.
    #[arg(long, default_value_t = 2)]
    max_quantity: i64,
    /// Share of accepted orders then paid.
    #[arg(long, default_value_t = 0.3)]
    pay: f64,
    /// Share of accepted orders then cancelled.
    #[arg(long, default_value_t = 0.05)]
    cancel: f64,
    /// Mint HS256 shopper tokens with the secret in this file (else the
    /// development X-User-Id header is used).
    #[arg(long, env = "FLASHSALE_JWT_HS256_SECRET_FILE")]
    jwt_secret_file: Option<PathBuf>,
    /// Act as the payment provider too: confirm each started payment with a
    /// callback signed with the secret in this file (else orders stay UNPAID).
    #[arg(long, env = "FLASHSALE_PAYMENT_SECRET_FILE")]
    payment_secret_file: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// After the storm, wait for the orders to drain and check I1-I6 against
    /// Redis and PostgreSQL (needs --redis, --database-url, --kafka).
    #[arg(long)]
    check: bool,
    /// Redis, for --check.
    #[arg(long, env = "FLASHSALE_REDIS")]
    redis: Option<RedisTarget>,
    /// PostgreSQL, for --check.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Kafka, for --check.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    kafka: Option<String>,
    /// How long --check waits for the orders to drain.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
}

#[derive(Args)]
struct ConsumerArgs {
    #[command(flatten)]
    name: SaleName,
    /// Consume every current sale of the namespace, each in its own consumer
    /// group (the local loop's stand-in for the operator's per-sale consumer
    /// Deployments).
    #[arg(long, conflicts_with = "sale")]
    all_sales: bool,
    #[command(flatten)]
    services: Services,
    /// Most orders per database transaction.
    #[arg(long, env = "FLASHSALE_BATCH_SIZE", default_value_t = ConsumerSettings::default().batch_size)]
    batch_size: usize,
    /// How long a batch waits to fill once its first order arrived.
    #[arg(long, env = "FLASHSALE_BATCH_LINGER", default_value = "20ms", value_parser = humantime::parse_duration)]
    batch_linger: Duration,
    /// Database connections (and so concurrent batches) at most.
    #[arg(long, env = "FLASHSALE_DB_POOL", default_value_t = 8)]
    db_pool: u32,
    /// How often unpaid orders past their timeout are cancelled.
    #[arg(long, env = "FLASHSALE_SWEEP_EVERY", default_value = "1s", value_parser = humantime::parse_duration)]
    sweep_every: Duration,
    /// Address of /metrics and /healthz.
    #[arg(long, env = "FLASHSALE_METRICS_LISTEN", default_value = "127.0.0.1:0")]
    metrics_listen: SocketAddr,
    /// The secret the risk scorer signs its webhook calls with
    /// (`spec.risk.webhook`; the operator sets it from the spec's secretRef).
    #[arg(long, env = "FLASHSALE_RISK_WEBHOOK_SECRET", hide_env_values = true)]
    risk_webhook_secret: Option<String>,
}

#[derive(Args)]
struct Database {
    /// PostgreSQL URL.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
}

#[derive(Args)]
struct Services {
    /// Redis: redis://host:port, or redis-cluster://host:port,host:port,...
    #[arg(long, env = "FLASHSALE_REDIS")]
    redis: RedisTarget,
    #[command(flatten)]
    database: Database,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    kafka: String,
}

#[derive(Args)]
struct ApiArgs {
    /// The public port: shopper routes and /openapi.json.
    #[arg(long, env = "FLASHSALE_LISTEN", default_value = "127.0.0.1:18080")]
    listen: SocketAddr,
    /// The internal port: /healthz, /readyz and /metrics (probes, Prometheus).
    #[arg(
        long,
        env = "FLASHSALE_INTERNAL_LISTEN",
        default_value = "127.0.0.1:18090"
    )]
    internal_listen: SocketAddr,
    /// Time a client has to send a request's headers, or to start the next
    /// request on an open connection.
    #[arg(long, env = "FLASHSALE_HEADER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    header_timeout: Duration,
    /// Time a client has to send a request's body.
    #[arg(long, env = "FLASHSALE_BODY_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    body_timeout: Duration,
    /// Time a request other than a purchase may take in all (503 past it).
    #[arg(long, env = "FLASHSALE_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Requests in flight at most, for purchases and again for the other
    /// guarded routes; more are answered 503 BUSY at once.
    #[arg(long, env = "FLASHSALE_MAX_IN_FLIGHT", default_value_t = 256)]
    max_in_flight: usize,
    /// Time in-flight requests get to finish after SIGTERM.
    #[arg(long, env = "FLASHSALE_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// The namespace whose FlashSales this API serves.
    #[arg(long, env = "FLASHSALE_NAMESPACE", default_value = "default")]
    namespace: String,
    #[command(flatten)]
    services: Services,
    /// File holding the HS256 secret of shopper tokens.
    #[arg(long, env = "FLASHSALE_JWT_HS256_SECRET_FILE")]
    jwt_hs256_secret_file: Option<PathBuf>,
    /// File holding the PEM RSA public key of RS256 shopper tokens.
    #[arg(long, env = "FLASHSALE_JWT_RS256_PUBLIC_KEY_FILE")]
    jwt_rs256_public_key_file: Option<PathBuf>,
    /// The `iss` every shopper token must carry.
    #[arg(long, env = "FLASHSALE_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// A JWKS of the identity provider, a file or an http(s) URL: tokens
    /// are verified with the key their `kid` names.
    #[arg(long, env = "FLASHSALE_JWT_JWKS")]
    jwt_jwks: Option<JwksSource>,
    /// How often the JWKS is read again (and soon after a token names an
    /// unknown `kid`).
    #[arg(long, env = "FLASHSALE_JWT_JWKS_REFRESH", default_value = "5m", value_parser = humantime::parse_duration)]
    jwt_jwks_refresh: Duration,
    /// An `aud` every shopper token must carry (unset: `aud` is not checked).
    #[arg(long, env = "FLASHSALE_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// The longest a shopper token may still be valid for.
    #[arg(long, env = "FLASHSALE_JWT_MAX_LIFETIME", default_value = "24h", value_parser = humantime::parse_duration)]
    jwt_max_lifetime: Duration,
    /// Accept `X-User-Id` as the shopper id without a token. Development only.
    #[arg(long, env = "FLASHSALE_DEV_IDENTITY")]
    dev_identity: bool,
    /// Requests per second for the whole process (0 = no limit).
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_GLOBAL", default_value_t = 100_000)]
    rate_limit_global: u32,
    /// Requests per second per shopper (0 = no limit).
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_SHOPPER", default_value_t = 10)]
    rate_limit_shopper: u32,
    /// Requests per second per client address (0 = no limit). On by default:
    /// one host's flood is capped without any account; high enough for the
    /// shoppers behind one carrier's NAT. Behind an ingress or load
    /// balancer, name it in --trusted-proxies, or every shopper shares its
    /// address.
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_IP", default_value_t = 200)]
    rate_limit_ip: u32,
    /// Proxies (addresses or CIDR blocks, comma-separated) whose
    /// `X-Forwarded-For` names the client for the per-IP limit; the header
    /// of anyone else is ignored.
    #[arg(long, env = "FLASHSALE_TRUSTED_PROXIES", default_value = "")]
    trusted_proxies: TrustedProxies,
    /// How long one purchase may take, its Redis calls and the broker's
    /// acknowledgement included: past it the purchase is refused and its
    /// stock released. The janitor and the operator's recovery wait longer
    /// than this (give the operator the same value: chart value
    /// `purchaseBudget`).
    #[arg(long, env = "FLASHSALE_PURCHASE_BUDGET", default_value = "5s")]
    purchase_budget: PurchaseBudget,
    /// How long the producer waits to fill a batch.
    #[arg(long, env = "FLASHSALE_PRODUCE_LINGER", default_value = "0ms", value_parser = humantime::parse_duration)]
    produce_linger: Duration,
    /// librdkafka's debug contexts for the producer (e.g. `eos,broker,topic`),
    /// logged at debug level (`RUST_LOG=librdkafka=debug`).
    #[arg(long, env = "FLASHSALE_KAFKA_DEBUG")]
    kafka_debug: Option<String>,
    /// A file holding the secret the payment provider signs its callbacks
    /// with (at least 32 bytes); without it orders cannot be paid.
    #[arg(long, env = "FLASHSALE_PAYMENT_SECRET_FILE")]
    payment_secret_file: Option<PathBuf>,
    /// A file holding the secret purchase tokens are signed with (at least
    /// 32 bytes, the same for every replica); without it sales with
    /// `antiBot.required` cannot be bought.
    #[arg(long, env = "FLASHSALE_PURCHASE_TOKEN_SECRET_FILE")]
    purchase_token_secret_file: Option<PathBuf>,
}

impl ApiArgs {
    fn into_config(self) -> anyhow::Result<ApiConfig> {
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("failed to read {}", path.display()))
        };
        Ok(ApiConfig {
            listen: self.listen,
            internal_listen: self.internal_listen,
            transport: TransportLimits {
                header_timeout: self.header_timeout,
                body_timeout: self.body_timeout,
                request_timeout: self.request_timeout,
                max_in_flight: self.max_in_flight,
                shutdown_grace: self.shutdown_grace,
            },
            namespace: self.namespace,
            redis: self.services.redis,
            database_url: self.services.database.database_url,
            kafka: self.services.kafka,
            auth: AuthConfig {
                hs256_secret: read_secret(self.jwt_hs256_secret_file.as_deref())?,
                rs256_public_pem: self
                    .jwt_rs256_public_key_file
                    .as_ref()
                    .map(read)
                    .transpose()?,
                jwks: self.jwt_jwks,
                jwks_refresh: self.jwt_jwks_refresh,
                issuer: self.jwt_issuer,
                audience: self.jwt_audience,
                max_lifetime: self.jwt_max_lifetime,
                dev_identity: self.dev_identity,
            },
            limits: LimitConfig {
                global_per_sec: self.rate_limit_global,
                per_shopper_per_sec: self.rate_limit_shopper,
                per_ip_per_sec: self.rate_limit_ip,
            },
            producer: ProducerSettings {
                budget: self.purchase_budget,
                linger: self.produce_linger,
                debug: self.kafka_debug,
            },
            payment_secret: read_secret(self.payment_secret_file.as_deref())?,
            purchase_token_secret: read_secret(self.purchase_token_secret_file.as_deref())?,
            trusted_proxies: self.trusted_proxies,
        })
    }
}

impl Services {
    async fn connect(&self, pool: u32) -> anyhow::Result<(sqlx::PgPool, SaleStore)> {
        let db = flashsale_workload::orders::connect(&self.database.database_url, pool)
            .await
            .context("failed to connect to PostgreSQL")?;
        let redis = RedisConn::connect(&self.redis)
            .await
            .context("failed to connect to Redis")?;
        Ok((db, SaleStore::new(redis)))
    }
}

impl SaleName {
    async fn find(&self, db: &sqlx::PgPool) -> anyhow::Result<Option<SaleConfig>> {
        let name = self.sale.as_deref().context("--sale is required")?;
        let sale = SaleRef::new(&self.namespace, name)?;
        Ok(flashsale_workload::orders::sales::find_current(db, &sale).await?)
    }
}

async fn run_job(args: JobArgs) -> anyhow::Result<()> {
    let (db, store) = args.services.connect(2).await?;
    let config = args
        .name
        .find(&db)
        .await?
        .context("no such sale in the database")?;
    let ctx = JobContext {
        db,
        store,
        bootstrap: args.services.kafka.clone(),
    };
    let policy = Policy {
        reservation_min_age_ms: args.purchase_budget.settled_after().as_millis() as i64,
        ..Policy::default()
    };
    let report = match args.job {
        Job::Reconcile { after_end: false } => {
            serde_json::to_string(&jobs::reconcile(&ctx, &config, &policy).await?)?
        }
        Job::Reconcile { after_end: true } => serde_json::to_string(
            &jobs::final_reconcile(&ctx, &config, &policy, args.drain_timeout).await?,
        )?,
        Job::Cleanup => serde_json::to_string(
            &jobs::cleanup(&ctx, &config, &policy, args.drain_timeout).await?,
        )?,
    };
    // The report is the job's output: one JSON line on stdout.
    println!("{report}");
    Ok(())
}

async fn run_consumer(args: ConsumerArgs) -> anyhow::Result<()> {
    let (db, store) = args.services.connect(args.db_pool).await?;
    let metrics = Arc::new(Metrics::default());
    let stop = CancellationToken::new();
    let supervisor = Supervisor {
        bootstrap: args.services.kafka.clone(),
        db: db.clone(),
        store: store.clone(),
        settings: ConsumerSettings {
            batch_size: args.batch_size,
            batch_linger: args.batch_linger,
            sweep_every: args.sweep_every,
            ..ConsumerSettings::default()
        },
        metrics: metrics.clone(),
        risk_webhook: WebhookClient::new(args.risk_webhook_secret.map(String::into_bytes)),
    };
    let listener = tokio::net::TcpListener::bind(args.metrics_listen).await?;
    tracing::info!(listen = %listener.local_addr()?, "consumer metrics serving");
    let server = tokio::spawn(flashsale_workload::metrics::serve(
        listener,
        flashsale_workload::metrics::router(metrics),
        stop.clone().cancelled_owned(),
    ));

    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            stop.cancel();
        })
    };
    if args.all_sales {
        run_all_sales(supervisor, &args.name.namespace, stop.clone()).await;
    } else {
        let name = &args.name;
        supervisor
            .run_one(async || name.find(&db).await, stop.clone())
            .await;
    }
    stop.cancel();
    stopper.abort();
    let _ = server.await;
    Ok(())
}

/// A secret file's text, without the line end an editor adds.
fn read_secret(path: Option<&std::path::Path>) -> anyhow::Result<Option<Vec<u8>>> {
    path.map(|path| {
        std::fs::read(path)
            .map(|s| s.trim_ascii().to_vec())
            .with_context(|| format!("failed to read {}", path.display()))
    })
    .transpose()
}

async fn run_load(args: LoadArgs) -> anyhow::Result<()> {
    let identity = match read_secret(args.jwt_secret_file.as_deref())? {
        Some(secret) => Identity::Jwt(secret),
        None => Identity::DevHeader,
    };
    let sale = args.name.sale.clone().context("--sale is required")?;
    let (report, told) = load::storm(StormConfig {
        url: args.url.trim_end_matches('/').to_string(),
        sale: sale.clone(),
        shoppers: args.shoppers,
        requests: args.requests,
        duration: args.duration,
        concurrency: args.concurrency,
        rate: args.rate,
        think: args.think,
        max_quantity: args.max_quantity,
        pay: args.pay,
        payment_secret: read_secret(args.payment_secret_file.as_deref())?,
        cancel: args.cancel,
        identity,
        progress: !args.quiet,
    })
    .await?;
    println!("{}", load::render(&report));
    let mut verdicts = None;
    if args.check {
        let (Some(redis), Some(url), Some(kafka)) = (&args.redis, &args.database_url, &args.kafka)
        else {
            anyhow::bail!("--check needs --redis, --database-url and --kafka");
        };
        let db = flashsale_workload::orders::connect(url, 2).await?;
        let store = SaleStore::new(RedisConn::connect(redis).await?);
        let config = args
            .name
            .find(&db)
            .await?
            .context("no such sale in the database")?;
        println!("waiting for the orders to drain, then checking I1-I6 ...");
        let evidence = load::gather(&db, &store, kafka, &config, &told, args.drain_timeout).await?;
        let checked = invariants::evaluate(&evidence).verdicts;
        for v in &checked {
            println!("{v}");
        }
        verdicts = Some(checked);
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "storm": report, "invariants": verdicts });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)?;
    }
    if verdicts
        .as_deref()
        .is_some_and(|v| !invariants::all_hold(v))
    {
        anyhow::bail!("an invariant failed");
    }
    Ok(())
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match cli.command {
        Command::Api(args) => serve(args.into_config()?).await,
        Command::Migrate(db) => {
            let pool = flashsale_workload::orders::connect(&db.database_url, 1)
                .await
                .context("failed to connect to PostgreSQL")?;
            flashsale_workload::orders::migrate(&pool)
                .await
                .context("failed to migrate the database")?;
            tracing::info!("database schema is up to date");
            Ok(())
        }
        Command::Consumer(args) => run_consumer(*args).await,
        Command::Job(args) => run_job(*args).await,
        Command::Load(args) => run_load(*args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let required = [
            "--redis=redis://127.0.0.1:1",
            "--database-url=postgres://nobody@127.0.0.1:1/none",
            "--kafka=127.0.0.1:1",
            "--namespace=shop",
        ];
        Cli::try_parse_from(["flashsale", "api"].iter().chain(&required).chain(args))
    }

    fn api_config(args: &[&str]) -> ApiConfig {
        let Command::Api(api) = parse(args).unwrap().command else {
            unreachable!("parsed as api")
        };
        api.into_config().unwrap()
    }

    #[test]
    fn the_per_ip_limit_is_on_by_default_and_trusted_proxies_parse() {
        let defaults = api_config(&[]);
        assert!(defaults.limits.per_ip_per_sec > 0, "on by default");
        assert_eq!(
            defaults.trusted_proxies,
            TrustedProxies::default(),
            "no proxy trusted unless named"
        );
        let behind_ingress = api_config(&["--trusted-proxies", "10.0.0.0/8,192.168.0.7"]);
        assert_ne!(behind_ingress.trusted_proxies, TrustedProxies::default());
        let refused = parse(&["--trusted-proxies=ingress"]).err().unwrap();
        assert!(refused.to_string().contains("\"ingress\""), "{refused}");
    }
}
