//! The confirmed produce: an order counts as accepted only once the broker
//! acknowledged it (idempotent producer, acks=all).

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use super::client_config;
use super::message::OrderMessage;
use super::topics::orders_topic;
use crate::domain::budget::PurchaseBudget;

/// Produces order messages to their sale's topic.
#[derive(Clone)]
pub struct OrderProducer {
    producer: FutureProducer,
}

/// Producer tuning, measured rather than guessed (see docs/performance.md).
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    /// The purchase budget: no message is retried by the producer past it
    /// (the purchase itself stops waiting at its own deadline).
    pub budget: PurchaseBudget,
    /// How long librdkafka waits to fill a batch. Messages produced while a
    /// request is in flight still travel together in the next one.
    pub linger: Duration,
    /// librdkafka's `debug` contexts (e.g. `eos,broker,topic,msg`), logged
    /// at debug level: what the client did while a broker was away.
    pub debug: Option<String>,
}

impl Default for ProducerSettings {
    fn default() -> Self {
        Self {
            budget: PurchaseBudget::DEFAULT,
            linger: Duration::ZERO,
            debug: None,
        }
    }
}

/// The broker did not acknowledge the order in time (or refused it).
#[derive(Debug, thiserror::Error)]
#[error("order not acknowledged by kafka: {0}")]
pub struct ProduceError(#[from] rdkafka::error::KafkaError);

impl OrderProducer {
    /// A producer for the cluster at `bootstrap`.
    pub fn new(bootstrap: &str, settings: ProducerSettings) -> Result<Self, ProduceError> {
        let mut config = client_config(bootstrap);
        if let Some(debug) = &settings.debug {
            config.set("debug", debug).set("log_level", "7");
        }
        let producer = config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Every purchase waits for this socket: no Nagle delay behind an
            // unacknowledged request.
            .set("socket.nagle.disable", "true")
            .set("linger.ms", settings.linger.as_millis().to_string())
            .set(
                "message.timeout.ms",
                settings.budget.produce_timeout().as_millis().to_string(),
            )
            .create()?;
        Ok(Self { producer })
    }

    /// Sends `order` to its sale's topic, keyed by shopper, and waits for the
    /// broker's acknowledgement.
    pub async fn send(&self, order: &OrderMessage) -> Result<(), ProduceError> {
        let topic = orders_topic(&order.sale);
        let payload = order.to_payload();
        let record = FutureRecord::to(&topic)
            .key(order.shopper.as_bytes())
            .payload(&payload);
        // The queue wait is bounded by message.timeout.ms as well.
        self.producer
            .send(record, Duration::ZERO)
            .await
            .map(|_| ())
            .map_err(|(e, _)| ProduceError(e))
    }

    /// Waits for every message in flight (graceful shutdown).
    pub fn flush(&self, timeout: Duration) {
        if let Err(e) = self.producer.flush(timeout) {
            tracing::warn!(error = %e, "kafka producer did not flush in time");
        }
    }

    /// Whether the producer can reach a broker (for readiness).
    pub async fn ping(&self) -> bool {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, Duration::from_secs(1))
                .is_ok_and(|m| !m.brokers().is_empty())
        })
        .await
        .unwrap_or(false)
    }
}
