//! Risk scoring (`spec.risk`): what an order's behaviour says about its
//! shopper, decided after the purchase from plain facts. Each rule that fires
//! adds its weight; an order whose score reaches the threshold is cancelled
//! (its stock returned) or held for review. No rule decides alone by
//! default: a scalper is caught by stacking them (the seed's "probability
//! game").

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the sale's spec asks of its scorer, as stored on the sale's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RiskPolicy {
    /// What happens to an order whose score reaches `threshold`.
    pub action: RiskAction,
    /// The score (sum of fired rules' weights, plus the webhook's) that acts.
    pub threshold: u32,
    /// The built-in rules.
    pub rules: RiskRules,
    /// The merchant's own risk service, asked about every order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<RiskWebhook>,
}

/// The threshold when the spec does not say.
pub const DEFAULT_THRESHOLD: u32 = 100;

/// What a score over the threshold does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RiskAction {
    /// Cancelled (refunded when paid) with reason RISK, its units returned.
    Cancel,
    /// Kept as it is and listed for the merchant to look at before shipping.
    Review,
}

/// The built-in rules, each with its weight (0 switches it off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RiskRules {
    /// Payment started within this long of the order becoming payable.
    pub paid_within: TimeRule,
    /// The purchase came within this long of its purchase token's issue.
    pub token_to_purchase_within: TimeRule,
    /// More distinct shoppers than this bought from the order's network (/24, /64).
    pub shoppers_per_network: CountRule,
    /// More than this percentage of the shopper's other orders (all sales)
    /// were cancelled or refunded, once they are at least `min_orders`.
    pub cancelled_share: ShareRule,
    /// The shopper asked this sale for more purchase tokens than this.
    pub tokens_per_shopper: CountRule,
}

/// The documented defaults (the CRD's): no rule acts alone at the default
/// threshold of 100; a quick payment acts with a crowded network or a
/// cancelling history; the three others act together.
impl Default for RiskRules {
    fn default() -> Self {
        RiskRules {
            paid_within: TimeRule {
                weight: 60,
                within_ms: 2_000,
            },
            token_to_purchase_within: TimeRule {
                weight: 0,
                within_ms: 200,
            },
            shoppers_per_network: CountRule {
                weight: 50,
                over: 5,
            },
            cancelled_share: ShareRule {
                weight: 40,
                over_percent: 50,
                min_orders: 3,
            },
            tokens_per_shopper: CountRule {
                weight: 30,
                over: 10,
            },
        }
    }
}

/// A rule on a duration: fires when the measured time is under `within_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeRule {
    /// Added to the score when it fires.
    pub weight: u32,
    /// Milliseconds.
    pub within_ms: u64,
}

/// A rule on a count: fires when the count is over `over`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountRule {
    /// Added to the score when it fires.
    pub weight: u32,
    /// The highest count that does not fire.
    pub over: u32,
}

/// A rule on a share of a shopper's orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareRule {
    /// Added to the score when it fires.
    pub weight: u32,
    /// The highest percentage (0..100) that does not fire.
    pub over_percent: u32,
    /// Fewer orders than this say nothing.
    pub min_orders: u32,
}

/// The merchant's risk service: POSTed each order's facts and built-in
/// score, signed like the payment callback; it answers `{"score": N}`,
/// added to the built-in score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RiskWebhook {
    /// Where to POST.
    pub url: String,
    /// How long to wait for an answer.
    pub timeout_ms: u64,
    /// The score taken when it does not answer in time, or answers nonsense.
    pub score_when_silent: u32,
}

/// What the API saw of a purchase that only the scorer reads, carried on
/// the order's message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseSignals {
    /// The client's network ([`network_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_network: Option<String>,
    /// When its purchase token was issued, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_issued_ms: Option<i64>,
}

impl PurchaseSignals {
    /// Nothing seen (an older API's message).
    pub fn is_empty(&self) -> bool {
        self.client_network.is_none() && self.token_issued_ms.is_none()
    }
}

/// The built-in rules' names, as shown to the merchant and in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RuleName {
    /// [`RiskRules::paid_within`].
    PaidWithin,
    /// [`RiskRules::token_to_purchase_within`].
    TokenToPurchaseWithin,
    /// [`RiskRules::shoppers_per_network`].
    ShoppersPerNetwork,
    /// [`RiskRules::cancelled_share`].
    CancelledShare,
    /// [`RiskRules::tokens_per_shopper`].
    TokensPerShopper,
    /// The merchant's webhook.
    Webhook,
}

impl RuleName {
    /// The metric label and the name shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaidWithin => "paidWithin",
            Self::TokenToPurchaseWithin => "tokenToPurchaseWithin",
            Self::ShoppersPerNetwork => "shoppersPerNetwork",
            Self::CancelledShare => "cancelledShare",
            Self::TokensPerShopper => "tokensPerShopper",
            Self::Webhook => "webhook",
        }
    }
}

/// What is known of one order when it is scored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderFacts {
    /// From the order becoming payable (persisted) to its first payment's
    /// start; `None` while unpaid.
    pub to_payment_ms: Option<i64>,
    /// From its purchase token's issue to the purchase; `None` without a token.
    pub token_to_purchase_ms: Option<i64>,
    /// Distinct shoppers of the sale seen from the order's network, itself
    /// included; 0 when the network is unknown.
    pub shoppers_in_network: u32,
    /// The shopper's other orders, all sales.
    pub other_orders: u32,
    /// Of those, cancelled or refunded.
    pub other_cancelled: u32,
    /// Purchase tokens the shopper asked this sale for.
    pub tokens_requested: u32,
}

/// A rule that fired, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    /// The rule.
    pub rule: RuleName,
    /// What it added.
    pub weight: u32,
    /// What it saw, for the merchant.
    pub seen: String,
}

/// An order's score and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Score {
    /// The sum of the hits' weights.
    pub total: u32,
    /// The rules that fired.
    pub hits: Vec<Hit>,
}

impl Score {
    fn add(&mut self, rule: RuleName, weight: u32, seen: String) {
        if weight > 0 {
            self.total = self.total.saturating_add(weight);
            self.hits.push(Hit { rule, weight, seen });
        }
    }
}

/// What becomes of a scored order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Under the threshold: nothing.
    Pass,
    /// Over it: the policy's action.
    Act(RiskAction),
}

impl Verdict {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Act(RiskAction::Cancel) => "CANCEL",
            Self::Act(RiskAction::Review) => "REVIEW",
        }
    }
}

/// The built-in rules' score of an order.
pub fn score(rules: &RiskRules, facts: &OrderFacts) -> Score {
    let mut score = Score::default();
    let quick =
        |rule: &TimeRule, ms: Option<i64>| ms.filter(|&ms| ms >= 0 && (ms as u64) < rule.within_ms);
    if let Some(ms) = quick(&rules.paid_within, facts.to_payment_ms) {
        let seen = format!(
            "paid {ms} ms after the order was payable (under {} ms)",
            rules.paid_within.within_ms
        );
        score.add(RuleName::PaidWithin, rules.paid_within.weight, seen);
    }
    let token = &rules.token_to_purchase_within;
    if let Some(ms) = quick(token, facts.token_to_purchase_ms) {
        let seen = format!(
            "bought {ms} ms after its token was issued (under {} ms)",
            token.within_ms
        );
        score.add(RuleName::TokenToPurchaseWithin, token.weight, seen);
    }
    let share = &rules.cancelled_share;
    if facts.other_orders >= share.min_orders.max(1)
        && u64::from(facts.other_cancelled) * 100
            > u64::from(share.over_percent) * u64::from(facts.other_orders)
    {
        let seen = format!(
            "{} of the shopper's {} other orders cancelled or refunded (over {} %)",
            facts.other_cancelled, facts.other_orders, share.over_percent
        );
        score.add(RuleName::CancelledShare, share.weight, seen);
    }
    let counts = [
        (
            RuleName::ShoppersPerNetwork,
            &rules.shoppers_per_network,
            facts.shoppers_in_network,
            "shoppers bought from its network",
        ),
        (
            RuleName::TokensPerShopper,
            &rules.tokens_per_shopper,
            facts.tokens_requested,
            "purchase tokens asked for",
        ),
    ];
    for (name, rule, count, what) in counts {
        if count > rule.over {
            let seen = format!("{count} {what} (over {})", rule.over);
            score.add(name, rule.weight, seen);
        }
    }
    score
}

/// Adds the webhook's answer (`None`: it did not answer in time, or not
/// with a score), counted as the policy's `score_when_silent`.
pub fn with_webhook(mut score: Score, webhook: &RiskWebhook, answer: Option<u32>) -> Score {
    let (weight, seen) = match answer {
        Some(n) => (n, format!("the merchant's service scored {n}")),
        None => (
            webhook.score_when_silent,
            format!(
                "the merchant's service did not answer within {} ms",
                webhook.timeout_ms
            ),
        ),
    };
    score.add(RuleName::Webhook, weight, seen);
    score
}

/// What `total` means under `policy`.
pub fn verdict(policy: &RiskPolicy, total: u32) -> Verdict {
    if total >= policy.threshold {
        Verdict::Act(policy.action)
    } else {
        Verdict::Pass
    }
}

/// How long after an order became payable it is scored: long enough for
/// the timing rule to have seen a quick payment.
pub fn observe_for(rules: &RiskRules) -> Duration {
    if rules.paid_within.weight == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rules.paid_within.within_ms)
    }
}

/// The network a client address belongs to for the network rule: its /24
/// (IPv4, IPv4-mapped IPv6 included) or its /64 (IPv6).
pub fn network_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4_network(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4_network(v4),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

fn v4_network(ip: std::net::Ipv4Addr) -> String {
    let [a, b, c, _] = ip.octets();
    format!("{a}.{b}.{c}.0/24")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> RiskRules {
        RiskRules::default()
    }

    fn policy(action: RiskAction) -> RiskPolicy {
        RiskPolicy {
            action,
            threshold: DEFAULT_THRESHOLD,
            rules: rules(),
            webhook: None,
        }
    }

    #[test]
    fn rules_fire_on_what_they_measure_table() {
        let base = OrderFacts {
            shoppers_in_network: 1,
            ..OrderFacts::default()
        };
        let cases: Vec<(&str, OrderFacts, Vec<RuleName>)> = vec![
            ("an ordinary order", base.clone(), vec![]),
            (
                "paid quickly",
                OrderFacts {
                    to_payment_ms: Some(150),
                    ..base.clone()
                },
                vec![RuleName::PaidWithin],
            ),
            (
                "paid at the limit: not quick",
                OrderFacts {
                    to_payment_ms: Some(2_000),
                    ..base.clone()
                },
                vec![],
            ),
            (
                "a negative gap (clocks) says nothing",
                OrderFacts {
                    to_payment_ms: Some(-5),
                    ..base.clone()
                },
                vec![],
            ),
            (
                "a quick token with weight 0 adds nothing",
                OrderFacts {
                    token_to_purchase_ms: Some(3),
                    ..base.clone()
                },
                vec![],
            ),
            (
                "six shoppers behind one /24",
                OrderFacts {
                    shoppers_in_network: 6,
                    ..base.clone()
                },
                vec![RuleName::ShoppersPerNetwork],
            ),
            (
                "five shoppers behind one /24: not over",
                OrderFacts {
                    shoppers_in_network: 5,
                    ..base.clone()
                },
                vec![],
            ),
            (
                "two of three cancelled",
                OrderFacts {
                    other_orders: 3,
                    other_cancelled: 2,
                    ..base.clone()
                },
                vec![RuleName::CancelledShare],
            ),
            (
                "two of two cancelled: too few orders to tell",
                OrderFacts {
                    other_orders: 2,
                    other_cancelled: 2,
                    ..base.clone()
                },
                vec![],
            ),
            (
                "half cancelled: not over half",
                OrderFacts {
                    other_orders: 4,
                    other_cancelled: 2,
                    ..base.clone()
                },
                vec![],
            ),
            (
                "eleven tokens",
                OrderFacts {
                    tokens_requested: 11,
                    ..base.clone()
                },
                vec![RuleName::TokensPerShopper],
            ),
        ];
        for (what, facts, fired) in cases {
            let got: Vec<RuleName> = score(&rules(), &facts)
                .hits
                .iter()
                .map(|h| h.rule)
                .collect();
            assert_eq!(got, fired, "{what}");
        }
    }

    #[test]
    fn a_scalper_is_caught_by_stacked_rules_not_by_one() {
        let instant_pay = OrderFacts {
            to_payment_ms: Some(80),
            shoppers_in_network: 1,
            ..OrderFacts::default()
        };
        let shared_network = OrderFacts {
            shoppers_in_network: 40,
            ..OrderFacts::default()
        };
        let scalper = OrderFacts {
            to_payment_ms: Some(80),
            shoppers_in_network: 40,
            ..OrderFacts::default()
        };
        let cancel = policy(RiskAction::Cancel);
        for (what, facts, expected) in [
            ("a quick payer alone", instant_pay, Verdict::Pass),
            ("an office behind one NAT", shared_network, Verdict::Pass),
            ("both", scalper, Verdict::Act(RiskAction::Cancel)),
        ] {
            let total = score(&cancel.rules, &facts).total;
            assert_eq!(verdict(&cancel, total), expected, "{what}");
        }
        let review = policy(RiskAction::Review);
        assert_eq!(verdict(&review, 110), Verdict::Act(RiskAction::Review));
        assert_eq!(verdict(&review, 100), Verdict::Act(RiskAction::Review));
        assert_eq!(verdict(&review, 99), Verdict::Pass);
    }

    #[test]
    fn the_webhook_adds_its_score_or_the_default() {
        let webhook = RiskWebhook {
            url: "http://127.0.0.1:1/risk".into(),
            timeout_ms: 300,
            score_when_silent: 25,
        };
        let built_in = Score {
            total: 60,
            hits: vec![],
        };
        assert_eq!(
            with_webhook(built_in.clone(), &webhook, Some(50)).total,
            110
        );
        assert_eq!(with_webhook(built_in.clone(), &webhook, Some(0)).total, 60);
        let silent = with_webhook(built_in, &webhook, None);
        assert_eq!(silent.total, 85);
        assert_eq!(silent.hits[0].rule, RuleName::Webhook);
    }

    #[test]
    fn networks_are_slash_24_and_slash_64() {
        let cases = [
            ("203.0.113.77", "203.0.113.0/24"),
            ("::ffff:203.0.113.77", "203.0.113.0/24"),
            ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
            ("2001:db8::1", "2001:db8:0:0::/64"),
        ];
        for (ip, network) in cases {
            assert_eq!(network_of(ip.parse().unwrap()), network, "{ip}");
        }
    }

    #[test]
    fn scoring_waits_for_the_payment_rule_only_when_it_counts() {
        let mut rules = rules();
        assert_eq!(observe_for(&rules), Duration::from_secs(2));
        rules.paid_within.weight = 0;
        assert_eq!(observe_for(&rules), Duration::ZERO);
    }

    #[test]
    fn the_policy_round_trips_as_stored() {
        let policy = policy(RiskAction::Review);
        let json = serde_json::to_value(&policy).unwrap();
        assert_eq!(json["action"], "REVIEW");
        assert_eq!(json["rules"]["paidWithin"]["withinMs"], 2_000);
        assert_eq!(serde_json::from_value::<RiskPolicy>(json).unwrap(), policy);
    }
}
