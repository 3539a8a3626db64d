//! Every pod the operator builds (consumers, Jobs) meets the Pod Security
//! `restricted` profile: a whole sale's life in a namespace that enforces it.

mod common;

use std::time::Duration;

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use kube::Api;
use kube::api::PostParams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_sale_lives_in_a_namespace_enforcing_restricted() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace_labelled(
        &client,
        serde_json::json!({
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }),
    )
    .await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "restricted");
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest("strict", &ns, 4, 8);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "2s"});
    manifest["spec"]["cleanup"] = serde_json::json!({"after": "1s"});
    manifest["spec"]["payment"] = serde_json::json!({"timeout": "1s"});
    manifest["spec"]["consumers"] = serde_json::json!({"minReplicas": 1, "maxReplicas": 2});
    let fs: FlashSale = serde_json::from_value(manifest).unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    let api = common::ApiProcess::start(&ns, &db_url).await;
    common::wait_for(Duration::from_secs(30), "the sale to go live", || async {
        (sales.get("strict").await.ok()?.status?.state? == SaleState::Live).then_some(())
    })
    .await;
    for i in 0..5 {
        let (status, detail) = api.buy("strict", &format!("shopper-{i}")).await;
        assert_eq!(status, 202, "{detail}");
    }
    // The consumer pods persist the orders; the Jobs reconcile and clean up.
    let db = flashsale_workload::orders::connect(&db_url, 1)
        .await
        .unwrap();
    common::wait_for(
        Duration::from_secs(60),
        "the pods to persist the orders",
        || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
                .fetch_one(&db)
                .await
                .ok()?;
            (n == 5).then_some(())
        },
    )
    .await;
    common::wait_for(Duration::from_secs(120), "the sale to complete", || async {
        (sales.get("strict").await.ok()?.status?.state? == SaleState::Completed).then_some(())
    })
    .await;
}
