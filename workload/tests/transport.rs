//! The shopper port against hostile clients, on real sockets: slowloris
//! (thousands of connections trickling headers), trickled bodies holding
//! requests in flight, and a shutdown that does not wait for either.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{LiveSale, TestApi};
use flashsale_workload::api::transport::TransportLimits;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);

fn limits(max_in_flight: usize) -> TransportLimits {
    TransportLimits {
        header_timeout: HEADER_TIMEOUT,
        body_timeout: BODY_TIMEOUT,
        shutdown_grace: SHUTDOWN_GRACE,
        max_in_flight,
        ..TransportLimits::default()
    }
}

fn address(api: &TestApi) -> String {
    api.url.trim_start_matches("http://").to_string()
}

/// A client that connects, sends `opening`, then one more byte every 500 ms
/// and never finishes; resolves with how long the server kept it open.
async fn trickle(address: String, opening: String) -> Duration {
    let started = Instant::now();
    let Ok(mut socket) = TcpStream::connect(&address).await else {
        return started.elapsed();
    };
    if socket.write_all(opening.as_bytes()).await.is_err() {
        return started.elapsed();
    }
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            read = socket.read(&mut buf) => match read {
                // Closed, or an answer (a timeout's 408) before the close.
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            },
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if socket.write_all(b"x").await.is_err() {
                    return started.elapsed();
                }
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return started.elapsed();
        }
    }
}

/// `n` trickling clients: half stop inside the request line's headers, a
/// quarter send nothing after connecting, a quarter trickle a header value.
fn trickling(api: &TestApi, n: usize) -> Vec<tokio::task::JoinHandle<Duration>> {
    (0..n)
        .map(|i| {
            let opening = match i % 4 {
                0 | 1 => format!("GET /v1/sales/s{i} HTTP/1.1\r\nHost: a\r\n"),
                2 => String::new(),
                _ => "POST /v1/sales/s/orders HTTP/1.1\r\nX-Slow: ".to_string(),
            };
            tokio::spawn(trickle(address(api), opening))
        })
        .collect()
}

/// `requests` purchases by 32 concurrent shoppers: their latencies (µs)
/// and how many failed in transport (no HTTP answer at all).
async fn storm(sale: &LiveSale, round: &str, requests: usize) -> (Histogram<u64>, usize) {
    let workers: Vec<_> = (0..32)
        .map(|w| {
            let api = sale.api.clone();
            let name = sale.config.sale.clone();
            let round = round.to_string();
            tokio::spawn(async move {
                let mut latencies = Histogram::<u64>::new(3).unwrap();
                let mut failed = 0;
                for i in (w..requests).step_by(32) {
                    let started = Instant::now();
                    let request = api
                        .client
                        .post(format!("{}/v1/sales/{}/orders", api.url, name.name))
                        .header("x-user-id", format!("{round}-{i}"))
                        .json(&serde_json::json!({ "quantity": 1 }))
                        .send()
                        .await;
                    match request {
                        Ok(answer) => {
                            assert_eq!(answer.status(), 202, "{:?}", answer.text().await);
                            latencies
                                .record(started.elapsed().as_micros() as u64)
                                .unwrap();
                        }
                        Err(_) => failed += 1,
                    }
                }
                (latencies, failed)
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new(3).unwrap();
    let mut failed = 0;
    for worker in workers {
        let (latencies, f) = worker.await.unwrap();
        all.add(latencies).unwrap();
        failed += f;
    }
    (all, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_cut_off_while_a_storm_buys_and_shutdown_keeps_its_grace() {
    common::init_logs();
    let sale = LiveSale::start_with(common::redis_node(), 100_000, 1, 10, |o| {
        o.transport = limits(1024);
    })
    .await;

    let (quiet, quiet_failed) = storm(&sale, "quiet", 1000).await;
    let slow = trickling(&sale.api, 2000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (stormy, stormy_failed) = storm(&sale, "trickled", 1000).await;
    let mut kept_open = Vec::new();
    for client in slow {
        kept_open.push(client.await.unwrap());
    }
    kept_open.sort();
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "storm of 1000 purchases, 32 at a time: p50 {:.1} / p99 {:.1} ms alone, \
         p50 {:.1} / p99 {:.1} ms beside 2000 trickling sockets",
        ms(&quiet, 0.5),
        ms(&quiet, 0.99),
        ms(&stormy, 0.5),
        ms(&stormy, 0.99)
    );
    println!(
        "trickling sockets kept open: shortest {:?}, median {:?}, longest {:?} (header timeout {HEADER_TIMEOUT:?})",
        kept_open[0],
        kept_open[kept_open.len() / 2],
        kept_open[kept_open.len() - 1]
    );
    assert_eq!(
        (quiet_failed, stormy_failed),
        (0, 0),
        "purchases failed in transport"
    );
    assert_eq!(
        quiet.len() + stormy.len(),
        2000,
        "every purchase answered 202"
    );
    assert!(
        kept_open[kept_open.len() - 1] < HEADER_TIMEOUT + Duration::from_secs(10),
        "a trickling socket was kept {:?}: the header timeout does not cut it off",
        kept_open[kept_open.len() - 1]
    );

    // Shutdown with trickling clients connected: they do not hold it.
    let slow = trickling(&sale.api, 500);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api = Arc::try_unwrap(sale.api).ok().expect("the only handle");
    let started = Instant::now();
    api.stop().await;
    let stopped_in = started.elapsed();
    println!("shutdown with 500 trickling sockets took {stopped_in:?} (grace {SHUTDOWN_GRACE:?})");
    assert!(
        stopped_in < SHUTDOWN_GRACE + Duration::from_secs(2),
        "shutdown took {stopped_in:?}, past its grace"
    );
    for client in slow {
        client.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_cap_are_shed_at_once_and_slow_bodies_time_out() {
    common::init_logs();
    let sale = LiveSale::start_with(common::redis_node(), 100, 1, 10, |o| {
        o.transport = limits(4);
    })
    .await;
    let before = sale.remaining().await;
    // Four purchases whose bodies never finish hold the four places.
    let held: Vec<_> = (0..4)
        .map(|i| {
            let address = address(&sale.api);
            let path = format!("/v1/sales/{}/orders", sale.config.sale.name);
            tokio::spawn(async move {
                let started = Instant::now();
                let mut socket = TcpStream::connect(address).await.unwrap();
                let head = format!(
                    "POST {path} HTTP/1.1\r\nHost: a\r\nX-User-Id: held-{i}\r\n\
                     Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{{\"quan"
                );
                socket.write_all(head.as_bytes()).await.unwrap();
                let mut answer = Vec::new();
                let _ = socket.read_to_end(&mut answer).await;
                (
                    started.elapsed(),
                    String::from_utf8_lossy(&answer).into_owned(),
                )
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = Instant::now();
    let shed = sale.api.buy(&sale.config.sale, "fifth", 1).await;
    let shed_in = started.elapsed();
    assert_eq!((shed.status, shed.code()), (503, "BUSY"), "{shed:?}");
    assert_eq!(shed.retry_after.as_deref(), Some("1"));
    println!("a fifth request beside four in flight: 503 BUSY in {shed_in:?}");

    for held in held {
        let (after, answer) = held.await.unwrap();
        let status_line = answer.lines().next().unwrap_or_default().to_string();
        println!("a trickled body: {status_line:?} after {after:?}");
        assert!(
            status_line.starts_with("HTTP/1.1 4"),
            "a body that never finishes gets a 4xx: {answer:?}"
        );
        assert!(answer.contains("\"code\""), "a coded answer: {answer:?}");
        assert!(
            after < BODY_TIMEOUT + Duration::from_secs(10),
            "the body timeout did not end it: {after:?}"
        );
    }
    assert_eq!(sale.remaining().await, before, "nothing was reserved");
    let after = sale.api.buy(&sale.config.sale, "fifth", 1).await;
    assert_eq!(after.status, 202, "{after:?}");
}
