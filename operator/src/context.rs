//! What every reconcile shares: the clients, the recorder, the metrics and the leadership flag.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::lag::LagReader;
use flashsale_workload::redis::store::SaleStore;
use kube::Client;
use kube::runtime::events::Recorder;
use sqlx::PgPool;

use crate::decide::resources::WorkloadSettings;
use crate::decide::wake::Watched;
use crate::metrics::Metrics;

/// The one field manager of every server-side apply.
pub const MANAGER: &str = "flashsale-operator";
/// The finalizer that removes a sale's Redis state and topics.
pub const FINALIZER: &str = "flashsale.dev/cleanup";

/// Shared by all reconciles.
pub struct Context {
    /// Kubernetes.
    pub client: Client,
    /// PostgreSQL.
    pub db: PgPool,
    /// Redis.
    pub store: SaleStore,
    /// Kafka topics.
    pub admin: Admin,
    /// Events.
    pub recorder: Recorder,
    /// How the workload image runs.
    pub workload: WorkloadSettings,
    /// Reads every sale's consumer-group lag, through one Kafka client.
    pub lag: LagReader,
    /// The sales read between reconciles (`steps::lag_watch`), by uid.
    pub watched: Mutex<HashMap<String, Watched>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Failed reconciles in a row, by sale uid (the backoff's exponent).
    pub failures: Mutex<HashMap<String, u32>>,
    /// Since when Redis has failed every reconcile of a sale, by uid.
    pub redis_unreachable: Mutex<HashMap<String, std::time::Instant>>,
    /// When each sale's status was last written, by uid.
    pub status_writes: Mutex<HashMap<String, std::time::Instant>>,
    /// Whether this replica may act: set while it holds the Lease, cleared
    /// before the Lease could expire unrenewed (`crate::cluster::fence`).
    pub leading: Arc<std::sync::atomic::AtomicBool>,
    /// Purchases a second the API tier accepts (`--api-capacity`): a queue
    /// whose spec names no rate admits four fifths of it.
    pub api_capacity: u32,
}
