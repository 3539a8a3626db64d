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
        // And find it again within about a second once it is back (the
        // default backoff grows to 10 s, +50 % jitter: an API kept refusing
        // and an operator kept Degraded that long after the broker returned).
        .set("reconnect.backoff.max.ms", "1000")
        .set("log_level", "4");
    config
}
