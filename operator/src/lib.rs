//! The FlashSale operator: runs each `FlashSale` from warm-up to cleanup.

pub mod crd;
