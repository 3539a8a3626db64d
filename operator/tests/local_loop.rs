//! The local loop as `make up` runs it: the operator and one host consumer
//! process for every sale of the namespace (`flashsale consumer --all-sales`).
//! A finished sale must not keep a consumer, or its deletion waits for the
//! consumer group to empty.

mod common;

use std::time::{Duration, Instant};

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_sale_is_deleted_within_seconds() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "local-loop");
    let _consumers = common::HostConsumers::start(&ns, &db_url);
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);

    let mut manifest = common::manifest("finished", &ns, 4, 6);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "2s"});
    manifest["spec"]["cleanup"] = serde_json::json!({"after": "1s"});
    manifest["spec"]["payment"] = serde_json::json!({"timeout": "1s"});
    manifest["spec"]["consumers"] = serde_json::json!({"minReplicas": 0, "maxReplicas": 2});
    let fs: FlashSale = serde_json::from_value(manifest).unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    let api = common::ApiProcess::start(&ns, &db_url).await;
    common::wait_for(Duration::from_secs(30), "the sale to go live", || async {
        (sales.get("finished").await.ok()?.status?.state? == SaleState::Live).then_some(())
    })
    .await;
    // Orders through the host consumer: its group exists and has members.
    for i in 0..5 {
        let (status, body) = api.buy("finished", &format!("shopper-{i}")).await;
        assert_eq!(status, 202, "{body}");
    }
    common::wait_for(Duration::from_secs(90), "the sale to complete", || async {
        (sales.get("finished").await.ok()?.status?.state? == SaleState::Completed).then_some(())
    })
    .await;

    let asked = Instant::now();
    sales
        .delete("finished", &DeleteParams::default())
        .await
        .unwrap();
    common::wait_for(Duration::from_secs(60), "the sale to be gone", || async {
        sales
            .get_opt("finished")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let took = asked.elapsed();
    println!("a Completed sale deleted in the local loop: gone {took:?} after the delete");
    assert!(
        took <= Duration::from_secs(5),
        "deleting a Completed sale took {took:?}"
    );
}
