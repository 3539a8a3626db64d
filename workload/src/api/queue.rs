//! Fair admission (`spec.admission` with `mode: queue`): join the sale's
//! queue, follow your place, get a purchase token when your turn comes —
//! and, when the sale asks for one, a proof-of-work challenge first. The
//! order of the queue lives in Redis and in the shoppers' signed tickets;
//! whether it is closed (sold out, ended) comes from the API's memory.

use std::sync::Mutex;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::tokens::{PurchaseToken, mint};
use super::{AppState, ClientIp};
use crate::catalog::SaleView;
use crate::domain::admission::{
    self, Admission, ChallengeClaims, ChallengeError, JoinRefusal, Place, Ticket,
};
use crate::domain::status::{Phase, status_of};
use crate::intake::Refusal;
use crate::metrics::{ChallengeLabels, SaleLabels};

/// How long a challenge may be answered.
const CHALLENGE_TTL: std::time::Duration = std::time::Duration::from_secs(120);

/// Joins per second seen by this API (the challenge's difficulty rises
/// with it): counted over one-second windows.
#[derive(Debug)]
pub struct JoinMeter(Mutex<(Instant, u64, f64)>);

impl Default for JoinMeter {
    fn default() -> Self {
        Self(Mutex::new((Instant::now(), 0, 0.0)))
    }
}

impl JoinMeter {
    fn record(&self) {
        let mut meter = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = meter.0.elapsed().as_secs_f64();
        if elapsed >= 1.0 {
            *meter = (Instant::now(), 0, meter.1 as f64 / elapsed);
        }
        meter.1 += 1;
    }

    /// Joins per second over the last full window, or over the current
    /// one once it is a second old: a burst's rate decays when the joins
    /// stop, rather than holding the difficulty up until the next join.
    fn per_sec(&self) -> f64 {
        let meter = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = meter.0.elapsed().as_secs_f64();
        if elapsed >= 1.0 {
            meter.1 as f64 / elapsed
        } else {
            meter.2
        }
    }
}

/// The body of a join.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinRequest {
    /// The answer to `GET /v1/sales/{sale}/challenge`, when the sale asks.
    pub challenge: Option<ChallengeAnswer>,
}

/// An answer to a challenge.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChallengeAnswer {
    /// The challenge's `nonce`, as given.
    #[schema(max_length = 1024)]
    pub nonce: String,
    /// A string whose SHA-256 after `nonce` and ":" has the challenge's
    /// leading zero bits.
    #[schema(max_length = 64)]
    pub solution: String,
}

/// Where a shopper stands.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePlace {
    /// Keep it: `GET /v1/sales/{sale}/queue/{ticket}` follows your place,
    /// from any replica, after a reload too.
    pub ticket: String,
    /// `waiting`, `admitted` or `closed` (sold out or ended).
    #[schema(schema_with = state_schema)]
    pub state: &'static str,
    /// 1 = next; absent before the start (the lottery is drawn then) and
    /// once admitted or closed.
    pub position: Option<u64>,
    /// Seconds until admitted at the queue's rate: it falls a second a
    /// second and never rises while the rate holds. Before the start: the
    /// seconds until the draw.
    pub eta_seconds: Option<u64>,
    /// When admitted: a purchase token (send it in `Purchase-Token`).
    pub purchase_token: Option<PurchaseToken>,
    /// Ask again after this many seconds.
    pub poll_after_seconds: u64,
}

fn state_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["waiting", "admitted", "closed"]))
        .build()
}

/// A challenge to solve before joining.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    /// Hash `nonce` ":" solution with SHA-256.
    pub nonce: String,
    /// Leading zero bits the hash needs.
    pub difficulty: u8,
    /// Answer before this.
    pub expires_at: DateTime<Utc>,
}

struct Caller {
    shopper: String,
    view: std::sync::Arc<SaleView>,
    admission: Admission,
    secret: std::sync::Arc<[u8]>,
}

/// Who asks about which queued sale: identity, limits, the sale, its queue.
fn caller(
    state: &AppState,
    ip: std::net::IpAddr,
    name: &str,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    state.limits.check_client(ip)?;
    let shopper = state.auth.shopper(headers)?;
    state.limits.check_shopper(&shopper)?;
    let view = state
        .catalog
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("no sale named {name:?}")))?;
    let admission = view.config.admission.ok_or_else(|| {
        ApiError::queue_not_open(format!("{name:?} has no queue: anyone may buy"))
    })?;
    let secret = state.purchase_token_secret.clone().ok_or_else(|| {
        ApiError::unavailable("the queue's tickets are not configured on this API")
    })?;
    if !admission::fits(&shopper) {
        return Err(ApiError::invalid("the shopper id is too long for a ticket"));
    }
    Ok(Caller {
        shopper,
        view,
        admission,
        secret,
    })
}

/// Whether the sale is closed to its queue at `now_ms` (sold out or over),
/// from the API's memory: no Redis call.
fn closed(state: &AppState, view: &SaleView, now_ms: i64) -> bool {
    let remaining = state.catalog.remaining(view);
    let phase = status_of(&view.config, view.meta.as_ref(), remaining, now_ms).phase;
    matches!(phase, Phase::SoldOut | Phase::Ended)
}

/// The shopper's score and rank, their place restored with `score` if
/// Redis lost it; the queue's length and rate go to the metrics.
async fn line_up(state: &AppState, caller: &Caller, score: u64) -> Result<(u64, u64), ApiError> {
    let sale = &caller.view.config.sale;
    let line = state
        .intake
        .store()
        .take_place(sale, &caller.shopper, score)
        .await
        .map_err(|e| {
            tracing::warn!(sale = %sale, error = %e, "queue: redis unavailable");
            ApiError::unavailable(
                "the queue is unreachable right now; your ticket keeps your place",
            )
        })?;
    let labels = SaleLabels::from(sale);
    let queue = &state.metrics.queue;
    queue
        .length
        .get_or_create(&labels)
        .set(i64::try_from(line.length).unwrap_or(i64::MAX));
    queue
        .admission_rate
        .get_or_create(&labels)
        .set(i64::from(caller.admission.rate_per_sec));
    Ok((line.score, line.rank))
}

/// What a ticket's holder is told at `now`: their rank is read (and their
/// place restored, after a Redis loss) only while the queue is open.
async fn answer(
    state: &AppState,
    caller: &Caller,
    score: u64,
    now: DateTime<Utc>,
) -> Result<QueuePlace, ApiError> {
    let config = &caller.view.config;
    let now_ms = now.timestamp_millis();
    let closed = closed(state, &caller.view, now_ms);
    let (score, rank) = if closed {
        (score, 0)
    } else {
        line_up(state, caller, score).await?
    };
    let place = admission::place(
        rank,
        &caller.admission,
        config.start.timestamp_millis(),
        now_ms,
        closed,
    );
    let ticket = Ticket {
        sale_id: config.id,
        score,
        shopper: caller.shopper.clone(),
    }
    .sign(&caller.secret);
    let (state_word, position, eta, poll) = match place {
        Place::Drawing { starts_in_secs } => ("waiting", None, Some(starts_in_secs), 1),
        Place::Waiting { position, eta_secs } => (
            "waiting",
            Some(position),
            Some(eta_secs),
            (eta_secs / 10).clamp(1, 30),
        ),
        Place::Admitted => ("admitted", None, None, 5),
        Place::Closed => ("closed", None, None, 60),
    };
    let purchase_token = match place {
        Place::Admitted => Some(mint(
            &caller.view,
            caller.shopper.clone(),
            &caller.secret,
            now,
        )?),
        _ => None,
    };
    Ok(QueuePlace {
        ticket,
        state: state_word,
        position,
        eta_seconds: eta,
        purchase_token,
        poll_after_seconds: poll,
    })
}

/// Why a challenge answer did not let a shopper join.
enum NotAnswered {
    /// Refused: the metrics' reason, and what the shopper is told.
    Refused(&'static str, String),
    /// Redis could not say whether it was spent.
    Unreachable,
}

impl From<ChallengeError> for NotAnswered {
    fn from(e: ChallengeError) -> Self {
        Self::Refused(e.reason(), e.to_string())
    }
}

/// Checks the join's challenge answer, when the sale asks for one, and
/// spends it (single use); a refusal is counted by reason, and for the
/// sale's status in Redis.
async fn answered(
    state: &AppState,
    caller: &Caller,
    answer: Option<ChallengeAnswer>,
    now_ms: i64,
) -> Result<(), ApiError> {
    if caller.admission.challenge.is_none() {
        return Ok(());
    }
    let sale = &caller.view.config.sale;
    match spend(state, caller, answer, now_ms).await {
        Ok(()) => Ok(()),
        Err(NotAnswered::Unreachable) => Err(ApiError::unavailable(
            "the queue is unreachable right now; nothing was joined",
        )),
        Err(NotAnswered::Refused(reason, message)) => {
            state
                .metrics
                .queue
                .challenge_failures
                .get_or_create(&ChallengeLabels {
                    namespace: sale.namespace.clone(),
                    sale: sale.name.clone(),
                    reason,
                })
                .inc();
            // Only a figure for the status: lost with Redis, it loses nothing.
            if let Err(e) = state.intake.store().count_challenge_failure(sale).await {
                tracing::debug!(%sale, error = %e, "queue: challenge failure not counted");
            }
            Err(ApiError::challenge_failed(message))
        }
    }
}

async fn spend(
    state: &AppState,
    caller: &Caller,
    answer: Option<ChallengeAnswer>,
    now_ms: i64,
) -> Result<(), NotAnswered> {
    let sale = &caller.view.config.sale;
    let answer = answer.ok_or_else(|| {
        NotAnswered::Refused(
            "missing",
            format!(
                "this queue asks for a challenge first: GET /v1/sales/{}/challenge",
                sale.name
            ),
        )
    })?;
    let claims = admission::check_solution(
        &caller.secret,
        &answer.nonce,
        &answer.solution,
        caller.view.config.id,
        &caller.shopper,
        now_ms,
    )?;
    let first = state
        .intake
        .store()
        .spend_challenge(sale, &claims.nonce, CHALLENGE_TTL)
        .await
        .map_err(|_| NotAnswered::Unreachable)?;
    if first {
        Ok(())
    } else {
        Err(ChallengeError::Used.into())
    }
}

/// Join a sale's queue (or be told your place again: one ticket per shopper).
#[utoipa::path(
    post,
    path = "/v1/sales/{sale}/queue",
    params(("sale" = String, Path, description = "The FlashSale's name")),
    request_body(content = JoinRequest, description = "The challenge's answer, when the sale asks for one"),
    responses(
        (status = 202, description = "In line (or admitted, or closed)", body = QueuePlace),
        (status = 400, description = "INVALID_REQUEST", body = ErrorBody),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 403, description = "CHALLENGE_FAILED: missing, wrong, expired or reused", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such sale", body = ErrorBody),
        (status = 409, description = "QUEUE_NOT_OPEN (before the pre-queue, or a sale without a queue) or ENDED", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: a body over 1 KiB", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY or UNAVAILABLE, with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "queue"
)]
pub async fn join(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<QueuePlace>), ApiError> {
    let caller = caller(&state, ip, &name, &headers)?;
    let request: JoinRequest =
        super::orders::json_object(body, "{\"challenge\"?: {\"nonce\", \"solution\"}}")?;
    let config = &caller.view.config;
    let now = Utc::now();
    admission::may_join(
        &caller.admission,
        config.start.timestamp_millis(),
        config.end.timestamp_millis(),
        now.timestamp_millis(),
    )
    .map_err(|refusal| match refusal {
        JoinRefusal::NotOpen => ApiError::queue_not_open(format!(
            "the queue opens {} before the start",
            humantime::format_duration(caller.admission.prequeue)
        )),
        JoinRefusal::Ended => ApiError::from(Refusal::Ended),
    })?;
    answered(&state, &caller, request.challenge, now.timestamp_millis()).await?;
    state.queue_joins.record();
    let score = admission::score(
        now.timestamp_micros(),
        config.start.timestamp_micros(),
        rand::random(),
    );
    let place = answer(&state, &caller, score, now).await?;
    let queue = &state.metrics.queue;
    queue
        .joins
        .get_or_create(&SaleLabels::from(&config.sale))
        .inc();
    if let (Some(_), Some(eta)) = (place.position, place.eta_seconds) {
        queue
            .promised_wait_seconds
            .get_or_create(&SaleLabels::from(&config.sale))
            .observe(eta as f64);
    }
    Ok((StatusCode::ACCEPTED, Json(place)))
}

/// Your place in the queue, by your ticket.
#[utoipa::path(
    get,
    path = "/v1/sales/{sale}/queue/{ticket}",
    params(
        ("sale" = String, Path, description = "The FlashSale's name"),
        ("ticket" = String, Path, description = "The ticket the join gave"),
    ),
    responses(
        (status = 200, description = "Waiting, admitted (with a purchase token) or closed", body = QueuePlace),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such sale, or not your ticket", body = ErrorBody),
        (status = 409, description = "QUEUE_NOT_OPEN: the sale has no queue", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY or UNAVAILABLE, with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "queue"
)]
pub async fn place(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path((name, ticket)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<QueuePlace>, ApiError> {
    let caller = caller(&state, ip, &name, &headers)?;
    let ticket = admission::read_ticket(
        &caller.secret,
        &ticket,
        caller.view.config.id,
        &caller.shopper,
    )
    .ok_or_else(|| ApiError::not_found("no such ticket for you in this sale"))?;
    Ok(Json(
        answer(&state, &caller, ticket.score, Utc::now()).await?,
    ))
}

/// A challenge to solve before joining the queue.
#[utoipa::path(
    get,
    path = "/v1/sales/{sale}/challenge",
    params(("sale" = String, Path, description = "The FlashSale's name")),
    responses(
        (status = 200, description = "The challenge, single use", body = Challenge),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 404, description = "NOT_FOUND: no such sale", body = ErrorBody),
        (status = 409, description = "QUEUE_NOT_OPEN: the sale has no queue, or asks no challenge", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED, with Retry-After", body = ErrorBody),
        (status = 503, description = "BUSY or UNAVAILABLE, with Retry-After", body = ErrorBody),
    ),
    security(("bearer" = [])),
    tag = "queue"
)]
pub async fn challenge(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Challenge>, ApiError> {
    let caller = caller(&state, ip, &name, &headers)?;
    let rule = caller.admission.challenge.ok_or_else(|| {
        ApiError::queue_not_open(format!("the queue of {name:?} asks no challenge"))
    })?;
    let difficulty = admission::difficulty(
        &rule,
        state.queue_joins.per_sec(),
        caller.admission.rate_per_sec,
    );
    let expires_at = Utc::now() + chrono::Duration::from_std(CHALLENGE_TTL).expect("two minutes");
    let claims = ChallengeClaims {
        sale_id: caller.view.config.id,
        nonce: Uuid::new_v4(),
        expires_ms: expires_at.timestamp_millis(),
        difficulty,
        shopper: caller.shopper,
    };
    Ok(Json(Challenge {
        nonce: claims.sign(&caller.secret),
        difficulty,
        expires_at,
    }))
}
