//! `flashsale`: the workload binary. One image, one subcommand per role.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

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
    Api,
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
        Command::Api | Command::Consumer | Command::Job(_) | Command::Load => {
            anyhow::bail!(
                "not built yet: this subcommand arrives with the intake and pipeline issues"
            )
        }
    }
}
