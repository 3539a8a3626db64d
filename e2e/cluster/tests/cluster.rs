//! The product as a user meets it, on the real cluster (two nodes in the
//! replicated topology): the chart installs the operator and the API, each
//! spread over the nodes; a FlashSale is applied; a storm of
//! shoppers buys through the API Service while an API pod is deleted, the
//! consumer crashes and (with two nodes) the node holding the operator
//! leader is drained; the consumers the operator scales persist every order;
//! the sale ends, reconciles, cleans up; I1-I6 hold.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use flashsale_testkit::wait_for;
use flashsale_workload::domain::invariants;
use flashsale_workload::domain::sale::SaleRef;
use flashsale_workload::load::{self, Identity, StormConfig};
use flashsale_workload::redis::RedisConn;
use flashsale_workload::redis::store::SaleStore;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

const RELEASE: &str = "e2e";
const SALE: &str = "e2e-drop";

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", stack::kubeconfig())
        .env("PATH", stack::var("PATH"))
        .output()
        .unwrap_or_else(|e| panic!("{program} runs ({e}): {}", stack::START_HINT));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed: {text}");
    text
}

/// The test's namespace: the release and everything in it go when dropped.
struct Release(String);

impl Drop for Release {
    fn drop(&mut self) {
        let ns = self.0.as_str();
        if std::thread::panicking() {
            // What the sale and its operator said, for whoever reads the failure.
            eprintln!(
                "--- the sales' status ---\n{}\n--- the operators' last log lines ---\n{}",
                stack::kubectl(&["get", "fs", "-n", ns, "-o", "yaml"]),
                stack::kubectl(&[
                    "logs",
                    "-n",
                    ns,
                    "--tail=40",
                    "--prefix",
                    "-l",
                    "app.kubernetes.io/component=operator",
                ]),
            );
        }
        // The sale first, while its operator still runs its finalizer.
        stack::kubectl(&["delete", "fs", "--all", "-n", ns, "--timeout=120s"]);
        let _ = Command::new("helm")
            .args(["uninstall", RELEASE, "-n", ns, "--wait"])
            .env("KUBECONFIG", stack::kubeconfig())
            .env("PATH", stack::var("PATH"))
            .output();
        // Whatever the operator did not finish must not keep the namespace.
        stack::remove_namespace(ns);
    }
}

async fn client() -> Client {
    stack::kube_client().await
}

/// A drained node, uncordoned when dropped (a failed test must not leave
/// the cluster a node short).
struct Drained(String);

impl Drop for Drained {
    fn drop(&mut self) {
        stack::kubectl(&["uncordon", &self.0]);
    }
}

/// A component's pods (the chart's `app.kubernetes.io/component` label).
async fn pods_of(pods: &Api<Pod>, component: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/component={component}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn running_pods(pods: &Api<Pod>, component: &str) -> Vec<String> {
    pods_of(pods, component)
        .await
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The nodes a component's pods are on.
async fn nodes_of(pods: &Api<Pod>, component: &str) -> BTreeSet<String> {
    pods_of(pods, component)
        .await
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect()
}

/// How many nodes take pods: Ready and not cordoned.
async fn schedulable_nodes(client: &Client) -> usize {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true))
        .filter(|n| {
            let conditions = n.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_on_the_cluster_survives_pod_kills_and_keeps_every_invariant() {
    let client = client().await;
    let ns = stack::unique_name("e2e");
    let _release = Release(ns.clone());
    run("kubectl", &["create", "namespace", &ns]);
    run(
        "kubectl",
        &[
            "label",
            "namespace",
            &ns,
            &format!("{}=true", stack::TEST_NAMESPACE_LABEL),
        ],
    );
    run(
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &stack::repo_dir()
                .join("crds/flashsale.yaml")
                .to_string_lossy(),
        ],
    );
    stack::install_chart(&ns, RELEASE, &[]).unwrap_or_else(|e| panic!("{e}"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        running_pods(&pods, "operator").await.len(),
        2,
        "two operator replicas"
    );
    assert_eq!(
        running_pods(&pods, "api").await.len(),
        2,
        "two API replicas"
    );
    // The chart's spread: with two nodes, one replica of each on each.
    let spread = schedulable_nodes(&client).await.min(2);
    for component in ["operator", "api"] {
        let on = nodes_of(&pods, component).await;
        assert_eq!(on.len(), spread, "{component} replicas on {on:?}");
    }

    let sales: Api<FlashSale> = Api::namespaced(client.clone(), &ns);
    let at = |secs: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(secs))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let fs: FlashSale = serde_json::from_value(serde_json::json!({
        "apiVersion": "flashsale.dev/v1alpha1", "kind": "FlashSale",
        "metadata": {"name": SALE, "namespace": ns},
        "spec": {
            "sku": "SKU-E2E", "stock": 5000, "purchaseLimit": 2, "sharding": {"shards": 4},
            "window": {"start": at(20), "end": at(80)},
            "warmup": {"leadTime": "10s"}, "cleanup": {"after": "15s"}, "payment": {"timeout": "15s"},
            "consumers": {"minReplicas": 1, "maxReplicas": 4, "lagPerReplica": 10, "pollInterval": "1s", "scaleDownStabilization": "10s"},
        }
    }))
    .unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    let state = || async { sales.get(SALE).await.ok().and_then(|f| f.status?.state) };
    wait_for(Duration::from_secs(60), "Live", || async {
        (state().await? == SaleState::Live).then_some(())
    })
    .await;
    wait_for(
        Duration::from_secs(30),
        "a running consumer pod",
        || async { (!running_pods(&pods, "consumer").await.is_empty()).then_some(()) },
    )
    .await;
    let budget = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .get(&format!("{SALE}-consumers"))
        .await
        .expect("the consumers' PodDisruptionBudget");
    assert_eq!(
        budget.spec.and_then(|s| s.max_unavailable),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
        "consumers evicted one at a time"
    );

    // Replicas over the storm.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let most_replicas = Arc::new(AtomicI32::new(0));
    let sampler = {
        let (deployments, most) = (deployments.clone(), most_replicas.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(Some(d)) = deployments.get_opt(&format!("{SALE}-consumers")).await {
                    most.fetch_max(
                        d.spec.and_then(|s| s.replicas).unwrap_or(0),
                        Ordering::Relaxed,
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let service = services
        .get(&format!("{RELEASE}-flashsale-api"))
        .await
        .unwrap();
    let spec = service.spec.unwrap();
    let url = format!(
        "http://{}:{}",
        spec.cluster_ip.unwrap(),
        spec.ports.unwrap()[0].port
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let chart_secret = |key: &str| {
        secrets
            .iter()
            .find_map(|s| s.data.as_ref()?.get(key).map(|v| v.0.clone()))
            .unwrap_or_else(|| panic!("the chart's Secret with {key}"))
    };
    let jwt = chart_secret("hs256-secret");
    let storm = tokio::spawn(load::storm(StormConfig {
        url,
        sale: SALE.into(),
        shoppers: 4000,
        requests: 6000,
        duration: Duration::from_secs(40),
        concurrency: 40,
        rate: None,
        think: Duration::from_millis(5),
        max_quantity: 2,
        pay: 0.3,
        payment_secret: Some(chart_secret("callback-secret")),
        cancel: 0.05,
        identity: Identity::Jwt(jwt),
        progress: false,
    }));

    // Mid-storm: an API pod is deleted (graceful), the consumer crashes
    // (SIGKILL mid-batch). A crashed consumer does not leave its group: its
    // partitions wait out the session timeout (10 s) while orders pile up,
    // which the operator must answer with more replicas. (Deleting the pod
    // instead sends SIGTERM, the consumer hands its partitions over at once,
    // and whether lag ever passes lagPerReplica is left to chance.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let api_pod = running_pods(&pods, "api").await.pop().expect("an API pod");
    pods.delete(&api_pod, &DeleteParams::default())
        .await
        .unwrap();
    let consumer_pod = running_pods(&pods, "consumer")
        .await
        .pop()
        .expect("a consumer pod");
    let container = pods
        .get(&consumer_pod)
        .await
        .unwrap()
        .status
        .and_then(|s| s.container_statuses?.pop()?.container_id)
        .expect("the consumer's container");
    stack::crash_container(&container);

    // With two nodes: the node holding the operator leader drained while
    // the consumers catch up (evictions one pod at a time, as the budgets
    // say; each replacement goes to the other node).
    let drained = if spread == 2 {
        tokio::time::sleep(Duration::from_secs(8)).await;
        let (leader, node) = stack::operator_leader(&ns).expect("an operator leads, on a node");
        let drained = Drained(node.clone());
        let began = std::time::Instant::now();
        run(
            "kubectl",
            &[
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=120s",
            ],
        );
        println!(
            "drained {node} (the operator leader {leader}'s) in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        Some(drained)
    } else {
        None
    };

    let (report, told) = storm.await.unwrap().expect("the storm runs");
    drop(drained);
    println!("{}", load::render(&report));
    assert!(report.accepted_orders > 0);
    let store = SaleStore::new(
        RedisConn::connect(&stack::redis_url().parse().unwrap())
            .await
            .unwrap(),
    );
    let db = flashsale_workload::orders::connect(&stack::database_url(), 2)
        .await
        .unwrap();
    let config =
        flashsale_workload::orders::sales::find_current(&db, &SaleRef::new(&ns, SALE).unwrap())
            .await
            .unwrap()
            .expect("the sale's row");
    let evidence = load::gather(
        &db,
        &store,
        &stack::kafka_bootstrap(),
        &config,
        &told,
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    let verdicts = invariants::evaluate(&evidence).verdicts;
    for v in &verdicts {
        println!("{:?} {} {} {}", v.holds, v.id, v.name, v.detail);
    }
    assert!(invariants::all_hold(&verdicts), "invariants: {verdicts:#?}");
    assert!(
        verdicts[5].holds == Some(true),
        "I6 was checked while Redis held the sale"
    );

    wait_for(Duration::from_secs(150), "Completed", || async {
        (state().await? == SaleState::Completed).then_some(())
    })
    .await;
    sampler.abort();
    let most = most_replicas.load(Ordering::Relaxed);
    assert!(
        most > 1,
        "the operator scaled the consumers from lag (most replicas seen: {most})"
    );

    let status = sales.get(SALE).await.unwrap().status.unwrap();
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone()))
            .unwrap()
    };
    assert_eq!(condition("CleanedUp").0, "True");
    assert_eq!(
        condition("Reconciled").0,
        "True",
        "{:?}",
        status.last_reconciliation
    );
    assert_eq!(condition("Warmed").1, "CleanedUp");
    assert_eq!(condition("Degraded").0, "False");
    let events = run(
        "kubectl",
        &[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            &format!("involvedObject.name={SALE}"),
            "-o",
            "jsonpath={.items[*].reason}",
        ],
    );
    let reasons: BTreeSet<&str> = events.split_whitespace().collect();
    for reason in [
        "SaleRowCreated",
        "TopicsCreated",
        "Warmed",
        "Scaled",
        "Live",
        "Ended",
        "FinalReconcileJobStarted",
        "CleanupJobStarted",
        "Completed",
    ] {
        assert!(
            reasons.contains(reason),
            "event {reason} missing: {reasons:?}"
        );
    }
}
