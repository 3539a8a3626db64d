//! How the cores were shared during a storm: CPU time by part of the stack
//! and by core, read from /proc before and after, as cores used and as
//! microseconds per accepted purchase.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

/// CPU time by group and by core at one instant, in clock ticks.
pub struct Snapshot {
    at: Instant,
    groups: BTreeMap<&'static str, u64>,
    /// Busy and stolen ticks of each core.
    cores: Vec<CoreTicks>,
}

/// One part of the stack's share of a storm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupShare {
    /// The part ("API", "Kafka", ...).
    pub name: String,
    /// Cores it kept busy on average.
    pub cores: f64,
    /// Its CPU time per accepted purchase, µs.
    pub us_per_purchase: f64,
}

/// How the machine's cores were used during a storm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuShare {
    /// Busy fraction of each core (0..1).
    pub busy_per_core: Vec<f64>,
    /// Fraction of each core the hypervisor gave to other machines (steal):
    /// a run with much of it measured a machine that was not all ours.
    pub stolen_per_core: Vec<f64>,
    /// The parts, busiest first; "other" is what no part claims (short-lived
    /// processes, interrupts).
    pub groups: Vec<GroupShare>,
    /// All cores' busy time per accepted purchase, µs.
    pub total_us_per_purchase: f64,
}

/// The part of the stack a process belongs to, from its command name and
/// command line; `me` is the benchmark's pid, `named` the processes it
/// started, each with its part ("API", "consumer").
fn group(
    pid: u32,
    comm: &str,
    cmdline: &str,
    me: u32,
    named: &[(u32, &'static str)],
) -> &'static str {
    if pid == me {
        "load generator"
    } else if let Some((_, name)) = named.iter().find(|(p, _)| *p == pid) {
        name
    } else if comm == "java" && cmdline.contains("kafka.Kafka") {
        "Kafka"
    } else if comm == "redis-server" {
        "Redis"
    } else if comm == "postgres" {
        "PostgreSQL"
    } else if comm.starts_with("kube") || comm == "etcd" || comm.starts_with("containerd") {
        "Kubernetes"
    } else if cmdline.is_empty() {
        "kernel threads"
    } else {
        "other"
    }
}

/// A /proc/<pid>/stat line's command name, its user + system ticks, and
/// those of its children that exited and were waited for.
#[derive(Debug, PartialEq, Eq)]
struct Stat<'a> {
    comm: &'a str,
    ticks: u64,
    exited_children_ticks: u64,
}

/// Parses a /proc/<pid>/stat line; the name sits in parentheses and may
/// itself hold spaces or parentheses.
fn parse_stat(stat: &str) -> Option<Stat<'_>> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // After the name, from field 3 of the line (state): utime is field 14,
    // stime 15, cutime 16, cstime 17.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        comm: &stat[open + 1..close],
        ticks: field(14)? + field(15)?,
        exited_children_ticks: field(16)? + field(17)?,
    })
}

/// One core's ticks from /proc/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoreTicks {
    /// Running anything (user, nice, system, irq, softirq).
    busy: u64,
    /// Wanting to run while the hypervisor ran another machine (steal).
    stolen: u64,
}

/// The ticks of each `cpuN` line of /proc/stat.
fn parse_cores(proc_stat: &str) -> Vec<CoreTicks> {
    proc_stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            // user nice system idle iowait irq softirq steal; guest time
            // (what follows) is already counted in user and nice.
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(8)
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            let field = |i: usize| v.get(i).copied().unwrap_or(0);
            CoreTicks {
                busy: field(0) + field(1) + field(2) + field(5) + field(6),
                stolen: field(7),
            }
        })
        .collect()
}

/// Reads every process's CPU time and every core's busy time now, the
/// processes of `named` counted under their parts; the time of the
/// benchmark's children that exited (redis-benchmark) counts as
/// `exited_children`.
pub fn snapshot(named: &[(u32, &'static str)], exited_children: &'static str) -> Snapshot {
    let me = std::process::id();
    let mut groups = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default();
        if let Some(stat) = parse_stat(&stat) {
            *groups
                .entry(group(pid, stat.comm, &cmdline, me, named))
                .or_insert(0) += stat.ticks;
            if pid == me {
                *groups.entry(exited_children).or_insert(0) += stat.exited_children_ticks;
            }
        }
    }
    let cores = parse_cores(&std::fs::read_to_string("/proc/stat").unwrap_or_default());
    Snapshot {
        at: Instant::now(),
        groups,
        cores,
    }
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux).
fn ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The share of each part between two snapshots, `purchases` accepted in
/// between.
pub fn share(before: &Snapshot, after: &Snapshot, purchases: usize) -> CpuShare {
    let hz = ticks_per_sec();
    let secs = (after.at - before.at).as_secs_f64().max(1e-3);
    let purchases = purchases.max(1) as f64;
    let per_core = |ticks: fn(&CoreTicks) -> u64| -> Vec<f64> {
        after
            .cores
            .iter()
            .zip(&before.cores)
            .map(|(a, b)| ticks(a).saturating_sub(ticks(b)) as f64 / hz / secs)
            .collect()
    };
    let busy_per_core = per_core(|c| c.busy);
    let stolen_per_core = per_core(|c| c.stolen);
    let total: f64 = busy_per_core.iter().sum();
    let mut groups: Vec<GroupShare> = after
        .groups
        .iter()
        .map(|(name, ticks)| {
            let used = ticks.saturating_sub(before.groups.get(name).copied().unwrap_or(0));
            (name.to_string(), used as f64 / hz / secs)
        })
        .filter(|(name, _)| name != "other")
        .map(|(name, cores)| GroupShare {
            name,
            cores,
            us_per_purchase: cores * secs * 1e6 / purchases,
        })
        // Parts under half a percent of a core count as "other".
        .filter(|g| g.cores >= 0.005)
        .collect();
    let claimed: f64 = groups.iter().map(|g| g.cores).sum();
    let other = (total - claimed).max(0.0);
    if other >= 0.005 {
        // What no part claims: short-lived processes, interrupts.
        groups.push(GroupShare {
            name: "other".into(),
            cores: other,
            us_per_purchase: other * secs * 1e6 / purchases,
        });
    }
    groups.sort_by(|a, b| b.cores.total_cmp(&a.cores));
    CpuShare {
        busy_per_core,
        stolen_per_core,
        groups,
        total_us_per_purchase: total * secs * 1e6 / purchases,
    }
}

/// The CPU per purchase of the part `name`, µs (0 when it used none).
pub fn part(share: &CpuShare, name: &str) -> f64 {
    share
        .groups
        .iter()
        .find(|g| g.name == name)
        .map_or(0.0, |g| g.us_per_purchase)
}

/// One line: "core 0 81% (stolen 2%), core 1 96% (stolen 0%); API 0.63 cores (63 µs/purchase), ...".
pub fn render(share: &CpuShare) -> String {
    let cores: Vec<String> = share
        .busy_per_core
        .iter()
        .zip(&share.stolen_per_core)
        .enumerate()
        .map(|(i, (busy, stolen))| {
            format!(
                "core {i} {:.0}% (stolen {:.0}%)",
                busy * 100.0,
                stolen * 100.0
            )
        })
        .collect();
    let groups: Vec<String> = share
        .groups
        .iter()
        .map(|g| {
            format!(
                "{} {:.2} cores ({:.0} µs)",
                g.name, g.cores, g.us_per_purchase
            )
        })
        .collect();
    format!(
        "{}; {:.0} µs of CPU per purchase: {}",
        cores.join(", "),
        share.total_us_per_purchase,
        groups.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_awkward_names() {
        let line = "42 (tokio (worker) 1) S 1 42 42 0 -1 4194560 100 0 0 0 250 70 9 4 20 0 9 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                comm: "tokio (worker) 1",
                ticks: 320,
                exited_children_ticks: 13
            })
        );
        assert_eq!(parse_stat("42 (short) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn counts_busy_and_stolen_ticks_per_core_without_idle_iowait_or_guest_twice() {
        let stat = "cpu  10 0 10 500 5 0 0 0 0 0\n\
                    cpu0 6 0 4 200 5 1 1 0 0 0\n\
                    cpu1 4 0 6 300 0 0 0 7 3 0\n\
                    intr 123\n";
        assert_eq!(
            parse_cores(stat),
            vec![
                CoreTicks {
                    busy: 12,
                    stolen: 0
                },
                CoreTicks {
                    busy: 10,
                    stolen: 7
                }
            ]
        );
    }

    #[test]
    fn shares_cores_and_microseconds_per_purchase() {
        let at = Instant::now();
        let before = Snapshot {
            at,
            groups: BTreeMap::from([("API", 1000), ("Kafka", 500), ("other", 7)]),
            cores: vec![
                CoreTicks {
                    busy: 10_000,
                    stolen: 0,
                },
                CoreTicks {
                    busy: 20_000,
                    stolen: 50,
                },
            ],
        };
        let hz = ticks_per_sec();
        let ticks = |cores: f64| (cores * 2.0 * hz) as u64;
        let after = Snapshot {
            at: at + std::time::Duration::from_secs(2),
            groups: BTreeMap::from([
                ("API", 1000 + ticks(0.6)),
                ("Kafka", 500 + ticks(0.4)),
                ("other", 7 + ticks(0.3)),
                ("idle part", 0),
            ]),
            cores: vec![
                CoreTicks {
                    busy: 10_000 + ticks(0.75),
                    stolen: 0,
                },
                CoreTicks {
                    busy: 20_000 + ticks(0.95),
                    stolen: 50 + ticks(0.05),
                },
            ],
        };
        let share = share(&before, &after, 20_000);
        let rounded = |v: f64| (v * 100.0).round() / 100.0;
        assert_eq!(
            share
                .busy_per_core
                .iter()
                .map(|&b| rounded(b))
                .collect::<Vec<_>>(),
            vec![0.75, 0.95]
        );
        let parts: Vec<(&str, f64, f64)> = share
            .groups
            .iter()
            .map(|g| (g.name.as_str(), rounded(g.cores), g.us_per_purchase.round()))
            .collect();
        // "other" is what the named parts leave of the cores' busy time.
        assert_eq!(
            parts,
            vec![
                ("other", 0.7, 70.0),
                ("API", 0.6, 60.0),
                ("Kafka", 0.4, 40.0)
            ]
        );
        assert_eq!(share.total_us_per_purchase.round(), 170.0);
        // Stolen time is no part's and not the machine's busy time.
        assert_eq!(
            share
                .stolen_per_core
                .iter()
                .map(|&s| rounded(s))
                .collect::<Vec<_>>(),
            vec![0.0, 0.05]
        );
    }

    #[test]
    fn groups_processes_by_part_of_the_stack() {
        let cases = [
            (7, "flashsale-bench", "x", "load generator"),
            (8, "flashsale", "x", "API"),
            (10, "flashsale", "x", "consumer"),
            (
                9,
                "java",
                "java -cp lib/* kafka.Kafka server.properties",
                "Kafka",
            ),
            (9, "java", "java -jar other.jar", "other"),
            (9, "redis-server", "redis-server *:6379", "Redis"),
            (9, "postgres", "postgres: writer", "PostgreSQL"),
            (9, "kube-apiserver", "kube-apiserver --etcd", "Kubernetes"),
            (9, "etcd", "etcd --data-dir", "Kubernetes"),
            (9, "containerd-shim", "containerd-shim -id", "Kubernetes"),
            (9, "kworker/0:1", "", "kernel threads"),
            (9, "python3", "python3 x.py", "other"),
        ];
        for (pid, comm, cmdline, want) in cases {
            assert_eq!(
                group(pid, comm, cmdline, 7, &[(8, "API"), (10, "consumer")]),
                want,
                "{comm}"
            );
        }
    }
}
