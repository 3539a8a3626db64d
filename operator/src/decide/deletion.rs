//! What a deleted sale waits for before its Redis state and topics go, pure.

/// Why the deletion cannot remove the sale's state yet, or `None` once its
/// orders are all persisted. An unreadable lag is not a zero lag, and no
/// deadline ends the wait: a topic holding unpersisted orders is never deleted.
/// `in_flight`: purchases were paused less than the purchase budget ago, so
/// one accepted just before may still be producing.
pub fn waits_for(lag: Result<i64, String>, in_flight: bool) -> Option<String> {
    match lag {
        Err(e) => Some(format!(
            "The sale's lag cannot be read ({e}); its topic is kept until every order in it is persisted."
        )),
        Ok(n) if n > 0 => Some(format!(
            "{n} orders are still in the sale's topic; it is deleted once the consumers persisted them."
        )),
        Ok(_) if in_flight => {
            Some("Purchases are paused; the last ones may still be reaching the topic.".to_string())
        }
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_waits_for_every_order_it_cannot_rule_out() {
        for (lag, in_flight, waits) in [
            (
                Err("broker down".to_string()),
                false,
                Some("cannot be read (broker down)"),
            ),
            (Err("broker down".to_string()), true, Some("cannot be read")),
            (Ok(3), false, Some("3 orders are still")),
            (Ok(3), true, Some("3 orders are still")),
            (Ok(0), true, Some("may still be reaching")),
            (Ok(0), false, None),
        ] {
            let got = waits_for(lag.clone(), in_flight);
            match (&got, waits) {
                (None, None) => {}
                (Some(why), Some(part)) => assert!(why.contains(part), "{why} lacks {part}"),
                _ => panic!("{lag:?} {in_flight}: got {got:?}, want {waits:?}"),
            }
        }
    }
}
