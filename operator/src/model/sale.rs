//! The sale's configuration as the workload library knows it, derived from the resource.

use flashsale_workload::domain::admission::{Admission, ChallengeRule};
use flashsale_workload::domain::sale::{SaleConfig, SaleRef};

use super::crd::{self, AdmissionMode, DEFAULT_ADMISSION_RATE, FlashSale};
use super::timeline::to_chrono;

/// A resource the operator cannot act on: it waits for a change.
#[derive(Debug, thiserror::Error)]
#[error("invalid FlashSale: {0}")]
pub struct InvalidSpec(pub String);

/// The sale's namespace and name.
pub fn sale_ref(fs: &FlashSale) -> Result<SaleRef, InvalidSpec> {
    let namespace = fs.metadata.namespace.as_deref().unwrap_or_default();
    let name = fs.metadata.name.as_deref().unwrap_or_default();
    SaleRef::new(namespace, name).map_err(|e| InvalidSpec(e.to_string()))
}

/// The sale's configuration from its spec, with `stock` and `generation`.
pub fn sale_config(fs: &FlashSale, stock: i64, generation: i64) -> Result<SaleConfig, InvalidSpec> {
    let id = fs
        .metadata
        .uid
        .as_deref()
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| InvalidSpec("metadata.uid is missing".into()))?;
    let spec = &fs.spec;
    Ok(SaleConfig {
        id,
        sale: sale_ref(fs)?,
        sku: spec.sku.clone(),
        stock,
        start: to_chrono(&spec.window.start),
        end: to_chrono(&spec.window.end),
        purchase_limit: i64::from(spec.purchase_limit),
        shards: u32::try_from(spec.sharding.shards)
            .map_err(|_| InvalidSpec("sharding.shards".into()))?,
        generation,
        payment_timeout: spec.payment.timeout.into(),
        purchase_token_ttl: spec
            .anti_bot
            .required
            .then(|| spec.anti_bot.token_ttl.into()),
        admission: admission(&spec.admission),
        risk: spec.risk.as_ref().map(super::risk::Risk::policy),
    })
}

/// The queue `spec.admission` asks for, if any.
fn admission(spec: &crd::Admission) -> Option<Admission> {
    if spec.mode != AdmissionMode::Queue {
        return None;
    }
    let bits = |v: i32| u8::try_from(v.clamp(1, 28)).unwrap_or(28);
    Some(Admission {
        prequeue: spec.prequeue.into(),
        rate_per_sec: u32::try_from(spec.rate_per_second.unwrap_or(DEFAULT_ADMISSION_RATE))
            .unwrap_or(1),
        challenge: spec.challenge.as_ref().map(|c| ChallengeRule {
            difficulty: bits(c.difficulty),
            max_difficulty: bits(c.max_difficulty.unwrap_or(c.difficulty + 4)),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sale whose spec has `field` set to `value`.
    fn sale_with(field: &str, value: serde_json::Value) -> FlashSale {
        let mut spec = serde_json::json!({
            "sku": "SKU-1",
            "stock": 10,
            "window": {"start": "2026-12-12T00:00:00Z", "end": "2026-12-12T00:10:00Z"},
        });
        spec[field] = value;
        let mut fs: FlashSale = serde_json::from_value(serde_json::json!({
            "apiVersion": "flashsale.dev/v1alpha1",
            "kind": "FlashSale",
            "metadata": {"name": "drop", "namespace": "shop", "uid": "0192f8a0-0000-7000-8000-000000000001"},
            "spec": spec,
        }))
        .unwrap();
        fs.metadata.generation = Some(1);
        fs
    }

    fn sale(anti_bot: serde_json::Value) -> FlashSale {
        sale_with("antiBot", anti_bot)
    }

    #[test]
    fn a_queue_reaches_the_sale_row_only_in_queue_mode() {
        let secs = std::time::Duration::from_secs;
        let queue = |prequeue, rate, challenge| {
            Some(Admission {
                prequeue: secs(prequeue),
                rate_per_sec: rate,
                challenge,
            })
        };
        let cases = [
            (serde_json::json!({}), None),
            (serde_json::json!({"mode": "open", "prequeue": "1h"}), None),
            (serde_json::json!({"mode": "queue"}), queue(600, 1000, None)),
            (
                serde_json::json!({"mode": "queue", "prequeue": "0s", "ratePerSecond": 50,
                    "challenge": {"kind": "proofOfWork"}}),
                queue(
                    0,
                    50,
                    Some(ChallengeRule {
                        difficulty: 18,
                        max_difficulty: 22,
                    }),
                ),
            ),
            (
                serde_json::json!({"mode": "queue", "challenge":
                    {"kind": "proofOfWork", "difficulty": 10, "maxDifficulty": 12}}),
                queue(
                    600,
                    1000,
                    Some(ChallengeRule {
                        difficulty: 10,
                        max_difficulty: 12,
                    }),
                ),
            ),
        ];
        for (spec, expected) in cases {
            let config = sale_config(&sale_with("admission", spec.clone()), 10, 1).unwrap();
            assert_eq!(config.admission, expected, "{spec}");
        }
    }

    #[test]
    fn a_token_lifetime_reaches_the_sale_row_only_when_tokens_are_required() {
        for (anti_bot, ttl) in [
            (serde_json::json!({}), None),
            (serde_json::json!({"tokenTtl": "2m"}), None),
            (serde_json::json!({"required": true}), Some(30)),
            (
                serde_json::json!({"required": true, "tokenTtl": "5s"}),
                Some(5),
            ),
        ] {
            let config = sale_config(&sale(anti_bot.clone()), 10, 1).unwrap();
            assert_eq!(
                config.purchase_token_ttl,
                ttl.map(std::time::Duration::from_secs),
                "{anti_bot}"
            );
        }
    }
}
