//! Two operator processes: only the Lease holder acts; kill it and the other
//! takes over within the lease time.

mod common;

use std::time::{Duration, Instant};

use flashsale_operator::crd::FlashSale;
use flashsale_testkit as stack;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_acts_and_the_other_takes_over() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db = stack::fresh_database_url().await;
    let mut first = common::Operator::start(&ns, &db, "flashsale-operator", "op-a");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let leader = common::wait_for(Duration::from_secs(20), "a leader", || async {
        holder(&leases.get_opt("flashsale-operator").await.ok()??)
    })
    .await;
    assert_eq!(leader, "op-a");
    let second = common::Operator::start(&ns, &db, "flashsale-operator", "op-b");

    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &ns);
    let fs: FlashSale = serde_json::from_value(common::manifest("leader", &ns, 3600, 600)).unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    common::wait_for(
        Duration::from_secs(20),
        "the sale to be scheduled",
        || async {
            let fs = sales.get("leader").await.ok()?;
            (fs.status?.state? == flashsale_operator::crd::SaleState::Scheduled).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reporters = |list: Vec<Event>| -> Vec<String> {
        list.into_iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("flashsale-operator"))
            .filter_map(|e| e.reporting_instance)
            .collect()
    };
    let acted = reporters(events.list(&ListParams::default()).await.unwrap().items);
    assert!(!acted.is_empty());
    assert!(
        acted.iter().all(|r| r == "op-a"),
        "only the leader acts: {acted:?}"
    );

    // The leader crashes; the standby takes over within the lease time.
    let killed_at = Instant::now();
    first.kill();
    let next = common::wait_for(Duration::from_secs(20), "a new leader", || async {
        holder(&leases.get_opt("flashsale-operator").await.ok()??).filter(|h| h == "op-b")
    })
    .await;
    let took = killed_at.elapsed();
    assert_eq!(next, "op-b");
    assert!(
        took <= Duration::from_secs(6 + 3),
        "took over in {took:?}, lease 6 s"
    );
    // And it acts: the kill switch reaches the status.
    sales
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    common::wait_for(
        Duration::from_secs(20),
        "the Paused condition from the new leader",
        || async {
            let fs = sales.get("leader").await.ok()?;
            let paused = fs
                .status?
                .conditions
                .iter()
                .any(|c| c.type_ == "Paused" && c.status == "True");
            paused.then_some(())
        },
    )
    .await;
    println!("op-b took over {took:?} after op-a was killed");
    drop(second);
}
