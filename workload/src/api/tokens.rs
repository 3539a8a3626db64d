//! Purchase tokens (`spec.antiBot`): `GET /v1/sales/{sale}/token` issues one
//! to a signed-in shopper from the start of the window; a purchase of a sale
//! that requires them shows it once, in `Purchase-Token`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::{AppState, ClientIp};
use crate::catalog::SaleView;
use crate::domain::purchase_token::{self, TOKEN_HEADER, TokenClaims};
use crate::intake::Refusal;
use crate::redis::store::TokenUse;

/// A purchase token.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseToken {
    /// Send it once, in the `Purchase-Token` header of the purchase.
    pub token: String,
    /// It is refused from this instant on.
    pub expires_at: DateTime<Utc>,
}

fn not_configured() -> ApiError {
    ApiError::unavailable("purchase tokens are not configured on this API; nothing was reserved")
}

/// Get a purchase token for a sale.
#[utoipa::path(
    get,
    path = "/v1/sales/{sale}/token",
    params(("sale" = String, Path, description = "The FlashSale's name")),
    responses(
        (status = 200, description = "A token for this shopper and sale, single-use", body = PurchaseToken),
        (status = 400, description = "INVALID_REQUEST: a shopper id too long for a token", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such sale", body = ErrorBody),
        (status = 403, description = "QUEUE_REQUIRED: the sale admits through its queue, which gives the tokens", body = ErrorBody),
        (status = 409, description = "NOT_STARTED or ENDED: tokens are issued within the window only", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY (too many requests in flight) or UNAVAILABLE (tokens not configured)", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "sales"
)]
pub async fn issue(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<PurchaseToken>, ApiError> {
    state.limits.check_client(ip)?;
    let shopper = state.auth.shopper(&headers)?;
    state.limits.check_shopper(&shopper)?;
    let view = state
        .catalog
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no sale named {name:?}")))?;
    if view.config.admission.is_some() {
        return Err(ApiError::queue_required(&view.config.sale.name));
    }
    let secret = state
        .purchase_token_secret
        .as_deref()
        .ok_or_else(not_configured)?;
    let now = Utc::now();
    if now < view.config.start {
        return Err(ApiError::from(Refusal::NotStarted));
    }
    if now >= view.config.end {
        return Err(ApiError::from(Refusal::Ended));
    }
    let token = mint(&view, shopper.clone(), secret, now)?;
    count_issued(&state, &view, shopper);
    Ok(Json(token))
}

/// Counts the token for the risk scorer's tokens-per-shopper rule, without
/// making the shopper wait: a count lost to a slow Redis only weakens one
/// signal, a token refused for it would refuse a purchase.
fn count_issued(state: &AppState, view: &SaleView, shopper: String) {
    if view.config.risk.is_none() {
        return;
    }
    let store = state.intake.store().clone();
    let (sale, shards) = (view.config.sale.clone(), view.config.shards);
    tokio::spawn(async move {
        let counted = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            store.count_token_issued(&sale, shards, &shopper),
        )
        .await;
        if !matches!(counted, Ok(Ok(()))) {
            tracing::debug!(%sale, "a purchase token was not counted for the risk scorer");
        }
    });
}

/// A purchase token for `shopper` in `view`'s sale, from `now`. A sale that
/// needs no token still issues one (with the CRD's default lifetime): a
/// client may always fetch one before it buys.
pub(super) fn mint(
    view: &SaleView,
    shopper: String,
    secret: &[u8],
    now: DateTime<Utc>,
) -> Result<PurchaseToken, ApiError> {
    if !purchase_token::fits(&shopper) {
        return Err(ApiError::invalid(
            "the shopper id is too long for a purchase token",
        ));
    }
    let ttl = token_ttl(view);
    let expires_at = now + chrono::Duration::from_std(ttl).map_err(|_| ApiError::internal())?;
    let claims = TokenClaims {
        sale_id: view.config.id,
        shopper,
        nonce: Uuid::new_v4(),
        expires_ms: expires_at.timestamp_millis(),
    };
    Ok(PurchaseToken {
        token: claims.sign(secret),
        expires_at,
    })
}

/// How long the sale's tokens are good for once issued.
fn token_ttl(view: &SaleView) -> std::time::Duration {
    view.config
        .purchase_token_ttl
        .unwrap_or(purchase_token::DEFAULT_TTL)
}

/// For a sale that requires tokens: checks the purchase's token (signed for
/// this shopper and sale, not expired by this API's clock) and returns what
/// the purchase script uses up as it reserves: single use is decided there,
/// atomically with the reservation (a retry with the same `Idempotency-Key`
/// is answered before the token is looked at), with when the token was
/// issued (Unix ms, for the risk scorer).
pub(super) fn shown(
    state: &AppState,
    view: &SaleView,
    shopper: &str,
    headers: &HeaderMap,
) -> Result<Option<(TokenUse, i64)>, ApiError> {
    if view.config.purchase_token_ttl.is_none() && view.config.admission.is_none() {
        return Ok(None);
    }
    let token = headers
        .get(TOKEN_HEADER)
        .ok_or_else(|| {
            let from = if view.config.admission.is_some() {
                "its queue (POST /v1/sales/{sale}/queue) gives one when your turn comes"
            } else {
                "GET /v1/sales/{sale}/token"
            };
            ApiError::token_required(format!(
                "this sale needs a purchase token: {}, then send it in Purchase-Token",
                from.replace("{sale}", &view.config.sale.name)
            ))
        })?
        .to_str()
        .map_err(|_| ApiError::token_invalid("the purchase token is malformed"))?;
    let secret = state
        .purchase_token_secret
        .as_deref()
        .ok_or_else(not_configured)?;
    let now_ms = Utc::now().timestamp_millis();
    let claims = purchase_token::verify(secret, token.trim(), view.config.id, shopper, now_ms)
        .map_err(|e| ApiError::token_invalid(e.to_string()))?;
    let issued_ms = claims.expires_ms - token_ttl(view).as_millis() as i64;
    let token = TokenUse {
        nonce: claims.nonce,
        remember: purchase_token::remember_used(claims.expires_ms, now_ms),
    };
    Ok(Some((token, issued_ms)))
}
