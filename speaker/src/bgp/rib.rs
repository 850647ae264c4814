//! The paths a peer should have (desired) and the paths it has been sent (Adj-RIB-Out), the
//! difference between them, and the path identifiers of a session (RFC 7911). Pure: no I/O, no
//! clock.
//!
//! A path is a prefix with a next hop ([`NextHop`]): `None` is the session's own next hop, an
//! address a third-party one. Where the peer receives ADD-PATH for the family, every desired
//! path goes out under the path identifier of its next hop ([`PathIds`]); elsewhere one path
//! per prefix does ([`preferred`]), and a change of that path replaces it (RFC 4271 §9.1.4's
//! implicit withdrawal: announce, no withdraw).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::config::{Advertisement, RouteAttrs};
use super::update::family_of;
use super::wire::Family;

/// The next hop of a path: `None` is the session's own, `Some` a third-party next hop.
pub type NextHop = Option<IpAddr>;

/// The paths of one prefix, in next-hop order; attribute sets are shared between paths.
///
/// Almost every prefix has one path, held inline: a map per prefix would cost an allocation of
/// about 300 bytes per prefix in each of a session's two tables (10,000 Services, two peers:
/// 12 MB), a one-path prefix costs nothing beyond its table entry.
#[derive(Clone, Debug)]
pub enum Paths {
    /// Exactly one path.
    One((NextHop, Arc<RouteAttrs>)),
    /// None, or two or more, sorted by next hop.
    Many(Vec<(NextHop, Arc<RouteAttrs>)>),
}

impl Default for Paths {
    fn default() -> Self {
        Paths::Many(Vec::new())
    }
}

impl PartialEq for Paths {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Paths {}

impl Paths {
    /// No paths.
    pub fn new() -> Self {
        Self::default()
    }

    /// The paths, sorted by next hop.
    pub fn as_slice(&self) -> &[(NextHop, Arc<RouteAttrs>)] {
        match self {
            Paths::One(p) => std::slice::from_ref(p),
            Paths::Many(v) => v,
        }
    }

    /// The paths as (next hop, attributes), sorted by next hop.
    pub fn iter(&self) -> impl Iterator<Item = (&NextHop, &Arc<RouteAttrs>)> {
        self.as_slice().iter().map(|(nh, a)| (nh, a))
    }

    /// The next hops, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &NextHop> {
        self.as_slice().iter().map(|(nh, _)| nh)
    }

    /// The attributes of the path via `next_hop`.
    pub fn get(&self, next_hop: &NextHop) -> Option<&Arc<RouteAttrs>> {
        let s = self.as_slice();
        s.binary_search_by(|(nh, _)| nh.cmp(next_hop))
            .ok()
            .map(|i| &s[i].1)
    }

    /// Whether there is a path via `next_hop`.
    pub fn contains_key(&self, next_hop: &NextHop) -> bool {
        self.get(next_hop).is_some()
    }

    /// How many paths.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Adds the path via `next_hop`, or replaces its attributes.
    pub fn insert(&mut self, next_hop: NextHop, attrs: Arc<RouteAttrs>) {
        let mut v = match std::mem::take(self) {
            Paths::One(p) => vec![p],
            Paths::Many(v) => v,
        };
        match v.binary_search_by(|(nh, _)| nh.cmp(&next_hop)) {
            Ok(i) => v[i].1 = attrs,
            Err(i) => v.insert(i, (next_hop, attrs)),
        }
        *self = Self::from_sorted(v);
    }

    /// Removes the path via `next_hop`.
    pub fn remove(&mut self, next_hop: &NextHop) {
        if self.contains_key(next_hop) {
            let mut v = match std::mem::take(self) {
                Paths::One(p) => vec![p],
                Paths::Many(v) => v,
            };
            v.retain(|(nh, _)| nh != next_hop);
            *self = Self::from_sorted(v);
        }
    }

    /// Removes every path.
    pub fn clear(&mut self) {
        *self = Paths::default();
    }

    fn from_sorted(mut v: Vec<(NextHop, Arc<RouteAttrs>)>) -> Self {
        if v.len() == 1 {
            Paths::One(v.pop().expect("one"))
        } else {
            v.shrink_to_fit();
            Paths::Many(v)
        }
    }
}

/// Prefixes with their paths.
pub type Routes = BTreeMap<IpNet, Paths>;

/// Builds the desired routes from a full set of advertisements. Prefixes are normalised to their
/// network address; a path (prefix and next hop) listed twice gets the merge of both attribute
/// sets ([`RouteAttrs::merge`]).
pub fn desired_routes(advertisements: Vec<Advertisement>) -> Routes {
    let mut merged: BTreeMap<IpNet, BTreeMap<NextHop, RouteAttrs>> = BTreeMap::new();
    for adv in advertisements {
        let paths = merged.entry(adv.prefix.trunc()).or_default();
        match paths.entry(adv.next_hop) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(adv.attrs);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(&adv.attrs),
        }
    }
    let mut interned: HashMap<RouteAttrs, Arc<RouteAttrs>> = HashMap::new();
    let mut share = |a: RouteAttrs| {
        interned
            .entry(a)
            .or_insert_with_key(|k| Arc::new(k.clone()))
            .clone()
    };
    merged
        .into_iter()
        .map(|(p, paths)| {
            let paths = paths.into_iter().map(|(nh, a)| (nh, share(a))).collect();
            (p, Paths::from_sorted(paths))
        })
        .collect()
}

/// The one path of `prefix` a peer without ADD-PATH gets: the session's own next hop when that
/// path is desired, else the third-party next hop of the prefix's family with the lowest
/// address, else the lowest other one (which only an RFC 8950 session can carry).
pub fn preferred<'a>(prefix: &IpNet, paths: &'a Paths) -> Option<(NextHop, &'a Arc<RouteAttrs>)> {
    let own_family = |nh: &NextHop| match (prefix, nh) {
        (_, None) => true,
        (IpNet::V4(_), Some(a)) => a.is_ipv4(),
        (IpNet::V6(_), Some(a)) => a.is_ipv6(),
    };
    // `None` sorts first; the paths are in address order.
    paths
        .iter()
        .find(|(nh, _)| own_family(nh))
        .or_else(|| paths.iter().next())
        .map(|(nh, a)| (*nh, a))
}

/// What must be sent to bring the peer from `sent` to `desired`, restricted to `families`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Paths to announce, grouped by family, next hop and shared attributes (one group packs
    /// into as few UPDATEs as possible).
    pub announce: BTreeMap<(Family, NextHop, Arc<RouteAttrs>), Vec<IpNet>>,
    /// Paths to withdraw (prefix and next hop), by family.
    pub withdraw: BTreeMap<Family, Vec<(IpNet, NextHop)>>,
    /// Desired prefixes of families the session did not negotiate.
    pub unsupported: Vec<IpNet>,
}

/// Computes the [`Changes`] between what the peer has and what it should have. `add_path`:
/// the families whose paths all go out with path identifiers; the others get one path per
/// prefix ([`preferred`]).
pub fn diff(sent: &Routes, desired: &Routes, families: &[Family], add_path: &[Family]) -> Changes {
    let mut c = Changes::default();
    let none = Paths::new();
    for (p, paths) in desired {
        let family = family_of(p);
        if !families.contains(&family) {
            c.unsupported.push(*p);
            continue;
        }
        let had = sent.get(p).unwrap_or(&none);
        let mut announce = |nh: NextHop, attrs: &Arc<RouteAttrs>| {
            if had.get(&nh) != Some(attrs) {
                c.announce
                    .entry((family, nh, attrs.clone()))
                    .or_default()
                    .push(*p);
            }
        };
        if add_path.contains(&family) {
            for (nh, attrs) in paths.iter() {
                announce(*nh, attrs);
            }
            for nh in had.keys().filter(|nh| !paths.contains_key(nh)) {
                c.withdraw.entry(family).or_default().push((*p, *nh));
            }
        } else if let Some((nh, attrs)) = preferred(p, paths) {
            // The peer holds at most one path of the prefix: a new one replaces it.
            let same = had.len() == 1 && had.get(&nh) == Some(attrs);
            if !same {
                c.announce
                    .entry((family, nh, attrs.clone()))
                    .or_default()
                    .push(*p);
            }
        }
    }
    for (p, paths) in sent {
        if !desired.contains_key(p) {
            let w = c.withdraw.entry(family_of(p)).or_default();
            w.extend(paths.keys().map(|nh| (*p, *nh)));
        }
    }
    c
}

/// Records in the Adj-RIB-Out that the path (`prefix`, `next_hop`) was sent with `attrs`.
/// Without ADD-PATH (`add_path` false) it replaces whatever the prefix had.
pub fn record_announced(
    rib: &mut Routes,
    add_path: bool,
    prefix: IpNet,
    next_hop: NextHop,
    attrs: &Arc<RouteAttrs>,
) {
    let paths = rib.entry(prefix).or_default();
    if !add_path {
        paths.clear();
    }
    paths.insert(next_hop, attrs.clone());
}

/// Records in the Adj-RIB-Out that the path (`prefix`, `next_hop`) was withdrawn.
pub fn record_withdrawn(rib: &mut Routes, prefix: &IpNet, next_hop: NextHop) {
    if let Some(paths) = rib.get_mut(prefix) {
        paths.remove(&next_hop);
        if paths.is_empty() {
            rib.remove(prefix);
        }
    }
}

/// The next hops of the paths of `prefix` in the Adj-RIB-Out that an announcement of
/// (`prefix`, `next_hop`) replaces: that path itself, or without ADD-PATH whichever path the
/// prefix has. What must be withdrawn when the announcement cannot be sent.
pub fn replaced_paths(
    rib: &Routes,
    add_path: bool,
    prefix: &IpNet,
    next_hop: NextHop,
) -> Vec<NextHop> {
    match rib.get(prefix) {
        Some(paths) if add_path => paths
            .keys()
            .filter(|nh| **nh == next_hop)
            .copied()
            .collect(),
        Some(paths) => paths.keys().copied().collect(),
        None => Vec::new(),
    }
}

/// All paths of `family` in `routes`, grouped by next hop and attributes (for a route refresh).
pub fn group_family(
    routes: &Routes,
    family: Family,
) -> BTreeMap<(NextHop, Arc<RouteAttrs>), Vec<IpNet>> {
    let mut g: BTreeMap<(NextHop, Arc<RouteAttrs>), Vec<IpNet>> = BTreeMap::new();
    for (p, paths) in routes.iter().filter(|(p, _)| family_of(p) == family) {
        for (nh, a) in paths.iter() {
            g.entry((*nh, a.clone())).or_default().push(*p);
        }
    }
    g
}

/// The path identifiers of one session (RFC 7911 §3): one per distinct next hop, from 1, kept
/// while the session is up so that a path keeps its identifier across unrelated changes.
///
/// Caveat: a next hop that is no longer used keeps its identifier until the session ends, so
/// the map holds every next hop the session has carried (a node count, not a route count).
#[derive(Debug, Default)]
pub struct PathIds {
    ids: HashMap<NextHop, u32>,
}

impl PathIds {
    /// The identifier of the paths via `next_hop`, given on first use.
    pub fn id(&mut self, next_hop: NextHop) -> u32 {
        let next = u32::try_from(self.ids.len() + 1).unwrap_or(u32::MAX);
        *self.ids.entry(next_hop).or_insert(next)
    }

    /// Forgets every identifier (the session went down: the peer forgot the paths too).
    pub fn clear(&mut self) {
        self.ids.clear();
    }
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
            next_hop: None,
        }
    }

    fn via(p: &str, community: u32, nh: &str) -> Advertisement {
        adv(p, community).via(nh.parse().unwrap())
    }

    const BOTH: [Family; 2] = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];

    #[test]
    fn paths_stay_sorted_by_next_hop_and_compare_by_content_however_they_were_built() {
        let a = Arc::new(RouteAttrs::default());
        let nh = |s: &str| -> NextHop { Some(s.parse().unwrap()) };
        let mut p = Paths::new();
        p.insert(nh("10.0.0.3"), a.clone());
        assert!(matches!(p, Paths::One(_)), "one path is held inline");
        p.insert(None, a.clone());
        p.insert(nh("10.0.0.2"), a.clone());
        let order: Vec<NextHop> = p.keys().copied().collect();
        assert_eq!(order, [None, nh("10.0.0.2"), nh("10.0.0.3")]);
        p.remove(&None);
        p.remove(&nh("10.0.0.2"));
        assert!(matches!(p, Paths::One(_)), "back to one path, inline");
        let mut q = Paths::new();
        q.insert(nh("10.0.0.3"), a.clone());
        assert_eq!(p, q);
        p.remove(&nh("10.0.0.9"));
        assert_eq!(p.len(), 1, "removing a missing path changes nothing");
        p.remove(&nh("10.0.0.3"));
        assert!(p.is_empty());
        assert_eq!(p, Paths::new());
    }

    #[test]
    fn an_unchanged_set_produces_no_changes() {
        let d = desired_routes(vec![
            adv("10.99.1.1/32", 1),
            via("10.99.1.1/32", 1, "10.0.0.3"),
        ]);
        assert_eq!(diff(&d, &d, &BOTH, &BOTH), Changes::default());
        assert_eq!(
            diff(&d, &d, &BOTH, &[]).announce.len(),
            1,
            "one path of two"
        );
    }

    #[test]
    fn new_prefixes_sharing_attributes_form_one_group() {
        let d = desired_routes(vec![adv("10.99.1.1/32", 1), adv("10.99.1.2/32", 1)]);
        let c = diff(&Routes::new(), &d, &BOTH, &[]);
        assert_eq!(c.announce.len(), 1);
        assert_eq!(c.announce.values().next().unwrap().len(), 2);
    }

    #[test]
    fn a_removed_prefix_is_withdrawn_and_a_changed_one_re_announced() {
        let sent = desired_routes(vec![adv("10.99.1.1/32", 1), adv("fd00:99::1/128", 1)]);
        let desired = desired_routes(vec![adv("10.99.1.1/32", 2)]);
        let c = diff(&sent, &desired, &BOTH, &[]);
        assert_eq!(
            c.withdraw,
            [(
                Family::IPV6_UNICAST,
                vec![("fd00:99::1/128".parse().unwrap(), None)]
            )]
            .into()
        );
        assert_eq!(c.announce.len(), 1);
    }

    #[test]
    fn prefixes_of_a_family_the_peer_lacks_are_reported_not_sent() {
        let d = desired_routes(vec![adv("fd00:99::1/128", 1)]);
        let c = diff(&Routes::new(), &d, &[Family::IPV4_UNICAST], &[]);
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
        let paths = d.values().next().unwrap();
        assert_eq!(paths.len(), 1);
        assert_eq!(
            paths.get(&None).unwrap().communities,
            [Community(1), Community(2)].into()
        );
    }

    #[test]
    fn a_prefix_with_two_next_hops_is_two_paths_and_the_same_next_hop_merges() {
        let d = desired_routes(vec![
            via("10.99.1.1/32", 1, "10.0.0.3"),
            via("10.99.1.1/32", 2, "10.0.0.3"),
            via("10.99.1.1/32", 3, "10.0.0.4"),
        ]);
        let paths = &d[&"10.99.1.1/32".parse::<IpNet>().unwrap()];
        let nh3: NextHop = Some("10.0.0.3".parse().unwrap());
        assert_eq!(paths.len(), 2);
        assert_eq!(
            paths.get(&nh3).unwrap().communities,
            [Community(1), Community(2)].into()
        );
    }

    #[test]
    fn without_add_path_the_own_next_hop_is_preferred_then_the_lowest_address_of_the_family() {
        let p: IpNet = "10.99.1.1/32".parse().unwrap();
        let pick = |advs: Vec<Advertisement>| {
            let d = desired_routes(advs);
            preferred(&p, &d[&p]).map(|(nh, _)| nh)
        };
        let all = vec![
            via("10.99.1.1/32", 1, "fd00::1"),
            via("10.99.1.1/32", 1, "10.0.0.9"),
            via("10.99.1.1/32", 1, "10.0.0.3"),
            adv("10.99.1.1/32", 1),
        ];
        assert_eq!(pick(all.clone()), Some(None));
        assert_eq!(
            pick(all[..3].to_vec()),
            Some(Some("10.0.0.3".parse().unwrap()))
        );
        assert_eq!(
            pick(all[..1].to_vec()),
            Some(Some("fd00::1".parse().unwrap()))
        );
    }

    #[test]
    fn without_add_path_a_change_of_the_preferred_path_is_an_announcement_without_withdrawal() {
        let sent_advs = vec![adv("10.99.1.1/32", 1), via("10.99.1.1/32", 1, "10.0.0.3")];
        let mut sent = Routes::new();
        for (p, paths) in desired_routes(sent_advs) {
            let (nh, a) = preferred(&p, &paths).unwrap();
            record_announced(&mut sent, false, p, nh, a);
        }
        let desired = desired_routes(vec![via("10.99.1.1/32", 1, "10.0.0.3")]);
        let c = diff(&sent, &desired, &BOTH, &[]);
        assert!(c.withdraw.is_empty(), "{c:?}");
        let nh: NextHop = Some("10.0.0.3".parse().unwrap());
        assert_eq!(c.announce.keys().map(|k| k.1).collect::<Vec<_>>(), [nh]);
    }

    #[test]
    fn with_add_path_a_removed_next_hop_withdraws_that_path_only() {
        let sent = desired_routes(vec![
            adv("10.99.1.1/32", 1),
            via("10.99.1.1/32", 1, "10.0.0.3"),
        ]);
        let desired = desired_routes(vec![adv("10.99.1.1/32", 1)]);
        let c = diff(&sent, &desired, &BOTH, &BOTH);
        let nh: NextHop = Some("10.0.0.3".parse().unwrap());
        assert!(c.announce.is_empty());
        assert_eq!(
            c.withdraw,
            [(
                Family::IPV4_UNICAST,
                vec![("10.99.1.1/32".parse().unwrap(), nh)]
            )]
            .into()
        );
    }

    #[test]
    fn a_next_hop_keeps_its_path_id_until_the_ids_are_cleared() {
        let mut ids = PathIds::default();
        let a: NextHop = Some("10.0.0.3".parse().unwrap());
        assert_eq!((ids.id(None), ids.id(a), ids.id(None)), (1, 2, 1));
        ids.clear();
        assert_eq!(ids.id(a), 1);
    }
}
