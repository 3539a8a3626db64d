//! Redis is the sale's working memory, not its record: a live storm loses it
//! (the node SIGKILLed and restarted empty; a Cluster master SIGKILLed and
//! its replica promoted; a Sentinel-watched primary SIGKILLed and its replica
//! promoted by the Sentinels) and still every 202 is an order, no shopper goes
//! above the limit, an idempotent retry across the loss returns the first
//! order, and the sale sells through to exactly its stock (I1–I6). With
//! `spec.degradation.redisDown: database`, a node kept down for 30 s: the
//! sale keeps selling through PostgreSQL meanwhile, then through Redis.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_operator::steps::outage::MAX_BACKOFF;
use flashsale_testkit as stack;
use flashsale_testkit::RedisRestart as Restart;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::domain::shard::home_shard;
use flashsale_workload::redis::RedisTarget;
use flashsale_workload::redis::keys::ShardKeys;
use kube::Api;
use tokio::sync::Mutex;

const SHARDS: u32 = 4;

/// The tests that kill the stack's one Redis node take turns (the test
/// harness runs a file's tests at once).
static REDIS_NODE: Mutex<()> = Mutex::const_new(());

/// One loss: where Redis is, and what is done to it.
struct Loss<'a> {
    /// The Redis URL the operator and the API use.
    redis: &'a str,
    /// The sale's name.
    name: &'a str,
    /// Units for sale.
    stock: i64,
    /// Shoppers in the storm, and the time between two arrivals.
    shoppers: u64,
    spacing: Duration,
    /// A failover to an asynchronous replica can drop the last writes
    /// before it is noticed; units sold twice then are refused by the
    /// database (FAILED with a reason), never persisted twice.
    writes_may_be_lost: bool,
    /// `spec.degradation.redisDown: database`, Redis kept down this long:
    /// purchases must keep being accepted through PostgreSQL meanwhile.
    down_for: Option<Duration>,
}

impl<'a> Loss<'a> {
    /// 120 shoppers arriving 15 ms apart on 200 units, the sale refusing
    /// while Redis is lost.
    fn storm(redis: &'a str, name: &'a str, writes_may_be_lost: bool) -> Self {
        Self {
            redis,
            name,
            stock: 200,
            shoppers: 120,
            spacing: Duration::from_millis(15),
            writes_may_be_lost,
            down_for: None,
        }
    }
}

/// SIGKILLs the stack's Redis process `name` and waits until it is gone.
fn kill(name: &str) {
    assert!(stack::kill_stack_process(name), "kill {name}");
}

/// What the storm's shoppers were told, first answers and retries.
#[derive(Default)]
struct Told {
    /// Shopper -> the order id of their 202 (the first, and every retry's).
    orders: HashMap<String, Vec<String>>,
    /// When each purchase answered 202 was asked, for a shopper homed in
    /// shard 0 (the shard every test loses).
    shard0_accepted_at: Vec<Instant>,
    /// When each purchase answered 202 was asked, and when it was answered.
    accepted: Vec<(Instant, Instant)>,
}

/// One shopper buying one unit with an `Idempotency-Key`, retrying the
/// same key after a 503 as real clients do, until a 202 or a 409.
async fn shopper(api: Arc<common::ApiProcess>, told: Arc<Mutex<Told>>, sale: String, who: String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // When the purchase was asked, not answered: one decided just before
        // the loss can still be answered 202 after it (its confirmation is
        // left to the consumer), which says nothing of Redis being back.
        let asked = Instant::now();
        let (status, detail) = api.buy_with_key(&sale, &who, Some(&who)).await;
        match status {
            202 => {
                let mut told = told.lock().await;
                told.accepted.push((asked, Instant::now()));
                if home_shard(&who, SHARDS) == 0 {
                    told.shard0_accepted_at.push(asked);
                }
                told.orders.entry(who).or_default().push(detail);
                return;
            }
            409 => return,
            503 => {
                assert!(Instant::now() < deadline, "{who} still refused: {detail}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => panic!("{who}: {status} {detail}"),
        }
    }
}

/// The storm, the loss in its middle, and the checks. `lose` kills Redis
/// and returns the guard that brings the killed process back.
async fn storm_through_a_loss(loss: Loss<'_>, lose: impl FnOnce(&SaleRef) -> Restart) {
    let Loss {
        redis,
        name,
        stock,
        writes_may_be_lost,
        ..
    } = loss;
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start_on(&ns, &db_url, name, redis);
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest(name, &ns, 2, 600);
    manifest["spec"]["stock"] = serde_json::json!(stock);
    manifest["spec"]["purchaseLimit"] = serde_json::json!(1);
    manifest["spec"]["sharding"] = serde_json::json!({ "shards": SHARDS });
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    manifest["spec"]["consumers"] = serde_json::json!({"minReplicas": 1, "maxReplicas": 2});
    if loss.down_for.is_some() {
        manifest["spec"]["degradation"] = serde_json::json!({"redisDown": "database"});
    }
    common::create_live(&sales, manifest).await;
    let api = Arc::new(common::ApiProcess::start_on(&ns, &db_url, redis).await);
    let sale = SaleRef::new(&ns, name).unwrap();
    let told = Arc::new(Mutex::new(Told::default()));

    // Redis is lost once a third of the storm was accepted.
    let storm: Vec<_> = (0..loss.shoppers)
        .map(|i| {
            let (api, told) = (api.clone(), told.clone());
            let who = format!("shopper-{i}");
            let name = name.to_string();
            let arrives = loss.spacing * i as u32;
            tokio::spawn(async move {
                tokio::time::sleep(arrives).await;
                shopper(api, told, name, who).await
            })
        })
        .collect();
    let third = loss.shoppers as usize / 3;
    common::wait_for(Duration::from_secs(60), "a third accepted", || async {
        (told.lock().await.orders.len() >= third).then_some(())
    })
    .await;
    // The instant after the loss: only purchases asked after it count.
    let restart = lose(&sale);
    let lost_at = Instant::now();
    if let Some(down_for) = loss.down_for {
        tokio::time::sleep(down_for).await;
        let through_database = told
            .lock()
            .await
            .accepted
            .iter()
            .filter(|(asked, _)| *asked > lost_at)
            .count();
        println!(
            "{name}: {through_database} purchases accepted through PostgreSQL in the {} s Redis was down",
            down_for.as_secs()
        );
        assert!(through_database > 0, "nothing sold while Redis was down");
        restart.now();
        let back = Instant::now();
        let recovered =
            common::wait_for(Duration::from_secs(60), "sold through Redis again", || {
                let db_url = db_url.clone();
                async move { recovered(&db_url).await.then(Instant::now) }
            })
            .await;
        println!(
            "{name}: Redis back, the sale reloaded and selling through it {:.1} s later",
            (recovered - back).as_secs_f64()
        );
    }
    for shopper in storm {
        shopper.await.unwrap();
    }
    // Shard 0 sells again: the first 202 there after the loss.
    let mut probes = (0..)
        .map(|i| format!("probe-{i}"))
        .filter(|p| home_shard(p, SHARDS) == 0);
    let recovered = common::wait_for(Duration::from_secs(60), "shard 0 selling again", || {
        let probe = probes.next().unwrap();
        let (api, told) = (api.clone(), told.clone());
        async move {
            let seen = told
                .lock()
                .await
                .shard0_accepted_at
                .iter()
                .copied()
                .filter(|t| *t > lost_at)
                .min();
            if seen.is_some() {
                return seen;
            }
            let (status, order) = api.buy_with_key(name, &probe, Some(&probe)).await;
            if status != 202 {
                return None;
            }
            told.lock().await.orders.insert(probe, vec![order]);
            Some(Instant::now())
        }
    })
    .await;
    println!(
        "{name}: Redis lost, shard 0 sold again {:.1} s later",
        (recovered - lost_at).as_secs_f64()
    );
    drop(restart);

    // Every shopper's retry with their key returns their first order.
    let first: HashMap<String, String> = told
        .lock()
        .await
        .orders
        .iter()
        .map(|(who, ids)| (who.clone(), ids[0].clone()))
        .collect();
    // (A loss noticed only now — a consumer meeting a write the failover
    // dropped — fences the sale until it is reloaded: 503, then the answer.)
    for (who, id) in &first {
        let again = common::wait_for(Duration::from_secs(60), "a retry decided", || async {
            let answer = api.buy_with_key(name, who, Some(who)).await;
            if answer.0 == 503 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return None;
            }
            Some(answer)
        })
        .await;
        assert_eq!(again, (202, id.clone()), "{who}'s retry across the loss");
    }
    // Fresh shoppers buy the rest: exactly the stock sells (I5).
    let mut more = 0;
    for i in 0.. {
        let who = format!("late-{i}");
        let (status, detail) = api.buy_with_key(name, &who, Some(&who)).await;
        match (status, detail.as_str()) {
            (202, _) => more += 1,
            (409, "SOLD_OUT") => break,
            (503, _) => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("{who}: {other:?}"),
        }
        assert!(i < 1000, "never sold out");
    }
    let accepted = first.len() as i64 + more;
    println!(
        "{name}: {} accepted in the storm, {more} after",
        first.len()
    );
    if !writes_may_be_lost {
        assert_eq!(accepted, stock, "202s: exactly the stock (I1, I5)");
    }
    if loss.down_for.is_some() {
        assert!(
            more > 0,
            "nothing left to sell through Redis after the recovery"
        );
    }

    // The consumers persist every accepted order; the database and Redis agree.
    let db = flashsale_workload::orders::connect(&db_url, 2)
        .await
        .unwrap();
    common::wait_for(Duration::from_secs(90), "every 202 persisted", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
            .fetch_one(&db)
            .await
            .ok()?;
        (n == accepted).then_some(())
    })
    .await;
    let persisted: Vec<String> = sqlx::query_scalar("SELECT id::text FROM orders")
        .fetch_all(&db)
        .await
        .unwrap();
    for id in first.values() {
        assert!(
            persisted.contains(id),
            "order {id} was answered 202 and is missing (I3)"
        );
    }
    let (sold, stored_stock, failed, over_limit): (i32, i32, i64, i64) = sqlx::query_as(
        "SELECT s.sold, s.stock,
                (SELECT count(*) FROM orders WHERE status = 'FAILED'),
                (SELECT count(*) FROM shopper_units WHERE units > 1)
         FROM sales s",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(
        (sold, stored_stock),
        (stock as i32, stock as i32),
        "I1: sold out exactly"
    );
    if writes_may_be_lost {
        assert_eq!(accepted - failed, stock, "every 202 persisted or FAILED");
        let unexplained: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM orders WHERE status = 'FAILED' AND failure_reason IS NULL",
        )
        .fetch_one(&db)
        .await
        .unwrap();
        assert_eq!(unexplained, 0, "a FAILED order says why");
        println!("{name}: {failed} orders FAILED by the database after lost writes");
    } else {
        assert_eq!(failed, 0, "no accepted order was refused by the database");
    }
    assert_eq!(over_limit, 0, "I2");
    let store = flashsale_workload::redis::store::SaleStore::new(
        flashsale_workload::redis::RedisConn::connect(&redis.parse().unwrap())
            .await
            .unwrap(),
    );
    let left: i64 = store
        .shard_stocks(&sale, SHARDS)
        .await
        .unwrap()
        .iter()
        .sum();
    assert_eq!(left, 0, "I6: Redis agrees nothing is left");
    // The operator's own Redis connection is back by its next attempt
    // (within 1.5 × its longest backoff): the status no longer says Degraded.
    let status = || async { sales.get(name).await.unwrap().status.unwrap() };
    let degraded = |status: &flashsale_operator::model::crd::FlashSaleStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .cloned()
    };
    let bound = MAX_BACKOFF.mul_f64(1.5) + Duration::from_secs(5);
    let deadline = Instant::now() + bound;
    let last = loop {
        let now = status().await;
        let recovered = degraded(&now).is_some_and(|c| c.status == "False");
        if recovered || Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_ne!(last.state, Some(SaleState::Failed));
    assert_eq!(
        degraded(&last).map(|c| c.status),
        Some("False".to_string()),
        "recovered within {} s: {:?}",
        bound.as_secs(),
        degraded(&last)
    );
}

/// Whether the sale sells through Redis again: its state reloaded and
/// opened, nothing through the database.
async fn recovered(db_url: &str) -> bool {
    let Ok(db) = flashsale_workload::orders::connect(db_url, 1).await else {
        return false;
    };
    sqlx::query_scalar(
        "SELECT opened_at IS NOT NULL AND redis_lost_at IS NULL AND selling_through_database_at IS NULL FROM sales",
    )
    .fetch_one(&db)
    .await
    .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_survives_its_redis_node_restarted_empty() {
    let _node = REDIS_NODE.lock().await;
    let redis = stack::redis_url();
    storm_through_a_loss(Loss::storm(&redis, "node-loss", false), |_| {
        kill("redis");
        let restart = Restart("the Redis node", "redis".into());
        restart.now();
        restart
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_survives_a_cluster_master_failing_over() {
    let seeds: Vec<String> = stack::redis_cluster_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect();
    let redis = format!("redis-cluster://{}", seeds.join(","));
    storm_through_a_loss(Loss::storm(&redis, "master-loss", true), |sale| {
        // The master that holds shard 0.
        let cli = |args: &[&str]| {
            let out = Command::new("redis-cli")
                .args(["-p", "17001"])
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let slot: u16 = cli(&["cluster", "keyslot", &ShardKeys::new(sale, 0).meta])
            .trim()
            .parse()
            .unwrap();
        let port = stack::cluster_master_port(&cli(&["cluster", "nodes"]), slot)
            .expect("a master for shard 0");
        let name = format!("redis-cluster-{port}");
        kill(&name);
        Restart("the cluster master", name)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_survives_a_sentinel_failover() {
    let url = stack::redis_sentinel_url();
    storm_through_a_loss(Loss::storm(&url, "sentinel-loss", true), |_| {
        let name = format!("redis-replicated-{}", sentinel_primary_port(&url));
        kill(&name);
        Restart("the Sentinel primary", name)
    })
    .await;
}

/// Issue 37: a sale of 500 with `redisDown: database`, its Redis node
/// SIGKILLed mid-storm and kept down for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_sells_through_postgresql_while_its_redis_node_is_down() {
    let _node = REDIS_NODE.lock().await;
    let redis = stack::redis_url();
    let loss = Loss {
        stock: 500,
        shoppers: 300,
        spacing: Duration::from_millis(100),
        down_for: Some(Duration::from_secs(30)),
        ..Loss::storm(&redis, "node-down", false)
    };
    storm_through_a_loss(loss, |_| {
        kill("redis");
        Restart("the Redis node", "redis".into())
    })
    .await;
}

/// The port of the primary the stack's Sentinels (`url`) name now.
fn sentinel_primary_port(url: &str) -> u16 {
    let Ok(RedisTarget::Sentinel { sentinels, service }) = url.parse() else {
        panic!("{url} is not a Sentinel URL");
    };
    let mut sentinel = redis::Client::open(sentinels[0].as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("Sentinel {}: {e}", sentinels[0]));
    let (_host, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(&service)
        .query(&mut sentinel)
        .expect("the Sentinels name a primary");
    port
}
