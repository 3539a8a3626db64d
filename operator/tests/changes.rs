//! Changes while a sale lives, and its deletion: restock adds purchasable
//! stock, a shrink never lets Redis sell more than the new stock (and one
//! below what is sold is refused with a condition), deleting removes the
//! Redis state and topics and keeps the orders.

mod common;

use std::time::Duration;

use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::purchase::ShardDecision;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
use kube::Api;
use kube::api::{Patch, PatchParams};

async fn set_stock(sales: &Api<FlashSale>, name: &str, stock: i64) {
    sales
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"stock": stock}})),
        )
        .await
        .unwrap();
}

async fn store() -> SaleStore {
    SaleStore::new(
        RedisConn::connect(&stack::redis_url().parse().unwrap())
            .await
            .unwrap(),
    )
}

async fn live_sale(
    name: &str,
    stock: i64,
) -> (
    Api<FlashSale>,
    common::TestNamespace,
    String,
    common::Operator,
) {
    live_sale_over(name, stock, 2).await
}

async fn live_sale_over(
    name: &str,
    stock: i64,
    shards: u32,
) -> (
    Api<FlashSale>,
    common::TestNamespace,
    String,
    common::Operator,
) {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let operator = common::Operator::start(&ns, &db_url, "flashsale-operator", name);
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest(name, &ns, 2, 600);
    manifest["spec"]["stock"] = serde_json::json!(stock);
    manifest["spec"]["sharding"] = serde_json::json!({ "shards": shards });
    manifest["spec"]["purchaseLimit"] = serde_json::json!(100);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    common::create_live(&sales, manifest).await;
    (sales, ns, db_url, operator)
}

async fn buy(store: &SaleStore, sale: &SaleRef, shopper: &str, quantity: i64) -> ShardDecision {
    let home = flashsale_workload::domain::shard::home_shard(shopper, 2);
    let id = uuid::Uuid::now_v7().to_string();
    store
        .purchase(sale, home, shopper, quantity, &id, None, None)
        .await
        .unwrap()
}

async fn remaining(store: &SaleStore, sale: &SaleRef) -> i64 {
    store.shard_stocks(sale, 2).await.unwrap().iter().sum()
}

fn condition(fs: &FlashSale, t: &str) -> Option<(String, String)> {
    let c = fs
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restock_adds_stock_and_a_shrink_below_sold_is_refused() {
    let (sales, ns, db_url, _operator) = live_sale("restock", 10).await;
    let sale = SaleRef::new(&ns, "restock").unwrap();
    let store = store().await;
    // Sell everything: one shard at a time, borrowing as needed.
    for i in 0..10 {
        assert!(matches!(
            buy(&store, &sale, &format!("a{i}"), 1).await,
            ShardDecision::Accepted { .. }
        ));
    }
    assert_eq!(remaining(&store, &sale).await, 0);

    set_stock(&sales, "restock", 15).await;
    common::wait_for(
        Duration::from_secs(10),
        "the restock to reach Redis",
        || async { (remaining(&store, &sale).await == 5).then_some(()) },
    )
    .await;
    // Through the API: shoppers homed on either shard get the new units.
    let api = common::ApiProcess::start(&ns, &db_url).await;
    for i in 0..5 {
        assert_eq!(
            api.buy("restock", &format!("b{i}")).await.0,
            202,
            "restocked unit {i}"
        );
    }
    assert_eq!(
        api.buy("restock", "late").await,
        (409, "SOLD_OUT".to_string())
    );

    // 15 sold: 12 is below that and refused; the stock stays 15.
    set_stock(&sales, "restock", 12).await;
    let refused = common::wait_for(Duration::from_secs(10), "the refusal condition", || async {
        let fs = sales.get("restock").await.ok()?;
        let degraded = condition(&fs, "Degraded")?;
        (degraded == ("True".into(), "StockBelowSold".into())).then_some(fs)
    })
    .await;
    assert_eq!(refused.status.unwrap().stock.unwrap().total, 15);
    assert_eq!(remaining(&store, &sale).await, 0, "Redis unchanged");
    set_stock(&sales, "restock", 15).await;
    common::wait_for(Duration::from_secs(10), "the refusal to clear", || async {
        let fs = sales.get("restock").await.ok()?;
        (condition(&fs, "Degraded")?.0 == "False").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_redis_state_and_topics_and_keeps_orders() {
    let (sales, ns, db_url, _operator) = live_sale("gone", 10).await;
    let sale = SaleRef::new(&ns, "gone").unwrap();
    let api = common::ApiProcess::start(&ns, &db_url).await;
    common::wait_for(
        Duration::from_secs(10),
        "the API to see the sale",
        || async { (api.buy("gone", "keeper").await.0 == 202).then_some(()) },
    )
    .await;
    let db = flashsale_workload::orders::connect(&db_url, 1)
        .await
        .unwrap();
    common::wait_for(
        Duration::from_secs(60),
        "the consumer pods to persist the order",
        || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
                .fetch_one(&db)
                .await
                .ok()?;
            (n == 1).then_some(())
        },
    )
    .await;

    sales.delete("gone", &Default::default()).await.unwrap();
    common::wait_for(
        Duration::from_secs(60),
        "the finalizer to finish",
        || async { sales.get_opt("gone").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let store = store().await;
    assert_eq!(store.shards_with_meta(&sale, 2).await.unwrap(), 0);
    let mut conn = store.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("fs:{{{ns}/gone:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "no Redis key left: {keys:?}");
    let admin = Admin::new(&stack::kafka_bootstrap()).unwrap();
    assert_eq!(
        admin
            .partitions(&[&topics::orders_topic(&sale)])
            .await
            .unwrap(),
        0,
        "topics deleted"
    );
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(orders, 1, "orders are never deleted");
    let deleted: bool = sqlx::query_scalar("SELECT deleted_at IS NOT NULL FROM sales")
        .fetch_one(&db)
        .await
        .unwrap();
    assert!(deleted);
}

fn total_stock(fs: &FlashSale) -> Option<i64> {
    Some(fs.status.as_ref()?.stock.as_ref()?.total)
}

/// A shrink of a sharded sale takes the units out of every shard, Redis
/// first: 100 units over 4 shards, 20 sold from shard 0, shrunk to 30 —
/// exactly 10 more sell, whichever shards the shoppers buy from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_of_a_sharded_sale_never_oversells() {
    let (sales, ns, db_url, _operator) = live_sale_over("shrink", 100, 4).await;
    let sale = SaleRef::new(&ns, "shrink").unwrap();
    let store = store().await;
    let home0 = (0..)
        .map(|i| format!("early-{i}"))
        .find(|s| flashsale_workload::domain::shard::home_shard(s, 4) == 0)
        .unwrap();
    let id = uuid::Uuid::now_v7().to_string();
    let decision = store
        .purchase(&sale, 0, &home0, 20, &id, None, None)
        .await
        .unwrap();
    assert!(
        matches!(decision, ShardDecision::Accepted { .. }),
        "{decision:?}"
    );

    set_stock(&sales, "shrink", 30).await;
    common::wait_for(Duration::from_secs(10), "the shrink to apply", || async {
        (total_stock(&sales.get("shrink").await.ok()?)? == 30).then_some(())
    })
    .await;
    assert_eq!(
        store
            .shard_stocks(&sale, 4)
            .await
            .unwrap()
            .iter()
            .sum::<i64>(),
        10
    );
    let api = common::ApiProcess::start(&ns, &db_url).await;
    let mut accepted = 0;
    for i in 0..40 {
        let (status, code) = api.buy("shrink", &format!("late-{i}")).await;
        match status {
            202 => accepted += 1,
            _ => assert_eq!(code, "SOLD_OUT", "shopper {i}"),
        }
    }
    assert_eq!(accepted, 10, "202s after the shrink: 30 - 20 sold");
}

/// A merchant shrinks a sale in the middle of a storm: the 202s never exceed
/// the stock, no order fails because of the shrink, and the database agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_during_a_storm_keeps_every_promise() {
    let (sales, ns, db_url, _operator) = live_sale_over("storm", 300, 4).await;
    let api = std::sync::Arc::new(common::ApiProcess::start(&ns, &db_url).await);
    let storm: Vec<_> = (0..600)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i * 5)).await;
                api.buy("storm", &format!("shopper-{i}")).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(600)).await;
    set_stock(&sales, "storm", 200).await;
    let mut accepted = 0;
    for answer in storm {
        let (status, code) = answer.await.unwrap();
        match status {
            202 => accepted += 1,
            _ => assert!(
                ["SOLD_OUT", "BUSY"].contains(&code.as_str()),
                "{status} {code}"
            ),
        }
    }
    let fs = common::wait_for(Duration::from_secs(20), "the shrink to settle", || async {
        let fs = sales.get("storm").await.ok()?;
        let total = total_stock(&fs)?;
        (total == 200 || condition(&fs, "Degraded")?.1 == "StockBelowSold").then_some(fs)
    })
    .await;
    let total = total_stock(&fs).unwrap();
    println!("storm: {accepted} accepted, stock {total} after the shrink to 200");
    assert!(accepted <= total, "{accepted} 202s for a stock of {total}");
    // The consumer pods persist every accepted order, none FAILED.
    let db = flashsale_workload::orders::connect(&db_url, 1)
        .await
        .unwrap();
    common::wait_for(Duration::from_secs(60), "every order persisted", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
            .fetch_one(&db)
            .await
            .ok()?;
        (n == accepted).then_some(())
    })
    .await;
    let (failed, sold, stock): (i64, i32, i32) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM orders WHERE status = 'FAILED'), sold, stock FROM sales",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(failed, 0, "no order failed because of the shrink");
    assert_eq!((i64::from(sold), i64::from(stock)), (accepted, total));
    let store = store().await;
    let sale = SaleRef::new(&ns, "storm").unwrap();
    assert_eq!(
        store
            .shard_stocks(&sale, 4)
            .await
            .unwrap()
            .iter()
            .sum::<i64>(),
        total - accepted,
        "Redis and the database agree on what is left"
    );
}

/// The sale's Secret is never written over a Secret of that name it does
/// not own: the sale says so in its status and the Secret stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_sale_does_not_own_is_left_alone() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let theirs: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "taken-workload"},
        "stringData": {"DATABASE_URL": "somebody else's"},
    }))
    .unwrap();
    secrets
        .create(&kube::api::PostParams::default(), &theirs)
        .await
        .unwrap();
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "taken");
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let manifest = common::manifest("taken", &ns, 2, 600);
    let fs: FlashSale = serde_json::from_value(manifest).unwrap();
    sales
        .create(&kube::api::PostParams::default(), &fs)
        .await
        .unwrap();
    common::wait_for(
        Duration::from_secs(20),
        "the conflict in the status",
        || async {
            let fs = sales.get("taken").await.ok()?;
            (condition(&fs, "Degraded")? == ("True".into(), "SecretConflict".into())).then_some(())
        },
    )
    .await;
    let secret = secrets.get("taken-workload").await.unwrap();
    let data = secret.data.unwrap();
    assert_eq!(
        data["DATABASE_URL"].0,
        b"somebody else's".to_vec(),
        "the Secret is as it was"
    );
    assert!(secret.metadata.owner_references.is_none());
}

/// A storm moves the stock and the lag on every pass; the status is written
/// at most once per poll interval besides its transitions (each write is a
/// watch event, and another reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_writes_the_status_at_most_once_per_poll_interval() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let (sales, ns, db_url, _operator) = live_sale("written", 100_000).await;
    let api = std::sync::Arc::new(common::ApiProcess::start(&ns, &db_url).await);
    // Every version of the resource: (resourceVersion, state, units sold).
    type Seen = (String, Option<String>, Option<i64>);
    let versions = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Seen>::new()));
    let watch = {
        let versions = versions.clone();
        let stream = watcher(
            sales.clone(),
            watcher::Config::default().fields("metadata.name=written"),
        )
        .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(Ok(fs)) = stream.next().await {
                let status = fs.status.unwrap_or_default();
                let state = status.state.map(|s| format!("{s:?}"));
                let sold = status.stock.map(|s| s.sold);
                let version = fs.metadata.resource_version.unwrap_or_default();
                versions.lock().unwrap().push((version, state, sold));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = versions.lock().unwrap().len();
    // The poll interval (the manifest's default, 2 s) bounds the writes.
    let poll_every = Duration::from_secs(2);
    let storm_for = Duration::from_secs(10);
    let until = std::time::Instant::now() + storm_for;
    let shoppers: Vec<_> = (0..8)
        .map(|w| {
            let api = api.clone();
            tokio::spawn(async move {
                let (mut sent, mut accepted) = (0_i64, 0_i64);
                while std::time::Instant::now() < until {
                    sent += 1;
                    let (status, detail) = api.buy("written", &format!("w{w}-{sent}")).await;
                    assert_eq!(status, 202, "one unit of 100,000 refused: {detail}");
                    accepted += 1;
                }
                (sent, accepted)
            })
        })
        .collect();
    let (mut purchases, mut accepted) = (0, 0);
    for s in shoppers {
        let (sent, ok) = s.await.unwrap();
        purchases += sent;
        accepted += ok;
    }
    let during: Vec<Seen> = versions.lock().unwrap()[before..].to_vec();
    // Once the storm is over, the status tells every unit it sold.
    common::wait_for(
        poll_every * 3,
        "the status to count every accepted unit",
        || async {
            let sold = sales.get("written").await.ok()?.status?.stock?.sold;
            (sold == accepted).then_some(())
        },
    )
    .await;
    watch.abort();
    let transitions = during.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let periods = (storm_for.as_secs() / poll_every.as_secs()) as usize;
    let limit = (periods + transitions) * 2;
    // Counters moved all through the storm: written more than once, at
    // least every other poll interval.
    let counts: std::collections::BTreeSet<i64> = during.iter().filter_map(|s| s.2).collect();
    println!(
        "a {storm_for:?} storm ({purchases} purchases, {accepted} accepted): the FlashSale changed {} times ({transitions} transitions; at most {limit}), {} distinct sold counts",
        during.len(),
        counts.len()
    );
    assert!(during.len() <= limit, "{} writes: {during:?}", during.len());
    assert!(
        counts.len() >= periods / 2,
        "the status was written {} times with a new count during a {storm_for:?} storm: {during:?}",
        counts.len()
    );
}
