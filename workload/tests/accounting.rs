//! Every unit and every order accounted for when a step half-fails: each
//! scenario is set up against the real Redis (node and Cluster), PostgreSQL
//! and Kafka by calling the store in the order a crash, a retry or a race
//! would leave it. (Scenarios that pause Redis itself are in `redis_faults.rs`.)

mod common;

use std::time::Duration;

use common::{LiveSale, consume_until_drained, shard_stocks, shopper_homed, within};
use flashsale_workload::consumer::fail_order;
use flashsale_workload::domain::purchase::{ReservationState, ShardDecision};
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::jobs::{JobContext, JobError, final_reconcile, reconcile};
use flashsale_workload::orders::order::{NewOrder, persist_batch};
use flashsale_workload::redis::RedisTarget;
use flashsale_workload::redis::keys::ShardKeys;
use flashsale_workload::redis::store::SaleStore;

async fn reserve(store: &SaleStore, config: &SaleConfig, shopper: &str, quantity: i64) -> String {
    let shard = flashsale_workload::domain::shard::home_shard(shopper, config.shards);
    let id = uuid::Uuid::now_v7().to_string();
    let decision = store
        .purchase(&config.sale, shard, shopper, quantity, &id, None, None)
        .await
        .unwrap();
    assert!(
        matches!(decision, ShardDecision::Accepted { .. }),
        "{decision:?}"
    );
    id
}

/// A Redis Cluster client re-sends a script after an IO error: a transfer
/// retried under its id must take its units once (item 5).
async fn a_retried_transfer_debits_once(target: RedisTarget) {
    let live = LiveSale::start(target, 100, 4, 10).await;
    let sale = &live.config.sale;
    let first = live
        .store
        .transfer_out(sale, 1, 0, "t-retried", 5)
        .await
        .unwrap();
    let again = live
        .store
        .transfer_out(sale, 1, 0, "t-retried", 5)
        .await
        .unwrap();
    assert_eq!(first, again, "the retry answers what the first run took");
    assert_eq!(
        shard_stocks(&live.store, &live.config).await[1],
        25 - first.0,
        "the donor is debited once"
    );
    // The credit, retried as well, lands once; nothing is left in transit.
    for _ in 0..2 {
        live.store
            .transfer_in(sale, 1, 0, "t-retried", first.0)
            .await
            .unwrap();
    }
    assert_eq!(live.remaining().await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_transfer_debits_once_on_one_node() {
    a_retried_transfer_debits_once(common::redis_node()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_transfer_debits_once_on_the_cluster() {
    a_retried_transfer_debits_once(common::redis_cluster()).await;
}

/// A unit in transit between shards is in no shard's stock: "sold out" must
/// not be decided while it travels, and the unit must still sell (item 7).
async fn a_unit_in_transit_is_not_sold_out(target: RedisTarget) {
    let live = LiveSale::start(target, 2, 2, 5).await;
    let sale = &live.config.sale;
    // Shard 1's unit leaves for shard 0 and its credit never comes (the API
    // that took it was killed); shard 0's unit is sold.
    let (taken, _) = live
        .store
        .transfer_out(sale, 1, 0, "t-parked", 1)
        .await
        .unwrap();
    assert_eq!(taken, 1);
    let first = shopper_homed("home0", 0, 2);
    assert_eq!(live.api.buy(sale, &first, 1).await.status, 202);
    // Every shard is empty now, one unit is in transit.
    let second = shopper_homed("home1", 1, 2);
    let answer = live.api.buy(sale, &second, 1).await;
    assert_ne!(
        answer.code(),
        "SOLD_OUT",
        "sold out while a unit is in transit: {answer:?}"
    );
    // The janitor finishes the transfer: the unit sells, to this shopper or
    // after a retry of theirs.
    if answer.status != 202 {
        let took = within(Duration::from_secs(5), "the parked unit sells", || async {
            let retry = live.api.buy(sale, &second, 1).await;
            assert_ne!(retry.code(), "SOLD_OUT", "{retry:?}");
            retry.status == 202
        })
        .await;
        println!("the unit in transit sold {took:?} after the first attempt ({answer:?})");
    }
    let last = live.api.buy(sale, &shopper_homed("late", 1, 2), 1).await;
    assert_eq!(last.code(), "SOLD_OUT", "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_in_transit_is_not_sold_out_on_one_node() {
    a_unit_in_transit_is_not_sold_out(common::redis_node()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_in_transit_is_not_sold_out_on_the_cluster() {
    a_unit_in_transit_is_not_sold_out(common::redis_cluster()).await;
}

/// A shopper whose 202 for the last unit was lost retries with the same key:
/// the first answer comes back, not SOLD_OUT (item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_its_key_gets_its_first_answer_when_sold_out() {
    let live = LiveSale::start(common::redis_node(), 1, 1, 5).await;
    let sale = &live.config.sale;
    let first = live.api.buy_with_key(sale, "alice", 1, Some("k-1")).await;
    assert_eq!(first.status, 202, "{first:?}");
    let other = live.api.buy(sale, "bob", 1).await;
    assert_eq!(other.code(), "SOLD_OUT", "{other:?}");
    let retry = live.api.buy_with_key(sale, "alice", 1, Some("k-1")).await;
    assert_eq!(
        (retry.status, retry.order_id()),
        (202, first.order_id()),
        "{retry:?}"
    );
}

/// Units taken out of a shard by a transfer whose API process died are on
/// sale again within 5 s, without a reconciliation Job (item 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_transfer_is_finished_within_seconds() {
    let live = LiveSale::start(common::redis_node(), 40, 4, 5).await;
    let sale = &live.config.sale;
    let (taken, _) = live
        .store
        .transfer_out(sale, 2, 3, "t-abandoned", 4)
        .await
        .unwrap();
    assert!(taken > 0);
    assert_eq!(live.remaining().await, 40 - taken);
    let took = within(
        Duration::from_secs(5),
        "the transfer is credited",
        || async { live.remaining().await == 40 },
    )
    .await;
    println!("abandoned transfer finished by the janitor after {took:?}");
    assert_eq!(shard_stocks(&live.store, &live.config).await[3], 10 + taken);
}

/// A reservation whose purchase died before producing its order is released
/// within seconds once the consumers have caught up; one whose order is in
/// the topic, unconsumed, is never taken for abandoned (items 9 and I3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_reservation_is_released_and_a_produced_one_kept() {
    let live = LiveSale::start(common::redis_node(), 10, 1, 5).await;
    let sale = &live.config.sale;
    // Accepted and produced through the API; no consumer runs yet.
    let produced = live.api.buy(sale, "paid-for", 2).await;
    assert_eq!(produced.status, 202);
    // Reserved by a process that died before producing.
    let abandoned = reserve(&live.store, &live.config, "ghost", 3).await;
    // Well past the produce timeout, with an order unread in the topic, the
    // janitor cannot tell the two apart: both keep their units.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        live.remaining().await,
        5,
        "nothing released while unread orders wait"
    );
    // The consumers catch up: the produced order is persisted, the abandoned
    // reservation released.
    let consumer = common::RunningConsumer::start(
        &flashsale_testkit::kafka_bootstrap(),
        &live.db,
        &live.store,
        &live.config,
    );
    let took = within(
        Duration::from_secs(10),
        "the abandoned reservation is released",
        || async { live.remaining().await == 8 },
    )
    .await;
    println!("abandoned reservation released {took:?} after the consumer started");
    consumer.stop().await;
    let ghost = live
        .store
        .reservation(sale, 0, &abandoned)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ghost.state, ReservationState::Released);
    let status = live
        .api
        .order(produced.order_id().unwrap(), "paid-for")
        .await;
    assert_eq!(status.body["status"], "UNPAID", "{status:?}");
}

/// A credit is never refused for the age its donor's clock gave the
/// transfer: Cluster nodes' clocks differ (item 10). The janitor finishes a
/// transfer recorded a minute ago by another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_credit_does_not_compare_two_clocks() {
    let live = LiveSale::start(common::redis_cluster(), 20, 2, 5).await;
    let sale = &live.config.sale;
    let (taken, created) = live
        .store
        .transfer_out(sale, 1, 0, "t-skewed", 2)
        .await
        .unwrap();
    // The donor's record as a node whose clock runs a minute behind wrote it.
    let keys = ShardKeys::new(sale, 1);
    let mut conn = live.store.conn();
    let skewed = created - 60_000;
    let () = redis::cmd("HSET")
        .arg(&keys.transfers_out)
        .arg("t-skewed")
        .arg(format!("0:{taken}:{skewed}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let credited = live
        .store
        .transfer_in(sale, 1, 0, "t-skewed", taken)
        .await
        .unwrap();
    assert!(credited, "the late credit lands");
    assert_eq!(live.remaining().await, 20);
}

/// The consumer that finds an order refused by the database releases its
/// units only if no other consumer persisted it in between (item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_order_persisted_by_another_consumer_keeps_its_units() {
    let live = LiveSale::start(common::redis_node(), 10, 1, 5).await;
    let sale = &live.config.sale;
    let id = reserve(&live.store, &live.config, "raced", 2).await;
    live.store
        .claim(sale, 0, std::slice::from_ref(&id))
        .await
        .unwrap();
    let order = NewOrder {
        id: id.parse().unwrap(),
        shopper: "raced".into(),
        quantity: 2,
        shard: 0,
        accepted_at: chrono::Utc::now(),
        idempotency_key: None,
        purchase_token: None,
    };
    // Another consumer (before a rebalance) persisted it.
    let mut tx = live.db.begin().await.unwrap();
    persist_batch(&mut tx, live.config.id, std::slice::from_ref(&order))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // This one saw a refusal for it, and settles it as failed.
    let released = fail_order(
        &live.db,
        &live.store,
        live.config.id,
        sale,
        &order,
        "the sale has no stock left in the database",
    )
    .await
    .unwrap();
    assert!(!released, "the units of a persisted order stay sold");
    let reservation = live.store.reservation(sale, 0, &id).await.unwrap().unwrap();
    assert_eq!(reservation.state, ReservationState::Claimed);
    assert_eq!(live.remaining().await, 8);
}

/// A batch redelivered after a consumer's crash, overlapping one already
/// persisted, adds only its new orders to `sold` and to each shopper's units;
/// the same order twice in one batch counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_batch_counts_only_its_new_orders() {
    let live = LiveSale::start(common::redis_node(), 100, 1, 5).await;
    let order = |shopper: &str, quantity| NewOrder {
        id: uuid::Uuid::now_v7(),
        shopper: shopper.into(),
        quantity,
        shard: 0,
        accepted_at: chrono::Utc::now(),
        idempotency_key: None,
        purchase_token: None,
    };
    let (a, b, c) = (order("ann", 2), order("bob", 1), order("ann", 3));
    let (db, sale_id) = (&live.db, live.config.id);
    let persist = |batch: Vec<NewOrder>| async move {
        let mut tx = db.begin().await.unwrap();
        let persisted = persist_batch(&mut tx, sale_id, &batch).await.unwrap();
        tx.commit().await.unwrap();
        persisted
    };
    assert_eq!(persist(vec![a.clone(), b.clone()]).await.units, 3);
    let again = persist(vec![b.clone(), c.clone(), c.clone(), a.clone()]).await;
    assert_eq!((again.inserted, again.units), (vec![c.id], 3));
    let sold: i32 = sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
        .bind(sale_id)
        .fetch_one(db)
        .await
        .unwrap();
    let units: Vec<(String, i32)> = sqlx::query_as(
        "SELECT shopper, units FROM shopper_units WHERE sale_id = $1 ORDER BY shopper",
    )
    .bind(sale_id)
    .fetch_all(db)
    .await
    .unwrap();
    assert_eq!(sold, 6);
    assert_eq!(units, vec![("ann".into(), 5), ("bob".into(), 1)]);
    let nothing = persist(vec![a, b, c]).await;
    assert_eq!((nothing.inserted.len(), nothing.units), (0, 0));
}

/// A warm-up that failed half-way resumes without resetting a shard that was
/// already open and selling (item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_warmed_sale_resumes_without_resetting_a_selling_shard() {
    let live = LiveSale::start(common::redis_node(), 40, 4, 5).await;
    let sale = &live.config.sale;
    let buyer = shopper_homed("early", 1, 4);
    reserve(&live.store, &live.config, &buyer, 3).await;
    // The opening write failed on shard 3: it stayed closed.
    let () = redis::cmd("HSET")
        .arg(ShardKeys::new(sale, 3).meta)
        .arg("warmed")
        .arg("0")
        .query_async(&mut live.store.conn())
        .await
        .unwrap();
    live.store
        .warm(&live.config, 0, false, &live.config.id.to_string())
        .await
        .unwrap();
    assert_eq!(
        shard_stocks(&live.store, &live.config).await,
        vec![10, 7, 10, 10],
        "shard 1 keeps its sale"
    );
    assert!(
        live.store.loaded(sale, 4).await.unwrap().warmed(),
        "every shard open"
    );
}

/// A restock half-way (the row raised, Redis not yet) is not "repaired" by
/// reconciliation: the operator applies it once, and the total is right (item 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_leaves_a_half_applied_restock_to_the_operator() {
    let live = LiveSale::start(common::redis_node(), 100, 2, 5).await;
    reserve(&live.store, &live.config, "early", 2).await;
    let restocked = SaleConfig {
        stock: 150,
        ..live.config.clone()
    };
    let row = flashsale_workload::orders::sales::upsert(&live.db, &restocked)
        .await
        .unwrap();
    assert_eq!(row.generation, 2);
    let ctx = JobContext {
        db: live.db.clone(),
        store: live.store.clone(),
        bootstrap: flashsale_testkit::kafka_bootstrap(),
    };
    let policy = flashsale_workload::domain::reconcile::Policy {
        reservation_min_age_ms: 60_000,
        ..Default::default()
    };
    let report = reconcile(&ctx, &live.config, &policy).await.unwrap();
    assert_eq!(report.drift_found, 0, "{:#?}", report.details);
    live.store.restock(&live.config.sale, 150, 2).await.unwrap();
    assert_eq!(live.remaining().await, 150 - 2);
}

/// The final reconciliation reports only once the topic is drained and Redis
/// and PostgreSQL agree (item 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_reconciliation_waits_for_the_drain() {
    let live = LiveSale::start(common::redis_node(), 20, 2, 5).await;
    let sale = &live.config.sale;
    for shopper in ["a", "b", "c"] {
        assert_eq!(live.api.buy(sale, shopper, 1).await.status, 202);
    }
    let ctx = JobContext {
        db: live.db.clone(),
        store: live.store.clone(),
        bootstrap: flashsale_testkit::kafka_bootstrap(),
    };
    let policy = flashsale_workload::domain::reconcile::Policy::default();
    let early = final_reconcile(&ctx, &live.config, &policy, Duration::from_secs(3)).await;
    assert!(
        matches!(early, Err(JobError::NotDrained(_, 3))),
        "reported before the drain: {early:?}"
    );
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let report = final_reconcile(&ctx, &live.config, &policy, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(report.drained);
    let sold: i32 = sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
        .bind(live.config.id)
        .fetch_one(&live.db)
        .await
        .unwrap();
    assert_eq!((sold, live.remaining().await), (3, 17));
}
