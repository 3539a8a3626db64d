//! The invariants I1–I6, evaluated purely from what a run was told and what
//! Redis and PostgreSQL hold afterwards (with the topic drained).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::order::OrderStatus;
use super::reconcile::DbOrder;

/// What a storm was told and what the stores hold after it.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Units for sale.
    pub stock: i64,
    /// Units one shopper may hold.
    pub limit: i64,
    /// Orders the shoppers were told were accepted: id → (shopper, units).
    pub accepted: BTreeMap<String, (String, i64)>,
    /// The fewest units a shopper asked for and was told SOLD_OUT (`None`:
    /// nobody was). A request for more units than are left is refused
    /// SOLD_OUT though some are: demand exceeded stock by that much only.
    pub sold_out_smallest: Option<i64>,
    /// Shoppers whose purchase's answer never arrived (a timeout, a lost
    /// connection, the storm over before a retry): it may or may not have
    /// become an order, and the shopper was told neither.
    pub unanswered: BTreeSet<String>,
    /// Orders the shoppers were told `OUTCOME_UNKNOWN` for: each may or may
    /// not be an order, and the shopper was told neither.
    pub in_doubt: BTreeSet<String>,
    /// Every order in the database, by id.
    pub orders: BTreeMap<String, DbOrder>,
    /// The sale's `sold` column.
    pub sold: i64,
    /// Units per shopper in the database.
    pub shopper_units: BTreeMap<String, i64>,
    /// Reservations released in Redis (their stock went back).
    pub released: BTreeSet<String>,
    /// Orders the database refused for want of stock (FAILED): accepted
    /// with no unit behind them.
    pub refused_for_stock: BTreeSet<String>,
    /// Units left in Redis, if the sale's Redis state still exists.
    pub redis_remaining: Option<i64>,
    /// Units per shopper in Redis, if the state still exists.
    pub redis_units: Option<BTreeMap<String, i64>>,
}

/// One invariant's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// I1 .. I6.
    pub id: &'static str,
    /// What it promises.
    pub name: &'static str,
    /// Held, failed, or could not be checked (`None`).
    pub holds: Option<bool>,
    /// The numbers behind the verdict.
    pub detail: String,
}

/// One line for a report: `ok  I1 no oversell       stock 100, ...`
/// (`FAIL`, or `n/a ` when it could not be checked).
impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match self.holds {
            Some(true) => "ok  ",
            Some(false) => "FAIL",
            None => "n/a ",
        };
        write!(f, "{mark} {} {:<17} {}", self.id, self.name, self.detail)
    }
}

fn verdict(id: &'static str, name: &'static str, holds: Option<bool>, detail: String) -> Verdict {
    Verdict {
        id,
        name,
        holds,
        detail,
    }
}

/// The figures the invariants judge, for a report beside the verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Units the shoppers were told were accepted.
    pub accepted_units: i64,
    /// Of those, units given back later (cancelled, refunded, failed, released).
    pub returned_units: i64,
    /// Units in orders that hold stock.
    pub persisted_units: i64,
    /// Accepted units the database refused for want of stock.
    pub refused_units: i64,
    /// Units sold beyond the stock: persisted over it, plus `refused_units`.
    pub oversold_units: i64,
    /// Most units one shopper holds by the answers (net of returns).
    pub most_accepted_by_one: i64,
    /// Most units one shopper holds in the database.
    pub most_persisted_by_one: i64,
    /// Accepted orders not persisted as a live or settled order (I3).
    pub lost: Vec<String>,
    /// Orders in the database never accepted nor in doubt (I4).
    pub phantom: Vec<String>,
    /// Redis's remaining units, the database's unsold units, and how many
    /// shoppers' units differ; `None` once the Redis state is cleaned up (I6).
    pub convergence: Option<(i64, i64, usize)>,
}

/// The invariants' verdicts and the figures behind them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    /// The numbers.
    pub figures: Figures,
    /// I1–I6, in order.
    pub verdicts: Vec<Verdict>,
}

/// Evaluates I1–I6.
pub fn evaluate(e: &Evidence) -> Evaluation {
    let f = figures(e);
    let verdicts = vec![
        no_oversell(e, &f),
        no_over_limit(e, &f),
        no_lost_order(e, &f),
        no_phantom_order(e, &f),
        sell_through(e, &f),
        convergence(&f),
    ];
    Evaluation {
        figures: f,
        verdicts,
    }
}

/// Whether an accepted order's units went back (cancelled, refunded,
/// failed, or released in Redis).
fn returned(e: &Evidence, id: &String) -> bool {
    e.released.contains(id) || e.orders.get(id).is_some_and(|o| !o.status.holds_stock())
}

/// The figures of `e`.
pub fn figures(e: &Evidence) -> Figures {
    let persisted_units: i64 = e
        .orders
        .values()
        .filter(|o| o.status.holds_stock())
        .map(|o| o.quantity)
        .sum();
    let units = |keep: &dyn Fn(&String) -> bool| -> i64 {
        e.accepted
            .iter()
            .filter(|(id, _)| keep(id))
            .map(|(_, (_, q))| q)
            .sum()
    };
    // A FAILED order gives its units back, but one the database refused for
    // want of stock was sold without a unit: an oversell the shopper was
    // told was a purchase, whatever the arbiter kept out of the table.
    let refused_units = units(&|id| e.refused_for_stock.contains(id));
    let mut net_by_shopper: BTreeMap<&str, i64> = BTreeMap::new();
    for (id, (shopper, q)) in &e.accepted {
        if !returned(e, id) {
            *net_by_shopper.entry(shopper).or_default() += q;
        }
    }
    let convergence = match (&e.redis_remaining, &e.redis_units) {
        (Some(remaining), Some(units)) => {
            let shoppers: BTreeSet<&String> = units.keys().chain(e.shopper_units.keys()).collect();
            let differing = shoppers
                .into_iter()
                .filter(|s| {
                    units.get(*s).copied().unwrap_or_default()
                        != e.shopper_units.get(*s).copied().unwrap_or_default()
                })
                .count();
            Some((*remaining, e.stock - persisted_units, differing))
        }
        _ => None,
    };
    Figures {
        accepted_units: units(&|_| true),
        returned_units: units(&|id| returned(e, id)),
        persisted_units,
        refused_units,
        oversold_units: (persisted_units - e.stock).max(0) + refused_units,
        most_accepted_by_one: net_by_shopper.values().copied().max().unwrap_or_default(),
        most_persisted_by_one: e.shopper_units.values().copied().max().unwrap_or_default(),
        lost: lost_orders(e).into_iter().cloned().collect(),
        phantom: e
            .orders
            .iter()
            .filter(|&(id, order)| {
                !e.accepted.contains_key(id)
                    && !e.in_doubt.contains(id)
                    && !e.unanswered.contains(&order.shopper)
            })
            .map(|(id, _)| id.clone())
            .collect(),
        convergence,
    }
}

fn no_oversell(e: &Evidence, f: &Figures) -> Verdict {
    let net_accepted = f.accepted_units - f.returned_units;
    verdict(
        "I1",
        "no oversell",
        Some(
            net_accepted <= e.stock
                && f.refused_units == 0
                && f.persisted_units <= e.stock
                && e.sold <= e.stock,
        ),
        format!(
            "stock {}, accepted {} (net {net_accepted}, {} refused by the database for want of stock), persisted {}, sold column {}",
            e.stock, f.accepted_units, f.refused_units, f.persisted_units, e.sold
        ),
    )
}

fn no_over_limit(e: &Evidence, f: &Figures) -> Verdict {
    verdict(
        "I2",
        "no over-limit",
        Some(f.most_accepted_by_one <= e.limit && f.most_persisted_by_one <= e.limit),
        format!(
            "limit {}, most held: {} accepted, {} in the database",
            e.limit, f.most_accepted_by_one, f.most_persisted_by_one
        ),
    )
}

fn no_lost_order(e: &Evidence, f: &Figures) -> Verdict {
    verdict(
        "I3",
        "no lost order",
        Some(f.lost.is_empty()),
        format!(
            "{} accepted, {} not persisted as an order (released, FAILED or missing){}",
            e.accepted.len(),
            f.lost.len(),
            sample(&f.lost)
        ),
    )
}

fn no_phantom_order(e: &Evidence, f: &Figures) -> Verdict {
    verdict(
        "I4",
        "no phantom order",
        Some(f.phantom.is_empty()),
        format!(
            "{} orders in the database, {} never accepted{}",
            e.orders.len(),
            f.phantom.len(),
            sample(&f.phantom)
        ),
    )
}

fn sell_through(e: &Evidence, f: &Figures) -> Verdict {
    let Some(asked) = e.sold_out_smallest else {
        return verdict(
            "I5",
            "sell-through",
            Some(true),
            "demand never exceeded stock".into(),
        );
    };
    // Fewer units left than the smallest request refused: none could sell.
    verdict(
        "I5",
        "sell-through",
        Some(e.stock - f.accepted_units < asked),
        format!(
            "SOLD_OUT was answered (to a request of {asked} at the least); {} of {} units were accepted",
            f.accepted_units, e.stock
        ),
    )
}

fn convergence(f: &Figures) -> Verdict {
    match f.convergence {
        Some((remaining, expected, differing)) => verdict(
            "I6",
            "convergence",
            Some(remaining == expected && differing == 0),
            format!(
                "Redis holds {remaining} units, the database leaves {expected}; {differing} shoppers' units differ"
            ),
        ),
        None => verdict(
            "I6",
            "convergence",
            None,
            "the sale's Redis state is already cleaned up".into(),
        ),
    }
}

/// The accepted orders their shoppers lost: every 202 must become an order
/// in the database that did not fail. One released in Redis without a row
/// (its message dropped or never written), one FAILED (refused by the
/// database, or dead-lettered) and one missing altogether are each a promise
/// broken.
fn lost_orders(e: &Evidence) -> Vec<&String> {
    e.accepted
        .keys()
        .filter(|id| {
            !e.orders
                .get(*id)
                .is_some_and(|o| o.status != OrderStatus::Failed)
        })
        .collect()
}

fn sample(ids: &[String]) -> String {
    match ids.first() {
        Some(id) => format!(" (e.g. {id})"),
        None => String::new(),
    }
}

/// Whether every invariant that could be checked held.
pub fn all_hold(verdicts: &[Verdict]) -> bool {
    verdicts.iter().all(|v| v.holds != Some(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::order::OrderStatus;

    fn order(shopper: &str, quantity: i64, status: OrderStatus) -> DbOrder {
        DbOrder {
            shopper: shopper.into(),
            quantity,
            status,
            shard: 0,
            accepted_ms: 0,
            idempotency_key: None,
            purchase_token: None,
        }
    }

    /// Stock 3, limit 2: alice bought 2, bob 1, carol was told SOLD_OUT.
    fn clean() -> Evidence {
        let mut e = Evidence {
            stock: 3,
            limit: 2,
            sold: 3,
            sold_out_smallest: Some(1),
            ..Default::default()
        };
        e.accepted.insert("a".into(), ("alice".into(), 2));
        e.accepted.insert("b".into(), ("bob".into(), 1));
        e.orders
            .insert("a".into(), order("alice", 2, OrderStatus::Paid));
        e.orders
            .insert("b".into(), order("bob", 1, OrderStatus::Unpaid));
        e.shopper_units = BTreeMap::from([("alice".into(), 2), ("bob".into(), 1)]);
        e.redis_remaining = Some(0);
        e.redis_units = Some(e.shopper_units.clone());
        e
    }

    fn failing(e: &Evidence) -> Vec<&'static str> {
        evaluate(e)
            .verdicts
            .into_iter()
            .filter(|v| v.holds == Some(false))
            .map(|v| v.id)
            .collect()
    }

    #[test]
    fn a_clean_run_holds_everything() {
        assert_eq!(failing(&clean()), Vec::<&str>::new());
        assert!(all_hold(&evaluate(&clean()).verdicts));
    }

    #[test]
    fn each_violation_is_caught_by_its_invariant() {
        let mut oversold = clean();
        oversold.accepted.insert("c".into(), ("carol".into(), 1));
        oversold
            .orders
            .insert("c".into(), order("carol", 1, OrderStatus::Unpaid));
        oversold.shopper_units.insert("carol".into(), 1);
        oversold
            .redis_units
            .as_mut()
            .unwrap()
            .insert("carol".into(), 1);
        assert_eq!(failing(&oversold), vec!["I1", "I6"]);

        // Told accepted, then refused by the database's arbiter (FAILED,
        // its units "given back"): the storm of a purchase script that took
        // no stock for one order in 16 held every invariant before.
        let mut refused = clean();
        refused.accepted.insert("c".into(), ("carol".into(), 1));
        refused
            .orders
            .insert("c".into(), order("carol", 1, OrderStatus::Failed));
        refused.refused_for_stock.insert("c".into());
        assert_eq!(failing(&refused), vec!["I1", "I3"]);

        let mut over_limit = clean();
        over_limit.accepted.insert("a2".into(), ("alice".into(), 1));
        over_limit
            .orders
            .insert("b".into(), order("bob", 1, OrderStatus::Cancelled));
        over_limit
            .orders
            .insert("a2".into(), order("alice", 1, OrderStatus::Unpaid));
        over_limit.shopper_units = BTreeMap::from([("alice".into(), 3)]);
        over_limit.redis_units = Some(over_limit.shopper_units.clone());
        assert_eq!(failing(&over_limit), vec!["I2"]);

        let mut lost = clean();
        lost.orders.remove("b");
        assert!(failing(&lost).contains(&"I3"));

        // Answered 202, then its reservation released (the janitor, or a
        // release racing the produce) and its message dropped: the units went
        // back, so nothing is oversold, but the shopper lost the order.
        let mut released = clean();
        released.orders.remove("b");
        released.shopper_units.remove("bob");
        released.redis_units = Some(released.shopper_units.clone());
        released.redis_remaining = Some(1);
        released.sold = 2;
        released.released.insert("b".into());
        assert_eq!(failing(&released), vec!["I3"]);
        assert_eq!(lost_orders(&released), vec!["b"]);

        // ... or FAILED, its units given back.
        let mut failed = clean();
        failed
            .orders
            .insert("b".into(), order("bob", 1, OrderStatus::Failed));
        failed.shopper_units.remove("bob");
        failed.redis_units = Some(failed.shopper_units.clone());
        failed.redis_remaining = Some(1);
        failed.sold = 2;
        assert_eq!(failing(&failed), vec!["I3"]);

        let mut phantom = clean();
        phantom
            .orders
            .insert("z".into(), order("zoe", 1, OrderStatus::Unpaid));
        assert!(failing(&phantom).contains(&"I4"));
        // Told its outcome was unknown: an order or not, no promise broken.
        phantom.in_doubt.insert("z".into());
        assert!(!failing(&phantom).contains(&"I4"));
        // Told nothing (its answer came after the shopper stopped waiting,
        // the storm over): no promise broken either.
        phantom.in_doubt.clear();
        phantom.unanswered.insert("zoe".into());
        assert!(!failing(&phantom).contains(&"I4"));
        phantom.unanswered = ["bob".to_string()].into();
        assert!(
            failing(&phantom).contains(&"I4"),
            "another shopper's silence excuses nothing"
        );

        let mut stranded = clean();
        stranded.accepted.remove("b");
        stranded.orders.remove("b");
        stranded.shopper_units.remove("bob");
        stranded.redis_units = Some(stranded.shopper_units.clone());
        stranded.redis_remaining = Some(1);
        assert_eq!(failing(&stranded), vec!["I5"]);
        // The unit left could not serve the only request refused (2 units).
        let mut too_few = stranded.clone();
        too_few.sold_out_smallest = Some(2);
        assert_eq!(failing(&too_few), Vec::<&str>::new());

        let mut drift = clean();
        drift.redis_remaining = Some(2);
        assert_eq!(failing(&drift), vec!["I6"]);
    }

    #[test]
    fn returned_units_free_the_stock_and_the_limit() {
        let mut e = clean();
        // bob cancelled; dave bought the unit again.
        e.orders
            .insert("b".into(), order("bob", 1, OrderStatus::Cancelled));
        e.shopper_units.insert("bob".into(), 0);
        e.accepted.insert("d".into(), ("dave".into(), 1));
        e.orders
            .insert("d".into(), order("dave", 1, OrderStatus::Unpaid));
        e.shopper_units.insert("dave".into(), 1);
        e.redis_units = Some(BTreeMap::from([("alice".into(), 2), ("dave".into(), 1)]));
        assert_eq!(failing(&e), Vec::<&str>::new());
    }

    #[test]
    fn cleaned_up_state_leaves_i6_unchecked() {
        let mut e = clean();
        e.redis_remaining = None;
        e.redis_units = None;
        let verdicts = evaluate(&e).verdicts;
        assert_eq!(verdicts[5].holds, None);
        assert!(all_hold(&verdicts));
    }

    #[test]
    fn the_figures_count_what_the_verdicts_judge() {
        assert_eq!(evaluate(&clean()).figures.oversold_units, 0);
        // Two units persisted beyond the stock, one refused by the database.
        let mut e = clean();
        e.accepted.insert("c".into(), ("carol".into(), 2));
        e.orders
            .insert("c".into(), order("carol", 2, OrderStatus::Unpaid));
        e.accepted.insert("d".into(), ("dave".into(), 1));
        e.orders
            .insert("d".into(), order("dave", 1, OrderStatus::Failed));
        e.refused_for_stock.insert("d".into());
        let f = evaluate(&e).figures;
        assert_eq!((f.accepted_units, f.persisted_units), (6, 5));
        assert_eq!((f.refused_units, f.oversold_units), (1, 3));
        assert_eq!(f.lost, vec!["d".to_string()], "a FAILED order is lost");
        assert!(f.phantom.is_empty());
    }

    #[test]
    fn a_verdict_reads_as_one_report_line() {
        let line = |holds| verdict("I1", "no oversell", holds, "stock 5".into()).to_string();
        assert_eq!(line(Some(true)), "ok   I1 no oversell       stock 5");
        assert_eq!(line(Some(false)), "FAIL I1 no oversell       stock 5");
        assert_eq!(line(None), "n/a  I1 no oversell       stock 5");
    }
}
