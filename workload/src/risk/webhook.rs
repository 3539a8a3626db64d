//! The merchant's risk service: each order's facts and built-in score POSTed,
//! signed as the payment provider signs its callbacks, and its `{"score": N}`
//! read back within the spec's timeout.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::payment::{SIGNATURE_HEADER, sign};
use crate::domain::risk::{Hit, RiskWebhook};

/// What the merchant's service is sent.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RiskQuestion<'a> {
    /// The order.
    pub order_id: Uuid,
    /// `namespace/name` of its sale.
    pub sale: String,
    /// The buyer.
    pub shopper: &'a str,
    /// The built-in rules' score.
    pub score: u32,
    /// The rules that fired.
    pub hits: &'a [Hit],
}

#[derive(Deserialize)]
struct RiskAnswer {
    score: u32,
}

/// A client for the webhooks of a process's sales.
#[derive(Clone)]
pub struct WebhookClient {
    http: reqwest::Client,
    secret: Option<std::sync::Arc<[u8]>>,
}

impl WebhookClient {
    /// Signs with `secret` (`None`: the webhook is not asked, and counts as
    /// silent: the process was given no secret to sign with).
    pub fn new(secret: Option<Vec<u8>>) -> Self {
        Self {
            http: reqwest::Client::new(),
            secret: secret.map(std::sync::Arc::from),
        }
    }

    /// The service's score, or `None` when it did not give one in time.
    pub async fn ask(&self, webhook: &RiskWebhook, question: &RiskQuestion<'_>) -> Option<u32> {
        let secret = self.secret.as_deref()?;
        let body = serde_json::to_vec(question).ok()?;
        let signature = sign(secret, chrono::Utc::now().timestamp(), &body);
        let asked = self
            .http
            .post(&webhook.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature)
            .body(body)
            .timeout(Duration::from_millis(webhook.timeout_ms))
            .send()
            .await;
        let answer = match asked {
            Ok(response) if response.status().is_success() => response.json::<RiskAnswer>().await,
            Ok(response) => {
                tracing::debug!(status = %response.status(), "the risk webhook refused");
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "the risk webhook did not answer");
                return None;
            }
        };
        answer.ok().map(|a| a.score)
    }
}
