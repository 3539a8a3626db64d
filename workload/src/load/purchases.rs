//! The storm's purchase (and status) requests, over hyper's HTTP/1 client connections
//! kept in a small pool: the path, bodies and tokens are made once, and an
//! answer is read without a JSON tree, so the load generator costs little
//! next to the API it measures (through reqwest, URL parsing, header maps
//! and JSON trees cost it more CPU per purchase than Redis spent deciding).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use serde::Deserialize;

/// Longest a purchase may take, connection included, unless told otherwise.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The API closes a connection idle for its header timeout (5 s by
/// default); one idle longer than this is not used again.
const IDLE: Duration = Duration::from_secs(2);
/// The header that makes a retried purchase the same purchase.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What a purchase was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The error code of a refusal.
    pub code: Option<String>,
    /// The order id of an acceptance.
    pub order_id: Option<String>,
}

/// Why a purchase got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// None within the timeout.
    Timeout,
    /// The connection could not be made or broke.
    Connect,
}

/// Purchases of one sale on one API (and the reads and queue joins around
/// them).
pub struct PurchaseClient {
    address: String,
    host: HeaderValue,
    path: Uri,
    /// The sale's status route.
    status_path: Uri,
    /// The sale's queue.
    queue_path: String,
    /// The body asking for `i + 1` units.
    bodies: Vec<Bytes>,
    idle: Mutex<Vec<(SendRequest<Full<Bytes>>, Instant)>>,
    timeout: Duration,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(rename = "orderId", borrow)]
    order_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    code: Option<std::borrow::Cow<'a, str>>,
}

impl PurchaseClient {
    /// A client for `sale` on the API at `base_url` (`http://host:port`),
    /// buying 1 to `max_quantity` units at a time.
    pub fn new(base_url: &str, sale: &str, max_quantity: i64) -> anyhow::Result<Self> {
        let base: Uri = base_url.parse()?;
        let authority = base
            .authority()
            .ok_or_else(|| anyhow::anyhow!("{base_url} names no host"))?
            .clone();
        anyhow::ensure!(
            base.scheme_str() == Some("http"),
            "the storm speaks plain HTTP: {base_url}"
        );
        let address = match authority.port_u16() {
            Some(_) => authority.to_string(),
            None => format!("{}:80", authority.host()),
        };
        Ok(Self {
            address,
            host: HeaderValue::from_str(authority.as_str())?,
            path: format!(
                "{}/v1/sales/{sale}/orders",
                base.path().trim_end_matches('/')
            )
            .parse()?,
            status_path: format!(
                "{}/v1/sales/{sale}/status",
                base.path().trim_end_matches('/')
            )
            .parse()?,
            queue_path: format!(
                "{}/v1/sales/{sale}/queue",
                base.path().trim_end_matches('/')
            ),
            bodies: (1..=max_quantity.max(1))
                .map(|q| Bytes::from(format!("{{\"quantity\":{q}}}")))
                .collect(),
            idle: Mutex::new(Vec::new()),
            timeout: TIMEOUT,
        })
    }

    /// The same client, giving up on a purchase after `timeout`.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    /// Buys `quantity` units as the shopper whose identity is `identity`,
    /// with an `Idempotency-Key` if given (a retry sends the same one).
    pub async fn purchase(
        &self,
        identity: (&HeaderName, HeaderValue),
        quantity: i64,
        idempotency_key: Option<&HeaderValue>,
    ) -> Result<Answer, NoAnswer> {
        let body = self.bodies[(quantity.max(1) as usize - 1).min(self.bodies.len() - 1)].clone();
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.path.clone())
            .header(HOST, self.host.clone())
            .header(identity.0, identity.1)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = idempotency_key {
            request = request.header(IDEMPOTENCY_KEY, key.clone());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|_| NoAnswer::Connect)?;
        let (status, bytes) = self.exchange(request).await?;
        let body: Option<Body<'_>> = serde_json::from_slice(&bytes).ok();
        Ok(Answer {
            status,
            code: body
                .as_ref()
                .and_then(|b| b.code.as_deref().map(str::to_string)),
            order_id: body.and_then(|b| b.order_id.map(|id| id.into_owned())),
        })
    }

    /// Reads the sale's status as a page would (no identity); its HTTP
    /// status.
    pub async fn status(&self) -> Result<u16, NoAnswer> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(self.status_path.clone())
            .header(HOST, self.host.clone())
            .body(Full::new(Bytes::new()))
            .map_err(|_| NoAnswer::Connect)?;
        Ok(self.exchange(request).await?.0)
    }

    /// Joins the sale's queue as `identity`, without a challenge: the
    /// answer's status and body.
    pub async fn join_queue(
        &self,
        identity: (&HeaderName, HeaderValue),
    ) -> Result<(u16, Bytes), NoAnswer> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.queue_path.as_str())
            .header(HOST, self.host.clone())
            .header(identity.0, identity.1)
            .body(Full::new(Bytes::new()))
            .map_err(|_| NoAnswer::Connect)?;
        self.exchange(request).await
    }

    /// `identity`'s place in the sale's queue, by its ticket: the answer's
    /// status and body.
    pub async fn queue_place(
        &self,
        identity: (&HeaderName, HeaderValue),
        ticket: &str,
    ) -> Result<(u16, Bytes), NoAnswer> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}/{ticket}", self.queue_path))
            .header(HOST, self.host.clone())
            .header(identity.0, identity.1)
            .body(Full::new(Bytes::new()))
            .map_err(|_| NoAnswer::Connect)?;
        self.exchange(request).await
    }

    /// Sends `request` on a pooled connection within the timeout; the
    /// answer's status and body.
    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<(u16, Bytes), NoAnswer> {
        let exchange = async {
            let mut sender = self.connection().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|_| NoAnswer::Connect)?;
            let status = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|_| NoAnswer::Connect)?
                .to_bytes();
            self.give_back(sender);
            Ok((status, bytes))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| NoAnswer::Timeout)?
    }

    /// An idle connection, or a new one.
    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, NoAnswer> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match idle {
                Some((mut sender, since)) if since.elapsed() < IDLE => {
                    // Ready at once unless the API closed it meanwhile.
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                Some(_) => continue,
                None => break,
            }
        }
        let stream = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(|_| NoAnswer::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|_| NoAnswer::Connect)?;
        tokio::spawn(connection);
        Ok(sender)
    }

    fn give_back(&self, sender: SendRequest<Full<Bytes>>) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((sender, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_bodies_and_hosts_are_made_once() {
        let client = PurchaseClient::new("http://127.0.0.1:18080", "basic", 3).unwrap();
        assert_eq!(client.address, "127.0.0.1:18080");
        assert_eq!(client.host, "127.0.0.1:18080");
        assert_eq!(client.path, "/v1/sales/basic/orders");
        assert_eq!(client.status_path, "/v1/sales/basic/status");
        assert_eq!(client.bodies[2], Bytes::from_static(b"{\"quantity\":3}"));
        let no_port = PurchaseClient::new("http://api.shop/", "x", 1).unwrap();
        assert_eq!(no_port.address, "api.shop:80");
        assert!(PurchaseClient::new("https://api.shop", "x", 1).is_err());
    }
}
