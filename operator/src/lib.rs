//! The FlashSale operator: runs each `FlashSale` from warm-up to cleanup.
//!
//! Reconcile runs in fixed steps: observe (the resource, what it owns, Redis,
//! PostgreSQL, Kafka) → plan (pure: [`plan`], [`scaling`], [`conditions`]) →
//! apply (idempotent; server-side apply with one field manager) → status.

pub mod apply;
pub mod cli;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod crd;
pub mod error;
pub mod events;
pub mod fence;
#[cfg(test)]
mod fixtures;
pub mod metrics;
pub mod observe;
pub mod outage;
pub mod plan;
pub mod resources;
pub mod scaling;
pub mod throttle;
pub mod warm;
