//! `GET /v1/sales/{sale}`: public sale information, cacheable for a second.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::domain::sale::public_state;

/// What anyone may know about a sale.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleInfo {
    /// The sale's name.
    pub sale: String,
    /// The product.
    pub sku: String,
    /// Scheduled, Warm, Live, Paused, SoldOut or Ended.
    pub state: String,
    /// Window start.
    pub start: DateTime<Utc>,
    /// Window end (exclusive).
    pub end: DateTime<Utc>,
    /// Units one shopper may hold.
    pub purchase_limit: i64,
    /// Units still purchasable (as of at most a second ago).
    pub stock_remaining: i64,
    /// A purchase needs a token from `GET /v1/sales/{sale}/token`.
    pub purchase_token_required: bool,
}

/// Sale information.
#[utoipa::path(
    get,
    path = "/v1/sales/{sale}",
    params(("sale" = String, Path, description = "The FlashSale's name")),
    responses(
        (status = 200, description = "The sale", body = SaleInfo),
        (status = 404, description = "No such sale (NOT_FOUND)", body = ErrorBody),
        (status = 429, description = "Rate limited (RATE_LIMITED)", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, with Retry-After", body = ErrorBody),
    ),
    tag = "sales"
)]
pub async fn get_sale(
    State(state): State<AppState>,
    super::ClientIp(ip): super::ClientIp,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    state.limits.check_anonymous(ip)?;
    let view = state
        .catalog
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no sale named {name:?}")))?;
    let now_ms = Utc::now().timestamp_millis();
    let remaining = view.remaining.max(0);
    let info = SaleInfo {
        sale: view.config.sale.name.clone(),
        sku: view.config.sku.clone(),
        state: format!(
            "{:?}",
            public_state(&view.config, view.meta.as_ref(), remaining, now_ms)
        ),
        start: view.config.start,
        end: view.config.end,
        purchase_limit: view.config.purchase_limit,
        stock_remaining: remaining,
        purchase_token_required: view.config.purchase_token_ttl.is_some(),
    };
    let mut response = Json(info).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=1"),
    );
    Ok(response)
}
