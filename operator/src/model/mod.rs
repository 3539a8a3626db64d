//! What a merchant declares and the operator reports, and a sale's time — pure, imports nothing above.

pub mod crd;
pub mod risk;
pub mod sale;
pub mod timeline;
