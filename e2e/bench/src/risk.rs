//! Risk scoring's pace (issue 37): the orders the intake storm left, scored
//! by a consumer process's scorer from the start of the sale's topic, every
//! rule read (the payment rule's wait set to 0 and the threshold out of
//! reach, so nothing is cancelled and the run's invariants stand), against
//! the purchases the API accepted in the same run.

use flashsale_workload::domain::risk::{RiskAction, RiskPolicy, RiskRules};
use flashsale_workload::domain::sale::SaleConfig;
use sqlx::PgPool;

/// What the scorer did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scoring {
    /// Orders scored in the measured stretch.
    pub orders: i64,
    /// Per second.
    pub per_sec: f64,
}

async fn scored(db: &PgPool, sale: uuid::Uuid) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(verdict) FROM order_risk WHERE sale_id = $1")
            .bind(sale)
            .fetch_one(db)
            .await?,
    )
}

/// Switches scoring on for the drained sale of `config` and measures its
/// scorer from its first score to the `expected`-th.
pub async fn run(db: &PgPool, config: &SaleConfig, expected: i64) -> anyhow::Result<Scoring> {
    let mut rules = RiskRules::default();
    rules.paid_within.weight = 0;
    let policy = RiskPolicy {
        action: RiskAction::Review,
        threshold: u32::MAX,
        rules,
        webhook: None,
    };
    sqlx::query("UPDATE sales SET risk = $2 WHERE id = $1")
        .bind(config.id)
        .bind(sqlx::types::Json(&policy))
        .execute(db)
        .await?;
    let (orders, per_sec) =
        crate::persist::consumer_rate(config, "scorer", expected, || scored(db, config.id)).await?;
    Ok(Scoring { orders, per_sec })
}
