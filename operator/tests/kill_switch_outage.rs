//! Outages: the kill switch does not depend on PostgreSQL or Kafka (with
//! either stopped, `spec.paused` reaches every shard within a second), and
//! the status names the dependency that is down. (This binary stops services
//! of the shared stack: it holds nothing else.)

mod common;

use std::time::{Duration, Instant};

use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::redis::store::SaleStore;
use kube::Api;
use kube::api::{Patch, PatchParams};

/// A stack service stopped through its script, started again on drop
/// (panics included).
struct Stopped(&'static str);

impl Stopped {
    fn stop(script: &'static str) -> Self {
        stack::stack_script(script, &["down"]);
        Self(script)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        stack::stack_script(self.0, &["up"]);
    }
}

async fn set_paused(sales: &Api<FlashSale>, paused: bool) {
    sales
        .patch(
            "switch",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": paused}})),
        )
        .await
        .unwrap();
}

/// From the patch to every shard saying paused (what a purchase script
/// reads first: the next purchase in any shard is refused with PAUSED).
async fn pause_takes(sales: &Api<FlashSale>, store: &SaleStore, sale: &SaleRef) -> Duration {
    let patched = Instant::now();
    set_paused(sales, true).await;
    loop {
        let loaded = store.loaded(sale, 4).await.unwrap();
        if loaded.metas.iter().all(|m| m.is_some_and(|m| m.paused)) {
            return patched.elapsed();
        }
        assert!(
            patched.elapsed() < Duration::from_secs(10),
            "not paused 10 s after the patch: {:?}",
            loaded.metas
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_needs_neither_postgres_nor_kafka() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "switch");
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest("switch", &ns, 2, 600);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    common::create_live(&sales, manifest).await;
    let api = common::ApiProcess::start(&ns, &db_url).await;
    assert_eq!(api.buy("switch", "first").await.0, 202);
    let store = SaleStore::new(
        flashsale_workload::redis::RedisConn::connect(&stack::redis_url().parse().unwrap())
            .await
            .unwrap(),
    );
    let sale = SaleRef::new(&ns, "switch").unwrap();

    let down = Stopped::stop("postgres.sh");
    let without_postgres = pause_takes(&sales, &store, &sale).await;
    let (status, code) = api.buy("switch", "paused-shopper").await;
    assert_eq!((status, code.as_str()), (409, "PAUSED"));
    // The outage is in the status, with the dependency that failed.
    let outage = common::wait_for(
        Duration::from_secs(30),
        "Degraded: DatabaseUnavailable",
        || async {
            let fs = sales.get("switch").await.ok()?;
            let conditions = fs.status?.conditions;
            let degraded = conditions.iter().find(|c| c.type_ == "Degraded")?;
            let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
            (degraded.status == "True"
                && degraded.reason == "DatabaseUnavailable"
                && ready.status == "False")
                .then(|| degraded.message.clone())
        },
    )
    .await;
    println!("with PostgreSQL stopped the sale says: {outage}");
    drop(down);
    common::wait_for(Duration::from_secs(60), "the outage to clear", || async {
        let fs = sales.get("switch").await.ok()?;
        let conditions = fs.status?.conditions;
        (conditions.iter().find(|c| c.type_ == "Degraded")?.status == "False").then_some(())
    })
    .await;
    set_paused(&sales, false).await;
    common::wait_for(Duration::from_secs(20), "purchases to resume", || async {
        (api.buy("switch", "after").await.0 == 202).then_some(())
    })
    .await;

    let down = Stopped::stop("kafka.sh");
    let without_kafka = pause_takes(&sales, &store, &sale).await;
    let (status, code) = api.buy("switch", "paused-shopper").await;
    assert_eq!(
        (status, code.as_str()),
        (409, "PAUSED"),
        "answered before any produce"
    );
    drop(down);
    println!(
        "kill switch: first PAUSED {without_postgres:?} after the patch with PostgreSQL stopped, {without_kafka:?} with Kafka stopped"
    );
    assert!(
        without_postgres <= Duration::from_secs(1),
        "{without_postgres:?}"
    );
    assert!(without_kafka <= Duration::from_secs(1), "{without_kafka:?}");
}
