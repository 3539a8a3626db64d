//! Purchase tokens (`spec.antiBot`) against the running API, Redis Cluster,
//! PostgreSQL and Kafka: a sale that requires them sells only to a shopper
//! showing a token of theirs, of this sale, unexpired and unused.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{
    Answer, ApiOptions, LiveSale, SaleSpec, TestApi, create_sale, fresh_database, read_topic,
};
use flashsale_testkit as stack;
use flashsale_workload::domain::purchase_token::TokenClaims;
use flashsale_workload::domain::sale::SaleConfig;
use uuid::Uuid;

async fn get_token(api: &TestApi, sale: &SaleConfig, shopper: &str) -> Answer {
    let request = api
        .client
        .get(format!("{}/v1/sales/{}/token", api.url, sale.sale.name));
    Answer::read(api.identify(request, shopper).send().await.unwrap()).await
}

async fn token_of(api: &TestApi, sale: &SaleConfig, shopper: &str) -> String {
    let answer = get_token(api, sale, shopper).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body["token"].as_str().unwrap().to_string()
}

async fn buy(
    api: &TestApi,
    sale: &SaleConfig,
    shopper: &str,
    token: Option<&str>,
    key: Option<&str>,
) -> Answer {
    let mut request = api
        .client
        .post(format!("{}/v1/sales/{}/orders", api.url, sale.sale.name))
        .json(&serde_json::json!({"quantity": 1}));
    request = api.identify(request, shopper);
    if let Some(token) = token {
        request = request.header("purchase-token", token);
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    Answer::read(request.send().await.unwrap()).await
}

/// A warmed sale in `namespace` requiring tokens good for `ttl`, starting
/// `start_in` from now (negative: already live).
async fn token_sale(
    db: &sqlx::PgPool,
    store: &flashsale_workload::redis::store::SaleStore,
    namespace: &str,
    ttl: Duration,
    start_in: chrono::Duration,
) -> SaleConfig {
    let spec = SaleSpec {
        purchase_token_ttl: Some(ttl),
        start: Utc::now() + start_in,
        ..SaleSpec::live(namespace, 5, 2, 1)
    };
    let config = create_sale(db, &spec).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_requiring_tokens_sells_only_against_an_unused_token_of_the_shopper() {
    let db = fresh_database().await;
    let namespace = stack::unique_name("ns");
    let target = common::redis_cluster();
    let store = common::store(&target).await;
    let live = chrono::Duration::minutes(-1);
    let sale = token_sale(&db, &store, &namespace, Duration::from_secs(30), live).await;
    let other = token_sale(&db, &store, &namespace, Duration::from_secs(30), live).await;
    let short = token_sale(&db, &store, &namespace, Duration::from_secs(1), live).await;
    let later = token_sale(
        &db,
        &store,
        &namespace,
        Duration::from_secs(30),
        chrono::Duration::minutes(5),
    )
    .await;
    let api = TestApi::start(ApiOptions::new(&namespace, target, &db)).await;
    for config in [&sale, &other, &short, &later] {
        api.wait_for_sale(&config.sale).await;
    }
    let info: serde_json::Value = api
        .client
        .get(format!("{}/v1/sales/{}", api.url, sale.sale.name))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["purchaseTokenRequired"], true, "{info}");

    // Refused before anything is reserved.
    let forged = TokenClaims {
        sale_id: sale.id,
        shopper: "alice".into(),
        nonce: Uuid::new_v4(),
        expires_ms: Utc::now().timestamp_millis() + 60_000,
    }
    .sign(b"a secret that is not the API's, 32+ bytes");
    let bobs = token_of(&api, &sale, "bob").await;
    let other_sales = token_of(&api, &other, "alice").await;
    let expired = token_of(&api, &short, "alice").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refusals = [
        ("no token", &sale, None, "TOKEN_REQUIRED"),
        ("garbage", &sale, Some("not-a-token"), "TOKEN_INVALID"),
        ("forged", &sale, Some(forged.as_str()), "TOKEN_INVALID"),
        ("bob's token", &sale, Some(bobs.as_str()), "TOKEN_INVALID"),
        (
            "another sale's",
            &sale,
            Some(other_sales.as_str()),
            "TOKEN_INVALID",
        ),
        ("expired", &short, Some(expired.as_str()), "TOKEN_INVALID"),
    ];
    for (what, config, token, code) in refusals {
        let answer = buy(&api, config, "alice", token, None).await;
        assert_eq!(
            (answer.status, answer.code()),
            (403, code),
            "{what}: {answer:?}"
        );
    }
    let before_start = get_token(&api, &later, "alice").await;
    assert_eq!(
        (before_start.status, before_start.code()),
        (409, "NOT_STARTED")
    );
    for config in [&sale, &short] {
        assert!(read_topic(&config.sale).is_empty(), "nothing sold yet");
    }

    // A token buys once; a retry of that purchase (its Idempotency-Key)
    // gets the first answer; the token shown again for anything else is refused.
    let token = token_of(&api, &sale, "alice").await;
    let first = buy(&api, &sale, "alice", Some(&token), Some("k1")).await;
    assert_eq!(first.status, 202, "{first:?}");
    let retry = buy(&api, &sale, "alice", Some(&token), Some("k1")).await;
    assert_eq!(retry.order_id(), first.order_id(), "{retry:?}");
    let reused = buy(&api, &sale, "alice", Some(&token), None).await;
    assert_eq!(
        (reused.status, reused.code()),
        (403, "TOKEN_INVALID"),
        "{reused:?}"
    );

    // A refused purchase bought nothing: its token is given back.
    let token = token_of(&api, &sale, "alice").await;
    for _ in 0..2 {
        let over = buy(&api, &sale, "alice", Some(&token), None).await;
        assert_eq!(
            (over.status, over.code()),
            (409, "LIMIT_EXCEEDED"),
            "{over:?}"
        );
    }
    let bob = buy(&api, &sale, "bob", Some(&bobs), None).await;
    assert_eq!(bob.status, 202, "bob's own token: {bob:?}");
    assert_eq!(
        read_topic(&sale.sale).len(),
        2,
        "alice's one order and bob's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_without_the_requirement_ignores_tokens() {
    let sale = LiveSale::start(common::redis_node(), 5, 1, 2).await;
    let (api, config) = (&sale.api, &sale.config);
    assert_eq!(buy(api, config, "dan", None, None).await.status, 202);
    let token = token_of(api, config, "dan").await;
    assert_eq!(
        buy(api, config, "dan", Some(&token), None).await.status,
        202
    );
}
