//! `L2Advertisement`: which pools are announced over ARP/NDP, from which nodes and interfaces.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConfigStatus;

/// Announces the addresses of the selected pools on the local segment (ARP for IPv4, NDP for IPv6).
///
/// With no pool named or selected, every pool is announced. With no node selector, every node
/// is a candidate; one node per address answers. With service selectors, only the addresses of
/// the selected Services are announced.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "L2Advertisement",
    plural = "l2advertisements",
    namespaced,
    status = "ConfigStatus",
    shortname = "l2adv",
    category = "ferrolb",
    printcolumn(
        name = "IPAddressPools",
        type_ = "string",
        json_path = ".spec.ipAddressPools"
    ),
    printcolumn(name = "Interfaces", type_ = "string", json_path = ".spec.interfaces"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct L2AdvertisementSpec {
    /// Pools announced, by name.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "ipAddressPools"
    )]
    pub ip_address_pools: Vec<String>,
    /// Pools announced, by label.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "ipAddressPoolSelectors"
    )]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes that may answer for the addresses (all nodes when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Interfaces to answer on (by default, every interface whose subnet contains the address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1, max = 15)))]
    pub interfaces: Vec<String>,
    /// Services announced, by label (every Service of the selected pools when empty). An
    /// address shared by several Services is announced when any of them is selected; the
    /// advertisements that select none of them take no part in its announcement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}
