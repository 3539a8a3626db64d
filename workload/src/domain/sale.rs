//! Which sale a request, a key or a message is about.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A sale is named like its `FlashSale` resource: namespace and name, each a
/// DNS label (lower-case alphanumerics and '-', at most 63 characters). Keys,
/// topics and rows are derived from this pair, so it is validated once, here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SaleRef {
    /// The FlashSale's namespace.
    pub namespace: String,
    /// The FlashSale's name.
    pub name: String,
}

/// A namespace or name that cannot name a sale.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid sale {what} {value:?}: must be a DNS label (a-z, 0-9, '-', 1 to 63 characters, alphanumeric at both ends)"
)]
pub struct InvalidSaleRef {
    what: &'static str,
    value: String,
}

impl SaleRef {
    /// Validates both parts.
    pub fn new(namespace: &str, name: &str) -> Result<Self, InvalidSaleRef> {
        for (what, value) in [("namespace", namespace), ("name", name)] {
            if !is_dns_label(value) {
                return Err(InvalidSaleRef {
                    what,
                    value: value.to_string(),
                });
            }
        }
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for SaleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// RFC 1123 label, as Kubernetes checks namespaces and our sale names.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && edge(bytes[0])
        && edge(bytes[bytes.len() - 1])
        && bytes.iter().all(|&b| edge(b) || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels_only() {
        let cases = [
            ("shop", "iphone-drop", true),
            ("a", "0", true),
            ("shop", &"x".repeat(63), true),
            ("shop", &"x".repeat(64), false),
            ("shop", "", false),
            ("shop", "-drop", false),
            ("shop", "drop-", false),
            ("shop", "Drop", false),
            ("shop", "drop.v2", false),
            ("shop", "drop{1}", false),
            ("sh op", "drop", false),
            ("", "drop", false),
        ];
        for (namespace, name, ok) in cases {
            assert_eq!(
                SaleRef::new(namespace, name).is_ok(),
                ok,
                "{namespace:?}/{name:?}"
            );
        }
    }

    #[test]
    fn displays_as_namespace_slash_name() {
        let sale = SaleRef::new("shop", "drop").unwrap();
        assert_eq!(sale.to_string(), "shop/drop");
    }
}
