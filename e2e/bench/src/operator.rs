//! What the operator does against the clock: the kill switch, warm-up and
//! live transitions, consumer scaling from lag, and its memory with 50 sales.
//! It runs as a release process watching a namespace of its own.

use std::time::{Duration, Instant};

use chrono::Utc;
use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use flashsale_workload::bus::{client_config, topics};
use flashsale_workload::domain::sale::SaleRef;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::procs::{self, Proc};

/// Milliseconds of a set of trials.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trials {
    /// Each trial, ms.
    pub samples_ms: Vec<f64>,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile (the largest of fewer than 100 trials).
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Trials {
    pub(crate) fn of(mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        Self {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: samples.last().copied().unwrap_or(0.0),
            samples_ms: samples,
        }
    }
}

/// The operator measurements.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorFigures {
    /// Patch `paused: true` → the first PAUSED answer.
    pub kill_switch: Trials,
    /// |Warm first seen − (start − leadTime)| per sale.
    pub warm_error: Trials,
    /// |Live first seen − start| per sale.
    pub live_error: Trials,
    /// Lag crossing → Deployment replicas updated.
    pub scaling_reaction: Trials,
    /// Operator resident memory with this many sales.
    pub sales: usize,
    /// ... MiB.
    pub operator_rss_mib: f64,
}

/// A namespace of the benchmark's own on the stack's cluster, and its sales.
pub(crate) struct Cluster {
    client: Client,
    pub(crate) ns: String,
    pub(crate) sales: Api<FlashSale>,
}

impl Cluster {
    pub(crate) async fn new() -> anyhow::Result<Self> {
        let client = stack::kube_client().await;
        // A fresh stack has no CRD until something installs it.
        anyhow::ensure!(
            flashsale_operator::cluster::install::crd(&client).await?,
            "the FlashSale CRD was not established within 20 s"
        );
        let ns = format!("bench-{}", Utc::now().format("%H%M%S"));
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        let sales = Api::namespaced(client.clone(), &ns);
        Ok(Self { client, ns, sales })
    }

    pub(crate) fn operator(&self, image: &str) -> anyhow::Result<Proc> {
        let db = stack::database_url();
        let mut op = procs::pinned("1", procs::release_bin("flashsale-operator"));
        op.args([
            "--watch-namespace",
            &self.ns,
            "--lease-namespace",
            &self.ns,
            "--listen",
            "127.0.0.1:0",
            "--migrate",
        ])
        .env("DATABASE_URL", &db)
        .env(
            "FLASHSALE_POD_REDIS",
            stack::redis_url().replace("127.0.0.1", "198.18.0.1"),
        )
        .env(
            "FLASHSALE_POD_DATABASE_URL",
            db.replace("127.0.0.1", "198.18.0.1"),
        )
        .env("FLASHSALE_POD_KAFKA", "198.18.0.1:19094")
        .env("FLASHSALE_WORKLOAD_IMAGE", image);
        Ok(Proc::start(&procs::log("operator"), op)?)
    }

    pub(crate) async fn create(
        &self,
        name: &str,
        start_in: i64,
        window: i64,
        lead: &str,
        extra: serde_json::Value,
    ) -> anyhow::Result<()> {
        let at = |s: i64| {
            (Utc::now() + chrono::Duration::seconds(s))
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let mut spec = serde_json::json!({
            "sku": "SKU-BENCH", "stock": 1_000_000, "purchaseLimit": 1000, "sharding": {"shards": 4},
            "window": {"start": at(start_in), "end": at(start_in + window)},
            "warmup": {"leadTime": lead}, "cleanup": {"after": "10m"}, "payment": {"timeout": "10m"},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let fs: FlashSale = serde_json::from_value(serde_json::json!({
            "apiVersion": "flashsale.dev/v1alpha1", "kind": "FlashSale",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))?;
        self.sales.create(&PostParams::default(), &fs).await?;
        Ok(())
    }

    /// Deletes the namespace and its sales (whose finalizers no operator
    /// runs any more: their Redis state and topics go with the namespace's
    /// cleanup by hand below). The consumer pods go first, so their Kafka
    /// groups are empty when deleted.
    pub(crate) async fn remove(&self) -> anyhow::Result<()> {
        Api::<Deployment>::namespaced(self.client.clone(), &self.ns)
            .delete_collection(&Default::default(), &Default::default())
            .await?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.ns);
        let deadline = Instant::now() + Duration::from_secs(120);
        while !pods.list(&Default::default()).await?.items.is_empty() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "consumer pods of {} still running after 2 min",
                self.ns
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let db = flashsale_workload::orders::connect(&stack::database_url(), 1).await?;
        let store = flashsale_workload::redis::store::SaleStore::new(
            flashsale_workload::redis::RedisConn::connect(
                &stack::redis_url().parse().map_err(anyhow::Error::msg)?,
            )
            .await?,
        );
        for fs in self.sales.list(&Default::default()).await?.items {
            let name = fs.metadata.name.clone().unwrap_or_default();
            let uid = fs.metadata.uid.clone().unwrap_or_default().parse()?;
            if let Some(stored) = flashsale_workload::orders::sales::find_by_id(&db, uid).await? {
                crate::sale::remove(&db, &store, &stored.config).await?;
            }
            self.sales
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
                )
                .await?;
        }
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &Default::default())
            .await?;
        Ok(())
    }

    async fn state(&self, name: &str) -> Option<SaleState> {
        self.sales.get(name).await.ok()?.status?.state
    }

    async fn wait_state(
        &self,
        name: &str,
        state: SaleState,
        timeout: Duration,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state(name).await == Some(state) {
                return Ok(Instant::now());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{name} not {state:?} within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn patch(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
        self.sales
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": spec})),
            )
            .await?;
        Ok(())
    }
}

async fn buy(http: &reqwest::Client, url: &str, sale: &str, shopper: &str) -> (u16, String) {
    let Ok(r) = http
        .post(format!("{url}/v1/sales/{sale}/orders"))
        .header("x-user-id", shopper)
        .body("{}")
        .send()
        .await
    else {
        return (0, "ERROR".into());
    };
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (
        status,
        body["code"].as_str().unwrap_or_default().to_string(),
    )
}

/// Runs every operator measurement: `trials` kill-switch and scaling trials,
/// five timed transitions, and 50 sales for the memory figure.
pub async fn run(image: &str, trials: usize) -> anyhow::Result<OperatorFigures> {
    let cluster = Cluster::new().await?;
    let operator = cluster.operator(image)?;
    let (api_port, api_internal_port) = (18181, 18191);
    let mut api = procs::pinned("1", procs::release_bin("flashsale"));
    api.args([
        "api",
        "--namespace",
        &cluster.ns,
        "--dev-identity",
        "--listen",
        &format!("127.0.0.1:{api_port}"),
        "--internal-listen",
        &format!("127.0.0.1:{api_internal_port}"),
    ])
    .args(procs::NO_RATE_LIMITS)
    .env("DATABASE_URL", stack::database_url());
    let _api = Proc::start(&procs::log("api-operator"), api)?;
    let url = format!("http://127.0.0.1:{api_port}");
    procs::wait_http(
        &format!("http://127.0.0.1:{api_internal_port}/healthz"),
        Duration::from_secs(30),
    )
    .await
    .map_err(anyhow::Error::msg)?;

    // Five sales whose warm-up and start are due at known instants.
    eprintln!("operator: 5 sales, warm-up and live against their due instants");
    let mut due = Vec::new();
    for i in 0..5i64 {
        let start_in = 14 + 2 * i;
        let start = Utc::now() + chrono::Duration::seconds(start_in);
        cluster
            .create(
                &format!("timed-{i}"),
                start_in,
                3600,
                "6s",
                serde_json::json!({}),
            )
            .await?;
        due.push((
            format!("timed-{i}"),
            start - chrono::Duration::seconds(6),
            start,
        ));
    }
    let (mut warm_error, mut live_error) = (Vec::new(), Vec::new());
    let mut seen_warm = vec![None; due.len()];
    let mut seen_live = vec![None; due.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen_live.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, (name, _, _)) in due.iter().enumerate() {
            match cluster.state(name).await {
                Some(SaleState::Warm) if seen_warm[i].is_none() => seen_warm[i] = Some(Utc::now()),
                Some(SaleState::Live) if seen_live[i].is_none() => {
                    seen_live[i] = Some(Utc::now());
                    seen_warm[i].get_or_insert_with(Utc::now);
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (i, (_, warm_due, live_due)) in due.iter().enumerate() {
        let ms = |seen: Option<chrono::DateTime<Utc>>, due: &chrono::DateTime<Utc>| {
            seen.map_or(f64::INFINITY, |s| {
                (s - *due).num_milliseconds().abs() as f64
            })
        };
        warm_error.push(ms(seen_warm[i], warm_due));
        live_error.push(ms(seen_live[i], live_due));
    }

    // The kill switch, through the API.
    eprintln!("operator: kill switch, {trials} trials");
    let http = reqwest::Client::new();
    let mut kill = Vec::new();
    let sale = "timed-0";
    for trial in 0..trials {
        let patched = Instant::now();
        cluster
            .patch(sale, serde_json::json!({"paused": true}))
            .await?;
        let mut n = 0;
        loop {
            n += 1;
            if buy(&http, &url, sale, &format!("k{trial}-{n}")).await == (409, "PAUSED".to_string())
            {
                break;
            }
            anyhow::ensure!(
                patched.elapsed() < Duration::from_secs(30),
                "no PAUSED within 30 s"
            );
        }
        kill.push(patched.elapsed().as_secs_f64() * 1000.0);
        cluster
            .patch(sale, serde_json::json!({"paused": false}))
            .await?;
        let resumed = Instant::now();
        while buy(
            &http,
            &url,
            sale,
            &format!("r{trial}-{}", uuid::Uuid::now_v7()),
        )
        .await
        .0 != 202
        {
            anyhow::ensure!(
                resumed.elapsed() < Duration::from_secs(30),
                "purchases did not resume"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Memory with 50 sales: the five live ones and 45 scheduled weeks ahead.
    eprintln!("operator: memory with 50 sales");
    for i in 0..45 {
        cluster
            .create(
                &format!("later-{i}"),
                30 * 86_400,
                3600,
                "30m",
                serde_json::json!({}),
            )
            .await?;
    }
    for i in 0..45 {
        cluster
            .wait_state(
                &format!("later-{i}"),
                SaleState::Scheduled,
                Duration::from_secs(120),
            )
            .await?;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let operator_rss_mib = operator.rss_mib().0;
    operator.stop().await;

    let scaling_reaction = scaling(&cluster, trials).await?;
    cluster.remove().await?;
    Ok(OperatorFigures {
        kill_switch: Trials::of(kill),
        warm_error: Trials::of(warm_error),
        live_error: Trials::of(live_error),
        scaling_reaction: Trials::of(scaling_reaction),
        sales: 50,
        operator_rss_mib,
    })
}

/// Lag crossing → replicas updated: consumers run the node's idle probe
/// image, so the lag stays until drained by committing to the end.
async fn scaling(cluster: &Cluster, trials: usize) -> anyhow::Result<Vec<f64>> {
    eprintln!("operator: scaling reaction, {trials} trials");
    let _operator = cluster.operator("docker.io/flashsale/probe:1")?;
    let consumers = serde_json::json!({"consumers": {
        "minReplicas": 1, "maxReplicas": 12, "lagPerReplica": 500, "pollInterval": "1s", "scaleDownStabilization": "0s"
    }});
    cluster.create("scaling", 3, 3600, "1s", consumers).await?;
    cluster
        .wait_state("scaling", SaleState::Live, Duration::from_secs(60))
        .await?;
    let sale = SaleRef::new(&cluster.ns, "scaling")?;
    let topic = topics::orders_topic(&sale);
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    let replicas = || async {
        deployments
            .get_opt("scaling-consumers")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec?.replicas)
            .unwrap_or(0)
    };
    let producer: FutureProducer = client_config(&stack::kafka_bootstrap())
        .set("linger.ms", "1")
        .create()?;
    let mut reactions = Vec::new();
    for trial in 0..trials {
        let deadline = Instant::now() + Duration::from_secs(60);
        while replicas().await != 1 {
            anyhow::ensure!(Instant::now() < deadline, "replicas did not come back to 1");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // 501 messages: the lag crosses 500, two replicas are due.
        let sends = (0..501).map(|i| {
            let (producer, topic) = (producer.clone(), topic.clone());
            async move {
                let key = format!("t{trial}-{i}");
                producer
                    .send(
                        FutureRecord::to(&topic).key(&key).payload("lag"),
                        Duration::from_secs(10),
                    )
                    .await
                    .map(|_| ())
            }
        });
        for sent in futures::future::join_all(sends).await {
            sent.map_err(|(e, _)| e)?;
        }
        let crossed = Instant::now();
        while replicas().await < 2 {
            anyhow::ensure!(
                crossed.elapsed() < Duration::from_secs(60),
                "no scale-up within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        reactions.push(crossed.elapsed().as_secs_f64() * 1000.0);
        drain(&sale)?;
    }
    Ok(reactions)
}

fn drain(sale: &SaleRef) -> anyhow::Result<()> {
    let topic = topics::orders_topic(sale);
    let consumer: BaseConsumer = client_config(&stack::kafka_bootstrap())
        .set("group.id", topics::consumer_group(sale))
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        let (_, high) = consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(10))?;
        tpl.add_partition_offset(&topic, p.id(), Offset::Offset(high))?;
    }
    consumer.commit(&tpl, CommitMode::Sync)?;
    Ok(())
}
