//! Every rule apply time can check is checked by the API server: each invalid
//! manifest is refused by `kubectl apply` with a message naming the field.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use flashsale_testkit as stack;
use serde_json::{Value, json};

fn kubectl_apply(manifest: &Value) -> (bool, String) {
    let mut child = Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", stack::kubeconfig())
        .env("PATH", stack::var("PATH"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs (it is on the PATH that .run/env sets)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Sets `path` (dot-separated under the manifest) to `value`; `null` removes it.
fn with(mut manifest: Value, path: &str, value: Value) -> Value {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap();
    let mut node = &mut manifest;
    for part in parts {
        if node.get(part).is_none() {
            node[part] = json!({});
        }
        node = node.get_mut(part).unwrap();
    }
    if value.is_null() {
        node.as_object_mut().unwrap().remove(last);
    } else {
        node[last] = value;
    }
    manifest
}

#[tokio::test]
async fn invalid_manifests_are_refused_with_the_field_named() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let base = common::manifest("valid", &ns, 3600, 600);
    let start = base["spec"]["window"]["start"].clone();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "missing sku",
            with(base.clone(), "spec.sku", Value::Null),
            "spec.sku",
        ),
        (
            "empty sku",
            with(base.clone(), "spec.sku", json!("")),
            "spec.sku",
        ),
        (
            "sku too long",
            with(base.clone(), "spec.sku", json!("X".repeat(65))),
            "spec.sku",
        ),
        (
            "negative stock",
            with(base.clone(), "spec.stock", json!(-1)),
            "spec.stock",
        ),
        (
            "huge stock",
            with(base.clone(), "spec.stock", json!(10_000_001)),
            "spec.stock",
        ),
        (
            "stock not a number",
            with(base.clone(), "spec.stock", json!("ten")),
            "spec.stock",
        ),
        (
            "missing window",
            with(base.clone(), "spec.window", Value::Null),
            "spec.window",
        ),
        (
            "end before start",
            with(
                base.clone(),
                "spec.window.end",
                json!("2020-01-01T00:00:00Z"),
            ),
            "window.end must be after window.start",
        ),
        (
            "end equals start",
            with(base.clone(), "spec.window.end", start.clone()),
            "window.end must be after window.start",
        ),
        (
            "start not a time",
            with(base.clone(), "spec.window.start", json!("tomorrow")),
            "spec.window.start",
        ),
        (
            "limit zero",
            with(base.clone(), "spec.purchaseLimit", json!(0)),
            "spec.purchaseLimit",
        ),
        (
            "limit too high",
            with(base.clone(), "spec.purchaseLimit", json!(1001)),
            "spec.purchaseLimit",
        ),
        (
            "zero shards",
            with(base.clone(), "spec.sharding.shards", json!(0)),
            "spec.sharding.shards",
        ),
        (
            "too many shards",
            with(base.clone(), "spec.sharding.shards", json!(1025)),
            "spec.sharding.shards",
        ),
        (
            "payment timeout beyond the cleanup",
            with(base.clone(), "spec.payment.timeout", json!("45m")),
            "payment.timeout must not exceed cleanup.after",
        ),
        (
            "lead time unparseable",
            with(base.clone(), "spec.warmup.leadTime", json!("soon")),
            "spec.warmup.leadTime",
        ),
        (
            "lead time negative",
            with(base.clone(), "spec.warmup.leadTime", json!("-5m")),
            "warmup.leadTime",
        ),
        (
            "lead time too long",
            with(base.clone(), "spec.warmup.leadTime", json!("200h")),
            "warmup.leadTime",
        ),
        (
            "cleanup unparseable",
            with(base.clone(), "spec.cleanup.after", json!("later")),
            "spec.cleanup.after",
        ),
        (
            "cleanup too long",
            with(base.clone(), "spec.cleanup.after", json!("1000h")),
            "cleanup.after",
        ),
        (
            "purchase tokens good for under a second",
            with(base.clone(), "spec.antiBot.tokenTtl", json!("500ms")),
            "antiBot.tokenTtl must be between 1s and 10m",
        ),
        (
            "purchase tokens good for an hour",
            with(base.clone(), "spec.antiBot.tokenTtl", json!("1h")),
            "antiBot.tokenTtl must be between 1s and 10m",
        ),
        (
            "degradation.redisDown unknown",
            with(base.clone(), "spec.degradation.redisDown", json!("memory")),
            "spec.degradation.redisDown",
        ),
        (
            "database mode over its stock bound",
            with(
                with(base.clone(), "spec.stock", json!(10_001)),
                "spec.degradation.redisDown",
                json!("database"),
            ),
            "degradation.redisDown: database is allowed up to 10000 units",
        ),
        (
            "risk with consumers scaling to zero",
            with(
                with(base.clone(), "spec.risk", json!({})),
                "spec.consumers.minReplicas",
                json!(0),
            ),
            "spec.risk needs consumers.minReplicas of at least 1",
        ),
        (
            "risk.action unknown",
            with(base.clone(), "spec.risk.action", json!("ban")),
            "spec.risk.action",
        ),
        (
            "risk webhook not over http",
            with(
                base.clone(),
                "spec.risk.webhook",
                json!({"url": "ftp://risk.shop.example/score",
                       "secretRef": {"name": "risk-hook", "key": "secret"}}),
            ),
            "risk.webhook.url must be an http:// or https:// URL",
        ),
        (
            "risk share over 100 %",
            with(
                base.clone(),
                "spec.risk.rules.cancelledShare",
                json!({"weight": 40, "overPercent": 150, "minOrders": 3}),
            ),
            "spec.risk.rules.cancelledShare.overPercent",
        ),
        (
            "risk rule waiting over 10m",
            with(
                base.clone(),
                "spec.risk.rules.paidWithin",
                json!({"weight": 60, "within": "11m"}),
            ),
            "a risk rule's within must be between 0s and 10m",
        ),
        (
            "admission.mode unknown",
            with(base.clone(), "spec.admission.mode", json!("lottery")),
            "spec.admission.mode",
        ),
        (
            "admission.prequeue over a day",
            with(base.clone(), "spec.admission.prequeue", json!("25h")),
            "admission.prequeue must be between 0s and 24h",
        ),
        (
            "admission.ratePerSecond zero",
            with(base.clone(), "spec.admission.ratePerSecond", json!(0)),
            "spec.admission.ratePerSecond",
        ),
        (
            "a challenge without a queue",
            with(
                base.clone(),
                "spec.admission.challenge",
                json!({"kind": "proofOfWork"}),
            ),
            "admission.challenge needs mode: queue",
        ),
        (
            "challenge too hard for a phone",
            with(
                with(base.clone(), "spec.admission.mode", json!("queue")),
                "spec.admission.challenge",
                json!({"kind": "proofOfWork", "difficulty": 29}),
            ),
            "spec.admission.challenge.difficulty",
        ),
        (
            "challenge ceiling below its difficulty",
            with(
                with(base.clone(), "spec.admission.mode", json!("queue")),
                "spec.admission.challenge",
                json!({"kind": "proofOfWork", "difficulty": 20, "maxDifficulty": 19}),
            ),
            "admission.challenge.maxDifficulty must be at least its difficulty",
        ),
        (
            "antiBot.required not a boolean",
            with(base.clone(), "spec.antiBot.required", json!("yes")),
            "spec.antiBot.required",
        ),
        (
            "payment timeout zero",
            with(base.clone(), "spec.payment.timeout", json!("0s")),
            "payment.timeout",
        ),
        (
            "payment timeout too short",
            with(base.clone(), "spec.payment.timeout", json!("500ms")),
            "payment.timeout",
        ),
        (
            "reconcile too often",
            with(base.clone(), "spec.reconcile.interval", json!("5s")),
            "reconcile.interval",
        ),
        (
            "reconcile in days",
            with(base.clone(), "spec.reconcile.interval", json!("2d")),
            "spec.reconcile.interval",
        ),
        (
            "min replicas negative",
            with(base.clone(), "spec.consumers.minReplicas", json!(-1)),
            "spec.consumers.minReplicas",
        ),
        (
            "max replicas zero",
            with(base.clone(), "spec.consumers.maxReplicas", json!(0)),
            "spec.consumers.maxReplicas",
        ),
        (
            "max replicas too high",
            with(base.clone(), "spec.consumers.maxReplicas", json!(300)),
            "spec.consumers.maxReplicas",
        ),
        (
            "min above max",
            with(
                with(base.clone(), "spec.consumers.minReplicas", json!(5)),
                "spec.consumers.maxReplicas",
                json!(3),
            ),
            "consumers.minReplicas must not exceed consumers.maxReplicas",
        ),
        (
            "lag per replica zero",
            with(base.clone(), "spec.consumers.lagPerReplica", json!(0)),
            "spec.consumers.lagPerReplica",
        ),
        (
            "max lag below lag per replica",
            with(base.clone(), "spec.consumers.maxLag", json!(10)),
            "consumers.maxLag must be at least consumers.lagPerReplica",
        ),
        (
            "poll too fast",
            with(base.clone(), "spec.consumers.pollInterval", json!("10ms")),
            "consumers.pollInterval",
        ),
        (
            "poll too slow",
            with(base.clone(), "spec.consumers.pollInterval", json!("10m")),
            "consumers.pollInterval",
        ),
        (
            "stabilization too long",
            with(
                base.clone(),
                "spec.consumers.scaleDownStabilization",
                json!("2h"),
            ),
            "consumers.scaleDownStabilization",
        ),
        (
            "paused not a boolean",
            with(base.clone(), "spec.paused", json!("yes")),
            "spec.paused",
        ),
        (
            "name too long",
            with(base.clone(), "metadata.name", json!("a".repeat(41))),
            "metadata.name",
        ),
        (
            "name with a dot",
            with(base.clone(), "metadata.name", json!("drop.v2")),
            "metadata.name",
        ),
        (
            "unknown field",
            with(base.clone(), "spec.discount", json!(10)),
            "spec.discount",
        ),
    ];
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for (what, manifest, field) in &cases {
        let (ok, output) = kubectl_apply(manifest);
        if ok || !output.contains(field) {
            failures.push(format!(
                "{what}: accepted={ok}, expected {field:?} in: {output}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // Transition rules need an existing sale.
    let (ok, output) = kubectl_apply(&base);
    assert!(ok, "the valid manifest is accepted: {output}");
    let changes = [
        (
            "sku changed",
            with(base.clone(), "spec.sku", json!("SKU-OTHER")),
            "sku is immutable",
        ),
        (
            "shards changed",
            with(base.clone(), "spec.sharding.shards", json!(8)),
            "sharding.shards is immutable",
        ),
        (
            "limit lowered",
            with(base.clone(), "spec.purchaseLimit", json!(1)),
            "purchaseLimit may grow but never shrink",
        ),
    ];
    for (what, manifest, field) in changes {
        let (ok, output) = kubectl_apply(&manifest);
        assert!(
            !ok && output.contains(field),
            "{what}: accepted={ok}: {output}"
        );
    }
    let (ok, output) = kubectl_apply(&with(base.clone(), "spec.purchaseLimit", json!(3)));
    assert!(ok, "the limit may grow: {output}");
    let base = with(base, "spec.purchaseLimit", json!(3));

    // Once the sale has opened, its start stays and its end only grows.
    let status = Command::new("kubectl")
        .args([
            "patch",
            "fs",
            "valid",
            "-n",
            &ns,
            "--subresource=status",
            "--type=merge",
        ])
        .args(["-p", r#"{"status":{"state":"Live"}}"#])
        .env("KUBECONFIG", stack::kubeconfig())
        .env("PATH", stack::var("PATH"))
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let start = base["spec"]["window"]["start"]
        .as_str()
        .unwrap()
        .to_string();
    let end = base["spec"]["window"]["end"].as_str().unwrap().to_string();
    let shifted = |t: &str, secs: i64| {
        (chrono::DateTime::parse_from_rfc3339(t).unwrap() + chrono::Duration::seconds(secs))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let live_changes = [
        (
            "start moved while live",
            with(
                base.clone(),
                "spec.window.start",
                json!(shifted(&start, 60)),
            ),
            "window.start cannot move once the sale has opened",
        ),
        (
            "end brought forward while live",
            with(base.clone(), "spec.window.end", json!(shifted(&end, -60))),
            "window.end may only be extended once the sale has opened",
        ),
    ];
    for (what, manifest, message) in live_changes {
        let (ok, output) = kubectl_apply(&manifest);
        assert!(
            !ok && output.contains(message),
            "{what}: accepted={ok}: {output}"
        );
    }
    let (ok, output) = kubectl_apply(&with(
        base.clone(),
        "spec.window.end",
        json!(shifted(&end, 600)),
    ));
    assert!(ok, "the end may be extended while live: {output}");
}

/// Every manifest in `examples/` is one the API server accepts as it is
/// (a server-side dry run: unknown fields are refused too).
#[tokio::test]
async fn every_example_is_accepted() {
    let client = common::client().await;
    common::install_crd(&client).await;
    let ns = common::namespace(&client).await;
    let mut examples: Vec<_> = std::fs::read_dir(stack::repo_dir().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 5, "{examples:?}");
    for example in examples {
        let out = Command::new("kubectl")
            .args(["apply", "--dry-run=server", "-n", &ns, "-f"])
            .arg(&example)
            .env("KUBECONFIG", stack::kubeconfig())
            .env("PATH", stack::var("PATH"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            example.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
