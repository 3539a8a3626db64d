//! `flashsale api`: wires Redis, Kafka, PostgreSQL and the router, serves
//! the public and the internal port until SIGTERM/Ctrl-C, finishes in-flight
//! purchases, flushes the producer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::auth::{Auth, AuthConfig};
use super::client_ip::TrustedProxies;
use super::limits::{LimitConfig, Limits};
use super::transport::{self, TransportLimits};
use super::{AppState, Services, internal, router};
use crate::bus::producer::{OrderProducer, ProducerSettings};
use crate::bus::sale_lag::SaleLags;
use crate::catalog::Catalog;
use crate::domain::payment::MIN_SECRET;
use crate::domain::purchase_token;
use crate::intake::Intake;
use crate::janitor::Janitor;
use crate::metrics::Metrics;
use crate::redis::store::SaleStore;
use crate::redis::{RedisConn, RedisTarget};

/// Everything `flashsale api` needs.
pub struct ApiConfig {
    /// The public port's address (shopper routes, OpenAPI).
    pub listen: SocketAddr,
    /// The internal port's address (`/healthz`, `/readyz`, `/metrics`).
    pub internal_listen: SocketAddr,
    /// Timeouts and the in-flight cap of the public port.
    pub transport: TransportLimits,
    /// The namespace whose sales are served.
    pub namespace: String,
    /// Redis.
    pub redis: RedisTarget,
    /// PostgreSQL.
    pub database_url: String,
    /// Kafka bootstrap servers.
    pub kafka: String,
    /// Shopper identity.
    pub auth: AuthConfig,
    /// Rate limits.
    pub limits: LimitConfig,
    /// The purchase budget, linger and debug contexts of the producer.
    pub producer: ProducerSettings,
    /// The secret the payment provider signs its callbacks with, at least
    /// [`MIN_SECRET`] bytes (none: callbacks are answered 503).
    pub payment_secret: Option<Vec<u8>>,
    /// The secret purchase tokens are signed with, at least
    /// [`purchase_token::MIN_SECRET`] bytes, the same in every replica (none:
    /// sales that require tokens are answered 503).
    pub purchase_token_secret: Option<Vec<u8>>,
    /// Proxies whose `X-Forwarded-For` names the client (none: the TCP peer
    /// is the client).
    pub trusted_proxies: TrustedProxies,
}

/// Connects to Redis, PostgreSQL and Kafka, loads the sales and starts the
/// background tasks (catalog refresh, rate-limit housekeeping).
pub async fn build_state(config: &ApiConfig) -> anyhow::Result<AppState> {
    let auth = Auth::new(&config.auth)?;
    auth.load_keys().await?;
    match &config.payment_secret {
        Some(secret) if secret.len() < MIN_SECRET => anyhow::bail!(
            "the payment callback secret has {} bytes; it needs at least {MIN_SECRET}",
            secret.len()
        ),
        Some(_) => {}
        None => tracing::warn!(
            "no payment callback secret: orders cannot be paid (callbacks are answered 503)"
        ),
    }
    match &config.purchase_token_secret {
        Some(secret) if secret.len() < purchase_token::MIN_SECRET => anyhow::bail!(
            "the purchase token secret has {} bytes; it needs at least {}",
            secret.len(),
            purchase_token::MIN_SECRET
        ),
        Some(_) => {}
        None => tracing::warn!(
            "no purchase token secret: sales with antiBot.required cannot be bought (answered 503)"
        ),
    }
    let redis = RedisConn::connect(&config.redis)
        .await
        .context("failed to connect to Redis")?;
    let db = crate::orders::connect(&config.database_url, 16)
        .await
        .context("failed to connect to PostgreSQL")?;
    let producer = OrderProducer::new(&config.kafka, config.producer.clone())?;
    let metrics = Arc::new(Metrics::default());
    let store = SaleStore::new(redis);
    let catalog = Arc::new(Catalog::new(&config.namespace, db.clone(), store.clone()));
    if let Err(e) = catalog.refresh().await {
        tracing::warn!(error = %e, "first catalog load failed; retrying in the background");
    }
    catalog.spawn_refresher();
    let lags = Arc::new(SaleLags::new(&config.kafka));
    Arc::new(Janitor::new(
        catalog.clone(),
        store.clone(),
        db.clone(),
        lags.clone(),
        config.producer.budget,
    ))
    .spawn();
    let limits = Arc::new(Limits::new(config.limits));
    limits.spawn_housekeeping();
    Ok(AppState::new(Services {
        catalog,
        intake: Arc::new(Intake::new(
            store,
            producer,
            db.clone(),
            metrics.clone(),
            config.producer.budget,
        )),
        order_desk: crate::orders::desk::OrderDesk::start(db.clone()),
        db,
        lags,
        auth: Arc::new(auth),
        limits,
        metrics,
        readiness: Arc::default(),
        payment_secret: config.payment_secret.as_deref().map(Arc::from),
        purchase_token_secret: config.purchase_token_secret.as_deref().map(Arc::from),
        trusted_proxies: Arc::new(config.trusted_proxies.clone()),
        queue_joins: Arc::default(),
        status_heads: Default::default(),
    }))
}

/// Connections the kernel queues for accepting (capped by the system's
/// `net.core.somaxconn`): the first second of a sale opens thousands at once,
/// and a connection the queue drops waits for its SYN to be sent again (1 s,
/// then 3, 7, 15...).
const LISTEN_BACKLOG: u32 = 4096;

/// The API's two listening sockets.
pub struct Listeners {
    /// Shopper routes and OpenAPI.
    pub public: tokio::net::TcpListener,
    /// Probes and metrics.
    pub internal: tokio::net::TcpListener,
}

impl Listeners {
    /// Binds both addresses of `config`.
    pub fn bind(config: &ApiConfig) -> anyhow::Result<Self> {
        let bind = |addr: SocketAddr| {
            let socket = if addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()
            } else {
                tokio::net::TcpSocket::new_v6()
            }?;
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            socket.listen(LISTEN_BACKLOG)
        };
        let bind = |addr| bind(addr).with_context(|| format!("failed to listen on {addr}"));
        Ok(Self {
            public: bind(config.listen)?,
            internal: bind(config.internal_listen)?,
        })
    }
}

/// Serves `state` until `shutdown` resolves, finishing in-flight requests
/// within the grace period, then flushes the producer. Readiness is checked
/// in the background while it serves.
pub async fn serve_on(
    listeners: Listeners,
    state: AppState,
    limits: TransportLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let producer = state.intake.producer().clone();
    let stop = CancellationToken::new();
    internal::spawn_checks(state.clone(), stop.clone());
    let internal = tokio::spawn(crate::metrics::serve(
        listeners.internal,
        internal::router(state.clone()),
        stop.clone().cancelled_owned(),
    ));
    transport::serve(listeners.public, router(state, &limits), &limits, shutdown).await;
    tracing::info!("in-flight requests finished; flushing the producer");
    producer.flush(Duration::from_secs(5));
    stop.cancel();
    let _ = internal.await;
}

/// Serves the API until SIGTERM or Ctrl-C.
pub async fn serve(config: ApiConfig) -> anyhow::Result<()> {
    let state = build_state(&config).await?;
    let listeners = Listeners::bind(&config)?;
    tracing::info!(
        listen = %config.listen,
        internal = %config.internal_listen,
        namespace = %config.namespace,
        "shopper API serving"
    );
    serve_on(listeners, state, config.transport, shutdown_signal()).await;
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}
