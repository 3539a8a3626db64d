//! One smoke test per real service the workload talks to: Redis (one node and
//! the 3-master cluster), PostgreSQL and Kafka, as started by `make up`.

mod common;

use std::time::Duration;

use flashsale_testkit as stack;
use flashsale_workload::bus::{self, admin::Admin, lag::LagReader};
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::redis::{RedisConn, RedisTarget, keys::ShardKeys, scripts::SCRIPTS};
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};

async fn release_of_unknown_order(target: RedisTarget) {
    let mut conn = RedisConn::connect(&target).await.unwrap_or_else(|e| {
        panic!(
            "Redis at {target:?} is not answering ({e}): {}",
            stack::START_HINT
        )
    });
    let sale = SaleRef::new("smoke", &stack::unique_name("sale")).unwrap();
    let keys = ShardKeys::new(&sale, 0);
    // Force the NOSCRIPT path once: the script must load itself and run by SHA.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let reply: Vec<i64> = SCRIPTS
        .release
        .key(&keys.stock)
        .key(&keys.units)
        .key(&keys.reservations)
        .arg("no-such-order")
        .arg("R")
        .arg(0)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(reply, vec![4], "release.lua answers 'no such reservation'");
    let exists: bool = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(SCRIPTS.release.get_hash())
        .query_async::<Vec<bool>>(&mut conn)
        .await
        .unwrap()[0];
    assert!(exists, "the script is cached by SHA after the first call");
}

#[tokio::test]
async fn redis_node_runs_a_script_by_sha() {
    release_of_unknown_order(stack::redis_url().parse().unwrap()).await;
}

#[tokio::test]
async fn redis_cluster_runs_a_script_by_sha() {
    let seeds = stack::redis_cluster_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect::<Vec<_>>()
        .join(",");
    let target: RedisTarget = format!("redis-cluster://{seeds}").parse().unwrap();
    let mut conn = RedisConn::connect(&target).await.unwrap();
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_size:3"), "three masters: {info}");
    release_of_unknown_order(target).await;
}

#[tokio::test]
async fn postgres_migrates_and_answers() {
    let pool = common::fresh_database().await;
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('sales', 'orders', 'shopper_units', 'reconciliation_runs')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(tables, 4);
    // Migrating again is a no-op.
    flashsale_workload::orders::migrate(&pool).await.unwrap();
}

#[tokio::test]
async fn kafka_idempotent_produce_consume_commit_and_lag() {
    let bootstrap = stack::kafka_bootstrap();
    let sale = SaleRef::new("smoke", &stack::unique_name("sale")).unwrap();
    let topic = bus::topics::orders_topic(&sale);
    let group = bus::topics::consumer_group(&sale);
    Admin::new(&bootstrap)
        .unwrap()
        .ensure_topics(&[&topic], 3)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "Kafka at {bootstrap} is not answering ({e}): {}",
                stack::START_HINT
            )
        });

    let producer: FutureProducer = bus::client_config(&bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .unwrap();
    for i in 0..30 {
        let key = format!("shopper-{i}");
        producer
            .send(
                FutureRecord::to(&topic).key(&key).payload("order"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }

    let lag = LagReader::new(&bootstrap, &group).unwrap();
    let before = lag.read(&topic).await.unwrap();
    assert_eq!(before.partitions.len(), 3);
    assert_eq!(
        before.total(),
        30,
        "never-committed partitions count from the start"
    );

    let consumer: StreamConsumer = bus::client_config(&bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    for _ in 0..10 {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("a message within 30 s")
            .unwrap();
        assert_eq!(message.payload(), Some(&b"order"[..]));
        consumer.commit_message(&message, CommitMode::Sync).unwrap();
    }
    let after = lag.read(&topic).await.unwrap();
    assert_eq!(
        after.total(),
        20,
        "lag after committing 10 of 30: {after:?}"
    );
    // One client reads any group's lag: the operator holds one for all sales.
    let shared = LagReader::new(&bootstrap, &stack::unique_name("operator")).unwrap();
    assert_eq!(shared.read_of(&group, &topic).await.unwrap(), after);
    assert_eq!(
        shared.read(&topic).await.unwrap().total(),
        30,
        "its own group committed nothing"
    );
    Admin::new(&bootstrap)
        .unwrap()
        .delete_topics(&[&topic])
        .await
        .unwrap();
}

/// A sale goes Live once its topics are made: every partition must then take
/// requests at once, not merely be named with a leader in the metadata (the
/// broker creates a new topic's partitions one by one after it says so; a
/// produce in between waits, and on a busy broker times out).
#[tokio::test]
async fn a_created_topic_serves_every_partition_at_once() {
    let bootstrap = stack::kafka_bootstrap();
    let sale = SaleRef::new("smoke", &stack::unique_name("wide")).unwrap();
    let topics = [
        bus::topics::orders_topic(&sale),
        bus::topics::dead_letter_topic(&sale),
    ];
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let admin = Admin::new(&bootstrap).unwrap();
    admin.ensure_topics(&names, 48).await.unwrap();
    let lag = LagReader::new(&bootstrap, &bus::topics::consumer_group(&sale)).unwrap();
    for topic in &names {
        let read = lag.read(topic).await;
        assert!(read.is_ok(), "{topic} right after ensure_topics: {read:?}");
    }
    admin.delete_topics(&names).await.unwrap();
}
