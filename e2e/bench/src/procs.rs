//! The processes a benchmark runs: the release binaries, pinned to a core
//! where the machine allows, killed when dropped, their memory read from /proc.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flashsale_testkit as stack;

/// A release binary of the workspace.
pub fn release_bin(name: &str) -> PathBuf {
    stack::repo_dir().join("target/release").join(name)
}

/// Which cores a process may run on (`taskset -c`), when the machine has
/// more than one.
pub fn pinned(core: &str, program: PathBuf) -> Command {
    if cores() > 1 {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(core).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// The machine's online cores (not this process's affinity: make bench pins
/// the benchmark itself to core 0).
pub fn cores() -> usize {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let count: usize = online
        .trim()
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum();
    count.max(1)
}

/// A child process, killed on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `command` with the stack's addresses in its environment; its
    /// output goes to `$FLASHSALE_LOGS/bench-<name>.log`.
    pub fn start(name: &str, mut command: Command) -> anyhow::Result<Self> {
        let log = PathBuf::from(stack::var("FLASHSALE_LOGS")).join(format!("bench-{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = command
            .env("FLASHSALE_REDIS", stack::redis_url())
            .env("KAFKA_BOOTSTRAP", stack::kafka_bootstrap())
            .env("KUBECONFIG", stack::kubeconfig())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        Ok(Self { child })
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
pub async fn wait_http(url: &str, timeout: Duration) -> anyhow::Result<()> {
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
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{url} did not answer within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
