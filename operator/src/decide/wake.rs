//! Between reconciles of a sale whose orders may flow: whether what was read
//! of it (its Redis state, its consumer group's offsets) calls for one.

use std::time::{Duration, Instant};

use flashsale_workload::bus::lag::GroupLag;
use flashsale_workload::domain::sale::{LoadedSale, SaleRef};

/// After the last change, reconciles keep the poll's pace this long: what
/// follows an order (its score, its payment, a refund) shows in the status
/// without waiting for the heartbeat.
pub const TRAILING: Duration = Duration::from_secs(30);

/// What one look at a sale found; `None` where it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Its shards' stock and metadata.
    pub redis: Option<LoadedSale>,
    /// Its consumer group's offsets on the order topic (`None` too while
    /// no order can flow: no lag is read).
    pub offsets: Option<GroupLag>,
}

impl Reading {
    /// Whether every part that is read was read.
    fn complete(&self, reads_lag: bool) -> bool {
        self.redis.is_some() && (!reads_lag || self.offsets.is_some())
    }
}

/// A sale under watch, as its last reconcile left it.
#[derive(Debug, Clone)]
pub struct Watched {
    /// The sale.
    pub sale: SaleRef,
    /// Its shards.
    pub shards: u32,
    /// Whether its lag is read (Redis holds it, so orders may flow).
    pub reads_lag: bool,
    /// How often it is read (its `spec.consumers.pollInterval`).
    pub every: Duration,
    /// What the latest reconcile or read found.
    pub baseline: Reading,
    /// When the baseline last changed, since the watch began.
    pub changed_at: Option<Instant>,
    /// When to read it next.
    pub next_read: Instant,
}

impl Watched {
    /// A sale a reconcile just read as `reading` at `now` (no change seen yet).
    pub fn new(
        sale: SaleRef,
        shards: u32,
        reads_lag: bool,
        every: Duration,
        reading: Reading,
        now: Instant,
    ) -> Self {
        Self {
            sale,
            shards,
            reads_lag,
            every,
            baseline: reading,
            changed_at: None,
            next_read: now + every,
        }
    }

    /// A reconcile read the sale again at `now`: what it found is the baseline.
    pub fn settle(&mut self, fresh: Watched, now: Instant) {
        let changed_at = if fresh.baseline == self.baseline {
            self.changed_at
        } else {
            Some(now)
        };
        *self = Self {
            changed_at,
            ..fresh
        };
    }

    /// Whether a read is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_read
    }

    /// Takes `reading`, made at `now`; whether it calls for a reconcile:
    /// anything changed, or a change is recent and the reading is whole. An
    /// outage wakes the sale once, when it starts (its reconciles then back
    /// off on their own), and once when it ends.
    pub fn wakes(&mut self, reading: Reading, now: Instant) -> bool {
        self.next_read = now + self.every;
        if reading != self.baseline {
            self.baseline = reading;
            self.changed_at = Some(now);
            return true;
        }
        reading.complete(self.reads_lag)
            && self
                .changed_at
                .is_some_and(|at| now.duration_since(at) < TRAILING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashsale_workload::bus::lag::PartitionOffsets;

    fn redis(stock: i64) -> Option<LoadedSale> {
        Some(LoadedSale {
            stocks: vec![stock],
            metas: vec![None],
            incarnations: vec![None],
            fenced: vec![false],
            stock_total: Some(100),
            generation: Some(1),
        })
    }

    fn offsets(latest: i64, committed: i64) -> Option<GroupLag> {
        Some(GroupLag {
            partitions: vec![PartitionOffsets {
                partition: 0,
                earliest: 0,
                latest,
                committed: Some(committed),
            }],
        })
    }

    /// A one-shard sale polled every 2 s, as a reconcile read it at `at`.
    fn watching(reading: Reading, at: Instant) -> Watched {
        let sale = SaleRef::new("shop", "sale").unwrap();
        Watched::new(sale, 1, true, Duration::from_secs(2), reading, at)
    }

    fn reading(stock: i64, latest: i64, committed: i64) -> Reading {
        Reading {
            redis: redis(stock),
            offsets: offsets(latest, committed),
        }
    }

    #[test]
    fn a_sale_wakes_on_change_and_for_a_while_after() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let quiet = reading(90, 10, 10);
        let cases: [(&str, Reading, u64, bool); 8] = [
            (
                "nothing changed since the watch began",
                quiet.clone(),
                2,
                false,
            ),
            ("nothing changed, long quiet", quiet.clone(), 120, false),
            (
                "a purchase: the offsets moved",
                reading(89, 11, 10),
                120,
                true,
            ),
            (
                "a cancel: only the stock moved",
                reading(91, 10, 10),
                120,
                true,
            ),
            (
                "the sale fenced as lost in Redis",
                Reading {
                    redis: Some(LoadedSale {
                        fenced: vec![true],
                        ..redis(90).unwrap()
                    }),
                    ..quiet.clone()
                },
                120,
                true,
            ),
            (
                "Kafka stopped answering",
                Reading {
                    offsets: None,
                    ..quiet.clone()
                },
                120,
                true,
            ),
            ("unchanged, a change 10 s ago", quiet.clone(), 10, true),
            (
                "unchanged, the last change 30 s ago",
                quiet.clone(),
                30,
                false,
            ),
        ];
        for (what, fresh, after, wakes) in cases {
            let mut watched = watching(quiet.clone(), t0);
            if what.starts_with("unchanged") {
                // The change the trailing reads follow, at 0.
                watched.wakes(reading(91, 10, 10), t0);
                watched.wakes(quiet.clone(), t0);
            }
            assert_eq!(watched.wakes(fresh, at(after)), wakes, "{what}");
            assert_eq!(
                watched.next_read,
                at(after + 2),
                "{what}: read again a poll later"
            );
        }
    }

    #[test]
    fn an_outage_wakes_once_then_leaves_the_reconciles_to_their_backoff() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let up = reading(90, 10, 10);
        let down = Reading {
            redis: None,
            ..up.clone()
        };
        let mut watched = watching(up.clone(), t0);
        let woken: Vec<bool> = [(down.clone(), 60), (down.clone(), 62), (down, 64), (up, 66)]
            .into_iter()
            .map(|(r, s)| watched.wakes(r, at(s)))
            .collect();
        assert_eq!(woken, [true, false, false, true]);
    }

    #[test]
    fn a_reconcile_resets_the_baseline_and_keeps_when_it_last_changed() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let settled = |r, s| watching(r, at(s));
        let mut watched = settled(reading(90, 10, 10), 0);
        watched.settle(settled(reading(90, 10, 10), 50), at(50));
        assert_eq!(
            (watched.changed_at, watched.next_read),
            (None, at(52)),
            "same reading"
        );
        watched.settle(settled(reading(80, 20, 10), 60), at(60));
        assert_eq!(
            (watched.changed_at, watched.next_read),
            (Some(at(60)), at(62)),
            "a new one"
        );
        watched.settle(settled(reading(80, 20, 10), 70), at(70));
        assert_eq!(watched.changed_at, Some(at(60)), "the change is kept");
        assert!(!watched.due(at(71)) && watched.due(at(72)));
    }
}
