//! What the planners read: a snapshot of the cluster as plain structs, the cluster model's own
//! vocabulary ([`super::convert`] makes them from Kubernetes objects; [`crate::planner`] reads
//! them). Pure: data only.

use crate::l2::election::HoldDown;
use ferrolb_api::validate::{AddressRange, CommunityValue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

pub use ferrolb_api::service::ServiceKey;

/// A LoadBalancer Service FerroLB handles, with the addresses it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// Its key.
    pub key: ServiceKey,
    /// `status.loadBalancer.ingress[].ip`.
    pub ingress: Vec<IpAddr>,
    /// `spec.externalTrafficPolicy: Local`: only nodes with a local endpoint may attract traffic.
    pub local_traffic_policy: bool,
    /// Every endpoint of the Service, merged from all its EndpointSlices.
    pub endpoints: Vec<EndpointInfo>,
    /// `metadata.labels`, for `serviceSelectors`.
    pub labels: ServiceLabels,
}

/// A Service's labels, kept for matching `serviceSelectors` only: one allocation holding
/// `key NUL value NUL` for each label, sorted by key; no labels allocate nothing. A label whose
/// key or value contains NUL (the API server allows neither) is left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceLabels(Box<str>);

impl ServiceLabels {
    /// The compact form of `labels`.
    pub fn new(labels: &BTreeMap<String, String>) -> Self {
        let mut packed = String::new();
        for (k, v) in labels {
            if k.contains('\0') || v.contains('\0') {
                continue;
            }
            packed.push_str(k);
            packed.push('\0');
            packed.push_str(v);
            packed.push('\0');
        }
        ServiceLabels(packed.into_boxed_str())
    }

    /// Every label, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.0.split('\0');
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&BTreeMap<String, String>> for ServiceLabels {
    fn from(labels: &BTreeMap<String, String>) -> Self {
        ServiceLabels::new(labels)
    }
}

/// Whether an advertisement with `selectors` (its `serviceSelectors`) announces a Service
/// labelled `labels`: every Service when it has none, else those any selector matches.
pub fn selects_service(selectors: &[LabelSelector], labels: &ServiceLabels) -> bool {
    selectors.is_empty()
        || selectors
            .iter()
            .any(|s| ferrolb_api::selector::matches_with(s, |k| labels.get(k)))
}

/// The family of an EndpointSlice (`addressType`), which its endpoints serve: kube-proxy
/// programs each family of a Service's addresses from the slices of that family only, so an
/// endpoint counts for the addresses of its slice's family and for no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressType {
    /// `IPv4`: serves the Service's IPv4 addresses.
    Ipv4,
    /// `IPv6`: serves the Service's IPv6 addresses.
    Ipv6,
    /// `FQDN`, or a type this version does not know: kube-proxy ignores such slices, so their
    /// endpoints serve no address.
    Other,
}

impl AddressType {
    /// The type named by an EndpointSlice's `addressType`.
    pub fn of(address_type: &str) -> Self {
        match address_type {
            "IPv4" => AddressType::Ipv4,
            "IPv6" => AddressType::Ipv6,
            _ => AddressType::Other,
        }
    }

    /// Whether endpoints of this type serve `ip` (it is of their family).
    pub fn serves(self, ip: IpAddr) -> bool {
        match self {
            AddressType::Ipv4 => ip.is_ipv4(),
            AddressType::Ipv6 => ip.is_ipv6(),
            AddressType::Other => false,
        }
    }
}

/// One endpoint of an EndpointSlice, with the conditions as Kubernetes defines them: an absent
/// `ready` or `serving` means true, an absent `terminating` means false.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    /// `nodeName`: where the endpoint runs (shared: the model keeps one copy per node name).
    pub node_name: Option<std::sync::Arc<str>>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// Its slice's `addressType`: the family of the Service's addresses it serves.
    pub address_type: AddressType,
}

impl EndpointInfo {
    /// Whether traffic may be sent to it: ready, or serving and not terminating.
    pub fn usable(&self) -> bool {
        let ready = self.ready.unwrap_or(true);
        let serving = self.serving.unwrap_or(ready);
        let terminating = self.terminating.unwrap_or(false);
        ready || (serving && !terminating)
    }

    /// Whether traffic for the Service address `ip` may be sent to it: usable and of `ip`'s
    /// family (kube-proxy forwards an address only to endpoints of its family).
    pub fn serves(&self, ip: IpAddr) -> bool {
        self.address_type.serves(ip) && self.usable()
    }
}

/// A Node as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeInfo {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// A `NetworkUnavailable` condition with status `True`.
    pub network_unavailable: bool,
    /// The `Ready` condition is `True` (the kubelet reports the node healthy).
    pub ready: bool,
    /// The node's first `InternalIP` of each family: the next hop of its paths on sessions
    /// with `announceAllNodes`.
    pub addresses: Vec<IpAddr>,
}

/// An `IPAddressPool` that is ready (valid, overlapping no older pool), with its parsed ranges.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PoolInfo {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`, for `ipAddressPoolSelectors`.
    pub labels: BTreeMap<String, String>,
    /// `spec.addresses`, parsed.
    pub ranges: Vec<AddressRange>,
}

impl PoolInfo {
    /// Whether `ip` lies in one of the pool's ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges
            .iter()
            .any(|r| r.start.is_ipv4() == ip.is_ipv4() && r.start <= ip && ip <= r.end)
    }
}

/// An `L2Advertisement` as the planner needs it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct L2AdvertisementInfo {
    /// `metadata.name`.
    pub name: String,
    /// `spec.ipAddressPools`.
    pub pools: Vec<String>,
    /// `spec.ipAddressPoolSelectors`.
    pub pool_selectors: Vec<LabelSelector>,
    /// `spec.nodeSelectors`.
    pub node_selectors: Vec<LabelSelector>,
    /// `spec.interfaces`.
    pub interfaces: Vec<String>,
    /// `spec.preferredNodeSelectors`, as (weight, preference).
    pub preferred: Vec<(u32, LabelSelector)>,
    /// `spec.serviceSelectors` (every Service when empty).
    pub service_selectors: Vec<LabelSelector>,
}

impl L2AdvertisementInfo {
    /// Whether the advertisement covers `pool`: named, selected, or all pools when it names and
    /// selects none.
    pub fn selects_pool(&self, pool: &PoolInfo) -> bool {
        if self.pools.is_empty() && self.pool_selectors.is_empty() {
            return true;
        }
        // `any_matches` reads an empty list as "everything": only consult non-empty selectors.
        self.pools.contains(&pool.name)
            || self
                .pool_selectors
                .iter()
                .any(|s| ferrolb_api::selector::matches(s, &pool.labels))
    }

    /// Whether the advertisement announces `service` (see [`selects_service`]).
    pub fn selects_service(&self, service: &ServiceInfo) -> bool {
        selects_service(&self.service_selectors, &service.labels)
    }

    /// Whether the advertisement lets `node` answer: all nodes when it has no node selector.
    pub fn selects_node(&self, node: &NodeInfo) -> bool {
        self.node_selectors.is_empty()
            || ferrolb_api::selector::any_matches(&self.node_selectors, &node.labels)
    }

    /// What the advertisement adds to `node`'s preference score: the sum of the weights of the
    /// preferences it matches (an empty selector matches every node), and nothing for a node
    /// its `nodeSelectors` do not select (preferences only rank nodes it already allows).
    pub fn preference(&self, node: &NodeInfo) -> u32 {
        if self.preferred.is_empty() || !self.selects_node(node) {
            return 0;
        }
        self.preferred
            .iter()
            .filter(|(_, s)| ferrolb_api::selector::matches(s, &node.labels))
            .map(|(w, _)| *w)
            .fold(0, u32::saturating_add)
    }
}

/// Everything the planner looks at.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// LoadBalancer Services FerroLB handles that hold at least one address.
    pub services: Vec<ServiceInfo>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// Ready pools.
    pub pools: Vec<PoolInfo>,
    /// Layer-2 advertisements.
    pub l2_advertisements: Vec<L2AdvertisementInfo>,
    /// Nodes whose speaker is alive (from membership, or the Kubernetes view as a fallback).
    pub live_speakers: BTreeSet<String>,
    /// The node this speaker runs on.
    pub this_node: String,
    /// Addresses nodes reported they cannot answer for (no usable interface), by node.
    pub unable: BTreeMap<String, BTreeSet<IpAddr>>,
    /// Nodes whose preferences do not count yet.
    pub hold_down: HoldDown,
}

/// A `BGPAdvertisement` as the planner needs it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BgpAdvertisementInfo {
    /// `metadata.name`.
    pub name: String,
    /// `spec.ipAddressPools`.
    pub pools: Vec<String>,
    /// `spec.ipAddressPoolSelectors`.
    pub pool_selectors: Vec<LabelSelector>,
    /// `spec.nodeSelectors`.
    pub node_selectors: Vec<LabelSelector>,
    /// `spec.peers` (all peers when empty).
    pub peers: Vec<String>,
    /// `spec.aggregationLength` (32 when unset).
    pub aggregation_length: u8,
    /// `spec.aggregationLengthV6` (128 when unset).
    pub aggregation_length_v6: u8,
    /// `spec.localPref`.
    pub local_pref: Option<u32>,
    /// `spec.communities`, aliases already resolved.
    pub communities: Vec<CommunityValue>,
    /// `spec.serviceSelectors` (every Service when empty).
    pub service_selectors: Vec<LabelSelector>,
}

impl BgpAdvertisementInfo {
    /// Whether the advertisement covers `pool` (`ipAddressPools`, `ipAddressPoolSelectors`;
    /// every pool when both are empty).
    pub fn selects_pool(&self, pool: &PoolInfo) -> bool {
        (self.pools.is_empty() && self.pool_selectors.is_empty())
            || self.pools.contains(&pool.name)
            || self
                .pool_selectors
                .iter()
                .any(|s| ferrolb_api::selector::matches(s, &pool.labels))
    }
}

/// A `BGPPeer` as the planner needs it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BgpPeerInfo {
    /// `metadata.name`.
    pub name: String,
    /// `spec.nodeSelectors` (all nodes when empty).
    pub node_selectors: Vec<LabelSelector>,
    /// `spec.announceAllNodes`: the session also carries the paths through every other node
    /// that may carry an address.
    pub announce_all_nodes: bool,
}
