//! Processes of the workspace that tests, the benchmark and the chaos runner
//! start: killed when dropped, stopped as Kubernetes would, their memory read
//! from /proc.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child process, killed on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `command` with the stack's addresses in its environment (the
    /// command's own settings win); its output goes to `log` (appended).
    pub fn start(log: &Path, mut command: Command) -> std::io::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let set: Vec<std::ffi::OsString> =
            command.get_envs().map(|(k, _)| k.to_os_string()).collect();
        let defaults = [
            ("FLASHSALE_REDIS", crate::redis_url()),
            ("KAFKA_BOOTSTRAP", crate::kafka_bootstrap()),
            (
                "KUBECONFIG",
                crate::kubeconfig().to_string_lossy().into_owned(),
            ),
            ("RUST_LOG", "warn".to_string()),
        ];
        for (name, value) in defaults {
            if !set.iter().any(|k| k == name) {
                command.env(name, value);
            }
        }
        let child = command
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        Ok(Self { child })
    }

    /// SIGKILL, as a crash; the process is reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id (of taskset's exec'd program: taskset replaces itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory now and at its peak, MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map_or(0.0, |kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Stops it as Kubernetes would: SIGTERM, then SIGKILL if it is still
    /// running after 10 s. A consumer stopped this way leaves its Kafka
    /// group, so the group can be deleted right after.
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        for _ in 0..100 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `url` answers 200.
pub async fn wait_http(url: &str, timeout: Duration) -> Result<(), String> {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if client
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("{url} did not answer within {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
