//! The purchase path against real Redis (one node and the 3-master cluster),
//! real Kafka and real PostgreSQL, through real HTTP requests.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use common::{
    Answer, ApiOptions, LiveSale, SaleSpec, StormResult, TestApi, create_sale, fresh_database,
    read_topic, store, storm,
};
use flashsale_testkit as stack;
use flashsale_workload::api::jwks::JwksSource;
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::redis::RedisTarget;
use flashsale_workload::redis::store::SaleStore;
use uuid::Uuid;

async fn remaining(store: &SaleStore, config: &SaleConfig) -> i64 {
    store
        .shard_stocks(&config.sale, config.shards)
        .await
        .unwrap()
        .iter()
        .sum()
}

/// A warmed live sale and an API serving its namespace.
async fn live_sale(
    target: RedisTarget,
    stock: i64,
    shards: u32,
    limit: i64,
) -> (TestApi, SaleConfig, SaleStore) {
    live_sale_with(target, stock, shards, limit, false).await
}

/// A live sale whose API takes HS256 tokens (`jwt`) or the development
/// identity header.
async fn live_sale_with(
    target: RedisTarget,
    stock: i64,
    shards: u32,
    limit: i64,
    jwt: bool,
) -> (TestApi, SaleConfig, SaleStore) {
    let db = fresh_database().await;
    let namespace = stack::unique_name("ns");
    let config = create_sale(&db, &SaleSpec::live(&namespace, stock, shards, limit)).await;
    let store = store(&target).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    let api = TestApi::start(ApiOptions {
        jwt,
        ..ApiOptions::new(&namespace, target, &db)
    })
    .await;
    api.wait_for_sale(&config.sale).await;
    (api, config, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_code_comes_from_a_real_request() {
    let target = common::redis_node();
    let db = fresh_database().await;
    let namespace = stack::unique_name("ns");
    let store = store(&target).await;
    let now = Utc::now();
    let minutes = chrono::Duration::minutes;

    let live = create_sale(&db, &SaleSpec::live(&namespace, 1, 2, 1)).await;
    store
        .warm(&live, 0, false, &live.id.to_string())
        .await
        .unwrap();
    let cold = create_sale(&db, &SaleSpec::live(&namespace, 5, 1, 1)).await;
    let future = create_sale(
        &db,
        &SaleSpec {
            start: now + minutes(5),
            end: now + minutes(10),
            ..SaleSpec::live(&namespace, 5, 1, 1)
        },
    )
    .await;
    store
        .warm(&future, 0, false, &future.id.to_string())
        .await
        .unwrap();
    let past = create_sale(
        &db,
        &SaleSpec {
            start: now - minutes(10),
            end: now - minutes(5),
            ..SaleSpec::live(&namespace, 5, 1, 1)
        },
    )
    .await;
    store
        .warm(&past, 0, false, &past.id.to_string())
        .await
        .unwrap();
    let paused = create_sale(&db, &SaleSpec::live(&namespace, 5, 1, 1)).await;
    store
        .warm(&paused, 0, true, &paused.id.to_string())
        .await
        .unwrap();
    let busy = create_sale(&db, &SaleSpec::live(&namespace, 5, 1, 1)).await;
    store
        .warm(&busy, 0, false, &busy.id.to_string())
        .await
        .unwrap();
    store
        .write_meta(&busy.sale, busy.shards, &busy.meta(true, false, true))
        .await
        .unwrap();

    let api = TestApi::start(ApiOptions::new(&namespace, target.clone(), &db)).await;
    for sale in [&live, &cold, &future, &past, &paused, &busy] {
        api.wait_for_sale(&sale.sale).await;
    }
    let expect = |answer: Answer, status: u16, code: &str| {
        assert_eq!((answer.status, answer.code()), (status, code), "{answer:?}");
        answer
    };

    let unknown =
        flashsale_workload::domain::sale::SaleRef::new(&namespace, "no-such-sale").unwrap();
    expect(api.buy(&unknown, "alice", 1).await, 404, "NOT_FOUND");
    expect(api.buy(&cold.sale, "alice", 1).await, 503, "NOT_WARMED");
    expect(api.buy(&future.sale, "alice", 1).await, 409, "NOT_STARTED");
    expect(api.buy(&past.sale, "alice", 1).await, 409, "ENDED");
    expect(api.buy(&paused.sale, "alice", 1).await, 409, "PAUSED");
    let busy_answer = expect(api.buy(&busy.sale, "alice", 1).await, 503, "BUSY");
    assert!(busy_answer.retry_after.is_some());
    expect(api.buy(&live.sale, "alice", 2).await, 409, "LIMIT_EXCEEDED");
    let accepted = expect(api.buy(&live.sale, "alice", 1).await, 202, "");
    assert_eq!(accepted.body["status"], "PENDING");
    assert_eq!(
        accepted.location,
        Some(format!("/v1/orders/{}", accepted.order_id().unwrap()))
    );
    expect(api.buy(&live.sale, "bob", 1).await, 409, "SOLD_OUT");

    // Sold out is told before anything else is looked at (identity, body):
    // it costs nothing and says what the public status says.
    let sold_out_url = format!("{}/v1/sales/{}/orders", api.url, live.sale.name);
    let anonymous = api.client.post(&sold_out_url).send().await.unwrap();
    expect(Answer::read(anonymous).await, 409, "SOLD_OUT");

    let url = format!("{}/v1/sales/{}/orders", api.url, paused.sale.name);
    let bad_json = api
        .client
        .post(&url)
        .header("x-user-id", "carol")
        .body("{quantity:")
        .send()
        .await
        .unwrap();
    expect(Answer::read(bad_json).await, 400, "INVALID_REQUEST");
    let anonymous = api
        .client
        .post(&url)
        .json(&serde_json::json!({"quantity": 1}))
        .send()
        .await
        .unwrap();
    expect(Answer::read(anonymous).await, 401, "UNAUTHENTICATED");

    // Sale info is public and cacheable.
    let info = api
        .client
        .get(format!("{}/v1/sales/{}", api.url, live.sale.name))
        .send()
        .await
        .unwrap();
    assert_eq!(info.headers()["cache-control"], "public, max-age=1");
    let info: serde_json::Value = info.json().await.unwrap();
    assert_eq!(info["sku"], "SKU-TEST");
    assert_eq!(info["purchaseLimit"], 1);
    // The public port serves the shopper routes and OpenAPI only; probes and
    // metrics are on the internal port (readiness once its first check ran).
    let get = |url: String| {
        let client = api.client.clone();
        async move { client.get(url).send().await.unwrap().status() }
    };
    assert_eq!(get(format!("{}/openapi.json", api.url)).await, 200);
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            get(format!("{}{path}", api.url)).await,
            404,
            "public {path}"
        );
    }
    for path in ["/healthz", "/metrics"] {
        assert_eq!(
            get(format!("{}{path}", api.internal_url)).await,
            200,
            "internal {path}"
        );
    }
    let mut ready = get(format!("{}/readyz", api.internal_url)).await;
    for _ in 0..50 {
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ready = get(format!("{}/readyz", api.internal_url)).await;
    }
    assert_eq!(ready, 200, "internal /readyz");
    api.stop().await;

    // RATE_LIMITED: one request per second per shopper, a burst of five.
    let limited_api = TestApi::start(ApiOptions {
        per_shopper_per_sec: 1,
        ..ApiOptions::new(&namespace, target.clone(), &db)
    })
    .await;
    limited_api.wait_for_sale(&paused.sale).await;
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(limited_api.buy(&paused.sale, "dave", 1).await);
    }
    let limited = expect(answers.pop().unwrap(), 429, "RATE_LIMITED");
    assert!(limited.retry_after.is_some(), "{limited:?}");
    limited_api.stop().await;

    // UNAVAILABLE: Kafka unreachable; the reservation is given back.
    let before = remaining(&store, &busy).await;
    let open = create_sale(&db, &SaleSpec::live(&namespace, 3, 1, 1)).await;
    store
        .warm(&open, 0, false, &open.id.to_string())
        .await
        .unwrap();
    let dead_kafka_api = TestApi::start(ApiOptions {
        kafka: "127.0.0.1:1".into(),
        purchase_budget: PurchaseBudget::new(Duration::from_millis(500)).unwrap(),
        ..ApiOptions::new(&namespace, target.clone(), &db)
    })
    .await;
    dead_kafka_api.wait_for_sale(&open.sale).await;
    let unavailable = expect(
        dead_kafka_api.buy(&open.sale, "erin", 1).await,
        503,
        "UNAVAILABLE",
    );
    assert!(unavailable.retry_after.is_some());
    assert_eq!(
        remaining(&store, &open).await,
        3,
        "the failed purchase's unit is back"
    );
    assert_eq!(remaining(&store, &busy).await, before);
    dead_kafka_api.stop().await;
}

/// 5,000 concurrent purchases by 2,000 shoppers for 300 units over 8 shards,
/// limit 2, quantities 1-2.
async fn storm_accepts_exactly_the_stock(target: RedisTarget) {
    // 5,000 purchases at once, all in flight: this test is about exact stock
    // under concurrency; shedding past the in-flight cap has its own test
    // (tests/transport.rs).
    let LiveSale {
        api, config, store, ..
    } = LiveSale::start_with(target, 300, 8, 2, |o| o.transport.max_in_flight = 100_000).await;
    let StormResult { accepted, refusals } = storm(&api, &config.sale, 5000, 2000).await;
    let units: i64 = accepted.values().map(|(_, q)| q).sum();
    assert_eq!(
        units, 300,
        "I1 and I5: exactly the stock is accepted; refusals {refusals:?}"
    );
    let mut per_shopper: HashMap<&str, i64> = HashMap::new();
    for (shopper, quantity) in accepted.values() {
        *per_shopper.entry(shopper).or_default() += quantity;
    }
    assert!(
        per_shopper.values().all(|&u| u <= 2),
        "I2: no shopper above the limit"
    );
    for code in refusals.keys() {
        // A 503 (a Redis reply later than its 2 s timeout under a loaded
        // machine) was retried by its shopper until it got a decision.
        assert!(
            code == "409 SOLD_OUT" || code == "409 LIMIT_EXCEEDED",
            "unexpected refusal {code}: {refusals:?}"
        );
    }
    assert_eq!(remaining(&store, &config).await, 0, "every shard is empty");

    // Exactly one message per accepted order, none for a refused one.
    let messages = read_topic(&config.sale);
    let ids: HashSet<Uuid> = messages.iter().map(|m| m.order_id).collect();
    assert_eq!(ids.len(), messages.len(), "no duplicate messages");
    assert_eq!(
        ids,
        accepted.keys().copied().collect::<HashSet<_>>(),
        "I3 and I4 at intake"
    );
    for m in &messages {
        assert_eq!(m.quantity, accepted[&m.order_id].1);
        assert_eq!(m.shopper, accepted[&m.order_id].0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_on_one_redis_node() {
    storm_accepts_exactly_the_stock(common::redis_node()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_on_the_redis_cluster() {
    storm_accepts_exactly_the_stock(common::redis_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_4xx_and_change_nothing() {
    // Shoppers with tokens: the development identity is off with JWT keys.
    let (api, config, store) = live_sale_with(common::redis_node(), 50, 4, 2, true).await;
    let owned = api.buy(&config.sale, "victim", 1).await;
    let victim_order = owned.order_id().unwrap();
    let before = remaining(&store, &config).await;
    let url = format!("{}/v1/sales/{}/orders", api.url, config.sale.name);
    let token = common::token;
    let huge = "x".repeat(4096);
    let mut codes: HashMap<(usize, u16, String), usize> = HashMap::new();
    for i in 0..2000 {
        let kind = i % 20;
        let c = &api.client;
        let user = format!("hostile-{i}");
        let request = match kind {
            0 => api.identify(c.post(&url), &user).body("{\"quantity\":"),
            1 => api
                .identify(c.post(&url), &user)
                .body(format!("{{\"quantity\":1,\"pad\":\"{huge}\"}}")),
            2 => api
                .identify(c.post(&url), &user)
                .json(&serde_json::json!({"quantity": -3})),
            3 => api
                .identify(c.post(&url), &user)
                .json(&serde_json::json!({"quantity": 1_000_000_000_000i64})),
            4 => api
                .identify(c.post(&url), &user)
                .json(&serde_json::json!({"quantity": "2"})),
            5 => c
                .post(&url)
                .bearer_auth(token(&user, -600, common::JWT_SECRET)),
            6 => c
                .post(&url)
                .bearer_auth(token(&user, 600, b"not-our-secret")),
            7 => c.post(&url).bearer_auth("not.a.jwt"),
            8 => c.post(&url).json(&serde_json::json!({"quantity": 1})),
            9 => api.identify(
                c.post(format!("{}/v1/sales/no-such-sale-{i}/orders", api.url)),
                &user,
            ),
            10 => api.identify(
                c.get(format!("{}/v1/orders/{victim_order}", api.url)),
                &user,
            ),
            11 => api.identify(
                c.get(format!("{}/v1/orders/not-a-uuid-{i}", api.url)),
                &user,
            ),
            12 => api
                .identify(c.post(&url), &user)
                .json(&serde_json::json!({"quantity": 3})),
            13 => api
                .identify(c.put(&url), &user)
                .json(&serde_json::json!({"quantity": 1})),
            14 => api
                .identify(c.post(&url), &user)
                .body(vec![0xff, 0xfe, 0x00]),
            // Bodies serde alone would read as a purchase.
            15 => api.identify(c.post(&url), &user).body("[]"),
            16 => api.identify(c.post(&url), &user).body("[5]"),
            17 => api.identify(c.post(&url), &user).body(r#"{"quantiy": 5}"#),
            18 => api.identify(c.post(&url), &user).body("null"),
            _ => api
                .identify(
                    c.post(format!("{}/v1/orders/{victim_order}/cancel", api.url)),
                    "victim",
                )
                .body(r#"{"reason": "changed my mind"}"#),
        };
        let answer = Answer::read(request.send().await.unwrap()).await;
        assert!(answer.status < 500, "request kind {kind} got {answer:?}");
        *codes
            .entry((kind, answer.status, answer.code().to_string()))
            .or_default() += 1;
    }
    let expected = [
        (0, 400, "INVALID_REQUEST"),
        (1, 413, "PAYLOAD_TOO_LARGE"),
        (2, 400, "INVALID_REQUEST"),
        (3, 400, "INVALID_REQUEST"),
        (4, 400, "INVALID_REQUEST"),
        (5, 401, "UNAUTHENTICATED"),
        (6, 401, "UNAUTHENTICATED"),
        (7, 401, "UNAUTHENTICATED"),
        (8, 401, "UNAUTHENTICATED"),
        (9, 404, "NOT_FOUND"),
        (10, 404, "NOT_FOUND"),
        (11, 404, "NOT_FOUND"),
        (12, 409, "LIMIT_EXCEEDED"),
        (13, 405, "METHOD_NOT_ALLOWED"),
        (14, 400, "INVALID_REQUEST"),
        (15, 400, "INVALID_REQUEST"),
        (16, 400, "INVALID_REQUEST"),
        (17, 400, "INVALID_REQUEST"),
        (18, 400, "INVALID_REQUEST"),
        (19, 400, "INVALID_REQUEST"),
    ];
    for (kind, status, code) in expected {
        let count = codes
            .get(&(kind, status, code.to_string()))
            .copied()
            .unwrap_or_default();
        assert!(
            count > 0,
            "kind {kind} never answered {status} {code}: {codes:?}"
        );
    }
    assert_eq!(
        codes.len(),
        expected.len(),
        "each kind has exactly one answer: {codes:?}"
    );
    assert_eq!(remaining(&store, &config).await, before, "no stock changed");
    // The refusal names what was wrong.
    let misspelt = api
        .identify(api.client.post(&url), "speller")
        .body(r#"{"quantiy": 5}"#)
        .send()
        .await
        .unwrap();
    let misspelt = Answer::read(misspelt).await;
    assert!(
        misspelt.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("quantiy")),
        "{misspelt:?}"
    );
    // The victim still sees their own order, pending.
    let own = api.order(victim_order, "victim").await;
    assert_eq!(
        (own.status, own.body["status"].as_str()),
        (200, Some("PENDING")),
        "{own:?}"
    );
}

/// Made-up order ids (not UUIDv7, or minted outside every sale's window)
/// are answered 404 without a query: with the database refusing every
/// connection they still are, while a plausible id needs it (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_order_ids_are_answered_without_the_database() {
    let target = common::redis_node();
    let db = fresh_database().await;
    let name = db.connect_options().get_database().unwrap().to_string();
    let namespace = stack::unique_name("ns");
    let config = create_sale(&db, &SaleSpec::live(&namespace, 10, 2, 2)).await;
    store(&target)
        .await
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    let api = TestApi::start(ApiOptions::new(&namespace, target, &db)).await;
    api.wait_for_sale(&config.sale).await;
    let order = api.buy(&config.sale, "ann", 1).await.order_id().unwrap();
    assert_eq!(api.order(order, "ann").await.status, 200);

    let admin = sqlx::PgPool::connect(&stack::database_url()).await.unwrap();
    let allow = |on: bool| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS {on}"
        )))
    };
    allow(false).execute(&admin).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    let long_ago = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        1_000_000_000,
        0,
    ));
    for (what, answer) in [
        ("a v4 id", api.order(Uuid::new_v4(), "ann").await),
        ("a v7 id of 2001", api.order(long_ago, "ann").await),
        (
            "paying a v4 id",
            api.order_action(Uuid::new_v4(), "ann", "pay").await,
        ),
        (
            "cancelling a v7 id of 2001",
            api.order_action(long_ago, "ann", "cancel").await,
        ),
    ] {
        assert_eq!(
            (answer.status, answer.code()),
            (404, "NOT_FOUND"),
            "{what}: {answer:?}"
        );
    }
    let plausible = api.order(Uuid::now_v7(), "ann").await;
    allow(true).execute(&admin).await.unwrap();
    assert_eq!(
        (plausible.status, plausible.code()),
        (503, "UNAVAILABLE"),
        "an id minted in the window needs the database: {plausible:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_returns_the_first_answer() {
    let (api, config, store) = live_sale(common::redis_cluster(), 10, 3, 2).await;
    let url = format!("{}/v1/sales/{}/orders", api.url, config.sale.name);
    let send = |key: &'static str| {
        api.client
            .post(&url)
            .header("x-user-id", "frank")
            .header("idempotency-key", key)
            .json(&serde_json::json!({"quantity": 1}))
            .send()
    };
    let first = Answer::read(send("k1").await.unwrap()).await;
    let again = Answer::read(send("k1").await.unwrap()).await;
    assert_eq!(first.status, 202);
    assert_eq!(again.status, 202);
    assert_eq!(
        first.order_id(),
        again.order_id(),
        "a retry gets the first order"
    );
    let other = Answer::read(send("k2").await.unwrap()).await;
    assert_ne!(other.order_id(), first.order_id());
    assert_eq!(remaining(&store, &config).await, 8, "two orders, not three");
    assert_eq!(read_topic(&config.sale).len(), 2, "one message per order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_moves_to_a_dry_shard_and_never_strands() {
    // 8 units over 8 shards, one shopper per unit: most shoppers' home shards
    // run dry and borrow; all 8 units still sell, then SOLD_OUT.
    let (api, config, store) = live_sale(common::redis_cluster(), 8, 8, 1).await;
    let mut accepted = 0;
    let mut sold_out = 0;
    for i in 0..20 {
        let answer = api.buy(&config.sale, &format!("s{i}"), 1).await;
        match (answer.status, answer.code()) {
            (202, _) => accepted += 1,
            (409, "SOLD_OUT") => sold_out += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((accepted, sold_out), (8, 12));
    assert_eq!(remaining(&store, &config).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_and_paths_add_no_metric_series() {
    let (api, config, _store) = live_sale(common::redis_node(), 10, 1, 2).await;
    let metrics = || async {
        api.client
            .get(format!("{}/metrics", api.internal_url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let series = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("flashsale_http_requests_total{"))
            .count()
    };
    // Made-up methods on a real route and on made-up paths, `n` of each.
    let storm = |from: usize, n: usize| {
        let (client, url, sale) = (
            api.client.clone(),
            api.url.clone(),
            config.sale.name.clone(),
        );
        async move {
            for i in from..from + n {
                let method = reqwest::Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
                let path = match i % 3 {
                    0 => format!("/v1/sales/{sale}/orders"),
                    1 => format!("/made/up/{i}"),
                    _ => format!("/v1/orders/{i}/x{i}"),
                };
                let method = if i % 2 == 0 {
                    method
                } else {
                    reqwest::Method::GET
                };
                let answer = client
                    .request(method, format!("{url}{path}"))
                    .send()
                    .await
                    .unwrap();
                assert!(answer.status().is_client_error(), "{}", answer.status());
            }
        }
    };
    storm(0, 100).await;
    let before = metrics().await;
    storm(100, 10_000).await;
    let after = metrics().await;
    println!(
        "after 100 and 10,100 made-up requests: {} and {} request series, /metrics {} and {} bytes",
        series(&before),
        series(&after),
        before.len(),
        after.len()
    );
    assert!(series(&before) > 0, "the request counter is exported");
    assert_eq!(
        series(&before),
        series(&after),
        "made-up methods or paths added series: labels must come from a fixed set"
    );
    assert!(
        after.len() < before.len() + 1024,
        "/metrics grew by {} bytes",
        after.len() - before.len()
    );
}

/// Two P-256 keys of a test identity provider (test-only, made with
/// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`).
const PROVIDER_KEYS: [(&str, &str); 2] = [
    (
        "key-a",
        "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDHBsA64v23urwOce
7I6GX1Ohiq7xTI6G7Rm/ZJ54YGqhRANCAATYP3l/f5RP7pBRlsxaZ5Qa4iaeIyxu
fS0dpvlc9GYx03Bjx8IGnE1+l0irelT/7f6izjogBBnoNvZePK1exFau
-----END PRIVATE KEY-----",
    ),
    (
        "key-b",
        "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgIzawK0mvUTB7om/b
sW0Wd2c+nVCEZrx8FGpCMpG70UOhRANCAAR3QLgeQidHCAfblWznjQbOwuDmSGGM
dBM/AKkK7rnStOEufkazrlO3iBtacMmdQVApS+NE8sCgefxX8oAiqKqZ
-----END PRIVATE KEY-----",
    ),
];

/// The provider's JWKS publishing the keys named.
fn jwks_of(kids: &[&str]) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, jwk::Jwk};
    let keys: Vec<Jwk> = PROVIDER_KEYS
        .iter()
        .filter(|(kid, _)| kids.contains(kid))
        .map(|(kid, pem)| {
            let key = EncodingKey::from_ec_pem(pem.as_bytes()).unwrap();
            let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
            jwk.common.key_id = Some(kid.to_string());
            jwk
        })
        .collect();
    serde_json::json!({ "keys": keys }).to_string()
}

/// A token for `ann` signed with the provider's key `kid` (its header
/// naming `header_kid`, which may differ or be absent).
fn provider_token(kid: &str, header_kid: Option<&str>) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let pem = PROVIDER_KEYS.iter().find(|(k, _)| *k == kid).unwrap().1;
    let mut header = Header::new(Algorithm::ES256);
    header.kid = header_kid.map(str::to_string);
    jsonwebtoken::encode(
        &header,
        &serde_json::json!({"sub": "ann", "exp": Utc::now().timestamp() + 600}),
        &EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Whether the API takes `token`: any authenticated look-up of a made-up
/// order is 404; a refused token is 401 with the reason.
async fn accepts(api: &TestApi, token: &str) -> Result<(), String> {
    let response = api
        .client
        .get(format!("{}/v1/orders/{}", api.url, Uuid::new_v4()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let answer = Answer::read(response).await;
    match answer.status {
        404 => Ok(()),
        401 => Err(answer.body["message"].as_str().unwrap_or_default().into()),
        other => panic!("neither 404 nor 401 but {other}: {answer:?}"),
    }
}

/// Waits (up to 20 s: the refresh runs every second, at least 5 s apart)
/// until the API's verdict on `token` is `accepted`.
async fn until_verdict(api: &TestApi, token: &str, accepted: bool, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while accepts(api, token).await.is_ok() != accepted {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still {} after 20 s",
            if accepted { "refused" } else { "accepted" }
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A provider's key rotation, as a JWKS file (a mounted ConfigMap) or URL.
async fn tokens_follow_the_providers_key_rotation(source: JwksSource, publish: impl Fn(String)) {
    publish(jwks_of(&["key-a"]));
    let db = fresh_database().await;
    let api = TestApi::start(ApiOptions {
        jwks: Some(source),
        ..ApiOptions::new(&stack::unique_name("ns"), common::redis_node(), &db)
    })
    .await;
    let (a, b) = (
        provider_token("key-a", Some("key-a")),
        provider_token("key-b", Some("key-b")),
    );
    assert_eq!(
        accepts(&api, &a).await,
        Ok(()),
        "a token of a published key"
    );
    for (what, token, reason) in [
        ("an unpublished key", b.clone(), "key (kid) is not known"),
        (
            "key b's signature under key a's name",
            provider_token("key-b", Some("key-a")),
            "signature does not verify",
        ),
        (
            "no kid",
            provider_token("key-a", None),
            "algorithm is not accepted",
        ),
        (
            "an HS256 token",
            common::token("ann", 600, common::JWT_SECRET),
            "algorithm is not accepted",
        ),
    ] {
        let refused = accepts(&api, &token).await.unwrap_err();
        assert!(refused.contains(reason), "{what}: {refused}");
    }

    // The provider adds key b and then retires key a: no restart.
    publish(jwks_of(&["key-a", "key-b"]));
    until_verdict(&api, &b, true, "a newly published key").await;
    publish(jwks_of(&["key-b"]));
    until_verdict(&api, &a, false, "a retired key").await;
    // A broken document keeps the last good keys.
    publish("<html>502 Bad Gateway</html>".into());
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(accepts(&api, &b).await, Ok(()), "after a broken document");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_file_is_read_again_when_the_provider_rotates_keys() {
    let path = std::env::temp_dir().join(format!("{}.json", stack::unique_name("jwks")));
    let write = {
        let path = path.clone();
        move |document: String| std::fs::write(&path, document).unwrap()
    };
    tokens_follow_the_providers_key_rotation(JwksSource::File(path.clone()), write).await;
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_url_is_fetched_again_when_the_provider_rotates_keys() {
    let document = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let served = document.clone();
    let provider = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(move || {
            let served = served.clone();
            async move { served.lock().unwrap().clone() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/.well-known/jwks.json",
        listener.local_addr().unwrap()
    );
    let server = tokio::spawn(async move { axum::serve(listener, provider).await });
    tokens_follow_the_providers_key_rotation(JwksSource::Url(url), move |d| {
        *document.lock().unwrap() = d;
    })
    .await;
    server.abort();
}

/// The per-IP limit counts the client a trusted proxy names, and only then:
/// rotating a self-written `X-Forwarded-For` does not escape it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_ip_limit_believes_only_trusted_proxies() {
    let limited = |trusted: &'static str| {
        move |options: &mut ApiOptions| {
            options.per_ip_per_sec = 2;
            options.trusted_proxies = trusted.parse().unwrap();
        }
    };
    let refused = |sale: &LiveSale, forwarded_for: Vec<String>| {
        let (api, name) = (sale.api.clone(), sale.config.sale.name.clone());
        async move {
            let mut refused = 0;
            for address in forwarded_for {
                let answer = api
                    .client
                    .get(format!("{}/v1/sales/{name}", api.url))
                    .header("x-forwarded-for", address)
                    .send()
                    .await
                    .unwrap();
                refused += usize::from(answer.status() == 429);
            }
            refused
        }
    };
    let spoofed: Vec<String> = (0..20).map(|i| format!("198.51.100.{i}")).collect();
    let direct = LiveSale::start_with(common::redis_node(), 5, 1, 1, limited("")).await;
    assert!(
        refused(&direct, spoofed.clone()).await >= 10,
        "an untrusted client's own X-Forwarded-For changes nothing"
    );
    let proxied = LiveSale::start_with(common::redis_node(), 5, 1, 1, limited("127.0.0.1")).await;
    assert_eq!(
        refused(&proxied, spoofed).await,
        0,
        "behind a trusted proxy, each client has its own allowance"
    );
    let one_client = vec!["203.0.113.5".to_string(); 20];
    assert!(
        refused(&proxied, one_client).await >= 10,
        "one client behind the proxy is limited"
    );
}
