//! Helpers shared by the operator's integration tests: the real API server of
//! the stack, namespaces, the CRD, and the operator run as a process.
#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use flashsale_operator::model::crd::{FlashSale, SaleState};
use flashsale_testkit as stack;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};

/// The API capacity every test operator is told (`--api-capacity`): a
/// queued sale that names no rate admits four fifths of it a second.
pub const API_CAPACITY: u32 = 2_500;

/// A client of the stack's API server.
pub async fn client() -> Client {
    stack::kube_client().await
}

/// Installs (server-side applies) the FlashSale CRD and waits until it is served.
pub async fn install_crd(client: &Client) {
    let established = flashsale_operator::cluster::install::crd(client)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the API server refused the CRD ({e}): {}",
                stack::START_HINT
            )
        });
    assert!(established, "the CRD was not established within 20 s");
}

/// A namespace for one test, removed (with everything in it) when dropped.
pub struct TestNamespace(String);

impl std::ops::Deref for TestNamespace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Runs on panics too, and whether or not the test's operator is
        // still there to run its finalizer.
        stack::remove_namespace(&self.0);
    }
}

/// A new namespace for one test, labelled as a test's.
pub async fn namespace(client: &Client) -> TestNamespace {
    namespace_labelled(client, serde_json::json!({})).await
}

/// A new namespace for one test with these labels too.
pub async fn namespace_labelled(client: &Client, labels: serde_json::Value) -> TestNamespace {
    let name = stack::unique_name("t");
    let mut all = labels;
    all[stack::TEST_NAMESPACE_LABEL] = serde_json::json!("true");
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": all}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    TestNamespace(name)
}

pub use stack::wait_for;

/// Where cargo put the workspace's binaries (next to this test's `deps/`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join(name)
}

/// The workload image the operator's pods run in tests (built and imported
/// into the node by `make test`).
pub const TEST_IMAGE: &str = "docker.io/flashsale/flashsale:dev";

/// A loopback port free now (for a process to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A database URL as pods on the node reach it (the bridge gateway).
pub fn pod_url(url: &str) -> String {
    url.replace("127.0.0.1", "198.18.0.1")
}

/// The operator, run as a process; killed on drop.
pub struct Operator {
    child: Child,
}

impl Operator {
    /// Starts an operator watching `namespace`, leading through `lease`.
    pub fn start(namespace: &str, database_url: &str, lease: &str, identity: &str) -> Self {
        Self::spawn(
            namespace,
            database_url,
            lease,
            identity,
            TEST_IMAGE,
            &stack::redis_url(),
        )
    }

    /// Starts an operator whose sale pods run `image`, serving /metrics on `listen`.
    pub fn start_with_image(
        namespace: &str,
        database_url: &str,
        identity: &str,
        image: &str,
        listen: &str,
    ) -> Self {
        Self::spawn_with(
            namespace,
            namespace,
            database_url,
            "flashsale-operator",
            identity,
            image,
            &stack::redis_url(),
            &stack::kubeconfig(),
            listen,
        )
    }

    /// Starts an operator that reaches the API server through `kubeconfig`,
    /// serving /readyz and /metrics on `listen`.
    pub fn start_with_kubeconfig(
        namespace: &str,
        database_url: &str,
        identity: &str,
        kubeconfig: &std::path::Path,
        listen: &str,
    ) -> Self {
        Self::spawn_with(
            namespace,
            namespace,
            database_url,
            "flashsale-operator",
            identity,
            TEST_IMAGE,
            &stack::redis_url(),
            kubeconfig,
            listen,
        )
    }

    /// Starts an operator watching `namespaces` (its Lease in the first).
    pub fn start_watching(namespaces: &[&str], database_url: &str, identity: &str) -> Self {
        Self::spawn_with(
            &namespaces.join(","),
            namespaces[0],
            database_url,
            "flashsale-operator",
            identity,
            TEST_IMAGE,
            &stack::redis_url(),
            &stack::kubeconfig(),
            "127.0.0.1:0",
        )
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Starts an operator serving /metrics on `listen`.
    pub fn start_serving(
        namespace: &str,
        database_url: &str,
        identity: &str,
        listen: &str,
    ) -> Self {
        Self::spawn_with(
            namespace,
            namespace,
            database_url,
            "flashsale-operator",
            identity,
            TEST_IMAGE,
            &stack::redis_url(),
            &stack::kubeconfig(),
            listen,
        )
    }

    /// Starts an operator whose sales live in the Redis at `redis` (a
    /// `redis://` node or a `redis-cluster://` seed list).
    pub fn start_on(namespace: &str, database_url: &str, identity: &str, redis: &str) -> Self {
        Self::spawn(
            namespace,
            database_url,
            "flashsale-operator",
            identity,
            TEST_IMAGE,
            redis,
        )
    }

    fn spawn(
        namespace: &str,
        database_url: &str,
        lease: &str,
        identity: &str,
        image: &str,
        redis: &str,
    ) -> Self {
        Self::spawn_with(
            namespace,
            namespace,
            database_url,
            lease,
            identity,
            image,
            redis,
            &stack::kubeconfig(),
            "127.0.0.1:0",
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_with(
        watch: &str,
        lease_namespace: &str,
        database_url: &str,
        lease: &str,
        identity: &str,
        image: &str,
        redis: &str,
        kubeconfig: &std::path::Path,
        listen: &str,
    ) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_flashsale-operator"))
            .args(["--watch-namespace", watch, "--migrate", "--listen", listen])
            .args([
                "--lease-name",
                lease,
                "--lease-namespace",
                lease_namespace,
                "--identity",
                identity,
            ])
            .args(["--lease-seconds", "6"])
            .env("KUBECONFIG", kubeconfig)
            .env("FLASHSALE_REDIS", redis)
            .env("DATABASE_URL", database_url)
            .env("KAFKA_BOOTSTRAP", stack::kafka_bootstrap())
            .env("FLASHSALE_POD_REDIS", pod_url(redis))
            .env("FLASHSALE_POD_DATABASE_URL", pod_url(database_url))
            .env("FLASHSALE_POD_KAFKA", "198.18.0.1:19094")
            .env("FLASHSALE_WORKLOAD_IMAGE", image)
            .env("FLASHSALE_API_CAPACITY", API_CAPACITY.to_string())
            .env("RUST_LOG", "info,kube=warn")
            .spawn()
            .expect("the flashsale-operator binary starts");
        Self { child }
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A FlashSale manifest as JSON, to edit in tests.
pub fn manifest(
    name: &str,
    namespace: &str,
    start_in_secs: i64,
    window_secs: i64,
) -> serde_json::Value {
    let at = |secs: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(secs))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    serde_json::json!({
        "apiVersion": "flashsale.dev/v1alpha1",
        "kind": "FlashSale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "sku": "SKU-1001",
            "stock": 100,
            "window": {"start": at(start_in_secs), "end": at(start_in_secs + window_secs)},
            "purchaseLimit": 2,
            "sharding": {"shards": 4},
        }
    })
}

/// Creates the sale of `manifest` and waits (up to 30 s) until it is Live.
pub async fn create_live(sales: &Api<FlashSale>, manifest: serde_json::Value) {
    let fs: FlashSale = serde_json::from_value(manifest).unwrap();
    let name = fs.metadata.name.clone().unwrap();
    sales.create(&PostParams::default(), &fs).await.unwrap();
    wait_for(Duration::from_secs(30), "the sale to go live", || async {
        (sales.get(&name).await.ok()?.status?.state? == SaleState::Live).then_some(())
    })
    .await;
}

/// The local loop's consumer (`flashsale consumer --all-sales`), run as a
/// process for every sale of `namespace`; killed on drop.
pub struct HostConsumers(Child);

impl HostConsumers {
    /// Starts consuming every sale of `namespace` that needs it.
    pub fn start(namespace: &str, database_url: &str) -> Self {
        let child = Command::new(bin("flashsale"))
            .args(["consumer", "--all-sales", "--namespace", namespace])
            .env("FLASHSALE_REDIS", stack::redis_url())
            .env("DATABASE_URL", database_url)
            .env("KAFKA_BOOTSTRAP", stack::kafka_bootstrap())
            .env("RUST_LOG", "info")
            .spawn()
            .expect("the flashsale binary starts");
        Self(child)
    }
}

impl Drop for HostConsumers {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The shopper API (`flashsale api`), run as a process for `namespace`.
pub struct ApiProcess {
    child: Child,
    /// Its base URL.
    pub url: String,
    /// Its internal port's address (/metrics, /readyz).
    pub internal: String,
}

impl ApiProcess {
    /// Starts the API with the development identity header on.
    pub async fn start(namespace: &str, database_url: &str) -> Self {
        Self::start_on(namespace, database_url, &stack::redis_url()).await
    }

    /// The same, for sales in the Redis at `redis`.
    pub async fn start_on(namespace: &str, database_url: &str, redis: &str) -> Self {
        let (port, internal) = (free_port(), format!("127.0.0.1:{}", free_port()));
        // Queued sales' tickets and tokens are signed with it.
        let tokens = std::env::temp_dir().join(format!("flashsale-test-tokens-{port}"));
        std::fs::write(&tokens, uuid::Uuid::now_v7().to_string()).unwrap();
        let child = Command::new(bin("flashsale"))
            .args([
                "api",
                "--namespace",
                namespace,
                "--dev-identity",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--internal-listen",
                &internal,
                // Every shopper of a test storm comes from this one host.
                "--rate-limit-ip",
                "0",
            ])
            .arg("--purchase-token-secret-file")
            .arg(&tokens)
            .env("FLASHSALE_REDIS", redis)
            .env("DATABASE_URL", database_url)
            .env("KAFKA_BOOTSTRAP", stack::kafka_bootstrap())
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("the flashsale binary starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        wait_for(Duration::from_secs(20), "the API to listen", || async {
            http.get(format!("{url}/healthz"))
                .send()
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Self {
            child,
            url,
            internal,
        }
    }

    /// Buys one unit as `shopper`: (status, code or order id).
    pub async fn buy(&self, sale: &str, shopper: &str) -> (u16, String) {
        self.buy_with_key(sale, shopper, None).await
    }

    /// Joins a queued sale as `shopper`, answering its challenge if `solve`:
    /// the answer's status and body.
    pub async fn join_queue(
        &self,
        sale: &str,
        shopper: &str,
        solve: bool,
    ) -> (u16, serde_json::Value) {
        use flashsale_workload::domain::admission::{leading_zero_bits, solution_hash};
        let http = reqwest::Client::new();
        let mut body = serde_json::json!({});
        if solve {
            let challenge: serde_json::Value = http
                .get(format!("{}/v1/sales/{sale}/challenge", self.url))
                .header("x-user-id", shopper)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let nonce = challenge["nonce"].as_str().unwrap();
            let bits = challenge["difficulty"].as_u64().unwrap() as u32;
            let solution = (0u64..)
                .map(|n| n.to_string())
                .find(|s| leading_zero_bits(&solution_hash(nonce, s)) >= bits)
                .unwrap();
            body = serde_json::json!({"challenge": {"nonce": nonce, "solution": solution}});
        }
        let response = http
            .post(format!("{}/v1/sales/{sale}/queue", self.url))
            .header("x-user-id", shopper)
            .json(&body)
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json().await.unwrap_or_default(),
        )
    }

    /// Buys one unit as `shopper` with an `Idempotency-Key`, if given.
    pub async fn buy_with_key(
        &self,
        sale: &str,
        shopper: &str,
        key: Option<&str>,
    ) -> (u16, String) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/v1/sales/{sale}/orders", self.url))
            .header("x-user-id", shopper)
            .json(&serde_json::json!({"quantity": 1}));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        let detail = body["code"]
            .as_str()
            .or(body["orderId"].as_str())
            .unwrap_or_default()
            .to_string();
        (status, detail)
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
