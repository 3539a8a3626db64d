//! The `FlashSale` custom resource: what a merchant declares and what the
//! operator reports back. `crdgen` prints its CustomResourceDefinition; every
//! rule the API server can check at apply time is a schema bound or a CEL rule
//! here, so an invalid sale is refused by `kubectl apply`, not discovered later.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use flashsale_workload::orders::order::SaleSummary;

use super::timeline::duration_text;
use super::timeline::{Timeline, to_chrono};

/// A flash sale: stock of one SKU sold in a time window, at most
/// `purchaseLimit` units per shopper.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "flashsale.dev",
    version = "v1alpha1",
    kind = "FlashSale",
    plural = "flashsales",
    shortname = "fs",
    category = "flashsale",
    namespaced,
    status = "FlashSaleStatus",
    doc = "A flash sale: stock of one SKU sold in a time window, at most purchaseLimit units per shopper.",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Stock", type_ = "integer", json_path = ".spec.stock"),
    printcolumn(name = "Sold", type_ = "integer", json_path = ".status.stock.sold"),
    printcolumn(name = "Start", type_ = "string", json_path = ".spec.window.start"),
    printcolumn(name = "End", type_ = "string", json_path = ".spec.window.end"),
    printcolumn(name = "Lag", type_ = "integer", json_path = ".status.consumers.lag"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.sharding.shards", priority = 1),
    printcolumn(name = "Remaining", type_ = "integer", json_path = ".status.stock.remaining", priority = 1),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.consumers.replicas", priority = 1),
    validation = Rule::new("self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must be a DNS label of at most 40 characters: it names the sale's Deployment, topics and Redis keys"),
    validation = Rule::new("!has(oldSelf.status) || !has(oldSelf.status.state) || oldSelf.status.state in ['Scheduled', 'Warming', 'Warm'] || self.spec.window.start == oldSelf.spec.window.start")
        .message("window.start cannot move once the sale has opened"),
    validation = Rule::new("!has(oldSelf.status) || !has(oldSelf.status.state) || oldSelf.status.state in ['Scheduled', 'Warming', 'Warm'] || self.spec.window.end >= oldSelf.spec.window.end")
        .message("window.end may only be extended once the sale has opened"),
)]
#[x_kube(validation = Rule::new("self.window.end > self.window.start").message("window.end must be after window.start"))]
#[x_kube(validation = Rule::new("self.consumers.minReplicas <= self.consumers.maxReplicas").message("consumers.minReplicas must not exceed consumers.maxReplicas"))]
#[x_kube(validation = Rule::new("!has(self.consumers.maxLag) || self.consumers.maxLag >= self.consumers.lagPerReplica").message("consumers.maxLag must be at least consumers.lagPerReplica"))]
#[x_kube(validation = Rule::new("self.degradation.redisDown != 'database' || self.stock <= 10000").message("degradation.redisDown: database is allowed up to 10000 units: every purchase then takes the sale's one database row (see docs/reliability.md)"))]
#[x_kube(validation = Rule::new("!has(self.risk) || self.consumers.minReplicas >= 1").message("spec.risk needs consumers.minReplicas of at least 1: orders are scored beside the consumers, after the topic has drained too"))]
#[x_kube(validation = Rule::new("duration(self.payment.timeout) <= duration(self.cleanup.after)").message("payment.timeout must not exceed cleanup.after: unpaid orders are cancelled by the sale's consumers, which are removed at cleanup"))]
#[serde(rename_all = "camelCase")]
pub struct FlashSaleSpec {
    /// The product sold. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("sku is immutable"))]
    #[schemars(length(min = 1, max = 64))]
    pub sku: String,

    /// Units for sale. May grow at any time (restock); may shrink only down to
    /// the units already sold (the operator refuses less, with a condition).
    #[schemars(range(min = 0, max = 10_000_000))]
    pub stock: i32,

    /// When shoppers may buy. `end` may be extended while the sale is live.
    pub window: SaleWindow,

    /// Units one shopper may hold in this sale. May grow, never shrink.
    #[serde(default = "default_purchase_limit")]
    #[schemars(range(min = 1, max = 1000))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("purchaseLimit may grow but never shrink"))]
    pub purchase_limit: i32,

    /// How stock is spread over Redis to avoid one hot key.
    #[serde(default)]
    pub sharding: Sharding,

    /// When Redis is warmed before the start.
    #[serde(default)]
    pub warmup: Warmup,

    /// When the sale's Redis state is removed after the end.
    #[serde(default)]
    pub cleanup: Cleanup,

    /// The kill switch: while true, every purchase is refused with PAUSED.
    #[serde(default)]
    pub paused: bool,

    /// The sale's consumer Deployment, scaled from Kafka lag.
    #[serde(default)]
    pub consumers: Consumers,

    /// How long an order may stay unpaid.
    #[serde(default)]
    pub payment: Payment,

    /// How often Redis, Kafka and PostgreSQL are compared while the sale lives.
    #[serde(default)]
    pub reconcile: Reconcile,

    /// Bots: whether a purchase needs a purchase token. May change at any
    /// time (switched on mid-sale when bots show up).
    #[serde(default)]
    pub anti_bot: AntiBot,

    /// Fair admission: shoppers queue before the start, are shuffled at the
    /// start and admitted at a rate, each given a purchase token.
    #[serde(default)]
    pub admission: Admission,

    /// What the sale does while Redis is down or has lost its state.
    #[serde(default)]
    pub degradation: Degradation,

    /// Scalpers found after the purchase: orders scored from their
    /// behaviour, those over the threshold cancelled or held for review.
    /// Off when absent. May change at any time; orders already scored keep
    /// their verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<super::risk::Risk>,
}

fn default_purchase_limit() -> i32 {
    1
}

/// The sale's time window, RFC 3339 timestamps.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
pub struct SaleWindow {
    /// First instant a purchase is accepted.
    pub start: Time,
    /// First instant purchases are refused again (exclusive).
    pub end: Time,
}

/// Stock sharding.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
pub struct Sharding {
    /// Number of Redis stock shards (1..1024). Immutable.
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("sharding.shards is immutable"))]
    pub shards: i32,
}

fn default_shards() -> i32 {
    1
}

impl Default for Sharding {
    fn default() -> Self {
        Self {
            shards: default_shards(),
        }
    }
}

/// A Go-style duration bounded by CEL at apply time.
macro_rules! duration_section {
    ($(#[$doc:meta])* $name:ident, $field:ident, $json:literal, $default:literal, $rule:literal, $msg:literal) => {
        $(#[$doc])*
        #[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            #[doc = concat!("Go-style duration (e.g. 90s, 30m, 1h30m); default ", $default, ".")]
            #[serde(default = $json, serialize_with = "duration_text")]
            #[x_kube(validation = Rule::new($rule).message($msg))]
            pub $field: Duration,
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $field: $default.parse().expect("default durations parse"),
                }
            }
        }
    };
}

duration_section!(
    /// Warm-up timing.
    Warmup, lead_time, "default_lead_time", "30m",
    "duration(self) >= duration('0s') && duration(self) <= duration('168h')",
    "warmup.leadTime must be between 0s and 168h"
);
duration_section!(
    /// Cleanup timing.
    Cleanup, after, "default_cleanup_after", "30m",
    "duration(self) >= duration('0s') && duration(self) <= duration('720h')",
    "cleanup.after must be between 0s and 720h"
);
duration_section!(
    /// Payment.
    Payment, timeout, "default_payment_timeout", "15m",
    "duration(self) >= duration('1s') && duration(self) <= duration('168h')",
    "payment.timeout must be between 1s and 168h"
);
duration_section!(
    /// Periodic reconciliation.
    Reconcile, interval, "default_reconcile_interval", "10m",
    "duration(self) >= duration('10s') && duration(self) <= duration('24h')",
    "reconcile.interval must be between 10s and 24h"
);

/// Purchase tokens: a shopper fetches one (`GET /v1/sales/{sale}/token`, from
/// the start of the window) and shows it once, in `Purchase-Token`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AntiBot {
    /// Purchases without a valid, unused token are refused (403).
    #[serde(default)]
    pub required: bool,
    /// How long a token is good for once issued; default 30s.
    #[serde(default = "default_token_ttl", serialize_with = "duration_text")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('10m')").message("antiBot.tokenTtl must be between 1s and 10m"))]
    pub token_ttl: Duration,
}

impl Default for AntiBot {
    fn default() -> Self {
        Self {
            required: false,
            token_ttl: default_token_ttl(),
        }
    }
}

/// What the sale does while Redis cannot decide its purchases.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Degradation {
    /// `reject` (the default): purchases are refused (503, nothing reserved)
    /// until Redis is back and the sale's state reloaded. `database`: once
    /// every order Redis accepted is persisted, purchases go through
    /// PostgreSQL alone (a conditional stock update, the limit, the key and
    /// the order row in one transaction) until Redis is back. Only for
    /// stock up to [`DATABASE_MODE_MAX_STOCK`].
    #[serde(default)]
    pub redis_down: RedisDown,
}

/// The most stock a sale may have with `degradation.redisDown: database`:
/// through the database every purchase commits under the sale's row lock,
/// about 630 a second on the bench's machine (docs/performance.md), so a
/// larger sale would sell for minutes on a path meant for a Redis outage. The CEL rule spells it out.
pub const DATABASE_MODE_MAX_STOCK: i32 = 10_000;

/// How purchases are decided while Redis is down.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RedisDown {
    /// Refused until Redis is back.
    #[default]
    Reject,
    /// Through PostgreSQL alone meanwhile.
    Database,
}

/// Fair admission (`mode: queue`), or none (`open`, the default).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.mode == 'queue' || !has(self.challenge)").message("admission.challenge needs mode: queue"))]
pub struct Admission {
    /// `open`: anyone may buy; `queue`: purchases need a purchase token,
    /// issued only through the queue.
    #[serde(default)]
    pub mode: AdmissionMode,
    /// How long before the start the queue opens (0s..24h, default 10m).
    #[serde(default = "default_prequeue", serialize_with = "duration_text")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('0s') && duration(self) <= duration('24h')").message("admission.prequeue must be between 0s and 24h"))]
    pub prequeue: Duration,
    /// Shoppers admitted per second (1..1000000); default: four fifths of
    /// the purchases a second the API tier accepts (the operator's
    /// `--api-capacity`; 1000 when it is not set), fixed at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub rate_per_second: Option<i32>,
    /// A proof of work asked before joining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<Challenge>,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            mode: AdmissionMode::Open,
            prequeue: default_prequeue(),
            rate_per_second: None,
            challenge: None,
        }
    }
}

/// Shoppers admitted per second when the spec does not say.
pub const DEFAULT_ADMISSION_RATE: i32 = 1000;

fn default_prequeue() -> Duration {
    "10m".parse().expect("default durations parse")
}

/// Whether shoppers queue.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AdmissionMode {
    /// Anyone may buy (today's behaviour).
    #[default]
    Open,
    /// Shoppers queue and are admitted at a rate.
    Queue,
}

/// The challenge: leading zero bits of SHA-256 over the challenge's nonce
/// and the shopper's solution, solved in the browser.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.maxDifficulty) || self.maxDifficulty >= self.difficulty").message("admission.challenge.maxDifficulty must be at least its difficulty"))]
pub struct Challenge {
    /// Only `proofOfWork`.
    pub kind: ChallengeKind,
    /// Leading zero bits asked while the queue is calm (1..28, default 18:
    /// about a quarter of a million hashes, a second or two on a phone).
    #[serde(default = "default_difficulty")]
    #[schemars(range(min = 1, max = 28))]
    pub difficulty: i32,
    /// Raised by a bit per doubling of the join rate, up to this
    /// (default: difficulty + 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 28))]
    pub max_difficulty: Option<i32>,
}

fn default_difficulty() -> i32 {
    18
}

/// The kinds of challenge.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChallengeKind {
    /// SHA-256 with leading zero bits.
    ProofOfWork,
}

fn default_token_ttl() -> Duration {
    "30s".parse().expect("default durations parse")
}

fn default_lead_time() -> Duration {
    Warmup::default().lead_time
}
fn default_cleanup_after() -> Duration {
    Cleanup::default().after
}
fn default_payment_timeout() -> Duration {
    Payment::default().timeout
}
fn default_reconcile_interval() -> Duration {
    Reconcile::default().interval
}

/// The consumer Deployment and how it scales from Kafka lag.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Consumers {
    /// Fewest replicas; 0 scales to zero while there is no lag.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0, max = 256))]
    pub min_replicas: i32,
    /// Most replicas; also the topic's partition count, the effective cap.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 256))]
    pub max_replicas: i32,
    /// Lag one replica is expected to absorb.
    #[serde(default = "default_lag_per_replica")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub lag_per_replica: i32,
    /// Backpressure: above this lag purchases answer BUSY. Default 50 x lagPerReplica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_lag: Option<i64>,
    /// How often lag is read.
    #[serde(default = "default_poll_interval", serialize_with = "duration_text")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('100ms') && duration(self) <= duration('5m')").message("consumers.pollInterval must be between 100ms and 5m"))]
    pub poll_interval: Duration,
    /// How long lag must stay low before replicas are removed.
    #[serde(
        default = "default_scale_down_stabilization",
        serialize_with = "duration_text"
    )]
    #[x_kube(validation = Rule::new("duration(self) >= duration('0s') && duration(self) <= duration('1h')").message("consumers.scaleDownStabilization must be between 0s and 1h"))]
    pub scale_down_stabilization: Duration,
}

fn default_min_replicas() -> i32 {
    1
}
fn default_max_replicas() -> i32 {
    12
}
fn default_lag_per_replica() -> i32 {
    500
}
fn default_poll_interval() -> Duration {
    "2s".parse().expect("default durations parse")
}
fn default_scale_down_stabilization() -> Duration {
    "1m".parse().expect("default durations parse")
}

impl Default for Consumers {
    fn default() -> Self {
        Self {
            min_replicas: default_min_replicas(),
            max_replicas: default_max_replicas(),
            lag_per_replica: default_lag_per_replica(),
            max_lag: None,
            poll_interval: default_poll_interval(),
            scale_down_stabilization: default_scale_down_stabilization(),
        }
    }
}

impl Consumers {
    /// The lag above which purchases answer BUSY.
    pub fn effective_max_lag(&self) -> i64 {
        self.max_lag.unwrap_or(50 * i64::from(self.lag_per_replica))
    }
}

/// Where a sale is in its life.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SaleState {
    /// Waiting for the warm-up instant.
    Scheduled,
    /// Loading Redis from the database and verifying it.
    Warming,
    /// Redis verified; waiting for the start.
    Warm,
    /// Purchases accepted.
    Live,
    /// Kill switch on.
    Paused,
    /// Every unit is sold.
    SoldOut,
    /// The window is over; the final reconciliation runs.
    Ended,
    /// Removing the sale's Redis state.
    CleaningUp,
    /// Done; orders remain in the database.
    Completed,
    /// Something needs a person (see the conditions).
    Failed,
}

impl FlashSaleSpec {
    /// The sale's instants: warm-up, start, end, cleanup, and how often it
    /// is reconciled and its lag read.
    pub fn timeline(&self) -> Timeline {
        let start = to_chrono(&self.window.start);
        let end = to_chrono(&self.window.end);
        let chrono = |d: Duration| chrono::Duration::from_std(d.into()).unwrap_or_default();
        Timeline {
            warm_at: start - chrono(self.warmup.lead_time),
            start,
            end,
            cleanup_at: end + chrono(self.cleanup.after),
            reconcile_every: self.reconcile.interval.into(),
            poll_every: self.consumers.poll_interval.into(),
        }
    }
}

/// What the operator reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlashSaleStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Lifecycle state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SaleState>,
    /// Stock accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stock: Option<StockStatus>,
    /// The consumer Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<ConsumersStatus>,
    /// The admission queue (`spec.admission`), while Redis holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStatus>,
    /// The last reconciliation's findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconciliation: Option<ReconciliationSummary>,
    /// The index of the last periodic reconciliation Job started (its Job is
    /// removed an hour after it finishes; this is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic_reconciliations: Option<u64>,
    /// The merchant's summary of the orders, once the window is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<SaleSummary>,
    /// What the risk scorer did (`spec.risk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<super::risk::RiskStatus>,
    /// Conditions: Ready, Warmed, Live, Paused, SoldOut, ConsumersReady,
    /// Reconciled, CleanedUp, Degraded.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A queued sale's line. Admission keeps no state but its rate, so these
/// follow from the line's length and the clock.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Shoppers who joined (admitted or not).
    pub length: u64,
    /// Of them, let through to buy so far.
    pub admitted: u64,
    /// Of them, still waiting for their turn (0 once closed).
    pub waiting: u64,
    /// Places admitted per second.
    pub rate_per_second: u32,
    /// The wait ahead of the median shopper still in line, seconds.
    pub wait_p50_seconds: u64,
    /// And of the 95th percentile.
    pub wait_p95_seconds: u64,
    /// Sold out or over: everyone waiting was told.
    pub closed: bool,
    /// Challenge answers refused.
    pub challenge_failures: u64,
}

/// Units, by where they are.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StockStatus {
    /// Units for sale (spec.stock as applied).
    pub total: i64,
    /// Accepted, not yet persisted (in Redis and Kafka).
    pub reserved: i64,
    /// Persisted in live orders (UNPAID or PAID).
    pub persisted: i64,
    /// Units still purchasable.
    pub remaining: i64,
    /// reserved + persisted.
    pub sold: i64,
    /// Units left in each Redis shard, while the sale is loaded there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<i64>,
}

/// The consumer Deployment's scale.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumersStatus {
    /// Replicas the Deployment has.
    pub replicas: i32,
    /// Replicas the lag asks for.
    pub desired_replicas: i32,
    /// Messages not yet consumed.
    pub lag: i64,
    /// When replicas last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Since when the lag has asked for fewer replicas (scale-down
    /// stabilization; microseconds, as the window is measured precisely).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_since: Option<MicroTime>,
    /// Backpressure on: purchases answer BUSY.
    #[serde(default)]
    pub busy: bool,
}

/// Summary of the last reconciliation job.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReconciliationSummary {
    /// When it finished.
    pub time: Time,
    /// Differences found between Redis, Kafka and PostgreSQL.
    pub drift_found: i64,
    /// Differences repaired.
    pub drift_repaired: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_mode_rule_states_the_bound() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_string(&FlashSale::crd()).unwrap();
        assert!(
            crd.contains(&format!("self.stock <= {DATABASE_MODE_MAX_STOCK}")),
            "the CEL rule and DATABASE_MODE_MAX_STOCK disagree"
        );
    }

    #[test]
    fn durations_are_written_as_people_write_them() {
        for (written, text) in [
            ("1800s", "30m"),
            ("90s", "1m30s"),
            ("5400s", "1h30m"),
            ("100ms", "100ms"),
            ("2s", "2s"),
            ("0s", "0s"),
            ("168h", "168h"),
        ] {
            let d: Duration = written.parse().unwrap();
            let json = duration_text(&d, serde_json::value::Serializer).unwrap();
            assert_eq!(json, serde_json::json!(text), "{written}");
        }
    }
}
