//! The faults a chaos run injects into the real stack, and their undoing:
//! every fault that leaves something behind (a stopped service, a paused
//! Redis, an iptables rule) registers its undo first; a guard runs it on
//! drop (panics included) and a signal (Ctrl-C, SIGTERM, SIGHUP) runs every
//! undo still pending.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use flashsale_testkit as stack;

/// A fault kind the runner can pick. Numbered for the runs' seeds
/// (`run_seed`): a kind keeps its number, so a documented seed replays the
/// same run; a new kind takes the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Kind {
    /// The Redis node SIGKILLed and restarted empty.
    RedisRestart = 0,
    /// The Cluster master of the sale's shard 0 SIGKILLed; its replica is promoted.
    RedisFailover = 1,
    /// The Cluster master of shard 0 SIGKILLed and restarted at once, empty,
    /// before its replica took over: it wipes the replica too.
    RedisWipe = 2,
    /// `CLIENT PAUSE` of the Redis node for 2-5 s.
    RedisPause = 3,
    /// The Kafka broker SIGKILLed and restarted.
    KafkaKill = 4,
    /// Packets to the broker's ports dropped for 5 s (iptables).
    KafkaUnreachable = 5,
    /// The single broker SIGKILLed, its log directory wiped, started again
    /// empty, after 4 s in which the consumers could not persist: its only
    /// copy of the orders not yet persisted is gone. A demonstration,
    /// expected to lose orders; not among `ALL`.
    KafkaWipe = 18,
    /// Replicated topology: the leader of the sale's partition 0 SIGKILLed,
    /// its data directory wiped, started again empty (it re-replicates).
    BrokerWipe = 19,
    /// Replicated topology: the leader of the sale's partition 0 cut off
    /// for 10 s (everything it sends dropped: iptables, its group id).
    BrokerCut = 20,
    /// Replicated topology: the active KRaft controller SIGKILLed and
    /// started again.
    ControllerKill = 21,
    /// Replicated topology: the PostgreSQL primary lost as a machine is
    /// (its Patroni and postgres SIGKILLed); Patroni promotes the
    /// synchronous standby, the old primary rejoins as the standby after.
    /// Meanwhile the merchant flips the kill switch on and off again.
    PostgresFailover = 22,
    /// Replicated topology: a planned switchover of the PostgreSQL primary
    /// to the standby (`patronictl switchover`).
    PostgresSwitchover = 23,
    /// Two nodes, the sale's operators, API and consumers installed by the
    /// chart: `kubectl drain` of the node holding the operator leader and
    /// half the consumers, mid-storm.
    NodeDrain = 24,
    /// Two nodes, the workload installed by the chart: the kubelet of the
    /// node holding the operator leader stopped for 65 s mid-sale (the
    /// node goes NotReady after the controller-manager's 50 s grace).
    KubeletStop = 25,
    /// PostgreSQL stopped in immediate mode, then started.
    PostgresRestart = 6,
    /// Packets to PostgreSQL's port dropped for 5 s (iptables).
    PostgresUnreachable = 7,
    /// Redis's replies delayed past the purchase's reply timeout (2.2-3 s)
    /// for 4 s (toxiproxy, in front of the run's processes).
    RedisSlow = 8,
    /// The broker takes 1.5-4 s to accept each request (toxiproxy): orders
    /// are acknowledged late, some after their purchase gave up.
    KafkaSlow = 9,
    /// PostgreSQL 300-800 ms away for 6 s (toxiproxy, both ways): batches
    /// crawl, consumers lag, backpressure.
    PostgresSlow = 10,
    /// The shopper API process SIGKILLed and started again.
    ApiKill = 11,
    /// A consumer process SIGKILLed mid-batch and started again.
    ConsumerKill = 12,
    /// The leading operator SIGKILLed at a transition (warm-up, open or end).
    OperatorKill = 13,
    /// The merchant raises the stock by half during the storm.
    Restock = 14,
    /// The merchant shrinks the stock by a fifth during the storm.
    Shrink = 15,
    /// The kill switch on for 2 s, then off.
    PauseResume = 16,
    /// The window extended by 5 s while live.
    ExtendWindow = 17,
    /// The Redis node SIGKILLed and kept down for 30 s, the sale with
    /// `degradation.redisDown: database`: it must keep deciding purchases
    /// through PostgreSQL meanwhile, then through Redis again.
    RedisDown = 26,
}

impl Kind {
    /// Every kind that must hold, in report order (`KafkaWipe`, expected
    /// to lose orders, runs only when named).
    pub const ALL: [Kind; 26] = [
        Kind::RedisRestart,
        Kind::RedisDown,
        Kind::RedisFailover,
        Kind::RedisWipe,
        Kind::RedisPause,
        Kind::KafkaKill,
        Kind::KafkaUnreachable,
        Kind::BrokerWipe,
        Kind::BrokerCut,
        Kind::ControllerKill,
        Kind::PostgresFailover,
        Kind::PostgresSwitchover,
        Kind::NodeDrain,
        Kind::KubeletStop,
        Kind::PostgresRestart,
        Kind::PostgresUnreachable,
        Kind::RedisSlow,
        Kind::KafkaSlow,
        Kind::PostgresSlow,
        Kind::ApiKill,
        Kind::ConsumerKill,
        Kind::OperatorKill,
        Kind::Restock,
        Kind::Shrink,
        Kind::PauseResume,
        Kind::ExtendWindow,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// Whether the sale runs on the Redis Cluster (else on the node).
    pub fn on_cluster(self) -> bool {
        matches!(self, Kind::RedisFailover | Kind::RedisWipe)
    }

    /// How long after the fault is undone the purchases it stalled may still
    /// give their units back: a produce the broker did not acknowledge is
    /// released a purchase budget after it began, and a killed broker takes
    /// seconds more to come back (a controller-kill run saw releases 11 s
    /// after the kill, so 12). `None`: no such aftermath.
    pub fn releases_late(self) -> Option<Duration> {
        let budget = flashsale_workload::domain::budget::PurchaseBudget::DEFAULT.total();
        match self {
            Kind::KafkaUnreachable | Kind::KafkaSlow | Kind::BrokerCut => {
                Some(budget + Duration::from_secs(2))
            }
            Kind::KafkaKill | Kind::KafkaWipe | Kind::BrokerWipe | Kind::ControllerKill => {
                Some(budget + Duration::from_secs(12))
            }
            _ => None,
        }
    }

    /// Whether the sale runs on the replicated topology: its orders on the
    /// three brokers (replication factor 3, min.insync.replicas 2), its rows
    /// on Patroni's primary and synchronous standby.
    pub fn replicated(self) -> bool {
        matches!(
            self,
            Kind::BrokerWipe
                | Kind::BrokerCut
                | Kind::ControllerKill
                | Kind::PostgresFailover
                | Kind::PostgresSwitchover
        )
    }

    /// Whether the sale's operators, API and consumers are installed by the
    /// chart into the run's namespace, on the two nodes, rather than run as
    /// processes on this host: a node's fault must reach them.
    pub fn in_cluster(self) -> bool {
        matches!(self, Kind::NodeDrain | Kind::KubeletStop)
    }

    /// The shortest window this kind's fault fits in, with the storm going
    /// on around it: a drain takes ~10 s, a stopped kubelet's node goes
    /// NotReady only after 50 s.
    pub fn min_window_secs(self) -> i64 {
        match self {
            Kind::NodeDrain => 40,
            Kind::KubeletStop => 100,
            Kind::RedisDown => 80,
            _ => 0,
        }
    }

    /// The toxiproxy proxies the run's processes reach this kind's slowed
    /// service through (`e2e/stack/toxiproxy.sh`): (proxy, its streams).
    pub fn slowed(self) -> Option<(&'static [&'static str], &'static [&'static str])> {
        match self {
            Kind::RedisSlow => Some((&["redis"], &["downstream"])),
            Kind::KafkaSlow => Some((&["kafka"], &["upstream"])),
            Kind::PostgresSlow => {
                Some((&["postgres", "postgres-pods"], &["upstream", "downstream"]))
            }
            _ => None,
        }
    }
}

type Undo = Box<dyn FnOnce() + Send>;

static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());

/// An injected fault: undone when dropped, if not before.
pub struct Injected(Option<u64>);

impl Injected {
    /// Nothing to undo.
    pub fn none() -> Self {
        Self(None)
    }

    /// Registers `undo` before the fault is made, so an interruption at any
    /// moment after can still undo it (what `undo` returns is not kept: a
    /// failed undo has said so on stderr).
    pub fn register<R>(undo: impl FnOnce() -> R + Send + 'static) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        lock().push((
            id,
            Box::new(move || {
                undo();
            }),
        ));
        Self(Some(id))
    }
}

impl Drop for Injected {
    fn drop(&mut self) {
        let Some(id) = self.0.take() else { return };
        let undo = {
            let mut pending = lock();
            pending
                .iter()
                .position(|(i, _)| *i == id)
                .map(|at| pending.remove(at).1)
        };
        if let Some(undo) = undo {
            undo();
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<(u64, Undo)>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs every pending undo (Ctrl-C, or before exiting).
pub fn undo_all() {
    let pending: Vec<(u64, Undo)> = std::mem::take(&mut *lock());
    for (_, undo) in pending.into_iter().rev() {
        undo();
    }
}

/// Waits for SIGINT (Ctrl-C), SIGTERM or SIGHUP and returns its name and
/// the exit status it calls for (128 + its number): a runner stopped by a
/// CI timeout or a closed terminal undoes its faults too.
pub async fn terminated() -> (&'static str, i32) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => ("interrupted", 130),
        _ = term.recv() => ("terminated", 143),
        _ = hup.recv() => ("hung up", 129),
    }
}

/// Removes what a runner killed outright (SIGKILL, no undo) left behind:
/// its iptables rules, its operators, API and consumer (each started with
/// its run's `chaos-` namespace on the command line) and that namespace.
/// Only one runner acts on the stack at a time, so all of them are stale.
pub fn remove_leftovers() {
    remove_rules();
    if let Err(e) = stack::Toxic::reset() {
        eprintln!("chaos: toxiproxy's toxics not reset: {e}");
    }
    let _ = Command::new("pkill")
        .args([
            "-KILL",
            "-f",
            "--",
            &format!("namespace {NAMESPACE_PREFIX}-"),
        ])
        .status();
    let namespaces = stack::kubectl(&[
        "get",
        "namespaces",
        "-l",
        stack::TEST_NAMESPACE_LABEL,
        "-o",
        "name",
    ]);
    for name in namespaces
        .lines()
        .filter_map(|ns| ns.strip_prefix("namespace/"))
        .filter(|name| {
            name.strip_prefix(NAMESPACE_PREFIX)
                .is_some_and(|rest| rest.starts_with('-'))
        })
    {
        eprintln!("chaos: removing namespace {name}, left by a runner killed earlier");
        stack::remove_namespace(name);
    }
}

/// The prefix of every run's namespace (`chaos-<unique>`).
pub const NAMESPACE_PREFIX: &str = "chaos";

/// The comment on every iptables rule the runner adds.
const RULE_COMMENT: &str = "flashsale-chaos";

/// Drops packets to `ports` on this host (loopback and the bridge) until
/// the returned guard goes.
pub fn unreachable(ports: &[u16]) -> Injected {
    let rules: Vec<Vec<String>> = ports
        .iter()
        .map(|port| drop_rule(&["INPUT", "-p", "tcp", "--dport", &port.to_string()]))
        .collect();
    drop_until_undone(&rules)
}

/// An iptables rule dropping what `matching` selects, marked as ours.
fn drop_rule(matching: &[&str]) -> Vec<String> {
    matching
        .iter()
        .chain(&["-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"])
        .map(|a| a.to_string())
        .collect()
}

/// Inserts `rules` (each with [`RULE_COMMENT`]) until the guard goes.
fn drop_until_undone(rules: &[Vec<String>]) -> Injected {
    let guard = Injected::register(remove_rules);
    for rule in rules {
        let mut args = vec!["-w", "-I"];
        args.extend(rule.iter().map(String::as_str));
        run("iptables", &args);
    }
    guard
}

/// Removes every rule the runner added (also left over by a killed runner).
pub fn remove_rules() {
    let Ok(out) = Command::new("iptables-save").output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(rule) = line.strip_prefix("-A ")
            && line.contains(RULE_COMMENT)
        {
            let mut args = vec!["-w", "-D"];
            args.extend(shell_words(rule));
            run("iptables", &args);
        }
    }
}

/// Splits an iptables-save rule into words (its comment is a plain word).
fn shell_words(rule: &str) -> Vec<&str> {
    rule.split_whitespace()
        .map(|w| w.trim_matches('"'))
        .collect()
}

/// The stack's script `name` (e.g. `redis.sh`).
fn script(name: &str) -> PathBuf {
    stack::repo_dir().join("e2e/stack").join(name)
}

/// Runs a command to completion, logging a failure.
pub fn run(program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .env("FLASHSALE_RUN", stack::run_dir())
        .output()
        .map(|o| {
            if !o.status.success() {
                eprintln!(
                    "chaos: {program} {args:?} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            o.status.success()
        });
    if let Err(e) = &ok {
        eprintln!("chaos: {program} did not run: {e}");
    }
    ok.unwrap_or(false)
}

/// SIGKILLs the stack's process `name` and waits until it is gone (a
/// kafka-kill run once restarted a dying JVM: the broker stayed down).
pub fn kill_stack_process(name: &str) {
    if !stack::kill_stack_process(name) {
        eprintln!("chaos: could not kill {name}");
    }
}

/// Starts the stack's service `service` again through its script (`up`, or
/// `restart NAME` for Redis): idempotent. Whether the script succeeded.
pub fn restart_stack(script_name: &str, args: &[&str]) -> bool {
    let path = script(script_name);
    run(&path.to_string_lossy(), args)
}

/// The Redis node killed and started again empty.
pub fn redis_restart() -> Injected {
    let guard = Injected::register(|| restart_stack("redis.sh", &["restart", "redis"]));
    kill_stack_process("redis");
    restart_stack("redis.sh", &["restart", "redis"]);
    guard
}

/// The Redis node SIGKILLed; restarted (empty) when the guard drops.
pub fn redis_down() -> Injected {
    let guard = Injected::register(|| restart_stack("redis.sh", &["restart", "redis"]));
    kill_stack_process("redis");
    guard
}

/// `redis-cli` against a live node of the Cluster.
fn cluster_cli(args: &[&str]) -> String {
    for port in ["17001", "17002", "17003", "17004", "17005", "17006"] {
        if let Ok(out) = Command::new("redis-cli")
            .args(["-p", port])
            .args(args)
            .output()
            && out.status.success()
            && !out.stdout.is_empty()
        {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
    }
    String::new()
}

/// The port of the live master serving `slot`.
fn master_of(slot: u16) -> Option<String> {
    stack::cluster_master_port(&cluster_cli(&["cluster", "nodes"]), slot)
}

/// The Cluster master holding `key` killed. When the guard goes, the killed
/// node is started again once its replica serves the slot: a master without
/// persistence that came back before its failover would wipe its replica
/// (docs/reliability.md), which is another fault, `redis-restart`'s.
pub fn redis_failover(key: &str) -> Injected {
    let slot: u16 = cluster_cli(&["cluster", "keyslot", key])
        .trim()
        .parse()
        .unwrap_or(0);
    let Some(port) = master_of(slot) else {
        eprintln!("chaos: no master found for slot {slot}");
        return Injected::none();
    };
    let name = format!("redis-cluster-{port}");
    let guard = {
        let name = name.clone();
        Injected::register(move || {
            for _ in 0..200 {
                if master_of(slot).is_some_and(|p| p != port) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            restart_stack("redis.sh", &["restart", &name]);
        })
    };
    kill_stack_process(&name);
    guard
}

/// The Cluster master holding `key` killed and started again at once,
/// empty: back before its replica was promoted, it stays the master of its
/// slots with nothing in them, and its replica copies that.
pub fn redis_wipe(key: &str) -> Injected {
    let slot: u16 = cluster_cli(&["cluster", "keyslot", key])
        .trim()
        .parse()
        .unwrap_or(0);
    let Some(port) = master_of(slot) else {
        eprintln!("chaos: no master found for slot {slot}");
        return Injected::none();
    };
    let name = format!("redis-cluster-{port}");
    let guard = {
        let name = name.clone();
        Injected::register(move || restart_stack("redis.sh", &["restart", &name]))
    };
    kill_stack_process(&name);
    restart_stack("redis.sh", &["restart", &name]);
    guard
}

/// The Redis node paused (every client) for `pause`.
pub fn redis_pause(pause: Duration) -> Injected {
    let port = stack::redis_url()
        .rsplit(':')
        .next()
        .unwrap_or("16379")
        .to_string();
    let guard = {
        let port = port.clone();
        Injected::register(move || run("redis-cli", &["-p", &port, "client", "unpause"]))
    };
    run(
        "redis-cli",
        &[
            "-p",
            &port,
            "client",
            "pause",
            &pause.as_millis().to_string(),
        ],
    );
    guard
}

/// The Kafka broker killed, then started again (its log is kept).
pub fn kafka_kill() -> Injected {
    let guard = Injected::register(|| restart_stack("kafka.sh", &["up"]));
    kill_stack_process("kafka");
    guard
}

/// The single broker killed, its log directory wiped, started again empty,
/// after 4 s in which the consumers could not persist (PostgreSQL
/// unreachable): orders wait in the broker, as at a sale's peak, and its
/// only copy of them goes.
pub fn kafka_wipe() -> Injected {
    let behind = unreachable(&POSTGRES_PORTS);
    std::thread::sleep(Duration::from_secs(4));
    let guard = Injected::register(|| restart_stack("kafka.sh", &["up"]));
    kill_stack_process("kafka");
    restart_stack("kafka.sh", &["wipe_data", "single"]);
    restart_stack("kafka.sh", &["up"]);
    drop(behind);
    guard
}

/// What the stack's script `script_name ARGS` prints, when it succeeds.
fn script_says(script_name: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(script(script_name))
        .args(args)
        .env("FLASHSALE_RUN", stack::run_dir())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!said.is_empty()).then_some(said)
}

/// The replicated node leading partition 0 of `topic` (kcat's metadata).
pub fn partition_leader(bootstrap: &str, topic: &str) -> Option<String> {
    let out = Command::new("kcat")
        .args(["-b", bootstrap, "-L", "-J", "-t", topic, "-m", "5"])
        .output()
        .ok()?;
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    metadata["topics"][0]["partitions"]
        .as_array()?
        .iter()
        .find(|p| p["partition"] == 0)
        .map(|p| p["leader"].to_string())
}

/// Replicated node `node` killed, its data directory wiped (its metadata
/// log kept: docs/reliability.md), started again empty.
pub fn broker_wipe(node: &str) -> Injected {
    let guard = {
        let node = node.to_string();
        Injected::register(move || restart_stack("kafka.sh", &["node_up", &node]))
    };
    kill_stack_process(&format!("kafka-r{node}"));
    restart_stack("kafka.sh", &["wipe_data", node]);
    restart_stack("kafka.sh", &["node_up", node]);
    guard
}

/// Everything replicated node `node` sends dropped until the guard goes:
/// clients, the other brokers and the controllers hear nothing from it.
pub fn broker_cut(node: &str) -> anyhow::Result<Injected> {
    let group = script_says("kafka.sh", &["node_group", node])
        .ok_or_else(|| anyhow::anyhow!("no group id for kafka-r{node}"))?;
    Ok(drop_until_undone(&[drop_rule(&[
        "OUTPUT",
        "-m",
        "owner",
        "--gid-owner",
        &group,
    ])]))
}

/// The active controller of the replicated topology killed; started again
/// when the guard goes.
pub fn controller_kill() -> anyhow::Result<Injected> {
    let node = script_says("kafka.sh", &["active_controller"])
        .ok_or_else(|| anyhow::anyhow!("no active controller found"))?;
    let name = format!("kafka-r{node}");
    let guard = Injected::register(move || restart_stack("kafka.sh", &["node_up", &node]));
    kill_stack_process(&name);
    Ok(guard)
}

/// The replicated PostgreSQL's primary lost (Patroni and postgres
/// SIGKILLed). The guard brings it back as the standby once the other
/// member is the primary, which is what the run waits for.
pub fn postgres_failover() -> anyhow::Result<Injected> {
    let member = script_says("patroni.sh", &["primary"])
        .ok_or_else(|| anyhow::anyhow!("no PostgreSQL primary found"))?;
    let guard = {
        let member = member.clone();
        Injected::register(move || restart_stack("patroni.sh", &["rejoin", &member]))
    };
    restart_stack("patroni.sh", &["crash", &member]);
    Ok(guard)
}

/// PostgreSQL stopped in immediate mode (a crash: recovery on start).
pub fn postgres_crash() -> Injected {
    let guard = Injected::register(|| restart_stack("postgres.sh", &["up"]));
    restart_stack("postgres.sh", &["crash"]);
    guard
}

/// `proxies`' `streams` delayed by `latency_ms` (toxiproxy's latency toxic)
/// until the guard goes; a runner killed meanwhile leaves them to
/// [`remove_leftovers`].
pub fn slow(proxies: &[&str], streams: &[&str], latency_ms: u64) -> Injected {
    let attributes = format!(r#"{{"latency": {latency_ms}}}"#);
    let toxics: Vec<stack::Toxic> = proxies
        .iter()
        .flat_map(|proxy| {
            streams
                .iter()
                .map(|stream| stack::Toxic::add(proxy, "latency", stream, &attributes))
                .collect::<Vec<_>>()
        })
        .collect();
    Injected::register(move || drop(toxics))
}

/// The broker's client ports (host and pods).
pub const KAFKA_PORTS: [u16; 2] = [19092, 19094];
/// PostgreSQL's port.
pub const POSTGRES_PORTS: [u16; 1] = [15432];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_names_and_one_runs_on_the_cluster() {
        let names: Vec<String> = Kind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names[0], "redis-restart");
        assert_eq!(names.len(), 26);
        assert_eq!(Kind::ALL.iter().filter(|k| k.in_cluster()).count(), 2);
        assert_eq!(Kind::ALL.iter().filter(|k| k.on_cluster()).count(), 2);
        assert_eq!(Kind::ALL.iter().filter(|k| k.replicated()).count(), 5);
        // The demonstration that loses orders runs only when named.
        assert!(!Kind::ALL.contains(&Kind::KafkaWipe));
        assert_eq!(Kind::KafkaWipe.name(), "kafka-wipe");
    }

    #[test]
    fn saved_rules_split_into_arguments() {
        let rule =
            r#"INPUT -p tcp -m tcp --dport 19092 -m comment --comment "flashsale-chaos" -j DROP"#;
        assert_eq!(
            shell_words(rule),
            [
                "INPUT",
                "-p",
                "tcp",
                "-m",
                "tcp",
                "--dport",
                "19092",
                "-m",
                "comment",
                "--comment",
                "flashsale-chaos",
                "-j",
                "DROP"
            ]
        );
    }

    #[test]
    fn a_guard_undoes_once() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        let count = Arc::new(AtomicU32::new(0));
        let seen = count.clone();
        let guard = Injected::register(move || {
            seen.fetch_add(1, Ordering::Relaxed);
        });
        drop(guard);
        undo_all();
        assert_eq!(count.load(Ordering::Relaxed), 1);
    }
}
