//! Consumer scaling from Kafka lag and backpressure, on the real API server,
//! node and Kafka. The operator here runs consumer pods from an image that
//! does not consume (the node's probe image): the lag stays until the test
//! drains it by committing the group's offsets to the end.

mod common;

use std::time::{Duration, Instant};

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use flashsale_workload::bus::message::OrderMessage;
use flashsale_workload::bus::{client_config, topics};
use flashsale_workload::domain::sale::SaleRef;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const IDLE_IMAGE: &str = "docker.io/flashsale/probe:1";

struct Live {
    sales: Api<FlashSale>,
    /// The operator's /metrics address.
    metrics: String,
    ns: common::TestNamespace,
    db_url: String,
    sale: SaleRef,
    _operator: common::Operator,
}

async fn live_sale(name: &str, consumers: serde_json::Value) -> Live {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let metrics = format!("127.0.0.1:{}", common::free_port());
    let operator = common::Operator::start_with_image(&ns, &db_url, name, IDLE_IMAGE, &metrics);
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest(name, &ns, 2, 600);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    manifest["spec"]["consumers"] = consumers;
    common::create_live(&sales, manifest).await;
    let sale = SaleRef::new(&ns, name).unwrap();
    Live {
        sales,
        metrics,
        ns,
        db_url,
        sale,
        _operator: operator,
    }
}

/// Produces `n` order messages (nobody will persist them) as fast as acks come.
async fn produce(sale: &SaleRef, n: usize, mut on_sent: impl FnMut(usize)) {
    let producer: FutureProducer = client_config(&stack::kafka_bootstrap())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let topic = topics::orders_topic(sale);
    let payload = OrderMessage {
        order_id: uuid::Uuid::now_v7(),
        sale_id: uuid::Uuid::now_v7(),
        sale: sale.clone(),
        shopper: "lag".into(),
        quantity: 1,
        shard: 0,
        accepted_at_ms: 0,
        idempotency_key: None,
        purchase_token: None,
        persisted: false,
        signals: Default::default(),
    }
    .to_payload();
    let mut sent = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let sends = chunk.iter().map(|i| {
            let key = format!("k{i}");
            let producer = producer.clone();
            let topic = topic.clone();
            let payload = payload.clone();
            async move {
                producer
                    .send(
                        FutureRecord::to(&topic).key(&key).payload(&payload),
                        Duration::from_secs(10),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|(e, _)| e)
            }
        });
        for result in futures::future::join_all(sends).await {
            result.unwrap();
        }
        sent += chunk.len();
        on_sent(sent);
    }
}

/// Drains the lag without processing: commits the group's offsets at the end.
fn drain(sale: &SaleRef) {
    let topic = topics::orders_topic(sale);
    let consumer: BaseConsumer = client_config(&stack::kafka_bootstrap())
        .set("group.id", topics::consumer_group(sale))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        let (_, high) = consumer
            .fetch_watermarks(&topic, p.id(), Duration::from_secs(10))
            .unwrap();
        tpl.add_partition_offset(&topic, p.id(), Offset::Offset(high))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
}

async fn replicas(deployments: &Api<Deployment>, name: &str) -> Option<i32> {
    deployments
        .get_opt(&format!("{name}-consumers"))
        .await
        .ok()??
        .spec?
        .replicas
}

/// A sale weeks ahead gets its consumer Deployment at zero replicas from the
/// very first write: no version of it ever asks for a pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_sale_never_asks_for_a_consumer_pod() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator =
        common::Operator::start_with_image(&ns, &db_url, "later", IDLE_IMAGE, "127.0.0.1:0");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    // Every version of the namespace's Deployments, watched from before the
    // sale exists: each write is its own event.
    let (listed, until_listed) = tokio::sync::oneshot::channel();
    let (versions, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = watcher(deployments, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::InitDone => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
                    let _ = versions.send(d.spec.and_then(|s| s.replicas));
                }
                _ => {}
            }
        }
    });
    until_listed.await.unwrap();

    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let month = 30 * 24 * 3600;
    let fs: FlashSale =
        serde_json::from_value(common::manifest("later", &ns, month, 3600)).unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    common::wait_for(
        Duration::from_secs(30),
        "the sale to be Scheduled",
        || async {
            (sales.get("later").await.ok()?.status?.state? == SaleState::Scheduled).then_some(())
        },
    )
    .await;
    // Time for a scale write after the first one, had there been one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut replicas = Vec::new();
    while let Ok(version) = seen.try_recv() {
        replicas.push(version);
    }
    assert!(!replicas.is_empty(), "the consumer Deployment exists");
    assert!(
        replicas.iter().all(|r| *r == Some(0)),
        "every version of the consumer Deployment has 0 replicas: {replicas:?}"
    );
}

/// The operator's reconciles so far (its /metrics at `listen`).
async fn reconciles(listen: &str) -> u64 {
    let text = reqwest::get(format!("http://{listen}/metrics"))
        .await
        .expect("the operator serves /metrics")
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("flashsale_operator_reconciles_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .expect("the reconciles counter") as u64
}

/// A live sale nobody buys from is read every poll, not reconciled: a full
/// pass costs ~10 requests, and a marketplace holds a thousand such sales
/// (issue 38). Its first order still wakes it within a poll or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_live_sale_is_read_every_poll_and_reconciled_on_a_change() {
    let consumers = serde_json::json!({
        "minReplicas": 0, "maxReplicas": 2, "lagPerReplica": 5, "pollInterval": "1s"
    });
    let live = live_sale("idle", consumers).await;
    let deployments: Api<Deployment> = Api::namespaced(common::client().await, &live.ns);
    // Whatever going live set in motion settles first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = reconciles(&live.metrics).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle = reconciles(&live.metrics).await - before;
    assert!(
        idle <= 2,
        "{idle} reconciles of an idle live sale in 20 polls (the heartbeat is 60 s)"
    );
    assert_eq!(replicas(&deployments, "idle").await, Some(0));

    let sent = Instant::now();
    produce(&live.sale, 1, |_| {}).await;
    common::wait_for(
        Duration::from_secs(10),
        "a consumer for the order",
        || async { (replicas(&deployments, "idle").await == Some(1)).then_some(()) },
    )
    .await;
    println!(
        "{idle} reconciles in 20 idle polls; a consumer {:?} after the first order",
        sent.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_reach_the_partition_cap_in_seconds_and_stabilize_down() {
    let consumers = serde_json::json!({
        "minReplicas": 1, "maxReplicas": 12, "lagPerReplica": 500,
        "pollInterval": "1s", "scaleDownStabilization": "10s"
    });
    let live = live_sale("scale", consumers).await;
    let sale = &live.sale;
    let deployments: Api<Deployment> = Api::namespaced(common::client().await, &live.ns);
    assert_eq!(replicas(&deployments, "scale").await, Some(1));

    // 10,000 orders; 12 replicas are due once the lag passes 11 x 500.
    let mut crossed = None;
    produce(sale, 10_000, |sent| {
        if sent > 5_500 && crossed.is_none() {
            crossed = Some(Instant::now());
        }
    })
    .await;
    let crossed = crossed.unwrap();
    common::wait_for(Duration::from_secs(15), "12 replicas", || async {
        (replicas(&deployments, "scale").await == Some(12)).then_some(())
    })
    .await;
    let reaction = crossed.elapsed();
    assert!(
        reaction <= Duration::from_secs(5),
        "replicas reached 12 {reaction:?} after the lag crossed"
    );

    drain(sale);
    let drained = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        replicas(&deployments, "scale").await,
        Some(12),
        "stays up inside the stabilization window"
    );
    common::wait_for(
        Duration::from_secs(15),
        "scale down to minReplicas",
        || async { (replicas(&deployments, "scale").await == Some(1)).then_some(()) },
    )
    .await;
    let down = drained.elapsed();
    // `drained` is taken once the commit returned, a few ms after the
    // operator could first see it.
    assert!(
        down >= Duration::from_millis(9_800),
        "scaled down after {down:?}, window 10 s"
    );
    println!("12 replicas {reaction:?} after the lag crossed; back to 1 {down:?} after the drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_answers_busy_above_max_lag_and_clears_when_drained() {
    let consumers = serde_json::json!({
        "minReplicas": 1, "maxReplicas": 2, "lagPerReplica": 10, "maxLag": 50, "pollInterval": "1s"
    });
    let live = live_sale("busy", consumers).await;
    let api = common::ApiProcess::start(&live.ns, &live.db_url).await;
    assert_eq!(api.buy("busy", "first").await.0, 202);
    produce(&live.sale, 100, |_| {}).await;
    let busy_at = Instant::now();
    common::wait_for(Duration::from_secs(10), "BUSY answers", || async {
        (api.buy("busy", "waiting").await == (503, "BUSY".to_string())).then_some(())
    })
    .await;
    println!("BUSY {:?} after the lag passed maxLag", busy_at.elapsed());
    // The status follows the Redis flag within the same reconcile.
    common::wait_for(
        Duration::from_secs(5),
        "the Backpressure condition",
        || async {
            let fs = live.sales.get("busy").await.ok()?;
            let degraded = fs
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Degraded")?;
            (degraded.status == "True" && degraded.reason == "Backpressure").then_some(())
        },
    )
    .await;

    drain(&live.sale);
    common::wait_for(
        Duration::from_secs(10),
        "purchases accepted again",
        || async {
            (api.buy("busy", &format!("after-{}", uuid::Uuid::now_v7()))
                .await
                .0
                == 202)
                .then_some(())
        },
    )
    .await;
}

/// Deleting a sale whose topic still holds unpersisted orders never deletes
/// the topic: the finalizer stays and the status says why, however long the
/// drain takes; once drained, the deletion finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sale_keeps_its_topic_until_its_orders_are_persisted() {
    let live = live_sale(
        "drain-first",
        serde_json::json!({"minReplicas": 0, "maxReplicas": 2}),
    )
    .await;
    produce(&live.sale, 50, |_| {}).await;
    live.sales
        .delete("drain-first", &Default::default())
        .await
        .unwrap();
    let fs = common::wait_for(
        Duration::from_secs(20),
        "the deletion to say why it waits",
        || async {
            let fs = live.sales.get("drain-first").await.ok()?;
            let degraded = fs
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "Degraded" && c.status == "True")?
                .clone();
            (degraded.reason == "DeletionWaitsForDrain").then_some(degraded)
        },
    )
    .await;
    println!("deletion waits: {}", fs.message);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        live.sales.get_opt("drain-first").await.unwrap().is_some(),
        "the finalizer stays while orders wait"
    );
    let admin = flashsale_workload::bus::admin::Admin::new(&stack::kafka_bootstrap()).unwrap();
    assert!(
        admin
            .partitions(&[&topics::orders_topic(&live.sale)])
            .await
            .unwrap()
            > 0,
        "the topic with unpersisted orders is kept"
    );
    // The orders are persisted (here: their offsets committed): it goes.
    drain(&live.sale);
    common::wait_for(
        Duration::from_secs(60),
        "the deletion to finish",
        || async {
            live.sales
                .get_opt("drain-first")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// consumers.maxReplicas is the order topic's partition count: raising it
/// adds partitions (so the new replicas have something to read). The dead
/// letters' topic keeps one: a dead letter is rare and read by a person, and
/// a thousand sales would hold a thousand partitions more each per replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_max_replicas_adds_partitions() {
    let live = live_sale(
        "wider",
        serde_json::json!({"minReplicas": 0, "maxReplicas": 2}),
    )
    .await;
    let admin = flashsale_workload::bus::admin::Admin::new(&stack::kafka_bootstrap()).unwrap();
    let topic = topics::orders_topic(&live.sale);
    assert_eq!(admin.partitions(&[&topic]).await.unwrap(), 2);
    live.sales
        .patch(
            "wider",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"spec": {"consumers": {"maxReplicas": 4}}}),
            ),
        )
        .await
        .unwrap();
    common::wait_for(Duration::from_secs(20), "4 partitions", || async {
        (admin.partitions(&[&topic]).await.ok()? == 4).then_some(())
    })
    .await;
    let dlq = topics::dead_letter_topic(&live.sale);
    assert_eq!(admin.partitions(&[&dlq]).await.unwrap(), 1);
}
