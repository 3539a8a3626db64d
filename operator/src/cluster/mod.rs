//! The operator among its replicas and the API server: the leadership fence and the CRD install.

pub mod fence;
pub mod install;
