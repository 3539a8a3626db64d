//! Helpers shared by the workload's integration tests: fresh databases, sales
//! warmed the way the operator warms them, and an API served on a real socket.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flashsale_testkit as stack;
use flashsale_workload::api::auth::AuthConfig;
use flashsale_workload::api::client_ip::TrustedProxies;
use flashsale_workload::api::jwks::JwksSource;
use flashsale_workload::api::limits::LimitConfig;
use flashsale_workload::api::server::{ApiConfig, Listeners, build_state, serve_on};
use flashsale_workload::api::transport::TransportLimits;
use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::message::OrderMessage;
use flashsale_workload::bus::producer::ProducerSettings;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::admission::Admission;
use flashsale_workload::domain::budget::PurchaseBudget;
use flashsale_workload::domain::risk::RiskPolicy;
use flashsale_workload::domain::sale::{SaleConfig, SaleRef};
use flashsale_workload::orders;
use flashsale_workload::redis::store::SaleStore;
use flashsale_workload::redis::{RedisConn, RedisTarget};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sqlx::PgPool;
use uuid::Uuid;

/// An HS256 token for `sub`, expiring `exp_offset` seconds from now.
pub fn token(sub: &str, exp_offset: i64, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": sub, "exp": chrono::Utc::now().timestamp() + exp_offset}),
        &jsonwebtoken::EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

/// The HS256 secret the test APIs accept.
pub const JWT_SECRET: &[u8] = b"flashsale-test-secret-of-32-bytes-or-more";

/// The secret the test payment provider signs its callbacks with.
pub const PAYMENT_SECRET: &[u8] = b"flashsale-test-payment-provider-secret";
/// What the test API signs purchase tokens with.
pub const PURCHASE_TOKEN_SECRET: &[u8] = b"flashsale-test-purchase-token-secret";

/// Test logs: warnings and errors of the code under test, shown for failing
/// tests, and librdkafka's debug lines of a client that asked for them.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,librdkafka=debug")),
        )
        .try_init();
}

/// A new, migrated database on the stack's PostgreSQL, so tests never share rows.
pub async fn fresh_database() -> PgPool {
    init_logs();
    let pool = orders::connect(&stack::fresh_database_url().await, 20)
        .await
        .unwrap();
    orders::migrate(&pool).await.unwrap();
    pool
}

/// The URL of database `name` on the stack's server.
pub fn database_url_of(name: &str) -> String {
    let url = stack::database_url();
    let (server, _) = url.rsplit_once('/').unwrap();
    format!("{server}/{name}")
}

/// The single Redis node.
pub fn redis_node() -> RedisTarget {
    stack::redis_url().parse().unwrap()
}

/// The 3-master Redis Cluster.
pub fn redis_cluster() -> RedisTarget {
    let seeds = stack::redis_cluster_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_string())
        .collect::<Vec<_>>()
        .join(",");
    format!("redis-cluster://{seeds}").parse().unwrap()
}

/// A store over `target`.
pub async fn store(target: &RedisTarget) -> SaleStore {
    SaleStore::new(RedisConn::connect(target).await.unwrap_or_else(|e| {
        panic!(
            "Redis at {target:?} is not answering ({e}): {}",
            stack::START_HINT
        )
    }))
}

/// A sale to create.
#[derive(Clone)]
pub struct SaleSpec {
    pub namespace: String,
    pub stock: i64,
    pub shards: u32,
    pub limit: i64,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub partitions: i32,
    pub payment_timeout: Duration,
    pub purchase_token_ttl: Option<Duration>,
    pub admission: Option<Admission>,
    pub risk: Option<RiskPolicy>,
}

impl SaleSpec {
    /// Live now for ten minutes.
    pub fn live(namespace: &str, stock: i64, shards: u32, limit: i64) -> Self {
        Self {
            namespace: namespace.to_string(),
            stock,
            shards,
            limit,
            start: Utc::now() - chrono::Duration::minutes(1),
            end: Utc::now() + chrono::Duration::minutes(10),
            partitions: 4,
            payment_timeout: Duration::from_secs(900),
            purchase_token_ttl: None,
            admission: None,
            risk: None,
        }
    }
}

/// Creates the sale as the operator would: database row, topics; returns its config.
pub async fn create_sale(db: &PgPool, spec: &SaleSpec) -> SaleConfig {
    let sale = SaleRef::new(&spec.namespace, &stack::unique_name("sale")).unwrap();
    let config = SaleConfig {
        id: Uuid::now_v7(),
        sale,
        sku: "SKU-TEST".into(),
        stock: spec.stock,
        start: spec.start,
        end: spec.end,
        purchase_limit: spec.limit,
        shards: spec.shards,
        generation: 1,
        payment_timeout: spec.payment_timeout,
        purchase_token_ttl: spec.purchase_token_ttl,
        admission: spec.admission,
        risk: spec.risk.clone(),
    };
    let config = orders::sales::upsert(db, &config).await.unwrap();
    let bootstrap = stack::kafka_bootstrap();
    Admin::new(&bootstrap)
        .unwrap()
        .ensure_topics(
            &[
                &topics::orders_topic(&config.sale),
                &topics::dead_letter_topic(&config.sale),
            ],
            spec.partitions,
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "Kafka at {bootstrap} is not answering ({e}): {}",
                stack::START_HINT
            )
        });
    config
}

/// How a test API is configured.
pub struct ApiOptions {
    pub namespace: String,
    pub redis: RedisTarget,
    pub database: String,
    /// Appended to the database's URL, e.g. `?sslmode=verify-full&...`.
    pub database_params: String,
    pub kafka: String,
    pub per_shopper_per_sec: u32,
    /// How long one purchase may take (the produce included).
    pub purchase_budget: PurchaseBudget,
    /// librdkafka's debug contexts for the API's producer.
    pub kafka_debug: Option<String>,
    pub transport: TransportLimits,
    /// Shoppers prove who they are with HS256 tokens (else the development
    /// identity header: the API takes one or the other, never both).
    pub jwt: bool,
    /// Tokens are verified with the keys of this JWKS only (read again
    /// every second).
    pub jwks: Option<JwksSource>,
    /// Requests per second per client address (0: off, as for a storm
    /// sent from one host).
    pub per_ip_per_sec: u32,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
}

impl ApiOptions {
    pub fn new(namespace: &str, redis: RedisTarget, db: &PgPool) -> Self {
        Self {
            namespace: namespace.to_string(),
            redis,
            database: db.connect_options().get_database().unwrap().to_string(),
            database_params: String::new(),
            kafka: stack::kafka_bootstrap(),
            per_shopper_per_sec: 1000,
            purchase_budget: PurchaseBudget::DEFAULT,
            kafka_debug: None,
            transport: TransportLimits::default(),
            jwt: false,
            jwks: None,
            per_ip_per_sec: 0,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// An API served on real loopback sockets.
pub struct TestApi {
    /// The public port: shopper routes and OpenAPI.
    pub url: String,
    /// The internal port: probes and metrics.
    pub internal_url: String,
    pub client: reqwest::Client,
    jwt: bool,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestApi {
    pub async fn start(options: ApiOptions) -> Self {
        let jwt = options.jwt;
        let config = ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            internal_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            transport: options.transport,
            namespace: options.namespace,
            redis: options.redis,
            database_url: database_url_of(&options.database) + &options.database_params,
            kafka: options.kafka,
            auth: match options.jwks {
                Some(source) => AuthConfig {
                    jwks: Some(source),
                    jwks_refresh: Duration::from_secs(1),
                    ..AuthConfig::default()
                },
                None => AuthConfig {
                    hs256_secret: options.jwt.then(|| JWT_SECRET.to_vec()),
                    dev_identity: !options.jwt,
                    ..AuthConfig::default()
                },
            },
            limits: LimitConfig {
                global_per_sec: 0,
                per_shopper_per_sec: options.per_shopper_per_sec,
                per_ip_per_sec: options.per_ip_per_sec,
            },
            producer: ProducerSettings {
                budget: options.purchase_budget,
                debug: options.kafka_debug.clone(),
                ..ProducerSettings::default()
            },
            payment_secret: Some(PAYMENT_SECRET.to_vec()),
            purchase_token_secret: Some(PURCHASE_TOKEN_SECRET.to_vec()),
            trusted_proxies: options.trusted_proxies.clone(),
        };
        let state = build_state(&config).await.unwrap();
        let listeners = Listeners::bind(&config).unwrap();
        let url = format!("http://{}", listeners.public.local_addr().unwrap());
        let internal_url = format!("http://{}", listeners.internal.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_on(listeners, state, config.transport, async {
            let _ = rx.await;
        }));
        Self {
            url,
            internal_url,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(8192)
                // Below the API's header timeout: it closes connections idle
                // that long, and a request sent on one as it closes is reset.
                .pool_idle_timeout(config.transport.header_timeout / 2)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            jwt,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    /// Waits until the catalog shows `sale` (it refreshes every second).
    pub async fn wait_for_sale(&self, sale: &SaleRef) {
        for _ in 0..50 {
            let response = self
                .client
                .get(format!("{}/v1/sales/{}", self.url, sale.name))
                .send()
                .await
                .unwrap();
            if response.status() == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the API never listed {sale}");
    }

    /// POST a purchase as `shopper` (development identity).
    pub async fn buy(&self, sale: &SaleRef, shopper: &str, quantity: i64) -> Answer {
        self.buy_with_key(sale, shopper, quantity, None).await
    }

    /// POST a purchase as `shopper`, with an `Idempotency-Key` if given.
    /// With a key, a request whose connection was lost is sent again, as
    /// real clients do: the key makes the retry safe. (Thousands of tasks on
    /// two threads may read an answer seconds late and then reuse a
    /// connection the API has just closed for idling past its header
    /// timeout.)
    pub async fn buy_with_key(
        &self,
        sale: &SaleRef,
        shopper: &str,
        quantity: i64,
        key: Option<&str>,
    ) -> Answer {
        let mut attempts = 0;
        loop {
            let mut request = self
                .client
                .post(format!("{}/v1/sales/{}/orders", self.url, sale.name))
                .json(&serde_json::json!({ "quantity": quantity }));
            request = self.identify(request, shopper);
            if let Some(key) = key {
                request = request.header("idempotency-key", key);
            }
            match request.send().await {
                Ok(response) => return Answer::read(response).await,
                Err(e) if key.is_some() && attempts < 5 && !e.is_timeout() => attempts += 1,
                Err(e) => panic!("the purchase got no answer: {e:?}"),
            }
        }
    }

    /// `request` made as `shopper`: a token of theirs, or the development
    /// identity header, whichever this API takes.
    pub fn identify(
        &self,
        request: reqwest::RequestBuilder,
        shopper: &str,
    ) -> reqwest::RequestBuilder {
        if self.jwt {
            request.bearer_auth(token(shopper, 600, JWT_SECRET))
        } else {
            request.header("x-user-id", shopper)
        }
    }

    /// POST to an order's route (`pay`, `cancel`) as `shopper`.
    pub async fn order_action(&self, order: Uuid, shopper: &str, action: &str) -> Answer {
        let request = self
            .client
            .post(format!("{}/v1/orders/{order}/{action}", self.url));
        let response = self.identify(request, shopper).send().await.unwrap();
        Answer::read(response).await
    }

    /// The payment provider's callback: `body` with a `Signature` header
    /// (none if `signature` is `None`).
    pub async fn payment_callback(&self, body: &str, signature: Option<String>) -> Answer {
        let mut request = self
            .client
            .post(format!("{}/v1/payments/callback", self.url))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(signature) = signature {
            request = request.header("signature", signature);
        }
        Answer::read(request.send().await.unwrap()).await
    }

    /// The provider says `outcome` of `payment` for `order`, signed now.
    pub async fn provider_says(&self, payment: &str, order: Uuid, outcome: &str) -> Answer {
        let body = serde_json::json!({"paymentId": payment, "orderId": order, "outcome": outcome})
            .to_string();
        let signature = flashsale_workload::domain::payment::sign(
            PAYMENT_SECRET,
            chrono::Utc::now().timestamp(),
            body.as_bytes(),
        );
        self.payment_callback(&body, Some(signature)).await
    }

    /// GET an order as `shopper`.
    pub async fn order(&self, order: Uuid, shopper: &str) -> Answer {
        let request = self.client.get(format!("{}/v1/orders/{order}", self.url));
        let response = self.identify(request, shopper).send().await.unwrap();
        Answer::read(response).await
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

/// An HTTP answer: status, code (for refusals), order id (for 202), headers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: serde_json::Value,
    pub retry_after: Option<String>,
    pub location: Option<String>,
}

impl Answer {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = header("retry-after");
        let location = header("location");
        let body = response.json().await.unwrap_or(serde_json::Value::Null);
        Self {
            status,
            body,
            retry_after,
            location,
        }
    }

    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    pub fn order_id(&self) -> Option<Uuid> {
        self.body["orderId"].as_str().and_then(|s| s.parse().ok())
    }
}

/// Every message on the sale's order topic, read from the start to the end
/// offsets as they are now.
pub fn read_topic(sale: &SaleRef) -> Vec<OrderMessage> {
    let topic = topics::orders_topic(sale);
    let consumer: BaseConsumer = flashsale_workload::bus::client_config(&stack::kafka_bootstrap())
        .set("group.id", stack::unique_name("reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut ends = HashMap::new();
    for &p in &partitions {
        let (_, high) = consumer
            .fetch_watermarks(&topic, p, Duration::from_secs(10))
            .unwrap();
        ends.insert(p, high);
    }
    let mut tpl = rdkafka::TopicPartitionList::new();
    for &p in &partitions {
        tpl.add_partition_offset(&topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut messages = Vec::new();
    let mut positions: HashMap<i32, i64> = partitions.iter().map(|&p| (p, 0)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while positions.iter().any(|(p, pos)| pos < &ends[p]) {
        assert!(
            std::time::Instant::now() < deadline,
            "topic not read in 60 s"
        );
        if let Some(result) = consumer.poll(Duration::from_millis(200)) {
            let message = result.unwrap();
            positions.insert(message.partition(), message.offset() + 1);
            messages.push(OrderMessage::from_payload(message.payload().unwrap()).unwrap());
        }
    }
    messages
}

/// A sale's consumer running in this process until stopped.
pub struct RunningConsumer {
    stop: tokio_util::sync::CancellationToken,
    running: tokio::task::JoinHandle<flashsale_workload::consumer::Ended>,
}

impl RunningConsumer {
    /// Starts a consumer of `config`'s sale reading from `bootstrap`.
    pub fn start(bootstrap: &str, db: &PgPool, store: &SaleStore, config: &SaleConfig) -> Self {
        use flashsale_workload::consumer::{ConsumerSettings, SaleConsumer};
        let consumer = SaleConsumer::new(
            bootstrap,
            config.clone(),
            db.clone(),
            store.clone(),
            ConsumerSettings::default(),
            std::sync::Arc::new(flashsale_workload::metrics::Metrics::default()),
        )
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let running = tokio::spawn({
            let stop = stop.clone();
            async move { consumer.run(stop).await }
        });
        Self { stop, running }
    }

    /// Stops it and waits until it has left.
    pub async fn stop(self) {
        self.stop.cancel();
        self.running.await.unwrap();
    }
}

/// Runs the sale's consumers in this process until the topic is drained.
pub async fn consume_until_drained(db: &PgPool, store: &SaleStore, config: &SaleConfig) {
    let consumer = RunningConsumer::start(&stack::kafka_bootstrap(), db, store, config);
    wait_drained(config).await;
    consumer.stop().await;
}

/// Polls the sale's consumer-group lag until it is 0 (60 s at most). A
/// read the broker refuses for now (`NotCoordinator` while a fresh broker
/// loads the group offsets) is read again.
pub async fn wait_drained(config: &SaleConfig) {
    let reader = flashsale_workload::bus::lag::LagReader::new(
        &stack::kafka_bootstrap(),
        &topics::consumer_group(&config.sale),
    )
    .unwrap();
    let mut last = None;
    for _ in 0..600 {
        match reader.read(&topics::orders_topic(&config.sale)).await {
            Ok(lag) if lag.total() == 0 => return,
            Ok(lag) => last = Some(format!("lag {}", lag.total())),
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} did not drain in 60 s: {last:?}", config.sale);
}

/// What a storm got.
pub struct StormResult {
    /// Accepted orders: shopper and quantity.
    pub accepted: HashMap<Uuid, (String, i64)>,
    /// Refusals by "status CODE".
    pub refusals: HashMap<String, usize>,
}

impl StormResult {
    /// Units accepted.
    pub fn units(&self) -> i64 {
        self.accepted.values().map(|(_, q)| q).sum()
    }
}

/// Purchases a storm keeps in flight at once.
pub const STORM_IN_FLIGHT: usize = 512;

/// `requests` purchases by `shoppers` shoppers, quantities 1-2, at most
/// [`STORM_IN_FLIGHT`] at once.
/// Like real clients, a purchase answered 503 (UNAVAILABLE, BUSY: nothing
/// reserved, retry) is retried with its `Idempotency-Key` after its
/// `Retry-After` (with jitter, so that the shed do not come back in step)
/// until it gets a decision: a Redis reply later than its timeout under a
/// loaded machine, or more requests than the API takes in flight, then costs
/// time, not units left unsold.
pub async fn storm(
    api: &std::sync::Arc<TestApi>,
    sale: &SaleRef,
    requests: usize,
    shoppers: usize,
) -> StormResult {
    // Every request is a connection while in flight, and a socket on both
    // ends of this one process: unbounded, two storms at once exhausted its
    // 20,000 file descriptors. A few hundred in flight still race for units.
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(STORM_IN_FLIGHT));
    let tasks: Vec<_> = (0..requests)
        .map(|i| {
            let api = api.clone();
            let sale = sale.clone();
            let in_flight = in_flight.clone();
            tokio::spawn(async move {
                let _permit = in_flight.acquire_owned().await.unwrap();
                let shopper = format!("shopper-{}", i % shoppers);
                let quantity = 1 + ((i * 7919 % 13) % 2) as i64;
                let key = format!("request-{i}");
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                loop {
                    let answer = api
                        .buy_with_key(&sale, &shopper, quantity, Some(&key))
                        .await;
                    if answer.status != 503 || std::time::Instant::now() > deadline {
                        return (shopper, quantity, answer);
                    }
                    let after = answer
                        .retry_after
                        .as_deref()
                        .and_then(|s| s.parse::<f64>().ok())
                        .unwrap_or(0.1);
                    let jitter = 0.5 + rand::random::<f64>();
                    tokio::time::sleep(Duration::from_secs_f64(after * jitter)).await;
                }
            })
        })
        .collect();
    let mut result = StormResult {
        accepted: HashMap::new(),
        refusals: HashMap::new(),
    };
    for task in tasks {
        let (shopper, quantity, answer) = task.await.unwrap();
        if answer.status == 202 {
            assert!(
                result
                    .accepted
                    .insert(answer.order_id().unwrap(), (shopper, quantity))
                    .is_none()
            );
        } else {
            *result
                .refusals
                .entry(format!("{} {}", answer.status, answer.code()))
                .or_default() += 1;
        }
    }
    result
}

/// A shopper id whose home is `shard` among `shards` (`prefix-<n>`, the first n).
pub fn shopper_homed(prefix: &str, shard: u32, shards: u32) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|s| flashsale_workload::domain::shard::home_shard(s, shards) == shard)
        .unwrap()
}

/// Units in each shard of the sale.
pub async fn shard_stocks(store: &SaleStore, config: &SaleConfig) -> Vec<i64> {
    store
        .shard_stocks(&config.sale, config.shards)
        .await
        .unwrap()
}

/// Polls `check` every 100 ms until it holds; the time it took, or a panic
/// naming `what` after `timeout`.
pub async fn within<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    loop {
        if check().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A warmed live sale on `target`, its database and an API serving its
/// namespace (with its janitor).
pub struct LiveSale {
    pub api: std::sync::Arc<TestApi>,
    pub config: SaleConfig,
    pub store: SaleStore,
    pub db: PgPool,
}

impl LiveSale {
    pub async fn start(target: RedisTarget, stock: i64, shards: u32, limit: i64) -> Self {
        Self::start_with(target, stock, shards, limit, |_| {}).await
    }

    /// The same, with the API's options adjusted by `adjust`.
    pub async fn start_with(
        target: RedisTarget,
        stock: i64,
        shards: u32,
        limit: i64,
        adjust: impl FnOnce(&mut ApiOptions),
    ) -> Self {
        Self::of_spec(
            target,
            |namespace| SaleSpec::live(namespace, stock, shards, limit),
            adjust,
        )
        .await
    }

    /// A sale of the spec `spec` makes for a fresh namespace, the API's
    /// options adjusted by `adjust`.
    pub async fn of_spec(
        target: RedisTarget,
        spec: impl FnOnce(&str) -> SaleSpec,
        adjust: impl FnOnce(&mut ApiOptions),
    ) -> Self {
        let db = fresh_database().await;
        let namespace = stack::unique_name("ns");
        let config = create_sale(&db, &spec(&namespace)).await;
        let store = store(&target).await;
        store
            .warm(&config, 0, false, &config.id.to_string())
            .await
            .unwrap();
        let mut options = ApiOptions::new(&namespace, target, &db);
        adjust(&mut options);
        let api = TestApi::start(options).await;
        api.wait_for_sale(&config.sale).await;
        Self {
            api: std::sync::Arc::new(api),
            config,
            store,
            db,
        }
    }

    /// Gathers what the stores hold once the orders settled and asserts
    /// I1–I6 against what the shoppers were `told`.
    pub async fn assert_invariants(&self, told: &flashsale_workload::load::Told) {
        use flashsale_workload::domain::invariants;
        let evidence = flashsale_workload::load::gather(
            &self.db,
            &self.store,
            &stack::kafka_bootstrap(),
            &self.config,
            told,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let verdicts = invariants::evaluate(&evidence).verdicts;
        assert!(invariants::all_hold(&verdicts), "{verdicts:#?}");
    }

    /// Units left over all shards.
    pub async fn remaining(&self) -> i64 {
        shard_stocks(&self.store, &self.config).await.iter().sum()
    }

    /// The janitor of another API replica of this sale's namespace, on
    /// direct connections (the API's own may reach Kafka through a fault),
    /// its purchases within `budget`.
    pub async fn other_janitor(
        &self,
        budget: PurchaseBudget,
    ) -> flashsale_workload::janitor::Janitor {
        let catalog = std::sync::Arc::new(flashsale_workload::catalog::Catalog::new(
            &self.config.sale.namespace,
            self.db.clone(),
            self.store.clone(),
        ));
        catalog.refresh().await.unwrap();
        flashsale_workload::janitor::Janitor::new(
            catalog,
            self.store.clone(),
            self.db.clone(),
            std::sync::Arc::new(flashsale_workload::bus::sale_lag::SaleLags::new(
                &stack::kafka_bootstrap(),
            )),
            budget,
        )
    }
}
