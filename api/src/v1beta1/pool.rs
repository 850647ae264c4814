//! `IPAddressPool`: the addresses FerroLB may hand out, and to which Services.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A CEL rule over `spec.addresses`: every entry is a CIDR, or `start-end` with two addresses of
/// one family and, for IPv4, start not after end. CEL has no ordering on IPv6 addresses; a
/// reversed IPv6 range is caught by [`crate::validate`] and reported as the pool's
/// `Ready=False, reason=InvalidAddresses` condition.
pub const ADDRESS_ENTRY_RULE: &str = concat!(
    "self.all(a, isCIDR(a) || (a.split('-').size() == 2",
    " && isIP(a.split('-')[0].trim()) && isIP(a.split('-')[1].trim())",
    " && ip(a.split('-')[0].trim()).family() == ip(a.split('-')[1].trim()).family()",
    " && (ip(a.split('-')[0].trim()).family() == 6",
    " || (((int(a.split('-')[0].trim().split('.')[0]) * 256 + int(a.split('-')[0].trim().split('.')[1])) * 256 + int(a.split('-')[0].trim().split('.')[2])) * 256 + int(a.split('-')[0].trim().split('.')[3]))",
    " <= (((int(a.split('-')[1].trim().split('.')[0]) * 256 + int(a.split('-')[1].trim().split('.')[1])) * 256 + int(a.split('-')[1].trim().split('.')[2])) * 256 + int(a.split('-')[1].trim().split('.')[3])))))"
);

/// How traffic to the address reaches the node, written as `status.loadBalancer.ingress[].ipMode`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum IpMode {
    /// The address is delivered to the node with its destination unchanged (kube-proxy handles it).
    #[default]
    #[serde(rename = "VIP")]
    Vip,
    /// A proxy in front of the node terminates traffic; kube-proxy does not short-circuit the address.
    Proxy,
}

impl IpMode {
    /// The spelling Kubernetes uses in `ipMode`.
    pub fn as_str(self) -> &'static str {
        match self {
            IpMode::Vip => "VIP",
            IpMode::Proxy => "Proxy",
        }
    }
}

/// A pool of addresses for Services of `type: LoadBalancer`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "IPAddressPool",
    plural = "ipaddresspools",
    namespaced,
    status = "IPAddressPoolStatus",
    shortname = "ipp",
    category = "ferrolb",
    // What an operator looks for first: is the pool in use, and how full is it.
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses"),
    printcolumn(
        name = "IPv4 Assigned",
        type_ = "integer",
        json_path = ".status.assignedIPv4"
    ),
    printcolumn(
        name = "IPv4 Available",
        type_ = "integer",
        json_path = ".status.availableIPv4"
    ),
    printcolumn(
        name = "IPv6 Assigned",
        type_ = "integer",
        json_path = ".status.assignedIPv6"
    ),
    printcolumn(
        name = "IPv6 Available",
        type_ = "integer",
        json_path = ".status.availableIPv6",
        priority = 1
    ),
    printcolumn(
        name = "Auto Assign",
        type_ = "boolean",
        json_path = ".spec.autoAssign",
        priority = 1
    ),
    printcolumn(
        name = "Avoid Buggy IPs",
        type_ = "boolean",
        json_path = ".spec.avoidBuggyIPs",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressPoolSpec {
    /// Addresses in the pool: CIDRs (`10.0.0.0/24`, `fd00::/112`) or inclusive ranges
    /// (`10.0.0.10-10.0.0.20`). IPv4 and IPv6 entries may be mixed in one pool.
    // Bounds the CEL rule's estimated cost: kube-apiserver refuses a CRD whose rule iterates
    // over an unbounded list of unbounded strings ("estimated rule cost exceeds budget").
    #[schemars(length(min = 1, max = 1024), inner(length(min = 1, max = 128)))]
    #[x_kube(validation = Rule::new(ADDRESS_ENTRY_RULE)
        .message("each address must be a CIDR such as 10.0.0.0/24 or a range such as 10.0.0.10-10.0.0.20 of one family, start not after end"))]
    pub addresses: Vec<String>,
    /// Whether Services that do not ask for this pool by name may get addresses from it.
    #[serde(default = "default_true")]
    pub auto_assign: bool,
    /// Skip IPv4 addresses ending in `.0` and `.255`, which some old equipment drops.
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    /// Restricts which Services may draw from the pool, and in which order pools are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
    /// The `ipMode` written on Services that get an address from this pool; when unset, the
    /// controller's `--default-ip-mode` (itself `VIP` unless configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_mode: Option<IpMode>,
}

fn default_true() -> bool {
    true
}

/// Which Services may get an address from a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Pools with a lower priority are tried first; pools without a priority come after those
    /// with one; ties are broken by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub priority: Option<i32>,
    /// Namespaces whose Services may use the pool (any namespace when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces, by label, whose Services may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Services, by label, that may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// What the controller reports about a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressPoolStatus {
    /// IPv4 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv4")]
    pub assigned_ipv4: i64,
    /// IPv6 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv6")]
    pub assigned_ipv6: i64,
    /// IPv4 addresses still free (saturates at the largest int64).
    #[serde(default, rename = "availableIPv4")]
    pub available_ipv4: i64,
    /// IPv6 addresses still free (saturates at the largest int64: a /64 has more).
    #[serde(default, rename = "availableIPv6")]
    pub available_ipv6: i64,
    /// `Ready`: `True` (reason `Valid`) when the pool is used; `False` with reason `Overlap` or
    /// `InvalidAddresses` when it is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
