//! The stock ledger's pure decisions: the ids of shrinks and which of their
//! withdrawals still hold units, and when a sale is certainly sold out. Where
//! each unit can be is written down in `docs/decisions.md` ("The accounting
//! model").

/// The id of the shrink to `total` as stock generation `generation`: one per
/// target, so a shrink replaced by another stock change before it completed
/// is told apart and undone.
pub fn shrink_id(generation: i64, total: i64) -> String {
    format!("{generation}:{total}")
}

/// The (generation, target stock) of a shrink id.
pub fn parse_shrink_id(id: &str) -> Option<(i64, i64)> {
    let (generation, total) = id.split_once(':')?;
    Some((generation.parse().ok()?, total.parse().ok()?))
}

/// The units a withdrawal record (`lua/withdraw.lua`) holds out of the shards
/// for a shrink not recorded yet, that is whose generation is above
/// `applied`, the generation Redis applied. `None` for a recorded or undone
/// shrink, or a record the scripts never write.
pub fn active_withdrawal(id: &str, record: &str, applied: i64) -> Option<i64> {
    let (generation, _) = id.split_once(':')?;
    let units = record.strip_prefix("A:")?.parse().ok()?;
    (generation.parse::<i64>().ok()? > applied).then_some(units)
}

/// One shard as `lua/probe.lua` reads it, atomically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardProbe {
    /// Units left in the shard.
    pub stock: i64,
    /// Transfers taken out of it and not yet credited anywhere.
    pub in_transit: i64,
    /// How many times units arrived in it (credits, releases, restocks).
    pub arrivals: i64,
}

/// What two rounds of probes over every shard say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoldOutVerdict {
    /// Nothing anywhere, and nothing moved between the rounds: the sale was
    /// sold out at an instant between them.
    SoldOut,
    /// Units are left, in a shard or in transit: worth another attempt.
    UnitsLeft,
    /// Every shard looked empty but units arrived somewhere between the
    /// rounds: look again.
    Moving,
}

/// Decides "sold out" from two rounds of probes taken one after the other
/// (the second may be `None` when the first already found units). Units are
/// always in a shard's stock or in its in-transit set; a unit can only be
/// missed by one round by arriving in a shard already read, which moves that
/// shard's arrivals counter, so two identical empty rounds cannot both miss it.
pub fn sold_out(first: &[ShardProbe], second: Option<&[ShardProbe]>) -> SoldOutVerdict {
    let empty = |round: &[ShardProbe]| round.iter().all(|p| p.stock <= 0 && p.in_transit == 0);
    if !empty(first) {
        return SoldOutVerdict::UnitsLeft;
    }
    match second {
        Some(second) if !empty(second) => SoldOutVerdict::UnitsLeft,
        Some(second) if second == first => SoldOutVerdict::SoldOut,
        _ => SoldOutVerdict::Moving,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(stock: i64, in_transit: i64, arrivals: i64) -> ShardProbe {
        ShardProbe {
            stock,
            in_transit,
            arrivals,
        }
    }

    #[test]
    fn withdrawal_records_table() {
        let cases = [
            ("3:30", "A:12", 2, Some(12)),
            ("3:30", "A:12", 3, None),
            ("3:30", "U:12", 2, None),
            ("3", "A:12", 2, None),
            ("x:30", "A:12", 2, None),
            ("3:30", "A:", 2, None),
        ];
        for (id, record, applied, expected) in cases {
            assert_eq!(
                active_withdrawal(id, record, applied),
                expected,
                "{id} {record} {applied}"
            );
        }
        assert_eq!(shrink_id(4, 30), "4:30");
        assert_eq!(parse_shrink_id("4:30"), Some((4, 30)));
        assert_eq!(parse_shrink_id("4"), None);
    }

    #[test]
    fn sold_out_needs_two_identical_empty_rounds() {
        let empty = [probe(0, 0, 3), probe(0, 0, 1)];
        type Case = (
            &'static str,
            Vec<ShardProbe>,
            Option<Vec<ShardProbe>>,
            SoldOutVerdict,
        );
        let cases: Vec<Case> = vec![
            (
                "two identical empty rounds",
                empty.to_vec(),
                Some(empty.to_vec()),
                SoldOutVerdict::SoldOut,
            ),
            (
                "a unit in a shard",
                vec![probe(0, 0, 3), probe(1, 0, 1)],
                None,
                SoldOutVerdict::UnitsLeft,
            ),
            (
                "a unit in transit",
                vec![probe(0, 1, 3), probe(0, 0, 1)],
                None,
                SoldOutVerdict::UnitsLeft,
            ),
            (
                "a unit arrived in a shard read before",
                empty.to_vec(),
                Some(vec![probe(0, 0, 4), probe(0, 0, 1)]),
                SoldOutVerdict::Moving,
            ),
            (
                "the second round finds it",
                empty.to_vec(),
                Some(vec![probe(0, 0, 3), probe(2, 0, 2)]),
                SoldOutVerdict::UnitsLeft,
            ),
            (
                "a shard gone negative by a shrink is empty",
                vec![probe(-3, 0, 0)],
                Some(vec![probe(-3, 0, 0)]),
                SoldOutVerdict::SoldOut,
            ),
            (
                "one empty round is not enough",
                empty.to_vec(),
                None,
                SoldOutVerdict::Moving,
            ),
        ];
        for (name, first, second, expected) in cases {
            assert_eq!(sold_out(&first, second.as_deref()), expected, "{name}");
        }
    }
}
