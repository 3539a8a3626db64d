//! Thin adapter over PostgreSQL (sqlx): the one home of FlashSale's tables.
//! The schema is in `migrations/`, embedded into the binary.

pub mod desk;
pub mod direct;
pub mod order;
pub mod payment;
pub mod reconciliation;
pub mod risk;
pub mod sales;

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

/// The schema migrations from `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Opens a pool of at most `max_connections` to `database_url`.
pub async fn connect(database_url: &str, max_connections: u32) -> sqlx::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect(database_url)
        .await
}

/// Brings the schema up to date (idempotent; concurrent callers serialize on
/// sqlx's advisory lock).
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}
