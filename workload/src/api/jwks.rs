//! Shopper-token keys from a JWKS document (a file, or an identity provider's
//! URL), found by the token's `kid` and re-read in the background, so a
//! provider's key rotation needs no restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

/// Where the key set is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A file, e.g. a mounted ConfigMap (the kubelet updates it in place).
    File(PathBuf),
    /// An `http(s)://` URL, e.g. `https://id.shop/.well-known/jwks.json`.
    Url(String),
}

impl std::str::FromStr for JwksSource {
    type Err = std::convert::Infallible;

    /// A value starting with `http://` or `https://` is a URL, anything
    /// else a path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s.starts_with("http://") || s.starts_with("https://") {
            Self::Url(s.to_string())
        } else {
            Self::File(PathBuf::from(s))
        })
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Url(url) => f.write_str(url),
        }
    }
}

/// Why the key set could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The file or URL did not answer.
    #[error("could not read the JWKS at {0}: {1}")]
    Unreadable(JwksSource, String),
    /// Not a JWKS document.
    #[error("the JWKS at {0} is not a JSON Web Key Set: {1}")]
    Malformed(JwksSource, serde_json::Error),
    /// A document without one usable signing key.
    #[error(
        "the JWKS at {0} has no usable signing key (each needs a kid, and an RSA, EC or Ed25519 public key)"
    )]
    NoKeys(JwksSource),
}

/// One verifying key: the algorithm it was published for, and the key.
#[derive(Clone)]
pub struct SigningKey {
    /// The only algorithm a token signed with this key may name.
    pub algorithm: Algorithm,
    /// The public key.
    pub key: DecodingKey,
}

/// The usable signing keys of a set, by `kid`. Skipped: keys without a
/// `kid`, encryption keys, and symmetric (`oct`) keys — a secret published
/// in a key set is no secret.
pub fn signing_keys(set: &JwkSet) -> HashMap<String, Arc<SigningKey>> {
    set.keys
        .iter()
        .filter_map(|jwk| {
            let kid = jwk.common.key_id.clone()?;
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                return None;
            }
            let algorithm = algorithm_of(jwk)?;
            let key = DecodingKey::from_jwk(jwk).ok()?;
            Some((kid, Arc::new(SigningKey { algorithm, key })))
        })
        .collect()
}

/// The algorithms a published key may be for.
pub const PUBLIC_KEY_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The key's `alg`, else the one its type implies (RSA: RS256, the
/// default of OpenID Connect; EC: by curve; OKP: EdDSA). `None` for
/// symmetric keys and algorithms we do not verify.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
        _ => return None,
    };
    let algorithm = match jwk.common.key_algorithm {
        Some(alg) => Algorithm::try_from(alg).ok()?,
        None => implied,
    };
    PUBLIC_KEY_ALGORITHMS
        .contains(&algorithm)
        .then_some(algorithm)
}

/// The shortest time between two reads of the source: a flood of tokens
/// with made-up `kid`s must not become a flood of fetches.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(5);

/// The key set as last read, and how to read it again.
pub struct KeyRing {
    source: JwksSource,
    keys: RwLock<HashMap<String, Arc<SigningKey>>>,
    /// Woken by a token whose `kid` is unknown: the provider may have
    /// rotated its keys since the last read.
    unknown_kid: Arc<tokio::sync::Notify>,
    http: reqwest::Client,
}

impl KeyRing {
    /// An empty ring for `source`; [`KeyRing::refresh`] fills it.
    pub fn new(source: JwksSource) -> Self {
        Self {
            source,
            keys: RwLock::default(),
            unknown_kid: Arc::default(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client builds"),
        }
    }

    /// The key named `kid`. An unknown one asks the background task for an
    /// early read (at most one per [`MIN_REFRESH_GAP`]).
    pub fn key(&self, kid: &str) -> Option<Arc<SigningKey>> {
        let found = self
            .keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(kid)
            .cloned();
        if found.is_none() {
            self.unknown_kid.notify_one();
        }
        found
    }

    /// Reads the source and replaces the keys; on failure the old keys stay.
    /// Returns how many keys were read.
    pub async fn refresh(&self) -> Result<usize, JwksError> {
        let unreadable = |e: String| JwksError::Unreadable(self.source.clone(), e);
        let bytes = match &self.source {
            JwksSource::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| unreadable(e.to_string()))?,
            JwksSource::Url(url) => self
                .http
                .get(url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| unreadable(e.to_string()))?
                .bytes()
                .await
                .map_err(|e| unreadable(e.to_string()))?
                .to_vec(),
        };
        let set: JwkSet = serde_json::from_slice(&bytes)
            .map_err(|e| JwksError::Malformed(self.source.clone(), e))?;
        let keys = signing_keys(&set);
        if keys.is_empty() {
            return Err(JwksError::NoKeys(self.source.clone()));
        }
        let count = keys.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(count)
    }

    /// Re-reads the source every `every`, and soon after an unknown `kid`;
    /// ends when the ring is dropped.
    pub fn spawn_refresher(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let ring: Weak<Self> = Arc::downgrade(self);
        let unknown_kid = self.unknown_kid.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = unknown_kid.notified() => {}
                }
                let Some(ring) = ring.upgrade() else { return };
                match ring.refresh().await {
                    Ok(count) => tracing::debug!(keys = count, "JWKS refreshed"),
                    Err(e) => {
                        tracing::warn!(error = %e, "JWKS refresh failed; keeping the last keys")
                    }
                }
                drop(ring);
                tokio::time::sleep(MIN_REFRESH_GAP).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(json: serde_json::Value) -> JwkSet {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn signing_keys_table() {
        // An Ed25519 public key (RFC 8037 A.2) and an RSA one (RFC 7517 A.1).
        let ed = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let rsa = serde_json::json!({"kty": "RSA", "e": "AQAB", "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"});
        let with = |key: &serde_json::Value, extra: serde_json::Value| {
            let mut key = key.clone();
            key.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            key
        };
        for (what, key, expected) in [
            (
                "Ed25519 with kid",
                with(&ed, serde_json::json!({"kid": "e"})),
                Some(Algorithm::EdDSA),
            ),
            (
                "RSA without alg",
                with(&rsa, serde_json::json!({"kid": "r"})),
                Some(Algorithm::RS256),
            ),
            (
                "RSA with alg",
                with(&rsa, serde_json::json!({"kid": "r", "alg": "PS384"})),
                Some(Algorithm::PS384),
            ),
            ("no kid", rsa.clone(), None),
            (
                "an encryption key",
                with(&rsa, serde_json::json!({"kid": "r", "use": "enc"})),
                None,
            ),
            (
                "a symmetric key",
                serde_json::json!({"kty": "oct", "kid": "s", "k": "c2VjcmV0"}),
                None,
            ),
            (
                "RSA key published for HS256",
                with(&rsa, serde_json::json!({"kid": "r", "alg": "HS256"})),
                None,
            ),
        ] {
            let keys = signing_keys(&set(serde_json::json!({ "keys": [key] })));
            assert_eq!(
                keys.values().next().map(|k| k.algorithm),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn a_source_is_a_url_or_a_path() {
        assert_eq!(
            "https://id.shop/jwks.json".parse::<JwksSource>().unwrap(),
            JwksSource::Url("https://id.shop/jwks.json".into())
        );
        assert_eq!(
            "/etc/flashsale/jwt/jwks.json"
                .parse::<JwksSource>()
                .unwrap(),
            JwksSource::File("/etc/flashsale/jwt/jwks.json".into())
        );
    }
}
