//! Payments confirmed by the payment provider: the signature of its
//! callbacks (HMAC over timestamp and body, a replay window) and what its
//! word does to a payment and its order.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::order::OrderStatus;

/// The callback's signature header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`.
pub const SIGNATURE_HEADER: &str = "signature";

/// How far a callback's timestamp may be from now, either way: an older
/// callback (one recorded and sent again) is refused.
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// The shortest callback secret accepted (the hash's size, as for HS256).
pub const MIN_SECRET: usize = 32;

/// The `Signature` header for `body` sent at `t` (what the provider sends).
pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mac = mac(secret, t, body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

fn mac(secret: &[u8], t: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Why a callback's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Not `t=<unix>,v1=<hex>`.
    #[error("the Signature header is not t=<unix seconds>,v1=<hex HMAC-SHA256>")]
    Malformed,
    /// Signed too long ago (or in the future): a replay.
    #[error("the signature's timestamp is {0} s away from now (at most {REPLAY_WINDOW_SECS} s)")]
    OutsideWindow(i64),
    /// No `v1` matches the body under the secret.
    #[error("the signature does not match the body")]
    Mismatch,
}

/// Checks `header` against `body` at `now`. Several `v1` entries may be
/// given (a provider rotating its secret signs with both); one must match.
/// The comparison takes the same time wherever the bytes differ.
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64) -> Result<(), SignatureError> {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => signatures.push(hex::decode(value).ok()),
            _ => {}
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let age = now.saturating_sub(t);
    if age.abs() > REPLAY_WINDOW_SECS {
        return Err(SignatureError::OutsideWindow(age));
    }
    let expected = mac(secret, t, body);
    signatures
        .into_iter()
        .flatten()
        .any(|signature| expected.clone().verify_slice(&signature).is_ok())
        .then_some(())
        .ok_or(SignatureError::Mismatch)
}

/// What the provider says of a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentOutcome {
    /// The money was taken.
    Succeeded,
    /// It was not.
    Failed,
}

/// Where a payment is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentState {
    /// Started by the shopper; the provider has not answered.
    Started,
    /// The provider took the money and the order is PAID by it.
    Succeeded,
    /// The provider did not take the money.
    Failed,
    /// The provider took the money for an order that can no longer be
    /// paid (cancelled meanwhile, or paid by another payment): it is owed back.
    RefundDue,
}

impl PaymentState {
    /// The database name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "STARTED",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::RefundDue => "REFUND_DUE",
        }
    }

    /// Parses the database name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Started,
            Self::Succeeded,
            Self::Failed,
            Self::RefundDue,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }
}

/// What a callback does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The payment becomes SUCCEEDED and its UNPAID order PAID.
    Pay,
    /// The payment becomes REFUND_DUE: the provider is told to refund.
    Refund,
    /// The payment becomes FAILED; the order stays UNPAID (the shopper may
    /// start another).
    Decline,
    /// Said before: nothing changes, the first answer is given again.
    Repeat,
    /// Contradicts what the provider said before (a success, then a
    /// failure): nothing changes, the provider is told.
    Contradiction,
}

impl Settlement {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pay => "pay",
            Self::Refund => "refund",
            Self::Decline => "decline",
            Self::Repeat => "repeat",
            Self::Contradiction => "contradiction",
        }
    }
}

/// What the provider's `outcome` does to a payment in `state` whose order
/// is in `order`. Money taken always ends as an order PAID by it or a
/// refund owed — never lost, never counted twice.
pub fn settle(state: PaymentState, order: OrderStatus, outcome: PaymentOutcome) -> Settlement {
    use PaymentOutcome as O;
    use PaymentState as P;
    match (state, outcome) {
        // A failure reported first and a success later: the money was taken.
        (P::Started | P::Failed, O::Succeeded) if order == OrderStatus::Unpaid => Settlement::Pay,
        (P::Started | P::Failed, O::Succeeded) => Settlement::Refund,
        (P::Started, O::Failed) => Settlement::Decline,
        (P::Succeeded | P::RefundDue, O::Succeeded) | (P::Failed, O::Failed) => Settlement::Repeat,
        (P::Succeeded | P::RefundDue, O::Failed) => Settlement::Contradiction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a-payment-provider-secret-32-bytes!";
    const NOW: i64 = 1_800_000_000;

    #[test]
    fn signature_table() {
        let body = br#"{"paymentId":"p","orderId":"o","outcome":"succeeded"}"#;
        let good = sign(SECRET, NOW, body);
        let other_secret = sign(b"another-secret-of-thirty-two-bytes!!", NOW, body);
        let v1 = |h: &str| h.split_once(",v1=").unwrap().1.to_string();
        for (what, header, body, now, expected) in [
            ("as signed", good.clone(), &body[..], NOW, Ok(())),
            (
                "4 minutes later",
                good.clone(),
                &body[..],
                NOW + 240,
                Ok(()),
            ),
            (
                "clock 4 minutes behind",
                good.clone(),
                &body[..],
                NOW - 240,
                Ok(()),
            ),
            (
                "6 minutes later: a replay",
                good.clone(),
                &body[..],
                NOW + 360,
                Err(SignatureError::OutsideWindow(360)),
            ),
            (
                "another body",
                good.clone(),
                &br#"{"outcome":"failed"}"#[..],
                NOW,
                Err(SignatureError::Mismatch),
            ),
            (
                "another secret",
                other_secret.clone(),
                &body[..],
                NOW,
                Err(SignatureError::Mismatch),
            ),
            (
                "the timestamp moved",
                format!("t={},v1={}", NOW + 1, v1(&good)),
                &body[..],
                NOW,
                Err(SignatureError::Mismatch),
            ),
            (
                "two v1, one good (rotation)",
                format!("{other_secret},v1={}", v1(&good)),
                &body[..],
                NOW,
                Ok(()),
            ),
            (
                "no t",
                format!("v1={}", v1(&good)),
                &body[..],
                NOW,
                Err(SignatureError::Malformed),
            ),
            (
                "no v1",
                format!("t={NOW}"),
                &body[..],
                NOW,
                Err(SignatureError::Malformed),
            ),
            (
                "v1 not hex",
                format!("t={NOW},v1=zz"),
                &body[..],
                NOW,
                Err(SignatureError::Mismatch),
            ),
            (
                "empty",
                String::new(),
                &body[..],
                NOW,
                Err(SignatureError::Malformed),
            ),
        ] {
            assert_eq!(verify(SECRET, &header, body, now), expected, "{what}");
        }
    }

    #[test]
    fn settlement_table() {
        use OrderStatus as S;
        use PaymentOutcome::{Failed as No, Succeeded as Yes};
        use PaymentState as P;
        use Settlement::*;
        for (state, order, outcome, expected) in [
            (P::Started, S::Unpaid, Yes, Pay),
            (P::Started, S::Cancelled, Yes, Refund),
            (P::Started, S::Refunded, Yes, Refund),
            (P::Started, S::Failed, Yes, Refund),
            (P::Started, S::Paid, Yes, Refund),
            (P::Started, S::Unpaid, No, Decline),
            (P::Started, S::Cancelled, No, Decline),
            (P::Failed, S::Unpaid, Yes, Pay),
            (P::Failed, S::Cancelled, Yes, Refund),
            (P::Failed, S::Unpaid, No, Repeat),
            (P::Succeeded, S::Paid, Yes, Repeat),
            (P::Succeeded, S::Refunded, Yes, Repeat),
            (P::RefundDue, S::Cancelled, Yes, Repeat),
            (P::Succeeded, S::Paid, No, Contradiction),
            (P::RefundDue, S::Cancelled, No, Contradiction),
        ] {
            assert_eq!(
                settle(state, order, outcome),
                expected,
                "{state:?} {order:?} {outcome:?}"
            );
        }
    }
}
