//! Sales the benchmark creates directly (row, topics, warm Redis), the way
//! the operator does, when no operator is part of the measurement.

use std::time::Duration;

use flashsale_testkit as stack;
use flashsale_workload::bus::admin::Admin;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::{SaleConfig, SaleRef};
use flashsale_workload::orders;
use flashsale_workload::redis::store::SaleStore;
use sqlx::PgPool;

/// The namespace of the benchmark's directly created sales.
pub const NAMESPACE: &str = "bench";

/// Partitions of a benchmark sale's topic.
pub const PARTITIONS: i32 = 12;

/// Creates and warms a live sale named `name`.
pub async fn live(
    db: &PgPool,
    store: &SaleStore,
    name: &str,
    stock: i64,
    shards: u32,
    limit: i64,
) -> anyhow::Result<SaleConfig> {
    create(db, store, config(name, stock, shards, limit)?).await
}

/// A sale named `name` that started a minute ago and ends in two hours.
pub fn config(name: &str, stock: i64, shards: u32, limit: i64) -> anyhow::Result<SaleConfig> {
    Ok(SaleConfig {
        id: uuid::Uuid::now_v7(),
        sale: SaleRef::new(NAMESPACE, name)?,
        sku: "SKU-BENCH".into(),
        stock,
        start: chrono::Utc::now() - chrono::Duration::minutes(1),
        end: chrono::Utc::now() + chrono::Duration::hours(2),
        purchase_limit: limit,
        shards,
        generation: 1,
        payment_timeout: Duration::from_secs(3600),
        purchase_token_ttl: None,
        admission: None,
        risk: None,
    })
}

/// Creates and warms the sale of `config`: its row, topics and Redis state.
pub async fn create(
    db: &PgPool,
    store: &SaleStore,
    config: SaleConfig,
) -> anyhow::Result<SaleConfig> {
    let config = orders::sales::upsert(db, &config).await?;
    Admin::new(&stack::kafka_bootstrap())?
        .ensure_topics(
            &[
                &topics::orders_topic(&config.sale),
                &topics::dead_letter_topic(&config.sale),
            ],
            PARTITIONS,
        )
        .await?;
    store
        .warm(&config, 0, false, &config.id.to_string())
        .await?;
    Ok(config)
}

/// Removes a benchmark sale's Redis state and topics and marks its row
/// deleted (its orders stay), as the operator's finalizer would.
pub async fn remove(db: &PgPool, store: &SaleStore, config: &SaleConfig) -> anyhow::Result<()> {
    store.delete(&config.sale, config.shards).await?;
    let admin = Admin::new(&stack::kafka_bootstrap())?;
    admin
        .delete_topics(&[
            &topics::orders_topic(&config.sale),
            &topics::dead_letter_topic(&config.sale),
        ])
        .await?;
    admin
        .delete_group(&topics::consumer_group(&config.sale))
        .await?;
    orders::sales::mark_deleted(db, config.id).await?;
    Ok(())
}
