//! Breaking a gossip partition's tie through the API server. Pure: no I/O; the clocks are inputs.
//!
//! Gossip alone cannot tell "the others died" from "I can no longer hear them". Drop the gossip
//! port between {a} and {b, c} while clients still reach every node, and each side declares the
//! other dead and elects itself for the other's layer-2 addresses: two MACs answer ARP and NDP
//! for every address. Both sides still reach the API server, and it breaks the tie.
//!
//! One Lease in the speakers' namespace ([`LEASE_NAME`]) holds a *view*: the live set its writer
//! sees, written under a `resourceVersion` precondition, so that of two sides writing at once one
//! wins. A speaker compares its gossip live set with the speakers Kubernetes counts as up (speaker
//! Pod ready on a ready Node: [`super::seeds::kubernetes_live`]); they disagree when gossip misses
//! one of those. Then:
//!
//! - **Majority** (more than half of the known speakers live, or exactly half with the lowest
//!   name): its addresses move at once, as they always did: a crashed speaker fails over with no
//!   API round trip. The lowest-named live member writes its side's view and renews it every
//!   [`RENEW`] while the disagreement lasts.
//! - **Minority**: it takes nothing over yet and goes on standby in the election it had
//!   ([`Standing::Waiting`]): it keeps only the addresses no node of the other side may hold, so
//!   that it has stopped answering for the rest by the time the majority, which detects the
//!   partition at about the same moment, takes them over. Both sides' own detection decides
//!   when, not an API round trip: a write and a watch event can take seconds on a loaded API
//!   server, and until the majority's view arrived a minority that kept its election answered
//!   beside the majority. After [`MINORITY_WAIT`] (time for a majority to write first) its
//!   lowest member writes its view; once that view is the one on record it acts on it
//!   ([`Standing::Confirmed`]): the others really are gone.
//! - **Fenced**: a fresh view, written by another speaker, that leaves this one out (while gossip
//!   disagrees, or written by a member this one hears: the partition is one-way) means the other
//!   side holds the addresses. This speaker elects among that view's live set and itself, on
//!   standby: it keeps only the addresses no node of the other side may hold (an
//!   `externalTrafficPolicy: Local` Service with endpoints on this side only), until the view
//!   changes, goes stale
//!   ([`FRESH`]: its writer stopped renewing, so that side is gone too) or gossip heals and the
//!   writer, seeing this one again, writes a view that includes it. Leaving the fence, it stays
//!   on standby until its gossip sees every speaker Kubernetes counts, for at most
//!   [`HEAL_WAIT`]: a heal reaches the members one by one, and a speaker the writer's new view
//!   lets go before it hears the rest of the other side would otherwise take back addresses that
//!   side still answers for (seen: node-c answered beside node-b for 80 ms, because node-b heard
//!   of the heal 80 ms after node-c did).
//! - **Agreed**: gossip sees every speaker Kubernetes counts: gossip alone decides, nothing is
//!   written (except once, by the writer of a fresh view that this one's live set has outgrown,
//!   so that fenced speakers learn of the heal at once).
//!
//! # Guarantees
//! With the API server reachable from both sides of a symmetric partition, at most one side
//! answers for each address from the moment both sides' gossip has detected it (the minority
//! stands by then, the majority takes over then), not from when the views have been exchanged.
//! A slow API server delays only the views; one slower than the view writer's timeout
//! (`view_lease::WRITE_TIMEOUT`, 1 s) counts as unreachable (Caveats).
//!
//! # Caveats
//! - A minority whose peers really died (two of three nodes at once, or the lowest-named of two)
//!   answers for none of the addresses the dead could hold, its own included, for
//!   [`MINORITY_WAIT`] and a write. Neighbours that resolved those addresses keep sending to the
//!   MAC they have; only a new resolution waits, and ARP and NDP retry every second.
//! - The API server unreachable from a minority: its write fails, and after the failed attempt it
//!   acts on gossip alone ([`Standing::Unarbitrated`]), as it did before this existed: a speaker
//!   whose peers all died must still take their addresses over (availability first). A partition
//!   of gossip *and* the API server may then have two sides answering.
//! - Writes happen only while gossip disagrees with Kubernetes: one writer per side, one write
//!   per [`RENEW`]. A speaker Pod that Kubernetes counts as ready but that never joins gossip
//!   keeps the lowest member renewing (one write every [`RENEW`], cluster-wide).
//! - Freshness is judged by both the local time a view version was first seen and the wall-clock
//!   renew time the writer stored; with clocks skewed by more than [`FRESH`] a view may be taken
//!   as stale early (the tie is then not broken, as before), never as fresh for too long.
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

/// The Lease (in the speakers' namespace) that holds the last written view.
pub const LEASE_NAME: &str = "ferrolb-l2-view";
/// The Lease annotation holding the view: the writer's live set, comma-separated node names.
pub const VIEW_ANNOTATION: &str = "ferrolb.io/l2-live-speakers";
/// How long a minority waits before writing its own view, so that a majority writes first.
pub const MINORITY_WAIT: Duration = Duration::from_millis(500);
/// How often a side's writer renews its view while gossip disagrees with Kubernetes.
pub const RENEW: Duration = Duration::from_secs(2);
/// How long a view counts after its last renewal.
pub const FRESH: Duration = Duration::from_secs(6);
/// How long a speaker whose fence has lifted stays on standby at most, waiting for its gossip to
/// see every speaker Kubernetes counts (one that never does died meanwhile).
pub const HEAL_WAIT: Duration = Duration::from_millis(500);

/// A view on record: who wrote it, the live set it saw, the Lease's `resourceVersion` and the
/// writer's wall-clock time of the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The node of the speaker that wrote it.
    pub writer: String,
    /// The live set that speaker saw.
    pub live: BTreeSet<String>,
    /// The Lease's `metadata.resourceVersion` (compared for equality only).
    pub version: String,
    /// `spec.renewTime`, the writer's clock.
    pub renewed: SystemTime,
}

/// A view to write: this speaker's live set, replacing the version on record (or creating the
/// Lease when there is none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The live set to record.
    pub live: BTreeSet<String>,
    /// The `resourceVersion` the write is conditioned on; `None` creates the Lease.
    pub replaces: Option<String>,
}

/// How a write ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The view is on record (the watch brings it).
    Done,
    /// Another speaker wrote first (HTTP 409): the watch brings its view.
    Conflict,
    /// The API server did not answer in time or answered with another error.
    Unreachable,
}

/// Where this speaker stands, which decides the live set its layer-2 election uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Gossip sees every speaker Kubernetes counts as up.
    Agreed,
    /// Gossip misses some, and this side is the majority: it acts on gossip at once.
    Majority,
    /// A minority waiting for the API server's word: on standby in the election it had.
    Waiting,
    /// A minority whose view is on record: the missing speakers are gone.
    Confirmed,
    /// A minority that could not reach the API server: it acts on gossip alone.
    Unarbitrated,
    /// Another side's fresh view leaves this speaker out: it keeps only what that side cannot
    /// hold.
    Fenced {
        /// The speaker that wrote that view.
        by: String,
    },
}

/// What [`Arbiter::decide`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Where this speaker stands.
    pub standing: Standing,
    /// The live set the layer-2 election is to use.
    pub l2_live: BTreeSet<String>,
    /// Whether this speaker is on standby in that election: it owns an address only when no
    /// other node of `l2_live` can (fenced: the other side's view plus this speaker; waiting:
    /// the live set it had; either way it keeps only what the other side cannot hold, such as
    /// an `externalTrafficPolicy: Local` Service whose endpoints are all on this side; its fence
    /// just lifted: its live set, until gossip sees every known speaker or [`HEAL_WAIT`] passed).
    pub standby: bool,
    /// A view to write now, if any (at most one write is in flight).
    pub write: Option<Write>,
    /// When to decide again at the latest (a wait ending, a renewal, a view going stale).
    pub next: Option<Instant>,
}

/// The tie-breaker's state for one speaker.
#[derive(Debug)]
pub struct Arbiter {
    me: String,
    view: Option<View>,
    /// When the current view's version was first seen here.
    view_seen: Option<Instant>,
    disagree_since: Option<Instant>,
    /// The live set last used while not waiting: what a waiting minority keeps.
    held: BTreeSet<String>,
    last_write: Option<Instant>,
    in_flight: bool,
    /// The last write in this disagreement failed to reach the API server.
    unreachable: bool,
    /// Whether the last decision was [`Standing::Fenced`].
    fenced: bool,
    /// When the fence last lifted, while gossip has not yet seen every known speaker since.
    fence_lifted: Option<Instant>,
}

impl Arbiter {
    /// A tie-breaker for the speaker of node `me`.
    pub fn new(me: impl Into<String>) -> Self {
        let me = me.into();
        Self {
            held: BTreeSet::from([me.clone()]),
            me,
            view: None,
            view_seen: None,
            disagree_since: None,
            last_write: None,
            in_flight: false,
            unreachable: false,
            fenced: false,
            fence_lifted: None,
        }
    }

    /// The view on record changed (the watch's current object; `None`: no Lease).
    pub fn observe(&mut self, now: Instant, view: Option<View>) {
        let same = match (&self.view, &view) {
            (Some(a), Some(b)) => a.version == b.version,
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.view_seen = view.as_ref().map(|_| now);
            self.view = view;
        }
    }

    /// The write last returned by [`Arbiter::decide`] ended.
    pub fn written(&mut self, now: Instant, result: Written) {
        self.in_flight = false;
        self.last_write = Some(now);
        self.unreachable = result == Written::Unreachable;
    }

    /// The view on record, if any.
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    fn fresh(&self, now: Instant, wall: SystemTime) -> Option<&View> {
        let view = self.view.as_ref()?;
        let seen = self.view_seen?;
        let recent_here = now.saturating_duration_since(seen) < FRESH;
        // A renew time in the future (a writer's clock ahead) counts as now.
        let recent_there = wall.duration_since(view.renewed).unwrap_or_default() < FRESH;
        (recent_here && recent_there).then_some(view)
    }

    /// Decides where this speaker stands, given its gossip live set (this speaker included) and
    /// the speakers Kubernetes counts as up, at `now` (monotonic) and `wall` (for the writer's
    /// renew time).
    pub fn decide(
        &mut self,
        now: Instant,
        wall: SystemTime,
        live: &BTreeSet<String>,
        known: &BTreeSet<String>,
    ) -> Decision {
        let mut known = known.clone();
        known.insert(self.me.clone());
        let disagree = !known.is_subset(live);
        if !disagree {
            self.disagree_since = None;
            self.unreachable = false;
        } else if self.disagree_since.is_none() {
            self.disagree_since = Some(now);
        }
        let fresh = self.fresh(now, wall).cloned();
        let lowest = live.first() == Some(&self.me);
        let renew_due = self
            .last_write
            .is_none_or(|t| now.saturating_duration_since(t) >= RENEW);
        let ours = fresh.as_ref().is_some_and(|v| v.live == *live);
        let excluded_by = fresh.as_ref().filter(|v| {
            v.writer != self.me
                && !v.live.contains(&self.me)
                && (disagree || live.contains(&v.writer))
        });
        let standing = if let Some(v) = excluded_by {
            Standing::Fenced {
                by: v.writer.clone(),
            }
        } else if !disagree {
            Standing::Agreed
        } else if majority(live, &known) {
            Standing::Majority
        } else if ours {
            Standing::Confirmed
        } else if self.unreachable {
            Standing::Unarbitrated
        } else {
            Standing::Waiting
        };
        let minority_may_write = self
            .disagree_since
            .is_some_and(|t| now.saturating_duration_since(t) >= MINORITY_WAIT);
        let wants_write = match &standing {
            Standing::Fenced { .. } => false,
            Standing::Agreed => {
                // A fresh view of ours that this speaker's live set has outgrown: written once
                // more so that the speakers it fenced learn of the heal now, not when it expires.
                fresh
                    .as_ref()
                    .is_some_and(|v| v.writer == self.me && v.live != *live)
            }
            Standing::Majority | Standing::Confirmed => lowest && (!ours || renew_due),
            Standing::Waiting => lowest && minority_may_write && renew_due,
            Standing::Unarbitrated => lowest && renew_due,
        };
        let write = (wants_write && !self.in_flight).then(|| {
            self.in_flight = true;
            Write {
                live: live.clone(),
                replaces: self.view.as_ref().map(|v| v.version.clone()),
            }
        });
        let l2_live = match (&standing, excluded_by) {
            (Standing::Fenced { .. }, Some(v)) => {
                let mut l = v.live.clone();
                l.insert(self.me.clone());
                l
            }
            (Standing::Waiting, _) => self.held.clone(),
            _ => live.clone(),
        };
        if standing != Standing::Waiting {
            self.held = l2_live.clone();
        }
        let mut next = self.deadlines(now, wall, fresh.as_ref(), &standing, lowest);
        let fenced = matches!(standing, Standing::Fenced { .. });
        let healing = self.track_fence(now, &standing, &mut next);
        let next = next.into_iter().filter(|t| *t > now).min();
        Decision {
            standby: fenced || standing == Standing::Waiting || healing,
            standing,
            l2_live,
            write,
            next,
        }
    }

    /// When to decide again, for the view going stale (by either clock), a minority's wait
    /// ending and a writer's renewal.
    fn deadlines(
        &self,
        now: Instant,
        wall: SystemTime,
        fresh: Option<&View>,
        standing: &Standing,
        lowest: bool,
    ) -> Vec<Instant> {
        let mut next: Vec<Instant> = Vec::new();
        if let (Some(v), Some(seen)) = (fresh, self.view_seen) {
            let there = v.renewed + FRESH;
            let left = there.duration_since(wall).unwrap_or_default();
            next.push((seen + FRESH).min(now + left));
        }
        if *standing == Standing::Waiting {
            next.extend(self.disagree_since.map(|t| t + MINORITY_WAIT));
        }
        let writer = match standing {
            Standing::Waiting
            | Standing::Majority
            | Standing::Confirmed
            | Standing::Unarbitrated => lowest,
            Standing::Agreed | Standing::Fenced { .. } => false,
        };
        if writer {
            next.extend(self.last_write.map(|t| t + RENEW));
        }
        next
    }

    /// Leaving the fence: on standby until gossip agrees, for at most [`HEAL_WAIT`]. Returns
    /// whether this speaker is still healing (and adds when that ends to `next`).
    fn track_fence(&mut self, now: Instant, standing: &Standing, next: &mut Vec<Instant>) -> bool {
        let fenced = matches!(standing, Standing::Fenced { .. });
        if self.fenced && !fenced {
            self.fence_lifted = Some(now);
        }
        self.fenced = fenced;
        if fenced || *standing == Standing::Agreed {
            self.fence_lifted = None;
        }
        match self.fence_lifted {
            Some(t) if now < t + HEAL_WAIT => {
                next.push(t + HEAL_WAIT);
                true
            }
            _ => {
                self.fence_lifted = None;
                false
            }
        }
    }
}

/// Whether `live` holds more than half of `known`, or exactly half with the lowest known name.
fn majority(live: &BTreeSet<String>, known: &BTreeSet<String>) -> bool {
    let here = known.intersection(live).count();
    2 * here > known.len()
        || (2 * here == known.len() && known.first().is_some_and(|n| live.contains(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn view(writer: &str, live: &[&str], version: &str, renewed: SystemTime) -> View {
        View {
            writer: writer.into(),
            live: set(live),
            version: version.into(),
            renewed,
        }
    }

    struct Clock {
        start: Instant,
        wall0: SystemTime,
    }

    impl Clock {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                wall0: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            }
        }
        fn at(&self, ms: u64) -> (Instant, SystemTime) {
            let d = Duration::from_millis(ms);
            (self.start + d, self.wall0 + d)
        }
    }

    #[test]
    fn a_speaker_that_sees_every_known_speaker_uses_gossip_alone_and_writes_nothing() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let (now, wall) = c.at(0);
        let d = a.decide(now, wall, &set(&["a", "b", "c"]), &set(&["a", "b", "c"]));
        assert_eq!(d.standing, Standing::Agreed);
        assert_eq!(d.l2_live, set(&["a", "b", "c"]));
        assert_eq!(d.write, None);
        assert_eq!(d.next, None);
    }

    #[test]
    fn a_majority_acts_at_once_and_its_lowest_member_writes_its_view() {
        let c = Clock::new();
        let mut b = Arbiter::new("b");
        let mut cc = Arbiter::new("c");
        let (now, wall) = c.at(0);
        let known = set(&["a", "b", "c"]);
        let db = b.decide(now, wall, &set(&["b", "c"]), &known);
        assert_eq!(db.standing, Standing::Majority);
        assert_eq!(db.l2_live, set(&["b", "c"]));
        assert_eq!(
            db.write,
            Some(Write {
                live: set(&["b", "c"]),
                replaces: None
            })
        );
        let dc = cc.decide(now, wall, &set(&["b", "c"]), &known);
        assert_eq!(dc.standing, Standing::Majority);
        assert_eq!(dc.write, None, "only the lowest live member writes");
    }

    #[test]
    fn a_minority_stands_by_in_its_election_then_writes_after_the_wait_and_acts_once_its_view_is_on_record()
     {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        assert_eq!(
            a.decide(now, wall, &known, &known).standing,
            Standing::Agreed
        );
        let (now, wall) = c.at(100);
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Waiting);
        assert_eq!(d.l2_live, known, "the election it had, not every address");
        assert!(
            d.standby,
            "on standby in it: the others take its addresses over"
        );
        assert_eq!(d.write, None);
        assert_eq!(d.next, Some(now + MINORITY_WAIT));
        let (now, wall) = c.at(600);
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Waiting);
        assert_eq!(d.write.map(|w| w.live), Some(set(&["a"])));
        a.written(now, Written::Done);
        let (now, wall) = c.at(620);
        a.observe(now, Some(view("a", &["a"], "7", wall)));
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Confirmed);
        assert_eq!(d.l2_live, set(&["a"]));
        assert!(!d.standby);
    }

    /// The addresses of `addrs` that `me` answers for on `d`: the layer-2 election over
    /// `d.l2_live`, with `me` on standby when `d` says so, as the planner runs it.
    fn answered_by(
        me: &str,
        d: &Decision,
        addrs: &[std::net::IpAddr],
    ) -> BTreeSet<std::net::IpAddr> {
        use crate::l2::election::{Standing as Rank, owner_by_standing};
        addrs
            .iter()
            .copied()
            .filter(|ip| {
                let candidates = d.l2_live.iter().map(|n| {
                    let rank = if n == me && d.standby {
                        Rank::PLAIN.on_standby()
                    } else {
                        Rank::PLAIN
                    };
                    (n.as_str(), rank)
                });
                owner_by_standing(*ip, candidates) == Some(me)
            })
            .collect()
    }

    /// 256 layer-2 addresses, for the tests that run the election over each.
    fn addresses() -> Vec<std::net::IpAddr> {
        (0..=255u8)
            .map(|i| std::net::IpAddr::from([10, 99, 0, i]))
            .collect()
    }

    /// How many of the speakers' answer sets hold `ip`.
    fn answering_count(ip: &std::net::IpAddr, answers: &[BTreeSet<std::net::IpAddr>]) -> usize {
        answers.iter().filter(|s| s.contains(ip)).count()
    }

    /// Fails with the minority keeping its election while it waits (10.99.0.0 answered by 2
    /// speakers at +100 ms), as it did before the views could be slow.
    #[test]
    fn in_a_partition_whose_views_have_not_arrived_each_address_is_answered_by_exactly_one_side() {
        let c = Clock::new();
        let known = set(&["a", "b", "c"]);
        let addrs = addresses();
        let mut arbiters: Vec<Arbiter> = ["a", "b", "c"].into_iter().map(Arbiter::new).collect();
        let (now, wall) = c.at(0);
        for x in &mut arbiters {
            x.decide(now, wall, &known, &known);
        }
        // a is cut off from b and c; the API server is slow: no view reaches anyone, for as
        // long as the minority waits and after (its write still in flight).
        for ms in [100, 400, 700] {
            let (now, wall) = c.at(ms);
            let mut answering: Vec<BTreeSet<std::net::IpAddr>> = Vec::new();
            for x in &mut arbiters {
                let live = if x.me == "a" {
                    set(&["a"])
                } else {
                    set(&["b", "c"])
                };
                let d = x.decide(now, wall, &live, &known);
                answering.push(answered_by(&x.me, &d, &addrs));
            }
            for ip in &addrs {
                let by = answering_count(ip, &answering);
                assert_eq!(by, 1, "{ip} answered by {by} speakers at +{ms} ms");
            }
            assert!(
                answering[0].is_empty(),
                "the minority answers nothing another side can hold"
            );
        }
    }

    #[test]
    fn a_minority_that_sees_the_majoritys_fresh_view_answers_for_nothing() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        a.decide(now, wall, &known, &known);
        let (now, wall) = c.at(300);
        a.observe(now, Some(view("b", &["b", "c"], "8", wall)));
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Fenced { by: "b".into() });
        assert_eq!(
            d.l2_live,
            set(&["a", "b", "c"]),
            "the other side's view, and itself"
        );
        assert!(d.standby);
        assert_eq!(d.write, None);
        // Still fenced past the wait: the minority never writes over a fresh view.
        let (now, wall) = c.at(2_000);
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Fenced { by: "b".into() });
        assert_eq!(d.write, None);
    }

    #[test]
    fn a_fenced_speaker_acts_again_once_the_view_is_no_longer_renewed() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        a.observe(now, Some(view("b", &["b", "c"], "8", wall)));
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert!(matches!(d.standing, Standing::Fenced { .. }));
        assert_eq!(d.next, Some(now + FRESH));
        // b and c died meanwhile: nobody renews.
        let (now, wall) = c.at(6_000);
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Waiting);
        assert_eq!(d.write.map(|w| w.replaces), Some(Some("8".into())));
    }

    #[test]
    fn a_view_renewed_long_ago_by_the_writers_clock_is_stale_even_when_first_seen_now() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(60_000);
        let (_, long_ago) = c.at(0);
        a.observe(now, Some(view("b", &["b", "c"], "8", long_ago)));
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Waiting);
    }

    #[test]
    fn the_majoritys_writer_renews_its_view_while_gossip_disagrees_and_stops_when_it_agrees() {
        let c = Clock::new();
        let mut b = Arbiter::new("b");
        let known = set(&["a", "b", "c"]);
        let side = set(&["b", "c"]);
        let (now, wall) = c.at(0);
        assert!(b.decide(now, wall, &side, &known).write.is_some());
        b.written(now, Written::Done);
        b.observe(now, Some(view("b", &["b", "c"], "9", wall)));
        let (now, wall) = c.at(1_000);
        let d = b.decide(now, wall, &side, &known);
        assert_eq!(d.write, None, "renewed every RENEW, not on every decision");
        let (now, wall) = c.at(2_000);
        assert!(b.decide(now, wall, &side, &known).write.is_some());
        b.written(now, Written::Done);
        b.observe(now, Some(view("b", &["b", "c"], "10", wall)));
        // Kubernetes no longer counts a (its speaker Pod is gone): agreement, no more writes.
        let (now, wall) = c.at(5_000);
        let d = b.decide(now, wall, &side, &side);
        assert_eq!(d.standing, Standing::Agreed);
        assert_eq!(d.write, None);
    }

    #[test]
    fn after_the_heal_the_writer_records_its_grown_view_once_and_the_fenced_speaker_acts_again() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let mut b = Arbiter::new("b");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        let v = view("b", &["b", "c"], "9", wall);
        a.observe(now, Some(v.clone()));
        b.observe(now, Some(v));
        // Gossip heals: a hears b again, but b's view still leaves it out.
        let (now, wall) = c.at(1_000);
        let d = a.decide(now, wall, &known, &known);
        assert_eq!(d.standing, Standing::Fenced { by: "b".into() });
        let d = b.decide(now, wall, &known, &known);
        assert_eq!(d.standing, Standing::Agreed);
        assert_eq!(d.write.map(|w| w.live), Some(known.clone()));
        b.written(now, Written::Done);
        let (now, wall) = c.at(1_020);
        let healed = view("b", &["a", "b", "c"], "10", wall);
        a.observe(now, Some(healed.clone()));
        b.observe(now, Some(healed));
        let d = a.decide(now, wall, &known, &known);
        assert_eq!(d.standing, Standing::Agreed);
        assert_eq!(d.l2_live, known);
        assert_eq!(
            b.decide(now, wall, &known, &known).write,
            None,
            "written once"
        );
    }

    /// Replays a heal seen in the lab (node-c fenced, node-b holding its addresses): the
    /// writer's new view lets c go when c hears a again but not yet b, and b hears of the heal
    /// 80 ms after c does. Fails with c acting on {a, c} at once (c and b both answered the
    /// addresses that c ranks above a and b ranks above a).
    #[test]
    fn a_speaker_whose_fence_lifts_before_it_hears_the_whole_other_side_takes_nothing_back_until_it_does()
     {
        let c = Clock::new();
        let all = set(&["a", "b", "c"]);
        let addrs = addresses();
        let mut arbiters: Vec<Arbiter> = ["a", "b", "c"].into_iter().map(Arbiter::new).collect();
        let (now, wall) = c.at(0);
        let partitioned = view("a", &["a", "b"], "9", wall);
        for x in &mut arbiters {
            x.observe(now, Some(partitioned.clone()));
            let live = if x.me == "c" {
                set(&["c"])
            } else {
                set(&["a", "b"])
            };
            x.decide(now, wall, &live, &all);
        }
        assert!(arbiters[2].fenced, "c is fenced");
        // Gossip heals at +1,000 ms: a hears c and writes a view with it; c hears a at once,
        // b 100 ms later; b hears c 80 ms after the heal.
        let (now, wall) = c.at(1_000);
        let healed = view("a", &["a", "b", "c"], "10", wall);
        let mut c_unfenced = None;
        for ms in [1_000u64, 1_020, 1_050, 1_079, 1_080, 1_099, 1_100, 1_200] {
            let (now, wall) = c.at(ms);
            let mut answering: Vec<BTreeSet<std::net::IpAddr>> = Vec::new();
            for x in &mut arbiters {
                x.observe(now, Some(healed.clone()));
                let live = match x.me.as_str() {
                    "a" => all.clone(),
                    "b" if ms < 1_080 => set(&["a", "b"]),
                    "c" if ms < 1_100 => set(&["a", "c"]),
                    _ => all.clone(),
                };
                let d = x.decide(now, wall, &live, &all);
                if x.me == "c" && ms < 1_100 {
                    assert!(d.standby, "+{ms} ms: c stands by until it hears b");
                    c_unfenced.get_or_insert(d.next);
                }
                answering.push(answered_by(&x.me, &d, &addrs));
            }
            for ip in &addrs {
                let by = answering_count(ip, &answering);
                assert!(by <= 1, "{ip} answered by {by} speakers at +{ms} ms");
                if ms >= 1_100 {
                    assert_eq!(by, 1, "{ip} unanswered at +{ms} ms");
                }
            }
        }
        assert_eq!(
            c_unfenced,
            Some(Some(now + HEAL_WAIT)),
            "decides again when the wait ends"
        );
    }

    #[test]
    fn a_speaker_whose_fence_lifts_acts_on_its_gossip_after_the_heal_wait_when_a_speaker_stays_missing()
     {
        let c = Clock::new();
        let mut x = Arbiter::new("c");
        let all = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        x.observe(now, Some(view("a", &["a", "b"], "9", wall)));
        assert!(x.decide(now, wall, &set(&["c"]), &all).standby);
        // The fence lifts; b died meanwhile and never comes back to gossip.
        let (now, wall) = c.at(1_000);
        x.observe(now, Some(view("a", &["a", "c"], "10", wall)));
        let d = x.decide(now, wall, &set(&["a", "c"]), &all);
        assert_eq!(d.standing, Standing::Majority);
        assert!(d.standby);
        assert_eq!(d.next, Some(now + HEAL_WAIT));
        let (now, wall) = c.at(1_000 + HEAL_WAIT.as_millis() as u64);
        let d = x.decide(now, wall, &set(&["a", "c"]), &all);
        assert_eq!(d.standing, Standing::Majority);
        assert!(!d.standby, "b's addresses are taken over after the wait");
        assert_eq!(d.l2_live, set(&["a", "c"]));
    }

    #[test]
    fn a_speaker_that_hears_a_writer_who_cannot_hear_it_is_fenced() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let all = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        a.observe(now, Some(view("b", &["b", "c"], "9", wall)));
        let d = a.decide(now, wall, &all, &all);
        assert_eq!(d.standing, Standing::Fenced { by: "b".into() });
    }

    #[test]
    fn a_minority_that_cannot_reach_the_api_server_acts_on_gossip_alone() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        a.decide(now, wall, &set(&["a"]), &known);
        let (now, wall) = c.at(500);
        assert!(a.decide(now, wall, &set(&["a"]), &known).write.is_some());
        let (now, wall) = c.at(1_500);
        a.written(now, Written::Unreachable);
        let d = a.decide(now, wall, &set(&["a"]), &known);
        assert_eq!(d.standing, Standing::Unarbitrated);
        assert_eq!(d.l2_live, set(&["a"]));
        assert_eq!(d.next, Some(now + RENEW), "and tries the API server again");
    }

    #[test]
    fn only_one_write_is_in_flight() {
        let c = Clock::new();
        let mut b = Arbiter::new("b");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        assert!(
            b.decide(now, wall, &set(&["b", "c"]), &known)
                .write
                .is_some()
        );
        let (now, wall) = c.at(3_000);
        assert_eq!(b.decide(now, wall, &set(&["b", "c"]), &known).write, None);
    }

    #[test]
    fn an_even_split_is_won_by_the_side_with_the_lowest_name() {
        let known = set(&["a", "b", "c", "d"]);
        assert!(majority(&set(&["a", "b"]), &known));
        assert!(!majority(&set(&["c", "d"]), &known));
        assert!(majority(&set(&["a", "b", "c"]), &known));
        assert!(!majority(&set(&["d"]), &known));
    }

    #[test]
    fn a_view_that_includes_this_speaker_never_fences_it() {
        let c = Clock::new();
        let mut a = Arbiter::new("a");
        let known = set(&["a", "b", "c"]);
        let (now, wall) = c.at(0);
        a.observe(now, Some(view("b", &["a", "b"], "9", wall)));
        let d = a.decide(now, wall, &set(&["a", "b"]), &known);
        assert_eq!(d.standing, Standing::Majority);
    }
}
