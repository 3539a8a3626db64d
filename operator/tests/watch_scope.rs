//! An operator given a list of namespaces reconciles the sales of each of
//! them and leaves every other namespace alone.

mod common;

use std::time::Duration;

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use kube::Api;
use kube::api::PostParams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_watches_the_namespaces_it_is_given_and_no_other() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let (shop, outlet, elsewhere) = (
        common::namespace(&client).await,
        common::namespace(&client).await,
        common::namespace(&client).await,
    );
    let db = stack::fresh_database_url().await;
    let _operator = common::Operator::start_watching(&[&shop, &outlet], &db, "scoped");
    let state = |ns: &str| {
        let sales: Api<FlashSale> = Api::namespaced(client.clone(), ns);
        async move { sales.get("scoped").await.ok()?.status?.state }
    };
    for ns in [&*shop, &*outlet, &*elsewhere] {
        let sales: Api<FlashSale> = Api::namespaced(client.clone(), ns);
        let fs: FlashSale =
            serde_json::from_value(common::manifest("scoped", ns, 3600, 600)).unwrap();
        sales.create(&PostParams::default(), &fs).await.unwrap();
    }
    for ns in [&*shop, &*outlet] {
        common::wait_for(
            Duration::from_secs(30),
            "a watched sale scheduled",
            || async { (state(ns).await? == SaleState::Scheduled).then_some(()) },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        state(&elsewhere).await,
        None,
        "a sale outside the watched namespaces was reconciled"
    );
}
