//! The Kafka broker stops in the middle of a storm: purchases answer 503,
//! every reservation made for them is given back, and a message for one of
//! them exists only if the broker wrote it and went down before
//! acknowledging it — its reservation is released, so the consumer drops it
//! (I4). Its own test binary: it stops the stack's shared broker, so nothing
//! else may run meanwhile.

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{ApiOptions, SaleSpec, TestApi, create_sale, fresh_database, read_topic, store};
use flashsale_testkit as stack;
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::domain::purchase::ReservationState;
use tokio::sync::Mutex;
use uuid::Uuid;

fn kafka(action: &str) {
    let status = Command::new(stack::repo_dir().join("e2e/stack/kafka.sh"))
        .arg(action)
        .env("FLASHSALE_RUN", stack::run_dir())
        .status()
        .expect("e2e/stack/kafka.sh runs");
    assert!(status.success(), "kafka.sh {action} failed");
}

/// Brings the broker back even when the test fails half-way.
struct BrokerBack;
impl Drop for BrokerBack {
    fn drop(&mut self) {
        kafka("up");
    }
}

#[derive(Default)]
struct Tally {
    accepted: Vec<Uuid>,
    unavailable: usize,
    other: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_stopped_mid_storm_loses_nothing_and_invents_nothing() {
    let db = fresh_database().await;
    let namespace = stack::unique_name("ns");
    let config = create_sale(&db, &SaleSpec::live(&namespace, 100_000, 4, 1_000_000)).await;
    let target = common::redis_node();
    let store = store(&target).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    let api = Arc::new(
        TestApi::start(ApiOptions {
            purchase_budget: PurchaseBudget::new(Duration::from_secs(1)).unwrap(),
            // Once in a fresh clone's run (2026-12-03) no purchase was
            // acknowledged for 30 s after the broker returned, and the
            // producer logged nothing at warn level: a failure shows why.
            kafka_debug: Some("eos,broker,topic,msg".into()),
            ..ApiOptions::new(&namespace, target, &db)
        })
        .await,
    );
    api.wait_for_sale(&config.sale).await;

    let running = Arc::new(AtomicBool::new(true));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let shoppers: Vec<_> = (0..32)
        .map(|w| {
            let (api, running, tally, sale) = (
                api.clone(),
                running.clone(),
                tally.clone(),
                config.sale.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0;
                while running.load(Ordering::Relaxed) {
                    let answer = api.buy(&sale, &format!("w{w}-{i}"), 1).await;
                    i += 1;
                    let mut t = tally.lock().await;
                    match (answer.status, answer.code()) {
                        (202, _) => t.accepted.push(answer.order_id().unwrap()),
                        (503, "UNAVAILABLE") => t.unavailable += 1,
                        (status, code) => t.other.push(format!("{status} {code}")),
                    }
                    drop(t);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let accepted_before = tally.lock().await.accepted.len();
    assert!(accepted_before > 0, "purchases flow before the outage");
    let guard = BrokerBack;
    tokio::task::spawn_blocking(|| kafka("down")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let unavailable_during = tally.lock().await.unavailable;
    assert!(
        unavailable_during > 0,
        "purchases answer 503 while the broker is down"
    );
    tokio::task::spawn_blocking(move || drop(guard))
        .await
        .unwrap();
    // Until purchases are accepted again after the broker's return.
    let resumed_at = tally.lock().await.accepted.len();
    for _ in 0..300 {
        if tally.lock().await.accepted.len() > resumed_at + 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, Ordering::Relaxed);
    for shopper in shoppers {
        shopper.await.unwrap();
    }
    let tally = tally.lock().await;
    assert!(
        tally.accepted.len() > resumed_at + 50,
        "purchases are accepted again after the broker returns"
    );
    assert!(
        tally.other.is_empty(),
        "only 202 and 503 UNAVAILABLE: {:?}",
        tally.other
    );

    // Late messages would arrive now if any were coming.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let accepted: HashSet<Uuid> = tally.accepted.iter().copied().collect();
    let mut reserved = HashSet::new();
    let mut released = HashSet::new();
    let mut reserved_units = 0;
    for shard in 0..config.shards {
        for (id, reservation) in store.reservations(&config.sale, shard).await.unwrap() {
            let reservation = reservation.expect("well-formed reservation");
            match reservation.state {
                // Acknowledged, recorded so or not yet.
                ReservationState::Reserved | ReservationState::Acknowledged => {
                    reserved.insert(id.parse::<Uuid>().unwrap());
                    reserved_units += reservation.quantity;
                }
                ReservationState::Released => {
                    released.insert(id.parse::<Uuid>().unwrap());
                }
                ReservationState::Claimed => panic!("no consumer has run yet"),
            }
        }
    }
    assert_eq!(reserved, accepted, "exactly the accepted orders hold stock");
    assert!(
        !released.is_empty(),
        "the refused purchases' reservations were released"
    );
    let remaining: i64 = store
        .shard_stocks(&config.sale, config.shards)
        .await
        .unwrap()
        .iter()
        .sum();
    assert_eq!(
        remaining + reserved_units,
        100_000,
        "every released unit is back"
    );
    let messages: HashSet<Uuid> = read_topic(&config.sale)
        .iter()
        .map(|m| m.order_id)
        .collect();
    assert!(
        messages.is_superset(&accepted),
        "a message exists for every accepted order"
    );
    // Written by the broker as it went down, never acknowledged: the
    // shopper heard 503 and the consumer's claim finds the reservation
    // released, so no order comes of it.
    let unacknowledged: HashSet<Uuid> = messages.difference(&accepted).copied().collect();
    assert!(
        unacknowledged.is_subset(&released),
        "every message beyond the accepted orders belongs to a released reservation: {:?}",
        unacknowledged.difference(&released).collect::<Vec<_>>()
    );
    // I4 end to end: the consumer persists exactly the accepted orders.
    common::consume_until_drained(&db, &store, &config).await;
    let persisted: HashSet<Uuid> = sqlx::query_scalar("SELECT id FROM orders WHERE sale_id = $1")
        .bind(config.id)
        .fetch_all(&db)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        persisted, accepted,
        "the orders are exactly the accepted purchases"
    );
    println!(
        "accepted {} (before outage {accepted_before}), unavailable {}, released {}, \
         unacknowledged messages {}",
        accepted.len(),
        tally.unavailable,
        released.len(),
        unacknowledged.len()
    );
}
