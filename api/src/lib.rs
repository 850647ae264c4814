//! FerroLB's API: the `ferrolb.io/v1beta1` custom resources, the well-known annotation and label
//! names, and configuration validation as pure functions.

pub mod selector;
