//! FerroLB controller: the pure IP allocator and its Kubernetes shell.
//!
//! # Layout
//! - [`allocator`]: the pure allocator (no I/O, no clock).
//! - [`convert`]: Kubernetes objects to allocator data and back (pure).
//! - [`leader`]: Lease election (pure core + shell).
//! - [`reconcile`]: the shell that reads the cluster, asks the allocator and writes status.
//! - [`metrics`]: Prometheus metrics.

pub mod allocator;
pub mod convert;
pub mod leader;
pub mod metrics;
pub mod reconcile;
