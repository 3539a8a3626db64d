//! Every Redis operation on a sale's state, over the key layout in [`keys`]
//! and the scripts in [`scripts`]. Callers get domain types back; what a
//! script reply means is decided in [`crate::domain::purchase`].
//!
//! [`keys`]: super::keys
//! [`scripts`]: super::scripts

use std::collections::{BTreeMap, HashMap};

use futures::future::try_join_all;
use redis::{AsyncCommands, Value};
use uuid::Uuid;

use super::RedisConn;
use super::keys::ShardKeys;
use super::scripts::SCRIPTS;
use crate::domain::purchase::{
    ReleaseOutcome, ReplyField, Reservation, ReservationState, ShardDecision, UnexpectedReply,
    read_purchase_reply, read_release_reply,
};
use crate::domain::purchase_token::UsedToken;
use crate::domain::reconcile::{DbSnapshot, Repair, ShardSnapshot, TransferOut, parse_transfer_in};
use crate::domain::sale::{
    LoadedSale, SaleConfig, SaleMeta, SaleRef, ShardLoad, shard_loads, verify_load,
};
use crate::domain::shard::home_shard;
use crate::domain::stock::{ShardProbe, active_withdrawal, shrink_id};

/// A Redis call failed, or answered what the scripts never answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis is unreachable, timed out, or refused the command.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A script replied outside its contract.
    #[error(transparent)]
    Unexpected(#[from] UnexpectedReply),
    /// A shard the call writes to has no metadata: the sale's Redis state was
    /// lost (a restart, a flush, a failover), so nothing was written.
    #[error("shard {shard} of the sale has no metadata: its Redis state was lost")]
    StateLost {
        /// The shard.
        shard: u32,
    },
}

/// A warm-up that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    /// Redis failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis does not hold what was loaded.
    #[error("redis does not match the database after loading: {0}")]
    Mismatch(String),
}

impl From<redis::RedisError> for WarmError {
    fn from(e: redis::RedisError) -> Self {
        Self::Store(e.into())
    }
}

/// One shard read atomically ([`SaleStore::snapshot`]).
#[derive(Debug, Clone)]
pub struct ShardRead {
    /// Its keys.
    pub snapshot: ShardSnapshot,
    /// Redis's clock then, Unix ms.
    pub now_ms: i64,
    /// The stock generation its metadata records (shard 0's is the sale's).
    pub generation: Option<i64>,
    /// The incarnation it was loaded under, if it has metadata.
    pub incarnation: Option<String>,
}

/// What became of a shrink in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShrinkOutcome {
    /// Every unit left the shards and the new total is recorded.
    Shrunk,
    /// Fewer units were unsold than the shrink removes; nothing changed.
    NotEnoughUnsold {
        /// Units that were still unsold.
        unsold: i64,
    },
}

/// What `lua/claim.lua` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Claimed now, or already claimed by an earlier delivery: persist it.
    Claimed {
        /// Units reserved.
        quantity: i64,
        /// The buyer.
        shopper: String,
    },
    /// Released: the shopper was told no, drop the message.
    Released,
    /// No reservation under this id.
    Missing,
}

/// What `lua/confirm.lua` found for one order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmOutcome {
    /// Now acknowledged (or already).
    Acknowledged,
    /// A consumer claimed it already.
    Claimed,
    /// Released: its purchase was answered with a failure.
    Released,
    /// No reservation under this id.
    Missing,
}

/// A purchase token a purchase uses up as it reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUse {
    /// What makes the token single-use.
    pub nonce: Uuid,
    /// How long Redis remembers it was used: past the token's expiry by the
    /// API's clock, whatever Redis's own clock says.
    pub remember: std::time::Duration,
}

impl TokenUse {
    /// What the order keeps of it, used at `now_ms`.
    pub fn used_until(&self, now_ms: i64) -> UsedToken {
        UsedToken {
            nonce: self.nonce,
            until_ms: now_ms.saturating_add(self.remember.as_millis() as i64),
        }
    }
}

/// A sale's state in Redis, seen through its shards.
#[derive(Clone)]
pub struct SaleStore {
    conn: RedisConn,
}

fn reply_fields(value: Value) -> Result<Vec<ReplyField>, UnexpectedReply> {
    let Value::Array(items) = value else {
        return Err(UnexpectedReply(vec![]));
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Int(i) => Ok(ReplyField::Int(i)),
            Value::BulkString(bytes) => Ok(ReplyField::Text(
                String::from_utf8_lossy(&bytes).into_owned(),
            )),
            Value::SimpleString(s) => Ok(ReplyField::Text(s)),
            _ => Err(UnexpectedReply(vec![])),
        })
        .collect()
}

/// What one order's reply from `lua/claim.lua` means.
fn read_claim_reply(fields: Vec<ReplyField>) -> Result<ClaimOutcome, UnexpectedReply> {
    use ReplyField::{Int, Text};
    Ok(match fields.as_slice() {
        [Int(0 | 1), Int(quantity), Text(shopper)] => ClaimOutcome::Claimed {
            quantity: *quantity,
            shopper: shopper.clone(),
        },
        [Int(2)] => ClaimOutcome::Released,
        [Int(4)] => ClaimOutcome::Missing,
        _ => return Err(UnexpectedReply(fields)),
    })
}

impl SaleStore {
    /// Counts a purchase token issued to `shopper`, on the shopper's home
    /// shard: the risk scorer's tokens-per-shopper rule reads it.
    pub async fn count_token_issued(
        &self,
        sale: &SaleRef,
        shards: u32,
        shopper: &str,
    ) -> Result<(), StoreError> {
        let keys = ShardKeys::new(sale, home_shard(shopper, shards));
        let _: i64 = self
            .conn
            .clone()
            .hincr(&keys.tokens_issued, shopper, 1)
            .await?;
        Ok(())
    }

    /// Purchase tokens issued to `shopper` in the sale.
    pub async fn tokens_issued(
        &self,
        sale: &SaleRef,
        shards: u32,
        shopper: &str,
    ) -> Result<u32, StoreError> {
        let keys = ShardKeys::new(sale, home_shard(shopper, shards));
        let count: Option<u32> = self.conn.clone().hget(&keys.tokens_issued, shopper).await?;
        Ok(count.unwrap_or(0))
    }

    /// A store over `conn`.
    pub fn new(conn: RedisConn) -> Self {
        Self { conn }
    }

    /// The connection, for health checks.
    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Runs `lua/purchase.lua` in `shard`. With `token`, the purchase uses
    /// that purchase token up as it reserves (see [`TokenUse`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn purchase(
        &self,
        sale: &SaleRef,
        shard: u32,
        shopper: &str,
        quantity: i64,
        order_id: &str,
        idempotency_key: Option<&str>,
        token: Option<&TokenUse>,
    ) -> Result<ShardDecision, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        let mut invocation = SCRIPTS.purchase.key(&keys.meta);
        invocation
            .key(&keys.stock)
            .key(&keys.units)
            .key(&keys.reservations)
            .key(&keys.idempotency)
            .key(&keys.pending)
            .arg(shopper)
            .arg(quantity)
            .arg(order_id)
            .arg(idempotency_key.unwrap_or(""));
        if let Some(token) = token {
            invocation
                .key(keys.used_token(&token.nonce))
                .arg(token.remember.as_millis().max(1) as u64);
        }
        let reply: Value = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(read_purchase_reply(&reply_fields(reply)?)?)
    }

    /// Runs `lua/confirm.lua` in `shard`: the broker acknowledged these
    /// orders' messages. The outcomes come in the order of `order_ids`.
    pub async fn confirm(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_ids: &[String],
    ) -> Result<Vec<ConfirmOutcome>, StoreError> {
        self.per_order(&SCRIPTS.confirm, sale, shard, order_ids)
            .await?
            .into_iter()
            .map(|reply| {
                Ok(match reply {
                    Value::Int(0) => ConfirmOutcome::Acknowledged,
                    Value::Int(1) => ConfirmOutcome::Claimed,
                    Value::Int(2) => ConfirmOutcome::Released,
                    Value::Int(3) => ConfirmOutcome::Missing,
                    Value::Int(other) => {
                        return Err(UnexpectedReply(vec![ReplyField::Int(other)]).into());
                    }
                    _ => return Err(UnexpectedReply(vec![]).into()),
                })
            })
            .collect()
    }

    /// Runs `lua/release.lua`: gives the reservation's units back if it is in
    /// the `expected` state and at least `min_age_ms` old.
    pub async fn release(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
        expected: ReservationState,
        min_age_ms: i64,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.run_release(sale, shard, order_id, expected, min_age_ms, "", None, false)
            .await
    }

    /// Gives back the units of a persisted order that stopped holding stock
    /// (cancelled, timed out, refunded): its claimed reservation is released
    /// and its record deleted, since the database holds the order's outcome
    /// from now on. Exactly once: a retry finds no reservation.
    pub async fn return_units(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.run_release(
            sale,
            shard,
            order_id,
            ReservationState::Claimed,
            0,
            "",
            None,
            true,
        )
        .await
    }

    /// The API's purchase `order_id` was not acknowledged: its reservation
    /// (still R) is released, and the purchase token it used, if any, may buy
    /// again (the purchase bought nothing).
    pub async fn release_unacknowledged(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
        token: Option<&Uuid>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.run_release(
            sale,
            shard,
            order_id,
            ReservationState::Reserved,
            0,
            "",
            token,
            false,
        )
        .await
    }

    /// The API gives up on its own purchase `order_id` of `shopper`: releases
    /// the reservation if the script made one, and otherwise leaves a
    /// released tombstone, so that a purchase script of this id that runs
    /// late (its reply timed out) reserves nothing.
    pub async fn abandon(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
        shopper: &str,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.run_release(
            sale,
            shard,
            order_id,
            ReservationState::Reserved,
            0,
            shopper,
            None,
            false,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_release(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
        expected: ReservationState,
        min_age_ms: i64,
        tombstone: &str,
        token: Option<&Uuid>,
        forget: bool,
    ) -> Result<ReleaseOutcome, StoreError> {
        if expected == ReservationState::Released {
            return Ok(ReleaseOutcome::Found(expected));
        }
        let keys = ShardKeys::new(sale, shard);
        let mut invocation = SCRIPTS.release.key(&keys.stock);
        invocation
            .key(&keys.units)
            .key(&keys.reservations)
            .key(&keys.meta)
            .key(&keys.pending)
            .arg(order_id)
            .arg(expected.letter())
            .arg(min_age_ms)
            .arg(tombstone)
            .arg(if forget { "1" } else { "" });
        if let Some(nonce) = token {
            invocation.key(keys.used_token(nonce));
        }
        let reply: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(read_release_reply(&reply)?)
    }

    /// Runs `lua/claim.lua`: a consumer takes the reservations of a batch's
    /// orders in `shard` before persisting them, in one call. The outcomes
    /// come in the order of `order_ids`.
    pub async fn claim(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_ids: &[String],
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.per_order(&SCRIPTS.claim, sale, shard, order_ids)
            .await?
            .into_iter()
            .map(|reply| Ok(read_claim_reply(reply_fields(reply)?)?))
            .collect()
    }

    /// Runs a script over a shard's reservations for a batch of orders: one
    /// reply per order, in the order of `order_ids`.
    async fn per_order(
        &self,
        script: &redis::Script,
        sale: &SaleRef,
        shard: u32,
        order_ids: &[String],
    ) -> Result<Vec<Value>, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        let mut invocation = script.key(&keys.reservations);
        invocation.key(&keys.pending);
        for id in order_ids {
            invocation.arg(id);
        }
        let reply: Value = invocation.invoke_async(&mut self.conn.clone()).await?;
        match reply {
            Value::Array(replies) if replies.len() == order_ids.len() => Ok(replies),
            Value::Array(replies) => {
                Err(UnexpectedReply(vec![ReplyField::Int(replies.len() as i64)]).into())
            }
            _ => Err(UnexpectedReply(vec![]).into()),
        }
    }

    /// First half of a transfer: takes up to `wanted` (or half the donor's
    /// stock, if more) out of `donor`, once per `transfer_id`. Returns (units
    /// taken, Redis time ms).
    pub async fn transfer_out(
        &self,
        sale: &SaleRef,
        donor: u32,
        to: u32,
        transfer_id: &str,
        wanted: i64,
    ) -> Result<(i64, i64), StoreError> {
        let keys = ShardKeys::new(sale, donor);
        let reply: Vec<i64> = SCRIPTS
            .transfer_out
            .key(&keys.stock)
            .key(&keys.transfers_out)
            .key(&keys.in_transit)
            .arg(transfer_id)
            .arg(to)
            .arg(wanted)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [taken, now] => Ok((*taken, *now)),
            _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
        }
    }

    /// Second half of a transfer: credits `amount` to `to`, once per id, then
    /// takes the transfer off the donor's in-transit set. Returns whether this
    /// call credited it. A receiving shard without metadata (its state was
    /// lost) is not written: [`StoreError::StateLost`].
    pub async fn transfer_in(
        &self,
        sale: &SaleRef,
        donor: u32,
        to: u32,
        transfer_id: &str,
        amount: i64,
    ) -> Result<bool, StoreError> {
        let keys = ShardKeys::new(sale, to);
        let reply: Vec<i64> = SCRIPTS
            .transfer_in
            .key(&keys.stock)
            .key(&keys.transfers_in)
            .key(&keys.meta)
            .arg(transfer_id)
            .arg(amount)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let credited = match reply.as_slice() {
            [0] => true,
            [1] => false,
            [3] => return Err(StoreError::StateLost { shard: to }),
            _ => {
                return Err(
                    UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into(),
                );
            }
        };
        let () = self
            .conn
            .clone()
            .zrem(ShardKeys::new(sale, donor).in_transit, transfer_id)
            .await?;
        Ok(credited)
    }

    /// Transfers taken out of `donor` at least `min_age_ms` ago (by that
    /// node's clock) and not credited yet: (id, receiving shard, units).
    pub async fn stale_transfers(
        &self,
        sale: &SaleRef,
        donor: u32,
        min_age_ms: i64,
    ) -> Result<Vec<(String, u32, i64)>, StoreError> {
        let keys = ShardKeys::new(sale, donor);
        let (_, ids) = self.stale(&keys.in_transit, min_age_ms, None).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = ids.into_iter().map(|(id, _)| id).collect();
        let records: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&keys.transfers_out)
            .arg(&ids)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(ids
            .into_iter()
            .zip(records)
            .filter_map(|(id, record)| {
                let out = TransferOut::parse(&record?)?;
                Some((id, out.to, out.amount))
            })
            .collect())
    }

    /// How many reservations of `shard` are still R at least `min_age_ms`
    /// after they were made, by that node's clock, and its time now: a
    /// count, so that a backlog nobody may release yet costs one small reply.
    pub async fn stale_reservation_count(
        &self,
        sale: &SaleRef,
        shard: u32,
        min_age_ms: i64,
    ) -> Result<(i64, i64), StoreError> {
        let reply: Vec<i64> = SCRIPTS
            .stale
            .key(ShardKeys::new(sale, shard).pending)
            .arg(min_age_ms)
            .arg(0)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [now, count] => Ok((*now, *count)),
            _ => Err(UnexpectedReply(vec![]).into()),
        }
    }

    /// Reservations of `shard` still R at least `min_age_ms` after they were
    /// made and made before `before_ms` (both by that node's clock): their
    /// order ids, at most 1,000.
    pub async fn stale_reservations(
        &self,
        sale: &SaleRef,
        shard: u32,
        min_age_ms: i64,
        before_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let (_, members) = self
            .stale(
                &ShardKeys::new(sale, shard).pending,
                min_age_ms,
                Some(before_ms),
            )
            .await?;
        Ok(members.into_iter().map(|(id, _)| id).collect())
    }

    /// Runs `lua/stale.lua` on a time-scored set (at most 1,000 members).
    async fn stale(
        &self,
        key: &str,
        min_age_ms: i64,
        before_ms: Option<i64>,
    ) -> Result<(i64, Vec<(String, i64)>), StoreError> {
        let mut invocation = SCRIPTS.stale.key(key);
        invocation.arg(min_age_ms).arg(1000);
        if let Some(before) = before_ms {
            invocation.arg(before);
        }
        let reply: Vec<Value> = invocation.invoke_async(&mut self.conn.clone()).await?;
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        };
        let unexpected = || StoreError::from(UnexpectedReply(vec![]));
        let (now, members) = reply.split_first().ok_or_else(unexpected)?;
        let now: i64 = text(now)
            .and_then(|t| t.parse().ok())
            .ok_or_else(unexpected)?;
        let members = members
            .chunks(2)
            .filter_map(|pair| {
                let [member, score] = pair else { return None };
                let score: f64 = text(score)?.parse().ok()?;
                Some((text(member)?, score as i64))
            })
            .collect();
        Ok((now, members))
    }

    /// What a sold-out decision reads from every shard (`lua/probe.lua`),
    /// each shard atomically: (units left, transfers in transit, arrivals).
    pub async fn probe(&self, sale: &SaleRef, shards: u32) -> Result<Vec<ShardProbe>, StoreError> {
        try_join_all((0..shards).map(|shard| async move {
            let keys = ShardKeys::new(sale, shard);
            let reply: Vec<i64> = SCRIPTS
                .probe
                .key(&keys.stock)
                .key(&keys.in_transit)
                .key(&keys.meta)
                .invoke_async(&mut self.conn.clone())
                .await?;
            match reply.as_slice() {
                [stock, in_transit, arrivals] => Ok(ShardProbe {
                    stock: *stock,
                    in_transit: *in_transit,
                    arrivals: *arrivals,
                }),
                _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
            }
        }))
        .await
    }

    /// The reservation under `order_id` in `shard`, if any.
    pub async fn reservation(
        &self,
        sale: &SaleRef,
        shard: u32,
        order_id: &str,
    ) -> Result<Option<Reservation>, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        let record: Option<String> = self.conn.clone().hget(&keys.reservations, order_id).await?;
        Ok(record.as_deref().and_then(Reservation::parse))
    }

    /// Every reservation record of `shard`, by order id (unparsable records
    /// are reported as `None`).
    pub async fn reservations(
        &self,
        sale: &SaleRef,
        shard: u32,
    ) -> Result<HashMap<String, Option<Reservation>>, StoreError> {
        let records: HashMap<String, String> = self
            .conn
            .clone()
            .hgetall(ShardKeys::new(sale, shard).reservations)
            .await?;
        Ok(records
            .into_iter()
            .map(|(id, record)| {
                let parsed = Reservation::parse(&record);
                (id, parsed)
            })
            .collect())
    }

    /// Units left in each shard (missing keys count 0). One command per
    /// shard, concurrently: a Redis Cluster refuses pipelines across slots.
    pub async fn shard_stocks(&self, sale: &SaleRef, shards: u32) -> Result<Vec<i64>, StoreError> {
        try_join_all((0..shards).map(|shard| async move {
            let stock: Option<i64> = self
                .conn
                .clone()
                .get(ShardKeys::new(sale, shard).stock)
                .await?;
            Ok(stock.unwrap_or_default())
        }))
        .await
    }

    /// The metadata in `shard`, if it is complete.
    pub async fn meta(&self, sale: &SaleRef, shard: u32) -> Result<Option<SaleMeta>, StoreError> {
        let fields: HashMap<String, String> = self
            .conn
            .clone()
            .hgetall(ShardKeys::new(sale, shard).meta)
            .await?;
        Ok(SaleMeta::from_fields(&fields))
    }

    /// Writes `meta` into every shard (the kill switch, backpressure, window
    /// and limit changes take effect on the next purchase), never into one
    /// whose metadata is gone (`lua/meta.lua`): that shard's state was lost,
    /// and the call fails with [`StoreError::StateLost`].
    pub async fn write_meta(
        &self,
        sale: &SaleRef,
        shards: u32,
        meta: &SaleMeta,
    ) -> Result<(), StoreError> {
        let fields = meta.to_fields();
        try_join_all((0..shards).map(|shard| {
            let fields = &fields;
            async move {
                let mut invocation = SCRIPTS.meta.key(ShardKeys::new(sale, shard).meta);
                for (name, value) in fields {
                    invocation.arg(*name).arg(value);
                }
                let written: i64 = invocation.invoke_async(&mut self.conn.clone()).await?;
                if written == 1 {
                    Ok(())
                } else {
                    Err(StoreError::StateLost { shard })
                }
            }
        }))
        .await?;
        Ok(())
    }

    /// Marks every shard that still has metadata as lost (`lua/fence.lua`):
    /// its purchases answer "state lost" until a recovery loads a new
    /// incarnation. A shard without metadata refuses purchases already.
    pub async fn fence(&self, sale: &SaleRef, shards: u32) -> Result<(), StoreError> {
        try_join_all((0..shards).map(|shard| async move {
            let _: i64 = SCRIPTS
                .fence
                .key(ShardKeys::new(sale, shard).meta)
                .invoke_async(&mut self.conn.clone())
                .await?;
            Ok::<_, StoreError>(())
        }))
        .await?;
        Ok(())
    }

    /// The kill switch alone (`lua/pause.lua`): sets `paused` in every shard
    /// that has metadata, if shard 0 does not say so already (one read on
    /// the common path). Returns whether any shard changed.
    pub async fn set_paused(
        &self,
        sale: &SaleRef,
        shards: u32,
        paused: bool,
    ) -> Result<bool, StoreError> {
        let flag = if paused { "1" } else { "0" };
        let now: Option<String> = self
            .conn
            .clone()
            .hget(ShardKeys::new(sale, 0).meta, "paused")
            .await?;
        if now.is_none() || now.as_deref() == Some(flag) {
            return Ok(false);
        }
        self.set_paused_everywhere(sale, shards, paused).await
    }

    /// Sets `paused` in every shard that has metadata, whatever shard 0 says
    /// (a sale being deleted, whose shard 0 may have lost its state).
    /// Returns whether any shard changed.
    pub async fn set_paused_everywhere(
        &self,
        sale: &SaleRef,
        shards: u32,
        paused: bool,
    ) -> Result<bool, StoreError> {
        let flag = if paused { "1" } else { "0" };
        let changed = try_join_all((0..shards).map(|shard| async move {
            let changed: i64 = SCRIPTS
                .pause
                .key(ShardKeys::new(sale, shard).meta)
                .arg(flag)
                .invoke_async(&mut self.conn.clone())
                .await?;
            Ok::<_, StoreError>(changed == 1)
        }))
        .await?;
        Ok(changed.into_iter().any(|c| c))
    }

    /// Sets each shard's stock (warm-up and repairs), no TTL.
    pub async fn set_stocks(&self, sale: &SaleRef, stocks: &[i64]) -> Result<(), StoreError> {
        try_join_all(stocks.iter().enumerate().map(|(shard, stock)| async move {
            let () = self
                .conn
                .clone()
                .set(ShardKeys::new(sale, shard as u32).stock, *stock)
                .await?;
            Ok::<_, StoreError>(())
        }))
        .await?;
        Ok(())
    }

    /// Warms a new sale under `incarnation` with `sold` units already sold
    /// and nothing else to restore: see [`SaleStore::warm_from`].
    pub async fn warm(
        &self,
        config: &SaleConfig,
        sold: i64,
        paused: bool,
        incarnation: &str,
    ) -> Result<(), WarmError> {
        let db = DbSnapshot {
            stock: config.stock,
            generation: config.generation,
            sold,
            ..DbSnapshot::default()
        };
        self.warm_from(config, &db, paused, incarnation).await
    }

    /// Warms a sale under `incarnation` (stored in the database first) from
    /// what the database holds (`db`, one snapshot): each shard is loaded once
    /// per incarnation — its part of the unsold stock with its metadata, not
    /// yet open, all of its older keys gone — then, while still closed, the
    /// units, claimed reservations and idempotency keys of its shoppers (a
    /// recovered state). Everything is read back and verified before every
    /// shard opens. A warm-up that failed half-way resumes: a shard of this
    /// incarnation is never loaded again (it may be open and selling).
    pub async fn warm_from(
        &self,
        config: &SaleConfig,
        db: &DbSnapshot,
        paused: bool,
        incarnation: &str,
    ) -> Result<(), WarmError> {
        let loads = shard_loads(config, db);
        let closed = config.meta(false, paused, false);
        let fields = closed.to_fields();
        try_join_all(loads.iter().enumerate().map(|(shard, load)| {
            let fields = &fields;
            async move {
                let keys = ShardKeys::new(&config.sale, shard as u32);
                let mut invocation = SCRIPTS.warm.key(&keys.meta);
                for key in keys.all().into_iter().filter(|k| *k != keys.meta) {
                    invocation.key(key);
                }
                invocation.arg(incarnation).arg(load.stock);
                for (name, value) in fields {
                    invocation.arg(*name).arg(value);
                }
                if shard == 0 {
                    invocation
                        .arg("stock_total")
                        .arg(db.stock)
                        .arg("generation")
                        .arg(db.generation);
                }
                let reply: Vec<i64> = invocation.invoke_async(&mut self.conn.clone()).await?;
                // An open shard may have sold since: its data is live.
                if reply.as_slice() != [2] {
                    self.load_shard(&keys, load).await?;
                }
                Ok::<_, StoreError>(())
            }
        }))
        .await?;
        let loaded = self.loaded(&config.sale, config.shards).await?;
        verify_load(config, db.sold, &closed, incarnation, &loaded).map_err(WarmError::Mismatch)?;
        self.write_meta(
            &config.sale,
            config.shards,
            &config.meta(true, paused, false),
        )
        .await?;
        Ok(())
    }

    /// Writes a closed shard's shoppers' units, reservations and idempotency
    /// keys, in chunks (idempotent: the same values again).
    async fn load_shard(&self, keys: &ShardKeys, load: &ShardLoad) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        for chunk in load.units.chunks(1000) {
            let () = conn.hset_multiple(&keys.units, chunk).await?;
        }
        for chunk in load.reservations.chunks(1000) {
            let () = conn.hset_multiple(&keys.reservations, chunk).await?;
        }
        for chunk in load.idempotency.chunks(1000) {
            let () = conn.hset_multiple(&keys.idempotency, chunk).await?;
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        for (token, order_id) in &load.used_tokens {
            let left = token.until_ms - now_ms;
            if left > 0 {
                let () = redis::cmd("SET")
                    .arg(keys.used_token(&token.nonce))
                    .arg(order_id)
                    .arg("PX")
                    .arg(left)
                    .query_async(&mut conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// What Redis holds of the sale's stock and metadata.
    pub async fn loaded(&self, sale: &SaleRef, shards: u32) -> Result<LoadedSale, StoreError> {
        let stocks = self.shard_stocks(sale, shards).await?;
        let hashes = try_join_all((0..shards).map(|shard| async move {
            let fields: HashMap<String, String> = self
                .conn
                .clone()
                .hgetall(ShardKeys::new(sale, shard).meta)
                .await?;
            Ok::<_, StoreError>(fields)
        }))
        .await?;
        let number = |name: &str| hashes.first()?.get(name)?.parse().ok();
        Ok(LoadedSale {
            stocks,
            metas: hashes.iter().map(SaleMeta::from_fields).collect(),
            incarnations: hashes.iter().map(|h| h.get("inc").cloned()).collect(),
            fenced: hashes
                .iter()
                .map(|h| h.get("lost").is_some_and(|v| v == "1"))
                .collect(),
            stock_total: number("stock_total"),
            generation: number("generation"),
        })
    }

    /// Applies the sale's raised stock total of `generation` to Redis once
    /// (`lua/restock.lua`, the database was raised first). Returns the units
    /// added, or `None` when that generation was applied already.
    pub async fn restock(
        &self,
        sale: &SaleRef,
        total: i64,
        generation: i64,
    ) -> Result<Option<i64>, StoreError> {
        self.record_stock(sale, total, generation, "add").await
    }

    /// Runs `lua/restock.lua` in `mode` (`add`: move shard 0's stock by the
    /// difference; `record`: a shrink's withdrawals moved it already).
    async fn record_stock(
        &self,
        sale: &SaleRef,
        total: i64,
        generation: i64,
        mode: &str,
    ) -> Result<Option<i64>, StoreError> {
        let keys = ShardKeys::new(sale, 0);
        let reply: Vec<i64> = SCRIPTS
            .restock
            .key(&keys.stock)
            .key(&keys.meta)
            .arg(total)
            .arg(generation)
            .arg(mode)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [0, delta] => Ok(Some(*delta)),
            [1] | [2] => Ok(None),
            _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
        }
    }

    /// Shrinks a warmed sale to `total` as its stock `generation`, Redis
    /// first: takes `total_before - total` units out of the shards (shard by
    /// shard, once per shrink and shard), and only when every unit could be
    /// taken records the new total. Otherwise the units taken go back and
    /// the answer is the units that could be taken: fewer unsold units remain
    /// than the shrink removes. The database is lowered after `Ok(Shrunk)`.
    pub async fn shrink(
        &self,
        sale: &SaleRef,
        shards: u32,
        total_before: i64,
        total: i64,
        generation: i64,
    ) -> Result<ShrinkOutcome, StoreError> {
        let id = shrink_id(generation, total);
        let wanted = total_before - total;
        let mut taken = 0;
        for shard in 0..shards {
            let left = wanted - taken;
            taken += self.withdraw(sale, shard, &id, "take", left).await?;
        }
        if taken < wanted {
            self.undo_shrink(sale, shards, &id).await?;
            return Ok(ShrinkOutcome::NotEnoughUnsold { unsold: taken });
        }
        self.record_stock(sale, total, generation, "record").await?;
        Ok(ShrinkOutcome::Shrunk)
    }

    /// Gives back the units of shrink `id` (one that was refused, or replaced
    /// by another stock change before it completed). Idempotent.
    pub async fn undo_shrink(
        &self,
        sale: &SaleRef,
        shards: u32,
        id: &str,
    ) -> Result<i64, StoreError> {
        let mut returned = 0;
        for shard in 0..shards {
            returned += self.withdraw(sale, shard, id, "undo", 0).await?;
        }
        Ok(returned)
    }

    async fn withdraw(
        &self,
        sale: &SaleRef,
        shard: u32,
        id: &str,
        mode: &str,
        wanted: i64,
    ) -> Result<i64, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        let reply: Vec<i64> = SCRIPTS
            .withdraw
            .key(&keys.stock)
            .key(&keys.withdrawals)
            .key(&keys.meta)
            .arg(id)
            .arg(mode)
            .arg(wanted)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [-1] => Err(StoreError::StateLost { shard }),
            [units] => Ok(*units),
            _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
        }
    }

    /// Shrinks whose units are out of the shards but not yet recorded as the
    /// sale's total (an interrupted shrink): their ids and units, over every
    /// shard.
    pub async fn pending_shrinks(
        &self,
        sale: &SaleRef,
        shards: u32,
        generation: i64,
    ) -> Result<BTreeMap<String, i64>, StoreError> {
        let all = try_join_all((0..shards).map(|shard| async move {
            let records: HashMap<String, String> = self
                .conn
                .clone()
                .hgetall(ShardKeys::new(sale, shard).withdrawals)
                .await?;
            Ok::<_, StoreError>(records)
        }))
        .await?;
        let mut pending = BTreeMap::new();
        for (id, record) in all.into_iter().flatten() {
            if let Some(units) = active_withdrawal(&id, &record, generation) {
                *pending.entry(id).or_default() += units;
            }
        }
        Ok(pending)
    }

    /// Deletes every key of every shard, metadata last (while any shard still
    /// has its metadata, the deletion is unfinished), then the admission
    /// queue. Idempotent.
    pub async fn delete(&self, sale: &SaleRef, shards: u32) -> Result<(), StoreError> {
        try_join_all((0..shards).map(|shard| async move {
            let keys = ShardKeys::new(sale, shard);
            let data: Vec<&str> = keys.all().into_iter().filter(|k| *k != keys.meta).collect();
            let () = self.conn.clone().del(data).await?;
            Ok::<_, StoreError>(())
        }))
        .await?;
        try_join_all((0..shards).map(|shard| async move {
            let () = self
                .conn
                .clone()
                .del(ShardKeys::new(sale, shard).meta)
                .await?;
            Ok::<_, StoreError>(())
        }))
        .await?;
        self.delete_queue(sale).await
    }

    /// How many shards still have their metadata (0: never warmed or cleaned up).
    pub async fn shards_with_meta(&self, sale: &SaleRef, shards: u32) -> Result<u32, StoreError> {
        let present = try_join_all((0..shards).map(|shard| async move {
            let exists: bool = self
                .conn
                .clone()
                .exists(ShardKeys::new(sale, shard).meta)
                .await?;
            Ok::<_, StoreError>(exists)
        }))
        .await?;
        Ok(present.into_iter().filter(|p| *p).count() as u32)
    }

    /// Reads one shard atomically (MULTI/EXEC: its keys share a slot), with
    /// Redis's clock and what its metadata records.
    pub async fn snapshot(&self, sale: &SaleRef, shard: u32) -> Result<ShardRead, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        type Raw = (
            Option<i64>,
            HashMap<String, i64>,
            HashMap<String, String>,
            HashMap<String, String>,
            HashMap<String, String>,
            HashMap<String, String>,
            Option<i64>,
            Option<String>,
            (i64, i64),
        );
        let (
            stock,
            units,
            reservations,
            transfers_out,
            transfers_in,
            withdrawals,
            generation,
            incarnation,
            (secs, micros),
        ): Raw = redis::pipe()
            .atomic()
            .get(&keys.stock)
            .hgetall(&keys.units)
            .hgetall(&keys.reservations)
            .hgetall(&keys.transfers_out)
            .hgetall(&keys.transfers_in)
            .hgetall(&keys.withdrawals)
            .hget(&keys.meta, "generation")
            .hget(&keys.meta, "inc")
            .cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        let snapshot = ShardSnapshot {
            stock: stock.unwrap_or_default(),
            units: units.into_iter().collect(),
            reservations: reservations
                .into_iter()
                .filter_map(|(id, r)| Some((id, Reservation::parse(&r)?)))
                .collect(),
            transfers_out: transfers_out
                .into_iter()
                .filter_map(|(id, t)| Some((id, TransferOut::parse(&t)?)))
                .collect(),
            transfers_in: transfers_in
                .into_iter()
                .filter_map(|(id, t)| Some((id, parse_transfer_in(&t)?)))
                .collect(),
            withdrawals: withdrawals.into_iter().collect(),
        };
        Ok(ShardRead {
            snapshot,
            now_ms: secs * 1000 + micros / 1000,
            generation,
            incarnation,
        })
    }

    /// Applies one reconciliation repair. Returns whether Redis changed.
    pub async fn repair(&self, sale: &SaleRef, repair: &Repair) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        Ok(match repair {
            Repair::FinishTransfer {
                id,
                from,
                to,
                amount,
            } => self.transfer_in(sale, *from, *to, id, *amount).await?,
            Repair::Release {
                order_id,
                shard,
                expected,
                min_age_ms,
            } => {
                let Some(expected) = ReservationState::from_letter(&expected.to_string()) else {
                    return Ok(false);
                };
                matches!(
                    self.release(sale, *shard, order_id, expected, *min_age_ms)
                        .await?,
                    ReleaseOutcome::Released(_)
                )
            }
            Repair::RestoreReservation {
                order_id,
                shard,
                record,
            } => {
                conn.hset_nx(ShardKeys::new(sale, *shard).reservations, order_id, record)
                    .await?
            }
            Repair::AdjustUnits {
                shard,
                shopper,
                delta,
            } => {
                let units = ShardKeys::new(sale, *shard).units;
                let left: i64 = conn.hincr(&units, shopper, *delta).await?;
                if left <= 0 {
                    let () = conn.hdel(&units, shopper).await?;
                }
                true
            }
            Repair::AdjustStock { shard, delta } => {
                let () = conn
                    .incr(ShardKeys::new(sale, *shard).stock, *delta)
                    .await?;
                true
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplyField::{Int, Text};

    #[test]
    fn claim_replies_mean_what_claim_lua_says() {
        let claimed = ClaimOutcome::Claimed {
            quantity: 2,
            shopper: "ada".into(),
        };
        let cases: Vec<(Vec<ReplyField>, Option<ClaimOutcome>)> = vec![
            (
                vec![Int(0), Int(2), Text("ada".into())],
                Some(claimed.clone()),
            ),
            (vec![Int(1), Int(2), Text("ada".into())], Some(claimed)),
            (vec![Int(2)], Some(ClaimOutcome::Released)),
            (vec![Int(4)], Some(ClaimOutcome::Missing)),
            (vec![Int(3)], None),
            (vec![Int(0), Int(2)], None),
            (vec![Int(0), Text("2".into()), Text("ada".into())], None),
            (vec![], None),
        ];
        for (fields, want) in cases {
            let got = read_claim_reply(fields.clone()).ok();
            assert_eq!(got, want, "{fields:?}");
        }
    }
}
