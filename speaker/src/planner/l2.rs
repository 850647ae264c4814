//! The layer-2 plan: for every Service address, its candidates, its owner and, for this node,
//! the interfaces to answer on. Pure: no I/O, no clock.
//!
//! # Rules
//! - Endpoints count per family, as kube-proxy counts them ([`super::eligibility`]): for an
//!   IPv4 address only the endpoints of `IPv4` EndpointSlices, for an IPv6 address only those
//!   of `IPv6` ones. "A usable endpoint" below is one of the address's family.
//! - An address is announced only when it lies in a ready pool, an `L2Advertisement` covers
//!   that pool and selects (`serviceSelectors`) at least one Service holding it, and at least
//!   one selected Service has a usable endpoint somewhere.
//! - The advertisements that apply to an address (`applying`) are those covering its pool
//!   that select a Service on it with a usable endpoint; the others take no part in it (their
//!   nodes and interfaces). A Service that no covering advertisement selects takes no part
//!   either (its endpoints and traffic policy are not consulted), though it shares the address:
//!   an address is one thing on the wire, with one owner (MetalLB, which elects per Service,
//!   refuses to announce a shared address when serviceSelectors are involved).
//! - A node is a candidate when it passes [`node_may_announce`], an applying advertisement
//!   selects it, it passes [`service_may_use`] for every selected Service on the address that
//!   has usable endpoints (a shared address must reach every Service announced on it), and its
//!   speaker is live.
//! - The owner is elected among candidates by [`crate::l2::election`], per address. A node's
//!   preference score is the sum of [`L2AdvertisementInfo::preference`] over the advertisements
//!   that cover the pool, applying to the address or not (MetalLB's rule: the weights of every
//!   applicable advertisement add up); a preferred node still in its hold-down
//!   ([`super::HoldDown`]) ranks last.
//! - Interfaces: the union of `interfaces` over the advertisements that cover the pool and select
//!   the owner; any such advertisement without `interfaces` means the default choice
//!   ([`Interfaces::BySubnet`]).

use super::eligibility::{NotEligible, has_usable_endpoints, node_may_announce, service_may_use};
use super::input::{L2AdvertisementInfo, NodeInfo, ServiceInfo, ServiceKey, Snapshot};
use crate::l2::election::{self, Standing};
pub use crate::l2::iface::Interfaces;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

/// Why nobody announces an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotAnnounced {
    /// The address lies in no ready pool.
    NotInAnyPool,
    /// No `L2Advertisement` covers the address's pool.
    NoMatchingAdvertisement,
    /// Advertisements cover the pool, but their `serviceSelectors` select no Service holding
    /// the address.
    NoServiceSelected,
    /// No Service on the address has a usable endpoint of its family.
    NoReadyEndpoints,
    /// Every node is ineligible (see [`AddressPlan::not_eligible`]).
    NoEligibleNode,
}

impl NotAnnounced {
    /// A stable label for metrics, logs and Events.
    pub fn label(self) -> &'static str {
        match self {
            NotAnnounced::NotInAnyPool => "NotInAnyPool",
            NotAnnounced::NoMatchingAdvertisement => "NoMatchingAdvertisement",
            NotAnnounced::NoServiceSelected => "NoServiceSelected",
            NotAnnounced::NoReadyEndpoints => "NoReadyEndpoints",
            NotAnnounced::NoEligibleNode => "NoEligibleNode",
        }
    }

    /// Whether layer 2 still applies to an address left unannounced for this reason: an
    /// `L2Advertisement` covers its pool (it lies in one, and one covers it), so it is a
    /// layer-2 address whether or not a node answers for it now.
    pub fn layer2_applies(self) -> bool {
        !matches!(
            self,
            NotAnnounced::NotInAnyPool | NotAnnounced::NoMatchingAdvertisement
        )
    }
}

impl fmt::Display for NotAnnounced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The decision for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressPlan {
    /// Services holding the address (several when it is shared), sorted.
    pub services: Vec<ServiceKey>,
    /// The ready pool the address lies in.
    pub pool: Option<String>,
    /// Candidates, best first: the owner, then who takes over if it goes.
    pub candidates: Vec<String>,
    /// The owner, or why there is none.
    pub owner: Result<String, NotAnnounced>,
    /// Interfaces the owner answers on (meaningful only when there is an owner).
    pub interfaces: Interfaces,
    /// Every known node that is not a candidate, and why. Empty when the reason is the
    /// address's own ([`NotAnnounced`] other than `NoEligibleNode`).
    pub not_eligible: BTreeMap<String, NotEligible>,
    /// Services holding the address that no advertisement covering its pool selects
    /// (`serviceSelectors`), when the address is announced for others sharing it: their
    /// traffic arrives all the same.
    pub not_selected: Vec<ServiceKey>,
}

/// The layer-2 plan for the whole snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct L2Plan {
    /// Every Service address.
    pub addresses: BTreeMap<IpAddr, AddressPlan>,
    /// The addresses this node owns, with where to answer for them.
    pub owned: BTreeMap<IpAddr, Interfaces>,
    /// When a hold-down ends and the plan must be computed again, if ever.
    pub recompute_at: Option<std::time::Instant>,
}

/// Computes the layer-2 plan.
pub fn plan_l2(snapshot: &Snapshot) -> L2Plan {
    let mut by_address: BTreeMap<IpAddr, Vec<&ServiceInfo>> = BTreeMap::new();
    for svc in &snapshot.services {
        for ip in &svc.ingress {
            let list = by_address.entry(*ip).or_default();
            if !list.iter().any(|s| s.key == svc.key) {
                list.push(svc);
            }
        }
    }
    let mut plan = L2Plan {
        recompute_at: snapshot.hold_down.next_expiry(),
        ..L2Plan::default()
    };
    for (ip, mut services) in by_address {
        services.sort_by(|a, b| a.key.cmp(&b.key));
        let decision = plan_address(snapshot, ip, &services);
        if decision.owner.as_deref() == Ok(snapshot.this_node.as_str()) {
            plan.owned.insert(ip, decision.interfaces.clone());
        }
        plan.addresses.insert(ip, decision);
    }
    plan
}

fn plan_address(snapshot: &Snapshot, ip: IpAddr, services: &[&ServiceInfo]) -> AddressPlan {
    let mut out = AddressPlan {
        services: services.iter().map(|s| s.key.clone()).collect(),
        pool: None,
        candidates: Vec::new(),
        owner: Err(NotAnnounced::NotInAnyPool),
        interfaces: Interfaces::BySubnet,
        not_eligible: BTreeMap::new(),
        not_selected: Vec::new(),
    };
    let Some(pool) = snapshot.pools.iter().find(|p| p.contains(ip)) else {
        return out;
    };
    out.pool = Some(pool.name.clone());
    let covering: Vec<&L2AdvertisementInfo> = snapshot
        .l2_advertisements
        .iter()
        .filter(|a| a.selects_pool(pool))
        .collect();
    let (advs, serving) = match applying(&covering, services, ip) {
        Ok(a) => {
            out.not_selected = a.not_selected;
            (
                a.advertisements
                    .iter()
                    .map(|i| covering[*i])
                    .collect::<Vec<_>>(),
                a.serving,
            )
        }
        Err(why) => {
            out.owner = Err(why);
            return out;
        }
    };
    let names: BTreeSet<&str> = snapshot
        .nodes
        .keys()
        .map(String::as_str)
        .chain(snapshot.live_speakers.iter().map(String::as_str))
        .collect();
    let mut candidates = Vec::new();
    for name in names {
        let verdict = (|| {
            let node = snapshot
                .nodes
                .get(name)
                .ok_or(NotEligible::SpeakerNotLive)?;
            node_may_announce(node)?;
            if !advs.iter().any(|a| a.selects_node(node)) {
                return Err(NotEligible::NodeSelectorMismatch);
            }
            for svc in &serving {
                service_may_use(svc, name, ip)?;
            }
            if !snapshot.live_speakers.contains(name) {
                return Err(NotEligible::SpeakerNotLive);
            }
            if snapshot.unable.get(name).is_some_and(|u| u.contains(&ip)) {
                return Err(NotEligible::CannotAnswer);
            }
            Ok(())
        })();
        match verdict {
            Ok(()) => candidates.push((name, standing(snapshot, &covering, name))),
            Err(why) => {
                out.not_eligible.insert(name.to_owned(), why);
            }
        }
    }
    out.candidates = election::ranking_by_standing(ip, candidates)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let Some(owner) = out.candidates.first().cloned() else {
        out.owner = Err(NotAnnounced::NoEligibleNode);
        out.not_selected.clear();
        return out;
    };
    out.interfaces = owner_interfaces(&advs, snapshot.nodes.get(&owner));
    out.owner = Ok(owner);
    out
}

/// `name`'s standing for an address whose pool `advs` cover.
fn standing(snapshot: &Snapshot, advs: &[&L2AdvertisementInfo], name: &str) -> Standing {
    let preference = snapshot.nodes.get(name).map_or(0, |node| {
        advs.iter()
            .map(|a| a.preference(node))
            .fold(0, u32::saturating_add)
    });
    let held = snapshot.hold_down.held(name);
    snapshot.hold_down.standing(name, preference, held)
}

/// What applies to one address: see [`applying`].
#[derive(Debug)]
pub(super) struct Applying<'s> {
    /// Positions (in the covering advertisements) of those that apply.
    pub advertisements: Vec<usize>,
    /// The Services on the address that an applying advertisement selects and that have a
    /// usable endpoint of its family.
    pub serving: Vec<&'s ServiceInfo>,
    /// The Services on the address that no covering advertisement selects: reachable through
    /// it all the same, since the address is announced for the others.
    pub not_selected: Vec<ServiceKey>,
}

/// The advertisements of `covering` (those covering the address's pool) that apply to `ip`,
/// held by `services`, and the Services announced on it: the selected ones with a usable
/// endpoint of `ip`'s family. An advertisement applies when it selects one of those. Both
/// planners decide with this.
pub(super) fn applying<'s>(
    covering: &[&L2AdvertisementInfo],
    services: &[&'s ServiceInfo],
    ip: IpAddr,
) -> Result<Applying<'s>, NotAnnounced> {
    if covering.is_empty() {
        return Err(NotAnnounced::NoMatchingAdvertisement);
    }
    let (selected, not_selected): (Vec<&'s ServiceInfo>, Vec<&'s ServiceInfo>) = services
        .iter()
        .copied()
        .partition(|s| covering.iter().any(|a| a.selects_service(s)));
    if selected.is_empty() {
        return Err(NotAnnounced::NoServiceSelected);
    }
    let serving: Vec<&'s ServiceInfo> = selected
        .into_iter()
        .filter(|s| has_usable_endpoints(s, ip))
        .collect();
    if serving.is_empty() {
        return Err(NotAnnounced::NoReadyEndpoints);
    }
    let advertisements = covering
        .iter()
        .enumerate()
        .filter(|(_, a)| serving.iter().any(|s| a.selects_service(s)))
        .map(|(i, _)| i)
        .collect();
    Ok(Applying {
        advertisements,
        serving,
        not_selected: not_selected.iter().map(|s| s.key.clone()).collect(),
    })
}

/// The interfaces the owner answers on: the union of `interfaces` over the advertisements that
/// select it; any of them without `interfaces` means the default choice.
pub(super) fn owner_interfaces(
    advs: &[&L2AdvertisementInfo],
    owner: Option<&NodeInfo>,
) -> Interfaces {
    let mut named = BTreeSet::new();
    for adv in advs
        .iter()
        .filter(|a| owner.is_some_and(|n| a.selects_node(n)))
    {
        if adv.interfaces.is_empty() {
            return Interfaces::BySubnet;
        }
        named.extend(adv.interfaces.iter().cloned());
    }
    if named.is_empty() {
        Interfaces::BySubnet
    } else {
        Interfaces::Named(named)
    }
}
