//! What the benchmark ran on, for the report.

use std::process::Command;

use serde::Serialize;

/// The machine and the versions of everything measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Online cores.
    pub cores: usize,
    /// Memory, GiB.
    pub memory_gib: f64,
    /// Kernel.
    pub kernel: String,
    /// How the cores were shared.
    pub pinning: String,
    /// Versions of the parts.
    pub versions: Vec<(String, String)>,
    /// Pods already running on the cluster outside kube-system when the run
    /// started (a demo left up, say): they compete for the same two cores.
    pub other_pods: Vec<String>,
}

fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or_default().trim().to_string()
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// Reads the machine.
pub fn describe(pinning: &str) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    Machine {
        cpu,
        cores: super::procs::cores(),
        memory_gib,
        kernel: first_line("uname", &["-r"]),
        pinning: pinning.to_string(),
        versions: vec![
            ("flashsale".into(), env!("CARGO_PKG_VERSION").into()),
            ("rustc".into(), first_line("rustc", &["--version"])),
            ("redis".into(), first_line("redis-server", &["--version"])),
            (
                "postgresql".into(),
                first_line("/usr/lib/postgresql/15/bin/postgres", &["--version"]),
            ),
            ("kafka".into(), "4.1.1 (KRaft, one node)".into()),
            ("kubernetes".into(), "v1.34.4 (one node)".into()),
        ],
        other_pods: Vec::new(),
    }
}

/// Pods running outside kube-system, as `namespace/name`.
pub async fn other_pods() -> anyhow::Result<Vec<String>> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::all(flashsale_testkit::kube_client().await);
    Ok(pods
        .list(&Default::default())
        .await?
        .into_iter()
        .filter_map(|pod| {
            let ns = pod.metadata.namespace?;
            (ns != "kube-system").then(|| format!("{ns}/{}", pod.metadata.name.unwrap_or_default()))
        })
        .collect())
}
