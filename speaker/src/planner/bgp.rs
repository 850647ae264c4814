//! The BGP plan: which prefixes this node announces to which peers, with which attributes.
//! Pure: no I/O, no clock.
//!
//! Every eligible node announces (BGP has no single owner: routers spread traffic over the
//! nodes with ECMP). A node announces a Service address to a peer when a `BGPAdvertisement`
//! selects the address's pool, the Service (`serviceSelectors`) and this node, names the peer
//! (or names none), the peer's own
//! `nodeSelectors` select this node, the node may announce at all (not excluded, network
//! available), and the Service has a usable endpoint (on this node, for
//! `externalTrafficPolicy: Local`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_api::validate::CommunityValue;
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::eligibility::{NotEligible, node_may_announce, service_may_use};
use super::input::{NodeInfo, PoolInfo, ServiceInfo, ServiceKey, Snapshot, selects_service};
use crate::bgp::config::{Advertisement, AnyCommunity, RouteAttrs};

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
    fn selects_pool(&self, pool: &PoolInfo) -> bool {
        (self.pools.is_empty() && self.pool_selectors.is_empty())
            || self.pools.contains(&pool.name)
            || self
                .pool_selectors
                .iter()
                .any(|s| ferrolb_api::selector::matches(s, &pool.labels))
    }

    fn attrs(&self) -> RouteAttrs {
        let mut attrs = RouteAttrs {
            local_pref: self.local_pref,
            ..Default::default()
        };
        for c in &self.communities {
            match AnyCommunity::from(*c) {
                AnyCommunity::Standard(std) => {
                    attrs.communities.insert(std);
                }
                AnyCommunity::Large(large) => {
                    attrs.large_communities.insert(large);
                }
            }
        }
        attrs
    }

    fn prefix(&self, ip: IpAddr) -> IpNet {
        let len = if ip.is_ipv4() {
            self.aggregation_length.min(32)
        } else {
            self.aggregation_length_v6.min(128)
        };
        IpNet::new(ip, len)
            .expect("length clamped to the family")
            .trunc()
    }
}

/// A `BGPPeer` as the planner needs it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BgpPeerInfo {
    /// `metadata.name`.
    pub name: String,
    /// `spec.nodeSelectors` (all nodes when empty).
    pub node_selectors: Vec<LabelSelector>,
}

/// What this node announces over BGP.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BgpPlan {
    /// Per peer (by `BGPPeer` name): the full set of advertisements, attributes merged per prefix.
    pub per_peer: BTreeMap<String, Vec<Advertisement>>,
    /// Per Service: the peers its addresses are announced to from this node.
    pub per_service: BTreeMap<ServiceKey, BTreeSet<String>>,
    /// Per Service this node does not announce at all: why.
    pub not_announced: BTreeMap<ServiceKey, NotEligible>,
}

/// This node as the BGP planner needs it: whether it may announce at all and the peers whose
/// `nodeSelectors` select it.
#[derive(Clone, Debug)]
pub struct BgpNode<'a> {
    /// The node's name.
    pub name: &'a str,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// [`node_may_announce`] of the node.
    pub may_announce: Result<(), NotEligible>,
    /// The peers that select it.
    pub peers: Vec<&'a BgpPeerInfo>,
}

impl<'a> BgpNode<'a> {
    /// `this_node` among `nodes` (a node without a Node object may announce, with no labels).
    pub fn new(
        this_node: &'a str,
        nodes: &BTreeMap<String, NodeInfo>,
        peers: &'a [BgpPeerInfo],
    ) -> Self {
        let node = nodes.get(this_node).cloned().unwrap_or_else(|| NodeInfo {
            name: this_node.to_owned(),
            ..Default::default()
        });
        BgpNode {
            name: this_node,
            may_announce: node_may_announce(&node),
            peers: peers
                .iter()
                .filter(|p| ferrolb_api::selector::any_matches(&p.node_selectors, &node.labels))
                .collect(),
            labels: node.labels,
        }
    }
}

/// What one Service contributes to this node's BGP announcements.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceRoutes {
    /// (peer, prefix, attributes) for each of its addresses and each peer it goes to.
    pub routes: Vec<(String, IpNet, RouteAttrs)>,
    /// The peers it is announced to, or why it is not announced at all.
    pub announced_to: Result<BTreeSet<String>, NotEligible>,
}

/// What `svc` contributes to `node`'s announcements.
pub fn service_routes(
    node: &BgpNode<'_>,
    pools: &[PoolInfo],
    advertisements: &[BgpAdvertisementInfo],
    svc: &ServiceInfo,
) -> ServiceRoutes {
    let mut out = ServiceRoutes {
        routes: Vec::new(),
        announced_to: Err(NotEligible::NoMatchingAdvertisement),
    };
    if let Err(why) = node
        .may_announce
        .and_then(|_| service_may_use(svc, node.name))
    {
        out.announced_to = Err(why);
        return out;
    }
    let mut announced_to = BTreeSet::new();
    let mut why_not = NotEligible::NoMatchingAdvertisement;
    for ip in &svc.ingress {
        let Some(pool) = pools.iter().find(|p| p.contains(*ip)) else {
            continue;
        };
        for adv in advertisements.iter().filter(|a| a.selects_pool(pool)) {
            if !selects_service(&adv.service_selectors, &svc.labels) {
                if why_not == NotEligible::NoMatchingAdvertisement {
                    why_not = NotEligible::ServiceSelectorMismatch;
                }
                continue;
            }
            if !ferrolb_api::selector::any_matches(&adv.node_selectors, &node.labels) {
                why_not = NotEligible::NodeSelectorMismatch;
                continue;
            }
            let prefix = adv.prefix(*ip);
            let attrs = adv.attrs();
            for peer in node
                .peers
                .iter()
                .filter(|p| adv.peers.is_empty() || adv.peers.contains(&p.name))
            {
                out.routes.push((peer.name.clone(), prefix, attrs.clone()));
                announced_to.insert(peer.name.clone());
            }
        }
    }
    out.announced_to = if announced_to.is_empty() {
        Err(why_not)
    } else {
        Ok(announced_to)
    };
    out
}

/// Merges the routes of several Services into one advertisement per prefix (attributes merged
/// when several Services or advertisements give the same prefix, as with aggregation).
pub fn merge_routes<'a>(
    routes: impl IntoIterator<Item = (&'a IpNet, &'a RouteAttrs)>,
) -> Vec<Advertisement> {
    let mut merged: BTreeMap<IpNet, RouteAttrs> = BTreeMap::new();
    for (prefix, attrs) in routes {
        merged
            .entry(*prefix)
            .and_modify(|a| a.merge(attrs))
            .or_insert_with(|| attrs.clone());
    }
    merged
        .into_iter()
        .map(|(prefix, attrs)| Advertisement {
            prefix,
            attrs,
            next_hop: None,
        })
        .collect()
}

/// Computes the BGP plan of `snapshot.this_node` (the reference: the speaker keeps it up to date
/// with [`super::incremental::BgpTracker`]).
pub fn plan_bgp(
    snapshot: &Snapshot,
    advertisements: &[BgpAdvertisementInfo],
    peers: &[BgpPeerInfo],
) -> BgpPlan {
    let mut plan = BgpPlan::default();
    let node = BgpNode::new(&snapshot.this_node, &snapshot.nodes, peers);
    let mut routes: BTreeMap<String, Vec<(IpNet, RouteAttrs)>> = node
        .peers
        .iter()
        .map(|p| (p.name.clone(), Vec::new()))
        .collect();
    for svc in &snapshot.services {
        let contribution = service_routes(&node, &snapshot.pools, advertisements, svc);
        for (peer, prefix, attrs) in contribution.routes {
            routes.entry(peer).or_default().push((prefix, attrs));
        }
        match contribution.announced_to {
            Ok(peers) => {
                plan.per_service.insert(svc.key.clone(), peers);
            }
            Err(why) => {
                plan.not_announced.insert(svc.key.clone(), why);
            }
        }
    }
    plan.per_peer = routes
        .into_iter()
        .map(|(peer, prefixes)| (peer, merge_routes(prefixes.iter().map(|(p, a)| (p, a)))))
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::input::{EndpointInfo, ServiceInfo};
    use ferrolb_api::validate::AddressRange;

    fn endpoint(node: &str) -> EndpointInfo {
        EndpointInfo {
            node_name: Some(node.into()),
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }
    }

    fn snapshot(me: &str, local: bool, endpoints_on: &[&str]) -> Snapshot {
        let pool = PoolInfo {
            name: "public".into(),
            labels: BTreeMap::new(),
            ranges: vec![
                AddressRange::parse("10.99.5.0/24").unwrap(),
                AddressRange::parse("fd00:99:5::/64").unwrap(),
            ],
        };
        let svc = ServiceInfo {
            key: ServiceKey::new("default", "web"),
            ingress: vec![
                "10.99.5.7".parse().unwrap(),
                "fd00:99:5::7".parse().unwrap(),
            ],
            local_traffic_policy: local,
            endpoints: endpoints_on.iter().map(|n| endpoint(n)).collect(),
            labels: Default::default(),
        };
        let nodes = ["a", "b"]
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    NodeInfo {
                        name: n.to_string(),
                        ..Default::default()
                    },
                )
            })
            .collect();
        Snapshot {
            services: vec![svc],
            nodes,
            pools: vec![pool],
            l2_advertisements: vec![],
            live_speakers: BTreeSet::from(["a".to_string(), "b".to_string()]),
            this_node: me.into(),
            unable: BTreeMap::new(),
            hold_down: Default::default(),
        }
    }

    fn adv() -> BgpAdvertisementInfo {
        BgpAdvertisementInfo {
            name: "public".into(),
            aggregation_length: 32,
            aggregation_length_v6: 128,
            local_pref: Some(200),
            communities: vec![
                CommunityValue::Standard(65000, 1),
                CommunityValue::Large(64512, 1, 2),
            ],
            ..Default::default()
        }
    }

    fn peers() -> Vec<BgpPeerInfo> {
        vec![BgpPeerInfo {
            name: "tor".into(),
            node_selectors: vec![],
        }]
    }

    #[test]
    fn every_eligible_node_announces_each_address_as_a_host_route_to_every_peer() {
        for me in ["a", "b"] {
            let plan = plan_bgp(&snapshot(me, false, &["a"]), &[adv()], &peers());
            let prefixes: Vec<String> = plan.per_peer["tor"]
                .iter()
                .map(|a| a.prefix.to_string())
                .collect();
            assert_eq!(prefixes, ["10.99.5.7/32", "fd00:99:5::7/128"], "node {me}");
        }
    }

    #[test]
    fn attributes_carry_local_preference_and_both_community_kinds() {
        let plan = plan_bgp(&snapshot("a", false, &["a"]), &[adv()], &peers());
        let attrs = &plan.per_peer["tor"][0].attrs;
        assert_eq!(attrs.local_pref, Some(200));
        assert!(
            attrs
                .communities
                .contains(&crate::bgp::config::Community(0xFDE8_0001))
        );
        assert_eq!(attrs.large_communities.len(), 1);
    }

    #[test]
    fn with_local_traffic_policy_only_nodes_with_an_endpoint_announce() {
        let plan = plan_bgp(&snapshot("b", true, &["a"]), &[adv()], &peers());
        assert!(plan.per_peer["tor"].is_empty());
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "web")],
            NotEligible::NoLocalEndpoint
        );
        let plan = plan_bgp(&snapshot("a", true, &["a"]), &[adv()], &peers());
        assert_eq!(plan.per_peer["tor"].len(), 2);
    }

    #[test]
    fn a_service_without_ready_endpoints_is_not_announced() {
        let plan = plan_bgp(&snapshot("a", false, &[]), &[adv()], &peers());
        assert!(plan.per_peer["tor"].is_empty());
    }

    #[test]
    fn aggregation_announces_the_covering_prefix_once() {
        let mut s = snapshot("a", false, &["a"]);
        let mut second = s.services[0].clone();
        second.key = ServiceKey::new("default", "api");
        second.ingress = vec!["10.99.5.9".parse().unwrap()];
        s.services.push(second);
        let a = BgpAdvertisementInfo {
            aggregation_length: 24,
            ..adv()
        };
        let plan = plan_bgp(&s, &[a], &peers());
        let v4: Vec<String> = plan.per_peer["tor"]
            .iter()
            .filter(|a| a.prefix.addr().is_ipv4())
            .map(|a| a.prefix.to_string())
            .collect();
        assert_eq!(v4, ["10.99.5.0/24"]);
    }

    #[test]
    fn aggregation_length_v6_announces_the_covering_ipv6_prefix_once_and_leaves_ipv4_alone() {
        let mut s = snapshot("a", false, &["a"]);
        let mut second = s.services[0].clone();
        second.key = ServiceKey::new("default", "api");
        second.ingress = vec!["fd00:99:5::f0".parse().unwrap()];
        s.services.push(second);
        let a = BgpAdvertisementInfo {
            aggregation_length_v6: 120,
            ..adv()
        };
        let plan = plan_bgp(&s, &[a], &peers());
        let prefixes: Vec<String> = plan.per_peer["tor"]
            .iter()
            .map(|a| a.prefix.to_string())
            .collect();
        assert_eq!(prefixes, ["10.99.5.7/32", "fd00:99:5::/120"]);
    }

    #[test]
    fn an_advertisement_naming_other_peers_or_other_nodes_announces_nothing_here() {
        let named = BgpAdvertisementInfo {
            peers: vec!["spine".into()],
            ..adv()
        };
        assert!(
            plan_bgp(&snapshot("a", false, &["a"]), &[named], &peers()).per_peer["tor"].is_empty()
        );
        let selective = BgpAdvertisementInfo {
            node_selectors: vec![LabelSelector {
                match_labels: Some([("rack".to_string(), "1".to_string())].into()),
                ..Default::default()
            }],
            ..adv()
        };
        let plan = plan_bgp(&snapshot("a", false, &["a"]), &[selective], &peers());
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "web")],
            NotEligible::NodeSelectorMismatch
        );
    }

    #[test]
    fn an_excluded_node_announces_nothing() {
        let mut s = snapshot("a", false, &["a"]);
        s.nodes.get_mut("a").unwrap().labels.insert(
            ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB.into(),
            "".into(),
        );
        let plan = plan_bgp(&s, &[adv()], &peers());
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "web")],
            NotEligible::Excluded
        );
    }

    fn tier(value: &str) -> crate::planner::ServiceLabels {
        crate::planner::ServiceLabels::new(&[("tier".to_string(), value.to_string())].into())
    }

    fn for_tier(value: &str) -> BgpAdvertisementInfo {
        BgpAdvertisementInfo {
            service_selectors: vec![LabelSelector {
                match_labels: Some([("tier".to_string(), value.to_string())].into()),
                ..Default::default()
            }],
            ..adv()
        }
    }

    #[test]
    fn an_advertisement_with_service_selectors_announces_only_the_services_they_select() {
        let mut s = snapshot("a", false, &["a"]);
        let web = ServiceKey::new("default", "web");
        let plan = plan_bgp(&s, &[for_tier("public")], &peers());
        assert!(plan.per_peer["tor"].is_empty());
        assert_eq!(
            plan.not_announced[&web],
            NotEligible::ServiceSelectorMismatch
        );
        s.services[0].labels = tier("public");
        let plan = plan_bgp(&s, &[for_tier("public")], &peers());
        assert_eq!(plan.per_peer["tor"].len(), 2);
        assert_eq!(plan.per_service[&web], BTreeSet::from(["tor".to_string()]));
    }

    #[test]
    fn a_selected_service_on_other_nodes_reads_as_a_node_selector_mismatch() {
        let mut s = snapshot("a", false, &["a"]);
        s.services[0].labels = tier("public");
        let elsewhere = BgpAdvertisementInfo {
            node_selectors: vec![LabelSelector {
                match_labels: Some([("rack".to_string(), "9".to_string())].into()),
                ..Default::default()
            }],
            ..for_tier("public")
        };
        let plan = plan_bgp(&s, &[for_tier("internal"), elsewhere], &peers());
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "web")],
            NotEligible::NodeSelectorMismatch
        );
    }

    #[test]
    fn a_shared_address_is_announced_once_when_one_of_its_services_is_selected() {
        let mut s = snapshot("a", false, &["a"]);
        s.services[0].labels = tier("public");
        let mut other = s.services[0].clone();
        other.key = ServiceKey::new("default", "other");
        other.labels = tier("internal");
        s.services.push(other);
        let plan = plan_bgp(&s, &[for_tier("public")], &peers());
        let prefixes: Vec<String> = plan.per_peer["tor"]
            .iter()
            .map(|a| a.prefix.to_string())
            .collect();
        assert_eq!(prefixes, ["10.99.5.7/32", "fd00:99:5::7/128"]);
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "other")],
            NotEligible::ServiceSelectorMismatch
        );
    }
}
