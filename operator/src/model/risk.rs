//! `spec.risk`: how the merchant wants orders scored after the purchase, and
//! the scorer's policy it becomes (`flashsale_workload::domain::risk`).

use kube::KubeSchema;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use flashsale_workload::domain::risk::{
    CountRule, DEFAULT_THRESHOLD, RiskAction, RiskPolicy, RiskRules, RiskWebhook, ShareRule,
    TimeRule,
};
use flashsale_workload::orders::risk::{RiskSummary, Suspect};

use super::timeline::duration_text;

/// Risk scoring: every order is scored by the sale's consumers (in a
/// consumer group of its own, after it is persisted); a score at or over
/// `threshold` cancels the order (or holds it for review).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Risk {
    /// `cancel` (the default): the order is cancelled with reason RISK (refunded
    /// when paid) and its units go back on sale; `review`: it is kept and
    /// listed by `kubectl flashsale risk` for the merchant to look at.
    #[serde(default)]
    pub action: RiskActionSpec,
    /// The score that acts (default 100): each rule that fires adds its weight.
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 1, max = 100_000))]
    pub threshold: i32,
    /// The built-in rules; a weight of 0 switches one off.
    #[serde(default)]
    pub rules: RiskRulesSpec,
    /// The merchant's own risk service, asked about every order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<RiskWebhookSpec>,
}

fn default_threshold() -> i32 {
    spec_number(DEFAULT_THRESHOLD)
}

/// What a score over the threshold does.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RiskActionSpec {
    /// Cancelled (refunded when paid), its units returned.
    #[default]
    Cancel,
    /// Kept, and listed for review.
    Review,
}

/// The built-in rules. With the default weights and threshold no rule acts
/// alone: a quick payment (60) acts with a crowded network (50) or a
/// cancelling history (40); without it, the three others together do.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskRulesSpec {
    /// Payment started within `within` of the order becoming payable
    /// (default weight 60, within 2s).
    #[serde(default = "default_paid_within")]
    pub paid_within: TimeRuleSpec,
    /// Bought within `within` of the purchase token's issue (default
    /// weight 0, within 200ms: the sale page fetches its token as the
    /// shopper clicks, so it tells a script from a person only on a page
    /// that fetches it earlier).
    #[serde(default = "default_token_to_purchase")]
    pub token_to_purchase_within: TimeRuleSpec,
    /// More than `over` shoppers bought from the order's /24 (IPv4) or /64
    /// (IPv6) network (default weight 50, over 5).
    #[serde(default = "default_shoppers_per_network")]
    pub shoppers_per_network: CountRuleSpec,
    /// More than `overPercent` of the shopper's other orders, in every sale,
    /// were cancelled or refunded, once they number `minOrders` (default
    /// weight 40, over 50 %, from 3 orders).
    #[serde(default = "default_cancelled_share")]
    pub cancelled_share: ShareRuleSpec,
    /// The shopper asked for more than `over` purchase tokens (default
    /// weight 30, over 10).
    #[serde(default = "default_tokens_per_shopper")]
    pub tokens_per_shopper: CountRuleSpec,
}

impl Default for RiskRulesSpec {
    fn default() -> Self {
        Self {
            paid_within: default_paid_within(),
            token_to_purchase_within: default_token_to_purchase(),
            shoppers_per_network: default_shoppers_per_network(),
            cancelled_share: default_cancelled_share(),
            tokens_per_shopper: default_tokens_per_shopper(),
        }
    }
}

// The defaults are the scorer's own (`RiskRules::default`), written as the
// spec writes them.
fn default_paid_within() -> TimeRuleSpec {
    RiskRules::default().paid_within.into()
}

fn default_token_to_purchase() -> TimeRuleSpec {
    RiskRules::default().token_to_purchase_within.into()
}

fn default_shoppers_per_network() -> CountRuleSpec {
    RiskRules::default().shoppers_per_network.into()
}

fn default_cancelled_share() -> ShareRuleSpec {
    RiskRules::default().cancelled_share.into()
}

fn default_tokens_per_shopper() -> CountRuleSpec {
    RiskRules::default().tokens_per_shopper.into()
}

fn spec_number(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

impl From<TimeRule> for TimeRuleSpec {
    fn from(rule: TimeRule) -> Self {
        Self {
            weight: spec_number(rule.weight),
            within: std::time::Duration::from_millis(rule.within_ms).into(),
        }
    }
}

impl From<CountRule> for CountRuleSpec {
    fn from(rule: CountRule) -> Self {
        Self {
            weight: spec_number(rule.weight),
            over: spec_number(rule.over),
        }
    }
}

impl From<ShareRule> for ShareRuleSpec {
    fn from(rule: ShareRule) -> Self {
        Self {
            weight: spec_number(rule.weight),
            over_percent: spec_number(rule.over_percent),
            min_orders: spec_number(rule.min_orders),
        }
    }
}

/// A rule on a time: fires when it is shorter than `within`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeRuleSpec {
    /// Added to the score when it fires (0 switches it off).
    #[schemars(range(min = 0, max = 100_000))]
    pub weight: i32,
    /// Go-style duration, 0s..10m.
    #[serde(serialize_with = "duration_text")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('0s') && duration(self) <= duration('10m')").message("a risk rule's within must be between 0s and 10m"))]
    pub within: Duration,
}

/// A rule on a count: fires when it is over `over`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountRuleSpec {
    /// Added to the score when it fires (0 switches it off).
    #[schemars(range(min = 0, max = 100_000))]
    pub weight: i32,
    /// The highest count that does not fire.
    #[schemars(range(min = 0, max = 1_000_000))]
    pub over: i32,
}

/// A rule on the share of a shopper's orders cancelled or refunded.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareRuleSpec {
    /// Added to the score when it fires (0 switches it off).
    #[schemars(range(min = 0, max = 100_000))]
    pub weight: i32,
    /// The highest percentage that does not fire.
    #[schemars(range(min = 0, max = 100))]
    pub over_percent: i32,
    /// Fewer of the shopper's other orders than this say nothing.
    #[schemars(range(min = 1, max = 10_000))]
    pub min_orders: i32,
}

/// The merchant's risk service. It is POSTed
/// `{"orderId", "sale", "shopper", "score", "hits"}` with a `Signature`
/// header (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`, as the
/// payment callback) and answers `{"score": N}`, added to the built-in score.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskWebhookSpec {
    /// An http or https URL.
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("risk.webhook.url must be an http:// or https:// URL"))]
    #[schemars(length(min = 8, max = 2048))]
    pub url: String,
    /// How long to wait for its answer (10ms..10s, default 500ms).
    #[serde(default = "default_webhook_timeout", serialize_with = "duration_text")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('10ms') && duration(self) <= duration('10s')").message("risk.webhook.timeout must be between 10ms and 10s"))]
    pub timeout: Duration,
    /// The score taken when it does not answer in time (default 0: a silent
    /// service lets the built-in rules decide).
    #[serde(default)]
    #[schemars(range(min = 0, max = 100_000))]
    pub score_when_silent: i32,
    /// The Secret key holding the signing secret (at least 32 bytes).
    pub secret_ref: SecretKey,
}

fn default_webhook_timeout() -> Duration {
    "500ms".parse().expect("default durations parse")
}

/// A key of a Secret in the sale's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecretKey {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key within it.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// What the risk scorer did, as the status shows it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskStatus {
    /// Orders scored.
    pub scored: i64,
    /// Orders read and not scored yet (persisting, or the payment rule's wait).
    pub unscored: i64,
    /// Cancelled for risk, their units back on sale.
    pub cancelled: i64,
    /// Held for review.
    pub held: i64,
    /// The highest-scored shoppers, highest first ([`TOP_SUSPECTS`] at most).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<RiskSuspect>,
}

/// How many of the highest-scored shoppers the status lists.
pub const TOP_SUSPECTS: i64 = 10;

/// A shopper among the highest scores, and why.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskSuspect {
    /// The shopper's id.
    pub shopper: String,
    /// Their highest score.
    pub score: i64,
    /// Their orders scored.
    pub orders: i64,
    /// Of those, cancelled for risk.
    pub cancelled: i64,
    /// Of those, held for review.
    pub held: i64,
    /// The network of their highest-scored order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// What the rules saw on that order.
    pub why: Vec<String>,
}

impl RiskStatus {
    /// The status from the scorer's work and its top suspects.
    pub fn of(summary: RiskSummary, suspects: Vec<Suspect>) -> Self {
        Self {
            scored: summary.scored,
            unscored: summary.seen - summary.scored,
            cancelled: summary.cancelled,
            held: summary.held,
            top: suspects
                .into_iter()
                .map(|s| RiskSuspect {
                    shopper: s.shopper,
                    score: s.score,
                    orders: s.orders,
                    cancelled: s.cancelled,
                    held: s.held,
                    network: s.network,
                    why: s
                        .hits
                        .into_iter()
                        .map(|h| format!("{} +{}: {}", h.rule.as_str(), h.weight, h.seen))
                        .collect(),
                })
                .collect(),
        }
    }
}

impl RiskStatus {
    /// The event telling what this status adds to `before`: one per status
    /// write at most, never one per order. `None`: nothing new was flagged.
    pub fn news(&self, before: Option<&RiskStatus>) -> Option<(&'static str, String)> {
        let before = before.cloned().unwrap_or_default();
        let more_cancelled = self.cancelled - before.cancelled;
        let more_held = self.held - before.held;
        let see = "kubectl flashsale risk shows who and why";
        match (more_cancelled > 0, more_held > 0) {
            (true, _) => Some((
                "RiskCancelled",
                format!(
                    "{more_cancelled} more orders cancelled for risk, their units back on sale ({} in all, {} held for review); {see}",
                    self.cancelled, self.held
                ),
            )),
            (false, true) => Some((
                "RiskHeld",
                format!(
                    "{more_held} more orders held for review ({} in all); {see}",
                    self.held
                ),
            )),
            (false, false) => None,
        }
    }
}

fn non_negative(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn millis(d: &Duration) -> u64 {
    u64::try_from(std::time::Duration::from(*d).as_millis()).unwrap_or(u64::MAX)
}

impl Risk {
    /// The scorer's policy.
    pub fn policy(&self) -> RiskPolicy {
        let time = |r: &TimeRuleSpec| TimeRule {
            weight: non_negative(r.weight),
            within_ms: millis(&r.within),
        };
        let count = |r: &CountRuleSpec| CountRule {
            weight: non_negative(r.weight),
            over: non_negative(r.over),
        };
        let rules = &self.rules;
        RiskPolicy {
            action: match self.action {
                RiskActionSpec::Cancel => RiskAction::Cancel,
                RiskActionSpec::Review => RiskAction::Review,
            },
            threshold: non_negative(self.threshold),
            rules: RiskRules {
                paid_within: time(&rules.paid_within),
                token_to_purchase_within: time(&rules.token_to_purchase_within),
                shoppers_per_network: count(&rules.shoppers_per_network),
                cancelled_share: ShareRule {
                    weight: non_negative(rules.cancelled_share.weight),
                    over_percent: non_negative(rules.cancelled_share.over_percent),
                    min_orders: non_negative(rules.cancelled_share.min_orders),
                },
                tokens_per_shopper: count(&rules.tokens_per_shopper),
            },
            webhook: self.webhook.as_ref().map(|w| RiskWebhook {
                url: w.url.clone(),
                timeout_ms: millis(&w.timeout),
                score_when_silent: non_negative(w.score_when_silent),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_risk_section_gets_the_documented_defaults() {
        let risk: Risk = serde_json::from_value(serde_json::json!({})).unwrap();
        let policy = risk.policy();
        assert_eq!(policy.action, RiskAction::Cancel);
        assert_eq!(policy.threshold, 100);
        assert_eq!(
            policy.rules.paid_within,
            TimeRule {
                weight: 60,
                within_ms: 2_000
            }
        );
        assert_eq!(policy.rules.token_to_purchase_within.weight, 0);
        assert_eq!(policy.rules.shoppers_per_network.over, 5);
        assert_eq!(policy.rules.cancelled_share.min_orders, 3);
        assert_eq!(policy.rules.tokens_per_shopper.weight, 30);
        // What the docs promise: no rule acts alone; a quick payment acts
        // with a crowded network or a cancelling history; the three others
        // act together.
        let r = &policy.rules;
        let (pay, net, history, tokens) = (
            r.paid_within.weight,
            r.shoppers_per_network.weight,
            r.cancelled_share.weight,
            r.tokens_per_shopper.weight,
        );
        let acts = |w: u32| w >= policy.threshold;
        assert!([pay, net, history, tokens].into_iter().all(|w| !acts(w)));
        assert!(acts(pay + net) && acts(pay + history));
        assert!(!acts(pay + tokens) && !acts(net + history));
        assert!(acts(net + history + tokens));
    }

    #[test]
    fn an_event_tells_what_is_new_and_only_then() {
        let status = |cancelled, held| RiskStatus {
            scored: 100,
            cancelled,
            held,
            ..RiskStatus::default()
        };
        assert_eq!(status(0, 0).news(None), None);
        let (reason, note) = status(30, 0).news(None).unwrap();
        assert_eq!(reason, "RiskCancelled");
        assert!(note.starts_with("30 more orders cancelled"), "{note}");
        let (_, note) = status(42, 1).news(Some(&status(30, 1))).unwrap();
        assert!(
            note.starts_with("12 more") && note.contains("42 in all"),
            "{note}"
        );
        assert_eq!(status(42, 1).news(Some(&status(42, 1))), None);
        assert_eq!(
            status(42, 2).news(Some(&status(42, 1))).unwrap().0,
            "RiskHeld"
        );
    }

    #[test]
    fn a_webhook_becomes_milliseconds() {
        let risk: Risk = serde_json::from_value(serde_json::json!({
            "action": "review",
            "webhook": {"url": "https://risk.shop.example/score",
                        "secretRef": {"name": "risk", "key": "secret"}}
        }))
        .unwrap();
        let policy = risk.policy();
        assert_eq!(policy.action, RiskAction::Review);
        let webhook = policy.webhook.unwrap();
        assert_eq!(webhook.timeout_ms, 500);
        assert_eq!(webhook.score_when_silent, 0);
    }
}
