//! When each live speaker arrived, as this speaker saw it: the input of the preferred-node
//! hold-down ([`super::election::HoldDown`]). Pure: no I/O, time passed in.
//!
//! A node that joins the live set is *held* for the hold-down: its preferences
//! (`L2Advertisement.preferredNodeSelectors`) do not count until it has stayed live that long
//! (see [`crate::l2::election`]). Every speaker must agree on who is held, so a node's arrival
//! is the latest of:
//! - when its speaker Pod last became `Ready` (`lastTransitionTime`, the same for every speaker:
//!   this dates restarts, crash loops and reboots, including a start of every speaker at once);
//! - when this speaker saw it join the live set, except for the nodes it finds live when it
//!   first sees the others and those it meets within [`ARRIVAL_GRACE`] after that (gossip still
//!   converging): those were live before it, as the others saw all along;
//! - for this speaker itself, the moment it first saw the others: they see it arrive then.
//!
//! # Caveats
//! - Arrival times are local observations: speakers see a node join within gossip's spread time
//!   of each other, so they may disagree about the owner of that node's preferred addresses for
//!   that long when its hold-down ends (as for any change of the live set).
//! - After a partition heals, each side sees the other arrive. A speaker fenced during the
//!   partition ([`crate::membership::partition`]) starts over ([`Arrivals::rejoin`]) and sees
//!   itself arrive, as the others do. Where the tie was not broken (the API server unreachable
//!   too), the two sides may disagree about the owner of addresses of pools with preferences for
//!   the hold-down (both can answer, as during the partition itself). Pools without preferences
//!   are not affected.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::election::HoldDown;

/// After this speaker first sees the others, nodes it meets within this time count as live
/// from before (they were: gossip was still telling it about them).
pub const ARRIVAL_GRACE: Duration = Duration::from_secs(3);

/// The default hold-down: how long a returning preferred node must stay live before it takes
/// its addresses back.
///
/// 30 s: far above gossip's failure detection (under a second) and a speaker restart (a few
/// seconds), so a node that is crashing, restarting in a loop (the kubelet's first back-offs are
/// 10 s and 20 s) or on a flapping link takes nothing back until it has proved stable; short
/// enough that a node back for good is preferred again within half a minute.
pub const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(30);

/// The record of arrivals.
#[derive(Clone, Debug)]
pub struct Arrivals {
    me: String,
    hold_down: Duration,
    joined: Option<Instant>,
    live: BTreeSet<String>,
    since: BTreeMap<String, Instant>,
}

impl Arrivals {
    /// A record for the speaker on node `me`, with a hold-down of `hold_down` (zero: nobody is
    /// ever held).
    pub fn new(me: impl Into<String>, hold_down: Duration) -> Self {
        Arrivals {
            me: me.into(),
            hold_down,
            joined: None,
            live: BTreeSet::new(),
            since: BTreeMap::new(),
        }
    }

    /// Takes in the live set at `now`. An empty set before the first non-empty one is "not
    /// joined yet" and records nothing.
    pub fn observe(&mut self, now: Instant, live: &BTreeSet<String>) {
        if live == &self.live {
            self.expire(now);
            return;
        }
        match self.joined {
            None if live.is_empty() => return,
            None => {
                self.joined = Some(now);
                if live.contains(&self.me) {
                    self.since.insert(self.me.clone(), now);
                }
            }
            Some(joined) => {
                let in_grace = now < joined + ARRIVAL_GRACE;
                for n in live.difference(&self.live) {
                    if *n == self.me || !in_grace {
                        self.since.insert(n.clone(), now);
                    }
                }
            }
        }
        self.since.retain(|n, _| live.contains(n));
        self.live = live.clone();
        self.expire(now);
    }

    /// Starts over as a speaker that has not joined yet: the next non-empty live set is met as
    /// at start, the nodes in it live from before and this one arriving. For a speaker that
    /// stood aside while the others went on (fenced in a gossip partition): the others see it
    /// arrive when it comes back, not themselves, and it must see the same.
    pub fn rejoin(&mut self) {
        self.joined = None;
        self.live.clear();
        self.since.clear();
    }

    /// Forgets arrivals whose hold-down is over.
    fn expire(&mut self, now: Instant) {
        let d = self.hold_down;
        self.since.retain(|_, s| now < *s + d);
    }

    /// The planner's input at `now`, given when the live nodes' speaker Pods became ready
    /// (those Kubernetes dates; absent when unknown).
    pub fn hold_down(&self, now: Instant, ready_since: &BTreeMap<String, Instant>) -> HoldDown {
        let mut live_since = self.since.clone();
        for (node, ready) in ready_since {
            if self.live.contains(node) && now < *ready + self.hold_down {
                let since = live_since.entry(node.clone()).or_insert(*ready);
                *since = (*since).max(*ready);
            }
        }
        HoldDown {
            now: Some(now),
            live_since,
            duration: self.hold_down,
            standby: BTreeSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeMap<String, Instant> {
        BTreeMap::new()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    const H: Duration = Duration::from_secs(30);

    #[test]
    fn a_speaker_that_rejoins_holds_itself_and_not_the_nodes_that_went_on_without_it() {
        let t0 = Instant::now();
        let mut a = Arrivals::new("me", H);
        a.observe(t0, &set(&["me", "b", "c"]));
        a.rejoin();
        let later = t0 + Duration::from_secs(60);
        a.observe(later, &BTreeSet::new());
        a.observe(later, &set(&["me", "b", "c"]));
        let hd = a.hold_down(later, &none());
        assert!(hd.held("me"));
        assert!(!hd.held("b") && !hd.held("c"));
    }

    #[test]
    fn the_nodes_found_at_join_are_not_held_but_this_speaker_is() {
        let t0 = Instant::now();
        let mut a = Arrivals::new("me", H);
        a.observe(t0, &BTreeSet::new());
        a.observe(t0 + Duration::from_secs(1), &set(&["me", "b", "c"]));
        let hd = a.hold_down(t0 + Duration::from_secs(2), &none());
        assert!(hd.held("me"));
        assert!(!hd.held("b") && !hd.held("c"));
        assert_eq!(hd.next_expiry(), Some(t0 + Duration::from_secs(31)));
    }

    #[test]
    fn a_node_met_within_the_grace_is_not_held_and_one_met_later_is() {
        let t0 = Instant::now();
        let mut a = Arrivals::new("me", H);
        a.observe(t0, &set(&["me", "b"]));
        a.observe(t0 + Duration::from_secs(1), &set(&["me", "b", "c"]));
        a.observe(t0 + Duration::from_secs(10), &set(&["me", "c"]));
        a.observe(t0 + Duration::from_secs(11), &set(&["me", "b", "c"]));
        let hd = a.hold_down(t0 + Duration::from_secs(12), &none());
        assert!(!hd.held("c"));
        assert!(hd.held("b"), "b left and came back after the grace");
    }

    #[test]
    fn a_node_that_flaps_starts_its_hold_down_again_and_it_ends_after_the_duration() {
        let t0 = Instant::now();
        let mut a = Arrivals::new("me", H);
        a.observe(t0, &set(&["me", "b"]));
        let at = |s: u64| t0 + Duration::from_secs(s);
        a.observe(at(40), &set(&["me"]));
        a.observe(at(45), &set(&["me", "b"]));
        a.observe(at(60), &set(&["me"]));
        a.observe(at(61), &set(&["me", "b"]));
        let hd = a.hold_down(at(90), &none());
        assert!(hd.held("b"), "held from 61 s, not 45 s");
        assert_eq!(hd.next_expiry(), Some(at(91)));
        a.observe(at(91), &set(&["me", "b"]));
        let hd = a.hold_down(at(91), &none());
        assert!(!hd.held("b"));
        assert_eq!(hd.next_expiry(), None);
    }

    #[test]
    fn a_zero_hold_down_holds_nobody() {
        let t0 = Instant::now();
        let mut a = Arrivals::new("me", Duration::ZERO);
        a.observe(t0, &set(&["me"]));
        a.observe(t0 + Duration::from_secs(10), &set(&["me", "b"]));
        let hd = a.hold_down(t0 + Duration::from_secs(10), &none());
        assert!(hd.held_nodes().is_empty());
        assert_eq!(hd.next_expiry(), None);
    }

    #[test]
    fn a_recent_pod_ready_time_holds_a_node_found_live_at_join_and_the_later_date_wins() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(100 + s);
        let mut a = Arrivals::new("me", H);
        // Every speaker started together: this one finds b live at once, but b's Pod became
        // ready at 1 s, as every speaker reads.
        a.observe(at(2), &set(&["me", "b", "c"]));
        let ready: BTreeMap<String, Instant> = [
            ("b".to_string(), at(1)),
            ("c".to_string(), t0),
            ("me".to_string(), at(5)),
        ]
        .into();
        let hd = a.hold_down(at(10), &ready);
        assert!(hd.held("b") && hd.held("me"));
        assert_eq!(hd.live_since["b"], at(1));
        assert_eq!(
            hd.live_since["me"],
            at(5),
            "the later of join (2 s) and ready (5 s)"
        );
        assert!(!hd.held("c"), "ready 100 s ago");
        assert_eq!(hd.next_expiry(), Some(at(31)));
        // A node that is not live is not held by its Pod's date.
        a.observe(at(11), &set(&["me", "c"]));
        assert!(!a.hold_down(at(11), &ready).held("b"));
    }
}
