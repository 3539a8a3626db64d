//! What each part of the stack holds at one instant (memory, open files) and
//! what the sale's data takes (PostgreSQL's orders, Kafka's log, Redis's
//! memory), for the soak's samples.

use std::collections::BTreeMap;
use std::path::Path;

use flashsale_testkit as stack;
use flashsale_workload::redis::store::SaleStore;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// One part's hold on the machine.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Footprint {
    /// Resident memory, MiB: RSS for a part of one process, the sum of the
    /// proportional set sizes (PSS) for a part of several (PostgreSQL's
    /// backends share its buffers; RSS would count them once per backend).
    pub memory_mib: f64,
    /// Open file descriptors (sockets included).
    pub fds: u64,
    /// Its processes.
    pub processes: usize,
}

/// The stack's data at one instant.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The orders table's heap, MiB.
    pub orders_table_mib: f64,
    /// Its indexes, MiB.
    pub orders_indexes_mib: f64,
    /// Its live rows (the statistics' estimate).
    pub orders_live: i64,
    /// Its dead rows autovacuum has yet to reclaim (the statistics' estimate).
    pub orders_dead: i64,
    /// The whole database, MiB.
    pub database_mib: f64,
    /// The broker's log directory on disk, MiB.
    pub kafka_log_mib: f64,
    /// Redis's `used_memory`, MiB.
    pub redis_used_mib: f64,
    /// Units the sale holds in the database (its `sold`: orders awaiting
    /// payment or paid), whose reservations Redis keeps.
    pub units_held: i64,
}

/// A part: its name and how to find its processes at each sample.
pub enum Part {
    /// One process.
    Process(&'static str, u32),
    /// A process and its children (PostgreSQL's postmaster and backends,
    /// which come and go).
    Tree(&'static str, u32),
}

/// The soak's parts: the API and the consumer it started, and the stack's
/// Redis (its pid from `INFO`), Kafka and PostgreSQL (their pid files).
pub async fn stack_parts(store: &SaleStore, api: u32, consumer: u32) -> anyhow::Result<Vec<Part>> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut store.conn())
        .await?;
    let redis = info_field(&info, "process_id")
        .ok_or_else(|| anyhow::anyhow!("Redis's INFO has no process_id"))?;
    let pid_file = |name: &str| {
        stack::stack_pid(name)
            .ok_or_else(|| anyhow::anyhow!("no pid recorded for {name}: is the stack up?"))
    };
    Ok(vec![
        Part::Process("API", api),
        Part::Process("consumer", consumer),
        Part::Process("Redis", redis as u32),
        Part::Process("Kafka", pid_file("kafka")?),
        Part::Tree("PostgreSQL", pid_file("postgres")?),
    ])
}

/// Each part's footprint now; a part whose process is gone shows none.
pub fn sample(parts: &[Part]) -> BTreeMap<String, Footprint> {
    parts
        .iter()
        .map(|part| match part {
            Part::Process(name, pid) => (name.to_string(), of(&[*pid], false)),
            Part::Tree(name, pid) => {
                let mut pids = vec![*pid];
                pids.extend(children(*pid));
                (name.to_string(), of(&pids, true))
            }
        })
        .collect()
}

fn of(pids: &[u32], proportional: bool) -> Footprint {
    let mut footprint = Footprint::default();
    for pid in pids {
        let proc = Path::new("/proc").join(pid.to_string());
        let kib = if proportional {
            std::fs::read_to_string(proc.join("smaps_rollup"))
                .ok()
                .and_then(|t| kib_field(&t, "Pss:"))
        } else {
            std::fs::read_to_string(proc.join("status"))
                .ok()
                .and_then(|t| kib_field(&t, "VmRSS:"))
        };
        let Some(kib) = kib else { continue };
        footprint.memory_mib += kib as f64 / 1024.0;
        footprint.fds += std::fs::read_dir(proc.join("fd")).map_or(0, |d| d.count() as u64);
        footprint.processes += 1;
    }
    footprint
}

/// The processes whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            (parent_of(&stat)? == parent).then_some(pid)
        })
        .collect()
}

/// The parent pid of a /proc/<pid>/stat line (after the parenthesised name:
/// state, then ppid).
fn parent_of(stat: &str) -> Option<u32> {
    let close = stat.rfind(')')?;
    stat.get(close + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A `Name:   123 kB` line's number.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A `name:value` line of Redis's INFO.
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

/// The stack's data now.
pub async fn storage(db: &PgPool, store: &SaleStore, sale_id: Uuid) -> anyhow::Result<Storage> {
    let mib = |bytes: i64| bytes as f64 / (1024.0 * 1024.0);
    let (table, indexes, live, dead, database): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT pg_table_size('orders'), pg_indexes_size('orders'),
                n_live_tup, n_dead_tup, pg_database_size(current_database())
         FROM pg_stat_user_tables WHERE relname = 'orders'",
    )
    .fetch_one(db)
    .await?;
    let units_held: i32 = sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
        .bind(sale_id)
        .fetch_one(db)
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut store.conn())
        .await?;
    Ok(Storage {
        orders_table_mib: mib(table),
        orders_indexes_mib: mib(indexes),
        orders_live: live,
        orders_dead: dead,
        database_mib: mib(database),
        kafka_log_mib: dir_bytes(&stack::run_dir().join("kafka/data")) as f64 / (1024.0 * 1024.0),
        redis_used_mib: info_field(&info, "used_memory").unwrap_or(0) as f64 / (1024.0 * 1024.0),
        units_held: i64::from(units_held),
    })
}

/// The bytes of the files under `dir` (segments deleted meanwhile skipped).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_parent_pid_after_an_awkward_name() {
        assert_eq!(parent_of("42 (postgres: a (b)) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("42 (x) S"), None);
    }

    #[test]
    fn reads_kib_fields_and_redis_info_fields() {
        let status = "Name:\tflashsale\nVmHWM:\t  9000 kB\nVmRSS:\t  8192 kB\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(8192));
        assert_eq!(kib_field(status, "Pss:"), None);
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1_048_576));
        assert_eq!(info_field(info, "process_id"), None);
    }

    #[test]
    fn sums_this_process_as_one_part() {
        let me = std::process::id();
        let seen = sample(&[Part::Process("me", me), Part::Tree("tree", me)]);
        assert_eq!(seen["me"].processes, 1);
        assert!(
            seen["me"].memory_mib > 0.0 && seen["me"].fds > 0,
            "{seen:?}"
        );
        assert!(seen["tree"].memory_mib > 0.0, "{seen:?}");
        assert_eq!(
            sample(&[Part::Process("gone", u32::MAX)])["gone"],
            Footprint::default()
        );
    }
}
