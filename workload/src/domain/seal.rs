//! Texts the API hands out signed and takes back — purchase tokens, queue
//! tickets, challenges: `<hex payload>.<hex HMAC-SHA256>`, each kind under a
//! label of its own (one kind never verifies as another), the signature
//! compared in constant time before anything the payload says is believed.

use std::ops::RangeInclusive;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Why a text did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsealed {
    /// Not `<hex>.<hex>`, or a payload of the wrong size.
    Malformed,
    /// The signature does not match (forged, altered, another kind).
    Forged,
}

fn mac(secret: &[u8], label: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(label);
    mac.update(payload);
    mac
}

/// `payload` signed with `secret` under `label`.
pub fn seal(secret: &[u8], label: &[u8], payload: &[u8]) -> String {
    let signature = mac(secret, label, payload).finalize().into_bytes();
    format!("{}.{}", hex::encode(payload), hex::encode(signature))
}

/// The payload of `text` if `secret` signed it under `label` and its size
/// is within `sizes`.
pub fn open(
    secret: &[u8],
    label: &[u8],
    text: &str,
    sizes: RangeInclusive<usize>,
) -> Result<Vec<u8>, Unsealed> {
    let (payload, signature) = text.split_once('.').ok_or(Unsealed::Malformed)?;
    let payload = hex::decode(payload).map_err(|_| Unsealed::Malformed)?;
    let signature = hex::decode(signature).map_err(|_| Unsealed::Malformed)?;
    if !sizes.contains(&payload.len()) {
        return Err(Unsealed::Malformed);
    }
    mac(secret, label, &payload)
        .verify_slice(&signature)
        .map_err(|_| Unsealed::Forged)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn opens_what_it_sealed_and_nothing_else() {
        let text = seal(SECRET, b"a\0", b"payload");
        assert_eq!(open(SECRET, b"a\0", &text, 1..=16), Ok(b"payload".to_vec()));
        let (payload, signature) = text.split_once('.').unwrap();
        let cases = [
            (
                "another label",
                seal(SECRET, b"b\0", b"payload"),
                Unsealed::Forged,
            ),
            (
                "another secret",
                seal(b"x", b"a\0", b"payload"),
                Unsealed::Forged,
            ),
            (
                "altered",
                format!("{}.{signature}", hex::encode(b"payloaD")),
                Unsealed::Forged,
            ),
            ("no dot", payload.to_string(), Unsealed::Malformed),
            ("not hex", format!("zz.{signature}"), Unsealed::Malformed),
            (
                "too long",
                seal(SECRET, b"a\0", &[0; 17]),
                Unsealed::Malformed,
            ),
        ];
        for (what, text, error) in cases {
            assert_eq!(open(SECRET, b"a\0", &text, 1..=16), Err(error), "{what}");
        }
    }
}
