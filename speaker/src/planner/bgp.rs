//! The BGP plan: which prefixes this node announces to which peers, with which attributes.
//! Pure: no I/O, no clock.
//!
//! Every eligible node announces (BGP has no single owner: routers spread traffic over the
//! nodes with ECMP). A node announces a Service address to a peer when a `BGPAdvertisement`
//! selects the address's pool, the Service (`serviceSelectors`) and this node, names the peer
//! (or names none), the peer's own
//! `nodeSelectors` select this node, the node may announce at all (not excluded, network
//! available), and the Service has a usable endpoint of the address's family (on this node,
//! for `externalTrafficPolicy: Local`).
//!
//! A peer with `announceAllNodes` also gets, from each node its `nodeSelectors` select, a path
//! through every other node that may carry the address (ready, not excluded, selected by the
//! advertisement, with a local endpoint of the address's family under
//! `externalTrafficPolicy: Local`), its `InternalIP` as next hop ([`Route::next_hop`]); the
//! session sends them with ADD-PATH.
//!
//! Endpoints count per family, as kube-proxy counts them ([`super::eligibility`]): each
//! address of a dual-stack Service is decided on its own, so a `Local` Service's IPv4 address
//! goes out from the nodes with an IPv4 endpoint and its IPv6 address from those with an IPv6
//! one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::eligibility::{NotEligible, node_may_announce, service_may_use};
pub use super::input::{BgpAdvertisementInfo, BgpPeerInfo};
use super::input::{NodeInfo, PoolInfo, ServiceInfo, ServiceKey, Snapshot, selects_service};
use crate::bgp::config::{Advertisement, AnyCommunity, RouteAttrs};

/// The route attributes an advertisement asks for.
fn attrs(adv: &BgpAdvertisementInfo) -> RouteAttrs {
    let mut attrs = RouteAttrs {
        local_pref: adv.local_pref,
        ..Default::default()
    };
    for c in &adv.communities {
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

/// The prefix announced for `ip`: the advertisement's aggregation length for its family.
fn prefix(adv: &BgpAdvertisementInfo, ip: IpAddr) -> IpNet {
    let len = if ip.is_ipv4() {
        adv.aggregation_length.min(32)
    } else {
        adv.aggregation_length_v6.min(128)
    };
    IpNet::new(ip, len)
        .expect("length clamped to the family")
        .trunc()
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
    /// The other nodes that may carry traffic at all (ready, not excluded, network available),
    /// for the peers with `announceAllNodes`; empty when no peer of this node has it.
    pub others: Vec<&'a NodeInfo>,
}

impl<'a> BgpNode<'a> {
    /// `this_node` among `nodes` (a node without a Node object may announce, with no labels).
    pub fn new(
        this_node: &'a str,
        nodes: &'a BTreeMap<String, NodeInfo>,
        peers: &'a [BgpPeerInfo],
    ) -> Self {
        let node = nodes.get(this_node).cloned().unwrap_or_else(|| NodeInfo {
            name: this_node.to_owned(),
            ..Default::default()
        });
        let peers: Vec<&BgpPeerInfo> = peers
            .iter()
            .filter(|p| ferrolb_api::selector::any_matches(&p.node_selectors, &node.labels))
            .collect();
        let others = if peers.iter().any(|p| p.announce_all_nodes) {
            nodes
                .values()
                .filter(|n| n.name != this_node && n.ready && node_may_announce(n).is_ok())
                .collect()
        } else {
            Vec::new()
        };
        BgpNode {
            name: this_node,
            may_announce: node_may_announce(&node),
            peers,
            others,
            labels: node.labels,
        }
    }

    /// The next hops of the other nodes that may carry `ip` of `svc` under `adv` (with an
    /// endpoint of `ip`'s family under `externalTrafficPolicy: Local`): their `InternalIP` of
    /// `ip`'s family.
    fn other_next_hops(
        &self,
        svc: &ServiceInfo,
        adv: &BgpAdvertisementInfo,
        ip: IpAddr,
    ) -> Vec<IpAddr> {
        self.others
            .iter()
            .filter(|n| ferrolb_api::selector::any_matches(&adv.node_selectors, &n.labels))
            .filter(|n| service_may_use(svc, &n.name, ip).is_ok())
            .filter_map(|n| {
                n.addresses
                    .iter()
                    .find(|a| a.is_ipv4() == ip.is_ipv4())
                    .copied()
            })
            .collect()
    }
}

/// A path: a prefix and its next hop (`None`: through this node).
pub type PathKey = (IpNet, Option<IpAddr>);

/// One path a Service contributes to a peer.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The peer (`BGPPeer` name).
    pub peer: String,
    /// The announced prefix.
    pub prefix: IpNet,
    /// `None`: through this node (the session's own next hop); an address: through another
    /// node (`announceAllNodes`).
    pub next_hop: Option<IpAddr>,
    /// The path's attributes.
    pub attrs: RouteAttrs,
}

/// What one Service contributes to this node's BGP announcements.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceRoutes {
    /// Each path of each of its addresses to each peer it goes to.
    pub routes: Vec<Route>,
    /// The peers it is announced to, or why it is not announced at all.
    pub announced_to: Result<BTreeSet<String>, NotEligible>,
}

/// What `svc` contributes to `node`'s announcements: the routes of each of its addresses. It
/// is announced to a peer when any of its addresses is. When none goes anywhere, the reason is
/// its first address's (the lowest: IPv4 before IPv6): this node's own when that address may
/// not go out from it (excluded, no endpoint of its family...), else the most specific one
/// from the configuration among the addresses that may (a node selector before a service
/// selector before no advertisement at all).
pub fn service_routes(
    node: &BgpNode<'_>,
    pools: &[PoolInfo],
    advertisements: &[BgpAdvertisementInfo],
    svc: &ServiceInfo,
) -> ServiceRoutes {
    routes_of(node, pools, advertisements, svc, &svc.ingress)
}

/// What `ip`, an address of `svc`, contributes to `node`'s announcements on its own: its
/// routes, and the peers they go to or why none (for `ferrolb explain`, which explains one
/// address at a time).
pub fn address_routes(
    node: &BgpNode<'_>,
    pools: &[PoolInfo],
    advertisements: &[BgpAdvertisementInfo],
    svc: &ServiceInfo,
    ip: IpAddr,
) -> ServiceRoutes {
    routes_of(node, pools, advertisements, svc, &[ip])
}

/// What the addresses `ips` of `svc` contribute (see [`service_routes`]).
fn routes_of(
    node: &BgpNode<'_>,
    pools: &[PoolInfo],
    advertisements: &[BgpAdvertisementInfo],
    svc: &ServiceInfo,
    ips: &[IpAddr],
) -> ServiceRoutes {
    let mut out = ServiceRoutes {
        routes: Vec::new(),
        announced_to: Err(NotEligible::NoMatchingAdvertisement),
    };
    // Whether this node's own path of an address may go out, once per family (endpoints count
    // per family); a peer with `announceAllNodes` still carries the other nodes' paths when it
    // may not.
    let mut own_by_family: [Option<Result<(), NotEligible>>; 2] = [None, None];
    let mut own_of = |ip: IpAddr| {
        *own_by_family[usize::from(ip.is_ipv6())].get_or_insert_with(|| {
            node.may_announce
                .and_then(|_| service_may_use(svc, node.name, ip))
        })
    };
    let first_own = ips.first().map(|ip| own_of(*ip));
    let mut announced_to = BTreeSet::new();
    let mut why_not = NotEligible::NoMatchingAdvertisement;
    for ip in ips {
        let own = own_of(*ip);
        if own.is_err() && node.others.is_empty() {
            continue;
        }
        let Some(pool) = pools.iter().find(|p| p.contains(*ip)) else {
            continue;
        };
        for adv in advertisements.iter().filter(|a| a.selects_pool(pool)) {
            if !selects_service(&adv.service_selectors, &svc.labels) {
                if own.is_ok() && why_not == NotEligible::NoMatchingAdvertisement {
                    why_not = NotEligible::ServiceSelectorMismatch;
                }
                continue;
            }
            let own_selected =
                ferrolb_api::selector::any_matches(&adv.node_selectors, &node.labels);
            if own.is_ok() && !own_selected {
                why_not = NotEligible::NodeSelectorMismatch;
            }
            let own_path = own.is_ok() && own_selected;
            let prefix = prefix(adv, *ip);
            let attrs = attrs(adv);
            let peers = node
                .peers
                .iter()
                .filter(|p| adv.peers.is_empty() || adv.peers.contains(&p.name));
            let mut others: Option<Vec<IpAddr>> = None;
            for peer in peers {
                let mut next_hops: Vec<Option<IpAddr>> = Vec::new();
                if own_path {
                    next_hops.push(None);
                }
                if peer.announce_all_nodes {
                    let o = others.get_or_insert_with(|| node.other_next_hops(svc, adv, *ip));
                    next_hops.extend(o.iter().map(|a| Some(*a)));
                }
                for next_hop in next_hops {
                    out.routes.push(Route {
                        peer: peer.name.clone(),
                        prefix,
                        next_hop,
                        attrs: attrs.clone(),
                    });
                    announced_to.insert(peer.name.clone());
                }
            }
        }
    }
    out.announced_to = if announced_to.is_empty() {
        Err(match first_own {
            Some(Err(own)) => own,
            _ => why_not,
        })
    } else {
        Ok(announced_to)
    };
    out
}

/// Merges the routes of several Services into one advertisement per path (prefix and next
/// hop; attributes merged when several Services or advertisements give the same path, as with
/// aggregation).
pub fn merge_routes<'a>(
    routes: impl IntoIterator<Item = ((&'a IpNet, &'a Option<IpAddr>), &'a RouteAttrs)>,
) -> Vec<Advertisement> {
    let mut merged: BTreeMap<PathKey, RouteAttrs> = BTreeMap::new();
    for ((prefix, next_hop), attrs) in routes {
        merged
            .entry((*prefix, *next_hop))
            .and_modify(|a| a.merge(attrs))
            .or_insert_with(|| attrs.clone());
    }
    merged
        .into_iter()
        .map(|((prefix, next_hop), attrs)| Advertisement {
            prefix,
            attrs,
            next_hop,
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
    let mut routes: BTreeMap<String, Vec<(PathKey, RouteAttrs)>> = node
        .peers
        .iter()
        .map(|p| (p.name.clone(), Vec::new()))
        .collect();
    for svc in &snapshot.services {
        let contribution = service_routes(&node, &snapshot.pools, advertisements, svc);
        for r in contribution.routes {
            let path = ((r.prefix, r.next_hop), r.attrs);
            routes.entry(r.peer).or_default().push(path);
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
        .map(|(peer, paths)| {
            let paths = paths.iter().map(|((p, nh), a)| ((p, nh), a));
            (peer, merge_routes(paths))
        })
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::input::{AddressType, EndpointInfo, ServiceInfo};
    use ferrolb_api::validate::{AddressRange, CommunityValue};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    /// A ready endpoint on `node` from an EndpointSlice of `address_type`.
    fn endpoint(node: &str, address_type: AddressType) -> EndpointInfo {
        EndpointInfo {
            node_name: Some(node.into()),
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
            address_type,
        }
    }

    /// Nodes a and b, one dual-stack Service `default/web` (10.99.5.7, fd00:99:5::7) with an
    /// endpoint of each family on each of `endpoints_on`.
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
            endpoints: endpoints_on
                .iter()
                .flat_map(|n| {
                    [
                        endpoint(n, AddressType::Ipv4),
                        endpoint(n, AddressType::Ipv6),
                    ]
                })
                .collect(),
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
            ..Default::default()
        }]
    }

    /// [`snapshot`] with three nodes a, b and c, Ready, with InternalIPs 10.99.0.1x and
    /// fd00:99::1x on the router's link.
    fn three_nodes(me: &str, local: bool, endpoints_on: &[&str]) -> Snapshot {
        let mut s = snapshot(me, local, endpoints_on);
        s.nodes = ["a", "b", "c"]
            .iter()
            .zip(1..)
            .map(|(n, i)| {
                let info = NodeInfo {
                    name: n.to_string(),
                    labels: [("rack".to_string(), format!("r{i}"))].into(),
                    ready: true,
                    addresses: vec![
                        format!("10.99.0.1{i}").parse().unwrap(),
                        format!("fd00:99::1{i}").parse().unwrap(),
                    ],
                    ..Default::default()
                };
                (n.to_string(), info)
            })
            .collect();
        s
    }

    fn all_nodes_peer() -> Vec<BgpPeerInfo> {
        vec![BgpPeerInfo {
            name: "rr".into(),
            announce_all_nodes: true,
            ..Default::default()
        }]
    }

    /// The paths of `plan` to `peer`, as "prefix via next hop" (`self` for this node's own).
    fn paths(plan: &BgpPlan, peer: &str) -> Vec<String> {
        plan.per_peer[peer]
            .iter()
            .map(|a| {
                let via = a.next_hop.map_or("self".to_string(), |nh| nh.to_string());
                format!("{} via {via}", a.prefix)
            })
            .collect()
    }

    #[test]
    fn a_peer_announcing_all_nodes_gets_a_path_through_each_ready_node_by_its_internal_ip() {
        let plan = plan_bgp(
            &three_nodes("a", false, &["a"]),
            &[adv()],
            &all_nodes_peer(),
        );
        assert_eq!(
            paths(&plan, "rr"),
            [
                "10.99.5.7/32 via self",
                "10.99.5.7/32 via 10.99.0.12",
                "10.99.5.7/32 via 10.99.0.13",
                "fd00:99:5::7/128 via self",
                "fd00:99:5::7/128 via fd00:99::12",
                "fd00:99:5::7/128 via fd00:99::13",
            ]
        );
        // Without announceAllNodes, only this node's own path, as before.
        let plan = plan_bgp(&three_nodes("a", false, &["a"]), &[adv()], &peers());
        assert_eq!(
            paths(&plan, "tor"),
            ["10.99.5.7/32 via self", "fd00:99:5::7/128 via self"]
        );
    }

    #[test]
    fn with_local_traffic_policy_the_paths_go_through_the_nodes_with_an_endpoint_even_from_a_node_without_one()
     {
        let plan = plan_bgp(&three_nodes("a", true, &["c"]), &[adv()], &all_nodes_peer());
        assert_eq!(
            paths(&plan, "rr"),
            [
                "10.99.5.7/32 via 10.99.0.13",
                "fd00:99:5::7/128 via fd00:99::13"
            ]
        );
        let key = ServiceKey::new("default", "web");
        assert_eq!(plan.per_service[&key], BTreeSet::from(["rr".to_string()]));
        // Nowhere an endpoint: no path, and the reason is this node's.
        let plan = plan_bgp(&three_nodes("a", true, &[]), &[adv()], &all_nodes_peer());
        assert!(plan.per_peer["rr"].is_empty());
        assert_eq!(plan.not_announced[&key], NotEligible::NoReadyEndpoints);
    }

    #[test]
    fn a_node_not_ready_excluded_without_network_unselected_or_without_an_address_of_the_family_is_no_path()
     {
        let mut s = three_nodes("a", false, &["a"]);
        let b = s.nodes.get_mut("b").unwrap();
        b.ready = false;
        let plan = plan_bgp(&s, &[adv()], &all_nodes_peer());
        assert!(
            !paths(&plan, "rr")
                .iter()
                .any(|p| p.contains("::12") || p.contains(".12"))
        );
        for change in [
            |n: &mut NodeInfo| {
                n.labels.insert(
                    ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB.into(),
                    "".into(),
                );
            },
            |n: &mut NodeInfo| n.network_unavailable = true,
            |n: &mut NodeInfo| n.addresses.retain(IpAddr::is_ipv6),
        ] {
            let mut s = three_nodes("a", false, &["a"]);
            change(s.nodes.get_mut("c").unwrap());
            let plan = plan_bgp(&s, &[adv()], &all_nodes_peer());
            let v4_via_c = paths(&plan, "rr").contains(&"10.99.5.7/32 via 10.99.0.13".into());
            assert!(!v4_via_c, "{:?}", paths(&plan, "rr"));
        }
        // The advertisement's nodeSelectors pick the paths' nodes: rack r2 is node b only.
        let rack2 = BgpAdvertisementInfo {
            node_selectors: vec![LabelSelector {
                match_labels: Some([("rack".to_string(), "r2".to_string())].into()),
                ..Default::default()
            }],
            ..adv()
        };
        let plan = plan_bgp(
            &three_nodes("a", false, &["a"]),
            &[rack2],
            &all_nodes_peer(),
        );
        assert_eq!(
            paths(&plan, "rr"),
            [
                "10.99.5.7/32 via 10.99.0.12",
                "fd00:99:5::7/128 via fd00:99::12"
            ]
        );
    }

    /// [`three_nodes`] with the Service's IPv4 endpoints on `v4_on` and its IPv6 ones on
    /// `v6_on`.
    fn split_stack(me: &str, local: bool, v4_on: &[&str], v6_on: &[&str]) -> Snapshot {
        let mut s = three_nodes(me, local, &[]);
        s.services[0].endpoints = v4_on
            .iter()
            .map(|n| endpoint(n, AddressType::Ipv4))
            .chain(v6_on.iter().map(|n| endpoint(n, AddressType::Ipv6)))
            .collect();
        s
    }

    #[test]
    fn a_local_services_ipv4_address_goes_out_only_from_nodes_with_a_ready_ipv4_endpoint() {
        let web = ServiceKey::new("default", "web");
        let from = |me: &str| plan_bgp(&split_stack(me, true, &["a"], &["c"]), &[adv()], &peers());
        assert_eq!(paths(&from("a"), "tor"), ["10.99.5.7/32 via self"]);
        let c = from("c");
        assert_eq!(paths(&c, "tor"), ["fd00:99:5::7/128 via self"]);
        assert_eq!(c.per_service[&web], BTreeSet::from(["tor".to_string()]));
        let b = from("b");
        assert!(b.per_peer["tor"].is_empty());
        assert_eq!(b.not_announced[&web], NotEligible::NoLocalEndpoint);
    }

    #[test]
    fn a_peer_announcing_all_nodes_gets_each_address_through_the_nodes_with_an_endpoint_of_its_family()
     {
        let s = split_stack("b", true, &["a"], &["c"]);
        let plan = plan_bgp(&s, &[adv()], &all_nodes_peer());
        assert_eq!(
            paths(&plan, "rr"),
            [
                "10.99.5.7/32 via 10.99.0.11",
                "fd00:99:5::7/128 via fd00:99::13"
            ]
        );
    }

    #[test]
    fn an_address_of_a_family_without_endpoints_is_not_announced() {
        let web = ServiceKey::new("default", "web");
        // Only IPv6 endpoints: kube-proxy has no rule for the IPv4 address, whatever the policy.
        for local in [false, true] {
            let plan = plan_bgp(&split_stack("c", local, &[], &["c"]), &[adv()], &peers());
            assert_eq!(
                paths(&plan, "tor"),
                ["fd00:99:5::7/128 via self"],
                "local={local}"
            );
        }
        // Nor through the other nodes.
        let plan = plan_bgp(
            &split_stack("a", false, &[], &["c"]),
            &[adv()],
            &all_nodes_peer(),
        );
        assert!(
            paths(&plan, "rr").iter().all(|p| p.starts_with("fd00:")),
            "{:?}",
            paths(&plan, "rr")
        );
        // A Service whose addresses are all of a family without endpoints is not announced.
        let mut s = split_stack("a", false, &[], &["a"]);
        s.services[0].ingress.retain(IpAddr::is_ipv4);
        let plan = plan_bgp(&s, &[adv()], &peers());
        assert!(plan.per_peer["tor"].is_empty());
        assert_eq!(plan.not_announced[&web], NotEligible::NoReadyEndpoints);
    }

    #[test]
    fn endpoints_of_an_fqdn_slice_serve_no_address() {
        let mut s = snapshot("a", false, &[]);
        s.services[0].endpoints = vec![endpoint("a", AddressType::Other)];
        let plan = plan_bgp(&s, &[adv()], &peers());
        assert!(plan.per_peer["tor"].is_empty());
        assert_eq!(
            plan.not_announced[&ServiceKey::new("default", "web")],
            NotEligible::NoReadyEndpoints
        );
    }

    #[test]
    fn a_service_announced_nowhere_gives_its_first_addresss_reason() {
        let web = ServiceKey::new("default", "web");
        let elsewhere = BgpAdvertisementInfo {
            node_selectors: vec![LabelSelector {
                match_labels: Some([("rack".to_string(), "9".to_string())].into()),
                ..Default::default()
            }],
            ..adv()
        };
        // The IPv4 address has no endpoint; the IPv6 one would go but for the node selector.
        let plan = plan_bgp(
            &split_stack("a", false, &[], &["a"]),
            std::slice::from_ref(&elsewhere),
            &peers(),
        );
        assert_eq!(plan.not_announced[&web], NotEligible::NoReadyEndpoints);
        // The other way round, the IPv4 address's reason is the configuration's.
        let plan = plan_bgp(
            &split_stack("a", false, &["a"], &[]),
            &[elsewhere],
            &peers(),
        );
        assert_eq!(plan.not_announced[&web], NotEligible::NodeSelectorMismatch);
    }

    #[test]
    fn one_address_is_explained_with_its_own_reason() {
        let s = split_stack("c", true, &["a"], &["c"]);
        let peers = peers();
        let node = BgpNode::new("c", &s.nodes, &peers);
        let svc = &s.services[0];
        let all = service_routes(&node, &s.pools, &[adv()], svc);
        assert_eq!(all.announced_to, Ok(BTreeSet::from(["tor".to_string()])));
        let v4 = address_routes(&node, &s.pools, &[adv()], svc, svc.ingress[0]);
        assert!(v4.routes.is_empty());
        assert_eq!(v4.announced_to, Err(NotEligible::NoLocalEndpoint));
        let v6 = address_routes(&node, &s.pools, &[adv()], svc, svc.ingress[1]);
        assert_eq!(v6.routes.len(), 1);
        assert!(v6.announced_to.is_ok());
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
