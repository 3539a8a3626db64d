//! The load tool's queue mode: a crowd of distinct shoppers joins a sale's
//! admission queue, then the shoppers whose turn falls in a window are
//! followed as their pages would follow them — does admission keep its rate
//! with the crowd still behind?

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hyper::header::AUTHORIZATION;
use indicatif::{ProgressBar, ProgressStyle};
use jsonwebtoken::EncodingKey;
use serde::{Deserialize, Serialize};

use super::purchases::{NoAnswer, PurchaseClient};
use super::{bearer, histogram};
use crate::domain::admission::admitted;

/// Who joins, and how many at a time.
#[derive(Debug, Clone)]
pub struct Crowd {
    /// The API's base URL.
    pub url: String,
    /// The queued sale.
    pub sale: String,
    /// Distinct shoppers, `queue-0` upwards, each joining once.
    pub shoppers: u64,
    /// Joins in flight.
    pub concurrency: usize,
    /// The API's HS256 identity secret: each shopper gets its own JWT.
    pub secret: Vec<u8>,
    /// The sale's start and admission rate: a joined shopper's place in the
    /// whole line (its rank) follows from its position and them.
    pub start: DateTime<Utc>,
    /// Places admitted per second.
    pub rate_per_sec: u32,
    /// Tickets of ranks below this one are kept, to follow them later.
    pub keep_below: u64,
    /// Show a progress bar.
    pub progress: bool,
}

/// A shopper in line, as its join was answered.
#[derive(Debug, Clone)]
pub struct InLine {
    /// The shopper's number (`queue-{n}`).
    pub shopper: u64,
    /// Its rank in the whole line, admitted places included (0 = first):
    /// its turn comes at the start + (rank + 1) / rate.
    pub rank: u64,
    /// Its signed ticket.
    pub ticket: String,
}

/// How the crowd joined.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Joined {
    /// Joins answered 202.
    pub joined: u64,
    /// Wall time of the joins.
    pub seconds: f64,
    /// Joins per second.
    pub per_sec: f64,
    /// Latency of a join, ms.
    pub p50_ms: f64,
    /// Its 99th percentile, ms.
    pub p99_ms: f64,
    /// Answers other than 202, by status and code (503 BUSY is retried).
    pub other: BTreeMap<String, u64>,
    /// The places kept (`Crowd::keep_below`), by rank.
    #[serde(skip)]
    pub kept: Vec<InLine>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlaceBody {
    ticket: Option<String>,
    state: Option<String>,
    position: Option<u64>,
    purchase_token: Option<serde_json::Value>,
    code: Option<String>,
}

fn bar(len: u64, what: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Joins every shopper of `crowd` once, closed loop; a 503 `BUSY` is
/// retried after a short pause, anything else but a 202 is counted.
pub async fn join(crowd: &Crowd) -> anyhow::Result<Joined> {
    let client = Arc::new(PurchaseClient::new(&crowd.url, &crowd.sale, 1)?);
    let key = Arc::new(EncodingKey::from_secret(&crowd.secret)?);
    let exp = Utc::now().timestamp() + 3 * 3600;
    let next = Arc::new(AtomicU64::new(0));
    let progress = bar(crowd.shoppers, "joining", crowd.progress);
    let started = Instant::now();
    let workers = (0..crowd.concurrency).map(|_| {
        let (client, key, next, progress) =
            (client.clone(), key.clone(), next.clone(), progress.clone());
        let (shoppers, keep_below) = (crowd.shoppers, crowd.keep_below);
        let (start_ms, rate) = (crowd.start.timestamp_millis(), crowd.rate_per_sec);
        tokio::spawn(async move {
            let mut latency = histogram();
            let mut other = BTreeMap::<String, u64>::new();
            let mut kept = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= shoppers {
                    break;
                }
                let identity = bearer(&key, &format!("queue-{n}"), exp);
                loop {
                    let (sent, sent_ms) = (Instant::now(), Utc::now().timestamp_millis());
                    let answer = client.join_queue((&AUTHORIZATION, identity.clone())).await;
                    let _ = latency.record((sent.elapsed().as_micros() as u64).max(1));
                    // The API decided between sending and answering: its
                    // `admitted` then, within a place or two at most.
                    let decided_ms = (sent_ms + Utc::now().timestamp_millis()) / 2;
                    let (status, body) = match answer {
                        Ok((status, bytes)) => {
                            (status, serde_json::from_slice::<PlaceBody>(&bytes).ok())
                        }
                        Err(e) => {
                            *other.entry(format!("ERROR {e:?}")).or_default() += 1;
                            break;
                        }
                    };
                    let code = body.as_ref().and_then(|b| b.code.clone());
                    if status == 503 && code.as_deref() == Some("BUSY") {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    match (status, body) {
                        (
                            202,
                            Some(PlaceBody {
                                ticket: Some(ticket),
                                position,
                                ..
                            }),
                        ) => {
                            let rank = position
                                .map(|p| p - 1 + admitted(rate, start_ms, decided_ms))
                                .filter(|&rank| rank < keep_below);
                            if let Some(rank) = rank {
                                kept.push(InLine {
                                    shopper: n,
                                    rank,
                                    ticket,
                                });
                            }
                        }
                        _ => {
                            *other
                                .entry(format!("{status} {}", code.unwrap_or_default()))
                                .or_default() += 1
                        }
                    }
                    break;
                }
                progress.inc(1);
            }
            (latency, other, kept)
        })
    });
    let mut latency = histogram();
    let mut other = BTreeMap::new();
    let mut kept = Vec::new();
    for worker in futures::future::join_all(workers).await {
        let (l, o, k) = worker?;
        latency.add(&l)?;
        for (what, n) in o {
            *other.entry(what).or_default() += n;
        }
        kept.extend(k);
    }
    progress.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let failed: u64 = other.values().sum();
    let joined = crowd.shoppers - failed;
    kept.sort_by_key(|w| w.rank);
    Ok(Joined {
        joined,
        seconds,
        per_sec: joined as f64 / seconds,
        p50_ms: latency.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: latency.value_at_quantile(0.99) as f64 / 1000.0,
        other,
        kept,
    })
}

/// How the shoppers due in a window were admitted.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    /// Shoppers whose turn fell in the window.
    pub due: u64,
    /// Of them, those given a purchase token.
    pub admitted: u64,
    /// The window, seconds (first turn to last).
    pub window_secs: f64,
    /// Tokens given per second over the window.
    pub per_sec: f64,
    /// From a shopper's turn to its token, ms: p50.
    pub late_p50_ms: f64,
    /// p99.
    pub late_p99_ms: f64,
    /// Answers other than waiting or admitted, by status and code.
    pub other: BTreeMap<String, u64>,
}

/// The instant the place of `rank` is admitted at `rate` from `start`.
pub fn turn(start: DateTime<Utc>, rate_per_sec: u32, rank: u64) -> DateTime<Utc> {
    let ms = (rank + 1)
        .saturating_mul(1000)
        .div_ceil(u64::from(rate_per_sec.max(1)));
    start + chrono::Duration::milliseconds(ms as i64)
}

/// Follows each of `in_line` from its turn until its token comes, as a
/// page polling its ticket would (again after 50 ms while told to wait, or
/// 100 ms when the API is busy); gives up on one still waiting 10 s after
/// its turn.
pub async fn follow(
    url: &str,
    sale: &str,
    secret: &[u8],
    in_line: Vec<InLine>,
    start: DateTime<Utc>,
    rate_per_sec: u32,
) -> anyhow::Result<Admitted> {
    anyhow::ensure!(!in_line.is_empty(), "nobody to follow");
    let client = Arc::new(PurchaseClient::new(url, sale, 1)?);
    let key = EncodingKey::from_secret(secret)?;
    let exp = Utc::now().timestamp() + 3600;
    let first = turn(start, rate_per_sec, in_line[0].rank);
    let last = turn(start, rate_per_sec, in_line[in_line.len() - 1].rank);
    let results = Arc::new(Mutex::new((
        histogram(),
        0u64,
        BTreeMap::<String, u64>::new(),
    )));
    let mut followers = Vec::with_capacity(in_line.len());
    for shopper in &in_line {
        let due = turn(start, rate_per_sec, shopper.rank);
        if let Ok(wait) = (due - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        let (client, results) = (client.clone(), results.clone());
        let identity = bearer(&key, &format!("queue-{}", shopper.shopper), exp);
        let ticket = shopper.ticket.clone();
        followers.push(tokio::spawn(async move {
            let outcome = loop {
                match client
                    .queue_place((&AUTHORIZATION, identity.clone()), &ticket)
                    .await
                {
                    Ok((200, bytes)) => {
                        let body = serde_json::from_slice::<PlaceBody>(&bytes).ok();
                        match body.as_ref().and_then(|b| b.state.as_deref()) {
                            Some("admitted")
                                if body.as_ref().is_some_and(|b| b.purchase_token.is_some()) =>
                            {
                                break None;
                            }
                            Some("waiting") if Utc::now() < due + chrono::Duration::seconds(10) => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            state => break Some(format!("200 {}", state.unwrap_or("?"))),
                        }
                    }
                    Ok((status, bytes)) => {
                        let code = serde_json::from_slice::<PlaceBody>(&bytes)
                            .ok()
                            .and_then(|b| b.code)
                            .unwrap_or_default();
                        if code == "BUSY" && Utc::now() < due + chrono::Duration::seconds(10) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        break Some(format!("{status} {code}"));
                    }
                    Err(NoAnswer::Timeout) => break Some("ERROR timeout".into()),
                    Err(NoAnswer::Connect) => break Some("ERROR connect".into()),
                }
            };
            let late_us = (Utc::now() - due).num_microseconds().unwrap_or(0).max(1) as u64;
            let mut results = results.lock().unwrap_or_else(|p| p.into_inner());
            match outcome {
                None => {
                    let _ = results.0.record(late_us);
                    results.1 += 1;
                }
                Some(other) => *results.2.entry(other).or_default() += 1,
            }
        }));
    }
    futures::future::join_all(followers).await;
    let (late, admitted, other) = results.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let window_secs = ((last - first).num_milliseconds() as f64 / 1000.0).max(1e-3);
    Ok(Admitted {
        due: in_line.len() as u64,
        admitted,
        window_secs,
        per_sec: admitted as f64 / window_secs,
        late_p50_ms: late.value_at_quantile(0.5) as f64 / 1000.0,
        late_p99_ms: late.value_at_quantile(0.99) as f64 / 1000.0,
        other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_s_turn_agrees_with_the_api_s_admission() {
        use crate::domain::admission::{Admission, Place, place};
        let start = Utc::now();
        for (rate, rank) in [(1000, 0), (1000, 2499), (3, 0), (3, 7), (7, 100)] {
            let at = turn(start, rate, rank).timestamp_millis();
            let rule = Admission {
                prequeue: Duration::from_secs(60),
                rate_per_sec: rate,
                challenge: None,
            };
            let start_ms = start.timestamp_millis();
            assert_eq!(
                place(rank, &rule, start_ms, at, false),
                Place::Admitted,
                "{rate} {rank}"
            );
            assert!(
                matches!(
                    place(rank, &rule, start_ms, at - 1, false),
                    Place::Waiting { .. }
                ),
                "{rate} {rank}"
            );
        }
    }
}
