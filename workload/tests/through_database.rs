//! Selling through PostgreSQL alone (`spec.degradation.redisDown:
//! database`, issue 37) against the real database and Kafka: the
//! transaction's every answer, a concurrent storm that cannot oversell or
//! pass the limit, and the API's path — the order persisted before the 202,
//! its message marked persisted, the consumers counting it once.

mod common;

use std::sync::Arc;

use common::{LiveSale, consume_until_drained, read_topic};
use flashsale_workload::domain::purchase_token::UsedToken;
use flashsale_workload::domain::shard::home_shard;
use flashsale_workload::orders::direct::{self, DirectDecision};
use flashsale_workload::orders::order::NewOrder;
use flashsale_workload::orders::sales;
use sqlx::PgPool;
use uuid::Uuid;

fn order(shopper: &str, quantity: i64, key: Option<&str>, token: Option<Uuid>) -> NewOrder {
    NewOrder {
        id: Uuid::now_v7(),
        shopper: shopper.to_string(),
        quantity,
        shard: home_shard(shopper, 4),
        accepted_at: chrono::Utc::now(),
        idempotency_key: key.map(str::to_string),
        purchase_token: token.map(|nonce| UsedToken {
            nonce,
            until_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        }),
    }
}

/// Records the sale's Redis state lost and lets it sell through the database.
async fn sell_through_database(db: &PgPool, id: Uuid) {
    sales::mark_redis_lost(db, id).await.unwrap();
    assert!(sales::sell_through_database(db, id).await.unwrap());
}

/// (units sold, shoppers over the limit, orders) of the sale `id`.
async fn counts(db: &PgPool, id: Uuid) -> (i32, i64, i64) {
    sqlx::query_as(
        "SELECT s.sold,
                (SELECT count(*) FROM shopper_units u WHERE u.sale_id = s.id AND u.units > u.purchase_limit),
                (SELECT count(*) FROM orders o WHERE o.sale_id = s.id)
         FROM sales s WHERE s.id = $1",
    )
    .bind(id)
    .fetch_one(db)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_answers_each_case_and_writes_only_what_it_accepts() {
    let live = LiveSale::start(common::redis_node(), 3, 4, 2).await;
    let (db, id) = (&live.db, live.config.id);
    let buy = |o: NewOrder| async move { direct::purchase(db, id, &o).await.unwrap() };
    assert_eq!(
        buy(order("ann", 1, None, None)).await,
        DirectDecision::NotSelling,
        "not before the operator says so"
    );
    sell_through_database(db, id).await;
    let token = Uuid::now_v7();
    let first = order("ann", 1, Some("k-1"), Some(token));
    assert_eq!(buy(first.clone()).await, DirectDecision::Accepted);
    assert_eq!(
        buy(order("ann", 1, Some("k-1"), None)).await,
        DirectDecision::Replay(first.id),
        "the same key names the first order"
    );
    assert_eq!(
        buy(order("ann", 1, Some("k-2"), Some(token))).await,
        DirectDecision::TokenUsed
    );
    assert_eq!(
        buy(order("ann", 2, None, None)).await,
        DirectDecision::LimitExceeded,
        "1 held + 2 over a limit of 2"
    );
    assert_eq!(
        buy(order("bob", 3, None, None)).await,
        DirectDecision::LimitExceeded,
        "3 at once over a limit of 2"
    );
    assert_eq!(
        buy(order("bob", 2, None, None)).await,
        DirectDecision::Accepted
    );
    assert_eq!(
        buy(order("cat", 1, None, None)).await,
        DirectDecision::SoldOut
    );
    assert_eq!(counts(db, id).await, (3, 0, 2), "two orders, three units");
    // The recovery stops it under the row's lock: nothing lands after.
    let stopped = sales::stop_selling_through_database(db, id).await.unwrap();
    assert!(stopped.is_some());
    sqlx::query("UPDATE sales SET stock = 10 WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .unwrap();
    assert_eq!(
        buy(order("dan", 1, None, None)).await,
        DirectDecision::NotSelling
    );
    assert_eq!(counts(db, id).await, (3, 0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_storm_through_the_database_sells_exactly_the_stock() {
    const STOCK: i32 = 25;
    let live = LiveSale::start(common::redis_node(), i64::from(STOCK), 4, 1).await;
    let (db, id) = (live.db.clone(), live.config.id);
    sell_through_database(&db, id).await;
    // 60 shoppers, each trying twice at once under two keys: 120 purchases.
    let storm: Vec<_> = (0..120)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move {
                let who = format!("shopper-{}", i / 2);
                let key = format!("key-{i}");
                direct::purchase(&db, id, &order(&who, 1, Some(&key), None))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut accepted = 0;
    for decision in futures::future::join_all(storm).await {
        match decision.unwrap() {
            DirectDecision::Accepted => accepted += 1,
            DirectDecision::SoldOut | DirectDecision::LimitExceeded => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(accepted, STOCK, "exactly the stock (I1, I5)");
    assert_eq!(
        counts(&db, id).await,
        (STOCK, 0, i64::from(STOCK)),
        "sold, over the limit, orders (I1, I2)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_sells_through_the_database_and_the_consumers_count_it_once() {
    let live = LiveSale::start(common::redis_node(), 10, 4, 1).await;
    let (db, config) = (&live.db, &live.config);
    // Redis holds no unit (all 10 counted sold there, none in the
    // database), so a 202 can only come from the database; the API finds
    // the sale sold out in Redis and remembers it.
    live.store
        .delete(&config.sale, config.shards)
        .await
        .unwrap();
    live.store
        .warm(config, 10, false, &Uuid::now_v7().to_string())
        .await
        .unwrap();
    assert_eq!(
        live.api.buy(&config.sale, "early", 1).await.code(),
        "SOLD_OUT"
    );
    sell_through_database(db, config.id).await;
    // Within a second the API sells through the database, what it
    // remembered of Redis ignored (a purchase without a key included).
    common::within(
        std::time::Duration::from_secs(10),
        "the API selling through the database",
        || {
            let api = Arc::clone(&live.api);
            let sale = config.sale.clone();
            async move {
                let probe = format!("probe-{}", Uuid::now_v7());
                api.buy(&sale, &probe, 1).await.status == 202
            }
        },
    )
    .await;
    let answer = live
        .api
        .buy_with_key(&config.sale, "eve", 1, Some("eve-1"))
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    let id = answer.order_id().unwrap();
    // Persisted before the answer: UNPAID at once.
    let seen = live.api.order(id, "eve").await;
    assert_eq!(seen.body["status"], "UNPAID", "{:?}", seen.body);
    let again = live
        .api
        .buy_with_key(&config.sale, "eve", 1, Some("eve-1"))
        .await;
    assert_eq!((again.status, again.order_id()), (202, Some(id)));
    assert_eq!(
        live.api.buy(&config.sale, "eve", 1).await.code(),
        "LIMIT_EXCEEDED"
    );
    let messages = read_topic(&config.sale);
    assert!(
        messages.iter().all(|m| m.persisted) && messages.iter().any(|m| m.order_id == id),
        "every order on the topic is marked persisted"
    );
    let before = counts(db, config.id).await;
    assert_eq!(before, (2, 0, 2), "the probe's and eve's");
    consume_until_drained(db, &live.store, config).await;
    assert_eq!(counts(db, config.id).await, before, "counted once (I1, I3)");
    let reservations = common::shard_stocks(&live.store, config).await;
    assert_eq!(
        reservations.iter().sum::<i64>(),
        0,
        "Redis's stock untouched"
    );
    let loaded = live
        .store
        .loaded(&config.sale, config.shards)
        .await
        .unwrap();
    assert!(
        !loaded.fenced.iter().any(|f| *f),
        "no claim, no fence for an order Redis never held"
    );
}
