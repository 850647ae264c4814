//! The routes a peer should have (desired) and the routes it has been sent (Adj-RIB-Out), and
//! the difference between them. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ipnet::IpNet;

use super::config::{Advertisement, RouteAttrs};
use super::update::family_of;
use super::wire::Family;

/// Prefixes with their attributes; attribute sets are shared between prefixes.
pub type Routes = BTreeMap<IpNet, Arc<RouteAttrs>>;

/// Builds the desired routes from a full set of advertisements. Prefixes are normalised to their
/// network address; a prefix listed twice gets the merge of both attribute sets
/// ([`RouteAttrs::merge`]).
pub fn desired_routes(advertisements: Vec<Advertisement>) -> Routes {
    let mut merged: BTreeMap<IpNet, RouteAttrs> = BTreeMap::new();
    for adv in advertisements {
        match merged.entry(adv.prefix.trunc()) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(adv.attrs);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(&adv.attrs),
        }
    }
    let mut interned: HashMap<RouteAttrs, Arc<RouteAttrs>> = HashMap::new();
    merged
        .into_iter()
        .map(|(p, a)| {
            let shared = interned
                .entry(a)
                .or_insert_with_key(|k| Arc::new(k.clone()))
                .clone();
            (p, shared)
        })
        .collect()
}

/// What must be sent to bring the peer from `sent` to `desired`, restricted to `families`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Prefixes to announce, grouped by family and shared attributes (one group packs into as
    /// few UPDATEs as possible).
    pub announce: BTreeMap<(Family, Arc<RouteAttrs>), Vec<IpNet>>,
    /// Prefixes to withdraw, by family.
    pub withdraw: BTreeMap<Family, Vec<IpNet>>,
    /// Desired prefixes of families the session did not negotiate.
    pub unsupported: Vec<IpNet>,
}

/// Computes the [`Changes`] between what the peer has and what it should have.
pub fn diff(sent: &Routes, desired: &Routes, families: &[Family]) -> Changes {
    let mut c = Changes::default();
    for (p, attrs) in desired {
        let family = family_of(p);
        if !families.contains(&family) {
            c.unsupported.push(*p);
            continue;
        }
        if sent.get(p) != Some(attrs) {
            c.announce
                .entry((family, attrs.clone()))
                .or_default()
                .push(*p);
        }
    }
    for p in sent.keys() {
        if !desired.contains_key(p) {
            c.withdraw.entry(family_of(p)).or_default().push(*p);
        }
    }
    c
}

/// All routes of `family` in `routes`, grouped by attributes (for a route refresh).
pub fn group_family(routes: &Routes, family: Family) -> BTreeMap<Arc<RouteAttrs>, Vec<IpNet>> {
    let mut g: BTreeMap<Arc<RouteAttrs>, Vec<IpNet>> = BTreeMap::new();
    for (p, a) in routes.iter().filter(|(p, _)| family_of(p) == family) {
        g.entry(a.clone()).or_default().push(*p);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::config::Community;

    fn adv(p: &str, community: u32) -> Advertisement {
        Advertisement {
            prefix: p.parse().unwrap(),
            attrs: RouteAttrs {
                communities: [Community(community)].into(),
                ..Default::default()
            },
        }
    }

    const BOTH: [Family; 2] = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];

    #[test]
    fn an_unchanged_set_produces_no_changes() {
        let d = desired_routes(vec![adv("10.99.1.1/32", 1)]);
        assert_eq!(diff(&d, &d, &BOTH), Changes::default());
    }

    #[test]
    fn new_prefixes_sharing_attributes_form_one_group() {
        let d = desired_routes(vec![adv("10.99.1.1/32", 1), adv("10.99.1.2/32", 1)]);
        let c = diff(&Routes::new(), &d, &BOTH);
        assert_eq!(c.announce.len(), 1);
        assert_eq!(c.announce.values().next().unwrap().len(), 2);
    }

    #[test]
    fn a_removed_prefix_is_withdrawn_and_a_changed_one_re_announced() {
        let sent = desired_routes(vec![adv("10.99.1.1/32", 1), adv("fd00:99::1/128", 1)]);
        let desired = desired_routes(vec![adv("10.99.1.1/32", 2)]);
        let c = diff(&sent, &desired, &BOTH);
        assert_eq!(
            c.withdraw,
            [(
                Family::IPV6_UNICAST,
                vec!["fd00:99::1/128".parse().unwrap()]
            )]
            .into()
        );
        assert_eq!(c.announce.len(), 1);
    }

    #[test]
    fn prefixes_of_a_family_the_peer_lacks_are_reported_not_sent() {
        let d = desired_routes(vec![adv("fd00:99::1/128", 1)]);
        let c = diff(&Routes::new(), &d, &[Family::IPV4_UNICAST]);
        assert!(c.announce.is_empty());
        assert_eq!(
            c.unsupported,
            vec!["fd00:99::1/128".parse::<IpNet>().unwrap()]
        );
    }

    #[test]
    fn a_prefix_listed_twice_is_announced_once_with_merged_communities() {
        let d = desired_routes(vec![adv("10.99.1.0/24", 1), adv("10.99.1.7/24", 2)]);
        assert_eq!(d.len(), 1);
        let attrs = d.values().next().unwrap();
        assert_eq!(attrs.communities, [Community(1), Community(2)].into());
    }
}
