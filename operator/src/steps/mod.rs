//! The I/O of one reconcile: observe, apply the plan's actions, warm, degrade while Redis is down, write the status, report outages, clean up a deleted sale; and between reconciles, the watch that wakes a sale whose orders moved.

pub mod apply;
pub mod cleanup;
pub mod degrade;
pub mod kill_switch;
pub mod lag_watch;
pub mod observe;
pub mod outage;
pub mod status;
pub mod warm;
