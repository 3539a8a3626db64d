//! The node kinds' faults (a drain, a stopped kubelet) and what they need
//! first: both nodes up, Ready and schedulable.

use std::time::{Duration, Instant};

use flashsale_testkit as stack;

use crate::faults::{self, Injected};

/// Both nodes of the replicated topology up and taking pods: a runner
/// killed mid-run may have left one cordoned or its kubelet stopped.
pub fn make_whole() -> anyhow::Result<()> {
    for index in ["1", "2"] {
        let up = std::process::Command::new(stack::repo_dir().join("e2e/stack/node.sh"))
            .arg("up")
            .env("NODE_INDEX", index)
            .env("FLASHSALE_RUN", stack::run_dir())
            .output()?;
        anyhow::ensure!(
            up.status.success(),
            "node {index} is not up (the node kinds need STACK_TOPOLOGY=replicated): {}",
            String::from_utf8_lossy(&up.stderr).trim()
        );
    }
    uncordon_all();
    Ok(())
}

/// Every node uncordoned (also what a killed runner's drain left).
pub fn uncordon_all() {
    for node in stack::kubectl(&["get", "nodes", "-o", "name"]).lines() {
        stack::kubectl(&["uncordon", node]);
    }
}

/// `kubectl drain` of `node`: evictions through the API, which honour the
/// PodDisruptionBudgets. Returns once every pod left, with what it said;
/// the node is uncordoned when the guard goes.
pub async fn drain(node: &str) -> anyhow::Result<(Injected, String)> {
    let guard = {
        let node = node.to_string();
        Injected::register(move || stack::kubectl(&["uncordon", &node]))
    };
    let node = node.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args(["drain", &node, "--ignore-daemonsets"])
            .args(["--delete-emptydir-data", "--timeout=120s"])
            .env("KUBECONFIG", stack::kubeconfig())
            .env("PATH", stack::var("PATH"))
            .output()
    })
    .await??;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(out.status.success(), "kubectl drain failed: {said}");
    let evicted = said.lines().filter(|l| l.ends_with(" evicted")).count();
    Ok((guard, format!("{evicted} pods evicted")))
}

/// `node`'s kubelet stopped (its containers run on); started again, and
/// waited for until the node is Ready, when the guard goes.
pub fn stop_kubelet(node: &str) -> Injected {
    let guard = {
        let node = node.to_string();
        Injected::register(move || faults::restart_stack("node.sh", &["kubelet_start", &node]))
    };
    faults::restart_stack("node.sh", &["kubelet_stop", node]);
    guard
}

/// Waits `hold` while `node`'s kubelet is stopped; when the control plane
/// first called it not Ready, seconds after the stop (`None`: not within
/// `hold`).
pub async fn watch_not_ready(node: &str, hold: Duration) -> Option<f64> {
    let began = Instant::now();
    let mut seen = None;
    while began.elapsed() < hold {
        if seen.is_none() && !ready(node).await {
            seen = Some(began.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    seen
}

/// Whether `node` is Ready within `timeout`.
pub async fn ready_within(node: &str, timeout: Duration) -> bool {
    let began = Instant::now();
    while !ready(node).await {
        if began.elapsed() > timeout {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    true
}

/// Whether the Node object says Ready (kubectl, off the async threads).
async fn ready(node: &str) -> bool {
    let node = node.to_string();
    tokio::task::spawn_blocking(move || {
        stack::kubectl(&[
            "get",
            "node",
            &node,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ])
        .trim()
            == "True"
    })
    .await
    .unwrap_or(false)
}
