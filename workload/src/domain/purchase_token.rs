//! Purchase tokens (`spec.antiBot`): short-lived, signed permissions to buy
//! once, bound to one shopper and one sale. A bot holding K accounts must
//! fetch K tokens, each only once the window opens, each good for one
//! purchase; the single use itself is decided by the purchase script as it
//! reserves (`lua/purchase.lua`), and kept across a Redis loss by the order.

use uuid::Uuid;

use super::seal::{self, Unsealed};

/// The header a purchase carries its token in.
pub const TOKEN_HEADER: &str = "purchase-token";

/// The shortest signing secret accepted (the hash's size, as for HS256).
pub const MIN_SECRET: usize = 32;

/// How long a token is good for when the sale does not say (the CRD's
/// default of `antiBot.tokenTtl`).
pub const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Longest shopper id a token carries (a JWT `sub` is far shorter).
const MAX_SHOPPER: usize = 256;

/// How much longer than its expiry (by the API's clock) a used token is
/// remembered: room for the clocks of the APIs that verify it to disagree.
pub const USED_SLACK: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a token expiring at `expires_ms` must be remembered as used,
/// counted from `now_ms` (both by the clock that verified it): a duration,
/// not an instant, so Redis's own clock does not shorten it.
pub fn remember_used(expires_ms: i64, now_ms: i64) -> std::time::Duration {
    std::time::Duration::from_millis(expires_ms.saturating_sub(now_ms).max(0) as u64) + USED_SLACK
}

/// What a token says. Its text is `<hex payload>.<hex HMAC-SHA256>`, the
/// payload being the sale id (16 bytes), the nonce (16), the expiry in
/// Unix milliseconds (8, big-endian) and then the shopper: fixed-size fields
/// first, so no two claims share a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenClaims {
    /// The FlashSale's uid (a sale recreated under the same name is another).
    pub sale_id: Uuid,
    /// The shopper it was issued to.
    pub shopper: String,
    /// What makes it single-use: the order that used it records it.
    pub nonce: Uuid,
    /// First instant (Unix ms) it is no longer accepted.
    pub expires_ms: i64,
}

/// The purchase token an accepted order used, kept with the order: a
/// recovered Redis state still knows it was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsedToken {
    /// The token's nonce.
    pub nonce: Uuid,
    /// Until when (Unix ms) it must be remembered as used.
    pub until_ms: i64,
}

/// Why a token was refused (all answered 403 `TOKEN_INVALID`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not `<hex>.<hex>` of the right sizes.
    #[error("the purchase token is malformed")]
    Malformed,
    /// The signature does not match (forged or altered).
    #[error("the purchase token's signature does not match")]
    Forged,
    /// Issued for another sale.
    #[error("the purchase token was issued for another sale")]
    OtherSale,
    /// Issued to another shopper.
    #[error("the purchase token was issued to another shopper")]
    OtherShopper,
    /// Past its expiry.
    #[error("the purchase token expired; fetch a new one")]
    Expired,
}

/// The tokens' label (domain::seal).
const LABEL: &[u8] = b"flashsale purchase token v1\0";

impl TokenClaims {
    fn payload(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(40 + self.shopper.len());
        payload.extend_from_slice(self.sale_id.as_bytes());
        payload.extend_from_slice(self.nonce.as_bytes());
        payload.extend_from_slice(&self.expires_ms.to_be_bytes());
        payload.extend_from_slice(self.shopper.as_bytes());
        payload
    }

    /// The token's text, signed with `secret`.
    pub fn sign(&self, secret: &[u8]) -> String {
        seal::seal(secret, LABEL, &self.payload())
    }
}

/// Reads `token` and checks it was signed with `secret` for `sale_id` and
/// `shopper`, and is not expired at `now_ms`. The signature is compared in
/// constant time, before anything the token says is believed.
pub fn verify(
    secret: &[u8],
    token: &str,
    sale_id: Uuid,
    shopper: &str,
    now_ms: i64,
) -> Result<TokenClaims, TokenError> {
    let payload = seal::open(secret, LABEL, token, 40..=40 + MAX_SHOPPER).map_err(|e| match e {
        Unsealed::Malformed => TokenError::Malformed,
        Unsealed::Forged => TokenError::Forged,
    })?;
    let uuid = |at: usize| Uuid::from_slice(&payload[at..at + 16]).expect("16 bytes");
    let claims = TokenClaims {
        sale_id: uuid(0),
        nonce: uuid(16),
        expires_ms: i64::from_be_bytes(payload[32..40].try_into().expect("8 bytes")),
        shopper: String::from_utf8(payload[40..].to_vec()).map_err(|_| TokenError::Malformed)?,
    };
    if claims.sale_id != sale_id {
        return Err(TokenError::OtherSale);
    }
    if claims.shopper != shopper {
        return Err(TokenError::OtherShopper);
    }
    if now_ms >= claims.expires_ms {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}

/// Whether a shopper id fits in a token.
pub fn fits(shopper: &str) -> bool {
    shopper.len() <= MAX_SHOPPER
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn claims() -> TokenClaims {
        TokenClaims {
            sale_id: Uuid::from_u128(7),
            shopper: "alice".into(),
            nonce: Uuid::from_u128(42),
            expires_ms: 10_000,
        }
    }

    #[test]
    fn a_signed_token_verifies_for_its_sale_shopper_and_time() {
        let token = claims().sign(SECRET);
        assert_eq!(
            verify(SECRET, &token, Uuid::from_u128(7), "alice", 9_999),
            Ok(claims())
        );
    }

    #[test]
    fn refusals_table() {
        let token = claims().sign(SECRET);
        let (payload, signature) = token.split_once('.').unwrap();
        // The same claims for bob: a payload bob could not have signed.
        let bob = TokenClaims {
            shopper: "bob".into(),
            ..claims()
        }
        .sign(SECRET);
        let cases: Vec<(&str, String, Uuid, &str, i64, TokenError)> = vec![
            (
                "no dot",
                payload.to_string(),
                Uuid::from_u128(7),
                "alice",
                0,
                TokenError::Malformed,
            ),
            (
                "not hex",
                format!("zz.{signature}"),
                Uuid::from_u128(7),
                "alice",
                0,
                TokenError::Malformed,
            ),
            (
                "short payload",
                format!("00.{signature}"),
                Uuid::from_u128(7),
                "alice",
                0,
                TokenError::Malformed,
            ),
            (
                "another secret",
                claims().sign(b"another secret, also 32 bytes ok"),
                Uuid::from_u128(7),
                "alice",
                0,
                TokenError::Forged,
            ),
            (
                "bob's payload under alice's signature",
                format!("{}.{signature}", bob.split_once('.').unwrap().0),
                Uuid::from_u128(7),
                "alice",
                0,
                TokenError::Forged,
            ),
            (
                "another sale",
                token.clone(),
                Uuid::from_u128(8),
                "alice",
                0,
                TokenError::OtherSale,
            ),
            (
                "another shopper",
                token.clone(),
                Uuid::from_u128(7),
                "bob",
                0,
                TokenError::OtherShopper,
            ),
            (
                "at its expiry",
                token.clone(),
                Uuid::from_u128(7),
                "alice",
                10_000,
                TokenError::Expired,
            ),
        ];
        for (what, token, sale, shopper, now, error) in cases {
            assert_eq!(
                verify(SECRET, &token, sale, shopper, now),
                Err(error),
                "{what}"
            );
        }
    }

    #[test]
    fn payloads_are_unambiguous() {
        // Fixed-size fields first: a shopper id cannot shift the others.
        let a = TokenClaims {
            shopper: "a".into(),
            ..claims()
        };
        let b = TokenClaims {
            shopper: "ab".into(),
            ..claims()
        };
        assert_ne!(a.payload(), b.payload());
        assert_eq!(a.payload().len(), 41);
    }

    #[test]
    fn a_used_token_is_remembered_past_its_expiry_whatever_the_clock() {
        let cases = [
            (10_000, 4_000, 6_000),
            (10_000, 10_000, 0),
            (10_000, 12_000, 0),
        ];
        for (expires_ms, now_ms, left_ms) in cases {
            assert_eq!(
                remember_used(expires_ms, now_ms),
                Duration::from_millis(left_ms) + USED_SLACK,
                "{expires_ms} at {now_ms}"
            );
        }
    }
}
