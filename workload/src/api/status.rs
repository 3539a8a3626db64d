//! `GET /v1/sales/{sale}/status`: the sale's phase, window, the server's clock
//! and a coarse stock level, for anyone and any cache — answered from the
//! API's memory (the catalog), never from Redis, so a million page loads cost
//! the store nothing.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::domain::status::{Phase, StockLevel, etag, none_match_hits, status_of};

/// A sale's status: a few hundred bytes, the same for everyone.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleStatusBody {
    /// The sale's name.
    pub sale: String,
    /// `upcoming`, `live`, `paused`, `soldOut` or `ended`.
    #[schema(schema_with = phase_schema)]
    pub state: Phase,
    /// Window start.
    pub starts_at: DateTime<Utc>,
    /// Window end (exclusive).
    pub ends_at: DateTime<Utc>,
    /// The server's clock when the body was made: a page counts down on
    /// this (plus the `Age` a cache adds), not on the shopper's clock.
    pub server_time: DateTime<Utc>,
    /// `plenty`, `few` (a tenth of the stock or less) or `none`; never the
    /// count.
    #[schema(schema_with = stock_schema)]
    pub stock: StockLevel,
}

fn words(values: &[&'static str]) -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

fn phase_schema() -> utoipa::openapi::Object {
    words(&["upcoming", "live", "paused", "soldOut", "ended"])
}

fn stock_schema() -> utoipa::openapi::Object {
    words(&["plenty", "few", "none"])
}

/// A sale's status, cacheable for a second by anyone.
#[utoipa::path(
    get,
    path = "/v1/sales/{sale}/status",
    params(
        ("sale" = String, Path, description = "The FlashSale's name"),
        ("If-None-Match" = Option<String>, Header, description = "An ETag this route answered"),
    ),
    responses(
        (status = 200, description = "The status, with `Cache-Control: public, max-age=1` and a weak `ETag`", body = SaleStatusBody),
        (status = 304, description = "The status still matches `If-None-Match`"),
        (status = 404, description = "No such sale (SALE_NOT_FOUND)", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, with Retry-After", body = ErrorBody),
    ),
    tag = "sales"
)]
pub async fn get_status(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let view = state
        .catalog
        .get(&name)
        .ok_or_else(|| ApiError::sale_not_found(&name))?;
    let now = Utc::now();
    let status = status_of(
        &view.config,
        view.meta.as_ref(),
        state.catalog.remaining(&view),
        now.timestamp_millis(),
    );
    let tag = etag(&view.config, status);
    Ok(revalidated(&headers, &tag, "public, max-age=1", || {
        Json(SaleStatusBody {
            sale: view.config.sale.name.clone(),
            state: status.phase,
            starts_at: view.config.start,
            ends_at: view.config.end,
            server_time: now,
            stock: status.stock,
        })
        .into_response()
    }))
}

/// `body()` with `Cache-Control: cache_control` and the ETag `tag`, or an
/// empty 304 with both when `If-None-Match` names the tag.
pub(super) fn revalidated(
    headers: &HeaderMap,
    tag: &str,
    cache_control: &'static str,
    body: impl FnOnce() -> Response,
) -> Response {
    let hit = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| none_match_hits(v, tag));
    let mut response = if hit {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    if let Ok(value) = HeaderValue::from_str(tag) {
        headers.insert(header::ETAG, value);
    }
    response
}
