//! `flashsale api`: wires Redis, Kafka, PostgreSQL and the router, serves
//! until SIGTERM/Ctrl-C, finishes in-flight purchases, flushes the producer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::auth::{Auth, AuthConfig};
use super::limits::{LimitConfig, Limits};
use super::{AppState, router};
use crate::bus::producer::{OrderProducer, ProducerSettings};
use crate::catalog::Catalog;
use crate::intake::Intake;
use crate::janitor::Janitor;
use crate::metrics::Metrics;
use crate::redis::store::SaleStore;
use crate::redis::{RedisConn, RedisTarget};

/// Everything `flashsale api` needs.
pub struct ApiConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
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
    /// Producer timeout and linger.
    pub producer: ProducerSettings,
}

/// Connects to Redis, PostgreSQL and Kafka, loads the sales and starts the
/// background tasks (catalog refresh, rate-limit housekeeping).
pub async fn build_state(config: &ApiConfig) -> anyhow::Result<AppState> {
    let auth = Auth::new(&config.auth)?;
    let redis = RedisConn::connect(&config.redis)
        .await
        .context("failed to connect to Redis")?;
    let db = crate::orders::connect(&config.database_url, 16)
        .await
        .context("failed to connect to PostgreSQL")?;
    let producer = OrderProducer::new(&config.kafka, config.producer)?;
    let metrics = Arc::new(Metrics::default());
    let store = SaleStore::new(redis);
    let catalog = Arc::new(Catalog::new(&config.namespace, db.clone(), store.clone()));
    if let Err(e) = catalog.refresh().await {
        tracing::warn!(error = %e, "first catalog load failed; retrying in the background");
    }
    catalog.spawn_refresher();
    Arc::new(Janitor::new(
        catalog.clone(),
        store.clone(),
        db.clone(),
        &config.kafka,
        config.producer.timeout,
    ))
    .spawn();
    let limits = Arc::new(Limits::new(config.limits));
    limits.spawn_housekeeping();
    Ok(AppState {
        catalog,
        intake: Arc::new(Intake::new(store, producer, metrics.clone())),
        db,
        auth: Arc::new(auth),
        limits,
        metrics,
    })
}

/// Serves `state` on `listener` until `shutdown` resolves, finishing
/// in-flight requests, then flushes the producer.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let producer = state.intake.producer().clone();
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    tracing::info!("in-flight requests finished; flushing the producer");
    producer.flush(Duration::from_secs(5));
    Ok(())
}

/// Serves the API until SIGTERM or Ctrl-C.
pub async fn serve(config: ApiConfig) -> anyhow::Result<()> {
    let state = build_state(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("failed to listen on {}", config.listen))?;
    tracing::info!(listen = %config.listen, namespace = %config.namespace, "shopper API serving");
    serve_on(listener, state, shutdown_signal()).await
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
