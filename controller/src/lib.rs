//! FerroLB controller: the pure IP allocator and its Kubernetes shell.
//!
//! # Layout
//! - [`allocator`]: the pure allocator (no I/O, no clock).
//! - [`configstate`]: the controller's `ConfigurationState`, written only on change.
//! - [`convert`]: Kubernetes objects to allocator data and back (pure).
//! - [`apicall`]: why an API call failed, as a type with a metric label, and the retry back-off.
//! - [`events`]: Events on their own task, through a bounded coalescing queue.
//! - [`queue`]: the deduplicating work queue keyed by Service.
//! - [`leader`]: Lease election (pure core + shell).
//! - [`reconcile`]: the shell that reads the cluster, asks the allocator and writes status.
//! - [`metrics`]: Prometheus metrics.

pub mod allocator;
pub mod configstate;
pub mod convert;
/// Why an API call failed, and how long to wait before trying again (shared with the speaker).
pub use ferrolb_telemetry::apicall;
/// Events on their own bounded, coalescing queue (shared with the speaker).
pub use ferrolb_telemetry::events;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod reconcile;
