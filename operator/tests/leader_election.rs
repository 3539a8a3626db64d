//! Two operator processes: only the Lease holder acts; kill it and the other
//! takes over within the lease time; cut it off from the API server and it
//! stops acting before the other may take over.

mod common;

use std::time::{Duration, Instant};

use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
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
            (fs.status?.state? == flashsale_operator::model::crd::SaleState::Scheduled)
                .then_some(())
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

/// A TCP relay to the API server that can be cut: open connections are
/// dropped and new ones refused, as a network partition would.
struct Partition {
    port: u16,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Partition {
    async fn to(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, cuts) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if *cuts.borrow() {
                    continue;
                }
                let upstream = upstream.clone();
                let mut cuts = cuts.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cuts.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Self { port, cut }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }
}

/// The API server's address, from the stack's kubeconfig.
fn api_server(kubeconfig: &str) -> &str {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("the kubeconfig names an https server")
}

/// A copy of the stack's kubeconfig that reaches the API server through
/// `port` on the loopback (its certificate names 127.0.0.1).
fn kubeconfig_through(port: u16) -> std::path::PathBuf {
    let original = std::fs::read_to_string(stack::kubeconfig()).unwrap();
    let path = stack::run_dir().join(format!("kubeconfig-partition-{port}"));
    let relayed = original.replace(api_server(&original), &format!("127.0.0.1:{port}"));
    std::fs::write(&path, relayed).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_before_another_takes_over() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db = stack::fresh_database_url().await;
    let original = std::fs::read_to_string(stack::kubeconfig()).unwrap();
    let partition = Partition::to(api_server(&original).to_string()).await;
    let kubeconfig = kubeconfig_through(partition.port);
    let listen = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    let mut cut_off =
        common::Operator::start_with_kubeconfig(&ns, &db, "op-a", &kubeconfig, &listen);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    common::wait_for(Duration::from_secs(20), "op-a to lead", || async {
        holder(&leases.get_opt("flashsale-operator").await.ok()??).filter(|h| h == "op-a")
    })
    .await;
    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &ns);
    let mut manifest = common::manifest("partition", &ns, 2, 600);
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});
    // op-a would reconcile its stale copy every second.
    manifest["spec"]["consumers"] = serde_json::json!({"pollInterval": "1s"});
    common::create_live(&sales, manifest).await;

    // op-a loses the API server (not Redis); op-b starts and takes over.
    // op-a's own /readyz (local, not cut) says when it stopped acting.
    let readyz = format!("http://{listen}/readyz");
    common::wait_for(Duration::from_secs(10), "op-a to act", || async {
        let answer = reqwest::get(&readyz).await.ok()?.text().await.ok()?;
        (answer == "leader").then_some(())
    })
    .await;
    partition.cut();
    let cut_at = Instant::now();
    let stopped_acting = tokio::spawn(async move {
        loop {
            let answer = reqwest::get(&readyz).await;
            let standby = match answer {
                Ok(r) => r.text().await.is_ok_and(|t| t == "standby"),
                Err(_) => true, // exited: it acts no more either
            };
            if standby {
                return chrono::Utc::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let _standby = common::Operator::start(&ns, &db, "flashsale-operator", "op-b");
    let acquired = common::wait_for(Duration::from_secs(30), "op-b to lead", || async {
        let spec = leases.get_opt("flashsale-operator").await.ok()??.spec?;
        (spec.holder_identity.as_deref() == Some("op-b")).then_some(spec.acquire_time?.0)
    })
    .await;
    let took_over = cut_at.elapsed();
    // Seen standby at or after the instant op-a stopped: an upper bound of
    // that instant, compared with the one op-b wrote when it took the Lease
    // (one machine, one clock).
    let stopped = tokio::time::timeout(Duration::from_secs(30), stopped_acting)
        .await
        .expect("op-a still says it leads 30 s after op-b took the Lease")
        .unwrap();
    let acquired = chrono::DateTime::from_timestamp_micros(acquired.as_microsecond()).unwrap();
    let margin = acquired - stopped;
    assert!(
        margin > chrono::Duration::zero(),
        "op-a still acted at {stopped}, after op-b took the Lease at {acquired}"
    );
    // The merchant pulls the kill switch; the new leader applies it.
    sales
        .patch(
            "partition",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let store = SaleStore::new(
        RedisConn::connect(&stack::redis_url().parse().unwrap())
            .await
            .unwrap(),
    );
    let sale = SaleRef::new(&ns, "partition").unwrap();
    let all_paused = || async {
        let loaded = store.loaded(&sale, 4).await.unwrap();
        loaded.metas.iter().all(|m| m.is_some_and(|m| m.paused))
    };
    common::wait_for(
        Duration::from_secs(20),
        "op-b to pause the shards",
        || async { all_paused().await.then_some(()) },
    )
    .await;
    // The old leader, still reaching Redis with its stale spec, must not
    // undo the kill switch.
    let watch_from = Instant::now();
    while watch_from.elapsed() < Duration::from_secs(8) {
        assert!(
            all_paused().await,
            "a shard was resumed after op-b paused the sale: the cut-off op-a is still acting"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cut_off.exited(), "op-a exits once it cannot prove it leads");
    println!(
        "op-b led {took_over:?} after the cut; op-a stopped acting {} ms before, then exited",
        margin.num_milliseconds()
    );
    let _ = std::fs::remove_file(kubeconfig);
}
