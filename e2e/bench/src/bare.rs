//! The floor under the API's CPU per purchase: a bare axum handler that
//! answers every purchase 202 with an order id, on the API's runtime
//! (tokio's default, pinned to the API's core), stormed by the same load
//! generator — HTTP and the runtime alone, without JWT, Redis or Kafka;
//! and a fixed status, the floor under the status route.

use std::time::Duration;

use axum::Json;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::routing::{get, post};

use crate::cpu::{self, CpuShare};
use crate::procs::{self, Proc};

/// The benchmark's hidden flag that makes it serve the bare handler.
pub const FLAG: &str = "serve-bare-handler";
const PORT: u16 = 18182;

/// What the bare handler cost.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bare {
    /// Requests answered per second.
    pub requests_per_sec: f64,
    /// How the cores were shared ("API" is the bare handler).
    pub cpu: CpuShare,
    /// Reads of a fixed status.
    pub status: crate::funnel::Statuses,
}

impl Bare {
    /// The handler process's CPU per request, µs.
    pub fn us_per_request(&self) -> f64 {
        cpu::part(&self.cpu, "API")
    }
}

/// Serves the bare handler on `listen` until killed (run by the benchmark
/// as its own pinned process).
pub async fn serve(listen: &str) -> anyhow::Result<()> {
    async fn purchase(Path(_sale): Path<String>) -> (StatusCode, Json<serde_json::Value>) {
        (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({"orderId": uuid::Uuid::now_v7(), "status": "PENDING"})),
        )
    }
    // The status's shape and headers, none of its work.
    async fn status(Path(sale): Path<String>) -> impl axum::response::IntoResponse {
        (
            [
                (header::CACHE_CONTROL, "public, max-age=1"),
                (header::ETAG, "W/\"0123456789abcdef01234567\""),
            ],
            Json(serde_json::json!({
                "sale": sale, "state": "live", "startsAt": "2026-12-06T20:00:00.000Z",
                "endsAt": "2026-12-06T22:00:00.000Z", "serverTime": chrono::Utc::now(), "stock": "plenty",
            })),
        )
    }
    let app = axum::Router::new()
        .route("/v1/sales/{sale}/orders", post(purchase))
        .route("/v1/sales/{sale}/status", get(status));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// Storms the bare handler as the API is stormed (closed loop, the same
/// clients and tokens) for `duration`.
pub async fn run(secret: &[u8], duration: Duration) -> anyhow::Result<Bare> {
    let mut command = procs::pinned("1", std::env::current_exe()?);
    command.args([format!("--{FLAG}"), format!("127.0.0.1:{PORT}")]);
    let server = Proc::start(&procs::log("bare-handler"), command)?;
    let url = format!("http://127.0.0.1:{PORT}");
    wait_listening(PORT).await?;
    let storm = |duration| crate::intake::storm(&url, "bare", secret, None, duration);
    // The same warm-up as the API's: connections and allocators settle.
    let _ = flashsale_workload::load::storm(storm(Duration::from_secs(2))).await?;
    let before = cpu::snapshot(&[(server.pid(), "API")], "exited children");
    let (report, _) = flashsale_workload::load::storm(storm(duration)).await?;
    let share = cpu::share(
        &before,
        &cpu::snapshot(&[(server.pid(), "API")], "exited children"),
        report.requests as usize,
    );
    let status =
        crate::funnel::statuses(&url, "bare", server.pid(), crate::intake::CLIENTS, duration)
            .await?;
    server.stop().await;
    Ok(Bare {
        requests_per_sec: report.requests_per_sec,
        cpu: share,
        status,
    })
}

async fn wait_listening(port: u16) -> anyhow::Result<()> {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the bare handler did not listen on {port} within 5 s")
}
