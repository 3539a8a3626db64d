//! Which sale a request, a key or a message is about.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A sale is named like its `FlashSale` resource: namespace and name, each a
/// DNS label (lower-case alphanumerics and '-', at most 63 characters). Keys,
/// topics and rows are derived from this pair, so it is validated once, here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SaleRef {
    /// The FlashSale's namespace.
    pub namespace: String,
    /// The FlashSale's name.
    pub name: String,
}

/// A namespace or name that cannot name a sale.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid sale {what} {value:?}: must be a DNS label (a-z, 0-9, '-', 1 to 63 characters, alphanumeric at both ends)"
)]
pub struct InvalidSaleRef {
    what: &'static str,
    value: String,
}

impl SaleRef {
    /// Validates both parts.
    pub fn new(namespace: &str, name: &str) -> Result<Self, InvalidSaleRef> {
        for (what, value) in [("namespace", namespace), ("name", name)] {
            if !is_dns_label(value) {
                return Err(InvalidSaleRef {
                    what,
                    value: value.to_string(),
                });
            }
        }
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for SaleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// RFC 1123 label, as Kubernetes checks namespaces and our sale names.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && edge(bytes[0])
        && edge(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| edge(b) || b == b'-')
}

/// A sale's configuration, as the operator writes it to the database from the
/// FlashSale's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleConfig {
    /// The FlashSale's uid: the sale's identity in the database.
    pub id: Uuid,
    /// Namespace and name.
    pub sale: SaleRef,
    /// The product.
    pub sku: String,
    /// Units for sale.
    pub stock: i64,
    /// First instant a purchase is accepted.
    pub start: DateTime<Utc>,
    /// First instant purchases are refused again.
    pub end: DateTime<Utc>,
    /// Units one shopper may hold.
    pub purchase_limit: i64,
    /// Redis stock shards.
    pub shards: u32,
    /// Bumped by every stock change (restock, shrink).
    pub generation: i64,
    /// How long an order may stay unpaid.
    pub payment_timeout: Duration,
    /// Purchases need a purchase token, good for this long once issued
    /// (`spec.antiBot`); `None`: no token is needed.
    pub purchase_token_ttl: Option<Duration>,
    /// Shoppers queue and are admitted at a rate (`spec.admission` with
    /// `mode: queue`); `None`: open, anyone may buy.
    pub admission: Option<super::admission::Admission>,
    /// Orders are scored after the purchase (`spec.risk`); `None`: not scored.
    pub risk: Option<super::risk::RiskPolicy>,
}

impl SaleConfig {
    /// shop/drop: 10 units, 2 per shopper, 4 shards, open from 1 s to 2 s
    /// after the epoch (the unit tests' sale).
    #[cfg(test)]
    pub(crate) fn example() -> Self {
        Self {
            id: Uuid::nil(),
            sale: SaleRef::new("shop", "drop").unwrap(),
            sku: "SKU".into(),
            stock: 10,
            start: DateTime::from_timestamp_millis(1_000).unwrap(),
            end: DateTime::from_timestamp_millis(2_000).unwrap(),
            purchase_limit: 2,
            shards: 4,
            generation: 1,
            payment_timeout: Duration::from_secs(900),
            purchase_token_ttl: None,
            admission: None,
            risk: None,
        }
    }

    /// The metadata every shard's purchase script reads.
    pub fn meta(&self, warmed: bool, paused: bool, busy: bool) -> SaleMeta {
        SaleMeta {
            warmed,
            paused,
            busy,
            start_ms: self.start.timestamp_millis(),
            end_ms: self.end.timestamp_millis(),
            limit: self.purchase_limit,
        }
    }
}

/// The sale metadata copied into every shard's `meta` hash. (Shard 0's hash
/// also holds `stock_total` and `generation`: the stock Redis was last loaded
/// or restocked to, see `lua/restock.lua`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleMeta {
    /// Redis holds the sale's stock and was verified against the database.
    pub warmed: bool,
    /// The kill switch.
    pub paused: bool,
    /// Backpressure: the order backlog is too high.
    pub busy: bool,
    /// Window start, Unix milliseconds.
    pub start_ms: i64,
    /// Window end (exclusive), Unix milliseconds.
    pub end_ms: i64,
    /// Per-shopper limit.
    pub limit: i64,
}

impl SaleMeta {
    /// The hash fields, as `lua/purchase.lua` reads them.
    pub fn to_fields(&self) -> [(&'static str, String); 6] {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        [
            ("warmed", flag(self.warmed)),
            ("paused", flag(self.paused)),
            ("busy", flag(self.busy)),
            ("start_ms", self.start_ms.to_string()),
            ("end_ms", self.end_ms.to_string()),
            ("limit", self.limit.to_string()),
        ]
    }

    /// Reads the hash back; `None` when a field is missing or malformed.
    pub fn from_fields(fields: &HashMap<String, String>) -> Option<Self> {
        let int = |name: &str| fields.get(name)?.parse::<i64>().ok();
        let flag = |name: &str| fields.get(name).map(|v| v == "1");
        Some(Self {
            warmed: flag("warmed")?,
            paused: flag("paused")?,
            busy: flag("busy")?,
            start_ms: int("start_ms")?,
            end_ms: int("end_ms")?,
            limit: int("limit")?,
        })
    }
}

/// What the database knows of the sale's Redis state (its working memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisLife {
    /// The incarnation warm-up loads (stored before any shard is loaded).
    pub incarnation: Option<Uuid>,
    /// That incarnation was loaded, verified and opened (and not removed on
    /// purpose since: cleanup and deletion clear it first).
    pub opened: bool,
    /// When its loss was noticed; while set the sale takes no orders
    /// through Redis.
    pub lost_since: Option<DateTime<Utc>>,
    /// Since when it sells through PostgreSQL alone meanwhile
    /// (`spec.degradation.redisDown: database`).
    pub through_database_since: Option<DateTime<Utc>>,
}

impl RedisLife {
    /// Whether `loaded` has lost the state this one opened: a shard without
    /// metadata, or of another incarnation (a restart, a flush, a failover
    /// to a replica that never had it), or one fenced as lost (a fence that
    /// landed while a recovery reopened the sale, which cleared the record
    /// of it). Noticed losses are `lost_since`.
    pub fn lost_in(&self, loaded: &LoadedSale) -> bool {
        let Some(incarnation) = self.incarnation.filter(|_| self.opened) else {
            return false;
        };
        let incarnation = incarnation.to_string();
        loaded
            .incarnations
            .iter()
            .any(|i| i.as_deref() != Some(incarnation.as_str()))
            || loaded.fenced.iter().any(|f| *f)
    }
}

/// What Redis holds of a sale's stock and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSale {
    /// Units per shard.
    pub stocks: Vec<i64>,
    /// Metadata per shard, `None` where missing or malformed.
    pub metas: Vec<Option<SaleMeta>>,
    /// The incarnation each shard was loaded under (`lua/warm.lua`), if any.
    pub incarnations: Vec<Option<String>>,
    /// Whether each shard is fenced as lost (`lua/fence.lua`): it sells
    /// nothing until a recovery loads a new incarnation.
    pub fenced: Vec<bool>,
    /// The stock total last applied (shard 0).
    pub stock_total: Option<i64>,
    /// Its generation (shard 0).
    pub generation: Option<i64>,
}

impl LoadedSale {
    /// Whether every shard is open for purchases.
    pub fn warmed(&self) -> bool {
        !self.metas.is_empty() && self.metas.iter().all(|m| m.is_some_and(|m| m.warmed))
    }

    /// Units left over all shards.
    pub fn remaining(&self) -> i64 {
        self.stocks.iter().sum()
    }
}

/// What warm-up loads into one shard, from the database: its part of the
/// unsold stock, and — when a lost state is recovered — the units of the
/// shoppers homed there, the claimed reservations of their live orders,
/// their idempotency keys and the purchase tokens they used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardLoad {
    /// Units for sale in the shard.
    pub stock: i64,
    /// Units per shopper.
    pub units: Vec<(String, i64)>,
    /// Reservation records by order id (as `lua/claim.lua` leaves them).
    pub reservations: Vec<(String, String)>,
    /// Idempotency fields (as `lua/purchase.lua` writes them) -> order id.
    pub idempotency: Vec<(String, String)>,
    /// Purchase tokens the shard's shoppers used, with the order that used
    /// each (the purchase script refuses them again).
    pub used_tokens: Vec<(crate::domain::purchase_token::UsedToken, String)>,
}

/// Splits what the database holds of a sale over its shards (pure).
pub fn shard_loads(
    config: &SaleConfig,
    db: &crate::domain::reconcile::DbSnapshot,
) -> Vec<ShardLoad> {
    use crate::domain::shard::{home_shard, split_stock};
    let mut loads: Vec<ShardLoad> = split_stock((db.stock - db.sold).max(0) as u64, config.shards)
        .into_iter()
        .map(|stock| ShardLoad {
            stock: stock as i64,
            ..ShardLoad::default()
        })
        .collect();
    for (shopper, units) in &db.shopper_units {
        let home = home_shard(shopper, config.shards) as usize;
        loads[home].units.push((shopper.clone(), *units));
    }
    for (id, order) in &db.orders {
        let Some(load) = loads.get_mut(order.shard as usize) else {
            continue;
        };
        if order.status.holds_stock() {
            load.reservations.push((
                id.clone(),
                format!(
                    "C:{}:{}:{}",
                    order.quantity, order.accepted_ms, order.shopper
                ),
            ));
        }
        if let Some(key) = &order.idempotency_key {
            load.idempotency.push((
                crate::domain::purchase::idempotency_field(&order.shopper, key),
                id.clone(),
            ));
        }
        if let Some(token) = order.purchase_token {
            load.used_tokens.push((token, id.clone()));
        }
    }
    loads
}

/// Checks a loaded sale against the database before it opens: every shard
/// holds `incarnation`; every shard not open yet carries `expected` metadata
/// and exactly its part of the unsold stock (an open shard, from a warm-up
/// that failed half-way and resumed, may have sold since); the recorded
/// total and generation are the database's.
pub fn verify_load(
    config: &SaleConfig,
    sold: i64,
    expected: &SaleMeta,
    incarnation: &str,
    loaded: &LoadedSale,
) -> Result<(), String> {
    if loaded.stocks.len() != config.shards as usize {
        return Err(format!(
            "{} shards in Redis, {} expected",
            loaded.stocks.len(),
            config.shards
        ));
    }
    if let Some(shard) = loaded
        .incarnations
        .iter()
        .position(|i| i.as_deref() != Some(incarnation))
    {
        return Err(format!(
            "shard {shard} holds incarnation {:?}, expected {incarnation}",
            loaded.incarnations.get(shard).cloned().flatten()
        ));
    }
    let split =
        crate::domain::shard::split_stock((config.stock - sold).max(0) as u64, config.shards);
    for (shard, (meta, stock)) in loaded.metas.iter().zip(&loaded.stocks).enumerate() {
        if meta.is_some_and(|m| m.warmed) {
            continue;
        }
        if meta.as_ref() != Some(expected) {
            return Err(format!(
                "shard {shard} metadata {meta:?}, expected {expected:?}"
            ));
        }
        if *stock != split[shard] as i64 {
            return Err(format!(
                "shard {shard} holds {stock} units, {} expected of the {} unsold",
                split[shard],
                config.stock - sold
            ));
        }
    }
    if (loaded.stock_total, loaded.generation) != (Some(config.stock), Some(config.generation)) {
        return Err(format!(
            "recorded stock {:?} generation {:?}, database stock {} generation {}",
            loaded.stock_total, loaded.generation, config.stock, config.generation
        ));
    }
    Ok(())
}

/// The state a shopper sees in `GET /v1/sales/{sale}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PublicState {
    /// Not warmed yet.
    Scheduled,
    /// Warmed, before the start.
    Warm,
    /// Purchases accepted.
    Live,
    /// Kill switch on.
    Paused,
    /// Nothing left.
    SoldOut,
    /// The window is over.
    Ended,
}

/// What a shopper is told about a sale at `now_ms`, from its configuration,
/// its Redis metadata (if warmed) and the units left in Redis.
pub fn public_state(
    config: &SaleConfig,
    meta: Option<&SaleMeta>,
    remaining: i64,
    now_ms: i64,
) -> PublicState {
    let end_ms = meta.map_or(config.end.timestamp_millis(), |m| m.end_ms);
    let start_ms = meta.map_or(config.start.timestamp_millis(), |m| m.start_ms);
    match meta {
        _ if now_ms >= end_ms => PublicState::Ended,
        Some(m) if m.warmed => {
            if m.paused {
                PublicState::Paused
            } else if remaining <= 0 {
                PublicState::SoldOut
            } else if now_ms < start_ms {
                PublicState::Warm
            } else {
                PublicState::Live
            }
        }
        _ => PublicState::Scheduled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels_only() {
        let cases = [
            ("shop", "iphone-drop", true),
            ("a", "0", true),
            ("shop", &"x".repeat(63), true),
            ("shop", &"x".repeat(64), false),
            ("shop", "", false),
            ("shop", "-drop", false),
            ("shop", "drop-", false),
            ("shop", "Drop", false),
            ("shop", "drop.v2", false),
            ("shop", "drop{1}", false),
            ("sh op", "drop", false),
            ("", "drop", false),
        ];
        for (namespace, name, ok) in cases {
            assert_eq!(
                SaleRef::new(namespace, name).is_ok(),
                ok,
                "{namespace:?}/{name:?}"
            );
        }
    }

    #[test]
    fn displays_as_namespace_slash_name() {
        let sale = SaleRef::new("shop", "drop").unwrap();
        assert_eq!(sale.to_string(), "shop/drop");
    }
}

#[cfg(test)]
mod state_tests {
    #[test]
    fn verify_load_table() {
        let c = config();
        let meta = c.meta(false, false, false);
        let good = LoadedSale {
            stocks: vec![3, 3, 2, 2],
            metas: vec![Some(meta); 4],
            incarnations: vec![Some("i1".into()); 4],
            fenced: vec![false; 4],
            stock_total: Some(10),
            generation: Some(1),
        };
        let check = |loaded: &LoadedSale, sold| verify_load(&c, sold, &meta, "i1", loaded);
        assert_eq!(check(&good, 0), Ok(()));
        assert!(check(&good, 1).is_err(), "one unit sold");
        let mut short = good.clone();
        short.stocks[2] = 1;
        assert!(check(&short, 0).is_err());
        let mut missing = good.clone();
        missing.metas[3] = None;
        assert!(check(&missing, 0).is_err());
        let mut stale = good.clone();
        stale.generation = Some(0);
        assert!(check(&stale, 0).is_err());
        let mut paused = good.clone();
        paused.metas[0] = Some(c.meta(false, true, false));
        assert!(check(&paused, 0).is_err());
        let mut other = good.clone();
        other.incarnations[1] = Some("i0".into());
        assert!(check(&other, 0).is_err(), "a shard of another incarnation");
        // A shard opened by an earlier attempt may have sold since.
        let mut resumed = good.clone();
        resumed.metas[1] = Some(c.meta(true, false, false));
        resumed.stocks[1] = 1;
        assert_eq!(check(&resumed, 0), Ok(()));
        assert!(good.remaining() == 10 && !good.warmed());
    }

    use super::*;

    fn config() -> SaleConfig {
        SaleConfig::example()
    }

    #[test]
    fn meta_round_trips_through_hash_fields() {
        let meta = config().meta(true, false, true);
        let fields: HashMap<String, String> = meta
            .to_fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(SaleMeta::from_fields(&fields), Some(meta));
        let mut missing = fields.clone();
        missing.remove("limit");
        assert_eq!(SaleMeta::from_fields(&missing), None);
        let mut garbled = fields;
        garbled.insert("end_ms".into(), "soon".into());
        assert_eq!(SaleMeta::from_fields(&garbled), None);
    }

    #[test]
    fn public_state_table() {
        use PublicState::*;
        let c = config();
        let warm = c.meta(true, false, false);
        let paused = c.meta(true, true, false);
        let cold = c.meta(false, false, false);
        let cases = [
            ("no meta, before end", None, 10, 1_500, Scheduled),
            ("no meta, after end", None, 10, 2_000, Ended),
            ("not warmed", Some(cold), 10, 1_500, Scheduled),
            ("warm before start", Some(warm), 10, 999, Warm),
            ("live at start", Some(warm), 10, 1_000, Live),
            ("live just before end", Some(warm), 1, 1_999, Live),
            ("ended at end (exclusive)", Some(warm), 10, 2_000, Ended),
            ("sold out", Some(warm), 0, 1_500, SoldOut),
            (
                "sold out before start shows sold out",
                Some(warm),
                0,
                500,
                SoldOut,
            ),
            ("paused wins over live", Some(paused), 10, 1_500, Paused),
            ("paused and sold out", Some(paused), 0, 1_500, Paused),
            ("ended wins over paused", Some(paused), 0, 2_500, Ended),
        ];
        for (what, meta, remaining, now, expected) in cases {
            assert_eq!(
                public_state(&c, meta.as_ref(), remaining, now),
                expected,
                "{what}"
            );
        }
    }
}
