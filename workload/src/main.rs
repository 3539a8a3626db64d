//! `flashsale`: the workload binary. One image, one subcommand per role.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use flashsale_workload::api::auth::AuthConfig;
use flashsale_workload::api::limits::LimitConfig;
use flashsale_workload::api::server::{ApiConfig, serve};
use flashsale_workload::bus::producer::ProducerSettings;
use flashsale_workload::redis::RedisTarget;

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
    Consumer,
    /// Jobs the operator runs for a sale.
    #[command(subcommand)]
    Job(Job),
    /// Apply the database schema migrations (idempotent).
    Migrate(Database),
    /// Run a shopper storm against the API and check the invariants after it.
    Load,
}

#[derive(Subcommand)]
enum Job {
    /// Compare Redis, Kafka and PostgreSQL for a sale, repair drift toward the
    /// database, print a machine-readable report.
    Reconcile,
    /// Once a sale's orders are drained: a last reconciliation, then delete
    /// the sale's Redis keys. Never deletes orders.
    Cleanup,
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
    /// Address to listen on.
    #[arg(long, env = "FLASHSALE_LISTEN", default_value = "127.0.0.1:18080")]
    listen: SocketAddr,
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
    /// Accept `X-User-Id` as the shopper id without a token. Development only.
    #[arg(long, env = "FLASHSALE_DEV_IDENTITY")]
    dev_identity: bool,
    /// Requests per second for the whole process (0 = no limit).
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_GLOBAL", default_value_t = 100_000)]
    rate_limit_global: u32,
    /// Requests per second per shopper (0 = no limit).
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_SHOPPER", default_value_t = 10)]
    rate_limit_shopper: u32,
    /// Requests per second per client address (0 = no limit; shoppers behind
    /// one NAT or proxy share an address).
    #[arg(long, env = "FLASHSALE_RATE_LIMIT_IP", default_value_t = 0)]
    rate_limit_ip: u32,
    /// How long an order may wait for Kafka's acknowledgement before the
    /// purchase is refused and its stock released.
    #[arg(long, env = "FLASHSALE_PRODUCE_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    produce_timeout: Duration,
    /// How long the producer waits to fill a batch.
    #[arg(long, env = "FLASHSALE_PRODUCE_LINGER", default_value = "1ms", value_parser = humantime::parse_duration)]
    produce_linger: Duration,
}

impl ApiArgs {
    fn into_config(self) -> anyhow::Result<ApiConfig> {
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("failed to read {}", path.display()))
        };
        Ok(ApiConfig {
            listen: self.listen,
            namespace: self.namespace,
            redis: self.services.redis,
            database_url: self.services.database.database_url,
            kafka: self.services.kafka,
            auth: AuthConfig {
                hs256_secret: self
                    .jwt_hs256_secret_file
                    .as_ref()
                    .map(read)
                    .transpose()?
                    .map(|s| s.trim_ascii().to_vec()),
                rs256_public_pem: self
                    .jwt_rs256_public_key_file
                    .as_ref()
                    .map(read)
                    .transpose()?,
                dev_identity: self.dev_identity,
            },
            limits: LimitConfig {
                global_per_sec: self.rate_limit_global,
                per_shopper_per_sec: self.rate_limit_shopper,
                per_ip_per_sec: self.rate_limit_ip,
            },
            producer: ProducerSettings {
                timeout: self.produce_timeout,
                linger: self.produce_linger,
            },
        })
    }
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
        Command::Consumer | Command::Job(_) | Command::Load => {
            anyhow::bail!("not built yet: this subcommand arrives with the pipeline issue")
        }
    }
}
