//! The processes a benchmark runs: the release binaries, pinned to a core
//! where the machine allows, killed when dropped, their memory read from /proc.

use std::path::PathBuf;
use std::process::Command;

use flashsale_testkit as stack;

pub use stack::procs::{Proc, wait_http};

/// Where a benchmark process logs: `$FLASHSALE_LOGS/bench-<name>.log`.
/// `flashsale api` flags turning every rate limit off: a benchmark's storm is
/// one host measuring the API, not its limits.
pub const NO_RATE_LIMITS: [&str; 6] = [
    "--rate-limit-global",
    "0",
    "--rate-limit-shopper",
    "0",
    "--rate-limit-ip",
    "0",
];

pub fn log(name: &str) -> PathBuf {
    PathBuf::from(stack::var("FLASHSALE_LOGS")).join(format!("bench-{name}.log"))
}

/// Starts the release API pinned to core 1, serving the benchmark's
/// namespace on `port` (its internal port `port + 10`) with every rate limit
/// off, shoppers proven by HS256 tokens of `jwt_secret_file`, and `flags`;
/// returns once it is ready and its catalog loaded.
pub async fn start_api(
    name: &str,
    port: u16,
    jwt_secret_file: &std::path::Path,
    flags: &[&std::ffi::OsStr],
) -> anyhow::Result<Proc> {
    let mut api = pinned("1", release_bin("flashsale"));
    api.args([
        "api",
        "--namespace",
        crate::sale::NAMESPACE,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--internal-listen",
        &format!("127.0.0.1:{}", port + 10),
    ])
    .args(NO_RATE_LIMITS)
    .arg("--jwt-hs256-secret-file")
    .arg(jwt_secret_file)
    .args(flags)
    .env("DATABASE_URL", stack::database_url());
    let api = Proc::start(&log(name), api)?;
    wait_http(
        &format!("http://127.0.0.1:{}/readyz", port + 10),
        std::time::Duration::from_secs(30),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    // The catalog's first refresh.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    Ok(api)
}

/// Starts a release consumer of `config`'s sale pinned to core 1, its
/// output in the `name` log.
pub fn start_consumer(
    name: &str,
    config: &flashsale_workload::domain::sale::SaleConfig,
) -> anyhow::Result<Proc> {
    let mut consumer = pinned("1", release_bin("flashsale"));
    consumer
        .args([
            "consumer",
            "--namespace",
            &config.sale.namespace,
            "--sale",
            &config.sale.name,
        ])
        .env("DATABASE_URL", stack::database_url());
    Ok(Proc::start(&log(name), consumer)?)
}

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
