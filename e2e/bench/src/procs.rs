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
