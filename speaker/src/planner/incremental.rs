//! The plans kept up to date one change at a time, for the speaker's sync loop. Pure: no I/O,
//! no clock. [`super::plan_l2`] and [`super::bgp::plan_bgp`] stay the reference: the trackers
//! must always hold what they would compute from the whole cluster (tested below on random
//! change sequences).
//!
//! ```text
//!  Cluster + Changes ──► L2Tracker::update ──► owned addresses, Services whose layer-2 state moved
//!  live set, unable  ─┘        (addresses of the changed Services; on a live-set change only
//!                               the addresses a leaving node owned or a joining node outranks)
//!  Cluster + Changes ──► BgpTracker::update ──► per-peer advertisements, Services that moved
//!                              (routes of the changed Services only)
//! ```
//!
//! # Cost
//! - A Service or EndpointSlice change: that Service's addresses; each address costs one score
//!   per candidate node (for `externalTrafficPolicy: Local`, per node with a local endpoint).
//! - A live-set change: one score per address and joining node, plus the full decision for the
//!   addresses a leaving node owned, and for every address of a pool whose advertisements carry
//!   preferences.
//! - A node entering or leaving its preference hold-down: every address of a pool whose
//!   advertisements carry preferences.
//! - A configuration or Node change: everything (rare; pools, advertisements and node labels
//!   decide every address).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use super::NotAnnounced;
use super::bgp::{BgpNode, PathKey, ServiceRoutes, merge_routes, service_routes};
use super::eligibility::{NotEligible, node_may_announce, nodes_serving};
use super::input::{L2AdvertisementInfo, NodeInfo, ServiceInfo, ServiceKey};
use super::l2::{Interfaces, applying, owner_interfaces};
use crate::bgp::config::{Advertisement, RouteAttrs};
use crate::cluster::{Changes, Cluster};
use crate::l2::election::HoldDown;
use crate::l2::election::{self, Standing};

/// Addresses a node owns but cannot answer for (no usable interface), by node: such a node is
/// not a candidate for them.
pub type Unable = BTreeMap<String, BTreeSet<IpAddr>>;

/// The layer-2 decision for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The Services holding it, sorted.
    pub services: Vec<ServiceKey>,
    /// The owner, or why there is none.
    pub owner: Result<String, NotAnnounced>,
    /// Where this node answers (meaningful only when it is the owner).
    pub interfaces: Interfaces,
}

/// Candidates of one pool: the nodes that may announce, are selected by an advertisement
/// covering the pool, are live, and what the pool's advertisements are. When some of those
/// advertisements have `serviceSelectors` (so not all of them apply to every address), also
/// the candidates of each one.
#[derive(Debug, Default)]
struct PoolCandidates {
    advertisements: Vec<usize>,
    nodes: BTreeSet<String>,
    /// Some advertisement covering the pool carries preferences.
    preferential: bool,
    /// The candidates' preference scores, for those above zero.
    scores: HashMap<String, u32>,
    per_advertisement: Option<Vec<BTreeSet<String>>>,
}

/// What one [`L2Tracker::update`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2Update {
    /// This node's owned addresses changed.
    pub owned_changed: bool,
    /// The addresses whose entry in [`L2Tracker::owned`] was added, changed or removed.
    pub owned_delta: BTreeSet<IpAddr>,
    /// Services whose layer-2 state on this node may have changed (to rewrite their status).
    pub services: BTreeSet<ServiceKey>,
    /// Addresses decided again.
    pub decided: usize,
    /// When a hold-down ends: call [`L2Tracker::update`] again then.
    pub recompute_at: Option<std::time::Instant>,
}

/// The layer-2 plan, kept up to date.
#[derive(Debug, Default)]
pub struct L2Tracker {
    decisions: HashMap<IpAddr, Decision>,
    /// Only for the (few) announced addresses held by a Service no advertisement selects.
    not_selected: HashMap<IpAddr, Vec<ServiceKey>>,
    ips_of: HashMap<ServiceKey, Vec<IpAddr>>,
    owned: BTreeMap<IpAddr, Interfaces>,
    pools: HashMap<String, PoolCandidates>,
    live: BTreeSet<String>,
    unable: Unable,
    /// Nodes held down at the previous update.
    held: BTreeSet<String>,
    /// Nodes on standby at the previous update.
    standby: BTreeSet<String>,
    /// Addresses of pools whose advertisements carry preferences: decided again on any change
    /// of the live set or of who is held.
    preferential: HashSet<IpAddr>,
    initialised: bool,
}

impl L2Tracker {
    /// A tracker that has decided nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The addresses this node owns, with where to answer.
    pub fn owned(&self) -> &BTreeMap<IpAddr, Interfaces> {
        &self.owned
    }

    /// The decision for `ip`.
    pub fn decision(&self, ip: IpAddr) -> Option<&Decision> {
        self.decisions.get(&ip)
    }

    /// Every decision, in no particular order.
    pub fn decisions(&self) -> impl Iterator<Item = (&IpAddr, &Decision)> {
        self.decisions.iter()
    }

    /// Brings the plan in line with `cluster` after `changes`, the live speakers, the
    /// addresses nodes reported they cannot answer for and who is in the preference hold-down.
    pub fn update(
        &mut self,
        cluster: &Cluster,
        changes: &Changes,
        live: &BTreeSet<String>,
        unable: &Unable,
        hold_down: &HoldDown,
    ) -> L2Update {
        // A change of who is on standby is rare (a partition): everything is decided again.
        let full = !self.initialised || changes.config || hold_down.standby != self.standby;
        let live_changed = *live != self.live;
        let unable_changed = *unable != self.unable;
        let held = hold_down.held_nodes();
        let held_changed = held != self.held;
        let affected = if full {
            cluster
                .addresses()
                .chain(self.decisions.keys().copied())
                .collect()
        } else {
            self.affected(cluster, changes, live, unable, live_changed || held_changed)
        };
        if full || live_changed || unable_changed {
            self.live = live.clone();
            self.unable = unable.clone();
            self.pools = pool_candidates(cluster, live);
        }
        self.held = held;
        self.standby = hold_down.standby.clone();
        self.initialised = true;
        for key in &changes.services {
            match cluster.service_info(key) {
                Some(info) => {
                    self.ips_of.insert(key.clone(), info.ingress);
                }
                None => {
                    self.ips_of.remove(key);
                }
            }
        }
        if full {
            self.ips_of = cluster
                .service_keys()
                .filter_map(|k| Some((k.clone(), cluster.service_info(k)?.ingress)))
                .collect();
        }
        let mut out = L2Update {
            decided: affected.len(),
            recompute_at: hold_down.next_expiry(),
            ..L2Update::default()
        };
        let me = cluster.scope().this_node.as_str();
        for ip in affected {
            let mut not_selected = Vec::new();
            let (new, preferential) = self.decide(cluster, ip, &mut not_selected);
            if preferential {
                self.preferential.insert(ip);
            } else {
                self.preferential.remove(&ip);
            }
            if not_selected.is_empty() {
                self.not_selected.remove(&ip);
            } else {
                self.not_selected.insert(ip, not_selected);
            }
            let old = match &new {
                Some(d) => self.decisions.insert(ip, d.clone()),
                None => self.decisions.remove(&ip),
            };
            let was_mine = old.as_ref().is_some_and(|d| is_mine(d, me));
            let is_mine_now = new.as_ref().is_some_and(|d| is_mine(d, me));
            if is_mine_now {
                let ifs = new.as_ref().map(|d| d.interfaces.clone());
                if self.owned.get(&ip) != ifs.as_ref() {
                    out.owned_changed = true;
                    out.owned_delta.insert(ip);
                }
                self.owned.insert(ip, ifs.unwrap_or(Interfaces::BySubnet));
            } else if self.owned.remove(&ip).is_some() {
                out.owned_changed = true;
                out.owned_delta.insert(ip);
            }
            if was_mine
                || is_mine_now
                || old.as_ref().map(|d| &d.services) != new.as_ref().map(|d| &d.services)
            {
                for d in old.iter().chain(new.iter()) {
                    out.services.extend(d.services.iter().cloned());
                }
            }
        }
        out
    }

    /// The addresses a change may decide differently: those of the changed Services, those
    /// whose owner left or that a joining node outranks, those decided by preferences when
    /// `moved` (who is live or held changed), and those a node became able or unable to
    /// answer for.
    fn affected(
        &self,
        cluster: &Cluster,
        changes: &Changes,
        live: &BTreeSet<String>,
        unable: &Unable,
        moved: bool,
    ) -> HashSet<IpAddr> {
        let mut affected: HashSet<IpAddr> = HashSet::new();
        for key in &changes.services {
            affected.extend(self.ips_of.get(key).into_iter().flatten().copied());
            if let Some(info) = cluster.service_info(key) {
                affected.extend(info.ingress.iter().copied());
            }
        }
        if *live != self.live {
            let left: BTreeSet<&String> = self.live.difference(live).collect();
            let joined: Vec<&String> = live.difference(&self.live).collect();
            for (ip, d) in &self.decisions {
                let redo = match &d.owner {
                    Ok(owner) => {
                        left.contains(owner) || joined.iter().any(|j| outranks(j, owner, *ip))
                    }
                    Err(NotAnnounced::NoEligibleNode) => !joined.is_empty(),
                    Err(_) => false,
                };
                if redo {
                    affected.insert(*ip);
                }
            }
        }
        if moved {
            affected.extend(self.preferential.iter().copied());
        }
        if *unable != self.unable {
            let nodes: BTreeSet<&String> = self.unable.keys().chain(unable.keys()).collect();
            let empty = BTreeSet::new();
            for node in nodes {
                let old = self.unable.get(node).unwrap_or(&empty);
                let new = unable.get(node).unwrap_or(&empty);
                affected.extend(old.symmetric_difference(new).copied());
            }
        }
        affected
    }

    /// The Services holding `ip` that no advertisement selects, when it is announced for
    /// others ([`super::AddressPlan::not_selected`]).
    pub fn not_selected(&self, ip: IpAddr) -> &[ServiceKey] {
        self.not_selected.get(&ip).map_or(&[], Vec::as_slice)
    }

    /// The decision for `ip` (none when no Service holds it), and whether its pool carries
    /// preferences; fills `not_selected` when it is announced.
    fn decide(
        &self,
        cluster: &Cluster,
        ip: IpAddr,
        not_selected: &mut Vec<ServiceKey>,
    ) -> (Option<Decision>, bool) {
        let services: Vec<ServiceInfo> = cluster
            .services_at(ip)
            .filter_map(|k| cluster.service_info(k))
            .collect();
        if services.is_empty() {
            return (None, false);
        }
        let mut d = Decision {
            services: services.iter().map(|s| s.key.clone()).collect(),
            owner: Err(NotAnnounced::NotInAnyPool),
            interfaces: Interfaces::BySubnet,
        };
        let config = cluster.config();
        let Some(pool) = config.pools.iter().find(|p| p.contains(ip)) else {
            return (Some(d), false);
        };
        let Some(pc) = self.pools.get(&pool.name) else {
            d.owner = Err(NotAnnounced::NoMatchingAdvertisement);
            return (Some(d), false);
        };
        let preferential = pc.preferential;
        let covering: Vec<&L2AdvertisementInfo> =
            pc.advertisements.iter().map(|i| &config.l2[*i]).collect();
        let held: Vec<&ServiceInfo> = services.iter().collect();
        let applying = match applying(&covering, &held, ip) {
            Ok(a) => a,
            Err(why) => {
                d.owner = Err(why);
                return (Some(d), preferential);
            }
        };
        let serving = &applying.serving;
        // With serviceSelectors, only the nodes of the advertisements that apply.
        let some_nodes: Option<BTreeSet<&str>> = match &pc.per_advertisement {
            Some(per) if applying.advertisements.len() < covering.len() => Some(
                applying
                    .advertisements
                    .iter()
                    .flat_map(|i| per[*i].iter().map(String::as_str))
                    .collect(),
            ),
            _ => None,
        };
        let in_pool = |n: &str| match &some_nodes {
            Some(nodes) => nodes.contains(n),
            None => pc.nodes.contains(n),
        };
        // With `externalTrafficPolicy: Local`, only nodes with a usable endpoint (of the
        // address's family) of every such Service on the address: walk those (few) instead of
        // every node.
        let local_sets: Vec<BTreeSet<&str>> = serving
            .iter()
            .filter(|s| s.local_traffic_policy)
            .map(|s| nodes_serving(s, ip).collect())
            .collect();
        let allowed = |n: &str| {
            in_pool(n)
                && local_sets.iter().all(|s| s.contains(n))
                && !self.unable.get(n).is_some_and(|u| u.contains(&ip))
        };
        let standing = |n: &str| {
            let preference = pc.scores.get(n).copied().unwrap_or(0);
            let s = Standing::new(preference, self.held.contains(n));
            if self.standby.contains(n) {
                s.on_standby()
            } else {
                s
            }
        };
        let owner = match (local_sets.iter().min_by_key(|s| s.len()), &some_nodes) {
            (Some(smallest), _) => election::owner_by_standing(
                ip,
                smallest
                    .iter()
                    .copied()
                    .filter(|n| allowed(n))
                    .map(|n| (n, standing(n))),
            ),
            (None, Some(nodes)) => election::owner_by_standing(
                ip,
                nodes
                    .iter()
                    .copied()
                    .filter(|n| allowed(n))
                    .map(|n| (n, standing(n))),
            ),
            (None, None) => election::owner_by_standing(
                ip,
                pc.nodes
                    .iter()
                    .map(String::as_str)
                    .filter(|n| allowed(n))
                    .map(|n| (n, standing(n))),
            ),
        };
        let Some(owner) = owner else {
            d.owner = Err(NotAnnounced::NoEligibleNode);
            return (Some(d), preferential);
        };
        if owner == cluster.scope().this_node {
            let advs: Vec<&L2AdvertisementInfo> = applying
                .advertisements
                .iter()
                .map(|i| covering[*i])
                .collect();
            d.interfaces = owner_interfaces(&advs, cluster.nodes().get(owner));
        }
        d.owner = Ok(owner.to_owned());
        *not_selected = applying.not_selected;
        (Some(d), preferential)
    }
}

fn is_mine(d: &Decision, me: &str) -> bool {
    d.owner.as_deref() == Ok(me)
}

/// Whether `challenger` would win `ip` over `owner` when neither has preferences (addresses
/// of pools with preferences are decided again on every live-set change).
fn outranks(challenger: &str, owner: &str, ip: IpAddr) -> bool {
    election::outranks(ip, (challenger, Standing::PLAIN), (owner, Standing::PLAIN))
}

fn pool_candidates(cluster: &Cluster, live: &BTreeSet<String>) -> HashMap<String, PoolCandidates> {
    let config = cluster.config();
    let nodes = cluster.nodes();
    config
        .pools
        .iter()
        .map(|pool| {
            let advertisements: Vec<usize> = config
                .l2
                .iter()
                .enumerate()
                .filter(|(_, a)| a.selects_pool(pool))
                .map(|(i, _)| i)
                .collect();
            let eligible = |n: &NodeInfo| {
                node_may_announce(n).is_ok()
                    && advertisements.iter().any(|i| config.l2[*i].selects_node(n))
                    && live.contains(&n.name)
            };
            let nodes: BTreeSet<String> = nodes
                .values()
                .filter(|n| eligible(n))
                .map(|n| n.name.clone())
                .collect();
            let preferential = advertisements
                .iter()
                .any(|i| !config.l2[*i].preferred.is_empty());
            let mut scores = HashMap::new();
            if preferential {
                for name in &nodes {
                    let node = &cluster.nodes()[name];
                    let score = advertisements
                        .iter()
                        .map(|i| config.l2[*i].preference(node))
                        .fold(0, u32::saturating_add);
                    if score > 0 {
                        scores.insert(name.clone(), score);
                    }
                }
            }
            let selective = advertisements
                .iter()
                .any(|i| !config.l2[*i].service_selectors.is_empty());
            let per_advertisement = selective.then(|| {
                advertisements
                    .iter()
                    .map(|i| {
                        let adv = &config.l2[*i];
                        let node_of = |n: &String| cluster.nodes().get(n);
                        nodes
                            .iter()
                            .filter(|n| node_of(n).is_some_and(|n| adv.selects_node(n)))
                            .cloned()
                            .collect()
                    })
                    .collect()
            });
            (
                pool.name.clone(),
                PoolCandidates {
                    advertisements,
                    nodes,
                    preferential,
                    scores,
                    per_advertisement,
                },
            )
        })
        .collect()
}

/// What one [`BgpTracker::update`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BgpUpdate {
    /// Peers whose advertisements changed.
    pub peers: BTreeSet<String>,
    /// Services whose BGP state on this node changed.
    pub services: BTreeSet<ServiceKey>,
}

/// This node's BGP announcements, kept up to date.
#[derive(Debug, Default)]
pub struct BgpTracker {
    per_service: HashMap<ServiceKey, ServiceRoutes>,
    /// Per peer, per path (prefix and next hop), what each Service gives it.
    routes: BTreeMap<String, BTreeMap<PathKey, BTreeMap<ServiceKey, RouteAttrs>>>,
    peers: BTreeSet<String>,
    initialised: bool,
}

impl BgpTracker {
    /// A tracker that announces nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The peers (by `BGPPeer` name) whose `nodeSelectors` select this node.
    pub fn peers(&self) -> &BTreeSet<String> {
        &self.peers
    }

    /// The advertisements for `peer`, attributes merged per prefix.
    pub fn advertisements(&self, peer: &str) -> Vec<Advertisement> {
        let Some(prefixes) = self.routes.get(peer) else {
            return Vec::new();
        };
        merge_routes(
            prefixes
                .iter()
                .flat_map(|((p, nh), by_svc)| by_svc.values().map(move |a| ((p, nh), a))),
        )
    }

    /// The peers `key`'s addresses are announced to from this node, or why not.
    pub fn service(&self, key: &ServiceKey) -> Option<&Result<BTreeSet<String>, NotEligible>> {
        self.per_service.get(key).map(|r| &r.announced_to)
    }

    /// Brings the announcements in line with `cluster` after `changes`.
    pub fn update(&mut self, cluster: &Cluster, changes: &Changes) -> BgpUpdate {
        let config = cluster.config();
        let me = cluster.scope().this_node.as_str();
        let node = BgpNode::new(me, cluster.nodes(), &config.peers);
        let mut out = BgpUpdate::default();
        let full = !self.initialised || changes.config;
        let keys: Vec<ServiceKey> = if full {
            let peers: BTreeSet<String> = node.peers.iter().map(|p| p.name.clone()).collect();
            out.peers
                .extend(self.peers.symmetric_difference(&peers).cloned());
            self.peers = peers;
            self.per_service
                .keys()
                .cloned()
                .chain(cluster.service_keys().cloned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        } else {
            changes.services.iter().cloned().collect()
        };
        self.initialised = true;
        for key in keys {
            let new = cluster
                .service_info(&key)
                .map(|svc| service_routes(&node, &config.pools, &config.bgp, &svc));
            let old = self.per_service.remove(&key);
            let (old_routes, old_to) = match old {
                Some(r) => (r.routes, Some(r.announced_to)),
                None => (Vec::new(), None),
            };
            let new_to = new.as_ref().map(|n| n.announced_to.clone());
            if old_to != new_to {
                out.services.insert(key.clone());
            }
            // A change that leaves the Service's routes as they were (an EndpointSlice written
            // again, a label no advertisement selects on) changes no peer's paths: their
            // advertisements are not merged again.
            if new
                .as_ref()
                .map_or(old_routes.is_empty(), |n| n.routes == old_routes)
            {
                if let Some(new) = new {
                    self.per_service.insert(key, new);
                }
                continue;
            }
            for r in &old_routes {
                let path = (r.prefix, r.next_hop);
                if let Some(by_path) = self.routes.get_mut(&r.peer)
                    && let Some(by_svc) = by_path.get_mut(&path)
                {
                    by_svc.remove(&key);
                    if by_svc.is_empty() {
                        by_path.remove(&path);
                    }
                    out.peers.insert(r.peer.clone());
                }
            }
            if let Some(new) = new {
                for r in &new.routes {
                    let slot = self
                        .routes
                        .entry(r.peer.clone())
                        .or_default()
                        .entry((r.prefix, r.next_hop))
                        .or_default();
                    // One Service may reach a prefix twice (two addresses in one aggregate).
                    slot.entry(key.clone())
                        .and_modify(|a| a.merge(&r.attrs))
                        .or_insert_with(|| r.attrs.clone());
                    out.peers.insert(r.peer.clone());
                }
                out.services.insert(key.clone());
                self.per_service.insert(key, new);
            }
        }
        let peers = &self.peers;
        self.routes.retain(|p, _| peers.contains(p));
        out
    }
}

#[cfg(test)]
mod tests;
