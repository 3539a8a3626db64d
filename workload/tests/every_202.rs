//! Every 202 is an order (issue 33): the timings a slow service produces —
//! a Redis reply later than its timeout, a broker that takes seconds to
//! accept, a stalled broker, a failover that dropped a write — never leave a
//! shopper told "accepted" for an order that is later FAILED, dropped or
//! 404, and a purchase token buys once through all of it. Slowness is a real
//! TCP proxy between the parts (toxiproxy, `e2e/stack/toxiproxy.sh`) or a
//! stopped broker, which every other test meanwhile would feel too: the
//! scenarios run one at a time.

mod common;

use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use common::{Answer, LiveSale, SaleSpec, TestApi, consume_until_drained, create_sale};
use flashsale_testkit::{self as stack, Toxic};
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::domain::purchase::ReservationState;
use flashsale_workload::domain::purchase_token;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::orders::reconciliation;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::keys::ShardKeys;
use flashsale_workload::redis::store::SaleStore;
use tokio::sync::Mutex;
use uuid::Uuid;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn signal_broker(signal: &str) {
    let pid = std::fs::read_to_string(stack::run_dir().join("pids/kafka.pid"))
        .expect("the stack's broker is recorded");
    let status = Command::new("kill")
        .args([signal, pid.trim()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// The broker stopped (SIGSTOP) until this is dropped, panics included.
struct StoppedBroker;

impl StoppedBroker {
    fn now() -> Self {
        signal_broker("-STOP");
        Self
    }
}

impl Drop for StoppedBroker {
    fn drop(&mut self) {
        signal_broker("-CONT");
    }
}

/// Waits for the order's lookup to settle on anything but PENDING.
async fn settled(live: &LiveSale, order: Uuid, shopper: &str) -> Answer {
    for _ in 0..300 {
        let seen = live.api.order(order, shopper).await;
        if seen.status != 200 || seen.body["status"] != "PENDING" {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("order {order} stayed PENDING");
}

/// Every order answered 202 is persisted, and none is FAILED.
async fn every_202_persisted(live: &LiveSale, accepted: &[(Uuid, &str)]) {
    consume_until_drained(&live.db, &live.store, &live.config).await;
    for (order, shopper) in accepted {
        let seen = settled(live, *order, shopper).await;
        assert_eq!(
            (seen.status, seen.body["status"].as_str()),
            (200, Some("UNPAID")),
            "order {order} was answered 202: {seen:?}"
        );
    }
}

/// Issue 33 #1. The broker stalls; a purchase with key K hangs on its
/// produce, and the same purchase sent again meanwhile must not be promised
/// the first one's order before the broker acknowledged it: the first then
/// fails (503), and the retry must say so too — or wait, never 202 for an
/// order that ends FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_not_promised_an_order_its_first_attempt_may_still_lose() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start_with(common::redis_node(), 10, 1, 2, |api| {
        api.purchase_budget = PurchaseBudget::new(Duration::from_secs(2)).unwrap();
    })
    .await;
    let sale = live.config.sale.clone();
    let stalled = StoppedBroker::now();
    let first = tokio::spawn({
        let (api, sale) = (live.api.clone(), sale.clone());
        async move { api.buy_with_key(&sale, "patient", 1, Some("K")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = live.api.buy_with_key(&sale, "patient", 1, Some("K")).await;
    let first = first.await.unwrap();
    drop(stalled);
    let mut accepted = Vec::new();
    for answer in [&first, &retry] {
        match answer.status {
            202 => accepted.push((answer.order_id().unwrap(), "patient")),
            503 => {}
            _ => panic!("unexpected answer {answer:?}"),
        }
    }
    // With the broker back, the same key decides for good.
    let again = live.api.buy_with_key(&sale, "patient", 1, Some("K")).await;
    assert_eq!(again.status, 202, "{again:?}");
    accepted.push((again.order_id().unwrap(), "patient"));
    every_202_persisted(&live, &accepted).await;
}

/// Issue 33 #2. The purchase's Redis reply comes later than its timeout
/// (the script ran; the retry finds it), then the broker takes seconds to
/// accept the message. Meanwhile another API's janitor sees an old
/// reservation and a drained topic, and releases it. The shopper must not be
/// answered 202 for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_slower_than_the_janitor_is_not_answered_202() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let budget = PurchaseBudget::new(Duration::from_secs(3)).unwrap();
    let live = LiveSale::start_with(common::redis_node(), 10, 1, 2, |api| {
        api.redis = stack::redis_proxied_url().parse().unwrap();
        api.kafka = stack::kafka_proxied_bootstrap();
        api.purchase_budget = budget;
    })
    .await;
    let sale = live.config.sale.clone();
    let janitor = live.other_janitor(budget).await;
    // A first purchase, so that the API's producer is ready (its idempotent
    // producer id, the topic's leaders) before the broker slows down.
    let early = live.api.buy(&sale, "early", 1).await;
    assert_eq!(early.status, 202, "{early:?}");
    let early = (early.order_id().unwrap(), "early");
    // Persisted: the topic is drained, as the janitor needs to release.
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let slow_redis = Toxic::add("redis", "latency", "downstream", r#"{"latency": 2400}"#);
    let slow_broker = Toxic::add("kafka", "latency", "upstream", r#"{"latency": 2500}"#);
    let purchase = tokio::spawn({
        let (api, sale) = (live.api.clone(), sale.clone());
        async move { api.buy_with_key(&sale, "hurried", 1, Some("K")).await }
    });
    // The first reply times out at 2 s; the retry's reply comes at once.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    drop(slow_redis);
    while !purchase.is_finished() {
        janitor.sweep().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = purchase.await.unwrap();
    drop(slow_broker);
    match answer.status {
        202 => every_202_persisted(&live, &[early, (answer.order_id().unwrap(), "hurried")]).await,
        503 => {
            every_202_persisted(&live, &[early]).await;
            assert_eq!(live.remaining().await, 9, "503 said nothing is reserved");
        }
        _ => panic!("unexpected answer {answer:?}"),
    }
}

/// Issue 33 #5. A shard lost its state (restarted empty); the operator's
/// metadata write (the kill switch, backpressure) must not bring it back
/// "warmed" with no stock, where purchases would be told SOLD_OUT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_the_metadata_never_revives_a_lost_shard() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let db = common::fresh_database().await;
    let config = create_sale(&db, &SaleSpec::live(&stack::unique_name("ns"), 10, 1, 2)).await;
    let store = common::store(&common::redis_node()).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    forget_shard(&config, 0).await;
    let written = store
        .write_meta(&config.sale, 1, &config.meta(true, true, false))
        .await;
    assert!(written.is_err(), "written over a lost shard: {written:?}");
    assert_eq!(store.meta(&config.sale, 0).await.unwrap(), None);
    let decision = store
        .purchase(
            &config.sale,
            0,
            "alice",
            1,
            &Uuid::now_v7().to_string(),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        decision,
        flashsale_workload::domain::purchase::ShardDecision::NotWarmed
    );
}

/// Deletes every key of `shard` of the sale (used purchase tokens included),
/// as a restart without persistence leaves it.
async fn forget_shard(config: &SaleConfig, shard: u32) {
    let mut conn = RedisConn::connect(&common::redis_node()).await.unwrap();
    let keys = ShardKeys::new(&config.sale, shard);
    let base = keys.meta.trim_end_matches(":meta").to_string();
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{base}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !found.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(&found)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// Issue 33 #6. A failover dropped the write of an accepted order's
/// reservation while the consumers lag: until a consumer meets its message,
/// nothing in Redis says so. Its shopper must never be told it does not
/// exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_whose_reservation_a_failover_dropped_is_never_404() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 10, 1, 2).await;
    let bought = live.api.buy(&live.config.sale, "carol", 2).await;
    assert_eq!(bought.status, 202, "{bought:?}");
    let order = bought.order_id().unwrap();
    undo_reservation(&live.store, &live.config, order).await;
    let seen = live.api.order(order, "carol").await;
    assert_ne!(seen.status, 404, "the order is accepted: {seen:?}");
    assert_eq!((seen.status, seen.code()), (503, "UNAVAILABLE"), "{seen:?}");
    // The consumer meets the message: the order stands, the sale is fenced.
    consume_until_drained(&live.db, &live.store, &live.config).await;
    let seen = settled(&live, order, "carol").await;
    assert_eq!(seen.body["status"], "UNPAID", "{seen:?}");
}

/// Reverts everything the purchase script did for `order`, as a replica
/// promoted before the write reached it holds the shard.
async fn undo_reservation(store: &SaleStore, config: &SaleConfig, order: Uuid) {
    let id = order.to_string();
    let reservation = store
        .reservation(&config.sale, 0, &id)
        .await
        .unwrap()
        .expect("reserved");
    assert_ne!(reservation.state, ReservationState::Released);
    let keys = ShardKeys::new(&config.sale, 0);
    let mut conn = RedisConn::connect(&common::redis_node()).await.unwrap();
    let () = redis::pipe()
        .hdel(&keys.reservations, &id)
        .zrem(&keys.pending, &id)
        .hincr(&keys.units, &reservation.shopper, -reservation.quantity)
        .incr(&keys.stock, reservation.quantity)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
}

async fn token_of(api: &TestApi, config: &SaleConfig, shopper: &str) -> String {
    let request = api
        .client
        .get(format!("{}/v1/sales/{}/token", api.url, config.sale.name));
    let answer = Answer::read(api.identify(request, shopper).send().await.unwrap()).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body["token"].as_str().unwrap().to_string()
}

async fn buy_with_token(
    api: &TestApi,
    config: &SaleConfig,
    shopper: &str,
    token: &str,
    key: &str,
) -> Answer {
    let request = api
        .client
        .post(format!("{}/v1/sales/{}/orders", api.url, config.sale.name))
        .header("purchase-token", token)
        .header("idempotency-key", key)
        .json(&serde_json::json!({"quantity": 1}));
    Answer::read(api.identify(request, shopper).send().await.unwrap()).await
}

/// A warmed sale requiring purchase tokens, with an API.
async fn token_sale() -> LiveSale {
    LiveSale::of_spec(
        common::redis_node(),
        |namespace| SaleSpec {
            purchase_token_ttl: Some(Duration::from_secs(30)),
            ..SaleSpec::live(namespace, 10, 1, 5)
        },
        |_| {},
    )
    .await
}

/// Issue 33 #7, three ways a token could buy twice: a same-key retry
/// refused before Redis gave back the token of a purchase that succeeded;
/// the used token's memory expired by Redis's clock, not the API's; and a
/// lost Redis state forgot it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_token_buys_once_through_refusals_clocks_and_a_lost_state() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = token_sale().await;
    let (api, config) = (&live.api, &live.config);

    // Refused before Redis: the sale is recorded lost for a moment.
    let token = token_of(api, config, "dave").await;
    let first = buy_with_token(api, config, "dave", &token, "k1").await;
    assert_eq!(first.status, 202, "{first:?}");
    flashsale_workload::orders::sales::mark_redis_lost(&live.db, config.id)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refused = buy_with_token(api, config, "dave", &token, "k1").await;
    assert_eq!(refused.status, 503, "{refused:?}");
    sqlx::query("UPDATE sales SET redis_lost_at = NULL WHERE id = $1")
        .bind(config.id)
        .execute(&live.db)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let twice = buy_with_token(api, config, "dave", &token, "k2").await;
    assert_eq!(
        (twice.status, twice.code()),
        (403, "TOKEN_INVALID"),
        "the token bought already: {twice:?}"
    );

    // Remembered for the token's life by the API's clock, plus slack,
    // whatever Redis's clock says.
    let nonce = nonce_of(&token, config, "dave");
    let mut conn = RedisConn::connect(&common::redis_node()).await.unwrap();
    let left_ms: i64 = redis::cmd("PTTL")
        .arg(ShardKeys::new(&config.sale, 0).used_token(&nonce))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        left_ms > 60_000,
        "the used token is forgotten in {left_ms} ms, before its expiry and the clocks' slack"
    );

    // The sale's Redis state is lost and recovered from the database.
    consume_until_drained(&live.db, &live.store, config).await;
    forget_shard(config, 0).await;
    let snapshot = reconciliation::snapshot(&live.db, config.id).await.unwrap();
    live.store
        .warm_from(config, &snapshot, false, &Uuid::new_v4().to_string())
        .await
        .unwrap();
    let after_loss = buy_with_token(api, config, "dave", &token, "k3").await;
    assert_eq!(
        (after_loss.status, after_loss.code()),
        (403, "TOKEN_INVALID"),
        "a recovered state forgot the token was used: {after_loss:?}"
    );
    let fresh = token_of(api, config, "dave").await;
    let bought = buy_with_token(api, config, "dave", &fresh, "k4").await;
    assert_eq!(bought.status, 202, "a new token buys: {bought:?}");
}

/// The nonce `token` carries.
fn nonce_of(token: &str, config: &SaleConfig, shopper: &str) -> Uuid {
    purchase_token::verify(
        common::PURCHASE_TOKEN_SECRET,
        token,
        config.id,
        shopper,
        Utc::now().timestamp_millis(),
    )
    .unwrap()
    .nonce
}

/// A consumer that started while the broker was down takes its partitions
/// up as soon as the broker is back. Until then librdkafka queued an error
/// for every connection it tried (many a second: with no metadata yet, it
/// keeps asking); the consumer must not work them off slowly ahead of the
/// rebalance and the orders behind them (a fresh clone's chaos run,
/// 2026-12-07: a consumer pod started as kafka-kill struck kept its
/// partition's lag frozen for minutes, its 202s unpersisted until their
/// reservations timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_started_during_a_broker_outage_persists_once_it_is_back() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 100, 1, 10).await;
    let sale = live.config.sale.clone();
    let before = live.api.buy(&sale, "before", 1).await;
    assert_eq!(before.status, 202, "{before:?}");
    let mut accepted = vec![(before.order_id().unwrap(), "before".to_string())];

    let outage = stack::ProxyDown::now("kafka");
    let consumer = common::RunningConsumer::start(
        &stack::kafka_proxied_bootstrap(),
        &live.db,
        &live.store,
        &live.config,
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    drop(outage);
    for n in 0..5 {
        let shopper = format!("after-{n}");
        let answer = live.api.buy(&sale, &shopper, 1).await;
        assert_eq!(answer.status, 202, "{answer:?}");
        accepted.push((answer.order_id().unwrap(), shopper));
    }
    let back = std::time::Instant::now();
    common::wait_drained(&live.config).await;
    eprintln!("drained {:?} after the broker came back", back.elapsed());
    consumer.stop().await;
    for (order, shopper) in &accepted {
        let seen = settled(&live, *order, shopper).await;
        assert_eq!(seen.body["status"], "UNPAID", "{order}: {seen:?}");
    }
}
