//! The funnel's cheap answers (issue 36): the status anyone may cache and a
//! sold-out purchase, answered per second by the API against the bare
//! handler of the same run — what one API core gives when most of a storm
//! is told "not yet" or "none left".

use std::sync::Arc;
use std::time::{Duration, Instant};

use flashsale_workload::load::purchases::PurchaseClient;

use crate::cpu::{self, CpuShare};

/// Reads of a status answered, and how the cores were shared meanwhile.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Statuses {
    /// 200s per second.
    pub per_sec: f64,
    /// The cores, per status read (`server` is "API").
    pub cpu: CpuShare,
}

/// Reads of the sale's status from the process `server`, closed loop,
/// `clients` at a time, for `duration`. Anything but a 200 fails the run.
pub async fn statuses(
    url: &str,
    sale: &str,
    server: u32,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Statuses> {
    let client = Arc::new(PurchaseClient::new(url, sale, 1)?);
    let before = cpu::snapshot(&[(server, "API")], "exited children");
    let started = Instant::now();
    let deadline = started + duration;
    let readers = (0..clients).map(|_| {
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
    let per_sec = answered as f64 / started.elapsed().as_secs_f64();
    let after = cpu::snapshot(&[(server, "API")], "exited children");
    Ok(Statuses {
        per_sec,
        cpu: cpu::share(&before, &after, answered as usize),
    })
}

/// What the API answered per second: statuses of a live sale, and
/// purchases of a sold-out one.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheapAnswers {
    /// `GET /v1/sales/{sale}/status` answered 200.
    pub status: Statuses,
    /// Purchases answered 409 SOLD_OUT per second.
    pub sold_out_per_sec: f64,
}
