//! Which stock shard a shopper buys from, and where stock is borrowed from.
//!
//! A shopper's home shard is a stable hash of the shopper id: every purchase of
//! that shopper lands in the same Redis slot, so their unit counter lives in one
//! place and the per-shopper limit is exact across shards.

use std::hash::Hasher;

/// The home shard of `shopper` among `shards` (FNV-1a: stable across
/// processes, versions and machines, unlike std's randomly seeded hasher).
pub fn home_shard(shopper: &str, shards: u32) -> u32 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(shopper.as_bytes());
    (hasher.finish() % u64::from(shards.max(1))) as u32
}

/// The shards to borrow from when `home` runs dry, each once, starting at
/// `start` (a per-request random offset, so concurrent borrowers spread out).
pub fn donors(home: u32, shards: u32, start: u32) -> impl Iterator<Item = u32> {
    (0..shards)
        .map(move |i| (start.wrapping_add(i)) % shards)
        .filter(move |&s| s != home)
}

/// How `total` units are split over `shards` at warm-up: evenly, the first
/// `total % shards` shards holding one more.
pub fn split_stock(total: u64, shards: u32) -> Vec<u64> {
    let shards = u64::from(shards.max(1));
    (0..shards)
        .map(|i| total / shards + u64::from(i < total % shards))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_shard_is_stable_and_in_range() {
        // Pinned values: a change here would move every shopper's counter.
        assert_eq!(home_shard("alice", 8), home_shard("alice", 8));
        assert_eq!(home_shard("", 1), 0);
        for shards in [1, 2, 8, 1024] {
            for i in 0..1000 {
                assert!(home_shard(&format!("shopper-{i}"), shards) < shards);
            }
        }
        let pinned: Vec<u32> = ["alice", "bob", "carol", "dave"]
            .iter()
            .map(|s| home_shard(s, 8))
            .collect();
        assert_eq!(pinned, vec![7, 4, 2, 7]);
    }

    #[test]
    fn home_shards_spread_evenly() {
        let shards = 8;
        let mut counts = vec![0u32; shards as usize];
        for i in 0..80_000 {
            counts[home_shard(&format!("shopper-{i}"), shards) as usize] += 1;
        }
        for (shard, count) in counts.iter().enumerate() {
            assert!((9_000..11_000).contains(count), "shard {shard}: {count}");
        }
    }

    #[test]
    fn donors_visit_every_other_shard_once() {
        let cases = [(0, 1, 0), (0, 8, 0), (3, 8, 5), (7, 8, 7), (2, 3, 100)];
        for (home, shards, start) in cases {
            let mut visited: Vec<u32> = donors(home, shards, start).collect();
            assert_eq!(visited.len() as u32, shards - 1, "{home} {shards} {start}");
            assert!(!visited.contains(&home));
            if shards > 1 {
                assert_eq!(visited[0], {
                    let first = start % shards;
                    if first == home {
                        (first + 1) % shards
                    } else {
                        first
                    }
                });
            }
            visited.sort();
            visited.dedup();
            assert_eq!(visited.len() as u32, shards - 1);
        }
    }

    #[test]
    fn stock_split_sums_to_total_and_differs_by_at_most_one() {
        for (total, shards) in [(0, 1), (0, 8), (7, 8), (300, 8), (1000, 3), (5, 1024)] {
            let split = split_stock(total, shards);
            assert_eq!(split.len() as u32, shards);
            assert_eq!(split.iter().sum::<u64>(), total);
            let (min, max) = (split.iter().min().unwrap(), split.iter().max().unwrap());
            assert!(max - min <= 1, "{split:?}");
        }
        assert_eq!(split_stock(10, 4), vec![3, 3, 2, 2]);
    }
}
