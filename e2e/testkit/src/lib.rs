//! Finds the real local stack for FlashSale's tests.
//!
//! `make up` starts Redis, a Redis Cluster, PostgreSQL, Kafka and a Kubernetes
//! control plane and writes their addresses to `.run/env`; `make test` exports
//! that file before running `cargo test`. A test asks here for an address: the
//! process environment wins, then `.run/env`. A service that is not there is a
//! failure naming the command that starts it — never a skip.

pub mod browser;
pub mod house;
pub mod procs;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The command that starts everything the tests need.
pub const START_HINT: &str = "start the stack with `make up` (`make test` does it for you)";

/// The run directory of the stack: `$FLASHSALE_RUN`, else `<repo>/.run`.
pub fn run_dir() -> PathBuf {
    std::env::var_os("FLASHSALE_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join(".run"))
}

/// The repository's top directory.
pub fn repo_dir() -> PathBuf {
    // e2e/testkit → the repository.
    let testkit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit.ancestors().nth(2).unwrap_or(testkit).to_path_buf()
}

fn env_file() -> &'static HashMap<String, String> {
    static FILE: OnceLock<HashMap<String, String>> = OnceLock::new();
    FILE.get_or_init(|| {
        std::fs::read_to_string(run_dir().join("env"))
            .map(|text| parse_env_file(&text))
            .unwrap_or_default()
    })
}

/// Parses the `export NAME='value'` lines the stack scripts write.
fn parse_env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (name, value) = line.split_once('=')?;
            if name.starts_with('#') || name.is_empty() {
                return None;
            }
            let value = value.trim();
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(value);
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}

/// The value of a stack variable, or a panic that says how to start the stack.
pub fn var(name: &str) -> String {
    std::env::var(name)
        .ok()
        .or_else(|| env_file().get(name).cloned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not set and {} has no value for it: the real service is missing; {START_HINT}",
                run_dir().join("env").display()
            )
        })
}

/// Single-node Redis, e.g. `redis://127.0.0.1:16379`.
pub fn redis_url() -> String {
    var("REDIS_URL")
}

/// The Sentinels watching the stack's primary/replica pair, e.g.
/// `redis-sentinel://127.0.0.1:26381,.../flashsale`.
pub fn redis_sentinel_url() -> String {
    var("REDIS_SENTINEL_URL")
}

/// The seed nodes of the 3-master Redis Cluster.
pub fn redis_cluster_urls() -> Vec<String> {
    var("REDIS_CLUSTER_URLS")
        .split(',')
        .map(str::to_string)
        .collect()
}

/// PostgreSQL, e.g. `postgres://postgres@127.0.0.1:15432/flashsale`.
pub fn database_url() -> String {
    var("DATABASE_URL")
}

/// The replicated topology's PostgreSQL (`STACK_TOPOLOGY=replicated`):
/// HAProxy's address, which follows whichever member Patroni made primary.
pub fn database_replicated_url() -> String {
    var("DATABASE_REPLICATED_URL")
}

/// Kafka bootstrap servers, e.g. `127.0.0.1:19092`.
pub fn kafka_bootstrap() -> String {
    var("KAFKA_BOOTSTRAP")
}

/// The replicated topology's three brokers (`STACK_TOPOLOGY=replicated`),
/// as `host:port,…` from here and from the cluster's pods.
pub fn kafka_replicated_bootstrap() -> (String, String) {
    (
        var("KAFKA_REPLICATED_BOOTSTRAP"),
        var("KAFKA_REPLICATED_POD_BOOTSTRAP"),
    )
}

/// Redis through toxiproxy (`e2e/stack/toxiproxy.sh`), which [`Toxic`] slows.
pub fn redis_proxied_url() -> String {
    var("REDIS_PROXIED_URL")
}

/// Kafka through toxiproxy: every connection of a client bootstrapped here
/// stays behind the proxy.
pub fn kafka_proxied_bootstrap() -> String {
    var("KAFKA_PROXIED_BOOTSTRAP")
}

/// PostgreSQL through toxiproxy.
pub fn database_proxied_url() -> String {
    var("DATABASE_PROXIED_URL")
}

/// A fault set on one of the stack's toxiproxy proxies (`redis`, `kafka`,
/// `postgres`): a real TCP proxy between the parts delays, stalls or cuts
/// what passes. Removed when dropped, panics included; [`Toxic::reset`]
/// removes every one (a run that was killed may have left some).
pub struct Toxic {
    proxy: String,
    name: String,
}

impl Toxic {
    /// Adds a toxic of `kind` (`latency`, `timeout`, `bandwidth`,
    /// `slow_close`, ...) to `stream` of `proxy` (`upstream`: towards the
    /// service; `downstream`: its replies) with its `attributes`, a JSON
    /// object (e.g. `{"latency": 2500}` in ms). Panics when toxiproxy
    /// refuses it: the fault would silently not be there.
    pub fn add(proxy: &str, kind: &str, stream: &str, attributes: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{kind}-{stream}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let body = format!(
            r#"{{"name": "{name}", "type": "{kind}", "stream": "{stream}", "toxicity": 1.0, "attributes": {attributes}}}"#
        );
        toxiproxy(
            &["-X", "POST", "-d", &body],
            &format!("/proxies/{proxy}/toxics"),
        )
        .unwrap_or_else(|e| panic!("toxiproxy refused {body} on {proxy}: {e}; {START_HINT}"));
        Self {
            proxy: proxy.to_string(),
            name,
        }
    }

    /// Removes every toxic of every proxy.
    pub fn reset() -> Result<(), String> {
        toxiproxy(&["-X", "POST"], "/reset")
    }
}

impl Drop for Toxic {
    fn drop(&mut self) {
        let path = format!("/proxies/{}/toxics/{}", self.proxy, self.name);
        if let Err(e) = toxiproxy(&["-X", "DELETE"], &path) {
            eprintln!("toxic {} not removed: {e}", self.name);
        }
    }
}

/// One of the stack's toxiproxy proxies switched off until this is dropped
/// (panics included): its port refuses connections and the ones it carried
/// are closed, as when the service behind it is killed.
pub struct ProxyDown {
    proxy: String,
}

impl ProxyDown {
    /// Switches `proxy` (`redis`, `kafka`, `postgres`) off. Panics when
    /// toxiproxy refuses: the fault would silently not be there.
    pub fn now(proxy: &str) -> Self {
        switch_proxy(proxy, false)
            .unwrap_or_else(|e| panic!("toxiproxy did not switch {proxy} off: {e}; {START_HINT}"));
        Self {
            proxy: proxy.to_string(),
        }
    }
}

impl Drop for ProxyDown {
    fn drop(&mut self) {
        if let Err(e) = switch_proxy(&self.proxy, true) {
            eprintln!("proxy {} not switched back on: {e}", self.proxy);
        }
    }
}

fn switch_proxy(proxy: &str, enabled: bool) -> Result<(), String> {
    let body = format!(r#"{{"enabled": {enabled}}}"#);
    toxiproxy(&["-X", "POST", "-d", &body], &format!("/proxies/{proxy}"))
}

/// One call of toxiproxy's HTTP API (curl: a drop must not need a runtime).
fn toxiproxy(args: &[&str], path: &str) -> Result<(), String> {
    let out = std::process::Command::new("curl")
        .args(["-fsS", "--max-time", "5"])
        .args(args)
        .arg(format!("{}{path}", var("TOXIPROXY_URL")))
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The CA that signed the services' TLS certificate (PostgreSQL, and the
/// TLS ports of Redis and Kafka).
pub fn services_ca() -> PathBuf {
    PathBuf::from(var("FLASHSALE_SERVICES_CA"))
}

/// schemathesis, the OpenAPI fuzzer (`e2e/stack/schemathesis.sh`).
pub fn schemathesis() -> PathBuf {
    PathBuf::from(var("FLASHSALE_SCHEMATHESIS"))
}

/// The admin kubeconfig of the stack's Kubernetes API server.
pub fn kubeconfig() -> PathBuf {
    PathBuf::from(var("KUBECONFIG"))
}

/// A client of the stack's API server, through its kubeconfig.
pub async fn kube_client() -> kube::Client {
    let path = kubeconfig();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("no kubeconfig at {} ({e}): {START_HINT}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("bad kubeconfig at {} ({e})", path.display()));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("no Kubernetes client ({e})"))
}

/// Runs the stack's kubectl and returns its standard output (empty when it
/// failed: callers that care check what they asked for).
pub fn kubectl(args: &[&str]) -> String {
    std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .env("PATH", var("PATH"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The label on every namespace a test creates, so `make test` can tell its
/// leftovers from a person's sales (`e2e/leftovers.sh`).
pub const TEST_NAMESPACE_LABEL: &str = "flashsale.dev/test";

/// Removes a test's namespace so that it never stays `Terminating`, whether
/// the test's operator still runs or is gone: its sales are deleted first
/// (from then on nothing can add a finalizer back), their finalizers are
/// dropped, then the namespace goes. Blocking; for guards' `Drop`.
pub fn remove_namespace(namespace: &str) {
    kubectl(&[
        "delete",
        "flashsales",
        "--all",
        "-n",
        namespace,
        "--wait=false",
    ]);
    for sale in kubectl(&["get", "flashsales", "-n", namespace, "-o", "name"]).lines() {
        kubectl(&[
            "patch",
            sale,
            "-n",
            namespace,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
    }
    kubectl(&["delete", "namespace", namespace, "--wait=false"]);
}

/// Installs the chart as `release` into `namespace` with the local stack's
/// values (`charts/flashsale/ci/local-values.yaml`): the operator watches
/// that namespace only and leases for 6 s; the CRD is the stack's, owned by
/// no release. `sets` are more `--set NAME=VALUE`. Waits (3 min) until its
/// pods are Ready; helm's own words when it fails.
pub fn install_chart(namespace: &str, release: &str, sets: &[String]) -> Result<(), String> {
    let chart = repo_dir().join("charts/flashsale");
    let mut args: Vec<String> = [
        "install",
        release,
        &chart.to_string_lossy(),
        "-n",
        namespace,
    ]
    .map(str::to_string)
    .into();
    args.extend([
        "-f".into(),
        chart.join("ci/local-values.yaml").to_string_lossy().into(),
    ]);
    let ours = [
        format!("operator.watchNamespace={namespace}"),
        "operator.leaseSeconds=6".into(),
        "crds.enabled=false".into(),
    ];
    for set in ours.iter().chain(sets) {
        args.extend(["--set".into(), set.clone()]);
    }
    args.extend(["--wait", "--timeout", "3m"].map(str::to_string));
    let out = std::process::Command::new("helm")
        .args(&args)
        .env("KUBECONFIG", kubeconfig())
        .env("PATH", var("PATH"))
        .output()
        .map_err(|e| format!("helm does not run ({e}): {START_HINT}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "helm install {release} -n {namespace}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The operator pod holding the chart's Lease in `namespace` (its identity
/// is its pod's name), and the node it runs on.
pub fn operator_leader(namespace: &str) -> Option<(String, String)> {
    let get = |what: &[&str], path: &str| {
        let mut args = vec!["get"];
        args.extend(what);
        args.extend(["-n", namespace, "-o", path]);
        Some(kubectl(&args).trim().to_string()).filter(|s| !s.is_empty())
    };
    let pod = get(
        &["lease", "flashsale-operator"],
        "jsonpath={.spec.holderIdentity}",
    )?;
    let node = get(&["pod", &pod], "jsonpath={.spec.nodeName}")?;
    Some((pod, node))
}

/// Polls `check` every 100 ms until it gives a value, or panics after
/// `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: std::time::Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The port of the live master serving `slot`, from a Redis Cluster's
/// `CLUSTER NODES` answer (`id host:port@bus flags master ... 0-5460 ...`).
pub fn cluster_master_port(nodes: &str, slot: u16) -> Option<String> {
    nodes
        .lines()
        .filter(|l| l.contains("master") && !l.contains("fail"))
        .find(|l| {
            l.split_whitespace().skip(8).any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                (a.parse().unwrap_or(u16::MAX)..=b.parse().unwrap_or(0)).contains(&slot)
            })
        })
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|addr| addr.split(['@', ':']).nth(1))
        .map(str::to_string)
}

/// A name no other test run uses, for topics, databases, sales and namespaces:
/// `prefix-<pid>-<counter>` in lower case.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{:x}{:x}-{}",
        std::process::id(),
        nanos % 0xfff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates an empty database on the stack's PostgreSQL and returns its URL,
/// so tests never share rows. The caller applies the migrations.
pub async fn fresh_database_url() -> String {
    fresh_database_on(&database_url()).await
}

/// [`fresh_database_url`] on the server of `url` (e.g.
/// [`database_replicated_url`]).
pub async fn fresh_database_on(url: &str) -> String {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is not answering ({e}): {START_HINT}"));
    let name = unique_name("t").replace('-', "_");
    // The name is ours (letters, digits, underscores), never user input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("CREATE DATABASE");
    let (server, _) = url.rsplit_once('/').expect("a database URL ends in /name");
    format!("{server}/{name}")
}

/// SIGKILLs the container `container_id` (a pod status's `containerID`,
/// `containerd://…`) on the stack's node, as a crash: the kubelet restarts
/// it in the same pod. Deleting the pod is no crash (it sends SIGTERM).
pub fn crash_container(container_id: &str) {
    let id = container_id
        .strip_prefix("containerd://")
        .unwrap_or(container_id);
    stack_script("node.sh", &["crash", id]);
}

/// Runs `e2e/stack/SCRIPT ARGS` against this stack; panics with the
/// script's own words when it fails.
pub fn stack_script(script: &str, args: &[&str]) {
    let out = std::process::Command::new(repo_dir().join("e2e/stack").join(script))
        .args(args)
        .env("FLASHSALE_RUN", run_dir())
        .output()
        .unwrap_or_else(|e| panic!("{script} does not run: {e}"));
    assert!(
        out.status.success(),
        "{script} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Restarts a killed Redis process of the stack (`redis.sh restart <name>`)
/// on every exit path, panics included: a killed node comes back empty, a
/// killed Cluster master or Sentinel primary rejoins as a replica. The first
/// field says what it is, for the failure message.
pub struct RedisRestart(pub &'static str, pub String);

impl RedisRestart {
    /// Restarts it now (again on drop: starting a running process is a no-op).
    pub fn now(&self) {
        stack_script("redis.sh", &["restart", &self.1]);
    }
}

impl Drop for RedisRestart {
    fn drop(&mut self) {
        self.now();
    }
}

/// The pid the stack scripts recorded for their process `name`
/// (`$FLASHSALE_RUN/pids/NAME.pid`), if any.
pub fn stack_pid(name: &str) -> Option<u32> {
    std::fs::read_to_string(run_dir().join(format!("pids/{name}.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// SIGKILLs the stack's process `name` (its pid file under the run dir) and
/// waits until it is gone: the stack scripts start only what is not running,
/// and a dying process (a JVM takes a while) still counts as running, so a
/// restart right after the kill would start nothing. Returns whether a
/// process was killed.
pub fn kill_stack_process(name: &str) -> bool {
    let Some(pid) = stack_pid(name) else {
        return false;
    };
    let pid = &pid.to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .is_ok_and(|s| s.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while alive(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed
}

/// Whether the process `pid` exists and is not a zombie.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name in parentheses.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exported_quoted_values() {
        let parsed = parse_env_file(
            "# comment\nexport REDIS_URL='redis://127.0.0.1:1'\nPLAIN=x\nexport EMPTY=''\n",
        );
        assert_eq!(parsed["REDIS_URL"], "redis://127.0.0.1:1");
        assert_eq!(parsed["PLAIN"], "x");
        assert_eq!(parsed["EMPTY"], "");
        assert!(!parsed.contains_key("# comment"));
    }

    #[test]
    fn the_master_of_a_slot_is_the_live_one_that_serves_it() {
        let nodes = "\
a1 127.0.0.1:17001@27001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:17002@27002 master,fail - 0 0 2 connected 5461-10922
c3 127.0.0.1:17005@27005 master - 0 0 7 connected 5461-10922
d4 127.0.0.1:17003@27003 master - 0 0 3 connected 10923-16383
e5 127.0.0.1:17004@27004 slave a1 0 0 1 connected
";
        for (slot, port) in [
            (0, "17001"),
            (5460, "17001"),
            (5461, "17005"),
            (16383, "17003"),
        ] {
            assert_eq!(
                cluster_master_port(nodes, slot).as_deref(),
                Some(port),
                "slot {slot}"
            );
        }
        assert_eq!(cluster_master_port("", 7), None);
    }
}
