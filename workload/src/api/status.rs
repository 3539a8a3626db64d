//! `GET /v1/sales/{sale}/status`: the sale's phase, window, the server's clock
//! and a coarse stock level, for anyone and any cache — answered from the
//! API's memory (the catalog), never from Redis, so a million page loads cost
//! the store nothing.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::catalog::SaleView;
use crate::domain::status::{Phase, SaleStatus, StockLevel, etag, none_match_hits, status_of};

/// What a status says besides the clock: the same for everyone until the
/// phase or the stock level changes.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusFacts {
    /// The sale's name.
    pub sale: String,
    /// `upcoming`, `live`, `paused`, `soldOut` or `ended`.
    #[schema(schema_with = phase_schema)]
    pub state: Phase,
    /// Window start.
    pub starts_at: DateTime<Utc>,
    /// Window end (exclusive).
    pub ends_at: DateTime<Utc>,
    /// `plenty`, `few` (a tenth of the stock or less) or `none`; never the
    /// count.
    #[schema(schema_with = stock_schema)]
    pub stock: StockLevel,
}

/// A sale's status: a few hundred bytes, the same for everyone but the
/// clock.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleStatusBody {
    /// The sale and its state.
    #[serde(flatten)]
    pub facts: StatusFacts,
    /// The server's clock when the body was made: a page counts down on
    /// this (plus the `Age` a cache adds), not on the shopper's clock.
    pub server_time: DateTime<Utc>,
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
    let head = state.status_heads.get(&view, status);
    Ok(revalidated(
        &headers,
        &head.etag,
        "public, max-age=1",
        || {
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                head.body_at(now),
            )
                .into_response()
        },
    ))
}

/// A status's ETag and its body up to the clock, made once per sale
/// configuration, phase and stock level: the status is the route a storm
/// reads most, and these are most of its work.
pub struct StatusHead {
    etag: HeaderValue,
    /// The facts' JSON without its closing brace.
    json: Vec<u8>,
}

impl StatusHead {
    fn new(view: &SaleView, status: SaleStatus) -> Self {
        let facts = StatusFacts {
            sale: view.config.sale.name.clone(),
            state: status.phase,
            starts_at: view.config.start,
            ends_at: view.config.end,
            stock: status.stock,
        };
        let mut json = serde_json::to_vec(&facts).unwrap_or_else(|_| b"{}".to_vec());
        json.pop();
        Self {
            etag: HeaderValue::from_str(&etag(&view.config, status))
                .unwrap_or_else(|_| HeaderValue::from_static("W/\"\"")),
            json,
        }
    }

    /// The body of [`SaleStatusBody`] with the clock at `now`.
    fn body_at(&self, now: DateTime<Utc>) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.json.len() + 48);
        body.extend_from_slice(&self.json);
        if body.len() > 1 {
            body.push(b',');
        }
        body.extend_from_slice(b"\"serverTime\":");
        let _ = serde_json::to_writer(&mut body, &now);
        body.push(b'}');
        body
    }
}

/// Which sale configuration a head was made for, and for what status.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct HeadKey {
    sale: Uuid,
    generation: i64,
    window: (DateTime<Utc>, DateTime<Utc>),
    status: SaleStatus,
}

/// The heads made so far, a few per sale: those of a sale's earlier
/// configurations are dropped when its next one is made.
#[derive(Default)]
pub struct StatusHeads(RwLock<HashMap<HeadKey, Arc<StatusHead>>>);

impl StatusHeads {
    fn get(&self, view: &SaleView, status: SaleStatus) -> Arc<StatusHead> {
        let key = HeadKey {
            sale: view.config.id,
            generation: view.config.generation,
            window: (view.config.start, view.config.end),
            status,
        };
        if let Some(head) = self.0.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return head.clone();
        }
        let head = Arc::new(StatusHead::new(view, status));
        let mut heads = self.0.write().unwrap_or_else(|p| p.into_inner());
        heads.retain(|k, _| {
            k.sale != key.sale || (k.generation, k.window) == (key.generation, key.window)
        });
        heads.insert(key, head.clone());
        head
    }
}

/// `body()` with `Cache-Control: cache_control` and the ETag `tag`, or an
/// empty 304 with both when `If-None-Match` names the tag.
pub(super) fn revalidated(
    headers: &HeaderMap,
    tag: &HeaderValue,
    cache_control: &'static str,
    body: impl FnOnce() -> Response,
) -> Response {
    let hit = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| tag.to_str().is_ok_and(|tag| none_match_hits(v, tag)));
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
    headers.insert(header::ETAG, tag.clone());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::sale::{RedisLife, SaleConfig};

    #[test]
    fn the_head_and_the_clock_make_the_documented_body() {
        let view = SaleView {
            config: SaleConfig::example(),
            meta: None,
            remaining: 0,
            life: RedisLife {
                ..RedisLife::default()
            },
        };
        let status = SaleStatus {
            phase: Phase::Live,
            stock: StockLevel::Few,
        };
        let now = Utc::now();
        let body = StatusHead::new(&view, status).body_at(now);
        let documented = SaleStatusBody {
            facts: StatusFacts {
                sale: view.config.sale.name.clone(),
                state: status.phase,
                starts_at: view.config.start,
                ends_at: view.config.end,
                stock: status.stock,
            },
            server_time: now,
        };
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            serde_json::to_value(&documented).unwrap()
        );
    }
}
