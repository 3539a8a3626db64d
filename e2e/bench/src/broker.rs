//! The broker's floor: Kafka's CPU per message when a plain rdkafka producer
//! (librdkafka's defaults: acks=all, 5 ms linger, Nagle on) sends messages
//! of an order's size at the storm's accepted rate, against what the API's
//! confirmed, unlingered produce costs it.

use std::time::{Duration, Instant};

use flashsale_testkit as stack;
use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::message::OrderMessage;
use flashsale_workload::domain::sale::SaleRef;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::cpu::{self, CpuShare};

/// What the plain producer's messages cost the broker.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlainProducer {
    /// Messages acknowledged.
    pub messages: u64,
    /// Their rate, per second.
    pub per_sec: f64,
    /// How the cores were shared.
    pub cpu: CpuShare,
}

impl PlainProducer {
    /// Kafka's CPU per message, µs.
    pub fn kafka_us_per_message(&self) -> f64 {
        cpu::part(&self.cpu, "Kafka")
    }
}

/// Sends `rate` messages a second for `duration` to a scratch topic with
/// the sales' partition count, and measures the cores meanwhile.
pub async fn run(rate: f64, duration: Duration, partitions: i32) -> anyhow::Result<PlainProducer> {
    let topic = format!("bench-plain-producer-{}", uuid::Uuid::now_v7().simple());
    let admin = Admin::new(&stack::kafka_bootstrap())?;
    admin.ensure_topics(&[&topic], partitions).await?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", stack::kafka_bootstrap())
        .create()?;
    let order = OrderMessage {
        order_id: uuid::Uuid::now_v7(),
        sale_id: uuid::Uuid::now_v7(),
        sale: SaleRef::new(crate::sale::NAMESPACE, "intake-000000")?,
        shopper: "shopper-123456".into(),
        quantity: 1,
        shard: 3,
        accepted_at_ms: chrono::Utc::now().timestamp_millis(),
        idempotency_key: None,
        purchase_token: None,
        persisted: false,
        signals: Default::default(),
    };
    let payload = order.to_payload();
    let keys: Vec<String> = (0..1000).map(|i| format!("shopper-{i}")).collect();
    let before = cpu::snapshot(&[], "exited children");
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let (mut sent, mut acked) = (0u64, 0u64);
    let mut in_flight = FuturesUnordered::new();
    while started.elapsed() < duration {
        tokio::select! {
            _ = tick.tick() => {
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                while sent < due {
                    let key = &keys[sent as usize % keys.len()];
                    let record = FutureRecord::to(&topic).key(key).payload(&payload);
                    in_flight.push(producer.send(record, Duration::ZERO));
                    sent += 1;
                }
            }
            Some(done) = in_flight.next() => acked += u64::from(done.is_ok()),
        }
    }
    while let Some(done) = in_flight.next().await {
        acked += u64::from(done.is_ok());
    }
    let secs = started.elapsed().as_secs_f64();
    let share = cpu::share(
        &before,
        &cpu::snapshot(&[], "exited children"),
        acked as usize,
    );
    admin.delete_topics(&[&topic]).await?;
    anyhow::ensure!(
        acked == sent,
        "the broker acknowledged {acked} of {sent} messages"
    );
    Ok(PlainProducer {
        messages: acked,
        per_sec: acked as f64 / secs,
        cpu: share,
    })
}
