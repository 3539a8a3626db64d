//! Reconciliation, the pure part: from one observation of Redis, PostgreSQL
//! and Kafka, what differs and how to repair it toward the database.
//!
//! The database is the truth for orders and shoppers' units; Redis must hold
//! exactly the stock the database has not sold and that no order in flight
//! holds. Repairs that depend on nothing being in flight (abandoned
//! reservations, unit counts, the stock total) are planned only once the
//! sale's topic is drained; the job confirms them with a second observation
//! before applying them, so a purchase or a cancellation racing the
//! observation is never mistaken for drift.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::order::OrderStatus;
use super::purchase::{Reservation, ReservationState};
use super::shard::home_shard;
use super::stock::active_withdrawal;

/// A transfer record in a donor shard: `<to>:<amount>:<created_ms>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferOut {
    /// The receiving shard.
    pub to: u32,
    /// Units taken out.
    pub amount: i64,
    /// When, Unix ms (Redis clock).
    pub created_ms: i64,
}

impl TransferOut {
    /// Parses a record as `lua/transfer_out.lua` writes it.
    pub fn parse(record: &str) -> Option<Self> {
        let mut parts = record.split(':');
        let t = Self {
            to: parts.next()?.parse().ok()?,
            amount: parts.next()?.parse().ok()?,
            created_ms: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(t)
    }
}

/// A credit record in a receiving shard: `<amount>:<credited_ms>`; returns the
/// credit time.
pub fn parse_transfer_in(record: &str) -> Option<i64> {
    let (_, credited) = record.split_once(':')?;
    credited.parse().ok()
}

/// One shard, read atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardSnapshot {
    /// Units left.
    pub stock: i64,
    /// Units per shopper homed here.
    pub units: BTreeMap<String, i64>,
    /// Reservations by order id.
    pub reservations: BTreeMap<String, Reservation>,
    /// Transfers taken out of this shard.
    pub transfers_out: BTreeMap<String, TransferOut>,
    /// Transfers credited here, with the credit time.
    pub transfers_in: BTreeMap<String, i64>,
    /// Shrinks' withdrawal records (`lua/withdraw.lua`), by shrink id.
    pub withdrawals: BTreeMap<String, String>,
}

/// A persisted order, as reconciliation needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbOrder {
    /// The buyer.
    pub shopper: String,
    /// Units.
    pub quantity: i64,
    /// Its status.
    pub status: OrderStatus,
    /// Its reservation's shard.
    pub shard: u32,
    /// When the API accepted it, Unix ms.
    pub accepted_ms: i64,
    /// The shopper's Idempotency-Key of the purchase, if any.
    pub idempotency_key: Option<String>,
    /// The purchase token it used, if any.
    pub purchase_token: Option<crate::domain::purchase_token::UsedToken>,
}

/// The database side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbSnapshot {
    /// Units for sale.
    pub stock: i64,
    /// The generation of that stock.
    pub generation: i64,
    /// Units in live orders.
    pub sold: i64,
    /// Every order of the sale, by id.
    pub orders: BTreeMap<String, DbOrder>,
    /// Units per shopper in live orders.
    pub shopper_units: BTreeMap<String, i64>,
}

/// Everything reconciliation looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Each shard, in order.
    pub shards: Vec<ShardSnapshot>,
    /// The database, read before Redis.
    pub db: DbSnapshot,
    /// The stock generation Redis applied (shard 0), if any.
    pub redis_generation: Option<i64>,
    /// The sale's consumer group has no lag: no order is in flight.
    pub drained: bool,
    /// Redis time of the observation, Unix ms.
    pub now_ms: i64,
}

/// Ages that make a record safe to touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A reservation younger than this may still have its message in flight
    /// (the purchase budget's `settled_after`).
    pub reservation_min_age_ms: i64,
    /// An uncredited transfer older than this was abandoned by its API
    /// process (and missed by the APIs' janitors, which finish them sooner).
    pub transfer_finish_age_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            reservation_min_age_ms: 30_000,
            transfer_finish_age_ms: 10_000,
        }
    }
}

/// A change to Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Repair {
    /// Credit an abandoned transfer to its receiving shard. (Transfer records
    /// are kept until the sale's cleanup: a late credit always finds its own.)
    FinishTransfer {
        /// Transfer id.
        id: String,
        /// Donor shard.
        from: u32,
        /// Receiving shard.
        to: u32,
        /// Units.
        amount: i64,
    },
    /// Give a reservation's units back (it must still be in `expected`, and
    /// at least `min_age_ms` old when the script runs).
    Release {
        /// Order id.
        order_id: String,
        /// Shard.
        shard: u32,
        /// `R` or `C`.
        expected: char,
        /// Age guard re-checked by the script.
        min_age_ms: i64,
    },
    /// Recreate a lost reservation of a persisted order, as claimed.
    RestoreReservation {
        /// Order id.
        order_id: String,
        /// Shard.
        shard: u32,
        /// The record to write.
        record: String,
    },
    /// Correct a shopper's unit count.
    AdjustUnits {
        /// Shard.
        shard: u32,
        /// Shopper.
        shopper: String,
        /// Units to add (negative to remove).
        delta: i64,
    },
    /// Correct a shard's stock.
    AdjustStock {
        /// Shard.
        shard: u32,
        /// Units to add (negative to remove).
        delta: i64,
    },
}

/// Something reconciliation found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// PascalCase kind, e.g. `StockTotal`.
    pub kind: &'static str,
    /// What differs, for people.
    pub detail: String,
    /// Whether it is drift (false: housekeeping, such as pruning records).
    pub drift: bool,
    /// The repair.
    pub repair: Repair,
}

fn letter(state: ReservationState) -> char {
    state.letter().chars().next().unwrap_or('X')
}

/// What differs and how to repair it. Deterministic: same observation, same
/// findings in the same order. Four passes: transfers, reservations against
/// orders, shoppers' units, the stock total; the later ones run only once the
/// group is drained, and count what the earlier ones release.
pub fn plan(obs: &Observation, policy: &Policy) -> Vec<Finding> {
    let mut findings = Vec::new();
    let in_transit = transfers(obs, policy, &mut findings);
    let tally = reservations(obs, policy, &mut findings);
    missing_reservations(obs, &mut findings);
    if !obs.drained {
        return findings;
    }
    shopper_units(obs, &tally, &mut findings);
    stock_total(
        obs,
        in_transit + tally.released_units,
        tally.pending_units,
        &mut findings,
    );
    findings
}

/// Finishes abandoned transfers; the units still in transit.
fn transfers(obs: &Observation, policy: &Policy, findings: &mut Vec<Finding>) -> i64 {
    let credited: HashSet<&str> = obs
        .shards
        .iter()
        .flat_map(|snap| snap.transfers_in.keys().map(String::as_str))
        .collect();
    let mut in_transit = 0;
    for (from, snap) in obs.shards.iter().enumerate() {
        for (id, out) in &snap.transfers_out {
            if credited.contains(id.as_str()) {
                continue;
            }
            in_transit += out.amount;
            if obs.now_ms - out.created_ms > policy.transfer_finish_age_ms {
                findings.push(Finding {
                    kind: "TransferUnfinished",
                    detail: format!(
                        "{} units left shard {from} for shard {} and never arrived",
                        out.amount, out.to
                    ),
                    drift: true,
                    repair: Repair::FinishTransfer {
                        id: id.clone(),
                        from: from as u32,
                        to: out.to,
                        amount: out.amount,
                    },
                });
            }
        }
    }
    in_transit
}

/// What the reservation pass counted, for the passes after it.
#[derive(Default)]
struct Tally<'a> {
    /// Units of reservations whose message may still be in flight.
    pending_units: i64,
    /// Units this plan releases.
    released_units: i64,
    pending_by_shopper: HashMap<&'a str, i64>,
    released_by_shopper: HashMap<&'a str, i64>,
}

/// Releases reservations of ended orders, and (drained) of orders that never
/// reached the database.
fn reservations<'a>(
    obs: &'a Observation,
    policy: &Policy,
    findings: &mut Vec<Finding>,
) -> Tally<'a> {
    let mut tally = Tally::default();
    for (shard, snap) in obs.shards.iter().enumerate() {
        for (id, r) in &snap.reservations {
            if r.state == ReservationState::Released {
                continue;
            }
            let release = |kind, detail: String, min_age_ms| Finding {
                kind,
                detail,
                drift: true,
                repair: Repair::Release {
                    order_id: id.clone(),
                    shard: shard as u32,
                    expected: letter(r.state),
                    min_age_ms,
                },
            };
            let finding = match obs.db.orders.get(id) {
                Some(order) if order.status.holds_stock() => None,
                Some(order) => Some(release(
                    "ReservationOfEndedOrder",
                    format!(
                        "order {id} is {} but still holds {} units in Redis",
                        order.status.as_str(),
                        r.quantity
                    ),
                    0,
                )),
                None if obs.drained
                    && obs.now_ms - r.created_ms > policy.reservation_min_age_ms =>
                {
                    Some(release(
                        match r.state {
                            ReservationState::Reserved => "ReservationAbandoned",
                            ReservationState::Acknowledged => "AcknowledgedNeverPersisted",
                            _ => "ClaimedNeverPersisted",
                        },
                        format!(
                            "order {id} holds {} units but has no order and no message in flight",
                            r.quantity
                        ),
                        policy.reservation_min_age_ms,
                    ))
                }
                None => {
                    tally.pending_units += r.quantity;
                    *tally.pending_by_shopper.entry(&r.shopper).or_default() += r.quantity;
                    None
                }
            };
            if let Some(f) = finding {
                tally.released_units += r.quantity;
                *tally.released_by_shopper.entry(&r.shopper).or_default() += r.quantity;
                findings.push(f);
            }
        }
    }
    tally
}

/// Restores the reservation of a persisted order that Redis lost.
fn missing_reservations(obs: &Observation, findings: &mut Vec<Finding>) {
    for (id, order) in &obs.db.orders {
        let present = obs
            .shards
            .get(order.shard as usize)
            .is_some_and(|s| s.reservations.contains_key(id));
        if order.status.holds_stock() && !present {
            findings.push(Finding {
                kind: "ReservationMissing",
                detail: format!(
                    "persisted order {id} has no reservation in shard {}",
                    order.shard
                ),
                drift: true,
                repair: Repair::RestoreReservation {
                    order_id: id.clone(),
                    shard: order.shard,
                    record: format!(
                        "C:{}:{}:{}",
                        order.quantity, order.accepted_ms, order.shopper
                    ),
                },
            });
        }
    }
}

/// Shoppers' units: the database's count plus what is pending, in the
/// shopper's home shard (after the releases of the reservation pass).
fn shopper_units(obs: &Observation, tally: &Tally<'_>, findings: &mut Vec<Finding>) {
    let shards = obs.shards.len() as u32;
    let count =
        |map: &HashMap<&str, i64>, shopper: &str| map.get(shopper).copied().unwrap_or_default();
    for (shard, snap) in obs.shards.iter().enumerate() {
        let shard = shard as u32;
        let homed_here = |s: &&str| home_shard(s, shards) == shard;
        let mut shoppers: BTreeSet<&str> = snap.units.keys().map(String::as_str).collect();
        shoppers.extend(
            obs.db
                .shopper_units
                .keys()
                .map(String::as_str)
                .filter(homed_here),
        );
        shoppers.extend(tally.pending_by_shopper.keys().copied().filter(homed_here));
        for shopper in shoppers {
            let redis = snap.units.get(shopper).copied().unwrap_or_default()
                - count(&tally.released_by_shopper, shopper);
            let expected = obs
                .db
                .shopper_units
                .get(shopper)
                .copied()
                .unwrap_or_default()
                + count(&tally.pending_by_shopper, shopper);
            if redis != expected {
                findings.push(Finding {
                    kind: "ShopperUnits",
                    detail: format!(
                        "shopper {shopper} holds {redis} units in Redis, {expected} by the database"
                    ),
                    drift: true,
                    repair: Repair::AdjustUnits {
                        shard,
                        shopper: shopper.to_string(),
                        delta: expected - redis,
                    },
                });
            }
        }
    }
}

/// The stock total: what Redis can still sell (its stocks plus `outside`:
/// units in transit or released by this plan) must be what the database has
/// not sold and no pending order holds — compared only when both sides hold
/// the same stock generation. Otherwise a stock change is half-way (the
/// operator finishes it: a restock raises the database first, a shrink takes
/// units out of Redis first), and repairing toward either side would apply
/// it twice.
fn stock_total(obs: &Observation, outside: i64, pending_units: i64, findings: &mut Vec<Finding>) {
    if obs.redis_generation != Some(obs.db.generation) {
        return;
    }
    let withdrawn: i64 = obs
        .shards
        .iter()
        .flat_map(|s| &s.withdrawals)
        .filter_map(|(id, record)| active_withdrawal(id, record, obs.db.generation))
        .sum();
    let stocks: Vec<i64> = obs.shards.iter().map(|s| s.stock).collect();
    let redis_available = stocks.iter().sum::<i64>() + outside + withdrawn;
    let expected_available = obs.db.stock - obs.db.sold - pending_units;
    let delta = expected_available - redis_available;
    if delta == 0 {
        return;
    }
    for (shard, part) in distribute(delta, &stocks) {
        findings.push(Finding {
            kind: "StockTotal",
            detail: format!(
                "Redis can sell {redis_available} units, the database says {expected_available}"
            ),
            drift: true,
            repair: Repair::AdjustStock { shard, delta: part },
        });
    }
}

/// Units held by reservations (R or C) whose order the database does not
/// have: accepted purchases still on their way, or abandoned ones.
pub fn in_flight_units(obs: &Observation) -> i64 {
    obs.shards
        .iter()
        .flat_map(|s| &s.reservations)
        .filter(|(id, r)| r.state != ReservationState::Released && !obs.db.orders.contains_key(*id))
        .map(|(_, r)| r.quantity)
        .sum()
}

/// Splits a stock correction over shards: units added go to the emptiest
/// shard; units removed come from the fullest shards first (a shard may go
/// negative only when Redis holds less than must be removed).
pub fn distribute(delta: i64, stocks: &[i64]) -> Vec<(u32, i64)> {
    if delta == 0 || stocks.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..stocks.len()).collect();
    if delta > 0 {
        order.sort_by_key(|&s| (stocks[s], s));
        return vec![(order[0] as u32, delta)];
    }
    order.sort_by_key(|&s| (std::cmp::Reverse(stocks[s]), s));
    let mut left = -delta;
    let mut parts = Vec::new();
    for &s in &order {
        let take = left.min(stocks[s].max(0));
        if take > 0 {
            parts.push((s as u32, -take));
            left -= take;
        }
    }
    if left > 0 {
        match parts.first_mut() {
            Some(first) => first.1 -= left,
            None => parts.push((order[0] as u32, -left)),
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;
    const OLD: i64 = NOW - 600_000;
    const YOUNG: i64 = NOW - 1_000;

    fn reservation(
        state: ReservationState,
        quantity: i64,
        created_ms: i64,
        shopper: &str,
    ) -> Reservation {
        Reservation {
            state,
            quantity,
            created_ms,
            shopper: shopper.into(),
        }
    }

    /// Two shards, stock 10: alice (home shard of "alice" among 2) holds a
    /// persisted order of 2; bob holds a pending reservation of 1.
    fn consistent() -> Observation {
        let alice_home = home_shard("alice", 2) as usize;
        let bob_home = home_shard("bob", 2) as usize;
        let mut shards = vec![ShardSnapshot::default(), ShardSnapshot::default()];
        shards[0].stock = 4;
        shards[1].stock = 3;
        shards[alice_home].units.insert("alice".into(), 2);
        shards[alice_home].reservations.insert(
            "o-alice".into(),
            reservation(ReservationState::Claimed, 2, OLD, "alice"),
        );
        *shards[bob_home].units.entry("bob".into()).or_default() += 1;
        shards[bob_home].reservations.insert(
            "o-bob".into(),
            reservation(ReservationState::Reserved, 1, YOUNG, "bob"),
        );
        let mut db = DbSnapshot {
            stock: 10,
            generation: 1,
            sold: 2,
            ..Default::default()
        };
        db.orders.insert(
            "o-alice".into(),
            DbOrder {
                shopper: "alice".into(),
                quantity: 2,
                status: OrderStatus::Unpaid,
                shard: alice_home as u32,
                accepted_ms: OLD,
                idempotency_key: None,
                purchase_token: None,
            },
        );
        db.shopper_units.insert("alice".into(), 2);
        Observation {
            shards,
            db,
            redis_generation: Some(1),
            drained: true,
            now_ms: NOW,
        }
    }

    fn kinds(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn a_consistent_sale_has_no_findings() {
        assert_eq!(plan(&consistent(), &Policy::default()), vec![]);
    }

    #[test]
    fn an_abandoned_reservation_is_released_once_drained_and_old() {
        let bob_home = home_shard("bob", 2) as usize;
        let mut obs = consistent();
        obs.shards[bob_home]
            .reservations
            .get_mut("o-bob")
            .unwrap()
            .created_ms = OLD;
        let findings = plan(&obs, &Policy::default());
        assert_eq!(
            kinds(&findings),
            vec!["ReservationAbandoned"],
            "{findings:?}"
        );
        assert_eq!(
            findings[0].repair,
            Repair::Release {
                order_id: "o-bob".into(),
                shard: bob_home as u32,
                expected: 'R',
                min_age_ms: Policy::default().reservation_min_age_ms
            }
        );
        // Not drained: a message may still be on its way.
        obs.drained = false;
        assert_eq!(plan(&obs, &Policy::default()), vec![]);
    }

    #[test]
    fn a_claimed_reservation_never_persisted_is_released() {
        let bob_home = home_shard("bob", 2) as usize;
        let mut obs = consistent();
        let r = obs.shards[bob_home].reservations.get_mut("o-bob").unwrap();
        r.state = ReservationState::Claimed;
        r.created_ms = OLD;
        assert_eq!(
            kinds(&plan(&obs, &Policy::default())),
            vec!["ClaimedNeverPersisted"]
        );
    }

    #[test]
    fn a_cancelled_order_still_holding_units_is_released() {
        let alice_home = home_shard("alice", 2);
        let mut obs = consistent();
        // The database cancelled it (sold and units back), Redis did not hear.
        obs.db.orders.get_mut("o-alice").unwrap().status = OrderStatus::Cancelled;
        obs.db.sold = 0;
        obs.db.shopper_units.insert("alice".into(), 0);
        let findings = plan(&obs, &Policy::default());
        assert_eq!(
            kinds(&findings),
            vec!["ReservationOfEndedOrder"],
            "{findings:?}"
        );
        assert_eq!(
            findings[0].repair,
            Repair::Release {
                order_id: "o-alice".into(),
                shard: alice_home,
                expected: 'C',
                min_age_ms: 0
            }
        );
    }

    #[test]
    fn a_deleted_reservation_of_a_persisted_order_is_restored() {
        let alice_home = home_shard("alice", 2) as usize;
        let mut obs = consistent();
        obs.shards[alice_home].reservations.remove("o-alice");
        let findings = plan(&obs, &Policy::default());
        assert_eq!(kinds(&findings), vec!["ReservationMissing"]);
        assert_eq!(
            findings[0].repair,
            Repair::RestoreReservation {
                order_id: "o-alice".into(),
                shard: alice_home as u32,
                record: format!("C:2:{OLD}:alice"),
            }
        );
    }

    #[test]
    fn extra_units_on_a_shopper_are_taken_away() {
        let alice_home = home_shard("alice", 2) as usize;
        let mut obs = consistent();
        *obs.shards[alice_home].units.get_mut("alice").unwrap() += 3;
        let findings = plan(&obs, &Policy::default());
        assert_eq!(kinds(&findings), vec!["ShopperUnits"]);
        assert_eq!(
            findings[0].repair,
            Repair::AdjustUnits {
                shard: alice_home as u32,
                shopper: "alice".into(),
                delta: -3
            }
        );
    }

    #[test]
    fn a_shard_off_by_seven_is_corrected() {
        let mut obs = consistent();
        obs.shards[1].stock += 7;
        let findings = plan(&obs, &Policy::default());
        assert_eq!(kinds(&findings), vec!["StockTotal"]);
        assert_eq!(
            findings[0].repair,
            Repair::AdjustStock {
                shard: 1,
                delta: -7
            }
        );
        obs.shards[1].stock -= 14;
        let findings = plan(&obs, &Policy::default());
        assert_eq!(
            findings[0].repair,
            Repair::AdjustStock { shard: 1, delta: 7 }
        );
    }

    #[test]
    fn transfers_in_flight_count_and_abandoned_ones_are_finished() {
        let mut obs = consistent();
        // 2 units left shard 0 for shard 1 and were not credited yet.
        obs.shards[0].stock -= 2;
        obs.shards[0].transfers_out.insert(
            "t1".into(),
            TransferOut {
                to: 1,
                amount: 2,
                created_ms: YOUNG,
            },
        );
        assert_eq!(
            plan(&obs, &Policy::default()),
            vec![],
            "young: in flight, no drift"
        );
        obs.shards[0]
            .transfers_out
            .get_mut("t1")
            .unwrap()
            .created_ms = OLD;
        let findings = plan(&obs, &Policy::default());
        assert_eq!(kinds(&findings), vec!["TransferUnfinished"]);
        assert_eq!(
            findings[0].repair,
            Repair::FinishTransfer {
                id: "t1".into(),
                from: 0,
                to: 1,
                amount: 2,
            }
        );
    }

    #[test]
    fn stock_is_compared_only_at_one_generation() {
        let mut obs = consistent();
        // A restock raised the database (generation 2) before Redis.
        obs.db.stock = 15;
        obs.db.generation = 2;
        assert_eq!(plan(&obs, &Policy::default()), vec![], "restock half-way");
        // A shrink to 8 took 2 units out of Redis before recording itself.
        let mut obs = consistent();
        obs.shards[0].stock -= 2;
        obs.shards[0].withdrawals.insert("2:8".into(), "A:2".into());
        assert_eq!(plan(&obs, &Policy::default()), vec![], "shrink half-way");
        // Recorded in Redis (generation 2), the database not lowered yet.
        obs.redis_generation = Some(2);
        assert_eq!(plan(&obs, &Policy::default()), vec![], "shrink recorded");
        // Both at generation 2: the withdrawal is the shrink, no longer pending.
        obs.db.stock = 8;
        obs.db.generation = 2;
        assert_eq!(plan(&obs, &Policy::default()), vec![], "shrink done");
    }

    #[test]
    fn transfer_records_parse() {
        assert_eq!(
            TransferOut::parse("3:5:1700"),
            Some(TransferOut {
                to: 3,
                amount: 5,
                created_ms: 1700
            })
        );
        assert_eq!(TransferOut::parse("3:5"), None);
        assert_eq!(TransferOut::parse("3:5:1700:9"), None);
        assert_eq!(parse_transfer_in("5:1800"), Some(1800));
        assert_eq!(parse_transfer_in("5"), None);
    }

    #[test]
    fn distribute_table() {
        type Case = (i64, &'static [i64], Vec<(u32, i64)>);
        let cases: [Case; 7] = [
            (0, &[1, 2], vec![]),
            (5, &[3, 1, 2], vec![(1, 5)]),
            (-2, &[3, 1, 2], vec![(0, -2)]),
            (-5, &[3, 1, 2], vec![(0, -3), (2, -2)]),
            (-7, &[3, 1, 2], vec![(0, -4), (2, -2), (1, -1)]),
            (-4, &[0, 0], vec![(0, -4)]),
            (3, &[], vec![]),
        ];
        for (delta, stocks, expected) in cases {
            let parts = distribute(delta, stocks);
            assert_eq!(parts, expected, "{delta} over {stocks:?}");
            if !stocks.is_empty() {
                assert_eq!(parts.iter().map(|p| p.1).sum::<i64>(), delta);
            }
        }
    }
}
