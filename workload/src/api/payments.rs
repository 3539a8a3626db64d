//! Payments: the shopper starts one (`POST /v1/orders/{id}/pay`), the
//! payment provider's signed callback (`POST /v1/payments/callback`) settles
//! it — an order is PAID on the provider's word only.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::orders::{NoFields, json_object, no_such_order, not_persisted, order_caller};
use super::{AppState, ClientIp};
use crate::domain::order::OrderStatus;
use crate::domain::payment::{PaymentOutcome, PaymentState, SIGNATURE_HEADER, Settlement, verify};
use crate::metrics::SettlementLabels;
use crate::orders::payment::{self as payment_rows, Start};

/// A payment, as the shopper and the provider see it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentView {
    /// The payment id: the provider's callback names it.
    pub payment_id: Uuid,
    /// The order it pays.
    pub order_id: Uuid,
    /// The order's status: UNPAID until the provider confirms, then PAID.
    #[schema(value_type = String, example = "UNPAID")]
    pub status: OrderStatus,
}

/// The provider's word on a payment (the body it signs).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PaymentCallback {
    /// The payment id `/pay` answered.
    pub payment_id: Uuid,
    /// Its order.
    pub order_id: Uuid,
    /// `succeeded` or `failed`.
    #[schema(schema_with = outcome_schema)]
    pub outcome: PaymentOutcome,
}

/// `outcome` in the document: one of the two words, so a body that fits the
/// document fits the body limit too.
fn outcome_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["succeeded", "failed"]))
        .description(Some("`succeeded` or `failed`"))
        .build()
}

fn unavailable(e: sqlx::Error) -> ApiError {
    tracing::warn!(error = %e, "payments: database unavailable");
    ApiError::unavailable("orders are unreachable right now")
}

/// Start paying for an order: answers the payment id to hand to the payment
/// provider; the order stays UNPAID until the provider confirms. A retry
/// answers the same payment; a PAID order answers the payment that paid it.
#[utoipa::path(
    post,
    path = "/v1/orders/{orderId}/pay",
    params(("orderId" = Uuid, Path, description = "The order id")),
    responses(
        (status = 200, description = "The payment, in flight (order UNPAID) or done (order PAID)", body = PaymentView),
        (status = 400, description = "INVALID_REQUEST: a body other than {}", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND", body = ErrorBody),
        (status = 409, description = "ORDER_PENDING (with Retry-After) or ORDER_NOT_PAYABLE", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: a body over 1 KiB", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY: too many requests in flight, or UNAVAILABLE: a dependency is down or the request took too long; with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "orders"
)]
pub async fn pay(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(order_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PaymentView>, ApiError> {
    json_object::<NoFields>(body, "{} (or no body)")?;
    let (shopper, order_id) = order_caller(&state, ip, &order_id, &headers)?;
    let refused = |status: OrderStatus| {
        ApiError::order_conflict(
            "ORDER_NOT_PAYABLE",
            format!("a {} order cannot be paid", status.as_str()),
        )
    };
    let view = |payment_id, status| {
        Json(PaymentView {
            payment_id,
            order_id,
            status,
        })
    };
    match payment_rows::start(&state.db, order_id, &shopper)
        .await
        .map_err(unavailable)?
    {
        Start::Started(payment) => Ok(view(payment, OrderStatus::Unpaid)),
        Start::AlreadyPaid(payment) => Ok(view(payment, OrderStatus::Paid)),
        Start::Illegal(status) => Err(refused(status)),
        Start::NotFound => Err(not_persisted(&state, &shopper, order_id, refused).await),
    }
}

/// The payment provider's callback: marks the order PAID (idempotent). Signed
/// `Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">` with the shared
/// secret, within 5 minutes of now. Money taken for an order that can no
/// longer be paid is answered 409 `ORDER_CANCELLED`: refund it.
#[utoipa::path(
    post,
    path = "/v1/payments/callback",
    params(("Signature" = String, Header, description = "t=<unix seconds>,v1=<hex HMAC-SHA256 of \"t.body\">")),
    request_body(content = PaymentCallback),
    responses(
        (status = 200, description = "Settled: the order is PAID (succeeded) or still UNPAID (failed)", body = PaymentView),
        (status = 400, description = "INVALID_REQUEST: not a callback body", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: no signature, a wrong one, or one outside the replay window", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such payment of that order", body = ErrorBody),
        (status = 409, description = "ORDER_CANCELLED: the order can no longer be paid, refund the payment; PAYMENT_SETTLED: it contradicts an earlier callback", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: a body over 1 KiB", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY, or UNAVAILABLE: payments are not configured or a dependency is down; with Retry-After", body = ErrorBody),
    ),
    tag = "payments"
)]
pub async fn callback(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PaymentView>, ApiError> {
    state.limits.check_anonymous(ip)?;
    let secret = state
        .payment_secret
        .as_deref()
        .ok_or_else(|| ApiError::unavailable("payment callbacks are not configured"))?;
    let body = body.map_err(|e| ApiError::unreadable_body(&e))?;
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::unauthenticated("missing Signature header"))?;
    verify(secret, signature, &body, chrono::Utc::now().timestamp())
        .map_err(|e| ApiError::unauthenticated(e.to_string()))?;
    let word: PaymentCallback = json_object(
        Ok(body),
        "{\"paymentId\": uuid, \"orderId\": uuid, \"outcome\": \"succeeded\" | \"failed\"}",
    )?;
    let settled =
        payment_rows::settle_payment(&state.db, word.payment_id, word.order_id, word.outcome)
            .await
            .map_err(unavailable)?
            .ok_or_else(no_such_order)?;
    state
        .metrics
        .payment_settlements
        .get_or_create(&SettlementLabels {
            settlement: settled.settlement.as_str(),
        })
        .inc();
    let refund = || {
        tracing::warn!(payment = %word.payment_id, order = %word.order_id, status = settled.order.as_str(), "payment taken for an order that cannot be paid: refund due");
        ApiError::order_conflict(
            "ORDER_CANCELLED",
            format!(
                "the order is {} and cannot be paid: refund the payment",
                settled.order.as_str()
            ),
        )
    };
    match settled.settlement {
        Settlement::Refund => Err(refund()),
        Settlement::Repeat if settled.payment == PaymentState::RefundDue => Err(refund()),
        Settlement::Contradiction => Err(ApiError::order_conflict(
            "PAYMENT_SETTLED",
            format!(
                "the payment was settled as {} before",
                settled.payment.as_str()
            ),
        )),
        Settlement::Pay | Settlement::Decline | Settlement::Repeat => Ok(Json(PaymentView {
            payment_id: word.payment_id,
            order_id: word.order_id,
            status: settled.order,
        })),
    }
}
