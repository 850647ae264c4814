//! FerroLB's API: the `ferrolb.io/v1beta1` custom resources, the well-known annotation and label
//! names, and configuration validation as pure functions.
//!
//! # Layout
//! - [`v1beta1`]: the custom resources (kube `CustomResource` + schemars, with CEL rules).
//! - [`duration`]: the timers' duration syntax (`90s`, `1m30s`, `500ms`).
//! - [`names`]: annotations, labels, field managers and finalizers.
//! - [`selector`]: label selector matching with Kubernetes semantics.
//! - [`service`]: what FerroLB reads from a core `Service`.
//! - [`validate`]: rules that span objects (overlapping pools, dangling references).
//! - [`summary`]: what a `ConfigurationState` says, from the problems a component found.
//! - [`crd`]: the CRD YAML that `crdgen` writes into the Helm chart.

pub mod crd;
pub mod duration;
pub mod names;
pub mod patch;
pub mod selector;
pub mod service;
pub mod summary;
pub mod v1beta1;
pub mod validate;
