//! `kubectl flashsale`: a sale's status, the plan of a manifest before it is
//! applied, the kill switch and restocks, the merchant's report and the
//! risk scorer's suspects. Found by
//! kubectl through `PATH`; colours only on a terminal.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use flashsale_operator::cli::{self, EventLine};
use flashsale_operator::model::crd::FlashSale;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};

/// Look at and steer FlashSales.
#[derive(Parser)]
#[command(name = "kubectl flashsale", version)]
struct Args {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// State, conditions, stock per shard, lag, replicas, reconciliations,
    /// recent events and the next transition.
    Status {
        /// The FlashSale.
        name: String,
    },
    /// What a manifest will do, and when, before it is applied: validated
    /// by the API server (a dry run: the CRD's own messages), then the
    /// operator's timeline.
    Plan {
        /// The manifest (`-` for standard input).
        #[arg(short, long)]
        file: PathBuf,
        /// The instant to plan at (RFC 3339; default now).
        #[arg(long)]
        at: Option<DateTime<Utc>>,
    },
    /// Turns the kill switch on: purchases answer PAUSED.
    Pause {
        /// The FlashSale.
        name: String,
    },
    /// Turns the kill switch off.
    Resume {
        /// The FlashSale.
        name: String,
    },
    /// Sets the stock to UNITS (a shrink below what is sold is refused by
    /// the operator, with a condition that says so).
    Restock {
        /// The FlashSale.
        name: String,
        /// The new stock.
        units: i32,
    },
    /// After the end: sold, paid, cancelled, failed, timed out, per minute,
    /// and whether I1–I6 held.
    Report {
        /// The FlashSale.
        name: String,
    },
    /// Risk scoring (`spec.risk`): orders scored, cancelled and held, and
    /// the highest-scored shoppers with what each rule saw.
    Risk {
        /// The FlashSale.
        name: String,
    },
}

const MANAGER: &str = "kubectl-flashsale";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            anstream::eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes API server (KUBECONFIG)")?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &namespace);
    let now = Utc::now();
    match args.command {
        Command::Status { name } => {
            let fs = sales
                .get(&name)
                .await
                .context(format!("FlashSale {name}"))?;
            let events = recent_events(&client, &namespace, &name).await?;
            anstream::print!("{}", cli::status_report(&fs, &events, now));
        }
        Command::Plan { file, at } => {
            let manifest = read_manifest(&file)?;
            let fs = dry_run(&sales, &namespace, manifest).await?;
            anstream::print!("{}", cli::plan_report(&fs, at.unwrap_or(now)));
        }
        Command::Pause { name } => {
            change(&sales, &name, serde_json::json!({"paused": true})).await?
        }
        Command::Resume { name } => {
            change(&sales, &name, serde_json::json!({"paused": false})).await?;
        }
        Command::Restock { name, units } => {
            change(&sales, &name, serde_json::json!({"stock": units})).await?;
        }
        Command::Report { name } => {
            let fs = sales
                .get(&name)
                .await
                .context(format!("FlashSale {name}"))?;
            anstream::print!("{}", cli::report(&fs).map_err(anyhow::Error::msg)?);
        }
        Command::Risk { name } => {
            let fs = sales
                .get(&name)
                .await
                .context(format!("FlashSale {name}"))?;
            anstream::print!("{}", cli::risk_report(&fs).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(())
}

fn read_manifest(file: &PathBuf) -> anyhow::Result<serde_json::Value> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(file).context(format!("{}", file.display()))?
    };
    serde_saphyr::from_str(&text).context("the manifest is not YAML")
}

/// The manifest as the API server would store it (defaults filled in), or
/// its refusal, word for word: a server-side apply in dry-run mode, so the
/// CRD's schema and CEL rules (transition rules too) judge it.
async fn dry_run(
    sales: &Api<FlashSale>,
    namespace: &str,
    mut manifest: serde_json::Value,
) -> anyhow::Result<FlashSale> {
    let name = manifest["metadata"]["name"]
        .as_str()
        .context("the manifest has no metadata.name")?
        .to_string();
    manifest["metadata"]["namespace"] = namespace.into();
    match sales
        .patch(
            &name,
            &PatchParams::apply(MANAGER).dry_run(),
            &Patch::Apply(manifest),
        )
        .await
    {
        Ok(fs) => Ok(fs),
        Err(kube::Error::Api(status)) => anyhow::bail!("invalid: {}", status.message),
        Err(e) => Err(e).context("the dry run failed"),
    }
}

/// Patches the spec and says what changed.
async fn change(sales: &Api<FlashSale>, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    let before = sales.get(name).await.context(format!("FlashSale {name}"))?;
    let after = sales
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) => anyhow::anyhow!("refused: {}", status.message),
            other => other.into(),
        })?;
    anstream::print!("{}", cli::change_report(&before.spec, &after.spec));
    Ok(())
}

/// The sale's last few events, newest last.
async fn recent_events(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<EventLine>> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let listed = events
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=FlashSale,involvedObject.name={name}"
        )))
        .await
        .context("events")?;
    let mut lines: Vec<EventLine> = listed
        .items
        .into_iter()
        .map(|e| EventLine {
            at: e
                .last_timestamp
                .map(|t| flashsale_operator::model::timeline::to_chrono(&t))
                .or_else(|| {
                    e.event_time.map(|t| {
                        DateTime::from_timestamp_micros(t.0.as_microsecond()).unwrap_or_default()
                    })
                })
                .unwrap_or_default(),
            kind: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            note: e.message.unwrap_or_default(),
        })
        .collect();
    lines.sort_by_key(|e| e.at);
    let keep = lines.len().saturating_sub(8);
    Ok(lines.split_off(keep))
}
