//! The one home of FlashSale's Redis key layout.
//!
//! Every key of a stock shard carries the hash tag `{<namespace>/<name>:<shard>}`,
//! so a purchase, a release, a claim and each half of a transfer touch a single
//! Redis Cluster slot and run as one atomic script on one node. Different
//! shards of one sale spread over the cluster's nodes: no hot key.
//! No sale key has a TTL; the cleanup job deletes them after the sale. The
//! exceptions, used purchase tokens and answered challenges, expire with
//! their token or challenge. A sale's admission queue has a slot of its own.

use crate::domain::sale::SaleRef;

/// The keys of one stock shard of one sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKeys {
    /// Sale metadata copied into every shard: warmed, paused, busy, window,
    /// limit; shard 0's also holds the stock total and generation applied.
    pub meta: String,
    /// Units of stock left in this shard.
    pub stock: String,
    /// Units held per shopper whose home is this shard.
    pub units: String,
    /// Reservations by order id.
    pub reservations: String,
    /// Reservations still R (reserved, not claimed), scored by creation time.
    pub pending: String,
    /// Order id by (shopper, idempotency key).
    pub idempotency: String,
    /// Transfers taken out of this shard, by transfer id.
    pub transfers_out: String,
    /// Transfers credited to this shard, by transfer id.
    pub transfers_in: String,
    /// Transfers taken out of this shard and not yet credited, scored by creation time.
    pub in_transit: String,
    /// Units a shrink took out of this shard, by shrink id.
    pub withdrawals: String,
    /// Purchase tokens issued per shopper whose home is this shard (read
    /// by the risk scorer only).
    pub tokens_issued: String,
}

impl ShardKeys {
    /// The keys of `shard` of `sale`.
    pub fn new(sale: &SaleRef, shard: u32) -> Self {
        let base = format!("fs:{{{}/{}:{shard}}}", sale.namespace, sale.name);
        Self {
            meta: format!("{base}:meta"),
            stock: format!("{base}:stock"),
            units: format!("{base}:units"),
            reservations: format!("{base}:res"),
            pending: format!("{base}:pend"),
            idempotency: format!("{base}:idem"),
            transfers_out: format!("{base}:xout"),
            transfers_in: format!("{base}:xin"),
            in_transit: format!("{base}:xpend"),
            withdrawals: format!("{base}:wd"),
            tokens_issued: format!("{base}:tokens"),
        }
    }

    /// The key remembering that the purchase token `nonce` was used, on the
    /// shard of the shopper it was issued to (it expires with the token).
    pub fn used_token(&self, nonce: &uuid::Uuid) -> String {
        let base = self
            .meta
            .strip_suffix(":meta")
            .expect("the meta key ends so");
        format!("{base}:tok:{}", nonce.simple())
    }

    /// All keys of the shard, for cleanup.
    pub fn all(&self) -> [&str; 11] {
        [
            &self.meta,
            &self.stock,
            &self.units,
            &self.reservations,
            &self.pending,
            &self.idempotency,
            &self.transfers_out,
            &self.transfers_in,
            &self.in_transit,
            &self.withdrawals,
            &self.tokens_issued,
        ]
    }
}

/// The keys of a sale's admission queue: the line is one sorted set, in
/// one slot of its own (`{<namespace>/<name>:queue}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// Shoppers by score.
    pub line: String,
    /// Challenge answers refused (a counter, for the status).
    pub failures: String,
    base: String,
}

impl QueueKeys {
    /// The queue keys of `sale`.
    pub fn new(sale: &SaleRef) -> Self {
        let base = format!("fs:{{{}/{}:queue}}", sale.namespace, sale.name);
        Self {
            line: format!("{base}:line"),
            failures: format!("{base}:failures"),
            base,
        }
    }

    /// The key remembering that the challenge `nonce` was answered (it
    /// expires with the challenge).
    pub fn spent_challenge(&self, nonce: &uuid::Uuid) -> String {
        format!("{}:pow:{}", self.base, nonce.simple())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster hashes only what is between the first `{` and the next `}`.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        &key[open + 1..close]
    }

    #[test]
    fn every_key_of_a_shard_shares_one_hash_tag() {
        let sale = SaleRef::new("shop", "drop").unwrap();
        let keys = ShardKeys::new(&sale, 3);
        for key in keys.all() {
            assert_eq!(hash_tag(key), "shop/drop:3", "{key}");
        }
        assert_eq!(keys.stock, "fs:{shop/drop:3}:stock");
        let token = keys.used_token(&uuid::Uuid::from_u128(1));
        assert_eq!(hash_tag(&token), "shop/drop:3", "{token}");
    }

    #[test]
    fn shards_and_sales_do_not_share_keys() {
        let a = SaleRef::new("shop", "drop").unwrap();
        let b = SaleRef::new("shop", "drop-2").unwrap();
        let c = SaleRef::new("shop2", "drop").unwrap();
        let all: Vec<String> = [
            ShardKeys::new(&a, 0),
            ShardKeys::new(&a, 1),
            ShardKeys::new(&b, 0),
            ShardKeys::new(&c, 0),
        ]
        .iter()
        .flat_map(|k| k.all().map(str::to_string))
        .collect();
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
    }
}
