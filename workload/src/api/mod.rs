//! The shopper HTTP API (axum), exactly per the contract: sale info, purchase,
//! order status, pay and cancel; health, readiness, metrics and OpenAPI.

pub mod auth;
pub mod error;
pub mod limits;
pub mod openapi;
pub mod orders;
pub mod sales;
pub mod server;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sqlx::PgPool;

use crate::catalog::Catalog;
use crate::intake::Intake;
use crate::metrics::{Metrics, RequestLabels, RouteLabels};
use auth::Auth;
use error::ApiError;
use limits::Limits;

/// Largest request body accepted (a purchase is `{"quantity": n}`).
pub const MAX_BODY_BYTES: usize = 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The namespace's sales.
    pub catalog: Arc<Catalog>,
    /// The purchase path.
    pub intake: Arc<Intake>,
    /// Orders.
    pub db: PgPool,
    /// Shopper identity.
    pub auth: Arc<Auth>,
    /// Rate limits.
    pub limits: Arc<Limits>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// The client's address (the TCP peer).
pub struct ClientIp(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip()),
        ))
    }
}

/// The routes, with the body limit, the metrics middleware and JSON answers
/// for unknown paths, wrong methods and (as a safety net) panics.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/sales/{sale}", get(sales::get_sale))
        .route("/v1/sales/{sale}/orders", post(orders::purchase))
        .route("/v1/orders/{order_id}", get(orders::get_order))
        .route("/v1/orders/{order_id}/pay", post(orders::pay))
        .route("/v1/orders/{order_id}/cancel", post(orders::cancel))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .fallback(|| async { ApiError::not_found("no such path") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| ApiError::internal().into_response(),
        ))
        .with_state(state)
}

/// The method as a metric label, from a fixed set: a label taken from the
/// request would let made-up methods add a series each until the pod runs
/// out of memory.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_string();
    let method = method_label(request.method()).to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    state
        .metrics
        .request_seconds
        .get_or_create(&RouteLabels {
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: response.status().as_u16(),
        })
        .inc();
    response
}

async fn readyz(State(state): State<AppState>) -> Response {
    let redis_ok = {
        let mut conn = state.intake.store().conn();
        tokio::time::timeout(
            Duration::from_secs(1),
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    };
    let kafka_ok = state.intake.producer().ping().await;
    let catalog_ok = state.catalog.is_loaded();
    let body = serde_json::json!({ "redis": redis_ok, "kafka": kafka_ok, "sales": catalog_ok });
    let status = if redis_ok && kafka_ok && catalog_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
