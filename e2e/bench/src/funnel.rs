//! The funnel's cheap answers (issue 36): the status anyone may cache and a
//! sold-out purchase, answered per second by the API against the bare
//! handler of the same run — what one API core gives when most of a storm
//! is told "not yet" or "none left".

use std::sync::Arc;
use std::time::{Duration, Instant};

use flashsale_workload::load::purchases::PurchaseClient;

use crate::intake::CLIENTS;

/// Reads of the sale's status, closed loop, `CLIENTS` at a time, for
/// `duration`: answers per second. Anything but a 200 fails the run.
pub async fn statuses(url: &str, sale: &str, duration: Duration) -> anyhow::Result<f64> {
    let client = Arc::new(PurchaseClient::new(url, sale, 1)?);
    let started = Instant::now();
    let deadline = started + duration;
    let readers = (0..CLIENTS).map(|_| {
        let client = client.clone();
        tokio::spawn(async move {
            let (mut answered, mut other) = (0u64, Vec::new());
            while Instant::now() < deadline {
                match client.status().await {
                    Ok(200) => answered += 1,
                    unexpected => other.push(unexpected),
                }
            }
            (answered, other)
        })
    });
    let mut answered = 0;
    for reader in futures::future::join_all(readers).await {
        let (n, other) = reader?;
        anyhow::ensure!(
            other.is_empty(),
            "status of {sale}: {} answers other than 200, e.g. {:?}",
            other.len(),
            other[0]
        );
        answered += n;
    }
    Ok(answered as f64 / started.elapsed().as_secs_f64())
}

/// What the API answered per second: statuses of a live sale, and
/// purchases of a sold-out one.
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheapAnswers {
    /// `GET /v1/sales/{sale}/status` answered 200 per second.
    pub status_per_sec: f64,
    /// Purchases answered 409 SOLD_OUT per second.
    pub sold_out_per_sec: f64,
}
