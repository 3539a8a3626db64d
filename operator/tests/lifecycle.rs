//! A sale's whole life on the real API server and node: warm-up at
//! start - leadTime, live at start, the kill switch within a second, ended at
//! end, the final reconciliation Job, cleanup, completed.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// Records the instant each state is first seen, and `kubectl get fs` then.
struct StateWatch {
    sales: Api<FlashSale>,
    ns: String,
    seen: BTreeMap<String, chrono::DateTime<Utc>>,
    tables: Vec<String>,
}

impl StateWatch {
    async fn until(&mut self, target: SaleState, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(state) = self
                .sales
                .get("drop")
                .await
                .ok()
                .and_then(|f| f.status?.state)
            {
                let name = format!("{state:?}");
                if let std::collections::btree_map::Entry::Vacant(first) = self.seen.entry(name) {
                    first.insert(Utc::now());
                    self.tables
                        .push(stack::kubectl(&["get", "fs", "-n", &self.ns]));
                }
                if state == target {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {target:?} within {timeout:?}; seen {:?}",
                self.seen
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_runs_from_warm_up_to_completed() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "lifecycle");
    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &ns);

    let mut manifest = common::manifest("drop", &ns, 20, 25);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "10s"});
    manifest["spec"]["cleanup"] = serde_json::json!({"after": "2s"});
    manifest["spec"]["payment"] = serde_json::json!({"timeout": "2s"});
    manifest["spec"]["reconcile"] = serde_json::json!({"interval": "10s"});
    manifest["spec"]["consumers"] = serde_json::json!({"minReplicas": 1, "maxReplicas": 2});
    let fs: FlashSale = serde_json::from_value(manifest).unwrap();
    let start = flashsale_operator::model::timeline::to_chrono(&fs.spec.window.start);
    let end = flashsale_operator::model::timeline::to_chrono(&fs.spec.window.end);
    sales.create(&PostParams::default(), &fs).await.unwrap();
    let api = common::ApiProcess::start(&ns, &db_url).await;

    // Watch the states as they come, with the instant each was first seen.
    let mut watch = StateWatch {
        sales: sales.clone(),
        ns: ns.to_string(),
        seen: BTreeMap::new(),
        tables: Vec::new(),
    };
    watch.until(SaleState::Warm, Duration::from_secs(30)).await;
    let warm_at = start - chrono::Duration::seconds(10);
    let off =
        |at: chrono::DateTime<Utc>, due: chrono::DateTime<Utc>| (at - due).num_milliseconds().abs();
    assert!(
        off(watch.seen["Warm"], warm_at) <= 1_000,
        "warmed {}ms from its due instant",
        (watch.seen["Warm"] - warm_at).num_milliseconds()
    );

    // Redis equals the database at warm-up.
    let store = SaleStore::new(
        RedisConn::connect(&stack::redis_url().parse().unwrap())
            .await
            .unwrap(),
    );
    let sale = SaleRef::new(&ns, "drop").unwrap();
    let loaded = store.loaded(&sale, 4).await.unwrap();
    assert!(loaded.warmed());
    assert_eq!((loaded.remaining(), loaded.stock_total), (100, Some(100)));
    let (before_start, _) = api.buy("drop", "early").await;
    assert_eq!(before_start, 409, "NOT_STARTED before the window");

    watch.until(SaleState::Live, Duration::from_secs(20)).await;
    assert!(
        off(watch.seen["Live"], start) <= 1_000,
        "live {}ms from the start",
        (watch.seen["Live"] - start).num_milliseconds()
    );
    let mut accepted = 0;
    for i in 0..10 {
        let (status, _) = api.buy("drop", &format!("shopper-{i}")).await;
        assert_eq!(status, 202);
        accepted += 1;
    }

    // The kill switch: the next purchase answers PAUSED within a second.
    let paused_at = Instant::now();
    sales
        .patch(
            "drop",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let mut n = 0;
    loop {
        n += 1;
        let (status, code) = api.buy("drop", &format!("during-pause-{n}")).await;
        if (status, code.as_str()) == (409, "PAUSED") {
            break;
        }
        accepted += 1;
        assert!(
            paused_at.elapsed() < Duration::from_secs(1),
            "still accepting {:?} after the patch",
            paused_at.elapsed()
        );
    }
    let pause_took = paused_at.elapsed();
    watch.until(SaleState::Paused, Duration::from_secs(5)).await;
    sales
        .patch(
            "drop",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    common::wait_for(Duration::from_secs(5), "purchases to resume", || async {
        let (status, _) = api
            .buy(
                "drop",
                &format!("after-pause-{}", Utc::now().timestamp_micros()),
            )
            .await;
        (status == 202).then_some(())
    })
    .await;
    accepted += 1;

    watch.until(SaleState::Ended, Duration::from_secs(40)).await;
    assert!(
        off(watch.seen["Ended"], end) <= 1_000,
        "ended {}ms from the end",
        (watch.seen["Ended"] - end).num_milliseconds()
    );
    watch
        .until(SaleState::Completed, Duration::from_secs(90))
        .await;

    let fs = sales.get("drop").await.unwrap();
    let status = fs.status.unwrap();
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    };
    assert_eq!(condition("CleanedUp").as_deref(), Some("True"));
    assert_eq!(
        condition("Reconciled").as_deref(),
        Some("True"),
        "{:?}",
        status.last_reconciliation
    );
    let last = status
        .last_reconciliation
        .expect("the final reconciliation reported");
    assert!(flashsale_operator::model::timeline::to_chrono(&last.time) >= end);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let final_job = jobs.get("drop-final-reconcile").await.unwrap();
    assert_eq!(final_job.status.unwrap().succeeded, Some(1));
    // Every accepted order was persisted by the consumer pods; Redis is gone.
    let db = flashsale_workload::orders::connect(&db_url, 1)
        .await
        .unwrap();
    let persisted: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(persisted, accepted);
    assert_eq!(store.shards_with_meta(&sale, 4).await.unwrap(), 0);
    for table in &watch.tables {
        let header = table.lines().next().unwrap_or_default();
        for column in [
            "NAME", "STATE", "STOCK", "SOLD", "START", "END", "LAG", "AGE",
        ] {
            assert!(
                header.contains(column),
                "kubectl get fs lacks {column}: {table}"
            );
        }
    }
    println!(
        "states first seen: {:?}\npause took {pause_took:?}\n{}",
        watch.seen,
        watch.tables.join("\n")
    );
}
