//! The `ferrolb.io/v1beta1` custom resources.
//!
//! Field names follow MetalLB's where the meaning is the same, so its documentation applies.
//! Rules that concern one object live in the schema (OpenAPI and CEL `x-kubernetes-validations`),
//! so the API server refuses a bad object itself; rules across objects live in
//! [`crate::validate`].

// Several `printcolumn(...)` entries repeat `type_ = "string"`; clippy reads them as duplicated
// attributes, but each belongs to its own column.
#![allow(clippy::duplicated_attributes)]

mod bfd;
mod bgp;
mod community;
mod configstate;
mod l2;
mod pool;
mod status;

pub use bfd::*;
pub use bgp::*;
pub use community::*;
pub use configstate::*;
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
    let mut crds = vec![
        IPAddressPool::crd(),
        L2Advertisement::crd(),
        BGPAdvertisement::crd(),
        BGPPeer::crd(),
        Community::crd(),
        BFDProfile::crd(),
        ServiceL2Status::crd(),
        ServiceBGPStatus::crd(),
        BGPSessionState::crd(),
        ConfigurationState::crd(),
    ];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                kubernetes_formats(schema);
            }
        }
    }
    crds
}

/// Replaces the integer formats schemars writes for unsigned Rust types (`uint32`, `uint16`),
/// which kube-apiserver does not know and warns about on every apply, with `int64`; the
/// `minimum`/`maximum` the types carry keep the range.
fn kubernetes_formats(
    schema: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
) {
    if let Some(f) = &schema.format
        && f.starts_with("uint")
    {
        schema.format = Some("int64".into());
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        kubernetes_formats(child);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) =
        schema.items.as_mut()
    {
        kubernetes_formats(items);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(extra)) =
        schema.additional_properties.as_mut()
    {
        kubernetes_formats(extra);
    }
}
