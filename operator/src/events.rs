//! Kubernetes events about a sale: the one place that publishes them.

use kube::Resource;
use kube::runtime::events::{Event, EventType};

use crate::context::Context;
use crate::model::crd::FlashSale;

/// Publishes an event about `fs` (a failure to publish is only logged).
pub async fn publish(
    ctx: &Context,
    fs: &FlashSale,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &fs.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "event not published");
    }
}
