//! Consumer-group lag: per partition, the newest offset minus the group's
//! committed offset. A partition the group never committed counts from its
//! earliest offset: every message in it is still to be consumed (the Kafka
//! CLI's `--describe` omits such partitions; we do not).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{client_config, group_offsets};

/// The offsets of one partition that lag is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// Partition number.
    pub partition: i32,
    /// Oldest offset still in the log.
    pub earliest: i64,
    /// The high watermark: the offset the next message will get.
    pub latest: i64,
    /// The group's committed offset (the next message it will read), if any.
    pub committed: Option<i64>,
}

impl PartitionOffsets {
    /// Messages in this partition the group has not consumed yet.
    pub fn lag(&self) -> i64 {
        // A committed offset older than the log start counts from the start.
        let from = self.committed.unwrap_or(self.earliest).max(self.earliest);
        (self.latest - from).max(0)
    }
}

/// The lag of one consumer group on one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupLag {
    /// Per partition, in partition order.
    pub partitions: Vec<PartitionOffsets>,
}

impl GroupLag {
    /// The sum over partitions.
    pub fn total(&self) -> i64 {
        self.partitions.iter().map(PartitionOffsets::lag).sum()
    }

    /// Partitions that hold unconsumed messages.
    pub fn partitions_with_lag(&self) -> usize {
        self.partitions.iter().filter(|p| p.lag() > 0).count()
    }

    /// Messages the brokers hold that one member has not been given yet, on
    /// the partitions assigned to it: `positions` is each one's next offset
    /// for that member (`None` before its first message, when it reads
    /// from the group's committed offset). Unlike [`GroupLag::total`], a
    /// batch received but not yet committed does not count.
    pub fn unreceived(&self, positions: &[(i32, Option<i64>)]) -> i64 {
        positions
            .iter()
            .filter_map(|&(partition, position)| {
                let p = self.partitions.iter().find(|p| p.partition == partition)?;
                let from = position
                    .or(p.committed)
                    .unwrap_or(p.earliest)
                    .max(p.earliest);
                Some((p.latest - from).max(0))
            })
            .sum()
    }

    /// The offsets one member asked to commit (`asked`: partition, next
    /// offset) that the group does not hold: an asynchronous commit lost to
    /// a coordinator moving (its broker killed) fails quietly, and a member
    /// that receives nothing more never commits again, so the lag would
    /// stay up although every message was persisted.
    pub fn lost_commits(&self, asked: &[(i32, i64)]) -> Vec<(i32, i64)> {
        asked
            .iter()
            .filter(|&&(partition, offset)| {
                self.partitions
                    .iter()
                    .find(|p| p.partition == partition)
                    .is_some_and(|p| p.committed.is_none_or(|c| c < offset))
            })
            .copied()
            .collect()
    }
}

/// Reads a group's lag without joining the group (no rebalance is caused);
/// [`LagReader::read_of`] reads any group's through the same client.
pub struct LagReader {
    consumer: std::sync::Arc<BaseConsumer>,
    group: String,
}

/// Lag could not be read.
#[derive(Debug, thiserror::Error)]
#[error("failed to read consumer-group lag: {0}")]
pub struct LagError(String);

impl From<group_offsets::GroupOffsetsError> for LagError {
    fn from(e: group_offsets::GroupOffsetsError) -> Self {
        Self(e.to_string())
    }
}

impl From<rdkafka::error::KafkaError> for LagError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        Self(e.to_string())
    }
}

const LAG_TIMEOUT: Duration = Duration::from_secs(5);

impl LagReader {
    /// A reader for `group` on the cluster at `bootstrap`.
    pub fn new(bootstrap: &str, group: &str) -> Result<Self, LagError> {
        let consumer: BaseConsumer = client_config(bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        Ok(Self {
            consumer: std::sync::Arc::new(consumer),
            group: group.to_string(),
        })
    }

    /// The group's lag on `topic`: four requests (metadata, the newest and
    /// oldest offsets, committed offsets) whatever the partition count.
    pub async fn read(&self, topic: &str) -> Result<GroupLag, LagError> {
        self.read_of(&self.group, topic).await
    }

    /// `group`'s lag on `topic`, through this reader's client: one client
    /// serves every group (the operator reads a thousand sales' lag).
    pub async fn read_of(&self, group: &str, topic: &str) -> Result<GroupLag, LagError> {
        let consumer = self.consumer.clone();
        let (group, topic) = (group.to_string(), topic.to_string());
        tokio::task::spawn_blocking(move || read_blocking(&consumer, &group, &topic))
            .await
            .map_err(|e| LagError(e.to_string()))?
    }
}

fn read_blocking(consumer: &BaseConsumer, group: &str, topic: &str) -> Result<GroupLag, LagError> {
    let metadata = consumer.fetch_metadata(Some(topic), LAG_TIMEOUT)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .ok_or_else(|| LagError(format!("topic {topic} does not exist")))?
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let latest = list_offsets(consumer, topic, &partitions, Offset::End)?;
    let earliest = list_offsets(consumer, topic, &partitions, Offset::Beginning)?;
    let committed = group_offsets::committed(consumer, group, topic, &partitions, LAG_TIMEOUT)?;
    let partitions = partitions
        .iter()
        .zip(latest.iter().zip(&earliest))
        .zip(committed)
        .map(
            |((&partition, (&latest, &earliest)), committed)| PartitionOffsets {
                partition,
                earliest,
                latest,
                committed,
            },
        )
        .collect();
    Ok(GroupLag { partitions })
}

/// Each partition's newest ([`Offset::End`]) or oldest ([`Offset::Beginning`])
/// offset, in one ListOffsets request per broker. Only a leader that has
/// taken the partition up answers, so this also proves the partitions serve.
pub(super) fn list_offsets(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
    at: Offset,
) -> Result<Vec<i64>, LagError> {
    // ListOffsets takes timestamps: End asks for the newest, Beginning the oldest.
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, at)?;
    }
    let found = consumer.offsets_for_times(tpl, LAG_TIMEOUT)?;
    partitions
        .iter()
        .map(
            |&p| match found.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Ok(o),
                other => Err(LagError(format!("no offset for {topic}/{p}: {other:?}"))),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_commits_are_those_the_group_does_not_hold() {
        let lag = GroupLag {
            partitions: vec![
                PartitionOffsets {
                    partition: 0,
                    earliest: 0,
                    latest: 20,
                    committed: Some(20),
                },
                PartitionOffsets {
                    partition: 1,
                    earliest: 0,
                    latest: 20,
                    committed: Some(15),
                },
                PartitionOffsets {
                    partition: 2,
                    earliest: 0,
                    latest: 20,
                    committed: None,
                },
            ],
        };
        type Offsets = Vec<(i32, i64)>;
        let cases: [(&str, Offsets, Offsets); 5] = [
            ("held", vec![(0, 20)], vec![]),
            ("behind what was asked", vec![(1, 20)], vec![(1, 20)]),
            ("never committed", vec![(2, 3)], vec![(2, 3)]),
            (
                "the group is ahead (another member since)",
                vec![(1, 10)],
                vec![],
            ),
            ("a partition the lag does not know", vec![(7, 5)], vec![]),
        ];
        for (what, asked, lost) in cases {
            assert_eq!(lag.lost_commits(&asked), lost, "{what}");
        }
    }

    #[test]
    fn partition_lag_table() {
        let cases = [
            // (description, earliest, latest, committed, lag)
            ("empty partition, never committed", 0, 0, None, 0),
            ("never committed counts from earliest", 0, 10, None, 10),
            ("never committed, log start moved", 4, 10, None, 6),
            ("committed mid-way", 0, 10, Some(7), 3),
            ("fully consumed", 0, 10, Some(10), 0),
            ("committed before log start", 5, 10, Some(2), 5),
            ("committed beyond latest is no lag", 0, 10, Some(12), 0),
        ];
        for (what, earliest, latest, committed, lag) in cases {
            let p = PartitionOffsets {
                partition: 0,
                earliest,
                latest,
                committed,
            };
            assert_eq!(p.lag(), lag, "{what}");
        }
    }

    #[test]
    fn group_lag_sums_partitions() {
        let lag = GroupLag {
            partitions: vec![
                PartitionOffsets {
                    partition: 0,
                    earliest: 0,
                    latest: 5,
                    committed: Some(5),
                },
                PartitionOffsets {
                    partition: 1,
                    earliest: 0,
                    latest: 9,
                    committed: None,
                },
            ],
        };
        assert_eq!(lag.total(), 9);
        assert_eq!(lag.partitions_with_lag(), 1);
    }

    #[test]
    fn unreceived_counts_only_the_members_partitions_past_its_position() {
        let partition = |partition, earliest, latest, committed| PartitionOffsets {
            partition,
            earliest,
            latest,
            committed,
        };
        let lag = GroupLag {
            partitions: vec![
                partition(0, 0, 40, Some(10)),
                partition(1, 0, 9, None),
                partition(2, 5, 20, Some(2)),
            ],
        };
        type Positions = &'static [(i32, Option<i64>)];
        let cases: [(&str, Positions, i64); 6] = [
            ("nothing assigned", &[], 0),
            (
                "received, not yet committed: not waiting",
                &[(0, Some(40))],
                0,
            ),
            ("stopped short of the end", &[(0, Some(26))], 14),
            (
                "no message yet: from the committed offset",
                &[(0, None)],
                30,
            ),
            (
                "no message, never committed: from the start",
                &[(1, None)],
                9,
            ),
            (
                "two partitions, one past the log start",
                &[(1, Some(9)), (2, None)],
                15,
            ),
        ];
        for (what, positions, unreceived) in cases {
            assert_eq!(lag.unreceived(positions), unreceived, "{what}");
        }
        assert_eq!(
            lag.unreceived(&[(7, None)]),
            0,
            "a partition not in the lag"
        );
    }
}
