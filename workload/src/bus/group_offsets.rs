//! A group's committed offsets through the admin API's
//! ListConsumerGroupOffsets, which names the group in each request: one
//! Kafka client reads every sale's group. The consumer's committed-offsets
//! call reads only its own `group.id` (a client, ~0.6 MiB and its threads,
//! per sale), and rdkafka 0.39 does not wrap this request: librdkafka 2.12
//! does, so this is the one module that calls it directly (`unsafe`, each
//! native object freed by a guard on every path).
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The committed offsets could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GroupOffsetsError(String);

/// Frees a native object when dropped.
struct Owned<T> {
    ptr: *mut T,
    free: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the matching constructor and is freed once.
            unsafe { (self.free)(self.ptr) }
        }
    }
}

fn text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return "unknown error".into();
    }
    // SAFETY: librdkafka's error strings are NUL-terminated and live as
    // long as the object they came from, which outlives this copy.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The offsets `group` committed on `topic`'s `partitions`, in their order
/// (`None` where it never committed), within `timeout`.
pub fn committed(
    client: &BaseConsumer,
    group: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<Vec<Option<i64>>, GroupOffsetsError> {
    let group_id = CString::new(group).map_err(|e| GroupOffsetsError(e.to_string()))?;
    let mut asked = TopicPartitionList::new();
    for &p in partitions {
        asked.add_partition(topic, p);
    }
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let rk = client.client().native_ptr();
    // SAFETY: every pointer below is checked for null before use, is freed
    // by its guard after its last use, and `rk` outlives this call.
    unsafe {
        let request = Owned {
            ptr: rd::rd_kafka_ListConsumerGroupOffsets_new(group_id.as_ptr(), asked.ptr()),
            free: rd::rd_kafka_ListConsumerGroupOffsets_destroy,
        };
        let options = Owned {
            ptr: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
            ),
            free: rd::rd_kafka_AdminOptions_destroy,
        };
        let queue = Owned {
            ptr: rd::rd_kafka_queue_new(rk),
            free: rd::rd_kafka_queue_destroy,
        };
        if request.ptr.is_null() || options.ptr.is_null() || queue.ptr.is_null() {
            return Err(GroupOffsetsError(
                "librdkafka could not make the request".into(),
            ));
        }
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let mut requests = [request.ptr];
        rd::rd_kafka_ListConsumerGroupOffsets(rk, requests.as_mut_ptr(), 1, options.ptr, queue.ptr);
        // The request's own timeout answers first; the poll's margin only
        // guards against an answer that never comes.
        let event = Owned {
            ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(1_000)),
            free: rd::rd_kafka_event_destroy,
        };
        if event.ptr.is_null() {
            return Err(GroupOffsetsError(format!(
                "no committed offsets of {group} within {timeout:?}"
            )));
        }
        if rd::rd_kafka_event_error(event.ptr)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return Err(GroupOffsetsError(text(rd::rd_kafka_event_error_string(
                event.ptr,
            ))));
        }
        let result = rd::rd_kafka_event_ListConsumerGroupOffsets_result(event.ptr);
        let mut count = 0usize;
        let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
        if result.is_null() || groups.is_null() || count != 1 {
            return Err(GroupOffsetsError(format!(
                "{count} groups answered for {group}"
            )));
        }
        let answer = *groups;
        let error = rd::rd_kafka_group_result_error(answer);
        if !error.is_null() {
            return Err(GroupOffsetsError(text(rd::rd_kafka_error_string(error))));
        }
        let list = rd::rd_kafka_group_result_partitions(answer);
        if list.is_null() {
            return Err(GroupOffsetsError(format!(
                "no partitions answered for {group}"
            )));
        }
        let elems =
            std::slice::from_raw_parts((*list).elems, usize::try_from((*list).cnt).unwrap_or(0));
        Ok(partitions
            .iter()
            .map(|&p| {
                elems
                    .iter()
                    .find(|e| e.partition == p && text(e.topic) == topic)
                    .map(|e| e.offset)
                    .filter(|&o| o >= 0)
            })
            .collect())
    }
}
