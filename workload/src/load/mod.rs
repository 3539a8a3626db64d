//! `flashsale load`: a shopper storm against the API — closed loop (N
//! concurrent shoppers with think time) or open loop (a target rate) — with a
//! progress bar, HDR latency histograms per outcome, pay/cancel follow-ups,
//! a JSON report, and the invariants I1–I6 checked against the stores after.

pub mod evidence;
pub mod purchases;
pub mod queue;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use jsonwebtoken::{EncodingKey, Header, encode};
use rand::RngExt;
use serde::Serialize;

use crate::domain::payment;

pub use evidence::{Told, gather};

/// How shoppers prove who they are.
#[derive(Debug, Clone)]
pub enum Identity {
    /// HS256 tokens minted with this secret (`sub` = shopper id).
    Jwt(Vec<u8>),
    /// The development `X-User-Id` header.
    DevHeader,
}

/// How the storm is shaped.
#[derive(Debug, Clone)]
pub struct StormConfig {
    /// The API's base URL.
    pub url: String,
    /// The sale's name.
    pub sale: String,
    /// Distinct shoppers.
    pub shoppers: usize,
    /// Purchase attempts in all (the storm ends at this count or `duration`).
    pub requests: u64,
    /// Longest the storm runs.
    pub duration: Duration,
    /// Closed loop: concurrent shoppers. Ignored when `rate` is set.
    pub concurrency: usize,
    /// Open loop: purchase attempts per second.
    pub rate: Option<u64>,
    /// Pause between a shopper's requests (closed loop).
    pub think: Duration,
    /// Units per purchase: 1 to this.
    pub max_quantity: i64,
    /// Share of accepted orders then paid.
    pub pay: f64,
    /// The payment provider's callback secret: a started payment is then
    /// confirmed as the provider would (a signed callback); without it,
    /// payments are only started and orders stay UNPAID.
    pub payment_secret: Option<Vec<u8>>,
    /// Share of accepted orders then cancelled.
    pub cancel: f64,
    /// Identity.
    pub identity: Identity,
    /// Show a progress bar.
    pub progress: bool,
}

/// Latency percentiles of one outcome, milliseconds.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    /// Requests.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// What a storm did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StormReport {
    /// The sale.
    pub sale: String,
    /// closed-loop or open-loop.
    pub mode: String,
    /// When it started (to line its timeline up with other logs).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Wall time.
    pub duration_secs: f64,
    /// Purchase attempts.
    pub requests: u64,
    /// Attempts per second.
    pub requests_per_sec: f64,
    /// Accepted purchases per second.
    pub accepted_per_sec: f64,
    /// Latency per outcome ("202" or "409 SOLD_OUT", ...).
    pub outcomes: BTreeMap<String, Latency>,
    /// Latency of every accepted purchase, for plots: (start offset ms, latency ms).
    #[serde(skip)]
    pub timeline: Vec<(f64, f64)>,
    /// Orders and units accepted.
    pub accepted_orders: usize,
    /// Units accepted.
    pub accepted_units: i64,
    /// Orders paid afterwards.
    pub paid: u64,
    /// Orders cancelled afterwards.
    pub cancelled: u64,
}

struct Shared {
    /// Pays, cancels and payment callbacks.
    client: reqwest::Client,
    /// Purchases, the hot path.
    purchases: purchases::PurchaseClient,
    config: StormConfig,
    /// Each shopper's `Authorization` (JWT identities).
    tokens: Vec<HeaderValue>,
    issued: AtomicU64,
    started: Instant,
    histograms: Mutex<BTreeMap<String, Histogram<u64>>>,
    told: Mutex<Told>,
    timeline: Mutex<Vec<(f64, f64)>>,
    paid: AtomicU64,
    cancelled: AtomicU64,
    progress: ProgressBar,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

impl Shared {
    fn shopper(&self, i: usize) -> String {
        format!("shopper-{i}")
    }

    /// Shopper `i`'s identity header.
    fn identity(&self, i: usize) -> (&'static HeaderName, HeaderValue) {
        static DEV_IDENTITY: HeaderName = HeaderName::from_static("x-user-id");
        match &self.config.identity {
            Identity::Jwt(_) => (&AUTHORIZATION, self.tokens[i].clone()),
            Identity::DevHeader => (
                &DEV_IDENTITY,
                HeaderValue::from_str(&self.shopper(i)).expect("a shopper id is a header value"),
            ),
        }
    }

    fn authorize(&self, request: reqwest::RequestBuilder, i: usize) -> reqwest::RequestBuilder {
        let (name, value) = self.identity(i);
        request.header(name, value)
    }

    fn record(&self, outcome: &str, latency: Duration) {
        let mut h = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
        let us = (latency.as_micros() as u64).clamp(1, 60_000_000);
        if let Some(h) = h.get_mut(outcome) {
            let _ = h.record(us);
        } else {
            let _ = h
                .entry(outcome.to_string())
                .or_insert_with(histogram)
                .record(us);
        }
    }

    /// One purchase attempt by shopper `i`.
    async fn purchase(self: &Arc<Self>, i: usize) {
        let quantity = rand::rng().random_range(1..=self.config.max_quantity.max(1));
        let sent = Instant::now();
        let (outcome, order, answered) = match self
            .purchases
            .purchase(self.identity(i), quantity, None)
            .await
        {
            Ok(answer) if answer.status == 202 => ("202".to_string(), answer.order_id, None),
            Ok(answer) => (
                format!("{} {}", answer.status, answer.code.unwrap_or_default()),
                None,
                answer.order_id,
            ),
            Err(purchases::NoAnswer::Timeout) => ("ERROR timeout".to_string(), None, None),
            Err(purchases::NoAnswer::Connect) => ("ERROR connect".to_string(), None, None),
        };
        let latency = sent.elapsed();
        self.record(&outcome, latency);
        self.progress.inc(1);
        if outcome.ends_with("SOLD_OUT") {
            let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
            told.sold_out_smallest = evidence::fewer(told.sold_out_smallest, Some(quantity));
        }
        if let (true, Some(order)) = (outcome.ends_with("OUTCOME_UNKNOWN"), &answered) {
            self.told
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .in_doubt
                .insert(order.clone());
        }
        if let Some(order) = order {
            let offset = (sent - self.started).as_secs_f64() * 1000.0;
            self.timeline
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((offset, latency.as_secs_f64() * 1000.0));
            self.told
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .accepted
                .insert(order.clone(), (self.shopper(i), quantity));
            let roll: f64 = rand::rng().random();
            if roll < self.config.pay {
                self.follow_up(i, &order, "pay").await;
            } else if roll < self.config.pay + self.config.cancel {
                self.follow_up(i, &order, "cancel").await;
            }
        }
    }

    /// Pays or cancels an accepted order once it is persisted (ORDER_PENDING
    /// answers are retried after their Retry-After).
    async fn follow_up(&self, i: usize, order: &str, verb: &str) {
        let url = format!("{}/v1/orders/{order}/{verb}", self.config.url);
        for _ in 0..60 {
            let sent = Instant::now();
            let Ok(response) = self.authorize(self.client.post(&url), i).send().await else {
                return;
            };
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            let code = body["code"].as_str().unwrap_or_default();
            if code == "ORDER_PENDING" {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            self.record(
                format!("{} {status} {code}", verb.to_uppercase()).trim_end(),
                sent.elapsed(),
            );
            if status == 200 {
                if verb == "cancel" {
                    self.cancelled.fetch_add(1, Ordering::Relaxed);
                } else if let Some(secret) = &self.config.payment_secret {
                    self.confirm_payment(secret, &body).await;
                }
            }
            return;
        }
    }

    /// Confirms a started payment as the provider does: a signed callback
    /// saying it succeeded.
    async fn confirm_payment(&self, secret: &[u8], started: &serde_json::Value) {
        let body = serde_json::json!({
            "paymentId": started["paymentId"],
            "orderId": started["orderId"],
            "outcome": "succeeded",
        })
        .to_string();
        let signature = payment::sign(secret, chrono::Utc::now().timestamp(), body.as_bytes());
        let sent = Instant::now();
        let Ok(response) = self
            .client
            .post(format!("{}/v1/payments/callback", self.config.url))
            .header(payment::SIGNATURE_HEADER, signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
        else {
            return;
        };
        let status = response.status().as_u16();
        let answer: serde_json::Value = response.json().await.unwrap_or_default();
        self.record(
            format!(
                "PAYMENT CALLBACK {status} {}",
                answer["code"].as_str().unwrap_or_default()
            )
            .trim_end(),
            sent.elapsed(),
        );
        if answer["status"] == "PAID" {
            self.paid.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn more(&self) -> bool {
        self.issued.fetch_add(1, Ordering::Relaxed) < self.config.requests
            && self.started.elapsed() < self.config.duration
    }
}

/// `shopper`'s `Authorization` header: an HS256 token signed with `key`,
/// good until `exp` (Unix seconds).
pub fn bearer(key: &EncodingKey, shopper: &str, exp: i64) -> HeaderValue {
    let token = encode(
        &Header::default(),
        &serde_json::json!({"sub": shopper, "exp": exp}),
        key,
    )
    .expect("an HS256 token encodes");
    HeaderValue::try_from(format!("Bearer {token}")).expect("a JWT is a header value")
}

/// Runs the storm; fails only on a URL it cannot speak to (plain HTTP).
pub async fn storm(config: StormConfig) -> anyhow::Result<(StormReport, Told)> {
    let purchases = purchases::PurchaseClient::new(&config.url, &config.sale, config.max_quantity)?;
    let tokens = match &config.identity {
        Identity::Jwt(secret) => {
            let key = EncodingKey::from_secret(secret).expect("a non-empty JWT secret");
            let exp = chrono::Utc::now().timestamp() + 3600;
            (0..config.shoppers)
                .map(|i| bearer(&key, &format!("shopper-{i}"), exp))
                .collect()
        }
        Identity::DevHeader => Vec::new(),
    };
    let progress = if config.progress {
        let bar = ProgressBar::new(config.requests);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} purchases {per_sec} {msg}",
            )
            .expect("a valid progress template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let concurrency = config.concurrency.max(1);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        // The API closes a connection idle for its header timeout (5 s by
        // default); a client that idles less never sends on a closing one.
        .pool_idle_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client builds");
    let started_at = chrono::Utc::now();
    let shared = Arc::new(Shared {
        client,
        purchases,
        tokens,
        issued: AtomicU64::new(0),
        started: Instant::now(),
        histograms: Mutex::new(BTreeMap::new()),
        told: Mutex::new(Told::default()),
        timeline: Mutex::new(Vec::new()),
        paid: AtomicU64::new(0),
        cancelled: AtomicU64::new(0),
        progress,
        config,
    });
    let shoppers = shared.config.shoppers.max(1);
    let mode = if let Some(rate) = shared.config.rate {
        // Open loop: requests start on schedule whatever the answers' pace.
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        while shared.more() {
            tick.tick().await;
            let s = shared.clone();
            let i = rand::rng().random_range(0..shoppers);
            tasks.spawn(async move { s.purchase(i).await });
        }
        while tasks.join_next().await.is_some() {}
        format!("open-loop {rate}/s")
    } else {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let s = shared.clone();
                tokio::spawn(async move {
                    while s.more() {
                        let i = rand::rng().random_range(0..shoppers);
                        s.purchase(i).await;
                        if !s.config.think.is_zero() {
                            tokio::time::sleep(s.config.think).await;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.await;
        }
        format!("closed-loop {concurrency} shoppers")
    };
    shared.progress.finish_and_clear();
    let elapsed = shared.started.elapsed().as_secs_f64();
    let histograms = shared.histograms.lock().unwrap_or_else(|p| p.into_inner());
    let told = shared
        .told
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let requests: u64 = histograms
        .iter()
        .filter(|(k, _)| !k.starts_with("PAY") && !k.starts_with("CANCEL"))
        .map(|(_, h)| h.len())
        .sum();
    let accepted = histograms.get("202").map_or(0, |h| h.len());
    let report = StormReport {
        sale: shared.config.sale.clone(),
        mode,
        started_at,
        duration_secs: elapsed,
        requests,
        requests_per_sec: requests as f64 / elapsed,
        accepted_per_sec: accepted as f64 / elapsed,
        outcomes: histograms
            .iter()
            .map(|(k, h)| (k.clone(), Latency::of(h)))
            .collect(),
        timeline: shared
            .timeline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        accepted_orders: told.accepted.len(),
        accepted_units: told.accepted.values().map(|(_, q)| q).sum(),
        paid: shared.paid.load(Ordering::Relaxed),
        cancelled: shared.cancelled.load(Ordering::Relaxed),
    };
    Ok((report, told))
}

/// The report as a table for people.
pub fn render(report: &StormReport) -> String {
    let mut out = format!(
        "{} on {}: {} purchases in {:.1} s = {:.0}/s, {:.0} accepted/s; {} orders ({} units) accepted, {} paid, {} cancelled\n",
        report.mode,
        report.sale,
        report.requests,
        report.duration_secs,
        report.requests_per_sec,
        report.accepted_per_sec,
        report.accepted_orders,
        report.accepted_units,
        report.paid,
        report.cancelled
    );
    out.push_str(&format!(
        "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "outcome", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    ));
    for (outcome, l) in &report.outcomes {
        out.push_str(&format!(
            "{outcome:<28} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
            l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        ));
    }
    out
}
