//! Purchases and orders: `POST /v1/sales/{sale}/orders`, `GET /v1/orders/{id}`,
//! `POST /v1/orders/{id}/cancel`.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::{AppState, ClientIp};
use crate::domain::order::{
    ORDER_TIME_SLACK, OrderEvent, OrderStatus, may_be_shoppers, may_name_an_order,
};
use crate::domain::purchase::ReservationState;
use crate::domain::risk::{PurchaseSignals, network_of};
use crate::domain::shard::home_shard;
use crate::intake::{Purchase, Refusal};
use crate::janitor::return_to_redis;
use crate::orders::order::{self as order_rows, EventOutcome};

/// Most units one request may ask for, whatever the sale's limit.
pub const MAX_QUANTITY: i64 = 1000;
/// Longest accepted `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 128;

/// A purchase request. An empty body buys one unit; any other field, or
/// anything but a JSON object, is refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurchaseRequest {
    /// Units to buy, 1 to 1000 (and within the sale's per-shopper limit).
    #[serde(default = "one", deserialize_with = "whole_number")]
    #[schema(minimum = 1, maximum = 1000)]
    pub quantity: i64,
}

fn one() -> i64 {
    1
}

/// An integer as JSON Schema means it: `5.0` is the integer 5 (serde alone
/// refuses it), `5.5` is not an integer.
fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    use serde::de::Error;
    match serde_json::Number::deserialize(deserializer)? {
        n if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
        n => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < i64::MAX as f64 => Ok(f as i64),
            _ => Err(D::Error::custom(format!("{n} is not a whole number"))),
        },
    }
}

/// An accepted purchase.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseAccepted {
    /// Follow it at `/v1/orders/{orderId}`.
    pub order_id: Uuid,
    /// Always PENDING: accepted, not yet persisted.
    pub status: &'static str,
}

/// An order, as its owner sees it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    /// The order id.
    pub order_id: Uuid,
    /// The sale's name.
    pub sale: String,
    /// Units.
    pub quantity: i64,
    /// PENDING, UNPAID, PAID, CANCELLED, REFUNDED or FAILED.
    #[schema(value_type = String, example = "PENDING")]
    pub status: OrderStatus,
    /// When the purchase was accepted.
    pub created_at: DateTime<Utc>,
    /// Last status change.
    pub updated_at: DateTime<Utc>,
    /// Why it failed (FAILED only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Set when the sale's risk checks acted on it: `RISK` (cancelled, or
    /// refunded when paid, for risk; its units went back on sale) or
    /// `HELD_FOR_REVIEW` (kept; the merchant looks at it before shipping).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "RISK")]
    pub risk: Option<&'static str>,
}

/// A request body as a JSON object with known fields only: serde alone
/// reads a struct from an array (`[5]` would buy five) and ignores unknown
/// fields (`{"quantiy": 5}` would buy one). An empty body is `{}`.
pub(super) fn json_object<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    shape: &str,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::unreadable_body(&e))?;
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::invalid(format!("the body is not JSON ({e}); expected {shape}"))
        })?
    };
    if !value.is_object() {
        return Err(ApiError::invalid(format!(
            "the body must be a JSON object {shape}, not {}",
            match value {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::invalid(format!("the body must be {shape}: {e}")))
}

/// The body of a route that takes none: empty or `{}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoFields {}

fn parse_quantity(body: Result<Bytes, BytesRejection>) -> Result<i64, ApiError> {
    let quantity = json_object::<PurchaseRequest>(body, "{\"quantity\": n}")?.quantity;
    if !(1..=MAX_QUANTITY).contains(&quantity) {
        return Err(ApiError::invalid(format!(
            "quantity must be between 1 and {MAX_QUANTITY}"
        )));
    }
    Ok(quantity)
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key)
            if !key.is_empty()
                && key.len() <= MAX_IDEMPOTENCY_KEY_LEN
                && key.chars().all(|c| c.is_ascii_graphic()) =>
        {
            Ok(Some(key.to_string()))
        }
        _ => Err(ApiError::invalid(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"
        ))),
    }
}

/// Buy units of a sale.
#[utoipa::path(
    post,
    path = "/v1/sales/{sale}/orders",
    params(
        ("sale" = String, Path, description = "The FlashSale's name"),
        ("Idempotency-Key" = Option<String>, Header, description = "A retry with the same key returns the first answer", min_length = 1, max_length = 128, pattern = "^[!-~]+$"),
        ("Purchase-Token" = Option<String>, Header, description = "Required when the sale asks for it (purchaseTokenRequired): from GET /v1/sales/{sale}/token; buys once"),
    ),
    request_body(content = PurchaseRequest, description = "Defaults to one unit"),
    responses(
        (status = 202, description = "Accepted; the order is PENDING", body = PurchaseAccepted,
         headers(("Location" = String, description = "/v1/orders/{orderId}"))),
        (status = 400, description = "INVALID_REQUEST", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 403, description = "TOKEN_REQUIRED or TOKEN_INVALID: the sale needs an unused purchase token of this shopper", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such sale", body = ErrorBody),
        (status = 409, description = "NOT_STARTED, ENDED, SOLD_OUT, LIMIT_EXCEEDED or PAUSED", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: a body over 1 KiB", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "NOT_WARMED, BUSY or UNAVAILABLE (nothing was reserved), or OUTCOME_UNKNOWN: the order (orderId) may or may not be accepted; retry with the same Idempotency-Key, or follow the order", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "orders"
)]
pub async fn purchase(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // The sale, once the name is known to be one: only then a metric label.
    let mut known = None;
    let outcome = async {
        state.limits.check_client(ip)?;
        // A sold-out sale is refused before anything costs: no identity, no
        // body, no task (what it tells is public on the status route). A
        // retry with a key still goes to Redis for its first answer.
        if let Some(view) = state.catalog.get(&name)
            && !headers.contains_key("idempotency-key")
            && state.catalog.is_sold_out(&view)
        {
            known = Some(view.config.sale.clone());
            return Err(Refusal::SoldOut.into());
        }
        let shopper = state.auth.shopper(&headers)?;
        state.limits.check_shopper(&shopper)?;
        let quantity = parse_quantity(body)?;
        let key = idempotency_key(&headers)?;
        let view = state
            .catalog
            .get(&name)
            .ok_or_else(|| ApiError::not_found(format!("no sale named {name:?}")))?;
        known = Some(view.config.sale.clone());
        let token = super::tokens::shown(&state, &view, &shopper, &headers)?;
        let signals = PurchaseSignals {
            client_network: Some(network_of(ip)),
            token_issued_ms: token.map(|(_, issued_ms)| issued_ms),
        };
        // Its own task: a shopper who hangs up must not stop a purchase
        // half-way (units taken from a donor shard, or reserved, and left so).
        let (intake, catalog) = (state.intake.clone(), state.catalog.clone());
        let decided = tokio::spawn(async move {
            let request = Purchase {
                shopper: &shopper,
                quantity,
                idempotency_key: key.as_deref(),
                token: token.map(|(token, _)| token),
                signals,
            };
            intake.purchase(&catalog, &view, &request).await
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "purchase task failed");
            ApiError::internal()
        })?;
        Ok::<_, ApiError>(decided?)
    }
    .await;
    match outcome {
        Ok(accepted) => {
            state.metrics.purchase(
                known.as_ref(),
                if accepted.replay {
                    "REPLAY"
                } else {
                    "ACCEPTED"
                },
            );
            let location = format!("/v1/orders/{}", accepted.order_id);
            let mut response = (
                StatusCode::ACCEPTED,
                Json(PurchaseAccepted {
                    order_id: accepted.order_id,
                    status: OrderStatus::Pending.as_str(),
                }),
            )
                .into_response();
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            Ok(response)
        }
        Err(e) => {
            state.metrics.purchase(known.as_ref(), e.code());
            Err(e)
        }
    }
}

/// An order's status; only its owner sees it (others get 404).
#[utoipa::path(
    get,
    path = "/v1/orders/{orderId}",
    params(("orderId" = Uuid, Path, description = "The order id")),
    responses(
        (status = 200, description = "The order", body = OrderView),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such order for this shopper", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, or UNAVAILABLE: a dependency is down or the request took too long; with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "orders"
)]
pub async fn get_order(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(order_id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<OrderView>, ApiError> {
    let (shopper, order_id) = order_caller(&state, ip, &order_id, &headers)?;
    find_order(&state, &shopper, order_id)
        .await?
        .map(Json)
        .ok_or_else(no_such_order)
}

/// Cancel an order: CANCELLED if unpaid, REFUNDED if paid; its units go back
/// to the sale. Idempotent.
#[utoipa::path(
    post,
    path = "/v1/orders/{orderId}/cancel",
    params(("orderId" = Uuid, Path, description = "The order id")),
    responses(
        (status = 200, description = "The order, CANCELLED or REFUNDED", body = OrderView),
        (status = 400, description = "INVALID_REQUEST: a body other than {}", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND", body = ErrorBody),
        (status = 409, description = "ORDER_PENDING (with Retry-After) or ORDER_NOT_CANCELLABLE", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: a body over 1 KiB", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, or UNAVAILABLE: a dependency is down or the request took too long; with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "orders"
)]
pub async fn cancel(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(order_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<OrderView>, ApiError> {
    json_object::<NoFields>(body, "{} (or no body)")?;
    cancel_order(&state, ip, &order_id, &headers).await
}

/// The shopper behind an order route and the order id, after the rate
/// limits: a made-up id is refused without I/O.
pub(super) fn order_caller(
    state: &AppState,
    ip: std::net::IpAddr,
    order_id: &str,
    headers: &HeaderMap,
) -> Result<(String, Uuid), ApiError> {
    state.limits.check_client(ip)?;
    let shopper = state.auth.shopper(headers)?;
    state.limits.check_shopper(&shopper)?;
    Ok((shopper, known_order_id(state, order_id)?))
}

/// Why an order not in the database cannot change: it is being persisted
/// (retry soon), it failed (`refused`), or there is no such order.
pub(super) async fn not_persisted(
    state: &AppState,
    shopper: &str,
    order_id: Uuid,
    refused: impl FnOnce(OrderStatus) -> ApiError,
) -> ApiError {
    match find_order(state, shopper, order_id).await {
        Ok(Some(view)) if view.status == OrderStatus::Failed => refused(view.status),
        Ok(Some(_)) => ApiError::order_pending(),
        Ok(None) => no_such_order(),
        Err(e) => e,
    }
}

/// Cancels the shopper's order and answers with the order.
async fn cancel_order(
    state: &AppState,
    ip: std::net::IpAddr,
    order_id: &str,
    headers: &HeaderMap,
) -> Result<Json<OrderView>, ApiError> {
    let (shopper, order_id) = order_caller(state, ip, order_id, headers)?;
    let refused = |status: OrderStatus| {
        ApiError::order_conflict(
            "ORDER_NOT_CANCELLABLE",
            format!("a {} order cannot be cancelled", status.as_str()),
        )
    };
    let outcome = state
        .order_desk
        .apply(order_id, &shopper, OrderEvent::Cancel)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "order change: database unavailable");
            ApiError::unavailable("orders are unreachable right now")
        })?;
    match outcome {
        EventOutcome::Changed { returned, .. } => {
            return_to_redis(&state.db, state.intake.store(), returned.as_slice()).await;
        }
        EventOutcome::AlreadyDone(_) => {}
        EventOutcome::Illegal(status) => return Err(refused(status)),
        // Not persisted: pending in Redis (retry soon), or it failed.
        EventOutcome::NotFound => {
            return Err(not_persisted(state, &shopper, order_id, refused).await);
        }
    }
    find_order(state, &shopper, order_id)
        .await?
        .map(Json)
        .ok_or_else(no_such_order)
}

pub(super) fn no_such_order() -> ApiError {
    ApiError::not_found("no such order")
}

/// An order id that can name an order of the namespace: a UUIDv7 minted in
/// one of its sales' windows. A made-up one is refused here, without a
/// query: a flood of them must not fill the database pool.
fn known_order_id(state: &AppState, text: &str) -> Result<Uuid, ApiError> {
    let id: Uuid = text.parse().map_err(|_| no_such_order())?;
    if state.catalog.may_hold_order(id) {
        Ok(id)
    } else {
        Err(no_such_order())
    }
}

/// The shopper's order, persisted (database) or still pending (Redis).
pub async fn find_order(
    state: &AppState,
    shopper: &str,
    order_id: Uuid,
) -> Result<Option<OrderView>, ApiError> {
    let persisted = order_rows::find(&state.db, order_id).await.map_err(|e| {
        tracing::warn!(error = %e, "order lookup: database unavailable");
        ApiError::unavailable("orders are unreachable right now")
    })?;
    if let Some(order) = persisted {
        return Ok((order.shopper == shopper).then_some(OrderView {
            order_id: order.id,
            sale: order.sale_name,
            quantity: order.quantity,
            status: order.status,
            created_at: order.accepted_at,
            updated_at: order.updated_at,
            failure_reason: order.failure_reason,
            risk: match order.risk_verdict.as_deref() {
                Some("CANCEL") => Some("RISK"),
                Some("REVIEW") => Some("HELD_FOR_REVIEW"),
                _ => None,
            },
        }));
    }
    // Not persisted yet: the reservation sits in the shopper's home shard of
    // one of the namespace's sales.
    let id_text = order_id.to_string();
    for view in state.catalog.all() {
        let shard = home_shard(shopper, view.config.shards);
        let reservation = state
            .intake
            .store()
            .reservation(&view.config.sale, shard, &id_text)
            .await
            .map_err(|_| ApiError::unavailable("orders are unreachable right now"))?;
        let Some(reservation) = reservation else {
            continue;
        };
        // Another shopper's order: not this one's to see.
        if reservation.shopper != shopper {
            return Ok(None);
        }
        let created = DateTime::from_timestamp_millis(reservation.created_ms).unwrap_or_default();
        let (status, failure_reason) = match reservation.state {
            // Claimed but not in the database: the consumer is persisting it.
            ReservationState::Reserved
            | ReservationState::Acknowledged
            | ReservationState::Claimed => (OrderStatus::Pending, None),
            ReservationState::Released => (
                OrderStatus::Failed,
                Some("the order could not be confirmed; its stock was returned".to_string()),
            ),
        };
        return Ok(Some(OrderView {
            order_id,
            sale: view.config.sale.name.clone(),
            quantity: reservation.quantity,
            status,
            created_at: created,
            updated_at: created,
            failure_reason,
            risk: None,
        }));
    }
    // Accepted during a sale whose Redis state was lost, not persisted yet:
    // it may be on its way; never tell its shopper it does not exist.
    let minted_ms = order_id.get_timestamp().map(|t| {
        let (secs, nanos) = t.to_unix();
        secs as i64 * 1000 + i64::from(nanos / 1_000_000)
    });
    let recovering = state.catalog.all().into_iter().any(|view| {
        let lost = view.life.lost_since.is_some() || (view.life.opened && view.meta.is_none());
        lost && minted_ms.is_some_and(|ms| ms >= view.config.start.timestamp_millis())
    });
    if recovering
        || (may_be_shoppers(order_id, shopper) && unread_in_a_topic(state, order_id).await)
    {
        return Err(ApiError::unavailable(
            "orders of a sale being recovered are not all visible yet; look again in a few seconds",
        ));
    }
    Ok(None)
}

/// Whether an order with this id (one of the shopper's, by its tag) may
/// still be unread in the topic of a sale whose window it was minted in: a
/// failover that dropped its reservation leaves no trace in Redis, and the
/// sale is fenced only once a consumer meets the message. Lag read at most a
/// second ago; unreadable counts as unread.
async fn unread_in_a_topic(state: &AppState, order_id: Uuid) -> bool {
    for view in state.catalog.all() {
        let window = [(view.config.start, view.config.end)];
        if !may_name_an_order(order_id, &window, ORDER_TIME_SLACK) {
            continue;
        }
        let unread = state
            .lags
            .unread(view.config.id, &view.config.sale, Duration::from_secs(1))
            .await;
        if !matches!(unread, Ok(0)) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_table() {
        let cases: [(&[u8], Result<i64, ()>); 15] = [
            (b"", Ok(1)),
            (b"  \n", Ok(1)),
            (b"{}", Ok(1)),
            (br#"{"quantity": 2}"#, Ok(2)),
            (br#"{"quantity": 1000}"#, Ok(1000)),
            (br#"{"quantity": 1001}"#, Err(())),
            (br#"{"quantity": 0}"#, Err(())),
            (br#"{"quantity": -1}"#, Err(())),
            (br#"{"quantity": 1.5}"#, Err(())),
            // JSON Schema's integers: a whole number written with a fraction.
            (br#"{"quantity": 5.0}"#, Ok(5)),
            (br#"{"quantity": 1e2}"#, Ok(100)),
            (br#"{"quantity": 1e300}"#, Err(())),
            (br#"{"quantity": "2"}"#, Err(())),
            (br#"{"quantity": 99999999999999999999}"#, Err(())),
            (b"{not json", Err(())),
        ];
        for (body, expected) in cases {
            assert_eq!(
                parse_quantity(Ok(Bytes::from_static(body)))
                    .map_err(|e| assert_eq!(e.code(), "INVALID_REQUEST")),
                expected,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn idempotency_key_table() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("idempotency-key", v.parse().unwrap());
            h
        };
        assert_eq!(idempotency_key(&HeaderMap::new()).unwrap(), None);
        assert_eq!(idempotency_key(&with("k-1")).unwrap(), Some("k-1".into()));
        assert!(idempotency_key(&with(&"k".repeat(129))).is_err());
        assert!(idempotency_key(&with("a b")).is_err());
    }
}
