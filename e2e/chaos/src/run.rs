//! One chaos run: a live sale on the real stack and cluster (two operators
//! with leader election, the shopper API and a consumer as processes,
//! consumer pods and Jobs on the nodes; for the node kinds, all of them
//! installed by the chart on the two nodes), stormed by retrying shoppers
//! while one fault is injected; after the end, the final reconciliation,
//! then I1–I6 from the invariant checker and every 202 looked up as its
//! shopper.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use flashsale_testkit::procs::{Proc, wait_http};
use flashsale_workload::bus::topics;
use flashsale_workload::domain::invariants::evaluate;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::load::evidence::{Told as CheckerTold, gather};
use flashsale_workload::redis::keys::ShardKeys;
use flashsale_workload::redis::store::SaleStore;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use crate::faults::{self, Injected, Kind};
use crate::{nodes, storm};

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Units for sale.
    pub stock: i64,
    /// The window, seconds.
    pub window_secs: i64,
    /// New purchases per second (1.5 units each on average): the stock
    /// sells out late in the window.
    pub rate: u32,
}

/// What one run found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// The fault.
    pub kind: String,
    /// Its index among the runs of that kind.
    pub index: u32,
    /// The seed that replays it.
    pub seed: u64,
    /// Every invariant held and nothing was lost or oversold.
    pub held: bool,
    /// I1–I6: (id, held, detail).
    pub invariants: Vec<(String, Option<bool>, String)>,
    /// Orders answered 202.
    pub accepted_orders: usize,
    /// Their units.
    pub accepted_units: i64,
    /// 202s that are neither persisted nor released (must be 0).
    pub orders_lost: usize,
    /// Units persisted beyond the stock, or answered 202 and then refused
    /// by the database for want of stock (must be 0).
    pub oversold_units: i64,
    /// 202s whose order its shopper could not see (must be 0).
    pub lookups_failed: usize,
    /// Seconds in which shoppers got only 503s or no answer.
    pub unavailable_secs: f64,
    /// Decisions (202 or 4xx) shoppers got while the fault held: a closed
    /// storm of 24 retrying shoppers soon waits entirely on the purchases a
    /// fault stalls, so this, not `unavailable_secs`, says whether the
    /// others were still served.
    pub decided_during_fault: usize,
    /// Seconds from the window's end to the final reconciliation.
    pub converge_secs: Option<f64>,
    /// Answers by status and code.
    pub answers: std::collections::BTreeMap<String, u64>,
    /// What happened when, seconds from the run's start.
    pub timeline: Vec<(f64, String)>,
    /// Why the run could not finish, if it could not.
    pub error: Option<String>,
}

impl RunResult {
    /// Why a run did not hold, in one line: what a CI log's last lines keep.
    pub fn why_broken(&self) -> String {
        if let Some(error) = &self.error {
            return format!("could not finish: {error}");
        }
        let mut why: Vec<String> = self
            .invariants
            .iter()
            .filter(|(_, holds, _)| *holds != Some(true))
            .map(|(id, _, detail)| format!("{id}: {detail}"))
            .collect();
        for (count, what) in [
            (self.orders_lost, "lost"),
            (self.oversold_units as usize, "units oversold"),
            (self.lookups_failed, "202s their shopper could not look up"),
        ] {
            if count > 0 {
                why.push(format!("{count} {what}"));
            }
        }
        if self.converge_secs.is_none() {
            why.push("no final reconciliation within 150 s".into());
        }
        if !self.kept_selling() {
            why.push("nothing decided while Redis was down".into());
        }
        why.join("; ")
    }

    /// A sale that may sell through PostgreSQL kept deciding purchases
    /// while Redis was down (other kinds: true).
    fn kept_selling(&self) -> bool {
        self.kind != Kind::RedisDown.name() || self.decided_during_fault > 0
    }
}

/// The processes of a run: two operators, the API, a consumer.
struct Processes {
    dir: PathBuf,
    env: Vec<(String, String)>,
    namespace: String,
    api_port: u16,
    api_internal_port: u16,
    operators: Vec<(String, Proc)>,
    api: Option<Proc>,
    consumer: Option<Proc>,
}

fn debug_bin(name: &str) -> PathBuf {
    stack::repo_dir().join("target/debug").join(name)
}

fn pod_url(url: &str) -> String {
    url.replace("127.0.0.1", "198.18.0.1")
}

/// The run's database behind toxiproxy: the proxy's port, the same name.
fn proxied_database(db_url: &str) -> String {
    let (_, name) = db_url.rsplit_once('/').unwrap_or((db_url, ""));
    format!(
        "{}/{name}",
        stack::database_proxied_url()
            .rsplit_once('/')
            .map_or("", |(s, _)| s)
    )
}

impl Processes {
    /// Two operators, the API and a consumer for `kind`'s run, on free
    /// ports, their logs in `dir`.
    async fn start(
        kind: Kind,
        services: &Services,
        namespace: &str,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let free_port = || -> std::io::Result<u16> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        };
        let mut procs = Processes {
            dir: dir.to_path_buf(),
            env: services.environment(kind),
            namespace: namespace.to_string(),
            api_port: free_port()?,
            api_internal_port: free_port()?,
            operators: Vec::new(),
            api: None,
            consumer: None,
        };
        procs.start_operator("a")?;
        procs.start_operator("b")?;
        procs.start_api().await?;
        procs.start_consumer()?;
        Ok(procs)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(debug_bin(program));
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn start_operator(&mut self, identity: &str) -> anyhow::Result<()> {
        let mut c = self.command("flashsale-operator");
        c.args(["--watch-namespace", &self.namespace, "--migrate"])
            .args(["--listen", "127.0.0.1:0", "--lease-seconds", "6"])
            .args(["--lease-namespace", &self.namespace, "--identity", identity])
            .env("RUST_LOG", "info,kube=warn");
        let proc = Proc::start(&self.dir.join(format!("operator-{identity}.log")), c)?;
        self.operators.retain(|(i, _)| i != identity);
        self.operators.push((identity.to_string(), proc));
        Ok(())
    }

    async fn start_api(&mut self) -> anyhow::Result<()> {
        let mut c = self.command("flashsale");
        c.args(["api", "--namespace", &self.namespace, "--dev-identity"])
            .args(["--listen", &format!("127.0.0.1:{}", self.api_port)])
            .args([
                "--internal-listen",
                &format!("127.0.0.1:{}", self.api_internal_port),
            ])
            .args(["--rate-limit-shopper", "0", "--rate-limit-ip", "0"])
            .env("RUST_LOG", "info");
        self.api = Some(Proc::start(&self.dir.join("api.log"), c)?);
        wait_http(
            &format!("http://127.0.0.1:{}/healthz", self.api_internal_port),
            Duration::from_secs(30),
        )
        .await
        .map_err(anyhow::Error::msg)
    }

    fn start_consumer(&mut self) -> anyhow::Result<()> {
        let mut c = self.command("flashsale");
        c.args(["consumer", "--all-sales", "--namespace", &self.namespace])
            .env("RUST_LOG", "info");
        self.consumer = Some(Proc::start(&self.dir.join("consumer.log"), c)?);
        Ok(())
    }
}

/// Seconds since `t0`, for the timeline.
fn at(t0: Instant) -> f64 {
    (t0.elapsed().as_millis() as f64 / 100.0).round() / 10.0
}

/// Runs `kind` once with `seed`.
pub async fn run(kind: Kind, index: u32, seed: u64, size: Size, dir: &Path) -> RunResult {
    let mut result = RunResult {
        kind: kind.name(),
        index,
        seed,
        held: false,
        invariants: Vec::new(),
        accepted_orders: 0,
        accepted_units: 0,
        orders_lost: 0,
        oversold_units: 0,
        lookups_failed: 0,
        unavailable_secs: 0.0,
        decided_during_fault: 0,
        converge_secs: None,
        answers: Default::default(),
        timeline: Vec::new(),
        error: None,
    };
    if let Err(e) = run_inner(kind, seed, size, dir, &mut result).await {
        result.error = Some(format!("{e:#}"));
        result.held = false;
    }
    result
}

async fn run_inner(
    kind: Kind,
    seed: u64,
    size: Size,
    dir: &Path,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    std::fs::create_dir_all(dir)?;
    let client = stack::kube_client().await;
    anyhow::ensure!(
        flashsale_operator::cluster::install::crd(&client).await?,
        "the FlashSale CRD was not established within 20 s"
    );
    let namespace = stack::unique_name(faults::NAMESPACE_PREFIX);
    let _namespace = test_namespace(&client, &namespace).await?;
    let services = Services::for_kind(kind).await?;
    let mut workload = if kind.in_cluster() {
        nodes::make_whole()?;
        let api_url = install_chart(&client, &namespace, &services.db_url).await?;
        Workload::Chart { api_url }
    } else {
        Workload::Host(Processes::start(kind, &services, &namespace, dir).await?)
    };
    // In the result as it grows: a run that fails keeps its timeline.
    result
        .timeline
        .push((at(t0), "workload started".to_string()));

    let size = stretched(kind, size);
    let timing = Timing::draw(kind, size, &mut rng)?;
    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &namespace);
    let fs: FlashSale = serde_json::from_value(sale_manifest(kind, &namespace, size, &timing))?;
    sales.create(&PostParams::default(), &fs).await?;
    let sale = SaleRef::new(&namespace, "storm")?;
    let strike = Strike {
        kind,
        size,
        timing: &timing,
        sales: &sales,
        sale: &sale,
        kafka: &services.kafka,
        redis: &services.redis,
        namespace: &namespace,
        t0,
    };
    let told = strike.storm_through(&mut workload, result).await?;

    // The final reconciliation after the (possibly extended) end.
    let converged = wait_reconciled(&sales, Duration::from_secs(150)).await;
    let end = sales
        .get("storm")
        .await
        .map(|fs| flashsale_operator::model::timeline::to_chrono(&fs.spec.window.end))
        .unwrap_or(timing.end);
    result
        .timeline
        .push((at(t0), format!("reconciled: {converged:?}")));
    result.converge_secs = converged.map(|t| (t - end).num_milliseconds() as f64 / 1000.0);

    let checked = check(&services, &sale, &told, &workload.api_url(), result).await;
    result.timeline.push((
        at(t0),
        match &checked {
            Ok(()) => "checked".into(),
            Err(e) => format!("check failed: {e:#}"),
        },
    ));
    if checked.is_err() || !result.held {
        keep_evidence(&namespace, dir);
    }
    checked?;
    // Deleted while its operators run: the finalizer removes its topics.
    let _ = sales.delete("storm", &DeleteParams::default()).await;
    for _ in 0..300 {
        if sales.get_opt("storm").await.ok().flatten().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The services a run's sale uses, as this host reaches them.
struct Services {
    redis: String,
    kafka: String,
    /// The brokers as pods reach them.
    pod_kafka: String,
    db_url: String,
}

impl Services {
    /// The replicated kinds' sale on the three brokers and on Patroni's
    /// PostgreSQL, each made whole first (every node up, every replica in
    /// sync: a run starts from every copy); the others' on the single
    /// broker and PostgreSQL; a fresh database either way.
    async fn for_kind(kind: Kind) -> anyhow::Result<Self> {
        let (kafka, pod_kafka, db_url) = if kind.replicated() {
            anyhow::ensure!(
                faults::restart_stack("kafka.sh", &["replicated_up"]),
                "the three Kafka nodes are not whole (every replica in sync) before the run"
            );
            anyhow::ensure!(
                faults::restart_stack("patroni.sh", &["up"]),
                "the PostgreSQL primary and standby are not both up before the run"
            );
            let (kafka, pod_kafka) = stack::kafka_replicated_bootstrap();
            let db = stack::fresh_database_on(&stack::database_replicated_url()).await;
            (kafka, pod_kafka, db)
        } else {
            (
                stack::kafka_bootstrap(),
                "198.18.0.1:19094".to_string(),
                stack::fresh_database_url().await,
            )
        };
        let redis = if kind.on_cluster() {
            let seeds: Vec<String> = stack::redis_cluster_urls()
                .iter()
                .map(|u| u.trim_start_matches("redis://").to_string())
                .collect();
            format!("redis-cluster://{}", seeds.join(","))
        } else {
            stack::redis_url()
        };
        Ok(Self {
            redis,
            kafka,
            pod_kafka,
            db_url,
        })
    }

    /// The host processes' environment: a slowed service is reached through
    /// toxiproxy by every process of the run (the pods too, for
    /// PostgreSQL); the checks at the end go direct.
    fn environment(&self, kind: Kind) -> Vec<(String, String)> {
        let slowed = |service: &str| kind.slowed().is_some_and(|(p, _)| p[0] == service);
        let redis_at = if slowed("redis") {
            stack::redis_proxied_url()
        } else {
            self.redis.clone()
        };
        let kafka_at = if slowed("kafka") {
            stack::kafka_proxied_bootstrap()
        } else {
            self.kafka.clone()
        };
        let db_at = if slowed("postgres") {
            proxied_database(&self.db_url)
        } else {
            self.db_url.clone()
        };
        let (replicas, min_insync) = if kind.replicated() {
            ("3", "2")
        } else {
            ("1", "1")
        };
        [
            ("FLASHSALE_REDIS", redis_at),
            ("KAFKA_BOOTSTRAP", kafka_at),
            ("DATABASE_URL", db_at.clone()),
            ("FLASHSALE_POD_REDIS", pod_url(&self.redis)),
            ("FLASHSALE_POD_DATABASE_URL", pod_url(&db_at)),
            ("FLASHSALE_POD_KAFKA", self.pod_kafka.clone()),
            ("FLASHSALE_TOPIC_REPLICATION_FACTOR", replicas.into()),
            ("FLASHSALE_TOPIC_MIN_INSYNC_REPLICAS", min_insync.into()),
            (
                "FLASHSALE_WORKLOAD_IMAGE",
                "docker.io/flashsale/flashsale:dev".into(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into()
    }
}

/// Where a run's operators, API and consumers run.
enum Workload {
    /// As processes on this host; the sale's consumer pods and Jobs on the
    /// nodes.
    Host(Processes),
    /// Installed by the chart into the run's namespace, on the nodes (the
    /// node kinds): the API reached through its Service.
    Chart { api_url: String },
}

impl Workload {
    fn api_url(&self) -> String {
        match self {
            Workload::Host(procs) => format!("http://127.0.0.1:{}", procs.api_port),
            Workload::Chart { api_url } => api_url.clone(),
        }
    }
}

/// The release name of a node kind's chart, in its run's namespace.
const CHART_RELEASE: &str = "chaos";

/// The chart installed into `namespace` against the database of `db_url`,
/// the shoppers known by their dev identity header, no rate limits (the
/// storm comes from this one host); the API Service's URL.
async fn install_chart(client: &Client, namespace: &str, db_url: &str) -> anyhow::Result<String> {
    let database = db_url.rsplit('/').next().unwrap_or_default();
    let sets: Vec<String> = [
        format!("database.name={database}"),
        "api.devIdentity=true".into(),
        "jwt.hs256.enabled=false".into(),
        "api.rateLimits.perShopper=0".into(),
        "api.rateLimits.perIp=0".into(),
    ]
    .into();
    let ns = namespace.to_string();
    tokio::task::spawn_blocking(move || stack::install_chart(&ns, CHART_RELEASE, &sets))
        .await?
        .map_err(anyhow::Error::msg)?;
    let spec = Api::<Service>::namespaced(client.clone(), namespace)
        .get(&format!("{CHART_RELEASE}-flashsale-api"))
        .await?
        .spec
        .ok_or_else(|| anyhow::anyhow!("the API Service has no spec"))?;
    let ip = spec.cluster_ip.unwrap_or_default();
    let port = spec.ports.unwrap_or_default().first().map_or(0, |p| p.port);
    Ok(format!("http://{ip}:{port}"))
}

/// `size` for `kind`: its window at least the kind's shortest, the stock
/// grown with it, so that it still sells out late in the window.
fn stretched(kind: Kind, size: Size) -> Size {
    let window_secs = size.window_secs.max(kind.min_window_secs());
    Size {
        stock: size.stock * window_secs / size.window_secs,
        window_secs,
        rate: size.rate,
    }
}

/// When a run's sale opens and ends, when its fault strikes, how long it
/// holds and how slow a slowed service is.
struct Timing {
    start: chrono::DateTime<Utc>,
    end: chrono::DateTime<Utc>,
    strike_at: chrono::DateTime<Utc>,
    hold: Duration,
    latency_ms: u64,
}

impl Timing {
    /// The run's timing from its seed's random numbers (drawn in the same
    /// order for every kind: documented seeds replay): warm-up 3 s before
    /// the start, 6 s from now.
    fn draw(kind: Kind, size: Size, rng: &mut StdRng) -> anyhow::Result<Self> {
        let start = Utc::now() + chrono::Duration::seconds(6);
        let end = start + chrono::Duration::seconds(size.window_secs);
        // A transition for the operator; early for a stopped kubelet (its
        // node goes NotReady 50 s later, still inside the window); else the
        // middle of the window.
        let window_ms = size.window_secs as f64 * 1000.0;
        let into_window = |fraction: f64| start + chrono::Duration::milliseconds(fraction as i64);
        let strike_at = match kind {
            Kind::OperatorKill => match rng.random_range(0..3) {
                0 => start - chrono::Duration::seconds(3),
                1 => start,
                _ => end,
            },
            Kind::KubeletStop => into_window(rng.random_range(0.1..0.25) * window_ms),
            _ => into_window(rng.random_range(0.3..0.6) * window_ms),
        };
        let hold = Duration::from_millis(match kind {
            Kind::RedisPause => rng.random_range(2000..5000),
            Kind::KafkaUnreachable | Kind::PostgresUnreachable => 5000,
            Kind::BrokerCut => 10_000,
            Kind::RedisSlow => 4000,
            Kind::KafkaSlow => 5000,
            Kind::PostgresSlow => 6000,
            Kind::PauseResume => 2000,
            Kind::RedisFailover => 4000,
            Kind::KubeletStop => 65_000,
            Kind::RedisDown => 30_000,
            _ => 0,
        });
        // The window outlasts a Kafka fault's aftermath, or the units its
        // stalled purchases give back would return after the end, unsold
        // though shoppers were told SOLD_OUT, and I5 could not hold (seen
        // in the short mode, whose window is 10 s).
        let end = match kind.releases_late() {
            Some(aftermath) => end.max(strike_at + chrono::Duration::from_std(hold + aftermath)?),
            None => end,
        };
        let latency_ms = match kind {
            Kind::RedisSlow => rng.random_range(2200..3000),
            Kind::KafkaSlow => rng.random_range(1500..4000),
            Kind::PostgresSlow => rng.random_range(300..800),
            _ => 0,
        };
        Ok(Self {
            start,
            end,
            strike_at,
            hold,
            latency_ms,
        })
    }
}

/// The run's FlashSale: cleanup long after the check's horizon (150 s for
/// the final reconciliation), so that a run converging slowly still has its
/// Redis state checked (I6). Host processes run a consumer of their own;
/// on the nodes, two consumer pods at least, one per node.
fn sale_manifest(kind: Kind, namespace: &str, size: Size, timing: &Timing) -> serde_json::Value {
    let time = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (min_consumers, max_consumers) = if kind.in_cluster() { (2, 4) } else { (0, 2) };
    let redis_down = if kind == Kind::RedisDown {
        "database"
    } else {
        "reject"
    };
    serde_json::json!({
        "apiVersion": "flashsale.dev/v1alpha1", "kind": "FlashSale",
        "metadata": {"name": "storm", "namespace": namespace},
        "spec": {
            "sku": "SKU-CHAOS", "stock": size.stock, "purchaseLimit": 2,
            "sharding": {"shards": 4},
            "window": {"start": time(timing.start), "end": time(timing.end)},
            "warmup": {"leadTime": "3s"}, "cleanup": {"after": "5m"},
            "payment": {"timeout": "2m"},
            "consumers": {"minReplicas": min_consumers, "maxReplicas": max_consumers},
            "degradation": {"redisDown": redis_down},
        }
    })
}

/// A run's storm and its fault, struck mid-storm.
struct Strike<'a> {
    kind: Kind,
    size: Size,
    timing: &'a Timing,
    sales: &'a Api<FlashSale>,
    sale: &'a SaleRef,
    kafka: &'a str,
    redis: &'a str,
    namespace: &'a str,
    t0: Instant,
}

impl Strike<'_> {
    /// Storms the sale from just before its start to 2 s after its end,
    /// strikes, holds, undoes; what the shoppers were told.
    async fn storm_through(
        &self,
        workload: &mut Workload,
        result: &mut RunResult,
    ) -> anyhow::Result<storm::Told> {
        let (kind, t0) = (self.kind, self.t0);
        let storm_until = Instant::now()
            + (self.timing.end - Utc::now()).to_std().unwrap_or_default()
            + Duration::from_secs(2);
        sleep_until(self.timing.start - chrono::Duration::milliseconds(300)).await;
        result.timeline.push((at(t0), "storm".into()));
        let storm_began = Instant::now();
        let shoppers = tokio::spawn(storm::run(storm::Storm {
            url: workload.api_url(),
            sale: "storm".into(),
            concurrency: 24,
            rate: self.size.rate,
            until: storm_until,
        }));
        sleep_until(self.timing.strike_at).await;
        result
            .timeline
            .push((at(t0), format!("inject {}", kind.name())));
        let fault_from = storm_began.elapsed().as_secs_f64();
        match workload {
            Workload::Chart { .. } => self.strike_node(result).await?,
            Workload::Host(procs) => {
                let injected = self.inject(procs).await?;
                if kind == Kind::PostgresFailover {
                    self.flip_kill_switch(result).await?;
                }
                tokio::time::sleep(self.timing.hold).await;
                drop(injected);
            }
        }
        let fault_to = storm_began.elapsed().as_secs_f64();
        result
            .timeline
            .push((at(t0), format!("undo {}", kind.name())));
        if let Workload::Host(procs) = workload
            && matches!(
                kind,
                Kind::ApiKill | Kind::ConsumerKill | Kind::OperatorKill
            )
        {
            restart_killed(kind, procs).await?;
            result.timeline.push((at(t0), "restarted".into()));
        }
        let told = shoppers.await?;
        result.timeline.push((at(t0), "storm over".into()));
        result.accepted_orders = told.accepted.len();
        result.accepted_units = told.accepted.values().map(|(_, q)| q).sum();
        result.unavailable_secs = told.unavailable_secs();
        result.decided_during_fault = told.decided_between(fault_from, fault_to);
        result.answers = told.answers.clone();
        Ok(told)
    }

    /// The merchant's kill switch flipped on, then off after 2 s, while the
    /// database has no primary: both must reach every shard's Redis within
    /// 10 s, because the operator applies it there before it records it.
    async fn flip_kill_switch(&self, result: &mut RunResult) -> anyhow::Result<()> {
        let store = SaleStore::new(
            flashsale_workload::redis::RedisConn::connect(
                &self.redis.parse().map_err(anyhow::Error::msg)?,
            )
            .await?,
        );
        for paused in [true, false] {
            let asked = Instant::now();
            self.sales
                .patch(
                    "storm",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"paused": paused}})),
                )
                .await?;
            let took = loop {
                let mut everywhere = true;
                for shard in 0..4 {
                    let meta = store.meta(self.sale, shard).await?;
                    everywhere &= meta.is_some_and(|m| m.paused == paused);
                }
                if everywhere {
                    break asked.elapsed().as_secs_f64();
                }
                anyhow::ensure!(
                    asked.elapsed() < Duration::from_secs(10),
                    "the kill switch ({}) not in every shard 10 s after the spec said so",
                    if paused { "on" } else { "off" }
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            result.timeline.push((
                at(self.t0),
                format!(
                    "kill switch {} in every shard after {took:.2} s",
                    if paused { "on" } else { "off" }
                ),
            ));
            if paused {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        Ok(())
    }

    /// A node kind's fault on the node holding the operator leader: held,
    /// then undone; what it did on the timeline.
    async fn strike_node(&self, result: &mut RunResult) -> anyhow::Result<()> {
        let (leader, node) = stack::operator_leader(self.namespace)
            .ok_or_else(|| anyhow::anyhow!("no operator leads, or its pod has no node"))?;
        let consumers = stack::kubectl(&[
            "get",
            "pods",
            "-n",
            self.namespace,
            "-l",
            "app.kubernetes.io/component=consumer",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ]);
        let on_node = consumers.split_whitespace().filter(|n| *n == node).count();
        let all = consumers.split_whitespace().count();
        result.timeline.push((
            at(self.t0),
            format!("{node}: the operator leader {leader}, {on_node} of {all} consumers"),
        ));
        if self.kind == Kind::NodeDrain {
            let (drained, said) = nodes::drain(&node).await?;
            result
                .timeline
                .push((at(self.t0), format!("drained {node}: {said}")));
            drop(drained);
            return Ok(());
        }
        let stopped = nodes::stop_kubelet(&node);
        let not_ready = nodes::watch_not_ready(&node, self.timing.hold).await;
        // The kubelet takes seconds to be Ready again: off the storm's threads.
        tokio::task::spawn_blocking(move || drop(stopped)).await?;
        anyhow::ensure!(
            nodes::ready_within(&node, Duration::from_secs(30)).await,
            "{node} not Ready again within 30 s of its kubelet's start"
        );
        let after = not_ready.ok_or_else(|| {
            anyhow::anyhow!(
                "{node} still Ready {:?} after its kubelet stopped",
                self.timing.hold
            )
        })?;
        result.timeline.push((
            at(self.t0),
            format!("{node} NotReady {after:.1} s after its kubelet stopped; Ready again"),
        ));
        Ok(())
    }

    /// Makes a host kind's fault.
    async fn inject(&self, procs: &mut Processes) -> anyhow::Result<Injected> {
        let (kind, sales, sale, kafka, size) =
            (self.kind, self.sales, self.sale, self.kafka, self.size);
        let (end, latency_ms) = (self.timing.end, self.timing.latency_ms);
        let partition_leader = || faults::partition_leader(kafka, &topics::orders_topic(sale));
        let patch = |spec: serde_json::Value| async move {
            sales
                .patch(
                    "storm",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({ "spec": spec })),
                )
                .await
                .map(|_| ())
        };
        Ok(match kind {
            Kind::RedisRestart => faults::redis_restart(),
            Kind::RedisDown => faults::redis_down(),
            Kind::RedisFailover => faults::redis_failover(&ShardKeys::new(sale, 0).meta),
            Kind::RedisWipe => faults::redis_wipe(&ShardKeys::new(sale, 0).meta),
            Kind::RedisPause => faults::redis_pause(Duration::from_secs(5)),
            Kind::KafkaKill => faults::kafka_kill(),
            Kind::KafkaUnreachable => faults::unreachable(&faults::KAFKA_PORTS),
            Kind::KafkaWipe => faults::kafka_wipe(),
            Kind::BrokerWipe | Kind::BrokerCut => {
                let node = partition_leader()
                    .ok_or_else(|| anyhow::anyhow!("no leader of partition 0"))?;
                if kind == Kind::BrokerWipe {
                    faults::broker_wipe(&node)
                } else {
                    faults::broker_cut(&node)?
                }
            }
            Kind::ControllerKill => faults::controller_kill()?,
            Kind::PostgresFailover => faults::postgres_failover()?,
            Kind::PostgresSwitchover => {
                faults::restart_stack("patroni.sh", &["switchover"]);
                Injected::none()
            }
            Kind::PostgresRestart => faults::postgres_crash(),
            Kind::PostgresUnreachable => faults::unreachable(&faults::POSTGRES_PORTS),
            Kind::RedisSlow | Kind::KafkaSlow | Kind::PostgresSlow => {
                let (proxies, streams) = kind.slowed().unwrap_or_default();
                faults::slow(proxies, streams, latency_ms)
            }
            Kind::ApiKill => {
                if let Some(api) = procs.api.as_mut() {
                    api.kill();
                }
                Injected::none()
            }
            Kind::ConsumerKill => {
                if let Some(consumer) = procs.consumer.as_mut() {
                    consumer.kill();
                }
                Injected::none()
            }
            Kind::OperatorKill => {
                let leader = leader(&procs.namespace).await;
                if let Some((_, proc)) = procs
                    .operators
                    .iter_mut()
                    .find(|(i, _)| Some(i) == leader.as_ref())
                {
                    proc.kill();
                }
                Injected::none()
            }
            Kind::Restock => {
                patch(serde_json::json!({ "stock": size.stock * 3 / 2 })).await?;
                Injected::none()
            }
            Kind::Shrink => {
                patch(serde_json::json!({ "stock": size.stock * 4 / 5 })).await?;
                Injected::none()
            }
            Kind::PauseResume => {
                patch(serde_json::json!({ "paused": true })).await?;
                let sales = sales.clone();
                Injected::register(move || {
                    // Undone synchronously, even from a Ctrl-C.
                    let _ = std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("a runtime");
                        rt.block_on(sales.patch(
                            "storm",
                            &PatchParams::default(),
                            &Patch::Merge(serde_json::json!({"spec": {"paused": false}})),
                        ))
                    })
                    .join();
                })
            }
            Kind::NodeDrain | Kind::KubeletStop => {
                anyhow::bail!("{} strikes a node, not this host's processes", kind.name())
            }
            Kind::ExtendWindow => {
                let later = end + chrono::Duration::seconds(5);
                patch(serde_json::json!({ "window": { "end": later.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) } }))
                    .await?;
                Injected::none()
            }
        })
    }
}

/// What goes with a broken run's namespace, kept in its directory: the
/// pods' logs (consumers, Jobs), the sale as the operator left it (status,
/// conditions), the namespace's objects and events.
fn keep_evidence(namespace: &str, dir: &Path) {
    let kept = [
        (
            "pods.log",
            vec![
                "logs",
                "--prefix",
                "--tail=-1",
                "-l",
                "app.kubernetes.io/managed-by",
            ],
        ),
        ("sale.yaml", vec!["get", "flashsales", "-o", "yaml"]),
        (
            "objects.txt",
            vec!["get", "deployments,jobs,pods", "-o", "wide"],
        ),
        (
            "events.txt",
            vec!["get", "events", "--sort-by=.lastTimestamp"],
        ),
    ];
    for (file, args) in kept {
        let mut args = args;
        args.extend(["-n", namespace]);
        let _ = std::fs::write(dir.join(file), stack::kubectl(&args));
    }
}

async fn sleep_until(t: chrono::DateTime<Utc>) {
    if let Ok(wait) = (t - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

async fn restart_killed(kind: Kind, procs: &mut Processes) -> anyhow::Result<()> {
    match kind {
        Kind::ApiKill => procs.start_api().await,
        Kind::ConsumerKill => procs.start_consumer(),
        Kind::OperatorKill => {
            let dead: Vec<String> = procs
                .operators
                .iter_mut()
                .filter_map(|(i, p)| (!p.running()).then(|| i.clone()))
                .collect();
            for identity in dead {
                procs.start_operator(&identity)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The identity holding the operators' Lease.
async fn leader(namespace: &str) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(stack::kube_client().await, namespace);
    leases
        .get("flashsale-operator")
        .await
        .ok()?
        .spec?
        .holder_identity
}

/// Waits until the sale's final reconciliation reported after its end; the
/// instant it was seen.
async fn wait_reconciled(
    sales: &Api<FlashSale>,
    timeout: Duration,
) -> Option<chrono::DateTime<Utc>> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(fs) = sales.get("storm").await {
            // Status times are whole seconds (Kubernetes' `Time`); the
            // window's end here has milliseconds. A reconciliation 0.2 s
            // after an end at .3 reads as the same second, before the end.
            let end = chrono::SubsecRound::trunc_subsecs(
                flashsale_operator::model::timeline::to_chrono(&fs.spec.window.end),
                0,
            );
            let status = fs.status.unwrap_or_default();
            let reconciled = status
                .last_reconciliation
                .is_some_and(|r| flashsale_operator::model::timeline::to_chrono(&r.time) >= end)
                && status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Reconciled" && c.status == "True");
            if reconciled {
                return Some(Utc::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// I1–I6 from the checker; every 202 looked up as its shopper.
async fn check(
    services: &Services,
    sale: &SaleRef,
    told: &storm::Told,
    api_url: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let db = flashsale_workload::orders::connect(&services.db_url, 2).await?;
    let store = SaleStore::new(
        flashsale_workload::redis::RedisConn::connect(
            &services.redis.parse().map_err(anyhow::Error::msg)?,
        )
        .await?,
    );
    let config = flashsale_workload::orders::sales::find_current(&db, sale)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the sale's row is gone"))?;
    let evidence = CheckerTold {
        accepted: told.accepted.clone(),
        sold_out_smallest: told.sold_out_smallest,
        unanswered: told.undecided.clone(),
        in_doubt: told.in_doubt.clone(),
    };
    let evidence = gather(
        &db,
        &store,
        &services.kafka,
        &config,
        &evidence,
        Duration::from_secs(60),
    )
    .await?;
    let checked = evaluate(&evidence);
    result.invariants = checked
        .verdicts
        .iter()
        .map(|v| (v.id.to_string(), v.holds, v.detail.clone()))
        .collect();
    result.orders_lost = checked.figures.lost.len();
    result.oversold_units = checked.figures.oversold_units;
    let http = reqwest::Client::new();
    for (id, (shopper, _)) in &told.accepted {
        let seen = http
            .get(format!("{api_url}/v1/orders/{id}"))
            .header("x-user-id", shopper)
            .send()
            .await;
        let ok = match seen {
            Ok(r) if r.status() == 200 => {
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                match body["status"].as_str() {
                    Some("UNPAID" | "PAID" | "CANCELLED" | "REFUNDED") => true,
                    Some("FAILED") => body["failureReason"].is_string(),
                    _ => false,
                }
            }
            _ => false,
        };
        result.lookups_failed += usize::from(!ok);
    }
    result.held = checked.verdicts.iter().all(|v| v.holds == Some(true))
        && result.orders_lost == 0
        && result.oversold_units == 0
        && result.lookups_failed == 0
        && result.converge_secs.is_some()
        && result.kept_selling();
    Ok(())
}

/// Makes the run's namespace, labelled as a test's; it is removed when the
/// guard goes or on Ctrl-C (its removal is one of the faults' undos).
async fn test_namespace(client: &Client, name: &str) -> anyhow::Result<Injected> {
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {stack::TEST_NAMESPACE_LABEL: "true"}}
    }))?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let name = name.to_string();
    Ok(Injected::register(move || stack::remove_namespace(&name)))
}
