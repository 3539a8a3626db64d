//! The I/O of one reconcile: observe, apply the plan's actions, warm, write the status, report outages, clean up a deleted sale.

pub mod apply;
pub mod cleanup;
pub mod kill_switch;
pub mod observe;
pub mod outage;
pub mod status;
pub mod warm;
