//! How the shopper port meets its clients: a header-read timeout (slowloris),
//! body and request timeouts, a cap on requests in flight that sheds load at
//! once (503 `BUSY`), and a graceful shutdown with a deadline.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_http::timeout::RequestBodyTimeoutLayer;

use super::error::ApiError;

/// What a client may cost the shopper port.
#[derive(Debug, Clone, Copy)]
pub struct TransportLimits {
    /// Time to send a request's headers (and, between requests, to start
    /// the next one) before the connection is closed.
    pub header_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
    /// Time for a whole request but a purchase; past it the answer is 503.
    /// A safety net above the Redis and PostgreSQL timeouts, which answer
    /// first. A purchase is never cut half-way (its answer must be the
    /// truth); its Redis and Kafka steps have their own timeouts.
    pub request_timeout: Duration,
    /// Requests in flight at most, for purchases and again for the other
    /// guarded routes; one more is answered 503 `BUSY` at once, before any
    /// Redis call.
    pub max_in_flight: usize,
    /// Time in-flight requests get to finish after the shutdown signal.
    pub shutdown_grace: Duration,
}

impl Default for TransportLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_in_flight: 256,
            shutdown_grace: Duration::from_secs(20),
        }
    }
}

/// Wraps `routes` in an in-flight cap of their own and the body timeout.
pub fn guard<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    limits: &TransportLimits,
) -> Router<S> {
    let slots = InFlight {
        slots: Arc::new(Semaphore::new(limits.max_in_flight)),
        body_timeout: limits.body_timeout,
    };
    routes.layer(
        ServiceBuilder::new()
            .layer(middleware::from_fn_with_state(slots, shed))
            .layer(RequestBodyTimeoutLayer::new(limits.body_timeout)),
    )
}

/// Cuts requests of `routes` that take longer than the request timeout
/// (503 `UNAVAILABLE`): for routes where stopping half-way loses nothing.
pub fn request_timeout<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    limits: &TransportLimits,
) -> Router<S> {
    routes.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(refusal))
            .timeout(limits.request_timeout),
    )
}

#[derive(Clone)]
struct InFlight {
    slots: Arc<Semaphore>,
    body_timeout: Duration,
}

/// Takes a place for the request, or answers 503 `BUSY` at once. Unlike
/// tower's `load_shed`, it reads the small body first: a connection closed
/// with bytes unread is reset, and the client would get no answer at all.
async fn shed(State(in_flight): State<InFlight>, request: Request, next: Next) -> Response {
    let Ok(_place) = in_flight.slots.clone().try_acquire_owned() else {
        let body = axum::body::to_bytes(request.into_body(), super::MAX_BODY_BYTES);
        let _ = tokio::time::timeout(in_flight.body_timeout, body).await;
        return ApiError::busy("too many requests in flight; retry shortly").into_response();
    };
    next.run(request).await
}

async fn refusal(error: BoxError) -> ApiError {
    if error.is::<tower::timeout::error::Elapsed>() {
        ApiError::unavailable("the request took too long and was stopped")
    } else {
        tracing::warn!(%error, "request failed in the transport layer");
        ApiError::internal()
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then gives open
/// requests `limits.shutdown_grace` to finish; connections still open after
/// that (a client trickling bytes) are dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &TransportLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let mut make_service = app.into_make_service_with_connect_info::<SocketAddr>();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or a reset before accept: wait a
                    // little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service: Result<_, Infallible> = make_service.call(remote).await;
        let Ok(service) = service;
        let service = TowerToHyperService::new(
            service.map_request(|request: Request<Incoming>| request.map(axum::body::Body::new)),
        );
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(graceful.watcher().watch(connection));
    }
    drop(listener);
    let open = graceful.count();
    tokio::select! {
        () = graceful.shutdown() => tracing::info!(open, "every connection finished"),
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(grace = ?limits.shutdown_grace, "connections still open after the grace period are dropped");
        }
    }
}
