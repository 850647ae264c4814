//! The `ferrolb.io/v1beta1` custom resources.
//!
//! Field names follow MetalLB's where the meaning is the same, so its documentation applies.
//! Rules that concern one object live in the schema (OpenAPI and CEL `x-kubernetes-validations`),
//! so the API server refuses a bad object itself; rules across objects live in
//! [`crate::validate`].

// Several `printcolumn(...)` entries repeat `type_ = "string"`; clippy reads them as duplicated
// attributes, but each belongs to its own column.
#![allow(clippy::duplicated_attributes)]

mod bgp;
mod community;
mod l2;
mod pool;
mod status;

pub use bgp::*;
pub use community::*;
pub use l2::*;
pub use pool::*;
pub use status::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status shared by configuration objects: whether FerroLB could use the object, and why not.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigStatus {
    /// `Ready` condition: `True` when the object is in use, `False` with a reason saying
    /// what to fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The condition type FerroLB sets on its configuration objects.
pub const CONDITION_READY: &str = "Ready";

/// Every CRD of the API, in a stable order (used by `crdgen` and the test API server).
pub fn all_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![
        IPAddressPool::crd(),
        L2Advertisement::crd(),
        BGPAdvertisement::crd(),
        BGPPeer::crd(),
        Community::crd(),
        ServiceL2Status::crd(),
        ServiceBGPStatus::crd(),
    ]
}
