//! Every Redis operation on a sale's state, over the key layout in [`keys`]
//! and the scripts in [`scripts`]. Callers get domain types back; what a
//! script reply means is decided in [`crate::domain::purchase`].
//!
//! [`keys`]: super::keys
//! [`scripts`]: super::scripts

use std::collections::HashMap;

use futures::future::try_join_all;
use redis::{AsyncCommands, Value};

use super::RedisConn;
use super::keys::ShardKeys;
use super::scripts::SCRIPTS;
use crate::domain::purchase::{
    ReleaseOutcome, ReplyField, Reservation, ReservationState, ShardDecision, UnexpectedReply,
    read_purchase_reply, read_release_reply,
};
use crate::domain::reconcile::{Repair, ShardSnapshot, TransferOut, parse_transfer_in};
use crate::domain::sale::{LoadedSale, SaleConfig, SaleMeta, SaleRef, verify_load};
use crate::domain::shard::split_stock;

/// A Redis call failed, or answered what the scripts never answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis is unreachable, timed out, or refused the command.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A script replied outside its contract.
    #[error(transparent)]
    Unexpected(#[from] UnexpectedReply),
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
    /// A store over `conn`.
    pub fn new(conn: RedisConn) -> Self {
        Self { conn }
    }

    /// The connection, for health checks.
    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Runs `lua/purchase.lua` in `shard`.
    pub async fn purchase(
        &self,
        sale: &SaleRef,
        shard: u32,
        shopper: &str,
        quantity: i64,
        order_id: &str,
        idempotency_key: Option<&str>,
    ) -> Result<ShardDecision, StoreError> {
        let keys = ShardKeys::new(sale, shard);
        let reply: Value = SCRIPTS
            .purchase
            .key(&keys.meta)
            .key(&keys.stock)
            .key(&keys.units)
            .key(&keys.reservations)
            .key(&keys.idempotency)
            .arg(shopper)
            .arg(quantity)
            .arg(order_id)
            .arg(idempotency_key.unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(read_purchase_reply(&reply_fields(reply)?)?)
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
        let keys = ShardKeys::new(sale, shard);
        let letter = match expected {
            ReservationState::Reserved => "R",
            ReservationState::Claimed => "C",
            ReservationState::Released => return Ok(ReleaseOutcome::Found(expected)),
        };
        let reply: Vec<i64> = SCRIPTS
            .release
            .key(&keys.stock)
            .key(&keys.units)
            .key(&keys.reservations)
            .arg(order_id)
            .arg(letter)
            .arg(min_age_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
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
        let keys = ShardKeys::new(sale, shard);
        let mut invocation = SCRIPTS.claim.key(&keys.reservations);
        for id in order_ids {
            invocation.arg(id);
        }
        let reply: Value = invocation.invoke_async(&mut self.conn.clone()).await?;
        let Value::Array(replies) = reply else {
            return Err(UnexpectedReply(vec![]).into());
        };
        if replies.len() != order_ids.len() {
            return Err(UnexpectedReply(vec![ReplyField::Int(replies.len() as i64)]).into());
        }
        replies
            .into_iter()
            .map(|reply| Ok(read_claim_reply(reply_fields(reply)?)?))
            .collect()
    }

    /// First half of a transfer: takes up to `wanted` (or half the donor's
    /// stock, if more) out of `donor`. Returns (units taken, Redis time ms).
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

    /// Second half of a transfer: credits `amount` to `to`, once per id;
    /// refuses a transfer older than `max_age_ms` (0 = any age). Returns
    /// whether this call credited it.
    pub async fn transfer_in(
        &self,
        sale: &SaleRef,
        to: u32,
        transfer_id: &str,
        amount: i64,
        created_ms: i64,
        max_age_ms: i64,
    ) -> Result<bool, StoreError> {
        let keys = ShardKeys::new(sale, to);
        let reply: Vec<i64> = SCRIPTS
            .transfer_in
            .key(&keys.stock)
            .key(&keys.transfers_in)
            .arg(transfer_id)
            .arg(amount)
            .arg(created_ms)
            .arg(max_age_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [0] => Ok(true),
            [1 | 2] => Ok(false),
            _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
        }
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
    /// and limit changes take effect on the next purchase).
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
                let () = self
                    .conn
                    .clone()
                    .hset_multiple(ShardKeys::new(sale, shard).meta, fields)
                    .await?;
                Ok::<_, StoreError>(())
            }
        }))
        .await?;
        Ok(())
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

    /// Warms a sale: loads its unsold stock over the shards and its metadata
    /// (not yet open), reads everything back and verifies it against
    /// `config` and `sold`, and only then marks every shard warmed. No warm,
    /// no open. Never call it on a warmed sale: it overwrites the stock.
    pub async fn warm(
        &self,
        config: &SaleConfig,
        sold: i64,
        paused: bool,
    ) -> Result<(), WarmError> {
        let split: Vec<i64> = split_stock((config.stock - sold).max(0) as u64, config.shards)
            .into_iter()
            .map(|units| units as i64)
            .collect();
        self.set_stocks(&config.sale, &split).await?;
        let closed = config.meta(false, paused, false);
        self.write_meta(&config.sale, config.shards, &closed)
            .await?;
        let () = self
            .conn
            .clone()
            .hset_multiple(
                ShardKeys::new(&config.sale, 0).meta,
                &[
                    ("stock_total", config.stock),
                    ("generation", config.generation),
                ],
            )
            .await?;
        let loaded = self.loaded(&config.sale, config.shards).await?;
        verify_load(config, sold, &closed, &loaded).map_err(WarmError::Mismatch)?;
        self.write_meta(
            &config.sale,
            config.shards,
            &config.meta(true, paused, false),
        )
        .await?;
        Ok(())
    }

    /// What Redis holds of the sale's stock and metadata.
    pub async fn loaded(&self, sale: &SaleRef, shards: u32) -> Result<LoadedSale, StoreError> {
        let stocks = self.shard_stocks(sale, shards).await?;
        let metas = try_join_all((0..shards).map(|shard| self.meta(sale, shard))).await?;
        let (stock_total, generation): (Option<i64>, Option<i64>) = self
            .conn
            .clone()
            .hmget(ShardKeys::new(sale, 0).meta, &["stock_total", "generation"])
            .await?;
        Ok(LoadedSale {
            stocks,
            metas,
            stock_total,
            generation,
        })
    }

    /// Applies the sale's stock total of `generation` to Redis once
    /// (`lua/restock.lua`). Returns the units added (negative: removed), or
    /// `None` when that generation was applied already.
    pub async fn restock(
        &self,
        sale: &SaleRef,
        total: i64,
        generation: i64,
    ) -> Result<Option<i64>, StoreError> {
        let keys = ShardKeys::new(sale, 0);
        let reply: Vec<i64> = SCRIPTS
            .restock
            .key(&keys.stock)
            .key(&keys.meta)
            .arg(total)
            .arg(generation)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [0, delta] => Ok(Some(*delta)),
            [1] | [2] => Ok(None),
            _ => Err(UnexpectedReply(reply.into_iter().map(ReplyField::Int).collect()).into()),
        }
    }

    /// Deletes every key of every shard, metadata last: while any shard still
    /// has its metadata, the deletion is unfinished. Idempotent.
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
        Ok(())
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
    /// Redis's clock.
    pub async fn snapshot(
        &self,
        sale: &SaleRef,
        shard: u32,
    ) -> Result<(ShardSnapshot, i64), StoreError> {
        let keys = ShardKeys::new(sale, shard);
        type Raw = (
            Option<i64>,
            HashMap<String, i64>,
            HashMap<String, String>,
            HashMap<String, String>,
            HashMap<String, String>,
            (i64, i64),
        );
        let (stock, units, reservations, transfers_out, transfers_in, (secs, micros)): Raw =
            redis::pipe()
                .atomic()
                .get(&keys.stock)
                .hgetall(&keys.units)
                .hgetall(&keys.reservations)
                .hgetall(&keys.transfers_out)
                .hgetall(&keys.transfers_in)
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
        };
        Ok((snapshot, secs * 1000 + micros / 1000))
    }

    /// Applies one reconciliation repair. Returns whether Redis changed.
    pub async fn repair(&self, sale: &SaleRef, repair: &Repair) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        Ok(match repair {
            Repair::FinishTransfer {
                id,
                to,
                amount,
                created_ms,
            } => {
                self.transfer_in(sale, *to, id, *amount, *created_ms, 0)
                    .await?
            }
            Repair::PruneTransfer { id, from, to } => {
                // Donor first: an orphan credit is harmless, an orphan debit would be finished again.
                if let Some(from) = from {
                    let () = conn
                        .hdel(ShardKeys::new(sale, *from).transfers_out, id)
                        .await?;
                }
                if let Some(to) = to {
                    let () = conn
                        .hdel(ShardKeys::new(sale, *to).transfers_in, id)
                        .await?;
                }
                true
            }
            Repair::Release {
                order_id,
                shard,
                expected,
                min_age_ms,
            } => {
                let expected = if *expected == 'C' {
                    ReservationState::Claimed
                } else {
                    ReservationState::Reserved
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
