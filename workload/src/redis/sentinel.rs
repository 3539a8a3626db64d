//! A Sentinel-watched Redis primary: commands go to the node the Sentinels
//! name; a connection failure or a READONLY answer (a primary demoted by a
//! failover) makes the connection ask them again, and a command that provably
//! did not run goes once more to the primary they name.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, Value};

use super::node_config;

/// The shortest time between two questions to the Sentinels: during a
/// failover every command fails, and each must not become a Sentinel query.
const MIN_REDISCOVERY_GAP: Duration = Duration::from_millis(250);

/// How long the Sentinels may take to name the primary.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(2);

/// The primary as last named by the Sentinels, and how to ask again.
#[derive(Clone)]
pub struct SentinelConn {
    sentinels: Arc<Sentinels>,
    primary: Arc<RwLock<(String, ConnectionManager)>>,
}

/// Who to ask, and when they were last asked. No lock is held while they
/// are asked: a caller that stops half-way must not keep every other from
/// asking.
struct Sentinels {
    urls: Vec<String>,
    service: String,
    last_asked: Mutex<Option<Instant>>,
}

impl Sentinels {
    fn client(&self) -> RedisResult<SentinelClient> {
        SentinelClient::build(
            self.urls.clone(),
            self.service.as_str(),
            None,
            SentinelServerType::Master,
        )
    }
}

/// Whether `e` says the connection no longer reaches the primary.
fn primary_moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Whether `e` proves the request never ran: the connection was refused, or
/// a replica refused to write.
fn never_ran(e: &RedisError) -> bool {
    e.is_connection_refusal() || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl SentinelConn {
    /// Asks the `sentinels` (`redis://host:port` URLs) for the primary of
    /// `service` and connects to it.
    pub async fn connect(sentinels: &[String], service: &str) -> RedisResult<Self> {
        let sentinels = Sentinels {
            urls: sentinels.to_vec(),
            service: service.to_string(),
            last_asked: Mutex::new(Some(Instant::now())),
        };
        let primary = Self::primary_of(&mut sentinels.client()?).await?;
        Ok(Self {
            sentinels: Arc::new(sentinels),
            primary: Arc::new(RwLock::new(primary)),
        })
    }

    async fn primary_of(client: &mut SentinelClient) -> RedisResult<(String, ConnectionManager)> {
        let node = client.async_get_client().await?;
        let address = node.get_connection_info().addr().to_string();
        let connection = ConnectionManager::new_with_config(node, node_config()).await?;
        Ok((address, connection))
    }

    /// The address of the primary commands go to now.
    pub fn primary_address(&self) -> String {
        self.primary
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    fn current(&self) -> ConnectionManager {
        self.primary
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Asks the Sentinels for the primary again (at most once per
    /// [`MIN_REDISCOVERY_GAP`] unless the current one answered as a replica:
    /// the callers within it fail at once rather than queue) and switches to
    /// it if it moved; returns whether it switched.
    async fn rediscover(&self, refused_as_replica: bool) -> bool {
        {
            let mut last = self
                .sentinels
                .last_asked
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // A replica's refusal is proof, not a guess: it always asks.
            if !refused_as_replica && last.is_some_and(|at| at.elapsed() < MIN_REDISCOVERY_GAP) {
                tracing::debug!("Redis Sentinels asked less than {MIN_REDISCOVERY_GAP:?} ago");
                return false;
            }
            *last = Some(Instant::now());
        }
        let asked = async {
            self.follow(&mut self.sentinels.client()?, refused_as_replica)
                .await
        };
        match tokio::time::timeout(SENTINEL_TIMEOUT, asked).await {
            Ok(Ok(switched)) => switched,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Redis Sentinels or the primary they name unreachable");
                false
            }
            Err(_) => {
                tracing::warn!("Redis Sentinels did not name a reachable primary in time");
                false
            }
        }
    }

    /// Switches to the primary the Sentinels name, if it is not the current
    /// one — or, when the current one answered as a replica, connects to it
    /// afresh; returns whether it switched.
    async fn follow(
        &self,
        client: &mut SentinelClient,
        refused_as_replica: bool,
    ) -> RedisResult<bool> {
        let node = client.async_get_client().await?;
        let address = node.get_connection_info().addr().to_string();
        let same = address == self.primary_address();
        if same && !refused_as_replica {
            tracing::debug!(primary = %address, "Redis Sentinels name the same primary");
            return Ok(false);
        }
        let connection = ConnectionManager::new_with_config(node, node_config()).await?;
        if same {
            tracing::warn!(primary = %address, "the Redis primary answered as a replica; connected to it again");
        } else {
            tracing::warn!(primary = %address, "Redis Sentinel names a new primary");
        }
        *self.primary.write().unwrap_or_else(|e| e.into_inner()) = (address, connection);
        Ok(true)
    }

    /// Runs `request` on the current primary. A failure that says the primary
    /// moved makes it ask the Sentinels; when they name another primary and
    /// the request provably did not run (refused connection, or a replica's
    /// READONLY: a replica writes nothing), it runs once more there. Anything
    /// else is the caller's to retry: only it knows whether its request may
    /// run twice.
    async fn on_primary<T, F>(
        &self,
        request: impl Fn(ConnectionManager) -> F,
        refused_as_replica: impl Fn(&T) -> bool,
    ) -> RedisResult<T>
    where
        F: Future<Output = RedisResult<T>>,
    {
        match request(self.current()).await {
            Err(e) if primary_moved(&e) => {
                let demoted = e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly);
                if self.rediscover(demoted).await && never_ran(&e) {
                    request(self.current()).await
                } else {
                    Err(e)
                }
            }
            // A replica ran nothing that writes: run it all on the primary.
            Ok(reply) if refused_as_replica(&reply) => {
                if self.rediscover(true).await {
                    request(self.current()).await
                } else {
                    Ok(reply)
                }
            }
            result => result,
        }
    }

    /// One command on the primary, as [`SentinelConn::on_primary`] says.
    pub async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.on_primary(
            |mut c| async move { c.req_packed_command(cmd).await },
            read_only,
        )
        .await
    }

    /// A pipeline on the primary, as [`SentinelConn::on_primary`] says.
    pub async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.on_primary(
            |mut c| async move { c.req_packed_commands(pipeline, offset, count).await },
            |replies: &Vec<Value>| replies.iter().any(read_only),
        )
        .await
    }
}

/// Whether `reply` is a replica's READONLY refusal. The client hands server
/// errors back as replies, not errors: a connection that reconnected by
/// itself to its old primary, now a replica, sees only these.
fn read_only(reply: &Value) -> bool {
    match reply {
        Value::ServerError(e) => e.kind() == Some(ServerErrorKind::ReadOnly),
        // A transaction's replies, or a script's.
        Value::Array(replies) => replies.iter().any(read_only),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicas_refusal_is_found_in_any_reply() {
        let reply = |resp: &str| redis::parse_redis_value(resp.as_bytes()).unwrap();
        let cases = [
            (
                "a command refused",
                "-READONLY You can't write against a read only replica.\r\n",
                true,
            ),
            (
                "a script's write refused",
                "-READONLY You can't write against a read only replica. script: 6dd2, on @user_script:18.\r\n",
                true,
            ),
            (
                "a transaction's write refused",
                "*2\r\n+OK\r\n-READONLY You can't write\r\n",
                true,
            ),
            ("another error", "-NOSCRIPT No matching script\r\n", false),
            ("an answer", "+OK\r\n", false),
            ("answers", "*2\r\n:1\r\n$1\r\nx\r\n", false),
        ];
        for (what, resp, refused) in cases {
            assert_eq!(read_only(&reply(resp)), refused, "{what}");
        }
    }
}
