//! A sale's admission queue in Redis (`spec.admission`): one sorted set of
//! shoppers by score, joined and read by one script (`lua/queue.lua`), and
//! the challenges already answered, each remembered until it expires.

use std::time::Duration;

use redis::{AsyncCommands, Value};
use uuid::Uuid;

use super::keys::QueueKeys;
use super::scripts::SCRIPTS;
use super::store::{SaleStore, StoreError};
use crate::domain::purchase::UnexpectedReply;
use crate::domain::sale::SaleRef;

/// A shopper's place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InLine {
    /// The score the shopper holds (the first one they joined with).
    pub score: u64,
    /// 0 = first.
    pub rank: u64,
    /// Shoppers in the queue.
    pub length: u64,
}

fn read_place(reply: &Value) -> Option<InLine> {
    let Value::Array(items) = reply else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    // A score comes back as Redis writes a double: "1.8e+15" or digits.
    let score = match items.first()? {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<f64>().ok()?,
        _ => return None,
    };
    Some(InLine {
        score: score as u64,
        rank: int(items.get(1)?)?,
        length: int(items.get(2)?)?,
    })
}

impl SaleStore {
    /// The place of `shopper` in `sale`'s queue, joining with `score` if
    /// not in line yet (a new shopper, or a ticket's holder after a loss).
    pub async fn take_place(
        &self,
        sale: &SaleRef,
        shopper: &str,
        score: u64,
    ) -> Result<InLine, StoreError> {
        let keys = QueueKeys::new(sale);
        let reply: Value = SCRIPTS
            .queue
            .key(&keys.line)
            .arg(shopper)
            .arg(score)
            .invoke_async(&mut self.conn())
            .await?;
        read_place(&reply).ok_or_else(|| StoreError::Unexpected(UnexpectedReply(vec![])))
    }

    /// Shoppers in `sale`'s queue, and the challenge answers it refused.
    pub async fn queue_facts(&self, sale: &SaleRef) -> Result<(u64, u64), StoreError> {
        let keys = QueueKeys::new(sale);
        let (length, failures): (u64, Option<u64>) = redis::pipe()
            .zcard(&keys.line)
            .get(&keys.failures)
            .query_async(&mut self.conn())
            .await?;
        Ok((length, failures.unwrap_or(0)))
    }

    /// Counts a challenge answer `sale`'s queue refused.
    pub async fn count_challenge_failure(&self, sale: &SaleRef) -> Result<(), StoreError> {
        let _: u64 = self.conn().incr(QueueKeys::new(sale).failures, 1).await?;
        Ok(())
    }

    /// Records the answer to the challenge `nonce`, good for `ttl`: true the
    /// first time, false for any later answer (single use).
    pub async fn spend_challenge(
        &self,
        sale: &SaleRef,
        nonce: &Uuid,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let set: Option<String> = redis::cmd("SET")
            .arg(QueueKeys::new(sale).spent_challenge(nonce))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async(&mut self.conn())
            .await?;
        Ok(set.is_some())
    }

    /// Deletes `sale`'s queue and its counter (cleanup; spent challenges
    /// expire by themselves).
    pub async fn delete_queue(&self, sale: &SaleRef) -> Result<(), StoreError> {
        let keys = QueueKeys::new(sale);
        let () = self.conn().del(&[&keys.line, &keys.failures]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_read_from_the_script_s_reply() {
        let reply = |score: &str, rank, length| {
            Value::Array(vec![
                Value::BulkString(score.as_bytes().to_vec()),
                Value::Int(rank),
                Value::Int(length),
            ])
        };
        let place = |score, rank, length| {
            Some(InLine {
                score,
                rank,
                length,
            })
        };
        assert_eq!(read_place(&reply("42", 0, 1)), place(42, 0, 1));
        assert_eq!(
            read_place(&reply("2.8e+15", 7, 9)),
            place(2_800_000_000_000_000, 7, 9)
        );
        assert_eq!(
            read_place(&reply("2800000000000001", 7, 9)),
            place(2_800_000_000_000_001, 7, 9)
        );
        assert_eq!(read_place(&reply("x", 0, 1)), None);
        assert_eq!(read_place(&reply("1", -1, 1)), None);
        assert_eq!(read_place(&Value::Nil), None);
    }
}
