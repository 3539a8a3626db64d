//! The order pipeline against real Kafka, PostgreSQL and Redis: consumers,
//! the order lifecycle, payment timeout, reconciliation.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{
    Answer, ApiOptions, SaleSpec, TestApi, consume_until_drained, create_sale, fresh_database,
    store, storm,
};
use flashsale_testkit as stack;
use flashsale_workload::bus::message::OrderMessage;
use flashsale_workload::bus::{client_config, topics};
use flashsale_workload::domain::purchase::{ReservationState, ShardDecision};
use flashsale_workload::domain::reconcile::Policy;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::jobs::{JobContext, reconcile};
use flashsale_workload::redis::store::SaleStore;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::PgPool;
use uuid::Uuid;

struct Live {
    db: PgPool,
    api: Arc<TestApi>,
    config: SaleConfig,
    store: SaleStore,
}

async fn live(stock: i64, shards: u32, limit: i64, payment_timeout: Duration) -> Live {
    live_with(stock, shards, limit, payment_timeout, |_| {}).await
}

/// The same, with the API's options adjusted by `adjust`.
async fn live_with(
    stock: i64,
    shards: u32,
    limit: i64,
    payment_timeout: Duration,
    adjust: impl FnOnce(&mut ApiOptions),
) -> Live {
    let db = fresh_database().await;
    let namespace = stack::unique_name("ns");
    let spec = SaleSpec {
        payment_timeout,
        ..SaleSpec::live(&namespace, stock, shards, limit)
    };
    let config = create_sale(&db, &spec).await;
    let target = common::redis_node();
    let store = store(&target).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    let mut options = ApiOptions::new(&namespace, target, &db);
    adjust(&mut options);
    let api = TestApi::start(options).await;
    api.wait_for_sale(&config.sale).await;
    Live {
        db,
        api: Arc::new(api),
        config,
        store,
    }
}

fn ctx(live: &Live) -> JobContext {
    JobContext {
        db: live.db.clone(),
        store: live.store.clone(),
        bootstrap: stack::kafka_bootstrap(),
    }
}

async fn db_units(db: &PgPool, config: &SaleConfig) -> (i64, i64, i64) {
    let (sold,): (i32,) = sqlx::query_as("SELECT sold FROM sales WHERE id = $1")
        .bind(config.id)
        .fetch_one(db)
        .await
        .unwrap();
    let (orders, units): (i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*), sum(quantity) FROM orders WHERE sale_id = $1 AND status IN ('UNPAID', 'PAID')",
    )
    .bind(config.id)
    .fetch_one(db)
    .await
    .unwrap();
    (i64::from(sold), orders, units.unwrap_or_default())
}

async fn redis_remaining(live: &Live) -> i64 {
    live.store
        .shard_stocks(&live.config.sale, live.config.shards)
        .await
        .unwrap()
        .iter()
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_then_consumers_persist_exactly_the_stock_and_reconcile_clean() {
    let live = live(300, 8, 2, Duration::from_secs(900)).await;
    let result = storm(&live.api, &live.config.sale, 5000, 2000).await;
    assert_eq!(result.units(), 300);
    consume_until_drained(&live.db, &live.store, &live.config).await;

    let (sold, orders, units) = db_units(&live.db, &live.config).await;
    assert_eq!(
        (sold, units),
        (300, 300),
        "I1, I3, I5: persisted = accepted = stock"
    );
    assert_eq!(orders as usize, result.accepted.len());
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM orders WHERE sale_id = $1")
        .bind(live.config.id)
        .fetch_all(&live.db)
        .await
        .unwrap();
    assert_eq!(
        ids.into_iter().collect::<HashSet<_>>(),
        result.accepted.keys().copied().collect()
    );
    let over: i64 =
        sqlx::query_scalar("SELECT count(*) FROM shopper_units WHERE sale_id = $1 AND units > 2")
            .bind(live.config.id)
            .fetch_one(&live.db)
            .await
            .unwrap();
    assert_eq!(over, 0, "I2 in the database");
    let report = reconcile(&ctx(&live), &live.config, &Policy::default())
        .await
        .unwrap();
    assert!(report.drained);
    assert_eq!(report.drift_found, 0, "I6: {:?}", report.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_batch_loses_and_duplicates_nothing() {
    let live = live(100_000, 4, 1_000_000, Duration::from_secs(900)).await;
    let result = storm(&live.api, &live.config.sale, 4000, 4000).await;
    assert_eq!(result.accepted.len(), 4000);
    let db_name = live
        .db
        .connect_options()
        .get_database()
        .unwrap()
        .to_string();
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_flashsale"))
            .args([
                "consumer",
                "--namespace",
                &live.config.sale.namespace,
                "--sale",
                &live.config.sale.name,
            ])
            .args(["--batch-size", "20", "--batch-linger", "1ms"])
            .env("FLASHSALE_REDIS", stack::redis_url())
            .env("DATABASE_URL", common::database_url_of(&db_name))
            .env("KAFKA_BOOTSTRAP", stack::kafka_bootstrap())
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("the flashsale binary starts")
    };
    let mut child = spawn();
    // Kill it once some, not all, orders are in.
    let mut persisted_at_kill = 0;
    for _ in 0..600 {
        persisted_at_kill = db_units(&live.db, &live.config).await.1;
        if persisted_at_kill > 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    assert!(
        (1..4000).contains(&persisted_at_kill),
        "killed mid-stream at {persisted_at_kill}"
    );
    let mut child = spawn();
    common::wait_drained(&live.config).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM orders WHERE sale_id = $1")
        .bind(live.config.id)
        .fetch_all(&live.db)
        .await
        .unwrap();
    assert_eq!(
        ids.len(),
        4000,
        "no duplicate, no missing order (killed at {persisted_at_kill})"
    );
    assert_eq!(
        ids.into_iter().collect::<HashSet<_>>(),
        result.accepted.keys().copied().collect()
    );
    let (sold, _, units) = db_units(&live.db, &live.config).await;
    assert_eq!(sold, units);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_messages_go_to_the_dead_letter_topic_and_units_come_back() {
    let live = live(10, 1, 5, Duration::from_secs(900)).await;
    let sale = &live.config.sale;
    // A genuine reservation whose message is corrupted in flight.
    let order_id = Uuid::now_v7();
    let decision = live
        .store
        .purchase(sale, 0, "mallory", 3, &order_id.to_string(), None, None)
        .await
        .unwrap();
    assert!(matches!(decision, ShardDecision::Accepted { .. }));
    assert_eq!(redis_remaining(&live).await, 7);
    let corrupted = OrderMessage {
        order_id,
        sale_id: live.config.id,
        sale: sale.clone(),
        shopper: "mallory".into(),
        quantity: 1, // the reservation holds 3
        shard: 0,
        accepted_at_ms: 0,
        idempotency_key: None,
        purchase_token: None,
        persisted: false,
        signals: Default::default(),
    };
    let producer: FutureProducer = client_config(&stack::kafka_bootstrap()).create().unwrap();
    let topic = topics::orders_topic(sale);
    for payload in [corrupted.to_payload(), b"{this is not an order".to_vec()] {
        producer
            .send(
                FutureRecord::<str, _>::to(&topic).payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    consume_until_drained(&live.db, &live.store, &live.config).await;

    assert_eq!(
        redis_remaining(&live).await,
        10,
        "the poison order's units are back"
    );
    let reservation = live
        .store
        .reservation(sale, 0, &order_id.to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reservation.state, ReservationState::Released);
    assert_eq!(
        db_units(&live.db, &live.config).await,
        (0, 0, 0),
        "nothing persisted"
    );
    let dlq: BaseConsumer = client_config(&stack::kafka_bootstrap())
        .set("group.id", stack::unique_name("dlq-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    dlq.subscribe(&[&topics::dead_letter_topic(sale)]).unwrap();
    let mut reasons = Vec::new();
    for _ in 0..300 {
        if let Some(message) = dlq.poll(Duration::from_millis(100)) {
            let message = message.unwrap();
            use rdkafka::message::Headers;
            let headers = message.headers().unwrap();
            let reason = headers
                .iter()
                .find(|h| h.key == "flashsale-reason")
                .unwrap()
                .value
                .unwrap();
            reasons.push(String::from_utf8_lossy(reason).into_owned());
        }
        if reasons.len() == 2 {
            break;
        }
    }
    reasons.sort();
    assert_eq!(
        reasons,
        vec![
            "message disagrees with its reservation",
            "unparseable order message"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_drift_is_found_repaired_and_gone_on_the_next_run() {
    let live = live(200, 4, 3, Duration::from_secs(900)).await;
    let result = storm(&live.api, &live.config.sale, 40, 40).await;
    assert_eq!(result.accepted.len(), 40);
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let sale = &live.config.sale;
    let policy = Policy {
        reservation_min_age_ms: 0,
        transfer_finish_age_ms: 0,
    };
    let clean = reconcile(&ctx(&live), &live.config, &policy).await.unwrap();
    assert_eq!(clean.drift_found, 0, "{:?}", clean.details);

    let mut conn = live.store.conn();
    let (victim_id, (victim, _)) = result.accepted.iter().next().unwrap();
    let victim_shard = flashsale_workload::domain::shard::home_shard(victim, live.config.shards);
    let keys = |s| flashsale_workload::redis::keys::ShardKeys::new(sale, s);
    // 1. a deleted reservation of a persisted order
    let () = redis::cmd("HDEL")
        .arg(keys(victim_shard).reservations)
        .arg(victim_id.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    // 2. extra units on a shopper
    let () = redis::cmd("HINCRBY")
        .arg(keys(victim_shard).units)
        .arg(victim)
        .arg(2)
        .query_async(&mut conn)
        .await
        .unwrap();
    // 3. a half-done transfer: taken out of one shard, never credited, and
    // not in the donor's in-transit set either (the janitors finish those)
    let donor = (victim_shard + 1) % live.config.shards;
    let (taken, _) = live
        .store
        .transfer_out(sale, donor, victim_shard, "t-half", 2)
        .await
        .unwrap();
    assert!(taken > 0);
    let () = redis::cmd("ZREM")
        .arg(keys(donor).in_transit)
        .arg("t-half")
        .query_async(&mut conn)
        .await
        .unwrap();
    // 4. a shard off by 7
    let () = redis::cmd("INCRBY")
        .arg(keys(donor).stock)
        .arg(7)
        .query_async(&mut conn)
        .await
        .unwrap();

    let report = reconcile(&ctx(&live), &live.config, &policy).await.unwrap();
    let kinds: HashSet<&str> = report
        .details
        .iter()
        .filter(|d| d.finding.drift)
        .map(|d| d.finding.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "ReservationMissing",
            "ShopperUnits",
            "TransferUnfinished",
            "StockTotal"
        ]
        .into_iter()
        .collect(),
        "{:#?}",
        report.details
    );
    assert_eq!(
        report.drift_found, report.drift_repaired,
        "{:#?}",
        report.details
    );
    let again = reconcile(&ctx(&live), &live.config, &policy).await.unwrap();
    assert_eq!(again.drift_found, 0, "{:#?}", again.details);
    let (sold, _, _) = db_units(&live.db, &live.config).await;
    assert_eq!(
        redis_remaining(&live).await,
        200 - sold,
        "I6: Redis and the database agree"
    );
    let runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reconciliation_runs WHERE sale_id = $1")
            .bind(live.config.id)
            .fetch_one(&live.db)
            .await
            .unwrap();
    assert_eq!(runs, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_lifecycle_pay_cancel_and_payment_timeout() {
    let live = live(6, 2, 2, Duration::from_secs(2)).await;
    let api = &live.api;
    let sale = &live.config.sale;
    let order =
        |shopper: &'static str| async move { api.buy(sale, shopper, 1).await.order_id().unwrap() };
    let (paid, unpaid, refunded) = (
        order("payer").await,
        order("forgetful").await,
        order("regretful").await,
    );
    let call = |verb: &'static str, id: Uuid, shopper: &'static str| async move {
        let url = format!("{}/v1/orders/{id}/{verb}", api.url);
        Answer::read(
            api.client
                .post(url)
                .header("x-user-id", shopper)
                .send()
                .await
                .unwrap(),
        )
        .await
    };
    // Pending: not payable yet.
    let pending = call("pay", paid, "payer").await;
    assert_eq!((pending.status, pending.code()), (409, "ORDER_PENDING"));
    assert!(pending.retry_after.is_some());
    consume_until_drained(&live.db, &live.store, &live.config).await;
    assert_eq!(
        call("pay", paid, "someone-else").await.status,
        404,
        "only the owner"
    );
    // Paying starts a payment; the provider's callback makes it PAID.
    let first = call("pay", paid, "payer").await;
    assert_eq!(
        (first.status, first.body["status"].as_str()),
        (200, Some("UNPAID")),
        "the shopper's word pays nothing: {first:?}"
    );
    let payment = first.body["paymentId"].as_str().unwrap().to_string();
    assert_eq!(
        call("pay", paid, "payer").await.body["paymentId"],
        payment.as_str(),
        "a retried start is the same payment"
    );
    let confirmed = api.provider_says(&payment, paid, "succeeded").await;
    assert_eq!(
        (confirmed.status, confirmed.body["status"].as_str()),
        (200, Some("PAID")),
        "{confirmed:?}"
    );
    assert_eq!(
        api.provider_says(&payment, paid, "succeeded").await.body["status"],
        "PAID",
        "the provider saying it twice is idempotent"
    );
    let again = call("pay", paid, "payer").await;
    assert_eq!(
        (
            again.body["status"].as_str(),
            again.body["paymentId"].as_str()
        ),
        (Some("PAID"), Some(payment.as_str())),
        "paying a paid order answers its payment"
    );
    let regret = call("pay", refunded, "regretful").await;
    let regret_payment = regret.body["paymentId"].as_str().unwrap().to_string();
    assert_eq!(
        api.provider_says(&regret_payment, refunded, "succeeded")
            .await
            .body["status"],
        "PAID"
    );
    let remaining_before = redis_remaining(&live).await;
    let cancelled = call("cancel", refunded, "regretful").await;
    assert_eq!(
        (cancelled.status, cancelled.body["status"].as_str()),
        (200, Some("REFUNDED"))
    );
    assert_eq!(
        call("cancel", refunded, "regretful").await.body["status"],
        "REFUNDED",
        "idempotent"
    );
    assert_eq!(
        redis_remaining(&live).await,
        remaining_before + 1,
        "the unit is back once"
    );
    let not_payable = call("pay", refunded, "regretful").await;
    assert_eq!(
        (not_payable.status, not_payable.code()),
        (409, "ORDER_NOT_PAYABLE")
    );

    // Payment timeout: the unpaid order is cancelled, the paid one untouched.
    let stop = tokio_util::sync::CancellationToken::new();
    let sweeper = tokio::spawn(flashsale_workload::consumer::sweep_forever(
        live.db.clone(),
        live.store.clone(),
        live.config.id,
        Duration::from_millis(200),
        stop.clone(),
    ));
    let get = |id: Uuid, shopper: &'static str| async move {
        let url = format!("{}/v1/orders/{id}", api.url);
        Answer::read(
            api.client
                .get(url)
                .header("x-user-id", shopper)
                .send()
                .await
                .unwrap(),
        )
        .await
    };
    let mut status = String::new();
    for _ in 0..50 {
        status = get(unpaid, "forgetful").await.body["status"]
            .as_str()
            .unwrap()
            .to_string();
        if status == "CANCELLED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    sweeper.await.unwrap();
    assert_eq!(status, "CANCELLED");
    assert_eq!(get(paid, "payer").await.body["status"], "PAID");
    assert_eq!(redis_remaining(&live).await, remaining_before + 2);
    // Its stock is purchasable again, and by the same shopper too.
    assert_eq!(api.buy(sale, "forgetful", 2).await.status, 202);
    let (sold, _, units) = db_units(&live.db, &live.config).await;
    assert_eq!(
        (sold, units),
        (1, 1),
        "only the paid order holds stock in the database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_callbacks_are_signed_fresh_and_money_taken_is_never_lost() {
    use flashsale_workload::domain::payment::sign;
    let live = live(6, 2, 3, Duration::from_secs(600)).await;
    let api = &live.api;
    let sale = &live.config.sale;
    let orders: Vec<Uuid> = futures::future::join_all(
        ["ann", "ann", "ann"].map(|s| async move { api.buy(sale, s, 1).await.order_id().unwrap() }),
    )
    .await;
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let start = |order: Uuid| async move {
        let started = api.order_action(order, "ann", "pay").await;
        assert_eq!(started.status, 200, "{started:?}");
        started.body["paymentId"].as_str().unwrap().to_string()
    };
    let payment = start(orders[0]).await;
    let body =
        serde_json::json!({"paymentId": payment, "orderId": orders[0], "outcome": "succeeded"})
            .to_string();
    let now = chrono::Utc::now().timestamp();
    let secret = common::PAYMENT_SECRET;
    let refused = |answer: Answer, status: u16, words: &str, what: &str| {
        assert_eq!(answer.status, status, "{what}: {answer:?}");
        let message = answer.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {message}");
    };
    refused(
        api.payment_callback(&body, None).await,
        401,
        "missing Signature",
        "unsigned",
    );
    refused(
        api.payment_callback(
            &body,
            Some(sign(
                b"not-the-provider-but-32-bytes-long!",
                now,
                body.as_bytes(),
            )),
        )
        .await,
        401,
        "does not match",
        "another secret",
    );
    refused(
        api.payment_callback(&body, Some(sign(secret, now - 600, body.as_bytes())))
            .await,
        401,
        "away from now",
        "a replay of a 10-minute-old callback",
    );
    let junk = r#"{"paymentId": 1}"#;
    refused(
        api.payment_callback(junk, Some(sign(secret, now, junk.as_bytes())))
            .await,
        400,
        "the body must be",
        "a signed body that is no callback",
    );
    refused(
        api.provider_says(&payment, orders[1], "succeeded").await,
        404,
        "no such order",
        "the payment of another order",
    );
    assert_eq!(
        api.order(orders[0], "ann").await.body["status"],
        "UNPAID",
        "nothing refused changed the order"
    );

    // A declined payment leaves the order UNPAID; the next start is a new payment.
    let declined = api.provider_says(&payment, orders[0], "failed").await;
    assert_eq!(
        (declined.status, declined.body["status"].as_str()),
        (200, Some("UNPAID"))
    );
    let second = start(orders[0]).await;
    assert_ne!(second, payment, "a new payment after a declined one");
    assert_eq!(
        api.provider_says(&second, orders[0], "succeeded")
            .await
            .body["status"],
        "PAID"
    );
    refused(
        api.provider_says(&second, orders[0], "failed").await,
        409,
        "settled as SUCCEEDED",
        "a failure after a success",
    );
    // The first payment succeeds after all: the order is paid already, so
    // that money is owed back.
    let late = api.provider_says(&payment, orders[0], "succeeded").await;
    assert_eq!(
        (late.status, late.code()),
        (409, "ORDER_CANCELLED"),
        "{late:?}"
    );

    // Money taken for an order cancelled meanwhile (by the shopper, or the
    // payment timeout): refund due, the unit stays returned once.
    let third = start(orders[1]).await;
    let remaining = redis_remaining(&live).await;
    assert_eq!(
        api.order_action(orders[1], "ann", "cancel").await.body["status"],
        "CANCELLED"
    );
    for _ in 0..2 {
        let answer = api.provider_says(&third, orders[1], "succeeded").await;
        assert_eq!(
            (answer.status, answer.code()),
            (409, "ORDER_CANCELLED"),
            "{answer:?}"
        );
    }
    assert_eq!(
        api.order(orders[1], "ann").await.body["status"],
        "CANCELLED"
    );
    assert_eq!(
        redis_remaining(&live).await,
        remaining + 1,
        "the unit is back once"
    );
    let due: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM payments WHERE state = 'REFUND_DUE' ORDER BY id")
            .fetch_all(&live.db)
            .await
            .unwrap();
    let mut expected = vec![payment, third];
    expected.sort();
    assert_eq!(
        due, expected,
        "every payment taken for nothing is a refund due"
    );
}

/// Backends of `db`'s database waiting for a lock while they update a sale's row.
async fn waiting_on_the_sale_row(db: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'
           AND query LIKE 'UPDATE sales%'",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

/// Locks the sale's row as a consumer's long batch does, until dropped or
/// rolled back.
async fn hold_sale_row(live: &Live) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut hold = live.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM sales WHERE id = $1 FOR UPDATE")
        .bind(live.config.id)
        .execute(&mut *hold)
        .await
        .unwrap();
    hold
}

/// Persisted orders of `shoppers`, one unit each.
async fn persisted_orders(live: &Live, shoppers: &[String]) -> Vec<Uuid> {
    let mut orders = Vec::new();
    for shopper in shoppers {
        orders.push(
            live.api
                .buy(&live.config.sale, shopper, 1)
                .await
                .order_id()
                .unwrap(),
        );
    }
    consume_until_drained(&live.db, &live.store, &live.config).await;
    orders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purchases_keep_selling_while_order_changes_wait_on_the_database() {
    let live = live_with(100, 2, 5, Duration::from_secs(600), |options| {
        options.transport.max_in_flight = 4
    })
    .await;
    let shoppers: Vec<String> = (0..4).map(|i| format!("canceller-{i}")).collect();
    let orders = persisted_orders(&live, &shoppers).await;
    let hold = hold_sale_row(&live).await;
    let cancels: Vec<_> = orders
        .iter()
        .zip(&shoppers)
        .map(|(&order, shopper)| {
            let (api, shopper) = (live.api.clone(), shopper.clone());
            tokio::spawn(async move { api.order_action(order, &shopper, "cancel").await })
        })
        .collect();
    common::within(
        Duration::from_secs(10),
        "a cancel waits on the sale's row",
        || async { waiting_on_the_sale_row(&live.db).await > 0 },
    )
    .await;
    // Every cancel is in flight by now (they are on loopback).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let purchase = live.api.buy(&live.config.sale, "buyer", 1).await;
    assert_eq!(
        purchase.status, 202,
        "a purchase needs Redis and Kafka only; order changes waiting on PostgreSQL must not \
         take its place: {purchase:?}"
    );
    hold.rollback().await.unwrap();
    for cancel in cancels {
        let answer = cancel.await.unwrap();
        assert_eq!(
            (answer.status, answer.body["status"].as_str()),
            (200, Some("CANCELLED")),
            "{answer:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_waiting_on_the_sale_row_share_one_transaction() {
    let live = live(40, 2, 1, Duration::from_secs(600)).await;
    let shoppers: Vec<String> = (0..20).map(|i| format!("canceller-{i}")).collect();
    let orders = persisted_orders(&live, &shoppers).await;
    let remaining_before = redis_remaining(&live).await;
    let hold = hold_sale_row(&live).await;
    // Each shopper cancels twice, and a stranger tries the first order.
    let mut calls: Vec<(Uuid, String)> = Vec::new();
    for (order, shopper) in orders.iter().zip(&shoppers) {
        calls.push((*order, shopper.clone()));
        calls.push((*order, shopper.clone()));
    }
    calls.push((orders[0], "stranger".to_string()));
    let answers: Vec<_> = calls
        .iter()
        .map(|(order, shopper)| {
            let (api, order, shopper) = (live.api.clone(), *order, shopper.clone());
            tokio::spawn(async move { api.order_action(order, &shopper, "cancel").await })
        })
        .collect();
    let mut most_waiting = 0;
    for _ in 0..20 {
        most_waiting = most_waiting.max(waiting_on_the_sale_row(&live.db).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    hold.rollback().await.unwrap();
    for (answer, (_, shopper)) in answers.into_iter().zip(&calls) {
        let answer = answer.await.unwrap();
        if shopper == "stranger" {
            assert_eq!(answer.status, 404, "only the owner: {answer:?}");
        } else {
            assert_eq!(
                (answer.status, answer.body["status"].as_str()),
                (200, Some("CANCELLED")),
                "{answer:?}"
            );
        }
    }
    assert_eq!(
        most_waiting,
        1,
        "{} cancels queued on the sale's row in {most_waiting} transactions: each holds a \
         database connection and, behind a consumer's batch, convoys",
        calls.len()
    );
    let (sold, live_orders, _) = db_units(&live.db, &live.config).await;
    assert_eq!(
        (sold, live_orders),
        (0, 0),
        "every unit left the database's count once"
    );
    let units_held: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(units), 0)::bigint FROM shopper_units WHERE sale_id = $1",
    )
    .bind(live.config.id)
    .fetch_one(&live.db)
    .await
    .unwrap();
    assert_eq!(units_held, 0, "and each shopper's count");
    assert_eq!(
        redis_remaining(&live).await,
        remaining_before + 20,
        "and came back to Redis once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_order_leaves_nothing_in_redis_and_its_redelivery_changes_nothing() {
    let live = live(10, 1, 5, Duration::from_secs(900)).await;
    let sale = &live.config.sale;
    let orders = persisted_orders(&live, &["churner".to_string(), "keeper".to_string()]).await;
    let cancelled = live.api.order_action(orders[0], "churner", "cancel").await;
    assert_eq!(cancelled.body["status"], "CANCELLED", "{cancelled:?}");
    assert_eq!(
        live.store
            .reservation(sale, 0, &orders[0].to_string())
            .await
            .unwrap(),
        None,
        "a cancelled order's reservation goes with its units: a shopper who buys and cancels \
         all hour must not grow Redis"
    );
    assert!(
        live.store
            .reservation(sale, 0, &orders[1].to_string())
            .await
            .unwrap()
            .is_some(),
        "a live order keeps its reservation"
    );
    // A consumer that crashed before committing reads the cancelled order's
    // message again: its reservation is gone, but the order is persisted.
    let message = common::read_topic(sale)
        .into_iter()
        .find(|m| m.order_id == orders[0])
        .unwrap();
    let producer: FutureProducer = client_config(&stack::kafka_bootstrap()).create().unwrap();
    producer
        .send(
            FutureRecord::<str, _>::to(&topics::orders_topic(sale)).payload(&message.to_payload()),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let order = live.api.order(orders[0], "churner").await;
    assert_eq!(order.body["status"], "CANCELLED", "{order:?}");
    assert_eq!(
        db_units(&live.db, &live.config).await,
        (1, 1, 1),
        "the redelivery sold nothing again"
    );
    assert_eq!(redis_remaining(&live).await, 9);
    let next = live.api.buy(sale, "after", 1).await;
    assert_eq!(
        next.status, 202,
        "a redelivered message of an ended order is not Redis losing the sale's state: no \
         fence: {next:?}"
    );
}
