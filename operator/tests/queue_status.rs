//! A queued sale as the SRE sees it: `status.queue` follows the line in
//! Redis (joined, admitted, waiting, refused challenges), and a spec that
//! names no rate gets four fifths of the API's capacity — in the database
//! row every API replica admits by.

mod common;

use std::time::Duration;

use flashsale_operator::model::crd::{FlashSale, QueueStatus};
use flashsale_testkit as stack;
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_follows_the_line_at_a_rate_derived_from_the_api() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "queue-status");
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest("queued", &ns, 2, 600);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    manifest["spec"]["admission"] = serde_json::json!({
        "mode": "queue",
        "challenge": {"kind": "proofOfWork", "difficulty": 1},
    });
    common::create_live(&sales, manifest).await;
    let derived = common::API_CAPACITY / 5 * 4;
    let db = flashsale_workload::orders::connect(&db_url, 1)
        .await
        .unwrap();
    let (rate,): (Option<i32>,) =
        sqlx::query_as("SELECT admission_rate FROM sales WHERE namespace = $1 AND name = 'queued'")
            .bind(ns.to_string())
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(rate, Some(derived as i32), "the row's rate");

    let api = common::ApiProcess::start(&ns, &db_url).await;
    for shopper in ["a", "b", "c"] {
        assert_eq!(api.join_queue("queued", shopper, true).await.0, 202);
    }
    assert_eq!(api.join_queue("queued", "d", false).await.0, 403);
    let expected = QueueStatus {
        length: 3,
        admitted: 3,
        waiting: 0,
        rate_per_second: derived,
        wait_p50_seconds: 0,
        wait_p95_seconds: 0,
        closed: false,
        challenge_failures: 1,
    };
    let mut last = None;
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            last = sales
                .get("queued")
                .await
                .ok()
                .and_then(|fs| fs.status?.queue);
            if last.as_ref() == Some(&expected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    assert!(seen.is_ok(), "status.queue {last:?}, want {expected:?}");
}
