//! Every refusal the API gives: `{"code": ..., "message": ...}` with a fitting
//! status and, where waiting helps, `Retry-After`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::intake::Refusal;

/// The body of every refusal.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Machine-readable reason, e.g. `SOLD_OUT`.
    pub code: &'static str,
    /// What happened, for people.
    pub message: String,
    /// With `OUTCOME_UNKNOWN`: the order whose outcome is not known yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<uuid::Uuid>,
}

/// A refusal on its way to the shopper.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after_secs: Option<u64>,
    order_id: Option<uuid::Uuid>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
            order_id: None,
        }
    }

    /// Adds a `Retry-After` header.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 404 `SALE_NOT_FOUND` (the status route's code for an unknown sale).
    pub fn sale_not_found(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "SALE_NOT_FOUND",
            format!("no sale named {name:?}"),
        )
    }

    /// 403 `QUEUE_REQUIRED`: tokens of a queued sale come from its queue.
    pub fn queue_required(sale: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "QUEUE_REQUIRED",
            format!("{sale:?} admits through its queue: POST /v1/sales/{sale}/queue"),
        )
    }

    /// 409 `QUEUE_NOT_OPEN`: before the pre-queue opens, or a sale without one.
    pub fn queue_not_open(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "QUEUE_NOT_OPEN", message)
    }

    /// 403 `CHALLENGE_FAILED`: a missing, wrong, stale or reused answer.
    pub fn challenge_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "CHALLENGE_FAILED", message)
    }

    /// 400 `INVALID_REQUEST`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    /// A body that could not be read: 413 `PAYLOAD_TOO_LARGE` past the
    /// body limit, else 400 `INVALID_REQUEST`.
    pub fn unreadable_body(rejection: &axum::extract::rejection::BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                format!("the body is larger than {} bytes", super::MAX_BODY_BYTES),
            )
        } else {
            Self::invalid(format!("unreadable body: {rejection}"))
        }
    }

    /// 401 `UNAUTHENTICATED`.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message)
    }

    /// 403 `TOKEN_REQUIRED`: the sale needs a purchase token and none was sent.
    pub fn token_required(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "TOKEN_REQUIRED", message)
    }

    /// 403 `TOKEN_INVALID`: forged, expired, another's, or already used.
    pub fn token_invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "TOKEN_INVALID", message)
    }

    /// 429 `RATE_LIMITED` with `Retry-After`.
    pub fn rate_limited(what: &str, retry_after_secs: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            format!("too many requests {what}; retry later"),
        )
        .retry_after(retry_after_secs)
    }

    /// 503 `UNAVAILABLE`: a dependency is down.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message).retry_after(1)
    }

    /// 503 `BUSY`: too much in flight; retry in a second.
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "BUSY", message).retry_after(1)
    }

    /// 409 `ORDER_PENDING`: accepted, not yet persisted.
    pub fn order_pending() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "ORDER_PENDING",
            "the order is accepted but not yet persisted; retry shortly",
        )
        .retry_after(1)
    }

    /// 409 for an order change its status does not allow.
    pub fn order_conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 405 for a known path with another method.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            "this method is not allowed on this path",
        )
    }

    /// 500, for a bug (a panic caught by the safety net).
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "internal error; nothing was reserved",
        )
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        use StatusCode as S;
        match refusal {
            Refusal::NotWarmed => Self::new(
                S::SERVICE_UNAVAILABLE,
                "NOT_WARMED",
                "the sale is not open for purchases yet",
            ),
            Refusal::Paused => Self::new(S::CONFLICT, "PAUSED", "the sale is paused"),
            Refusal::NotStarted => {
                Self::new(S::CONFLICT, "NOT_STARTED", "the sale has not started")
            }
            Refusal::Ended => Self::new(S::CONFLICT, "ENDED", "the sale has ended"),
            Refusal::SoldOut => Self::new(S::CONFLICT, "SOLD_OUT", "the sale is sold out"),
            Refusal::LimitExceeded => Self::new(
                S::CONFLICT,
                "LIMIT_EXCEEDED",
                "this purchase would exceed the per-shopper limit",
            ),
            Refusal::Busy => {
                Self::busy("too many orders are waiting to be processed; retry shortly")
            }
            Refusal::Unavailable => {
                Self::unavailable("the sale's store is unreachable; nothing was reserved")
            }
            Refusal::StateLost => Self::unavailable(
                "the sale's working state is being recovered; nothing was reserved",
            ),
            Refusal::TokenUsed => {
                Self::token_invalid("the purchase token was already used; fetch a new one")
            }
            Refusal::OutcomeUnknown { order_id } => Self {
                order_id: Some(order_id),
                ..Self::new(
                    S::SERVICE_UNAVAILABLE,
                    "OUTCOME_UNKNOWN",
                    "the order's outcome is not known yet: retry with the same Idempotency-Key, or follow orderId",
                )
                .retry_after(1)
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: self.message,
            order_id: self.order_id,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_code_and_status() {
        let cases = [
            (Refusal::NotWarmed, 503, "NOT_WARMED", false),
            (Refusal::Paused, 409, "PAUSED", false),
            (Refusal::NotStarted, 409, "NOT_STARTED", false),
            (Refusal::Ended, 409, "ENDED", false),
            (Refusal::SoldOut, 409, "SOLD_OUT", false),
            (Refusal::LimitExceeded, 409, "LIMIT_EXCEEDED", false),
            (Refusal::Busy, 503, "BUSY", true),
            (Refusal::Unavailable, 503, "UNAVAILABLE", true),
            (Refusal::StateLost, 503, "UNAVAILABLE", true),
            (Refusal::TokenUsed, 403, "TOKEN_INVALID", false),
            (
                Refusal::OutcomeUnknown {
                    order_id: uuid::Uuid::nil(),
                },
                503,
                "OUTCOME_UNKNOWN",
                true,
            ),
        ];
        for (refusal, status, code, retry_after) in cases {
            let response = ApiError::from(refusal).into_response();
            assert_eq!(response.status().as_u16(), status, "{refusal:?}");
            assert_eq!(
                response.headers().contains_key(header::RETRY_AFTER),
                retry_after,
                "{refusal:?}"
            );
            assert_eq!(ApiError::from(refusal).code(), code);
        }
        let limited = ApiError::rate_limited("per shopper", 0).into_response();
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.headers()[header::RETRY_AFTER], "1");
    }
}
