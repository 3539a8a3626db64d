//! Many sales at once (issue 38, `make many`): 1, 100 and 1,000 sales under
//! one operator, warmed and opened at the same instant the way a
//! marketplace opens at 8 pm, then paused together. Per count: how late
//! each transition came, the operator's CPU and memory while they live,
//! the Kafka partitions they hold and the broker's start-up with them, and
//! PostgreSQL's connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::{client_config, topics};
use flashsale_workload::domain::sale::SaleRef;
use futures::{StreamExt, TryStreamExt, stream};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;
use sqlx::PgPool;

use crate::cpu;
use crate::operator::{Cluster, Trials};

/// Warm-up lead of every sale: its Redis state is loaded this long before
/// the start.
const LEAD_SECS: i64 = 20;
/// The consumers of a small sale: none while nothing waits (the node could
/// not run a pod per sale for 1,000 sales), two at most, so each sale holds
/// two topics of two partitions.
const PARTITIONS_PER_TOPIC: i32 = 2;
/// Sales created or patched at once.
const CONCURRENT_CALLS: usize = 16;
/// How long the live sales are watched for the operator's CPU.
const STEADY: Duration = Duration::from_secs(30);

/// What one count of sales measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManySales {
    /// Sales at once.
    pub sales: usize,
    /// From the first create to the last sale Scheduled (row and topics made), s.
    pub all_scheduled_secs: f64,
    /// Warm first seen − (start − lead), per sale.
    pub warm_late: Trials,
    /// Live first seen − start, per sale.
    pub live_late: Trials,
    /// `paused: true` patched → Paused first reported in the status, per sale
    /// (the switch itself reaches Redis before, from a watch of its own).
    pub pause_late: Trials,
    /// Sales not Live 5 min after their start, and not Paused 5 min after
    /// the patch (their lateness is not in the figures above).
    pub not_live: usize,
    pub not_paused: usize,
    /// Each sale's `consumers.pollInterval`: a live sale is reconciled this often.
    pub poll_interval: String,
    /// The operator's cores while every sale lived (no traffic), and the
    /// other parts it kept busy.
    pub live_share: cpu::CpuShare,
    /// The operator's resident memory with every sale live, MiB.
    pub operator_rss_mib: f64,
    /// Partitions of these sales' topics, and of the whole broker.
    pub sale_partitions: usize,
    pub broker_partitions: usize,
    /// Stopped and started with them: until the stack's script saw it
    /// started, s (`None`: not within its minute).
    pub broker_start_secs: Option<f64>,
    /// ... until a consumer group could be deleted (its coordinator loaded), s.
    pub groups_answer_secs: f64,
    /// PostgreSQL client connections while they lived.
    pub database_connections: i64,
}

/// Runs each count in turn, each in a namespace of its own, removed after.
pub async fn run(
    db: &PgPool,
    counts: &[usize],
    poll_interval: &str,
) -> anyhow::Result<Vec<ManySales>> {
    let mut measured = Vec::new();
    for &n in counts {
        eprintln!("many sales: {n}");
        let cluster = Cluster::new().await?;
        let result = one_count(db, &cluster, n, poll_interval).await;
        if let Ok(m) = &result {
            eprintln!("{}", render(m));
        }
        cluster.remove().await?;
        measured.push(result?);
    }
    Ok(measured)
}

async fn one_count(
    db: &PgPool,
    cluster: &Cluster,
    n: usize,
    poll_interval: &str,
) -> anyhow::Result<ManySales> {
    let seen = Seen::watch(cluster.sales.clone());
    let operator = cluster.operator("docker.io/flashsale/probe:1")?;
    let name = |i: usize| format!("many-{i}");
    let lead = format!("{LEAD_SECS}s");
    let small_sale = serde_json::json!({
        "stock": 1000, "purchaseLimit": 1, "sharding": {"shards": 2},
        "consumers": {"minReplicas": 0, "maxReplicas": PARTITIONS_PER_TOPIC, "pollInterval": poll_interval},
    });

    // Scheduled a day ahead: rows and topics made before anything is due.
    let created = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (sale, spec, lead) = (name(i), small_sale.clone(), &lead);
            async move { cluster.create(&sale, 86_400, 3600, lead, spec).await }
        })
        .buffer_unordered(CONCURRENT_CALLS)
        .try_collect::<Vec<_>>()
        .await?;
    let unscheduled = seen
        .wait_all(n, |f| f.scheduled, Duration::from_secs(600))
        .await;
    anyhow::ensure!(
        unscheduled == 0,
        "{unscheduled} of {n} sales not Scheduled in 10 min"
    );
    let all_scheduled_secs = created.elapsed().as_secs_f64();

    // Then all moved to one start, far enough ahead for every patch.
    let start = Utc::now()
        + chrono::Duration::seconds(10 + LEAD_SECS)
        + chrono::Duration::milliseconds(20 * n as i64);
    let window = serde_json::json!({"window": {
        "start": start.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "end": (start + chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }});
    patch_all(cluster, n, &name, &window).await?;
    anyhow::ensure!(
        Utc::now() < start - chrono::Duration::seconds(LEAD_SECS),
        "patching {n} sales took past their warm-up"
    );
    let until_live = (start - Utc::now()).to_std()? + Duration::from_secs(300);
    let not_live = seen.wait_all(n, |f| f.live, until_live).await;
    let warm_due = start - chrono::Duration::seconds(LEAD_SECS);
    let warm_late = seen.late(|f| f.warm.or(f.live), |_| warm_due);
    let live_late = seen.late(|f| f.live, |_| start);

    // Living, untouched: what the operator spends on them.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let parts = [(operator.pid(), "operator")];
    let before = cpu::snapshot(&parts, "benchmark children");
    tokio::time::sleep(STEADY).await;
    let live_share = cpu::share(&before, &cpu::snapshot(&parts, "benchmark children"), 1);
    let operator_rss_mib = operator.rss_mib().0;
    let database_connections: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
    )
    .fetch_one(db)
    .await?;

    // The kill switch on every sale at once.
    let patched = patch_all(cluster, n, &name, &serde_json::json!({"paused": true})).await?;
    let not_paused = seen
        .wait_all(n, |f| f.paused, Duration::from_secs(300))
        .await;
    let pause_late = seen.late(|f| f.paused, |sale| patched[sale]);

    operator.stop().await;
    let (sale_partitions, broker_partitions) = partitions(&cluster.ns)?;
    eprintln!(
        "{n} sales: late p99 warm {:.0} ms, live {:.0} ms ({not_live} never), pause reported {:.0} ms; \
         operator {operator_rss_mib:.1} MiB; {}; now restarting the broker with {broker_partitions} partitions",
        warm_late.p99_ms,
        live_late.p99_ms,
        pause_late.p99_ms,
        cpu::render(&live_share)
    );
    let (broker_start_secs, groups_answer_secs) = restart_broker(&cluster.ns).await?;
    Ok(ManySales {
        sales: n,
        all_scheduled_secs,
        warm_late,
        live_late,
        pause_late,
        not_live,
        not_paused,
        poll_interval: poll_interval.to_string(),
        live_share,
        operator_rss_mib,
        sale_partitions,
        broker_partitions,
        broker_start_secs,
        groups_answer_secs,
        database_connections,
    })
}

/// Merge-patches `spec` into sales 0..n, a few at once; when each was sent.
async fn patch_all(
    cluster: &Cluster,
    n: usize,
    name: &impl Fn(usize) -> String,
    spec: &serde_json::Value,
) -> anyhow::Result<HashMap<String, DateTime<Utc>>> {
    stream::iter(0..n)
        .map(|i| async move {
            let sale = name(i);
            let sent = Utc::now();
            cluster.patch(&sale, spec.clone()).await?;
            Ok::<_, anyhow::Error>((sale, sent))
        })
        .buffer_unordered(CONCURRENT_CALLS)
        .try_collect()
        .await
}

/// Stops the broker and starts it again: seconds until the stack's script
/// saw it started (`None`: not within the script's minute), and until it
/// answered for the sales' consumer groups (it starts before it has loaded
/// the group coordinator's partitions: a removal right after the start was
/// refused NotCoordinator with 1,000 sales).
async fn restart_broker(ns: &str) -> anyhow::Result<(Option<f64>, f64)> {
    stack::stack_script("kafka.sh", &["down"]);
    let started = Instant::now();
    let script = std::process::Command::new(stack::repo_dir().join("e2e/stack/kafka.sh"))
        .arg("up")
        .env("FLASHSALE_RUN", stack::run_dir())
        .output()?;
    let broker_start = script
        .status
        .success()
        .then(|| started.elapsed().as_secs_f64());
    let admin = Admin::new(&stack::kafka_bootstrap())?;
    let group = topics::consumer_group(&SaleRef::new(ns, "many-0")?);
    while let Err(e) = admin.delete_group(&group).await {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the restarted broker did not answer for consumer groups in 10 min: {e}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((broker_start, started.elapsed().as_secs_f64()))
}

/// Partitions of the topics of namespace `ns`'s sales, and of all topics.
fn partitions(ns: &str) -> anyhow::Result<(usize, usize)> {
    let consumer: BaseConsumer = client_config(&stack::kafka_bootstrap()).create()?;
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(30))?;
    let prefix = format!("flashsale.{ns}.");
    let count = |mine: bool| {
        metadata
            .topics()
            .iter()
            .filter(|t| !mine || t.name().starts_with(&prefix))
            .map(|t| t.partitions().len())
            .sum()
    };
    Ok((count(true), count(false)))
}

/// When a sale was first seen in each state.
#[derive(Debug, Default, Clone, Copy)]
struct Firsts {
    scheduled: Option<DateTime<Utc>>,
    warm: Option<DateTime<Utc>>,
    live: Option<DateTime<Utc>>,
    paused: Option<DateTime<Utc>>,
}

/// The first sighting of each sale's states, from a watch on its namespace
/// (one stream, not a poll per sale: 1,000 sales polled every 20 ms would
/// load the apiserver the run measures). The watch ends when this is dropped.
struct Seen {
    firsts: Arc<Mutex<HashMap<String, Firsts>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Seen {
    /// A dropped JoinHandle leaves its task running: one count's watch would
    /// go on loading the apiserver through the next count's measurement.
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Seen {
    fn watch(sales: Api<FlashSale>) -> Self {
        let firsts = Arc::new(Mutex::new(HashMap::<String, Firsts>::new()));
        let into = firsts.clone();
        let watch = tokio::spawn(async move {
            let changes = watcher(sales, watcher::Config::default()).applied_objects();
            let mut changes = std::pin::pin!(changes);
            while let Some(change) = changes.next().await {
                let Ok(fs) = change else { continue };
                let (Some(name), Some(state)) = (fs.metadata.name, fs.status.and_then(|s| s.state))
                else {
                    continue;
                };
                let now = Utc::now();
                let mut firsts = into.lock().expect("not poisoned");
                let f = firsts.entry(name).or_default();
                let slot = match state {
                    SaleState::Scheduled => &mut f.scheduled,
                    SaleState::Warm => &mut f.warm,
                    SaleState::Live => &mut f.live,
                    SaleState::Paused => &mut f.paused,
                    _ => continue,
                };
                slot.get_or_insert(now);
            }
        });
        Self { firsts, watch }
    }

    fn count(&self, state: fn(&Firsts) -> Option<DateTime<Utc>>) -> usize {
        let firsts = self.firsts.lock().expect("not poisoned");
        firsts.values().filter(|f| state(f).is_some()).count()
    }

    /// Waits until all `n` sales were seen in `state`, at most `timeout`;
    /// how many were not.
    async fn wait_all(
        &self,
        n: usize,
        state: fn(&Firsts) -> Option<DateTime<Utc>>,
        timeout: Duration,
    ) -> usize {
        let deadline = Instant::now() + timeout;
        while self.count(state) < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        n - self.count(state)
    }

    /// How late `state` came after `due`, per sale, ms.
    fn late(
        &self,
        state: fn(&Firsts) -> Option<DateTime<Utc>>,
        due: impl Fn(&str) -> DateTime<Utc>,
    ) -> Trials {
        let firsts = self.firsts.lock().expect("not poisoned");
        Trials::of(
            firsts
                .iter()
                .filter_map(|(name, f)| {
                    state(f).map(|at| (at - due(name)).num_milliseconds().max(0) as f64)
                })
                .collect(),
        )
    }
}

/// Two lines per count: the figures, then the cores each part kept busy
/// while the sales lived.
pub fn render(m: &ManySales) -> String {
    let parts: Vec<String> = m
        .live_share
        .groups
        .iter()
        .map(|g| format!("{} {:.3}", g.name, g.cores))
        .collect();
    format!(
        "{:>5} sales, polled every {}: all scheduled in {:.1} s; late p50/p99/max: warm {}, live {} ({} never), pause reported {} ({} never); \
         operator {:.1} MiB; partitions {} (broker {}); broker start {}, groups answer {:.1} s; \
         {} PostgreSQL connections\n       cores while live, idle: {}",
        m.sales,
        m.poll_interval,
        m.all_scheduled_secs,
        late(&m.warm_late),
        late(&m.live_late),
        m.not_live,
        late(&m.pause_late),
        m.not_paused,
        m.operator_rss_mib,
        m.sale_partitions,
        m.broker_partitions,
        m.broker_start_secs
            .map_or("over a minute".to_string(), |s| format!("{s:.1} s")),
        m.groups_answer_secs,
        m.database_connections,
        parts.join(", ")
    )
}

fn late(t: &Trials) -> String {
    format!("{:.0}/{:.0}/{:.0} ms", t.p50_ms, t.p99_ms, t.max_ms)
}
