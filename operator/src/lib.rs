//! The FlashSale operator: runs each `FlashSale` from warm-up to cleanup.
//!
//! Reconcile runs in fixed steps: observe (the resource, what it owns, Redis,
//! PostgreSQL, Kafka) → decide (pure: [`decide::plan`], [`decide::scaling`],
//! [`decide::conditions`]) → apply (idempotent; server-side apply with one
//! field manager) → status. Every import points down this list of rooms:
//!
//! - [`controller`], [`cli`] — the reconcile loop and `kubectl flashsale`, on top;
//! - [`steps`] — the I/O of one reconcile: observe, apply, warm, status, outage, cleanup;
//! - [`cluster`] — the operator among its replicas and the API server: fence, CRD install;
//! - [`context`], [`events`], [`metrics`], [`error`] — shared by the steps;
//! - [`decide`] — pure decisions and the objects the operator owns, built as data;
//! - [`model`] — the CRD's types and time, the ground floor.

pub mod cli;
pub mod cluster;
pub mod context;
pub mod controller;
pub mod decide;
pub mod error;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod metrics;
pub mod model;
pub mod steps;
