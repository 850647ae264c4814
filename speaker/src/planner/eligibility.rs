//! Why a node may not attract traffic for a Service address, shared by layer 2 and BGP. Pure:
//! no I/O, no clock.
//!
//! Endpoints count per family, as kube-proxy counts them: it programs a Service's IPv4
//! addresses from its `addressType: IPv4` EndpointSlices only and its IPv6 addresses from its
//! `IPv6` ones (`FQDN` slices from neither). An address whose family has no usable endpoint
//! is dropped by every node, and under `externalTrafficPolicy: Local` a node drops traffic for
//! an address unless an endpoint of that address's family runs on it; so every check here is
//! made for one address.

use super::input::{NodeInfo, ServiceInfo};
use ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB;
use std::fmt;
use std::net::IpAddr;

/// Why a node is not a candidate to announce an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotEligible {
    /// The node carries `node.kubernetes.io/exclude-from-external-load-balancers`.
    Excluded,
    /// The node's `NetworkUnavailable` condition is `True`.
    NetworkUnavailable,
    /// No speaker is alive on the node (or it has no Node object).
    SpeakerNotLive,
    /// No advertisement covers the address's pool.
    NoMatchingAdvertisement,
    /// Advertisements cover the pool, but none of their `nodeSelectors` selects the node.
    NodeSelectorMismatch,
    /// Advertisements cover the pool, but none of their `serviceSelectors` selects the Service.
    ServiceSelectorMismatch,
    /// `externalTrafficPolicy: Local` and no usable endpoint of the Service of the address's
    /// family runs on the node.
    NoLocalEndpoint,
    /// The Service has no usable endpoint of the address's family on any node.
    NoReadyEndpoints,
    /// The node's speaker reported that it has no usable interface for the address (missing,
    /// down, NOARP): another node answers instead.
    CannotAnswer,
}

impl NotEligible {
    /// A stable label for metrics, logs and Events.
    pub fn label(self) -> &'static str {
        match self {
            NotEligible::Excluded => "Excluded",
            NotEligible::NetworkUnavailable => "NetworkUnavailable",
            NotEligible::SpeakerNotLive => "SpeakerNotLive",
            NotEligible::NoMatchingAdvertisement => "NoMatchingAdvertisement",
            NotEligible::NodeSelectorMismatch => "NodeSelectorMismatch",
            NotEligible::ServiceSelectorMismatch => "ServiceSelectorMismatch",
            NotEligible::NoLocalEndpoint => "NoLocalEndpoint",
            NotEligible::NoReadyEndpoints => "NoReadyEndpoints",
            NotEligible::CannotAnswer => "CannotAnswer",
        }
    }
}

impl fmt::Display for NotEligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Checks that do not depend on the Service: the exclusion label (any value) and the
/// `NetworkUnavailable` condition.
pub fn node_may_announce(node: &NodeInfo) -> Result<(), NotEligible> {
    if node.labels.contains_key(EXCLUDE_FROM_EXTERNAL_LB) {
        return Err(NotEligible::Excluded);
    }
    if node.network_unavailable {
        return Err(NotEligible::NetworkUnavailable);
    }
    Ok(())
}

/// Whether `service` has a usable endpoint anywhere for its address `ip`: one of `ip`'s family.
pub fn has_usable_endpoints(service: &ServiceInfo, ip: IpAddr) -> bool {
    service.endpoints.iter().any(|e| e.serves(ip))
}

/// The nodes that run a usable endpoint of `service` for its address `ip` (one of `ip`'s
/// family), once per such endpoint: under `externalTrafficPolicy: Local`, the only nodes that
/// may attract its traffic.
pub fn nodes_serving(service: &ServiceInfo, ip: IpAddr) -> impl Iterator<Item = &str> {
    service
        .endpoints
        .iter()
        .filter(move |e| e.serves(ip))
        .filter_map(|e| e.node_name.as_deref())
}

/// Checks that depend on the Service, for its address `ip`: it has usable endpoints of `ip`'s
/// family and, with `externalTrafficPolicy: Local`, one of them runs on `node`.
pub fn service_may_use(service: &ServiceInfo, node: &str, ip: IpAddr) -> Result<(), NotEligible> {
    if !has_usable_endpoints(service, ip) {
        return Err(NotEligible::NoReadyEndpoints);
    }
    if service.local_traffic_policy && !nodes_serving(service, ip).any(|n| n == node) {
        return Err(NotEligible::NoLocalEndpoint);
    }
    Ok(())
}
