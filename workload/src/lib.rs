//! FlashSale's workload: the shopper API, the order consumers and the jobs,
//! over a pure domain core and thin Redis, PostgreSQL and Kafka adapters.
//!
//! Each Redis key layout, table and topic name has exactly one home here; the
//! operator uses this library for all three.

pub mod api;
pub mod bus;
pub mod catalog;
pub mod consumer;
pub mod domain;
pub mod intake;
pub mod janitor;
pub mod jobs;
pub mod load;
pub mod metrics;
pub mod orders;
pub mod redis;
pub mod risk;
