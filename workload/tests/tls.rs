//! TLS to the services, with the CA the stack makes (`.run/pki-services`):
//! PostgreSQL with `sslmode=require` and `verify-full`, Redis over
//! `rediss://`, Kafka over `ssl://` and `sasl_ssl://`, a certificate of
//! another CA refused by all three, and the API selling over all three.
//!
//! Its own harness: the clients trust a private CA the way the chart's pods
//! do, through `SSL_CERT_FILE` in their environment, so the binary runs
//! itself with it (a process cannot safely set its own); the refusal of
//! another CA runs in a child process given that CA instead.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::process::Command;
use std::time::Duration;

use common::{ApiOptions, SaleSpec, TestApi};
use flashsale_testkit as stack;
use flashsale_workload::redis::{RedisConn, RedisTarget};

/// The argument that makes this binary the child that trusts another CA.
const WRONG_CA_CHILD: &str = "--as-a-client-of-another-ca";

type Test = fn() -> Pin<Box<dyn Future<Output = ()>>>;

fn main() {
    if std::env::args().any(|a| a == WRONG_CA_CHILD) {
        return runtime().block_on(the_other_cas_client_is_refused());
    }
    let ca = stack::services_ca();
    if std::env::var_os("SSL_CERT_FILE").as_deref() != Some(ca.as_os_str()) {
        let status = Command::new(std::env::current_exe().unwrap())
            .args(std::env::args_os().skip(1))
            .env("SSL_CERT_FILE", &ca)
            .status()
            .unwrap();
        std::process::exit(status.code().unwrap_or(1));
    }
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let tests: [(&str, Test); 5] = [
        ("postgres_over_verified_tls", || {
            Box::pin(postgres_over_verified_tls())
        }),
        ("redis_over_tls", || Box::pin(redis_over_tls())),
        ("kafka_over_tls", || Box::pin(kafka_over_tls())),
        (
            "another_ca_is_refused",
            || Box::pin(another_ca_is_refused()),
        ),
        ("the_api_sells_over_tls", || {
            Box::pin(the_api_sells_over_tls())
        }),
    ];
    let runtime = runtime();
    for (name, test) in tests {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        runtime.block_on(test());
        println!("test {name} ... ok");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `verify-full` against the services' CA, from `SSL_CERT_FILE`.
const VERIFIED: &str = "?sslmode=verify-full";

/// Whether the pool's connection is encrypted, per the server.
async fn over_tls(pool: &sqlx::PgPool) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn postgres(params: &str) -> sqlx::Result<sqlx::PgPool> {
    let url = common::database_url_of("flashsale") + params;
    flashsale_workload::orders::connect(&url, 1).await
}

async fn postgres_over_verified_tls() {
    let required = postgres("?sslmode=require").await.unwrap();
    assert!(
        over_tls(&required).await,
        "sslmode=require, yet in the clear"
    );
    let verified = postgres(VERIFIED).await.unwrap();
    assert!(over_tls(&verified).await);
}

fn redis_tls() -> RedisTarget {
    RedisTarget::Node(stack::var("REDIS_TLS_URL"))
}

async fn ping(target: &RedisTarget) -> redis::RedisResult<String> {
    let mut conn = RedisConn::connect(target).await?;
    redis::cmd("PING").query_async(&mut conn).await
}

async fn redis_over_tls() {
    assert_eq!(ping(&redis_tls()).await.unwrap(), "PONG");
    // TLS is really spoken: the plain port does not answer a TLS client.
    let plain_port_over_tls = stack::redis_url().replace("redis://", "rediss://");
    assert!(
        ping(&RedisTarget::Node(plain_port_over_tls)).await.is_err(),
        "a TLS client got an answer from the plain port"
    );
}

fn kafka_tls() -> String {
    stack::var("KAFKA_TLS_BOOTSTRAP")
}

/// The broker's metadata, as a client of `bootstrap` gets it.
fn kafka_metadata(bootstrap: &str) -> rdkafka::error::KafkaResult<usize> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = flashsale_workload::bus::client_config(bootstrap).create()?;
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(5))?;
    Ok(metadata.brokers().len())
}

async fn kafka_over_tls() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    assert_eq!(kafka_metadata(&kafka_tls()).unwrap(), 1);
    // With a SASL login over TLS; a wrong password is refused.
    let sasl = stack::var("KAFKA_SASL_BOOTSTRAP");
    assert_eq!(kafka_metadata(&sasl).unwrap(), 1);
    let (login, at_brokers) = sasl.rsplit_once('@').unwrap();
    let (user, _) = login.rsplit_once(':').unwrap();
    let wrong = format!("{user}:not-the-password@{at_brokers}");
    assert!(
        kafka_metadata(&wrong).is_err(),
        "a wrong password logged in"
    );
    let admin = flashsale_workload::bus::admin::Admin::new(&kafka_tls()).unwrap();
    let topic = stack::unique_name("tls");
    admin.ensure_topics(&[topic.as_str()], 1).await.unwrap();
    let producer: FutureProducer = flashsale_workload::bus::client_config(&kafka_tls())
        .create()
        .unwrap();
    producer
        .send(
            FutureRecord::to(&topic).key("k").payload("over TLS"),
            Duration::from_secs(5),
        )
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    admin.delete_topics(&[topic.as_str()]).await.unwrap();
}

async fn another_ca_is_refused() {
    let status = Command::new(std::env::current_exe().unwrap())
        .arg(WRONG_CA_CHILD)
        .env("SSL_CERT_FILE", stack::run_dir().join("pki").join("ca.crt"))
        .status()
        .unwrap();
    assert!(status.success(), "the client of another CA was not refused");
}

/// In the child: trusting only the cluster's CA, both services are refused.
async fn the_other_cas_client_is_refused() {
    assert!(
        ping(&redis_tls()).await.is_err(),
        "Redis: a certificate of another CA was trusted"
    );
    assert!(
        postgres(VERIFIED).await.is_err(),
        "PostgreSQL: a certificate of another CA was trusted"
    );
    // A root named in the URL is trusted too (sqlx adds it to the system's).
    let named = format!(
        "?sslmode=verify-full&sslrootcert={}",
        stack::services_ca().display()
    );
    assert!(over_tls(&postgres(&named).await.unwrap()).await);
    assert!(
        kafka_metadata(&kafka_tls()).is_err(),
        "Kafka: a certificate of another CA was trusted"
    );
}

/// A purchase through an API whose Redis and PostgreSQL are both reached
/// over verified TLS.
async fn the_api_sells_over_tls() {
    let db = common::fresh_database().await;
    let namespace = stack::unique_name("ns");
    let config = common::create_sale(&db, &SaleSpec::live(&namespace, 10, 1, 2)).await;
    let store = common::store(&redis_tls()).await;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await
        .unwrap();
    let mut options = ApiOptions::new(&namespace, redis_tls(), &db);
    options.database_params = VERIFIED.to_string();
    options.kafka = kafka_tls();
    let api = TestApi::start(options).await;
    api.wait_for_sale(&config.sale).await;
    let answer = api.buy(&config.sale, "tls-shopper", 2).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let order = answer.order_id().unwrap();
    assert_eq!(api.order(order, "tls-shopper").await.status, 200);
    api.stop().await;
}
