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
/// the selected Services are announced. `preferredNodeSelectors` rank the candidates: the
/// answering node is one of the highest-scoring candidates.
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
    /// Soft preferences among the nodes that may answer: a node scores the sum of the weights
    /// of the preferences it matches, and each address is answered by a live candidate with
    /// the highest score (the usual per-address hash chooses among equals). A preference only
    /// ranks nodes this advertisement's `nodeSelectors` already select; when several
    /// advertisements cover a pool, a node's scores from each of them add up. A preferred node
    /// that comes back takes its addresses back only after it has been live for the speakers'
    /// hold-down (`--l2-preference-hold-down`, 30s by default), so a flapping node does not
    /// move them back and forth.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_selectors: Vec<PreferredNodeSelector>,
}

/// A weighted soft preference for the nodes a label selector matches (the shape of
/// Kubernetes' `PreferredSchedulingTerm`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PreferredNodeSelector {
    /// Added to the score of every node `preference` matches, 1 to 100.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    /// The nodes that get `weight`; an empty selector matches every node.
    pub preference: LabelSelector,
}
