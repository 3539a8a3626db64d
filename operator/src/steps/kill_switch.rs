//! The kill switch: `spec.paused` written to every shard, from the spec alone.

use kube::runtime::events::EventType;

use crate::context::Context;
use crate::error::Error;
use crate::events::publish;
use crate::model::crd::FlashSale;
use crate::model::sale::sale_config;

/// The kill switch first, from the spec alone: PostgreSQL or Kafka being
/// down must not delay `spec.paused` reaching the shards.
pub async fn apply(ctx: &Context, fs: &FlashSale) -> Result<(), Error> {
    let config = sale_config(fs, i64::from(fs.spec.stock), 1)?;
    match ctx
        .store
        .set_paused(&config.sale, config.shards, fs.spec.paused)
        .await
    {
        Ok(true) => {
            let (reason, note) = if fs.spec.paused {
                (
                    "Paused",
                    "The kill switch is on: purchases are refused with PAUSED.",
                )
            } else {
                (
                    "Resumed",
                    "The kill switch is off: purchases are accepted again.",
                )
            };
            publish(
                ctx,
                fs,
                EventType::Normal,
                reason,
                "KillSwitch",
                note.into(),
            )
            .await;
        }
        Ok(false) => {}
        // Redis down: nothing sells anyway; the next pass tries again.
        Err(e) => tracing::warn!(sale = %config.sale, error = %e, "kill switch not applied"),
    }
    Ok(())
}
