//! Shoppers who retry the way real clients do: each purchase carries an
//! `Idempotency-Key`, and after a 503, a timeout or a dropped connection
//! the same key is sent again until a decision (202 or a 4xx) or the end.
//! Purchases go through the load tool's client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashsale_workload::load::evidence::fewer;
use flashsale_workload::load::purchases::PurchaseClient;
use reqwest::header::{HeaderName, HeaderValue};
use tokio::sync::Mutex;

/// The shopper's identity header of the API's dev mode.
const USER_ID: HeaderName = HeaderName::from_static("x-user-id");

/// What the shoppers were told, with the instant of every answer.
#[derive(Debug, Default)]
pub struct Told {
    /// Accepted orders: id -> (shopper, units).
    pub accepted: BTreeMap<String, (String, i64)>,
    /// Decisions and failures by "status CODE" ("error" for no answer).
    pub answers: BTreeMap<String, u64>,
    /// Every answer: (seconds since the storm began, whether it was a
    /// decision — 202 or 4xx — rather than a 503 or no answer).
    pub timeline: Vec<(f64, bool)>,
    /// Shoppers whose purchase was still undecided when the storm ended.
    pub undecided: std::collections::BTreeSet<String>,
    /// When the storm ended, seconds since it began.
    pub ended_at: f64,
    /// The fewest units a shopper asked for and heard SOLD_OUT.
    pub sold_out_smallest: Option<i64>,
    /// Orders answered `OUTCOME_UNKNOWN` (their shoppers retry): each may
    /// or may not stand.
    pub in_doubt: std::collections::BTreeSet<String>,
}

impl Told {
    /// Seconds during which no shopper got a decision (a 202 or a 4xx): the
    /// gaps between consecutive decisions, less the quarter second a steady
    /// storm may take between two. Answers that are 503s or lost connections,
    /// and requests left hanging, are all time without a decision.
    pub fn unavailable_secs(&self) -> f64 {
        // From the storm's start and to its end: a fault that outlasts the
        // window leaves no decision after it, and that time counts too.
        let mut decided: Vec<f64> = self
            .timeline
            .iter()
            .filter(|(_, d)| *d)
            .map(|(at, _)| *at)
            .chain([0.0, self.ended_at])
            .collect();
        decided.sort_by(f64::total_cmp);
        decided
            .windows(2)
            .map(|w| (w[1] - w[0] - 0.25).max(0.0))
            .sum()
    }

    /// Decisions (a 202 or a 4xx) answered between `from` and `to`, in
    /// seconds since the storm began: whether shoppers were still served
    /// while a fault held.
    pub fn decided_between(&self, from: f64, to: f64) -> usize {
        self.timeline
            .iter()
            .filter(|(at, decided)| *decided && (from..=to).contains(at))
            .count()
    }
}

/// The storm's shape.
pub struct Storm {
    /// The API's base URL.
    pub url: String,
    /// The sale's name.
    pub sale: String,
    /// Shoppers buying at once.
    pub concurrency: usize,
    /// New purchases per second in all: the stock lasts most of the window,
    /// so the fault strikes a sale that is still selling.
    pub rate: u32,
    /// When to stop starting purchases, and stop retrying.
    pub until: Instant,
}

/// Runs the storm; shopper n buys 1 or 2 units once (with retries).
pub async fn run(storm: Storm) -> Told {
    let told = Arc::new(Mutex::new(Told::default()));
    let began = Instant::now();
    // The load tool's client; a purchase unanswered after 5 s is retried.
    let client = Arc::new(
        PurchaseClient::new(&storm.url, &storm.sale, 2)
            .expect("the API's URL")
            .with_timeout(Duration::from_secs(5)),
    );
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let storm = Arc::new(storm);
    let workers: Vec<_> = (0..storm.concurrency)
        .map(|worker| {
            let (told, client, next, storm) =
                (told.clone(), client.clone(), next.clone(), storm.clone());
            tokio::spawn(async move {
                // Each worker starts a purchase every `concurrency / rate` s,
                // the workers evenly staggered: in step, their answers came
                // in bursts whose gaps counted as time without a decision
                // (5.9 s of a fault-free short run).
                let every =
                    Duration::from_secs_f64(storm.concurrency as f64 / f64::from(storm.rate));
                let first = tokio::time::Instant::now()
                    + every.mul_f64(worker as f64 / storm.concurrency as f64);
                let mut tick = tokio::time::interval_at(first, every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while Instant::now() < storm.until {
                    tick.tick().await;
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    shopper(&client, &storm, n, began, &told).await;
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    let mut told = Arc::try_unwrap(told)
        .map(Mutex::into_inner)
        .unwrap_or_default();
    told.ended_at = began.elapsed().as_secs_f64();
    told
}

async fn shopper(
    client: &PurchaseClient,
    storm: &Storm,
    n: usize,
    began: Instant,
    told: &Mutex<Told>,
) {
    let who = format!("shopper-{n}");
    let identity = HeaderValue::from_str(&who).expect("a header value");
    let key = HeaderValue::from_str(&format!("purchase-{n}")).expect("a header value");
    let quantity = 1 + (n % 2) as i64;
    loop {
        let answer = client
            .purchase((&USER_ID, identity.clone()), quantity, Some(&key))
            .await
            .ok();
        let at = began.elapsed().as_secs_f64();
        let status = answer.as_ref().map(|a| a.status);
        let code = answer.as_ref().and_then(|a| a.code.clone());
        let decided = status.is_some_and(|s| s == 202 || (400..500).contains(&s));
        let mut t = told.lock().await;
        t.timeline.push((at, decided));
        let label = match status {
            Some(s) => format!("{s} {}", code.as_deref().unwrap_or("")),
            None => "error".to_string(),
        };
        *t.answers.entry(label.trim().to_string()).or_default() += 1;
        let order_id = answer.and_then(|a| a.order_id);
        if code.as_deref() == Some("OUTCOME_UNKNOWN")
            && let Some(id) = &order_id
        {
            t.in_doubt.insert(id.clone());
        }
        if status == Some(202) {
            t.accepted
                .insert(order_id.unwrap_or_default(), (who, quantity));
            return;
        }
        if decided {
            if code.as_deref() == Some("SOLD_OUT") {
                t.sold_out_smallest = fewer(t.sold_out_smallest, Some(quantity));
            }
            return;
        }
        drop(t);
        if Instant::now() >= storm.until {
            told.lock().await.undecided.insert(who);
            return;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_is_time_between_decisions_from_start_to_end() {
        let cases = [
            // Gaps 0.1 (steady), 0.1, 2.0 (a stall), 0.1, 0.7, 0.1.
            ("a stall mid-storm", 3.1, 1.75 + 0.45),
            // ... and 2.0 s after the last decision: the fault outlasted it.
            ("no decision after the fault", 5.0, 1.75 + 0.45 + 1.75),
        ];
        for (what, ended_at, expected) in cases {
            let told = Told {
                timeline: vec![
                    (0.1, true),
                    (0.2, true),
                    (0.5, false),
                    (1.0, false),
                    (2.2, true),
                    (2.3, true),
                    (3.0, true),
                ],
                ended_at,
                ..Told::default()
            };
            let secs = told.unavailable_secs();
            assert!((secs - expected).abs() < 1e-9, "{what}: {secs}");
        }
    }
}
