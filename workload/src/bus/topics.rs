//! Topic and consumer-group names: one per sale, derived from the sale's name.

use crate::domain::sale::SaleRef;

/// Accepted orders of the sale, keyed by shopper id.
pub fn orders_topic(sale: &SaleRef) -> String {
    format!("flashsale.{}.{}.orders", sale.namespace, sale.name)
}

/// Orders the consumers gave up on after retries, with the reason.
pub fn dead_letter_topic(sale: &SaleRef) -> String {
    format!("flashsale.{}.{}.dlq", sale.namespace, sale.name)
}

/// The consumer group that persists the sale's orders.
pub fn consumer_group(sale: &SaleRef) -> String {
    format!("flashsale.{}.{}.consumers", sale.namespace, sale.name)
}

/// The consumer group that scores the sale's orders (`spec.risk`): its own,
/// so persistence never waits for scoring.
pub fn risk_group(sale: &SaleRef) -> String {
    format!("flashsale.{}.{}.risk", sale.namespace, sale.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_legal_kafka_names_and_distinct() {
        let sale = SaleRef::new("shop", "iphone-drop").unwrap();
        let names = [
            orders_topic(&sale),
            dead_letter_topic(&sale),
            consumer_group(&sale),
            risk_group(&sale),
        ];
        for name in &names {
            assert!(name.len() <= 249, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
                "{name}"
            );
        }
        assert_eq!(names[0], "flashsale.shop.iphone-drop.orders");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }
}
