//! The order message: what the API puts on a sale's topic once Redis reserved
//! the stock, and what the consumers persist.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::purchase_token::UsedToken;
use crate::domain::risk::PurchaseSignals;
use crate::domain::sale::SaleRef;

/// An accepted order on its way to the database. JSON on the wire; the
/// message key is the shopper id, so one shopper's orders keep their order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderMessage {
    /// UUIDv7 minted by the API.
    pub order_id: Uuid,
    /// The sale's database id (the FlashSale's uid).
    pub sale_id: Uuid,
    /// The sale's namespace and name.
    pub sale: SaleRef,
    /// The buyer.
    pub shopper: String,
    /// Units.
    pub quantity: i64,
    /// The stock shard that holds the reservation.
    pub shard: u32,
    /// When the API accepted it, Unix milliseconds.
    pub accepted_at_ms: i64,
    /// The shopper's Idempotency-Key, persisted with the order so that a
    /// recovered Redis state still answers a retry with this order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The purchase token it used, persisted with the order so that a
    /// recovered Redis state still refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purchase_token: Option<UsedToken>,
    /// Written by the API through PostgreSQL while the sale sold through the
    /// database: persisted already, with no reservation to claim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub persisted: bool,
    /// What the API saw that only the risk scorer reads.
    #[serde(default, skip_serializing_if = "PurchaseSignals::is_empty")]
    pub signals: PurchaseSignals,
}

impl OrderMessage {
    /// The JSON payload.
    pub fn to_payload(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an order message always serializes")
    }

    /// Parses a payload; an error makes the message poison.
    pub fn from_payload(payload: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let message = OrderMessage {
            order_id: Uuid::now_v7(),
            sale_id: Uuid::now_v7(),
            sale: SaleRef::new("shop", "drop").unwrap(),
            shopper: "alice".into(),
            quantity: 2,
            shard: 3,
            accepted_at_ms: 1_700_000_000_000,
            idempotency_key: Some("k-1".into()),
            purchase_token: Some(UsedToken {
                nonce: Uuid::from_u128(9),
                until_ms: 1_700_000_090_000,
            }),
            persisted: false,
            signals: PurchaseSignals {
                client_network: Some("203.0.113.0/24".into()),
                token_issued_ms: Some(1_700_000_000_000),
            },
        };
        let payload = message.to_payload();
        assert_eq!(OrderMessage::from_payload(&payload).unwrap(), message);
        assert!(OrderMessage::from_payload(b"{not json").is_err());
        assert!(OrderMessage::from_payload(b"{}").is_err());
    }
}
