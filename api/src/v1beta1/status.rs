//! `ServiceL2Status` and `ServiceBGPStatus`: written by speakers, they say who announces what.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The node announcing a Service over layer 2, and on which interfaces.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "ServiceL2Status",
    plural = "servicel2statuses",
    namespaced,
    status = "ServiceL2StatusStatus",
    shortname = "l2st",
    category = "ferrolb",
    printcolumn(name = "Service", type_ = "string", json_path = ".status.serviceName"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(
        name = "Interfaces",
        type_ = "string",
        json_path = ".status.interfaces[*].name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceL2StatusSpec {}

/// What a speaker reports while it answers ARP/NDP for a Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceL2StatusStatus {
    /// The announcing node.
    #[serde(default)]
    pub node: String,
    /// The Service's name.
    #[serde(default)]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(default)]
    pub service_namespace: String,
    /// The addresses answered for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The interfaces answered on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceInfo>,
}

/// A network interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InterfaceInfo {
    /// The interface name.
    pub name: String,
}

/// The peers a node announces a Service to over BGP.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "ServiceBGPStatus",
    plural = "servicebgpstatuses",
    namespaced,
    status = "ServiceBGPStatusStatus",
    shortname = "bgpst",
    category = "ferrolb",
    printcolumn(name = "Service", type_ = "string", json_path = ".status.serviceName"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Peers", type_ = "string", json_path = ".status.peers"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBGPStatusSpec {}

/// What a speaker reports while it announces a Service over BGP.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBGPStatusStatus {
    /// The announcing node.
    #[serde(default)]
    pub node: String,
    /// The Service's name.
    #[serde(default)]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(default)]
    pub service_namespace: String,
    /// The `BGPPeer` names the Service's prefixes are announced to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}
