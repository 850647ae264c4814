//! Who is live for layer 2, as this speaker decides it each pass. Pure: no I/O; time is passed
//! in.
//!
//! Inputs: gossip's live set (or, when gossip cannot run, the Kubernetes view: speaker Pod
//! ready on a Ready node), the states the other members publish ([`MemberState`]: leaving,
//! addresses they cannot answer for), how often this member rejoined after the others had
//! declared it dead, and whether any other speaker Pod exists. Outputs: the live set, the
//! candidates for layer 2 (nobody until this speaker has joined), who is leaving, when to
//! announce again after a rejoin, and the next deadline.
//!
//! - **Joining.** Until gossip has met another speaker, this one sees itself alone and would
//!   elect itself for every address. It is a candidate for nothing until it has met one (whose
//!   reply lists the others), or no other speaker Pod exists, or [`JOIN_WAIT`] has passed (the
//!   others are all down).
//! - **Leaving.** A speaker that says it is leaving is no candidate owner: its addresses are
//!   taken over (and announced) while it still answers.
//! - **Rejoining.** When the others had declared this node dead (it stood still, or was cut
//!   off) and it rejoins, identities are renewed on every side, so a member's old identity
//!   goes before its new one arrives: the live set from before is kept for [`REJOIN_SETTLE`]
//!   so that no address moves for that, and this node's layer-2 addresses are announced again
//!   once that settle is over (what happened meanwhile has arrived from its watches).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a speaker that has met no other waits before it answers as the only one.
pub const JOIN_WAIT: Duration = Duration::from_secs(3);

/// How long after rejoining (the others had declared this node dead: it stood still, or was
/// cut off) its layer-2 addresses are announced again. What happened meanwhile (its Node
/// excluded, a Service deleted) waits in its watch connections and arrives within
/// milliseconds of the wake; announcing before that would claim what it may no longer hold.
/// Meanwhile the stand-in owners keep answering until the announcement (their handover).
pub const REJOIN_SETTLE: Duration = Duration::from_millis(300);

/// Addresses carried over gossip at most (keeps the state within one datagram).
pub const MAX_UNABLE: usize = 10;

/// What a speaker tells the others over gossip: the addresses it cannot answer for (at most
/// [`MAX_UNABLE`]; the rest are still reported locally, in logs, Events and metrics), and
/// whether it is leaving (SIGTERM: the others take its addresses over while it still answers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    /// Addresses it was elected for but cannot answer for.
    pub unable: BTreeSet<IpAddr>,
    /// It is stopping: not a candidate owner any more.
    pub leaving: bool,
}

impl MemberState {
    /// JSON, within one datagram; `leaving` is left out when false (the format of speakers
    /// that knew only `unable`).
    pub fn encode(&self) -> Vec<u8> {
        let list: Vec<&IpAddr> = self.unable.iter().take(MAX_UNABLE).collect();
        let json = if self.leaving {
            serde_json::json!({ "unable": list, "leaving": true })
        } else {
            serde_json::json!({ "unable": list })
        };
        serde_json::to_vec(&json).unwrap_or_default()
    }

    /// Reads [`MemberState::encode`]'s output; anything else is the default (nothing unable,
    /// not leaving).
    pub fn decode(state: &[u8]) -> MemberState {
        #[derive(serde::Deserialize)]
        struct Wire {
            #[serde(default)]
            unable: Vec<IpAddr>,
            #[serde(default)]
            leaving: bool,
        }
        serde_json::from_slice::<Wire>(state)
            .map(|w| MemberState {
                unable: w.unable.into_iter().collect(),
                leaving: w.leaving,
            })
            .unwrap_or_default()
    }
}

/// What changed in one [`Liveness::observe`], for the shell to say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Noticed {
    /// This speaker has just joined the others (with this many members).
    pub joined: Option<usize>,
    /// This speaker has just learnt it had been declared dead and rejoined.
    pub rejoined: bool,
}

/// The liveness core; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Liveness {
    this: String,
    /// When gossip started (`None`: it does not run, the Kubernetes view is used).
    gossip_started: Option<Instant>,
    joined: bool,
    alone: bool,
    kubernetes: BTreeSet<String>,
    leaving: BTreeSet<String>,
    unable: BTreeMap<String, BTreeSet<IpAddr>>,
    rejoined_seen: u64,
    reannounce_at: Option<Instant>,
    hold: Option<(Instant, BTreeSet<String>)>,
    live: BTreeSet<String>,
}

impl Liveness {
    /// A speaker on node `this`, before gossip starts: live is this node alone.
    pub fn new(this: &str) -> Self {
        Liveness {
            this: this.to_owned(),
            gossip_started: None,
            joined: false,
            alone: false,
            kubernetes: BTreeSet::from([this.to_owned()]),
            leaving: BTreeSet::new(),
            unable: BTreeMap::new(),
            rejoined_seen: 0,
            reannounce_at: None,
            hold: None,
            live: BTreeSet::from([this.to_owned()]),
        }
    }

    /// Gossip started at `now`: the join wait starts.
    pub fn gossip_started(&mut self, now: Instant) {
        self.gossip_started = Some(now);
    }

    /// The speakers Kubernetes counts as up (speaker Pod ready on a Ready node), this one
    /// included, and whether no other speaker Pod exists at all (nobody to join).
    pub fn kubernetes(&mut self, live: BTreeSet<String>, alone: bool) {
        self.kubernetes = live;
        self.kubernetes.insert(self.this.clone());
        self.alone = alone;
    }

    /// The states the other members publish, by node (this node's own is left out).
    pub fn member_states<'a>(&mut self, states: impl IntoIterator<Item = (&'a str, MemberState)>) {
        self.leaving.clear();
        self.unable.clear();
        for (node, st) in states {
            if node == self.this {
                continue;
            }
            if st.leaving {
                self.leaving.insert(node.to_owned());
            }
            if !st.unable.is_empty() {
                self.unable.insert(node.to_owned(), st.unable);
            }
        }
    }

    /// One pass at `now`: gossip's live set (`None` when gossip does not run) and how often
    /// this member has rejoined so far. Returns what was noticed; [`Liveness::live`] and the
    /// other accessors then give the outcome.
    pub fn observe(
        &mut self,
        now: Instant,
        gossip_live: Option<&BTreeSet<String>>,
        rejoined: u64,
    ) -> Noticed {
        let mut noticed = Noticed::default();
        if rejoined > self.rejoined_seen {
            self.rejoined_seen = rejoined;
            self.reannounce_at = Some(now + REJOIN_SETTLE);
            self.hold = Some((now + REJOIN_SETTLE, self.live.clone()));
            noticed.rejoined = true;
        }
        let base = gossip_live.unwrap_or(&self.kubernetes);
        let mut live: BTreeSet<String> = base.difference(&self.leaving).cloned().collect();
        match &self.hold {
            Some((until, before)) if now < *until => {
                live.extend(before.difference(&self.leaving).cloned());
            }
            Some(_) => self.hold = None,
            None => {}
        }
        if let Some(started) = self.gossip_started
            && !self.joined
        {
            self.joined =
                live.len() > 1 || self.alone || now.saturating_duration_since(started) >= JOIN_WAIT;
            if self.joined {
                noticed.joined = Some(live.len());
            }
        }
        self.live = live;
        noticed
    }

    /// The live speakers (gossip's or Kubernetes' view, less those leaving).
    pub fn live(&self) -> &BTreeSet<String> {
        &self.live
    }

    /// Whether this speaker may be a candidate at all: it has joined, or gossip does not run.
    pub fn joined(&self) -> bool {
        self.joined || self.gossip_started.is_none()
    }

    /// The speakers Kubernetes counts as up, less those leaving (what a gossip partition's
    /// tie is broken against).
    pub fn known(&self) -> BTreeSet<String> {
        self.kubernetes.difference(&self.leaving).cloned().collect()
    }

    /// The members that say they are leaving.
    pub fn leaving(&self) -> &BTreeSet<String> {
        &self.leaving
    }

    /// What the other members cannot answer for, by node.
    pub fn unable(&self) -> &BTreeMap<String, BTreeSet<IpAddr>> {
        &self.unable
    }

    /// Whether this node's layer-2 addresses are to be announced again now (once per rejoin,
    /// [`REJOIN_SETTLE`] after it).
    pub fn take_reannounce(&mut self, now: Instant) -> bool {
        let due = self.reannounce_at.is_some_and(|at| now >= at);
        if due {
            self.reannounce_at = None;
        }
        due
    }

    /// The next moment a pass must run for this core: the end of the join wait, a re-announce.
    pub fn next_deadline(&self) -> Option<Instant> {
        let joining = self
            .gossip_started
            .filter(|_| !self.joined)
            .map(|s| s + JOIN_WAIT);
        joining.into_iter().chain(self.reannounce_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    fn leaving(node: &str) -> (&str, MemberState) {
        (
            node,
            MemberState {
                unable: BTreeSet::new(),
                leaving: true,
            },
        )
    }

    #[test]
    fn a_speaker_that_has_met_nobody_is_candidate_for_nothing_until_the_join_wait_ends() {
        let t = Instant::now();
        let mut l = Liveness::new("a");
        l.kubernetes(set(&["a", "b"]), false);
        l.gossip_started(t);
        let n = l.observe(t + Duration::from_secs(1), Some(&set(&["a"])), 0);
        assert_eq!(n, Noticed::default());
        assert!(!l.joined());
        assert_eq!(l.next_deadline(), Some(t + JOIN_WAIT));
        let n = l.observe(t + JOIN_WAIT, Some(&set(&["a"])), 0);
        assert_eq!(n.joined, Some(1));
        assert!(l.joined());
        assert_eq!(l.next_deadline(), None);
    }

    #[test]
    fn meeting_another_speaker_or_having_none_to_meet_joins_at_once() {
        let t = Instant::now();
        let mut met = Liveness::new("a");
        met.gossip_started(t);
        assert_eq!(met.observe(t, Some(&set(&["a", "b"])), 0).joined, Some(2));
        let mut alone = Liveness::new("a");
        alone.kubernetes(set(&["a"]), true);
        alone.gossip_started(t);
        assert_eq!(alone.observe(t, Some(&set(&["a"])), 0).joined, Some(1));
    }

    #[test]
    fn without_gossip_the_kubernetes_view_is_the_live_set_and_no_join_is_waited_for() {
        let t = Instant::now();
        let mut l = Liveness::new("a");
        l.kubernetes(set(&["b", "c"]), false);
        l.observe(t, None, 0);
        assert_eq!(l.live(), &set(&["a", "b", "c"]));
        assert!(l.joined());
        assert_eq!(l.next_deadline(), None);
    }

    #[test]
    fn a_member_leaving_is_no_candidate_and_what_others_cannot_answer_for_is_kept() {
        let t = Instant::now();
        let mut l = Liveness::new("a");
        l.kubernetes(set(&["a", "b", "c"]), false);
        let unable = MemberState {
            unable: BTreeSet::from(["10.0.0.1".parse().unwrap()]),
            leaving: false,
        };
        l.member_states([leaving("b"), ("c", unable.clone()), leaving("a")]);
        l.observe(t, Some(&set(&["a", "b", "c"])), 0);
        assert_eq!(l.live(), &set(&["a", "c"]));
        assert_eq!(l.leaving(), &set(&["b"]));
        assert_eq!(l.known(), set(&["a", "c"]));
        assert_eq!(l.unable()["c"], unable.unable);
        l.member_states([]);
        l.observe(t, Some(&set(&["a", "b", "c"])), 0);
        assert_eq!(l.live(), &set(&["a", "b", "c"]));
    }

    #[test]
    fn after_a_rejoin_the_live_set_from_before_is_kept_for_the_settle_then_announced_again() {
        let t = Instant::now();
        let mut l = Liveness::new("a");
        l.gossip_started(t);
        l.observe(t, Some(&set(&["a", "b", "c"])), 0);
        // The wake: identities renew, b's old one is gone before its new one arrives.
        let woke = t + Duration::from_secs(10);
        let n = l.observe(woke, Some(&set(&["a", "c"])), 1);
        assert!(n.rejoined);
        assert_eq!(l.live(), &set(&["a", "b", "c"]));
        assert!(!l.take_reannounce(woke));
        assert_eq!(l.next_deadline(), Some(woke + REJOIN_SETTLE));
        // Still within the settle: kept; one that leaves meanwhile is not.
        l.member_states([leaving("c")]);
        l.observe(
            woke + Duration::from_millis(100),
            Some(&set(&["a", "c"])),
            1,
        );
        assert_eq!(l.live(), &set(&["a", "b"]));
        // After it: gossip's view alone, and the addresses are announced again, once.
        let after = woke + REJOIN_SETTLE;
        l.member_states([]);
        assert!(!l.observe(after, Some(&set(&["a", "c"])), 1).rejoined);
        assert_eq!(l.live(), &set(&["a", "c"]));
        assert!(l.take_reannounce(after));
        assert!(!l.take_reannounce(after));
        assert_eq!(l.next_deadline(), None);
    }

    #[test]
    fn member_states_survive_the_gossip_encoding_and_garbage_reads_as_the_default() {
        let unable: BTreeSet<IpAddr> = ["10.0.0.1", "fd00::1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        for leaving in [false, true] {
            let st = MemberState {
                unable: unable.clone(),
                leaving,
            };
            assert_eq!(MemberState::decode(&st.encode()), st);
        }
        assert_eq!(
            MemberState::decode(b"\xff\x00garbage"),
            MemberState::default()
        );
        // What speakers that knew only `unable` sent, and read.
        assert_eq!(
            MemberState::decode(br#"{"unable":["10.0.0.1"]}"#)
                .unable
                .len(),
            1
        );
        assert!(
            !String::from_utf8(MemberState::default().encode())
                .unwrap()
                .contains("leaving")
        );
        let many = MemberState {
            unable: (0..100u8).map(|i| IpAddr::from([10, 0, 0, i])).collect(),
            leaving: true,
        };
        assert!(many.encode().len() <= 512);
    }
}
