//! What a reconcile that could not finish says: a `Degraded` condition naming
//! the failing dependency (or what a deletion waits for), an event only when
//! that reason changes, and a jittered backoff that grows with the failures.

use std::time::Duration;

use chrono::Utc;
use flashsale_workload::metrics::SaleLabels;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::context::{Context, MANAGER};
use crate::error::ObserveError;
use crate::error::{ApplyError, Error};
use crate::events::publish;
use crate::model::crd::FlashSale;

/// The condition reason for a failed reconcile: the dependency that failed.
pub fn reason(error: &Error) -> Option<&'static str> {
    Some(match error {
        Error::Invalid(_) => "InvalidSpec",
        Error::Observe(ObserveError::Db(_)) | Error::Apply(ApplyError::Db(_)) => {
            "DatabaseUnavailable"
        }
        Error::Observe(ObserveError::Redis(_)) | Error::Apply(ApplyError::Redis(_)) => {
            "RedisUnavailable"
        }
        Error::Observe(ObserveError::Kafka(_)) | Error::Apply(ApplyError::Kafka(_)) => {
            "KafkaUnavailable"
        }
        Error::Observe(ObserveError::Kube(e)) | Error::Apply(ApplyError::Kube(e)) if refused(e) => {
            "Forbidden"
        }
        Error::Observe(ObserveError::Kube(_)) | Error::Apply(ApplyError::Kube(_)) => {
            "KubernetesUnavailable"
        }
        Error::Observe(ObserveError::Invalid(_)) => "InvalidSpec",
        Error::Apply(ApplyError::SecretNotOwned(_)) => "SecretConflict",
        Error::Status(_) | Error::Finalizer(_) | Error::Waiting(_) => return None,
    })
}

/// The API server answered but refused the operator (RBAC): not an outage,
/// a permission the installation lacks.
fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Writes `Degraded` (and `Ready` false) with `reason` into the sale's
/// status; publishes a Warning event when the reason is new.
pub async fn report(ctx: &Context, fs: &FlashSale, reason: &'static str, message: String) {
    let previous = fs
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let was = previous
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| c.reason.clone());
    let conditions = crate::decide::conditions::degraded(
        &previous,
        reason,
        message.clone(),
        fs.metadata.generation,
        Utc::now(),
    );
    if let Some(namespace) = fs.namespace() {
        let sale = SaleLabels {
            namespace,
            sale: fs.name_any(),
        };
        ctx.metrics.record_conditions(&sale, &conditions);
    }
    if conditions == previous {
        return;
    }
    let api: Api<FlashSale> =
        Api::namespaced(ctx.client.clone(), &fs.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": FlashSale::api_version(&()),
        "kind": FlashSale::kind(&()),
        "status": { "conditions": conditions },
    });
    if let Err(e) = api
        .patch_status(
            &fs.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
    {
        tracing::warn!(error = %e, reason, "could not write the failure condition");
    }
    if was.as_deref() != Some(reason) {
        publish(ctx, fs, EventType::Warning, reason, "Reconcile", message).await;
    }
}

/// The longest wait between two attempts at a failing sale, before jitter.
/// Short: the status says Degraded until the next attempt succeeds, so a
/// dependency that comes back is seen within 1.5 times this, and a sale's
/// window keeps moving (a minute's cap kept a recovered sale Degraded for
/// up to 90 s). A failed attempt costs one request to the failing service.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How long to wait after the `failures`-th failure in a row: 1 s doubling
/// to [`MAX_BACKOFF`], times a random factor in [0.5, 1.5) so many sales
/// failing on one outage do not come back in step.
pub fn backoff(failures: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1u64 << failures.min(6)).min(MAX_BACKOFF);
    base.mul_f64(0.5 + jitter.clamp(0.0, 1.0))
}

/// Counts a failure of the sale `uid`; returns the count.
pub fn failed(ctx: &Context, uid: &str) -> u32 {
    let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
    let n = failures.entry(uid.to_string()).or_default();
    *n = n.saturating_add(1);
    *n
}

/// Forgets the failures of the sale `uid` (it reconciled).
pub fn succeeded(ctx: &Context, uid: &str) {
    ctx.failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(uid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let secs = |n, j| backoff(n, j).as_secs_f64();
        assert_eq!(secs(0, 0.5), 1.0);
        assert_eq!(secs(1, 0.5), 2.0);
        assert_eq!(secs(3, 0.5), 8.0);
        assert_eq!(secs(10, 0.5), 10.0, "capped");
        assert!(
            (0..100).all(|n| backoff(n, 1.0) <= MAX_BACKOFF.mul_f64(1.5)),
            "a recovered dependency is seen within 1.5 × MAX_BACKOFF"
        );
        assert_eq!(secs(3, 0.0), 4.0, "half at the low end");
        assert!(secs(3, 0.999) < 12.0);
    }

    #[test]
    fn a_refusal_is_forbidden_an_error_is_an_outage() {
        let answer = |code| {
            let status = kube::core::Status::failure("", "").with_code(code);
            Error::Apply(ApplyError::Kube(kube::Error::Api(status.boxed())))
        };
        assert_eq!(reason(&answer(403)), Some("Forbidden"));
        assert_eq!(reason(&answer(401)), Some("Forbidden"));
        assert_eq!(reason(&answer(500)), Some("KubernetesUnavailable"));
        assert_eq!(reason(&answer(409)), Some("KubernetesUnavailable"));
    }
}
