//! What the allocator needs to know about a Service, as plain data. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::family::IpFamily;

pub use ferrolb_api::service::ServiceKey;

/// A Service port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// `spec.externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TrafficPolicy {
    /// Any node may receive the traffic (the Kubernetes default).
    #[default]
    Cluster,
    /// Only nodes with a ready local endpoint receive the traffic.
    Local,
}

/// `spec.ipFamilyPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FamilyPolicy {
    /// One address, of the first family in `ipFamilies`.
    #[default]
    SingleStack,
    /// Both families when one pool can give both, else the first family.
    PreferDualStack,
    /// Both families from one pool, or nothing.
    RequireDualStack,
}

/// A Service of `type: LoadBalancer` handled by FerroLB, as the allocator sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceRequest {
    /// The Service.
    pub key: ServiceKey,
    /// The Service's labels (matched by pools' `serviceSelectors`).
    pub labels: BTreeMap<String, String>,
    /// Its namespace's labels (matched by pools' `namespaceSelectors`).
    pub namespace_labels: BTreeMap<String, String>,
    /// The pool asked for by annotation, if any.
    pub requested_pool: Option<String>,
    /// The addresses asked for (annotation or `spec.loadBalancerIP`), at most one per family;
    /// see [`requested_from_annotations`](super::requested_from_annotations).
    pub requested_ips: Vec<IpAddr>,
    /// The `allow-shared-ip` key, if any.
    pub sharing_key: Option<String>,
    /// `spec.ports[]` as (port, protocol).
    pub ports: Vec<(u16, Protocol)>,
    /// `spec.externalTrafficPolicy`.
    pub traffic_policy: TrafficPolicy,
    /// `spec.selector`: two `Local` Services may share an address only with the same selector.
    pub pod_selector: BTreeMap<String, String>,
    /// `spec.ipFamilies` in order; empty means "either family, one address".
    pub families: Vec<IpFamily>,
    /// `spec.ipFamilyPolicy`.
    pub family_policy: FamilyPolicy,
    /// The addresses in `status.loadBalancer.ingress` now.
    pub current_ips: Vec<IpAddr>,
}

impl ServiceRequest {
    /// A single-stack IPv4 Service with no ports, labels or requests.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            key: ServiceKey::new(namespace, name),
            families: vec![IpFamily::V4],
            ..Self::default()
        }
    }
}
