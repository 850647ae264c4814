//! Layer-2 owner election by rendezvous hashing. Pure: no I/O, no clock.
//!
//! Every speaker ranks the candidate nodes of an address by their [`Standing`] (preference
//! score, hold-down), then by [`score`], and picks the highest, so all speakers that see the same
//! eligible live nodes name the same owner without talking to each other. Each address is scored
//! on its own: addresses shared by several Services, or the two families of a dual-stack
//! Service, may have different owners.
//!
//! # Preferences and the hold-down
//! `L2Advertisement.preferredNodeSelectors` give a node a preference score (the sum of the
//! weights it matches). A higher score wins; the hash decides among equal scores, so the
//! addresses of a pool spread over its most preferred nodes. A preferred node (score above zero)
//! that joined the live set less than the hold-down ago is *held*: it ranks below every candidate
//! that is not held, so it owns an address only when no other node can. When its hold-down ends
//! it takes back the addresses it is preferred for, once; if it fails again within the hold-down
//! nothing moved to it and nothing moves back. Nodes without preferences are never held: with no
//! preferences anywhere, the election is the plain rendezvous hash.
//!
//! # Guarantees
//! - Exactly one owner per address when at least one candidate exists, none otherwise.
//! - Removing a node changes the owner only of the addresses that node owned; adding a node takes
//!   addresses only to itself (the classic rendezvous property: other nodes' standings and scores
//!   do not move). The same holds for a node leaving or ending its hold-down.
//! - The hash is fixed and documented ([`score`]), never `std`'s randomly keyed SipHash, so
//!   speakers of any version and process agree.
//!
//! # Caveats
//! - Agreement needs agreement on the inputs: two speakers with different views of who is live
//!   or eligible can both claim an address until their views converge.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The rendezvous score of `node` for `ip`: higher wins.
///
/// Definition (stable across versions; changing it moves addresses during a rolling upgrade):
/// FNV-1a 64 over the bytes `node name, 0x00, family tag (4 or 6), address octets in network
/// order`, then the 64-bit avalanche finaliser `x ^= x >> 33; x *= 0xff51afd7ed558ccd;
/// x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53; x ^= x >> 33`. FNV-1a alone spreads inputs that differ
/// only in their last bytes poorly; the finaliser makes every input bit affect every output bit.
/// The `0x00` separator keeps a node name from running into the address (names never hold NUL).
pub fn score(node: &str, ip: IpAddr) -> u64 {
    let mut h = FNV_OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    };
    eat(node.as_bytes());
    eat(&[0]);
    match ip {
        IpAddr::V4(v4) => {
            eat(&[4]);
            eat(&v4.octets());
        }
        IpAddr::V6(v6) => {
            eat(&[6]);
            eat(&v6.octets());
        }
    }
    finalise(h)
}

/// 64-bit avalanche finaliser (see [`score`]).
fn finalise(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// How a candidate stands before the hash is consulted; compared first, the greater wins.
///
/// The derived order compares `active` first (a node on standby loses to every other), then
/// `settled` (a held preferred node loses to every settled node), then `preference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Standing {
    /// False for a node on standby: it owns an address only when no other candidate can (a
    /// speaker fenced in a gossip partition, [`crate::membership::partition`]).
    pub active: bool,
    /// False for a preferred node still in its hold-down.
    pub settled: bool,
    /// The sum of the weights of the preferences the node matches.
    pub preference: u32,
}

impl Standing {
    /// A node with no preference, never held: the plain rendezvous hash decides.
    pub const PLAIN: Standing = Standing {
        active: true,
        settled: true,
        preference: 0,
    };

    /// The standing of a node with `preference` that is (`held`) or is not in its hold-down;
    /// a node with no preference is never held (it gains nothing by waiting).
    pub fn new(preference: u32, held: bool) -> Self {
        Standing {
            active: true,
            settled: !held || preference == 0,
            preference,
        }
    }

    /// The same standing on standby: below every candidate that is not.
    pub fn on_standby(self) -> Self {
        Standing {
            active: false,
            ..self
        }
    }
}

impl Default for Standing {
    fn default() -> Self {
        Standing::PLAIN
    }
}

/// One candidate's full rank for an address: standing, hash, name.
type Rank<'a> = (Standing, u64, &'a str);

/// Orders two candidates: better standing first, then higher hash, then the smaller name (a
/// hash tie needs a 64-bit collision, but the order must still be total so every speaker
/// agrees).
fn better(a: Rank<'_>, b: Rank<'_>) -> bool {
    (a.0, a.1) > (b.0, b.1) || ((a.0, a.1) == (b.0, b.1) && a.2 < b.2)
}

/// The owner of `ip` among `candidates` (the eligible live nodes), or `None` when there is none.
/// Duplicate names count once.
pub fn owner<'a, I>(ip: IpAddr, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    owner_by_standing(ip, candidates.into_iter().map(|n| (n, Standing::PLAIN)))
}

/// The owner of `ip` among `candidates` with their standings, or `None` when there is none.
/// A name must come with one standing only.
pub fn owner_by_standing<'a, I>(ip: IpAddr, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = (&'a str, Standing)>,
{
    let mut best: Option<Rank<'a>> = None;
    for (node, standing) in candidates {
        let r = (standing, score(node, ip), node);
        if best.is_none_or(|b| better(r, b)) {
            best = Some(r);
        }
    }
    best.map(|(_, _, n)| n)
}

/// All `candidates` for `ip`, best first: the owner, then who takes over if it goes.
pub fn ranking<'a, I>(ip: IpAddr, candidates: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    ranking_by_standing(ip, candidates.into_iter().map(|n| (n, Standing::PLAIN)))
}

/// All `candidates` with their standings for `ip`, best first.
pub fn ranking_by_standing<'a, I>(ip: IpAddr, candidates: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = (&'a str, Standing)>,
{
    let mut ranked: Vec<Rank<'a>> = candidates
        .into_iter()
        .map(|(n, s)| (s, score(n, ip), n))
        .collect();
    ranked.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)).then(a.2.cmp(b.2)));
    ranked.dedup_by(|a, b| a.2 == b.2);
    ranked.into_iter().map(|(_, _, n)| n).collect()
}

/// Whether `challenger` would take `ip` from `owner`, given their standings.
pub fn outranks(ip: IpAddr, challenger: (&str, Standing), owner: (&str, Standing)) -> bool {
    challenger.0 != owner.0 && owner_by_standing(ip, [challenger, owner]) == Some(challenger.0)
}

/// Elects an owner for every address from its candidate set. Addresses with no candidate are
/// left out of the result (nobody announces them).
pub fn elect(candidates: &BTreeMap<IpAddr, BTreeSet<String>>) -> BTreeMap<IpAddr, String> {
    candidates
        .iter()
        .filter_map(|(ip, nodes)| {
            owner(*ip, nodes.iter().map(String::as_str)).map(|n| (*ip, n.to_owned()))
        })
        .collect()
}

/// Which live nodes are still in their preference hold-down, and until when.
///
/// A node that (re)joined the live set less than `duration` ago does not yet count its
/// preferences: see [`Standing`]. The shell fills it from its record of
/// arrivals ([`super::arrivals::Arrivals`]); the default holds nobody.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldDown {
    /// The planner's present (`None`: nobody is held).
    pub now: Option<Instant>,
    /// When nodes joined the live set, for those that joined recently (others are absent).
    pub live_since: BTreeMap<String, Instant>,
    /// How long a node must have been live before its preferences count.
    pub duration: Duration,
    /// Live nodes on standby: each owns an address only when no other eligible node can (this
    /// speaker, fenced in a gossip partition: the other side holds what it can).
    pub standby: BTreeSet<String>,
}

impl HoldDown {
    /// `node`'s standing given its preference score, this hold-down and the standby set.
    pub fn standing(&self, node: &str, preference: u32, held: bool) -> Standing {
        let s = Standing::new(preference, held);
        if self.standby.contains(node) {
            s.on_standby()
        } else {
            s
        }
    }

    /// Whether `node` is still held at [`HoldDown::now`].
    pub fn held(&self, node: &str) -> bool {
        match (self.now, self.live_since.get(node)) {
            (Some(now), Some(since)) => now < *since + self.duration,
            _ => false,
        }
    }

    /// The nodes held at [`HoldDown::now`].
    pub fn held_nodes(&self) -> BTreeSet<String> {
        self.live_since
            .keys()
            .filter(|n| self.held(n))
            .cloned()
            .collect()
    }

    /// The next instant a held node's hold-down ends: plan again then.
    pub fn next_expiry(&self) -> Option<Instant> {
        let now = self.now?;
        self.live_since
            .values()
            .map(|since| *since + self.duration)
            .filter(|end| *end > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn arb_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
            any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from(v))),
        ]
    }

    fn arb_nodes() -> impl Strategy<Value = BTreeSet<String>> {
        prop::collection::btree_set("[a-z][a-z0-9-]{0,12}", 1..12)
    }

    #[test]
    fn the_score_is_a_fixed_function_of_node_and_address() {
        // Pinned so that a change of hash (which would move addresses during a rolling upgrade)
        // fails here first. The value was computed by an independent Python rendering of the
        // definition in `score`'s documentation.
        let ip: IpAddr = "10.99.0.100".parse().unwrap();
        assert_eq!(score("node-a", ip), score("node-a", ip));
        assert_eq!(score("node-a", ip), PINNED_NODE_A_10_99_0_100);
    }

    const PINNED_NODE_A_10_99_0_100: u64 = 0x522d_375a_1715_7108;

    #[test]
    fn the_score_differs_between_families_of_the_same_octets() {
        let v4 = IpAddr::V4(Ipv4Addr::new(0, 0, 0, 1));
        let v6 = IpAddr::V6(Ipv6Addr::from(1u128));
        assert_ne!(score("n", v4), score("n", v6));
    }

    #[test]
    fn no_candidate_means_no_owner() {
        let ip: IpAddr = "10.99.0.1".parse().unwrap();
        assert_eq!(owner(ip, std::iter::empty()), None);
    }

    #[test]
    fn owners_spread_over_nodes() {
        // 3 nodes, 3000 addresses: each node should own roughly a third.
        let ns = nodes(3);
        let mut counts = BTreeMap::<&str, usize>::new();
        for i in 0..3000u32 {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i));
            *counts
                .entry(owner(ip, ns.iter().map(String::as_str)).unwrap())
                .or_default() += 1;
        }
        assert_eq!(counts.len(), 3);
        for (n, c) in counts {
            assert!((800..1200).contains(&c), "{n} owns {c} of 3000");
        }
    }

    #[test]
    fn shared_addresses_are_owned_per_address() {
        // Two addresses of one Service (dual-stack or shared) are elected independently: over
        // many pairs, some pairs get different owners.
        let ns = nodes(3);
        let differ = (0..100u32)
            .filter(|i| {
                let a = IpAddr::V4(Ipv4Addr::from(0x0a63_0100 + i));
                let b = IpAddr::V6(Ipv6Addr::from(0xfd00_0099_u128 << 96 | u128::from(*i)));
                owner(a, ns.iter().map(String::as_str)) != owner(b, ns.iter().map(String::as_str))
            })
            .count();
        assert!(
            differ > 30,
            "only {differ} of 100 pairs had different owners"
        );
    }

    fn v4(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i))
    }

    fn plain(p: u32) -> Standing {
        Standing::new(p, false)
    }

    #[test]
    fn a_higher_preference_wins_whatever_the_hash() {
        for i in 0..1000 {
            let cands = [
                ("node-a", plain(0)),
                ("node-b", plain(10)),
                ("node-c", plain(0)),
            ];
            assert_eq!(owner_by_standing(v4(i), cands), Some("node-b"));
            assert_eq!(ranking_by_standing(v4(i), cands)[0], "node-b");
        }
    }

    #[test]
    fn equal_preferences_are_decided_by_the_rendezvous_hash_and_spread() {
        let mut counts = BTreeMap::<&str, usize>::new();
        for i in 0..1000 {
            let cands = [
                ("node-a", plain(50)),
                ("node-b", plain(50)),
                ("node-c", plain(1)),
            ];
            let o = owner_by_standing(v4(i), cands).unwrap();
            assert_eq!(Some(o), owner(v4(i), ["node-a", "node-b"]));
            *counts.entry(o).or_default() += 1;
        }
        assert_eq!(counts.len(), 2, "{counts:?}");
        assert!(
            counts.values().all(|c| (400..600).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn the_ranking_orders_by_preference_then_by_hash() {
        for i in 0..200 {
            let cands = [
                ("node-a", plain(0)),
                ("node-b", plain(20)),
                ("node-c", plain(0)),
                ("node-d", plain(20)),
            ];
            let r = ranking_by_standing(v4(i), cands);
            assert_eq!(&r[..2], ranking(v4(i), ["node-b", "node-d"]).as_slice());
            assert_eq!(&r[2..], ranking(v4(i), ["node-a", "node-c"]).as_slice());
        }
    }

    #[test]
    fn losing_a_preferred_node_moves_only_its_addresses_over_1000_addresses() {
        let all = [
            ("node-a", plain(30)),
            ("node-b", plain(30)),
            ("node-c", plain(10)),
            ("node-d", plain(0)),
        ];
        let rest: Vec<(&str, Standing)> = all.iter().copied().filter(|c| c.0 != "node-a").collect();
        let (mut owned_by_a, mut moved) = (0, 0);
        for i in 0..1000 {
            let before = owner_by_standing(v4(i), all).unwrap();
            let after = owner_by_standing(v4(i), rest.iter().copied()).unwrap();
            if before == "node-a" {
                owned_by_a += 1;
                // To the runner-up: here the other node of the same weight.
                assert_eq!(after, "node-b");
            }
            if before != after {
                moved += 1;
            }
        }
        assert_eq!(moved, owned_by_a);
        assert!((400..600).contains(&owned_by_a), "{owned_by_a}");
    }

    #[test]
    fn a_held_preferred_node_ranks_below_every_settled_node_but_still_owns_when_alone() {
        for i in 0..200 {
            let held = Standing::new(100, true);
            let cands = [("node-a", held), ("node-b", plain(0)), ("node-c", plain(0))];
            assert_ne!(owner_by_standing(v4(i), cands), Some("node-a"));
            assert_eq!(ranking_by_standing(v4(i), cands)[2], "node-a");
            assert_eq!(owner_by_standing(v4(i), [("node-a", held)]), Some("node-a"));
            // Between two held nodes, the preference still counts.
            let both = [("node-a", held), ("node-b", Standing::new(5, true))];
            assert_eq!(owner_by_standing(v4(i), both), Some("node-a"));
        }
    }

    #[test]
    fn a_node_on_standby_owns_an_address_only_when_no_other_candidate_can() {
        for i in 0..64 {
            let standby = Standing::new(100, false).on_standby();
            let cands = [("node-a", standby), ("node-b", plain(0))];
            assert_eq!(owner_by_standing(v4(i), cands), Some("node-b"));
            assert_eq!(
                owner_by_standing(v4(i), [("node-a", standby)]),
                Some("node-a")
            );
        }
    }

    #[test]
    fn a_node_without_preference_is_never_held() {
        assert_eq!(Standing::new(0, true), Standing::PLAIN);
        for i in 0..200 {
            let a = ("node-a", Standing::new(0, true));
            let b = ("node-b", Standing::PLAIN);
            assert_eq!(
                owner_by_standing(v4(i), [a, b]),
                owner(v4(i), ["node-a", "node-b"])
            );
        }
    }

    proptest! {
        #[test]
        fn exactly_one_owner_whatever_the_candidate_order(ip in arb_ip(), set in arb_nodes(), seed in any::<u64>()) {
            let mut v: Vec<&str> = set.iter().map(String::as_str).collect();
            let first = owner(ip, v.iter().copied()).unwrap();
            // A deterministic shuffle from the seed.
            let len = v.len();
            for i in (1..len).rev() {
                let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
                v.swap(i, j);
            }
            prop_assert_eq!(owner(ip, v.iter().copied()), Some(first));
            prop_assert!(set.contains(first));
            prop_assert_eq!(ranking(ip, v.iter().copied())[0], first);
        }

        #[test]
        fn a_lost_node_moves_only_its_own_addresses(ips in prop::collection::vec(arb_ip(), 1..40), set in arb_nodes(), pick in any::<prop::sample::Index>()) {
            let all: Vec<&str> = set.iter().map(String::as_str).collect();
            let gone = all[pick.index(all.len())];
            let rest: Vec<&str> = all.iter().copied().filter(|n| *n != gone).collect();
            for ip in ips {
                let before = owner(ip, all.iter().copied()).unwrap();
                let after = owner(ip, rest.iter().copied());
                if before == gone {
                    // It moves to the runner-up.
                    let next = ranking(ip, all.iter().copied()).get(1).copied();
                    prop_assert_eq!(after, next);
                } else {
                    prop_assert_eq!(after, Some(before));
                }
            }
        }

        #[test]
        fn a_new_node_takes_addresses_only_to_itself(ips in prop::collection::vec(arb_ip(), 1..40), set in arb_nodes()) {
            let before: Vec<&str> = set.iter().map(String::as_str).collect();
            let mut after = before.clone();
            after.push("newcomer.example");
            for ip in ips {
                let o1 = owner(ip, before.iter().copied()).unwrap();
                let o2 = owner(ip, after.iter().copied()).unwrap();
                prop_assert!(o2 == o1 || o2 == "newcomer.example");
            }
        }

        #[test]
        fn elect_names_one_owner_per_address_with_candidates(entries in prop::collection::btree_map(arb_ip(), prop::collection::btree_set("[a-c]", 0..3), 0..20)) {
            let elected = elect(&entries);
            for (ip, cands) in &entries {
                match elected.get(ip) {
                    Some(o) => prop_assert!(cands.contains(o)),
                    None => prop_assert!(cands.is_empty()),
                }
            }
        }
    }
}
