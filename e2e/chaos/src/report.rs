//! The chaos report: per fault kind, runs and runs that held every
//! invariant, accepted orders, orders lost, units oversold, how long the
//! sale was unavailable and how long it took to converge after its end —
//! as a table, JSON and an SVG chart.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::run::RunResult;

/// One fault kind's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KindFigures {
    /// The fault.
    pub kind: String,
    /// Runs.
    pub runs: usize,
    /// Runs in which every invariant held.
    pub held: usize,
    /// Orders answered 202, in all runs.
    pub accepted_orders: usize,
    /// 202s neither persisted nor released (must be 0).
    pub orders_lost: usize,
    /// Units persisted beyond the stock (must be 0).
    pub oversold_units: i64,
    /// Seconds the sale answered only 503s, median over runs.
    pub unavailable_p50_secs: f64,
    /// ... and the worst run.
    pub unavailable_max_secs: f64,
    /// The fewest decisions shoppers got while the fault held, over runs.
    pub decided_during_fault_min: usize,
    /// Seconds from the end to the final reconciliation, median.
    pub converge_p50_secs: Option<f64>,
    /// ... and the worst run.
    pub converge_max_secs: Option<f64>,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Figures per kind, in the order the kinds first ran.
pub fn figures(runs: &[RunResult]) -> Vec<KindFigures> {
    let mut by_kind: BTreeMap<usize, (String, Vec<&RunResult>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for run in runs {
        let at = match order.iter().position(|k| *k == run.kind) {
            Some(at) => at,
            None => {
                order.push(run.kind.clone());
                order.len() - 1
            }
        };
        by_kind
            .entry(at)
            .or_insert_with(|| (run.kind.clone(), Vec::new()))
            .1
            .push(run);
    }
    by_kind
        .into_values()
        .map(|(kind, runs)| {
            let unavailable: Vec<f64> = runs.iter().map(|r| r.unavailable_secs).collect();
            let converge: Vec<f64> = runs.iter().filter_map(|r| r.converge_secs).collect();
            KindFigures {
                kind,
                runs: runs.len(),
                held: runs.iter().filter(|r| r.held).count(),
                accepted_orders: runs.iter().map(|r| r.accepted_orders).sum(),
                orders_lost: runs.iter().map(|r| r.orders_lost).sum(),
                oversold_units: runs.iter().map(|r| r.oversold_units).sum(),
                unavailable_p50_secs: median(unavailable.clone()).unwrap_or(0.0),
                unavailable_max_secs: unavailable.iter().copied().fold(0.0, f64::max),
                decided_during_fault_min: runs
                    .iter()
                    .map(|r| r.decided_during_fault)
                    .min()
                    .unwrap_or(0),
                converge_p50_secs: median(converge.clone()),
                converge_max_secs: converge.iter().copied().reduce(f64::max),
            }
        })
        .collect()
}

/// The table people read.
pub fn table(figures: &[KindFigures]) -> String {
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.1}"));
    let mut out = format!(
        "{:<22} {:>5} {:>5} {:>9} {:>5} {:>9} {:>17} {:>16} {:>17}\n",
        "fault",
        "runs",
        "held",
        "accepted",
        "lost",
        "oversold",
        "unavail p50/max",
        "decided in fault",
        "converge p50/max"
    );
    for f in figures {
        out += &format!(
            "{:<22} {:>5} {:>5} {:>9} {:>5} {:>9} {:>17} {:>16} {:>17}\n",
            f.kind,
            f.runs,
            f.held,
            f.accepted_orders,
            f.orders_lost,
            f.oversold_units,
            format!(
                "{:.1} / {:.1} s",
                f.unavailable_p50_secs, f.unavailable_max_secs
            ),
            f.decided_during_fault_min,
            format!(
                "{} / {} s",
                secs(f.converge_p50_secs),
                secs(f.converge_max_secs)
            ),
        );
    }
    out
}

/// A horizontal bar chart: per kind, the median and worst seconds without a
/// decision for shoppers, and the runs that held.
pub fn chart(figures: &[KindFigures]) -> String {
    let (row, left, width) = (26.0, 170.0, 460.0);
    let height = 60.0 + row * figures.len() as f64;
    let max = figures
        .iter()
        .map(|f| f.unavailable_max_secs)
        .fold(1.0_f64, f64::max);
    let x = |s: f64| left + s / max * width;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"380\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">Seconds shoppers got no decision, per fault (median dark, worst light)</text>\n"
    );
    for (i, f) in figures.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let colour = if f.held == f.runs { "#2a7" } else { "#c33" };
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{left}\" y=\"{y}\" width=\"{:.1}\" height=\"16\" fill=\"#9cd\"/>\n\
             <rect x=\"{left}\" y=\"{y}\" width=\"{:.1}\" height=\"16\" fill=\"#36a\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{:.1} s</text>\n\
             <text x=\"700\" y=\"{}\" fill=\"{colour}\">{}/{} held</text>\n",
            left - 8.0,
            y + 12.0,
            f.kind,
            x(f.unavailable_max_secs) - left,
            x(f.unavailable_p50_secs) - left,
            x(f.unavailable_max_secs) + 6.0,
            y + 12.0,
            f.unavailable_max_secs,
            y + 12.0,
            f.held,
            f.runs,
        );
    }
    svg + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: &str, held: bool, unavailable: f64, converge: Option<f64>) -> RunResult {
        RunResult {
            kind: kind.into(),
            index: 0,
            seed: 1,
            held,
            invariants: Vec::new(),
            accepted_orders: 10,
            accepted_units: 15,
            orders_lost: usize::from(!held),
            oversold_units: 0,
            lookups_failed: 0,
            unavailable_secs: unavailable,
            decided_during_fault: 0,
            converge_secs: converge,
            answers: Default::default(),
            timeline: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn figures_per_kind_in_the_order_run() {
        let runs = vec![
            run("redis-pause", true, 3.0, Some(4.0)),
            run("api-kill", true, 1.0, Some(3.0)),
            run("redis-pause", false, 5.0, None),
            run("redis-pause", true, 4.0, Some(6.0)),
        ];
        let f = figures(&runs);
        assert_eq!(
            f.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(),
            ["redis-pause", "api-kill"]
        );
        assert_eq!((f[0].runs, f[0].held, f[0].orders_lost), (3, 2, 1));
        assert_eq!(
            (f[0].unavailable_p50_secs, f[0].unavailable_max_secs),
            (4.0, 5.0)
        );
        assert_eq!(
            (f[0].converge_p50_secs, f[0].converge_max_secs),
            (Some(6.0), Some(6.0))
        );
        assert!(table(&f).contains("redis-pause"));
        assert!(chart(&f).contains("2/3 held"));
    }
}
