//! A consumer's receive errors, logged at most every few seconds.
//!
//! While a broker is unreachable librdkafka queues an error for each
//! connection it tries — many a second when the client has no metadata yet.
//! They are transient (it reconnects by itself), and they sit in the same
//! queue as the rebalances and messages behind them: a consumer takes the
//! next one at once and logs a few.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;

use crate::domain::sale::SaleRef;

/// The shortest time between two logged receive errors.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// One consumer's receive errors since it last logged one.
#[derive(Default)]
pub struct ReceiveErrors {
    since_logged: Mutex<Option<(Instant, u64)>>,
}

impl ReceiveErrors {
    /// Notes `error` of `sale`'s consumer: logged when none was for
    /// [`LOG_EVERY`], with how many went unlogged meanwhile.
    pub fn note(&self, sale: &SaleRef, error: &KafkaError) {
        let mut since = self.since_logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match since.as_mut() {
            Some((at, unlogged)) if now.duration_since(*at) < LOG_EVERY => *unlogged += 1,
            _ => {
                let unlogged = since.map_or(0, |(_, n)| n);
                tracing::warn!(%sale, %error, unlogged, "kafka receive failed");
                *since = Some((now, 0));
            }
        }
    }
}
