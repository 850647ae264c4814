//! FerroLB's test harness.
//!
//! # Layout
//!
//! - [`apiserver`]: a Kubernetes API server for tests and for the lab, faithful to kube-apiserver for
//!   the resources FerroLB uses.

pub mod apiserver;
