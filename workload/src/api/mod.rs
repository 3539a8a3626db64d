//! The shopper HTTP API (axum), exactly per the contract: sale info, purchase,
//! order status, pay and cancel, the payment provider's callback, the sale's
//! status and page, and OpenAPI on the public port; health, readiness and metrics on the internal one.

pub mod auth;
pub mod client_ip;
pub mod error;
pub mod internal;
pub mod jwks;
pub mod limits;
pub mod openapi;
pub mod orders;
pub mod page;
pub mod payments;
pub mod queue;
pub mod sales;
pub mod server;
pub mod status;
pub mod tokens;
pub mod transport;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
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

/// What every handler shares: one pointer, so the clone each extractor and
/// middleware takes costs one atomic increment, not one per service.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    /// The state over `services`.
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services behind [`AppState`].
pub struct Services {
    /// The namespace's sales.
    pub catalog: Arc<Catalog>,
    /// The purchase path.
    pub intake: Arc<Intake>,
    /// Orders.
    pub db: PgPool,
    /// Shoppers' order changes, batched per transaction.
    pub order_desk: crate::orders::desk::OrderDesk,
    /// Each sale's consumer lag: an order not found anywhere may still be
    /// unread in its topic.
    pub lags: Arc<crate::bus::sale_lag::SaleLags>,
    /// Shopper identity.
    pub auth: Arc<Auth>,
    /// Rate limits.
    pub limits: Arc<Limits>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// What the last readiness check found.
    pub readiness: Arc<internal::Readiness>,
    /// The secret the payment provider signs its callbacks with (none:
    /// callbacks are answered 503).
    pub payment_secret: Option<Arc<[u8]>>,
    /// The secret purchase tokens are signed with, shared by every replica
    /// (none: sales that require tokens are answered 503).
    pub purchase_token_secret: Option<Arc<[u8]>>,
    /// Proxies whose `X-Forwarded-For` names the client (per-IP limit).
    pub trusted_proxies: Arc<client_ip::TrustedProxies>,
    /// Queue joins per second (the challenge's difficulty follows them).
    pub queue_joins: Arc<queue::JoinMeter>,
    /// The status route's rendered heads.
    pub status_heads: status::StatusHeads,
}

/// The client's address: the TCP peer, or the client a trusted proxy
/// forwarded for ([`client_ip::TrustedProxies`]).
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        let forwarded_for = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok());
        Ok(Self(state.trusted_proxies.client_ip(peer, forwarded_for)))
    }
}

/// The public port's routes, with the body limit, the transport guard
/// (in-flight cap, timeouts), the metrics middleware and JSON answers for
/// unknown paths, wrong methods and (as a safety net) panics.
pub fn router(state: AppState, limits: &transport::TransportLimits) -> Router {
    let cut_when_late = Router::new()
        .route("/v1/sales/{sale}", get(sales::get_sale))
        .route("/v1/sales/{sale}/token", get(tokens::issue))
        .route("/v1/sales/{sale}/queue", post(queue::join))
        .route("/v1/sales/{sale}/queue/{ticket}", get(queue::place))
        .route("/v1/sales/{sale}/challenge", get(queue::challenge))
        .route("/v1/orders/{order_id}", get(orders::get_order))
        .route("/v1/orders/{order_id}/pay", post(payments::pay))
        .route("/v1/payments/callback", post(payments::callback))
        .route("/v1/orders/{order_id}/cancel", post(orders::cancel))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }));
    // A purchase is never cut in the middle: its answer must be the truth,
    // and each of its steps has its own timeout (Redis, Kafka).
    let purchases = Router::new()
        .route("/v1/sales/{sale}/orders", post(orders::purchase))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    let the_rest = transport::request_timeout(cut_when_late, limits)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    // Answered from memory without a body, never waiting: no timer, no
    // place in flight — a storm of page loads costs the least it can.
    let from_memory = Router::new()
        .route("/v1/sales/{sale}/status", get(status::get_status))
        .route("/s/{sale}", get(page::sale_page))
        .route("/s/assets/{file}", get(page::asset));
    // Purchases need Redis and Kafka only: their places in flight are their
    // own, so order changes waiting on PostgreSQL never take them.
    from_memory
        .merge(transport::guard(purchases, limits))
        .merge(transport::guard(the_rest, limits))
        .fallback(|| async { ApiError::not_found("no such path") })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
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
    let method = method_label(request.method());
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
