//! Creating and deleting a sale's topics with the rdkafka admin client.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::RDKafkaErrorCode;

use super::client_config;

/// How long an admin request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a metadata request may wait for a broker connection and its
/// answer: a broker just back, on a busy machine, takes more than 2 s.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// A Kafka admin client.
pub struct Admin {
    client: Arc<AdminClient<DefaultClientContext>>,
    /// Asks partitions for their offsets: the proof that their leader serves.
    probe: Arc<BaseConsumer>,
    durability: TopicDurability,
}

/// How many brokers hold each partition of a sale's topics, and how many of
/// them must have an order before the broker acknowledges it (with the
/// producer's `acks=all`). A single broker (the test stack) can only have 1
/// and 1; production clusters should use 3 and 2 (docs/reliability.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicDurability {
    /// Replicas of each partition.
    pub replication_factor: i32,
    /// The topics' `min.insync.replicas`.
    pub min_insync_replicas: i32,
}

impl Default for TopicDurability {
    fn default() -> Self {
        Self {
            replication_factor: 1,
            min_insync_replicas: 1,
        }
    }
}

/// A failed admin request.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The client could not be built or the request not sent.
    #[error("kafka admin request failed: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A created topic still has partitions without a leader that serves.
    #[error("kafka topic {0} has partitions without a serving leader after 10 s")]
    NoLeader(String),
    /// The broker refused the change for one topic or group.
    #[error("kafka refused to {action} {topic}: {code}")]
    Refused {
        /// create or delete.
        action: &'static str,
        /// The topic or group.
        topic: String,
        /// The broker's reason.
        code: RDKafkaErrorCode,
    },
}

impl Admin {
    /// An admin client for the cluster at `bootstrap`, creating topics with
    /// one replica.
    pub fn new(bootstrap: &str) -> Result<Self, AdminError> {
        Ok(Self {
            client: Arc::new(client_config(bootstrap).create()?),
            probe: Arc::new(client_config(bootstrap).create()?),
            durability: TopicDurability::default(),
        })
    }

    /// The same, creating topics with `durability`.
    pub fn with_durability(self, durability: TopicDurability) -> Self {
        Self { durability, ..self }
    }

    fn options() -> AdminOptions {
        AdminOptions::new()
            .request_timeout(Some(ADMIN_TIMEOUT))
            .operation_timeout(Some(ADMIN_TIMEOUT))
    }

    /// Creates each topic with `partitions` partitions (an existing one with
    /// fewer grows to that many) and waits until every partition has a
    /// leader that serves it, so producers and lag readers can use them at
    /// once (idempotent).
    pub async fn ensure_topics(&self, names: &[&str], partitions: i32) -> Result<(), AdminError> {
        let replicas = self.durability.replication_factor;
        let min_insync = self.durability.min_insync_replicas.to_string();
        let topics: Vec<NewTopic<'_>> = names
            .iter()
            .map(|name| {
                NewTopic::new(name, partitions, TopicReplication::Fixed(replicas))
                    .set("min.insync.replicas", &min_insync)
            })
            .collect();
        for result in self.client.create_topics(&topics, &Self::options()).await? {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(AdminError::Refused {
                        action: "create",
                        topic,
                        code,
                    });
                }
            }
        }
        // A topic made with fewer partitions grows (never shrinks: a
        // partition's orders must stay readable).
        let mut grow = Vec::new();
        for name in names {
            if (1..partitions).contains(&self.partitions(&[name]).await?) {
                grow.push(NewPartitions::new(name, partitions as usize));
            }
        }
        if !grow.is_empty() {
            for result in self
                .client
                .create_partitions(&grow, &Self::options())
                .await?
            {
                if let Err((topic, code)) = result {
                    return Err(AdminError::Refused {
                        action: "add partitions to",
                        topic,
                        code,
                    });
                }
            }
        }
        for name in names {
            self.wait_for_leaders(name).await?;
        }
        Ok(())
    }

    /// Deletes a consumer group and its committed offsets (a recreated sale of
    /// the same name must start from the beginning of its new topic); a
    /// missing group is fine.
    pub async fn delete_group(&self, group: &str) -> Result<(), AdminError> {
        for result in self
            .client
            .delete_groups(&[group], &Self::options())
            .await?
        {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::GroupIdNotFound)) => {}
                Err((name, code)) => {
                    return Err(AdminError::Refused {
                        action: "delete",
                        topic: name,
                        code,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether every topic exists with all partitions led; returns the
    /// partition count of the first one (0 when any is missing).
    pub async fn partitions(&self, names: &[&str]) -> Result<i32, AdminError> {
        let client = self.client.clone();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let counts = tokio::task::spawn_blocking(move || {
            names
                .iter()
                .map(|name| {
                    let metadata = client
                        .inner()
                        .fetch_metadata(Some(name), METADATA_TIMEOUT)?;
                    Ok(metadata
                        .topics()
                        .iter()
                        .find(|t| t.name() == name && t.error().is_none())
                        .map_or(0, |t| t.partitions().len() as i32))
                })
                .collect::<Result<Vec<i32>, rdkafka::error::KafkaError>>()
        })
        .await
        .expect("metadata fetch does not panic")?;
        Ok(if counts.contains(&0) {
            0
        } else {
            counts.first().copied().unwrap_or(0)
        })
    }

    /// Waits until the metadata names a leader for every partition of `topic`
    /// and every one of them answers a ListOffsets request: the broker
    /// publishes a new partition's leader before it has taken the partition up,
    /// and a produce in between waits (on a busy broker, past its timeout).
    async fn wait_for_leaders(&self, topic: &str) -> Result<(), AdminError> {
        let deadline = tokio::time::Instant::now() + ADMIN_TIMEOUT;
        loop {
            let client = self.client.clone();
            let probe = self.probe.clone();
            let name = topic.to_string();
            let serving = tokio::task::spawn_blocking(move || {
                let metadata = client
                    .inner()
                    .fetch_metadata(Some(&name), METADATA_TIMEOUT)?;
                let led: Option<Vec<i32>> = metadata
                    .topics()
                    .iter()
                    .find(|t| t.name() == name && t.error().is_none())
                    .filter(|t| !t.partitions().is_empty())
                    .and_then(|t| {
                        t.partitions()
                            .iter()
                            .map(|p| (p.leader() >= 0 && p.error().is_none()).then_some(p.id()))
                            .collect()
                    });
                Ok::<_, rdkafka::error::KafkaError>(led.is_some_and(|partitions| {
                    super::lag::list_offsets(&probe, &name, &partitions, Offset::End).is_ok()
                }))
            })
            .await
            .expect("metadata fetch does not panic")?;
            if serving {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdminError::NoLeader(topic.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deletes the topics; a missing topic is fine (idempotent).
    pub async fn delete_topics(&self, names: &[&str]) -> Result<(), AdminError> {
        for result in self.client.delete_topics(names, &Self::options()).await? {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((topic, code)) => {
                    return Err(AdminError::Refused {
                        action: "delete",
                        topic,
                        code,
                    });
                }
            }
        }
        Ok(())
    }
}
