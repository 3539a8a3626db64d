//! The finalizer's step: a deleted sale's intake stopped, its orders drained, then its Redis state, topics and group removed; orders stay.

use std::sync::Arc;

use chrono::Utc;
use flashsale_workload::bus::admin::AdminError;
use flashsale_workload::bus::topics;
use flashsale_workload::domain::sale::SaleConfig;
use flashsale_workload::metrics::SaleLabels;
use flashsale_workload::orders::sales;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::DeleteParams;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use rdkafka::error::RDKafkaErrorCode;

use crate::context::Context;
use crate::decide::deletion;
use crate::decide::resources::consumers_name;
use crate::error::Error;
use crate::events::publish;
use crate::model::crd::FlashSale;
use crate::model::sale::sale_config;
use crate::model::timeline::to_chrono;
use crate::steps::outage;

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Finalizer(e.to_string())
}

/// On delete: stop intake, let the orders drain (however long it takes: the
/// finalizer stays and the status says why), then remove the sale's Redis
/// state and topics and mark its row deleted. Orders stay.
pub async fn cleanup_deleted(fs: Arc<FlashSale>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let config = sale_config(&fs, i64::from(fs.spec.stock), 1)?;
    // Its drain is waited for here, every 2 s, not woken by the watch.
    crate::steps::lag_watch::forget(&ctx, &config.id.to_string());
    if let Some(why) = pause_and_wait(&ctx, &fs, &config).await? {
        // A condition, and an event when it starts (not one every pass).
        outage::report(&ctx, &fs, "DeletionWaitsForDrain", why).await;
        return Err(Error::Waiting("the sale's orders to drain"));
    }
    remove(&ctx, &config).await?;
    ctx.status_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(fs.metadata.uid.as_deref().unwrap_or_default());
    ctx.metrics.forget(&SaleLabels::from(&config.sale));
    publish(
        &ctx,
        &fs,
        EventType::Normal,
        "Deleted",
        "Delete",
        "Redis state, topics and consumer group removed; orders kept".into(),
    )
    .await;
    Ok(Requeue::await_change())
}

/// Pauses the sale's shards, then what the deletion still waits for.
async fn pause_and_wait(
    ctx: &Context,
    fs: &FlashSale,
    config: &SaleConfig,
) -> Result<Option<String>, Error> {
    let sale = &config.sale;
    let loaded = ctx
        .store
        .shards_with_meta(sale, config.shards)
        .await
        .map_err(failed)?;
    if loaded > 0 {
        ctx.store
            .set_paused_everywhere(sale, config.shards, true)
            .await
            .map_err(failed)?;
    }
    let deleted_for = fs
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Utc::now() - to_chrono(t))
        .and_then(|d| d.to_std().ok())
        .unwrap_or_default();
    let orders = topics::orders_topic(sale);
    let partitions = ctx.admin.partitions(&[&orders]).await.map_err(failed)?;
    let lag = if partitions == 0 {
        Ok(0)
    } else {
        ctx.lag
            .read_of(&topics::consumer_group(sale), &orders)
            .await
            .map(|l| l.total())
    };
    // A purchase that passed the script just before the pause may still be
    // producing (at most the purchase budget): its order must be counted in
    // the lag before the lag can say "drained".
    let in_flight = loaded > 0 && deleted_for < ctx.workload.purchase_budget.settled_after();
    Ok(deletion::waits_for(
        lag.map_err(|e| e.to_string()),
        in_flight,
    ))
}

/// Drained for good: the consumers go, then the group, the Redis state and
/// the topics, the row marked at each stage.
async fn remove(ctx: &Context, config: &SaleConfig) -> Result<(), Error> {
    let sale = &config.sale;
    // Consumers serving a whole namespace (the local loop's) stop for this
    // sale, and the ones of its Deployment go next.
    sales::mark_drained(&ctx.db, config.id)
        .await
        .map_err(failed)?;
    // The consumers must leave the group before it can go.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &sale.namespace);
    let consumers = consumers_name(&sale.name);
    if deployments
        .get_opt(&consumers)
        .await
        .map_err(failed)?
        .is_some()
    {
        deployments
            .delete(&consumers, &DeleteParams::foreground())
            .await
            .map_err(failed)?;
    }
    match ctx.admin.delete_group(&topics::consumer_group(sale)).await {
        Err(AdminError::Refused {
            code: RDKafkaErrorCode::NonEmptyGroup,
            ..
        }) => {
            return Err(Error::Waiting("the consumers to leave their group"));
        }
        other => other.map_err(failed)?,
    }
    // Removed on purpose: no loss to recover.
    sales::mark_closed(&ctx.db, config.id)
        .await
        .map_err(failed)?;
    ctx.store
        .delete(sale, config.shards)
        .await
        .map_err(failed)?;
    let orders = topics::orders_topic(sale);
    ctx.admin
        .delete_topics(&[&orders, &topics::dead_letter_topic(sale)])
        .await
        .map_err(failed)?;
    sales::mark_deleted(&ctx.db, config.id)
        .await
        .map_err(failed)?;
    Ok(())
}
