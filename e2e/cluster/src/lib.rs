//! FlashSale's end-to-end test lives in `tests/`: it installs the Helm chart
//! into the real one-node cluster, runs a sale through its whole life under a
//! shopper storm, kills pods mid-storm, and checks the invariants.
