//! Who is buying: the `sub` of a JWT bearer token (HS256 or RS256), or, in
//! the development mode that a flag turns on, the `X-User-Id` header.

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;

use super::error::ApiError;

/// How shoppers prove who they are.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Shared secret for HS256 tokens.
    pub hs256_secret: Option<Vec<u8>>,
    /// PEM public key for RS256 tokens.
    pub rs256_public_pem: Option<Vec<u8>>,
    /// Accept `X-User-Id` without a token (development only).
    pub dev_identity: bool,
}

/// The identity check, built once.
pub struct Auth {
    hs256: Option<(DecodingKey, Validation)>,
    rs256: Option<(DecodingKey, Validation)>,
    dev_identity: bool,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

/// The longest shopper id we store.
pub const MAX_SHOPPER_LEN: usize = 128;

/// The development identity header.
pub const DEV_IDENTITY_HEADER: &str = "x-user-id";

fn validation(algorithm: Algorithm) -> Validation {
    let mut v = Validation::new(algorithm);
    v.set_required_spec_claims(&["exp", "sub"]);
    v.leeway = 5;
    v
}

/// A configuration that accepts nobody, or a key that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// No JWT key and no development mode.
    #[error(
        "no way to authenticate shoppers: give a JWT key (HS256 secret or RS256 public key) or turn on the development identity mode"
    )]
    NoMethod,
    /// The HS256 secret is empty or the RS256 key is not a PEM RSA public key.
    #[error("the JWT key is unusable: {0}")]
    BadKey(#[from] jsonwebtoken::errors::Error),
}

impl Auth {
    /// Builds the check from `config`.
    pub fn new(config: &AuthConfig) -> Result<Self, AuthSetupError> {
        let hs256 = match &config.hs256_secret {
            Some(secret) => Some((
                DecodingKey::from_secret(secret)?,
                validation(Algorithm::HS256),
            )),
            None => None,
        };
        let rs256 = match &config.rs256_public_pem {
            Some(pem) => Some((
                DecodingKey::from_rsa_pem(pem)?,
                validation(Algorithm::RS256),
            )),
            None => None,
        };
        if hs256.is_none() && rs256.is_none() && !config.dev_identity {
            return Err(AuthSetupError::NoMethod);
        }
        Ok(Self {
            hs256,
            rs256,
            dev_identity: config.dev_identity,
        })
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
        let (key, validation) = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref(),
            Algorithm::RS256 => self.rs256.as_ref(),
            _ => None,
        }
        .ok_or_else(|| {
            ApiError::unauthenticated(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            ))
        })?;
        let claims = decode::<Claims>(token, key, validation)
            .map_err(|e| ApiError::unauthenticated(format!("invalid token: {e}")))?
            .claims;
        checked_shopper(&claims.sub)
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

    const SECRET: &[u8] = b"test-secret";

    fn token(sub: &str, exp_offset: i64, secret: &[u8]) -> String {
        let exp = chrono::Utc::now().timestamp() + exp_offset;
        encode(
            &Header::new(Algorithm::HS256),
            &serde_json::json!({ "sub": sub, "exp": exp }),
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

    fn auth(dev: bool) -> Auth {
        Auth::new(&AuthConfig {
            hs256_secret: Some(SECRET.to_vec()),
            rs256_public_pem: None,
            dev_identity: dev,
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
                "token wins over dev header",
                true,
                vec![
                    (
                        "authorization",
                        format!("Bearer {}", token("alice", 60, SECRET)),
                    ),
                    ("x-user-id", "bob".into()),
                ],
                Ok("alice"),
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
        assert_eq!(got.unwrap_err().code(), "UNAUTHENTICATED");
    }
}
