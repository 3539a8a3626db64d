//! Thin adapter over Kafka (rdkafka): the one home of topic and consumer-group
//! names ([`topics`]), topic administration ([`admin`]) and consumer-group lag
//! ([`lag`]).

pub mod admin;
pub mod lag;
pub mod message;
pub mod producer;
pub mod topics;

use rdkafka::ClientConfig;

/// A client configuration for `bootstrap` with the settings every FlashSale
/// client shares.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "flashsale")
        // Fail fast when the broker is gone: callers decide what to retry.
        .set("socket.connection.setup.timeout.ms", "3000")
        .set("log_level", "4");
    config
}
