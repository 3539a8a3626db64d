//! What anyone may know of a sale without asking who they are: its phase and
//! a coarse stock level (never the count), with a validator that changes only
//! when one of them does, so a CDN or a browser can revalidate for free.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::sale::{PublicState, SaleConfig, SaleMeta, public_state};

/// The sale's phase, as the status route names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Before the start (warmed or not yet).
    Upcoming,
    /// Purchases accepted.
    Live,
    /// The kill switch is on.
    Paused,
    /// Nothing left to buy.
    SoldOut,
    /// The window is over.
    Ended,
}

/// How much is left, coarsely: the exact count would tell bots when to
/// strike and cost a cache hit per unit sold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StockLevel {
    /// More than a tenth of the stock.
    Plenty,
    /// A tenth of the stock or less.
    Few,
    /// Nothing.
    None,
}

impl StockLevel {
    /// The level of `left` units out of `total`.
    pub fn of(left: i64, total: i64) -> Self {
        if left <= 0 {
            Self::None
        } else if left.saturating_mul(10) <= total {
            Self::Few
        } else {
            Self::Plenty
        }
    }
}

/// A sale's status at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SaleStatus {
    /// Its phase.
    pub phase: Phase,
    /// What is left.
    pub stock: StockLevel,
}

/// The status of `config`'s sale at `now_ms`, from its Redis metadata (if
/// warmed) and the units Redis holds. Before the warm-up Redis holds
/// nothing, so the stock is the configured one.
pub fn status_of(
    config: &SaleConfig,
    meta: Option<&SaleMeta>,
    remaining: i64,
    now_ms: i64,
) -> SaleStatus {
    let public = public_state(config, meta, remaining, now_ms);
    let phase = match public {
        PublicState::Scheduled | PublicState::Warm => Phase::Upcoming,
        PublicState::Live => Phase::Live,
        PublicState::Paused => Phase::Paused,
        PublicState::SoldOut => Phase::SoldOut,
        PublicState::Ended => Phase::Ended,
    };
    let left = match public {
        PublicState::Scheduled => config.stock,
        _ => remaining,
    };
    SaleStatus {
        phase,
        stock: StockLevel::of(left, config.stock),
    }
}

/// A weak ETag (the body also carries the server's clock, which it does not
/// cover) over everything else the body says: every replica computes the
/// same one, so a cache in front of several keeps revalidating for free.
pub fn etag(config: &SaleConfig, status: SaleStatus) -> String {
    let mut hash = Sha256::new();
    // The format's version first: a changed body must change the tag.
    hash.update(b"status/1\0");
    hash.update(config.sale.namespace.as_bytes());
    hash.update(b"\0");
    hash.update(config.sale.name.as_bytes());
    hash.update(b"\0");
    for n in [
        config.start.timestamp_millis(),
        config.end.timestamp_millis(),
        status.phase as i64,
        status.stock as i64,
    ] {
        hash.update(n.to_be_bytes());
    }
    format!("W/\"{}\"", hex::encode(&hash.finalize()[..12]))
}

/// Whether an `If-None-Match` header value names `etag` (weak comparison,
/// RFC 9110 §13.1.2: a list of tags, or `*`).
pub fn none_match_hits(if_none_match: &str, etag: &str) -> bool {
    let opaque = |tag: &str| tag.trim().trim_start_matches("W/").to_string();
    let ours = opaque(etag);
    if_none_match
        .split(',')
        .any(|tag| tag.trim() == "*" || opaque(tag) == ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::sale::SaleRef;

    const START_MS: i64 = 1_000;
    const END_MS: i64 = 2_000;

    fn config(stock: i64) -> SaleConfig {
        SaleConfig {
            stock,
            ..SaleConfig::example()
        }
    }

    #[test]
    fn phase_and_stock_follow_the_window_the_switch_and_the_count() {
        let c = config(100);
        let warm = c.meta(true, false, false);
        let paused = c.meta(true, true, false);
        use Phase::*;
        use StockLevel::{Few, None as Gone, Plenty};
        let cases = [
            // not warmed: the configured stock
            (None, 0, START_MS - 1, Upcoming, Plenty),
            (None, 0, START_MS + 1, Upcoming, Plenty),
            (Some(warm), 100, START_MS - 1, Upcoming, Plenty),
            (Some(warm), 100, START_MS, Live, Plenty),
            (Some(warm), 11, START_MS, Live, Plenty),
            (Some(warm), 10, START_MS, Live, Few),
            (Some(warm), 1, START_MS, Live, Few),
            (Some(warm), 0, START_MS, SoldOut, Gone),
            (Some(paused), 50, START_MS, Paused, Plenty),
            (Some(warm), 50, END_MS, Ended, Plenty),
            (Some(warm), 0, END_MS, Ended, Gone),
        ];
        for (meta, remaining, now, phase, stock) in cases {
            assert_eq!(
                status_of(&c, meta.as_ref(), remaining, now),
                SaleStatus { phase, stock },
                "meta {meta:?}, remaining {remaining}, now {now}"
            );
        }
    }

    #[test]
    fn a_tiny_stock_is_few_from_its_first_unit() {
        assert_eq!(StockLevel::of(1, 1), StockLevel::Plenty);
        assert_eq!(StockLevel::of(1, 10), StockLevel::Few);
        assert_eq!(StockLevel::of(0, 0), StockLevel::None);
        assert_eq!(StockLevel::of(-3, 10), StockLevel::None);
    }

    #[test]
    fn the_tag_changes_with_what_the_body_says_and_nothing_else() {
        let c = config(100);
        let live = SaleStatus {
            phase: Phase::Live,
            stock: StockLevel::Plenty,
        };
        let tag = etag(&c, live);
        assert!(tag.starts_with("W/\"") && tag.ends_with('"'), "{tag}");
        assert_eq!(tag, etag(&c.clone(), live), "deterministic");
        let few = SaleStatus {
            stock: StockLevel::Few,
            ..live
        };
        let sold_out = SaleStatus {
            phase: Phase::SoldOut,
            stock: StockLevel::None,
        };
        let mut later = c.clone();
        later.end += chrono::Duration::seconds(1);
        let mut other = c.clone();
        other.sale = SaleRef::new("shop", "drop2").unwrap();
        let mut restocked = c.clone();
        restocked.stock = 200;
        for changed in [
            etag(&c, few),
            etag(&c, sold_out),
            etag(&later, live),
            etag(&other, live),
        ] {
            assert_ne!(changed, tag);
        }
        assert_eq!(etag(&restocked, live), tag, "the count is not said");
    }

    #[test]
    fn if_none_match_compares_weakly_over_a_list() {
        let tag = "W/\"abc\"";
        let cases = [
            ("W/\"abc\"", true),
            ("\"abc\"", true),
            ("\"x\", W/\"abc\"", true),
            (" * ", true),
            ("\"abcd\"", false),
            ("", false),
            ("W/\"ab\"c\"", false),
        ];
        for (header, hit) in cases {
            assert_eq!(none_match_hits(header, tag), hit, "{header:?}");
        }
    }
}
