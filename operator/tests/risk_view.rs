//! Risk scoring through the whole platform (`spec.risk`, issue 37): a sale
//! applied to the API server with a rule on purchase tokens, its consumer
//! pods scoring beside persisting, a shopper who hoarded tokens cancelled
//! with reason RISK and told so, one event for the sale, the status and
//! `kubectl flashsale risk` naming who and why.

mod common;

use std::process::Command;
use std::time::Duration;

use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

/// A shopper's request to the API (development identity), its JSON answer.
async fn ask(request: reqwest::RequestBuilder, shopper: &str) -> serde_json::Value {
    let response = request.header("x-user-id", shopper).send().await.unwrap();
    response.json().await.unwrap()
}

/// Fetches a purchase token as `shopper`, `n` times; the last one.
async fn tokens(api: &common::ApiProcess, shopper: &str, n: usize) -> String {
    let http = reqwest::Client::new();
    let mut last = String::new();
    for _ in 0..n {
        let url = format!("{}/v1/sales/scored/token", api.url);
        let answer = ask(http.get(url), shopper).await;
        last = answer["token"].as_str().expect("a token").to_string();
    }
    last
}

/// Buys one unit as `shopper` with `token`: the order id.
async fn buy(api: &common::ApiProcess, shopper: &str, token: &str) -> String {
    let url = format!("{}/v1/sales/scored/orders", api.url);
    let request = reqwest::Client::new()
        .post(url)
        .header("purchase-token", token);
    let answer = ask(request, shopper).await;
    answer["orderId"].as_str().expect("accepted").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_hoarder_is_cancelled_for_risk_and_the_merchant_sees_why() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "risk");
    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &ns);
    let mut manifest = common::manifest("scored", &ns, 2, 120);
    manifest["spec"]["stock"] = 10.into();
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    manifest["spec"]["antiBot"] = serde_json::json!({"required": true});
    manifest["spec"]["risk"] = serde_json::json!({
        "rules": {
            "paidWithin": {"weight": 0, "within": "0s"},
            "shoppersPerNetwork": {"weight": 0, "over": 0},
            "tokensPerShopper": {"weight": 100, "over": 2},
        }
    });
    common::create_live(&sales, manifest).await;
    let api = common::ApiProcess::start(&ns, &db_url).await;
    let hoarded = tokens(&api, "hoarder", 3).await;
    let casual = tokens(&api, "casual", 1).await;
    // The count is made off the token's path.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hoarders = buy(&api, "hoarder", &hoarded).await;
    let casuals = buy(&api, "casual", &casual).await;

    let risk = common::wait_for(Duration::from_secs(90), "both orders scored", || async {
        let risk = sales.get("scored").await.ok()?.status?.risk?;
        (risk.scored == 2).then_some(risk)
    })
    .await;
    assert_eq!((risk.cancelled, risk.held), (1, 0), "{risk:?}");
    assert_eq!(
        risk.top.len(),
        1,
        "only the hoarder scored above 0: {risk:?}"
    );
    let order = |id: String, shopper: &'static str| {
        let url = format!("{}/v1/orders/{id}", api.url);
        async move { ask(reqwest::Client::new().get(url), shopper).await }
    };
    let told = order(hoarders, "hoarder").await;
    assert_eq!(
        (told["status"].as_str(), told["risk"].as_str()),
        (Some("CANCELLED"), Some("RISK")),
        "{told}"
    );
    let untouched = order(casuals, "casual").await;
    assert_eq!(untouched["status"], "UNPAID", "{untouched}");
    assert!(untouched.get("risk").is_none(), "{untouched}");

    // One event for the sale, not one per order.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let flagged = common::wait_for(
        Duration::from_secs(30),
        "the RiskCancelled event",
        || async {
            let listed = events.list(&ListParams::default()).await.ok()?.items;
            let flagged: Vec<Event> = listed
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("RiskCancelled"))
                .collect();
            (!flagged.is_empty()).then_some(flagged)
        },
    )
    .await;
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    let note = flagged[0].note.clone().unwrap_or_default();
    assert!(
        note.starts_with("1 more orders cancelled for risk"),
        "{note}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-flashsale"))
        .args(["-n", &ns, "risk", "scored"])
        .env("KUBECONFIG", stack::kubeconfig())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    println!("$ kubectl flashsale risk scored\n{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "scored 2 orders (0 waiting): 1 cancelled for risk, 0 held for review",
        "hoarder",
        "tokensPerShopper +100: 3 purchase tokens asked for (over 2)",
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
}
