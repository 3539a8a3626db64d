//! The API's internal port (probes, Prometheus): liveness, metrics, and a
//! readiness that a background task computes and `/readyz` reads from memory,
//! so a flood of probes costs Redis and Kafka nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, extract::State};
use tokio_util::sync::CancellationToken;

use super::AppState;

const REDIS: u8 = 1;
const KAFKA: u8 = 2;
const SALES: u8 = 4;
const ALL: u8 = REDIS | KAFKA | SALES;

/// What the last background check found (nothing, until the first check).
#[derive(Debug, Default)]
pub struct Readiness(AtomicU8);

impl Readiness {
    /// Whether Redis, Kafka and the sales were all fine at the last check.
    pub fn ready(&self) -> bool {
        self.0.load(Ordering::Relaxed) == ALL
    }

    fn report(&self) -> serde_json::Value {
        let found = self.0.load(Ordering::Relaxed);
        serde_json::json!({
            "redis": found & REDIS != 0,
            "kafka": found & KAFKA != 0,
            "sales": found & SALES != 0,
        })
    }
}

/// How often readiness is checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks Redis (a PING), Kafka (a metadata fetch) and the catalog every
/// [`CHECK_EVERY`] until `stop`, and records what it found.
pub fn spawn_checks(state: AppState, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = stop.cancelled() => return,
            }
            let found = check(&state).await;
            state.readiness.0.store(found, Ordering::Relaxed);
        }
    });
}

async fn check(state: &AppState) -> u8 {
    let redis = async {
        let mut conn = state.intake.store().conn();
        tokio::time::timeout(
            Duration::from_secs(1),
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    };
    let (redis, kafka) = tokio::join!(redis, state.intake.producer().ping());
    u8::from(redis) * REDIS + u8::from(kafka) * KAFKA + u8::from(state.catalog.is_loaded()) * SALES
}

/// `/healthz`, `/readyz` and `/metrics`.
pub fn router(state: AppState) -> Router {
    crate::metrics::router(state.metrics.clone()).merge(
        Router::new()
            .route("/readyz", get(readyz))
            .with_state(state.readiness.clone()),
    )
}

async fn readyz(State(readiness): State<Arc<Readiness>>) -> Response {
    let status = if readiness.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness.report())).into_response()
}
