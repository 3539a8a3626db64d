//! Who is buying: the `sub` of a JWT bearer token (HS256, RS256 with a
//! configured key, or any key of a JWKS by its `kid`), or, in the
//! development mode that a flag turns on, the `X-User-Id` header.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;

use super::error::ApiError;
use super::jwks::{JwksError, JwksSource, KeyRing, PUBLIC_KEY_ALGORITHMS};

/// How shoppers prove who they are.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Shared secret for HS256 tokens (at least [`MIN_HS256_SECRET`] bytes).
    pub hs256_secret: Option<Vec<u8>>,
    /// PEM public key for RS256 tokens.
    pub rs256_public_pem: Option<Vec<u8>>,
    /// A JWKS (file or URL): tokens naming one of its keys by `kid`.
    pub jwks: Option<JwksSource>,
    /// How often the JWKS is read again (and soon after an unknown `kid`).
    pub jwks_refresh: std::time::Duration,
    /// The `iss` every token must carry, if set.
    pub issuer: Option<String>,
    /// An `aud` every token must carry, if set (else `aud` is not checked:
    /// tokens of identity providers that always set it are accepted).
    pub audience: Option<String>,
    /// The longest a token may still be valid for (`exp` − now): a token
    /// minted to live for months is refused.
    pub max_lifetime: std::time::Duration,
    /// Accept `X-User-Id` without a token (development only).
    pub dev_identity: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            hs256_secret: None,
            rs256_public_pem: None,
            jwks: None,
            jwks_refresh: std::time::Duration::from_secs(300),
            issuer: None,
            audience: None,
            max_lifetime: std::time::Duration::from_secs(24 * 3600),
            dev_identity: false,
        }
    }
}

/// The shortest HS256 secret accepted (RFC 7518 §3.2: a key of at least
/// the hash's size, 256 bits).
pub const MIN_HS256_SECRET: usize = 32;

/// The identity check, built once.
pub struct Auth {
    hs256: Option<(DecodingKey, Validation)>,
    rs256: Option<(DecodingKey, Validation)>,
    jwks: Option<(Arc<KeyRing>, HashMap<Algorithm, Validation>)>,
    jwks_refresh: std::time::Duration,
    max_lifetime: i64,
    dev_identity: bool,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
}

/// The longest shopper id we store.
pub const MAX_SHOPPER_LEN: usize = 128;

/// The development identity header.
pub const DEV_IDENTITY_HEADER: &str = "x-user-id";

fn validation(algorithm: Algorithm, config: &AuthConfig) -> Validation {
    let mut v = Validation::new(algorithm);
    let mut required = vec!["exp", "sub"];
    if let Some(issuer) = &config.issuer {
        v.set_issuer(&[issuer]);
        required.push("iss");
    }
    match &config.audience {
        Some(audience) => {
            v.set_audience(&[audience]);
            required.push("aud");
        }
        None => v.validate_aud = false,
    }
    v.set_required_spec_claims(&required);
    v.validate_nbf = true;
    v.leeway = 5;
    v
}

/// A configuration that accepts nobody, or a key that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// The development identity together with JWT keys: anyone could
    /// skip the token and name any shopper.
    #[error(
        "the development identity (X-User-Id) cannot be on together with JWT keys: anyone could name any shopper; turn one off"
    )]
    DevIdentityWithKeys,
    /// No JWT key and no development mode.
    #[error(
        "no way to authenticate shoppers: give a JWT key (HS256 secret, RS256 public key or JWKS) or turn on the development identity mode"
    )]
    NoMethod,
    /// The JWKS could not be read at start.
    #[error(transparent)]
    Jwks(#[from] JwksError),
    /// The HS256 secret is too short to resist guessing.
    #[error(
        "the HS256 secret has {0} bytes; it needs at least {MIN_HS256_SECRET} (e.g. `openssl rand -base64 48`)"
    )]
    WeakSecret(usize),
    /// The RS256 key is not a PEM RSA public key.
    #[error("the JWT key is unusable: {0}")]
    BadKey(#[from] jsonwebtoken::errors::Error),
}

impl Auth {
    /// Builds the check from `config`.
    pub fn new(config: &AuthConfig) -> Result<Self, AuthSetupError> {
        let hs256 = match &config.hs256_secret {
            Some(secret) if secret.len() < MIN_HS256_SECRET => {
                return Err(AuthSetupError::WeakSecret(secret.len()));
            }
            Some(secret) => Some((
                DecodingKey::from_secret(secret)?,
                validation(Algorithm::HS256, config),
            )),
            None => None,
        };
        let rs256 = match &config.rs256_public_pem {
            Some(pem) => Some((
                DecodingKey::from_rsa_pem(pem)?,
                validation(Algorithm::RS256, config),
            )),
            None => None,
        };
        let jwks = config.jwks.clone().map(|source| {
            let validations = PUBLIC_KEY_ALGORITHMS
                .into_iter()
                .map(|algorithm| (algorithm, validation(algorithm, config)))
                .collect();
            (Arc::new(KeyRing::new(source)), validations)
        });
        let any_key = hs256.is_some() || rs256.is_some() || jwks.is_some();
        match (any_key, config.dev_identity) {
            (false, false) => return Err(AuthSetupError::NoMethod),
            (true, true) => return Err(AuthSetupError::DevIdentityWithKeys),
            (false, true) => tracing::warn!(
                "development identity on: X-User-Id is trusted as the shopper without a token; never expose this API"
            ),
            (true, false) => {}
        }
        Ok(Self {
            hs256,
            rs256,
            jwks,
            jwks_refresh: config.jwks_refresh,
            max_lifetime: i64::try_from(config.max_lifetime.as_secs()).unwrap_or(i64::MAX),
            dev_identity: config.dev_identity,
        })
    }

    /// Reads the JWKS, if one is configured, and keeps it fresh in the
    /// background (see [`KeyRing::spawn_refresher`]).
    pub async fn load_keys(&self) -> Result<(), AuthSetupError> {
        if let Some((ring, _)) = &self.jwks {
            let count = ring.refresh().await?;
            tracing::info!(keys = count, "JWKS read");
            ring.spawn_refresher(self.jwks_refresh);
        }
        Ok(())
    }

    /// Whether `X-User-Id` is accepted (the development sign-in).
    pub fn dev_identity(&self) -> bool {
        self.dev_identity
    }

    /// The shopper making the request.
    pub fn shopper(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    ApiError::unauthenticated("expected 'Authorization: Bearer <JWT>'")
                })?;
            return self.verify(token.trim());
        }
        if self.dev_identity
            && let Some(value) = headers.get(DEV_IDENTITY_HEADER)
        {
            let shopper = value
                .to_str()
                .map_err(|_| ApiError::unauthenticated("X-User-Id must be visible ASCII"))?;
            return checked_shopper(shopper.trim());
        }
        Err(ApiError::unauthenticated(
            "missing 'Authorization: Bearer <JWT>'",
        ))
    }

    fn verify(&self, token: &str) -> Result<String, ApiError> {
        let header = decode_header(token)
            .map_err(|_| ApiError::unauthenticated("the bearer token is not a JWT"))?;
        // Which algorithms are configured is none of the caller's business.
        let not_accepted =
            || ApiError::unauthenticated("the token's signing algorithm is not accepted");
        let published;
        let (key, validation) = match (&header.kid, &self.jwks) {
            (Some(kid), Some((ring, validations))) if header.alg != Algorithm::HS256 => {
                published = ring.key(kid).ok_or_else(|| {
                    ApiError::unauthenticated("the token's key (kid) is not known")
                })?;
                if published.algorithm != header.alg {
                    return Err(not_accepted());
                }
                let validation = validations.get(&header.alg).ok_or_else(not_accepted)?;
                (&published.key, validation)
            }
            _ => match header.alg {
                Algorithm::HS256 => self.hs256.as_ref(),
                Algorithm::RS256 => self.rs256.as_ref(),
                _ => None,
            }
            .map(|(key, validation)| (key, validation))
            .ok_or_else(not_accepted)?,
        };
        let claims = decode::<Claims>(token, key, validation)
            .map_err(|e| ApiError::unauthenticated(refusal(&e)))?
            .claims;
        if claims.exp - chrono::Utc::now().timestamp() > self.max_lifetime {
            return Err(ApiError::unauthenticated(
                "the token is valid for longer than this API accepts",
            ));
        }
        checked_shopper(&claims.sub)
    }
}

/// Why a token was refused, in words that name no key or algorithm.
fn refusal(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => "the token's issuer (iss) is not accepted".into(),
        ErrorKind::InvalidAudience => "the token's audience (aud) is not this API".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        _ => "the token is malformed".into(),
    }
}

fn checked_shopper(shopper: &str) -> Result<String, ApiError> {
    if shopper.is_empty()
        || shopper.len() > MAX_SHOPPER_LEN
        || !shopper.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(ApiError::unauthenticated(format!(
            "the shopper id must be 1 to {MAX_SHOPPER_LEN} visible ASCII characters"
        )));
    }
    Ok(shopper.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};

    const SECRET: &[u8] = b"a-test-secret-of-at-least-32-bytes";

    fn token(sub: &str, exp_offset: i64, secret: &[u8]) -> String {
        let exp = chrono::Utc::now().timestamp() + exp_offset;
        signed(serde_json::json!({ "sub": sub, "exp": exp }), secret)
    }

    fn signed(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    /// The development identity alone, or the HS256 key alone.
    fn auth(dev: bool) -> Auth {
        Auth::new(&AuthConfig {
            hs256_secret: (!dev).then(|| SECRET.to_vec()),
            dev_identity: dev,
            ..AuthConfig::default()
        })
        .unwrap()
    }

    /// (description, development mode on, headers, expected shopper).
    type Case = (
        &'static str,
        bool,
        Vec<(&'static str, String)>,
        Result<&'static str, ()>,
    );

    #[test]
    fn identity_table() {
        let bearer = |t: String| vec![("authorization", format!("Bearer {t}"))];
        let cases: Vec<Case> = vec![
            (
                "valid token",
                false,
                bearer(token("alice", 60, SECRET)),
                Ok("alice"),
            ),
            (
                "expired token",
                false,
                bearer(token("alice", -60, SECRET)),
                Err(()),
            ),
            (
                "wrong secret",
                false,
                bearer(token("alice", 60, b"other")),
                Err(()),
            ),
            ("not a jwt", false, bearer("abc.def".into()), Err(())),
            (
                "no scheme",
                false,
                vec![("authorization", token("a", 60, SECRET))],
                Err(()),
            ),
            (
                "empty subject",
                false,
                bearer(token("", 60, SECRET)),
                Err(()),
            ),
            (
                "huge subject",
                false,
                bearer(token(&"x".repeat(200), 60, SECRET)),
                Err(()),
            ),
            ("nothing", false, vec![], Err(())),
            (
                "dev header when off",
                false,
                vec![("x-user-id", "bob".into())],
                Err(()),
            ),
            (
                "dev header when on",
                true,
                vec![("x-user-id", "bob".into())],
                Ok("bob"),
            ),
            (
                "dev header with spaces inside",
                true,
                vec![("x-user-id", "b b".into())],
                Err(()),
            ),
            (
                "a token where only the dev header is taken",
                true,
                bearer(token("alice", 60, SECRET)),
                Err(()),
            ),
        ];
        for (what, dev, pairs, expected) in cases {
            let got = auth(dev).shopper(&headers(&pairs));
            match expected {
                Ok(shopper) => assert_eq!(got.unwrap(), shopper, "{what}"),
                Err(()) => assert_eq!(got.unwrap_err().code(), "UNAUTHENTICATED", "{what}"),
            }
        }
    }

    #[test]
    fn claims_table() {
        let now = chrono::Utc::now().timestamp();
        let strict = Auth::new(&AuthConfig {
            hs256_secret: Some(SECRET.to_vec()),
            issuer: Some("https://id.shop".into()),
            audience: Some("flashsale".into()),
            max_lifetime: std::time::Duration::from_secs(3600),
            ..AuthConfig::default()
        })
        .unwrap();
        let good = serde_json::json!({"sub": "ann", "exp": now + 600, "iss": "https://id.shop", "aud": "flashsale"});
        let with = |key: &str, value: serde_json::Value| {
            let mut claims = good.clone();
            claims[key] = value;
            claims
        };
        let without = |key: &str| {
            let mut claims = good.clone();
            claims.as_object_mut().unwrap().remove(key);
            claims
        };
        for (what, claims, expected) in [
            ("all good", good.clone(), Ok("ann")),
            (
                "aud among several",
                with("aud", serde_json::json!(["other", "flashsale"])),
                Ok("ann"),
            ),
            (
                "another issuer",
                with("iss", "https://evil".into()),
                Err("issuer (iss)"),
            ),
            ("no issuer", without("iss"), Err("no iss claim")),
            (
                "another audience",
                with("aud", "other".into()),
                Err("audience (aud)"),
            ),
            ("no audience", without("aud"), Err("no aud claim")),
            (
                "not yet valid",
                with("nbf", (now + 600).into()),
                Err("not valid yet"),
            ),
            (
                "lives too long",
                with("exp", (now + 7200).into()),
                Err("longer than this API accepts"),
            ),
            ("expired", with("exp", (now - 600).into()), Err("expired")),
        ] {
            let got = strict.verify(&signed(claims, SECRET));
            match expected {
                Ok(shopper) => assert_eq!(got.unwrap(), shopper, "{what}"),
                Err(words) => {
                    let message = got.unwrap_err().message().to_string();
                    assert!(message.contains(words), "{what}: {message}");
                }
            }
        }
        // Without a configured audience, a token that carries one passes.
        let lenient = auth(false);
        assert_eq!(lenient.verify(&signed(good, SECRET)).unwrap(), "ann");
    }

    #[test]
    fn refuses_a_short_hs256_secret() {
        assert!(matches!(
            Auth::new(&AuthConfig {
                hs256_secret: Some(b"short".to_vec()),
                ..AuthConfig::default()
            }),
            Err(AuthSetupError::WeakSecret(5))
        ));
    }

    #[test]
    fn refuses_the_dev_identity_with_keys() {
        assert!(matches!(
            Auth::new(&AuthConfig {
                hs256_secret: Some(SECRET.to_vec()),
                dev_identity: true,
                ..AuthConfig::default()
            }),
            Err(AuthSetupError::DevIdentityWithKeys)
        ));
    }

    #[test]
    fn refuses_a_configuration_that_accepts_nobody() {
        assert!(matches!(
            Auth::new(&AuthConfig::default()),
            Err(AuthSetupError::NoMethod)
        ));
    }

    #[test]
    fn refuses_an_algorithm_without_a_key() {
        let rs_only_token = {
            let mut header = Header::new(Algorithm::HS512);
            header.typ = Some("JWT".into());
            encode(
                &header,
                &serde_json::json!({ "sub": "a", "exp": chrono::Utc::now().timestamp() + 60 }),
                &EncodingKey::from_secret(SECRET).unwrap(),
            )
            .unwrap()
        };
        let got = auth(false).shopper(&headers(&[(
            "authorization",
            format!("Bearer {rs_only_token}"),
        )]));
        let refused = got.unwrap_err();
        assert_eq!(refused.code(), "UNAUTHENTICATED");
        // It names no algorithm: neither the token's nor the configured ones.
        let message = refused.message().to_string();
        assert!(
            !message.contains("HS") && !message.contains("RS"),
            "{message}"
        );
    }
}
