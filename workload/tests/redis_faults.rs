//! Faults injected into the real Redis node while a purchase or a cancel is
//! half-way: `DEBUG SLEEP` (the server stalls), `CLIENT PAUSE WRITE` (writes
//! wait) and `CLIENT KILL` (connections drop, queued commands are lost).
//! Whatever the shopper is told must be true, and every unit must be on sale
//! again within seconds. The scenarios stall the whole node, so they run one
//! at a time (this binary holds nothing else).

mod common;

use std::time::Duration;

use common::{LiveSale, consume_until_drained, within};
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::redis::RedisConn;
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A connection of the test's own, outside the API's.
async fn admin() -> RedisConn {
    RedisConn::connect(&common::redis_node()).await.unwrap()
}

/// Runs `DEBUG SLEEP`/`CLIENT PAUSE` on a connection of its own, `after` from
/// now, and returns at once.
fn stall_later(after: Duration, command: &'static [&'static str]) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut conn = admin().await;
        tokio::time::sleep(after).await;
        let mut cmd = redis::cmd(command[0]);
        for arg in &command[1..] {
            cmd.arg(*arg);
        }
        let _: Result<redis::Value, _> = cmd.query_async(&mut conn).await;
    })
}

/// The purchase script's replies time out three times (the server stalls
/// 7 s): the shopper hears 503 "nothing reserved", and nothing is (item 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_whose_script_timed_out_reserves_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 10, 1, 5).await;
    let sale = live.config.sale.clone();
    let stall = stall_later(Duration::ZERO, &["DEBUG", "SLEEP", "7"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = live.api.buy(&sale, "stalled", 1).await;
    stall.await.unwrap();
    assert_eq!(
        (answer.status, answer.code()),
        (503, "UNAVAILABLE"),
        "{answer:?}"
    );
    assert_eq!(
        live.remaining().await,
        10,
        "the shopper was told nothing is reserved: {answer:?}"
    );
    // The late script runs found a tombstone: still nothing reserved.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(live.remaining().await, 10);
    assert_eq!(live.api.buy(&sale, "stalled", 1).await.status, 202);
}

/// The produce fails, then Redis does not take the release: the shopper is
/// told neither "accepted" nor "nothing reserved" but that the outcome is
/// unknown (issue 33: it used to be 202); the order it names ends FAILED
/// with its units back, never missing (item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_produce_whose_release_failed_is_not_answered_as_nothing_reserved() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let budget = PurchaseBudget::new(Duration::from_secs(1)).unwrap();
    let live = LiveSale::start_with(common::redis_node(), 10, 1, 5, |api| {
        // No broker listens there: every produce fails after a second.
        api.kafka = "127.0.0.1:1".into();
        api.purchase_budget = budget;
    })
    .await;
    let sale = live.config.sale.clone();
    // Writes wait from 0.4 s to 4.4 s: the release after the failed produce
    // (at ~1 s) times out.
    let pause = stall_later(
        Duration::from_millis(400),
        &["CLIENT", "PAUSE", "4000", "WRITE"],
    );
    let answer = live.api.buy(&sale, "unlucky", 1).await;
    pause.await.unwrap();
    match (answer.status, answer.code()) {
        (503, "UNAVAILABLE") => assert_eq!(
            live.remaining().await,
            10,
            "503 said nothing is reserved: {answer:?}"
        ),
        // Not acknowledged, not released: never promised, never lost from
        // sight. The message was never written, so the janitor releases it
        // and the order shows FAILED, its units back.
        (503, "OUTCOME_UNKNOWN") => {
            let order = answer.order_id().unwrap();
            // The API's janitor cannot read that broker: another replica's.
            let janitor = live.other_janitor(budget).await;
            within(
                Duration::from_secs(8),
                "the order ends FAILED, units back",
                || async {
                    janitor.sweep().await;
                    let seen = live.api.order(order, "unlucky").await;
                    seen.body["status"] == "FAILED" && live.remaining().await == 10
                },
            )
            .await;
        }
        _ => panic!("unexpected answer {answer:?}"),
    }
}

/// A cancel committed in the database whose release Redis lost (writes
/// paused, then the connection killed with the release queued): the units
/// are on sale again within 5 s (item 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_release_was_lost_returns_its_units() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let live = LiveSale::start(common::redis_node(), 10, 1, 5).await;
    let sale = live.config.sale.clone();
    let bought = live.api.buy(&sale, "regretful", 2).await;
    let order = bought.order_id().unwrap();
    consume_until_drained(&live.db, &live.store, &live.config).await;
    assert_eq!(live.remaining().await, 8);

    let mut conn = admin().await;
    let () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "3000", "WRITE"][..])
        .query_async(&mut conn)
        .await
        .unwrap();
    let cancel = {
        let api = live.api.clone();
        tokio::spawn(async move { api.order_action(order, "regretful", "cancel").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every other client's connection goes, with the queued release.
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"][..])
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let cancelled = cancel.await.unwrap();
    assert_eq!(cancelled.body["status"], "CANCELLED", "{cancelled:?}");
    // The test's own store lost its connection too: look through a new one.
    let store = common::store(&common::redis_node()).await;
    let took = within(
        Duration::from_secs(5),
        "the cancelled units are back",
        || async { common::shard_stocks(&store, &live.config).await == [10] },
    )
    .await;
    println!("the lost release was retried after {took:?}");
    assert_eq!(
        store
            .reservation(&sale, 0, &order.to_string())
            .await
            .unwrap(),
        None,
        "released once, its record gone"
    );
}
