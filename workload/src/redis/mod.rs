//! Thin adapter over Redis: one connection type for a single node, a Redis
//! Cluster or a Sentinel-watched primary, the key layout ([`keys`]) and the
//! Lua scripts ([`scripts`]).

pub mod keys;
pub mod queue;
pub mod scripts;
pub mod sentinel;
pub mod store;

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use sentinel::SentinelConn;

/// Where Redis is: `redis://host:port` for one node,
/// `redis-cluster://host:port,host:port,...` for the seed nodes of a cluster,
/// or `redis-sentinel://host:port,host:port,.../service` for the Sentinels
/// watching a primary and its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// A single Redis server.
    Node(String),
    /// Seed nodes of a Redis Cluster, as `redis://host:port` URLs.
    Cluster(Vec<String>),
    /// The Sentinels (as `redis://host:port` URLs) and the service they watch.
    Sentinel {
        /// The Sentinels.
        sentinels: Vec<String>,
        /// The name they know the primary by (`sentinel monitor <name> ...`).
        service: String,
    },
}

impl std::str::FromStr for RedisTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix("redis-sentinel://") {
            let (hosts, service) = rest.split_once('/').unwrap_or((rest, ""));
            let sentinels: Vec<String> = hosts
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            if sentinels.is_empty() || service.is_empty() {
                return Err(format!(
                    "{s:?} is not redis-sentinel://host:port,host:port/service"
                ));
            }
            Ok(Self::Sentinel {
                sentinels,
                service: service.to_string(),
            })
        } else if let Some(seeds) = s.strip_prefix("redis-cluster://") {
            let nodes: Vec<String> = seeds
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            if nodes.is_empty() {
                return Err(format!("{s:?} names no cluster node"));
            }
            Ok(Self::Cluster(nodes))
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(Self::Node(s.to_string()))
        } else {
            Err(format!(
                "{s:?} is not redis://host:port, redis-cluster://host:port,host:port nor redis-sentinel://host:port,host:port/service"
            ))
        }
    }
}

/// How long a Redis call may take before the caller treats Redis as unavailable.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A cheap-to-clone, multiplexed, self-reconnecting Redis connection.
#[derive(Clone)]
pub enum RedisConn {
    /// One node, reconnecting on failure.
    Node(ConnectionManager),
    /// A Redis Cluster; commands are routed by slot.
    Cluster(ClusterConnection),
    /// The primary Redis Sentinel names, followed across failovers.
    Sentinel(SentinelConn),
}

fn node_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

impl RedisConn {
    /// Connects, failing fast (no endless retry) when Redis is unreachable.
    pub async fn connect(target: &RedisTarget) -> redis::RedisResult<Self> {
        match target {
            RedisTarget::Node(url) => {
                let client = redis::Client::open(url.as_str())?;
                Ok(Self::Node(
                    ConnectionManager::new_with_config(client, node_config()).await?,
                ))
            }
            RedisTarget::Cluster(nodes) => {
                let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(Duration::from_secs(2))
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(2)
                    .build()?;
                Ok(Self::Cluster(client.get_async_connection().await?))
            }
            RedisTarget::Sentinel { sentinels, service } => Ok(Self::Sentinel(
                SentinelConn::connect(sentinels, service).await?,
            )),
        }
    }

    /// A connection to one node made on first use (a call fails while the
    /// node is unreachable); for code that must start without Redis.
    pub fn lazy(url: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(Self::Node(ConnectionManager::new_lazy_with_config(
            client,
            node_config(),
        )?))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(c) => Box::pin(c.command(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(c) => Box::pin(c.pipeline(pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_node_and_cluster_targets() {
        assert_eq!(
            "redis://127.0.0.1:1".parse::<RedisTarget>(),
            Ok(RedisTarget::Node("redis://127.0.0.1:1".into()))
        );
        assert_eq!(
            "redis-cluster://127.0.0.1:1,127.0.0.1:2".parse::<RedisTarget>(),
            Ok(RedisTarget::Cluster(vec![
                "redis://127.0.0.1:1".into(),
                "redis://127.0.0.1:2".into()
            ]))
        );
        assert_eq!(
            "redis-sentinel://127.0.0.1:1,127.0.0.1:2/shop".parse::<RedisTarget>(),
            Ok(RedisTarget::Sentinel {
                sentinels: vec!["redis://127.0.0.1:1".into(), "redis://127.0.0.1:2".into()],
                service: "shop".into(),
            })
        );
        assert!(
            "redis-sentinel://127.0.0.1:1"
                .parse::<RedisTarget>()
                .is_err()
        );
        assert!("redis-sentinel:///shop".parse::<RedisTarget>().is_err());
        assert!("redis-cluster://".parse::<RedisTarget>().is_err());
        assert!("127.0.0.1:6379".parse::<RedisTarget>().is_err());
    }
}
