//! `kubectl flashsale` against a real sale: `status` while it is live,
//! `plan` on a valid manifest (its timeline) and on an invalid one (the
//! API server's own words, as `kubectl apply --dry-run=server` prints them),
//! `pause`, `resume` and `restock` saying what changed, and `report` refusing
//! before the end and summing up after it, I1–I6 judged.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use flashsale_operator::model::crd::FlashSale;
use flashsale_testkit as stack;
use kube::Api;

fn plugin(namespace: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-flashsale"))
        .args(["-n", namespace])
        .args(args)
        .env("KUBECONFIG", stack::kubeconfig())
        .output()
        .expect("kubectl-flashsale runs")
}

/// Standard output of a run that must succeed.
fn ok(namespace: &str, args: &[&str]) -> String {
    let out = plugin(namespace, args);
    assert!(
        out.status.success(),
        "kubectl flashsale {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\u{1b}'), "colours off a terminal: {text}");
    println!("$ kubectl flashsale {}\n{text}", args.join(" "));
    text
}

fn contains_all(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_plan_changes_and_report_of_a_real_sale() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let db_url = stack::fresh_database_url().await;
    let _operator = common::Operator::start(&ns, &db_url, "flashsale-operator", "plugin");
    let sales: Api<FlashSale> = Api::namespaced(client, &ns);
    let mut manifest = common::manifest("tiny", &ns, 2, 30);
    manifest["spec"]["stock"] = 5.into();
    manifest["spec"]["warmup"] = serde_json::json!({"leadTime": "1s"});

    // Plan before applying: valid, its timeline from the API server's
    // defaults; then an invalid one, refused in the CRD's words.
    let file = std::env::temp_dir().join(format!("{ns}-tiny.yaml"));
    std::fs::write(&file, serde_json::to_string(&manifest).unwrap()).unwrap();
    let start = manifest["spec"]["window"]["start"]
        .as_str()
        .unwrap()
        .to_string();
    let plan = ok(&ns, &["plan", "-f", file.to_str().unwrap(), "--at", &start]);
    contains_all(
        &plan,
        &[
            &format!("{ns}/tiny: valid"),
            "stock 5 of SKU-1001 in 4 shards, at most 2 per shopper",
            "warm-up: the sale's shards loaded",
            "open: purchases accepted",
            "close: purchases refused with ENDED; the final reconciliation Job runs",
            "cleanup Job",
            ": Live (SoldOut once every unit is sold); next: close at",
            "1..12 replicas",
        ],
    );
    let mut invalid = manifest.clone();
    invalid["spec"]["purchaseLimit"] = 0.into();
    invalid["spec"]["window"]["end"] = invalid["spec"]["window"]["start"].clone();
    let bad = std::env::temp_dir().join(format!("{ns}-bad.yaml"));
    std::fs::write(&bad, serde_json::to_string(&invalid).unwrap()).unwrap();
    let refused = plugin(&ns, &["plan", "-f", bad.to_str().unwrap()]);
    assert!(!refused.status.success());
    let refused = String::from_utf8(refused.stderr).unwrap();
    let kubectl = Command::new("kubectl")
        .args([
            "apply",
            "--dry-run=server",
            "-n",
            &ns,
            "-f",
            bad.to_str().unwrap(),
        ])
        .env("KUBECONFIG", stack::kubeconfig())
        .env("PATH", stack::var("PATH"))
        .output()
        .unwrap();
    let kubectl = String::from_utf8(kubectl.stderr).unwrap();
    println!("plan refused: {refused}kubectl refused: {kubectl}");
    for message in [
        "window.end must be after window.start",
        "spec.purchaseLimit",
    ] {
        assert!(
            kubectl.contains(message),
            "{message:?} not in kubectl's {kubectl}"
        );
        assert!(refused.contains(message), "{message:?} not in {refused}");
    }

    common::create_live(&sales, manifest).await;
    let api = common::ApiProcess::start(&ns, &db_url).await;
    for shopper in ["ann", "bob", "cat"] {
        assert_eq!(api.buy("tiny", shopper).await.0, 202);
    }
    common::wait_for(
        Duration::from_secs(30),
        "the stock in the status",
        || async {
            let stock = sales.get("tiny").await.ok()?.status?.stock?;
            (stock.sold == 3 && stock.shards.len() == 4).then_some(())
        },
    )
    .await;
    let status = ok(&ns, &["status", "tiny"]);
    contains_all(
        &status,
        &[
            &format!("{ns}/tiny  Live"),
            "next: close at",
            "Stock  total 5, sold 3",
            "per shard: #0 ",
            "Consumers  ",
            "Conditions",
            "Warmed",
            "Recent events",
            // From Warm, or straight from new when the warm-up (lead time
            // 1 s) finished after the start.
            "to Live.",
        ],
    );

    contains_all(&ok(&ns, &["pause", "tiny"]), &["spec.paused: false → true"]);
    // The kill switch is the operator's step after the patch: buy once it
    // says the switch is flipped (a purchase before would be sold).
    common::wait_for(Duration::from_secs(10), "the Paused condition", || async {
        let conditions = sales.get("tiny").await.ok()?.status?.conditions;
        conditions
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "True")
            .then_some(())
    })
    .await;
    assert_eq!(api.buy("tiny", "dan").await, (409, "PAUSED".to_string()));
    contains_all(
        &ok(&ns, &["resume", "tiny"]),
        &["spec.paused: true → false"],
    );
    contains_all(&ok(&ns, &["restock", "tiny", "8"]), &["spec.stock: 5 → 8"]);
    contains_all(&ok(&ns, &["pause", "tiny"]), &["spec.paused: false → true"]);
    contains_all(&ok(&ns, &["pause", "tiny"]), &["no change"]);
    ok(&ns, &["resume", "tiny"]);

    let early = plugin(&ns, &["report", "tiny"]);
    assert!(!early.status.success());
    contains_all(
        &String::from_utf8_lossy(&early.stderr),
        &["its report comes once the window is over"],
    );

    // After the end and its final reconciliation: the merchant's summary.
    common::wait_for(
        Duration::from_secs(120),
        "the final reconciliation",
        || async {
            let status = sales.get("tiny").await.ok()?.status?;
            let end = sales.get("tiny").await.ok()?.spec.window.end;
            let reconciled = status.last_reconciliation?.time.0 >= end.0;
            (reconciled && status.summary.is_some_and(|s| s.sold == 3)).then_some(())
        },
    )
    .await;
    let report = ok(&ns, &["report", "tiny"]);
    contains_all(
        &report,
        &[
            "sold 3 of 8 units in 3 orders",
            "back in stock: cancelled 0, payment timed out 0, failed 0",
            "Per minute (units accepted)",
            "I1 no oversell       held",
            "I2 no over-limit     held",
            "I3 no lost order     held",
            "I6 convergence       held",
            "I5 sell-through      not judged",
        ],
    );
}
