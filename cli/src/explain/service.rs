//! `ferrolb explain service`: whether FerroLB handles a Service, the pool chosen and why (or
//! why none fits), and per address and node who announces it or the one reason why not.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ferrolb_api::names;
use ferrolb_api::service::ServiceKey;
use ferrolb_api::v1beta1::BGPSessionStateStatus;
use ferrolb_controller::allocator::{Outcome, Pool, ServiceRequest};
use ferrolb_controller::convert::{allocator_pools, request_from_service};
use ferrolb_speaker::cluster;
use ferrolb_speaker::planner::bgp::{BgpAdvertisementInfo, BgpNode, BgpPeerInfo, address_routes};
use ferrolb_speaker::planner::{self, AddressPlan, NotAnnounced, ServiceInfo, Snapshot, plan_l2};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use serde::Serialize;

use super::words;
use super::{Objects, Reason, Settings};

/// Everything `ferrolb explain service` says about one Service.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExplanation {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// Whether the Service exists.
    pub found: bool,
    /// Whether FerroLB gives it addresses.
    pub handled: bool,
    /// Why it does or does not, in words (type, class, deletion).
    pub handling: String,
    /// The pool its addresses come from, and why that one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolChoice>,
    /// Why it has no address, when it has none and FerroLB handles it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_address: Option<Reason>,
    /// Each address in `status.loadBalancer.ingress`.
    pub addresses: Vec<AddressExplanation>,
    /// The latest Events about the Service (newest last), as `Type Reason: message`.
    pub events: Vec<String>,
}

/// The pool a Service's addresses come from, and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolChoice {
    /// The pool.
    pub name: String,
    /// How it was chosen: `RequestedAddresses`, `RequestedPool` or `Automatic`.
    pub how: String,
    /// In words.
    pub message: String,
    /// For an automatic choice: the pools tried before it (by priority, then name) and why
    /// each was passed over.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<PassedOver>,
}

/// A pool tried before the one chosen.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassedOver {
    /// The pool.
    pub pool: String,
    /// Why it was not used.
    pub reason: Reason,
}

/// One address of the Service.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressExplanation {
    /// The address.
    pub ip: String,
    /// Its `ipMode` in the Service's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_mode: Option<String>,
    /// The ready pool it lies in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Other Services holding the same address (a sharing key).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<String>,
    /// Why nobody announces it over layer 2, when an `L2Advertisement` applies and nobody can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer2: Option<Reason>,
    /// Per node: whether it announces the address, how, and why not.
    pub nodes: Vec<NodeVerdict>,
}

/// One node's part in announcing an address.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeVerdict {
    /// The node.
    pub node: String,
    /// Whether it attracts traffic for the address (layer 2 or BGP).
    pub announces: bool,
    /// How it does, one entry per mode (`answers ARP/NDP on eth0`, `BGP to tor ...`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub how: Vec<String>,
    /// The routers that hold a route to the address through this node, as the sessions report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routers: Vec<String>,
    /// Why it does not, per mode that applies (layer 2 first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<Reason>,
}

/// Explains Service `namespace/name` from `objects`.
pub fn explain_service(
    objects: &Objects,
    settings: &Settings,
    namespace: &str,
    name: &str,
) -> ServiceExplanation {
    let key = ServiceKey::new(namespace, name);
    let mut out = ServiceExplanation {
        namespace: namespace.into(),
        name: name.into(),
        found: false,
        handled: false,
        handling: format!("no Service {key}"),
        pool: None,
        no_address: None,
        addresses: Vec::new(),
        events: events(objects, name),
    };
    let Some(svc) = objects.services.iter().find(|s| ServiceKey::of(s) == key) else {
        return out;
    };
    out.found = true;
    (out.handled, out.handling) = handling(svc, settings);
    if !out.handled {
        return out;
    }
    let labels = objects.namespace_labels(namespace);
    let request = match request_from_service(svc, &labels) {
        Ok(r) => r,
        Err(e) => {
            out.no_address = Some(Reason::new(e.reason(), e.to_string()));
            return out;
        }
    };
    let ips = ferrolb_api::service::ingress_ips(svc);
    if ips.is_empty() {
        out.no_address = Some(why_no_address(objects, settings, &request));
        return out;
    }
    let allocator = objects.allocator(settings, None);
    let pool_name = allocator.assignment(&key).map(|a| a.pool).or_else(|| {
        svc.annotations()
            .get(names::IP_ALLOCATED_FROM_POOL)
            .cloned()
    });
    if let Some(pool) = pool_name {
        out.pool = Some(pool_choice(objects, settings, &request, &pool));
    }
    let snapshot = objects.snapshot(settings, "");
    let plan = plan_l2(&snapshot);
    let info = snapshot.services.iter().find(|s| s.key == key);
    let bgp = Bgp::of(objects);
    for ip in ips {
        out.addresses.push(address(
            objects, &bgp, svc, &snapshot, &plan, info, &key, ip,
        ));
    }
    out
}

/// Whether FerroLB handles `svc`, and why, in words.
fn handling(svc: &Service, settings: &Settings) -> (bool, String) {
    let spec = svc.spec.clone().unwrap_or_default();
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    if type_ != "LoadBalancer" {
        return (
            false,
            format!("type is {type_}, not LoadBalancer: FerroLB gives it no address"),
        );
    }
    if svc.metadata.deletion_timestamp.is_some() {
        return (
            false,
            "the Service is being deleted: its addresses are released".into(),
        );
    }
    match spec.load_balancer_class.as_deref() {
        Some(c) if c == settings.class => (
            true,
            format!("type LoadBalancer, loadBalancerClass {c}: FerroLB handles it"),
        ),
        Some(c) => (
            false,
            format!(
                "loadBalancerClass is {c}; FerroLB handles {}: another implementation owns it",
                settings.class
            ),
        ),
        None if settings.ignore_unclassed => (
            false,
            "no loadBalancerClass, and FerroLB runs with --ignore-unclassed: another implementation owns it".into(),
        ),
        None => (
            true,
            "type LoadBalancer without a loadBalancerClass: FerroLB handles it (the default implementation)".into(),
        ),
    }
}

/// Why a Service FerroLB handles has no address: the controller's allocator, rebuilt from
/// every other Service's addresses, is asked for it.
fn why_no_address(objects: &Objects, settings: &Settings, request: &ServiceRequest) -> Reason {
    let mut allocator = objects.allocator(settings, Some(request));
    let mut fresh = request.clone();
    fresh.current_ips.clear();
    match allocator.assign(&fresh) {
        Outcome::Failed(e) | Outcome::Revoked { error: e, .. } => {
            Reason::new(e.reason(), e.to_string())
        }
        outcome => {
            let a = outcome.assignment().cloned();
            Reason::new(
                "NotWrittenYet",
                match a {
                    Some(a) => format!(
                        "pool `{}` has room ({} would be given now), but the controller has not written it: check that ferrolb-controller runs and its Events",
                        a.pool,
                        words::list(a.ips.iter().map(ToString::to_string)),
                    ),
                    None => "the controller has not written an address yet".into(),
                },
            )
        }
    }
}

/// The pool `pool` and why the Service's addresses come from it.
fn pool_choice(
    objects: &Objects,
    settings: &Settings,
    request: &ServiceRequest,
    pool: &str,
) -> PoolChoice {
    if !request.requested_ips.is_empty() {
        return PoolChoice {
            name: pool.into(),
            how: "RequestedAddresses".into(),
            message: format!(
                "the Service asks for {} (annotation {} or spec.loadBalancerIP), which lie in pool `{pool}`",
                words::list(request.requested_ips.iter().map(ToString::to_string)),
                names::LOAD_BALANCER_IPS
            ),
            passed_over: Vec::new(),
        };
    }
    if let Some(asked) = &request.requested_pool {
        return PoolChoice {
            name: pool.into(),
            how: "RequestedPool".into(),
            message: format!(
                "the Service names pool `{asked}` with annotation {}",
                names::ADDRESS_POOL
            ),
            passed_over: Vec::new(),
        };
    }
    let mut pools = allocator_pools(&objects.pools, settings.default_ip_mode);
    pools.sort_by(Pool::priority_order);
    let chosen = pools.iter().find(|p| p.name == pool);
    let passed_over = pools
        .iter()
        .take_while(|p| p.name != pool)
        .map(|p| PassedOver {
            pool: p.name.clone(),
            reason: passed_over(p, request),
        })
        .collect();
    let priority = chosen
        .and_then(|p| p.priority)
        .map_or("no priority".to_string(), |n| format!("priority {n}"));
    PoolChoice {
        name: pool.into(),
        how: "Automatic".into(),
        message: format!(
            "chosen automatically: the first pool ({priority}), in priority order then by name, that admits the Service and had a free address"
        ),
        passed_over,
    }
}

/// Why the automatic choice passed over `pool`.
fn passed_over(pool: &Pool, request: &ServiceRequest) -> Reason {
    if !pool.ready {
        Reason::new(
            "PoolNotReady",
            "not ready (see its Ready condition): it gives out nothing new",
        )
    } else if !pool.auto_assign {
        Reason::new(
            "AutoAssignOff",
            "autoAssign is false: only Services that name it or one of its addresses get one",
        )
    } else if !pool.admits(request) {
        Reason::new(
            "PoolDoesNotAdmitService",
            "its serviceAllocation (namespaces, namespaceSelectors, serviceSelectors) does not admit the Service",
        )
    } else {
        Reason::new(
            "NoFreeAddress",
            "it admits the Service but had no free address of the family asked for",
        )
    }
}

/// The explanation of one address.
#[allow(clippy::too_many_arguments)]
fn address(
    objects: &Objects,
    bgp: &Bgp,
    svc: &Service,
    snapshot: &Snapshot,
    plan: &planner::L2Plan,
    info: Option<&ServiceInfo>,
    key: &ServiceKey,
    ip: IpAddr,
) -> AddressExplanation {
    let ip_mode = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| {
            i.iter()
                .find(|e| e.ip.as_deref() == Some(ip.to_string().as_str()))
        })
        .and_then(|e| e.ip_mode.clone());
    let address_plan = plan.addresses.get(&ip);
    let shared_with = address_plan
        .map(|a| {
            a.services
                .iter()
                .filter(|k| *k != key)
                .map(ToString::to_string)
                .collect()
        })
        .unwrap_or_default();
    let l2_applies =
        address_plan.is_some_and(|a| a.owner.as_ref().err().is_none_or(|w| w.layer2_applies()));
    let layer2 = address_plan
        .filter(|_| l2_applies)
        .and_then(|a| a.owner.as_ref().err())
        .filter(|why| **why != NotAnnounced::NoEligibleNode)
        .map(|why| words::not_announced(*why, ip, address_plan.and_then(|a| a.pool.as_deref())));
    let pool = address_plan.and_then(|a| a.pool.clone());
    let bgp_applies = pool.as_deref().is_some_and(|p| bgp.covers(snapshot, p));
    let mut nodes = Vec::new();
    let mut names: BTreeSet<String> = snapshot.nodes.keys().cloned().collect();
    names.extend(snapshot.live_speakers.iter().cloned());
    for node in names {
        let mut v = NodeVerdict {
            node: node.clone(),
            announces: false,
            how: Vec::new(),
            routers: Vec::new(),
            reasons: Vec::new(),
        };
        if l2_applies && let Some(a) = address_plan {
            layer2_verdict(objects, key, ip, a, &node, &mut v);
        }
        if bgp_applies {
            bgp_verdict(objects, bgp, snapshot, info, ip, &node, &mut v);
        }
        if !l2_applies && !bgp_applies {
            v.reasons.push(match address_plan.map(|a| &a.owner) {
                Some(Err(NotAnnounced::NotInAnyPool)) | None => Reason::new(
                    "NotInAnyPool",
                    format!("{ip} lies in no ready IPAddressPool: nobody announces it"),
                ),
                _ => Reason::new(
                    "NoMatchingAdvertisement",
                    format!(
                        "no L2Advertisement or BGPAdvertisement covers pool `{}`: nobody announces it",
                        pool.as_deref().unwrap_or("?")
                    ),
                ),
            });
        }
        v.announces = !v.how.is_empty();
        nodes.push(v);
    }
    AddressExplanation {
        ip: ip.to_string(),
        ip_mode,
        pool,
        shared_with,
        layer2,
        nodes,
    }
}

/// The BGP configuration as the planner sees it, converted once per explanation.
struct Bgp {
    peers: Vec<BgpPeerInfo>,
    advertisements: Vec<BgpAdvertisementInfo>,
}

impl Bgp {
    fn of(objects: &Objects) -> Bgp {
        Bgp {
            peers: cluster::convert::bgp_peer_infos(&objects.peers),
            advertisements: cluster::convert::bgp_advertisements(
                &objects.bgp_advertisements,
                &objects.communities,
            ),
        }
    }

    /// Whether any `BGPAdvertisement` covers pool `pool` (a ready one of `snapshot`).
    fn covers(&self, snapshot: &Snapshot, pool: &str) -> bool {
        snapshot
            .pools
            .iter()
            .find(|p| p.name == pool)
            .is_some_and(|info| self.advertisements.iter().any(|a| a.selects_pool(info)))
    }
}

/// Layer 2: the node answers (its speaker reported it), stands by, or why it may not.
fn layer2_verdict(
    objects: &Objects,
    key: &ServiceKey,
    ip: IpAddr,
    plan: &AddressPlan,
    node: &str,
    v: &mut NodeVerdict,
) {
    let reported = objects
        .l2_statuses
        .iter()
        .filter_map(|s| s.status.as_ref())
        .find(|s| {
            s.node == node
                && s.service_name == key.name
                && s.service_namespace == key.namespace
                && (s.addresses.is_empty() || s.addresses.iter().any(|a| *a == ip.to_string()))
        });
    if let Some(s) = reported {
        let interfaces: Vec<String> = s.interfaces.iter().map(|i| i.name.clone()).collect();
        let proto = if ip.is_ipv4() { "ARP" } else { "NDP" };
        v.how.push(if interfaces.is_empty() {
            format!("layer 2: answers {proto}")
        } else {
            format!("layer 2: answers {proto} on {}", interfaces.join(", "))
        });
        return;
    }
    if let Some(why) = plan.not_eligible.get(node) {
        let mut reason = words::not_eligible(
            *why,
            Some(ip),
            plan.pool.as_deref(),
            node,
            "L2Advertisement",
        );
        if *why == planner::NotEligible::CannotAnswer
            && let Some(summary) = objects
                .speaker_config(node)
                .and_then(|c| c.status.as_ref())
                .map(|s| s.error_summary.as_str())
        {
            reason.message = format!("{}; it reports: {summary}", reason.message);
        }
        v.reasons.push(reason);
        return;
    }
    match &plan.owner {
        Ok(owner) if owner == node => v.reasons.push(match objects.speaker_config(node) {
            Some(c)
                if c.status
                    .as_ref()
                    .is_some_and(|s| !s.error_summary.is_empty()) =>
            {
                Reason::new(
                    "InterfaceProblem",
                    format!(
                        "elected to answer, but its speaker reports a problem: {}",
                        c.status
                            .as_ref()
                            .map(|s| s.error_summary.as_str())
                            .unwrap_or("")
                    ),
                )
            }
            _ => Reason::new(
                "NotReportedYet",
                "elected to answer, but its speaker has not reported it (no ServiceL2Status yet)",
            ),
        }),
        Ok(owner) => v.reasons.push(Reason::new(
            "Standby",
            format!(
                "standing by: {owner} answers for {ip}; this node is a candidate if {owner} goes"
            ),
        )),
        Err(why) => v
            .reasons
            .push(words::not_announced(*why, ip, plan.pool.as_deref())),
    }
}

/// BGP: the node's own path to each peer it goes to, with the session's state; or why the
/// node does not announce.
#[allow(clippy::too_many_arguments)]
fn bgp_verdict(
    objects: &Objects,
    bgp: &Bgp,
    snapshot: &Snapshot,
    info: Option<&ServiceInfo>,
    ip: IpAddr,
    node: &str,
    v: &mut NodeVerdict,
) {
    let bgp_node = BgpNode::new(node, &snapshot.nodes, &bgp.peers);
    if !snapshot.live_speakers.contains(node) {
        v.reasons.push(words::not_eligible(
            planner::NotEligible::SpeakerNotLive,
            None,
            None,
            node,
            "BGPAdvertisement",
        ));
        return;
    }
    if bgp_node.peers.is_empty() {
        v.reasons.push(Reason::new(
            "NoPeer",
            "BGP: no BGPPeer selects this node (their nodeSelectors)",
        ));
        return;
    }
    let Some(info) = info else {
        v.reasons.push(Reason::new(
            "NotAnnounced",
            "BGP: the Service is not announced (no usable address)",
        ));
        return;
    };
    // This address's own decision: a dual-stack Service's other address may go out from the
    // node when this one may not (endpoints count per family).
    let routes = address_routes(&bgp_node, &snapshot.pools, &bgp.advertisements, info, ip);
    let own: BTreeSet<&str> = routes
        .routes
        .iter()
        .filter(|r| r.next_hop.is_none() && r.prefix.contains(&ip))
        .map(|r| r.peer.as_str())
        .collect();
    if own.is_empty() {
        let why = routes
            .announced_to
            .err()
            .unwrap_or(planner::NotEligible::NoMatchingAdvertisement);
        let pool = snapshot
            .pools
            .iter()
            .find(|p| p.contains(ip))
            .map(|p| p.name.as_str());
        v.reasons.push(words::not_eligible(
            why,
            Some(ip),
            pool,
            node,
            "BGPAdvertisement",
        ));
        return;
    }
    let sessions = objects.sessions_of(node);
    let reported: BTreeSet<&str> = objects
        .bgp_statuses
        .iter()
        .filter_map(|s| s.status.as_ref())
        .filter(|s| {
            s.node == node
                && s.service_name == info.key.name
                && s.service_namespace == info.key.namespace
        })
        .flat_map(|s| s.peers.iter().map(String::as_str))
        .collect();
    let mut down = Vec::new();
    for peer in own {
        let status = sessions.get(peer).and_then(|s| s.status.as_ref());
        let (at, st) = match session_up(peer, status) {
            Ok(up) => up,
            Err(reason) => {
                down.push(reason);
                continue;
            }
        };
        v.how
            .push(format!("BGP: announced to {at}, session Established"));
        // Where the session says so: a `Local` Service's nodes write which peers carry it
        // (ServiceBGPStatus); a `Cluster` Service's do not (one object per Service and node),
        // and its route is among the prefixes of its family the session reports held.
        let held = if info.local_traffic_policy {
            reported.contains(peer)
        } else if ip.is_ipv4() {
            st.ipv4_prefixes > 0
        } else {
            st.ipv6_prefixes > 0
        };
        if held {
            v.routers.push(at);
        }
    }
    // A session down beside one up is said all the same.
    v.reasons.extend(down);
}

/// The session to `peer` as its `BGPSessionState` reports it: where the route goes (the peer
/// and its address) when the session is Established with BFD (if any) Up, else why it does not.
fn session_up<'a>(
    peer: &str,
    st: Option<&'a BGPSessionStateStatus>,
) -> Result<(String, &'a BGPSessionStateStatus), Reason> {
    let Some(st) = st else {
        return Err(Reason::new(
            "NoSession",
            format!(
                "BGP: no BGPSessionState for peer {peer} on this node: its speaker has not reported the session"
            ),
        ));
    };
    let at = if st.peer_address.is_empty() {
        peer.to_string()
    } else {
        format!("{peer} ({})", st.peer_address)
    };
    if st.bgp_state != "Established" {
        let error = st
            .last_error
            .as_deref()
            .map(|e| format!(": last error: {e}"))
            .unwrap_or_default();
        return Err(Reason::new(
            "SessionDown",
            format!("BGP: the session to {at} is {}{error}", st.bgp_state),
        ));
    }
    if let Some(bfd) = st.bfd_state.as_deref().filter(|b| *b != "Up") {
        return Err(Reason::new(
            "BFDDown",
            format!(
                "BGP: the session to {at} is Established but its BFD session is {bfd}: the route is withdrawn"
            ),
        ));
    }
    Ok((at, st))
}

/// The Events about Service `name`, oldest first, at most the last five.
fn events(objects: &Objects, name: &str) -> Vec<String> {
    let mut list: Vec<_> = objects
        .events
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect();
    list.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    let skip = list.len().saturating_sub(5);
    list.into_iter()
        .skip(skip)
        .map(|e| {
            format!(
                "{} {}: {}",
                e.type_.as_deref().unwrap_or("Normal"),
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("")
            )
        })
        .collect()
}
