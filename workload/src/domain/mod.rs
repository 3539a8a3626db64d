//! The pure core: decisions over plain data, no I/O.

pub mod admission;
pub mod breaker;
pub mod budget;
pub mod invariants;
pub mod order;
pub mod payment;
pub mod purchase;
pub mod purchase_token;
pub mod reconcile;
pub mod risk;
pub mod sale;
pub mod seal;
pub mod shard;
pub mod status;
pub mod stock;
