//! SWIM membership core: the `foca` state machine behind an authenticated datagram layer.
//! Pure: no I/O, no clock (timers are outputs, randomness comes from a seed).
//!
//! Every datagram leaves through [`auth::seal`] and enters through [`auth::open`]; foca never
//! sees bytes that fail authentication, so a forged message cannot change membership. Failures
//! are counted per [`AuthFailure`].

use super::auth::{self, AuthFailure, GossipKey};
use foca::{Foca, NoCustomBroadcast, Notification, PostcardCodec, Runtime};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

/// A speaker as a gossip member: its node, where it listens, and a generation that grows on each
/// start (the shell uses the start time in milliseconds), so a restarted speaker replaces its
/// former self in everybody's view instead of being taken for a dead member.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpeakerId {
    /// The Kubernetes node name.
    pub node: String,
    /// The gossip address (node IP and port).
    pub addr: SocketAddr,
    /// Larger is newer.
    pub generation: u64,
}

impl foca::Identity for SpeakerId {
    type Addr = SocketAddr;

    /// After being declared down while alive (a partition), rejoin with the next generation.
    fn renew(&self) -> Option<Self> {
        Some(SpeakerId {
            generation: self.generation.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

/// Timing of failure detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipConfig {
    /// How often a random member is probed.
    pub probe_period: Duration,
    /// How long to wait for a direct ack before asking others to probe (under `probe_period`).
    pub probe_rtt: Duration,
    /// How long a suspect may refute before it is declared down.
    pub suspect_to_down_after: Duration,
    /// How often updates are pushed to a few members besides probe piggybacking.
    pub gossip_every: Duration,
    /// How often to announce to a known member (heals partitions, finds returning members).
    pub announce_every: Duration,
}

impl Default for MembershipConfig {
    /// Tuned for a LAN and a failover goal under one second: a dead speaker is probed within
    /// about one period, suspected after it, and declared down `suspect_to_down_after` later.
    fn default() -> Self {
        MembershipConfig {
            probe_period: Duration::from_millis(200),
            probe_rtt: Duration::from_millis(80),
            suspect_to_down_after: Duration::from_millis(250),
            gossip_every: Duration::from_millis(100),
            announce_every: Duration::from_secs(5),
        }
    }
}

impl MembershipConfig {
    fn to_foca(&self) -> foca::Config {
        let mut c = foca::Config::simple();
        c.probe_period = self.probe_period;
        c.probe_rtt = self.probe_rtt;
        c.suspect_to_down_after = self.suspect_to_down_after;
        c.num_indirect_probes = NonZeroUsize::new(2).expect("non-zero");
        c.max_transmissions = NonZeroU8::new(8).expect("non-zero");
        c.notify_down_members = true;
        c.periodic_gossip = Some(foca::PeriodicParams {
            frequency: self.gossip_every,
            num_members: NonZeroUsize::new(3).expect("non-zero"),
        });
        c.periodic_announce = Some(foca::PeriodicParams {
            frequency: self.announce_every,
            num_members: NonZeroUsize::new(1).expect("non-zero"),
        });
        c.periodic_announce_to_down_members = Some(foca::PeriodicParams {
            frequency: self.announce_every,
            num_members: NonZeroUsize::new(2).expect("non-zero"),
        });
        c
    }
}

/// An opaque timer the shell must hand back through [`Membership::handle_timer`] after the
/// delay that came with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer(foca::Timer<SpeakerId>);

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send this datagram (already authenticated) to this address.
    Send {
        /// Destination.
        to: SocketAddr,
        /// Bytes to send.
        datagram: Vec<u8>,
    },
    /// Call [`Membership::handle_timer`] with `timer` after `delay`.
    After {
        /// Delay.
        delay: Duration,
        /// The timer to hand back.
        timer: Timer,
    },
    /// The set of live nodes may have changed: read [`Membership::live_nodes`].
    MembersChanged,
}

/// Counters of the membership core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipCounters {
    /// Datagrams received (authenticated or not).
    pub received: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams refused by authentication, per reason.
    pub auth_failures: BTreeMap<AuthFailure, u64>,
    /// Authenticated datagrams foca could not use (decode or protocol error).
    pub protocol_errors: u64,
}

impl MembershipCounters {
    /// All authentication failures.
    pub fn auth_failures_total(&self) -> u64 {
        self.auth_failures.values().sum()
    }
}

/// Collects foca's requests as [`Output`]s.
struct Collect<'a> {
    key: &'a GossipKey,
    out: Vec<Output>,
    sent: u64,
}

impl Runtime<SpeakerId> for Collect<'_> {
    fn notify(&mut self, notification: Notification<'_, SpeakerId>) {
        if matches!(
            notification,
            Notification::MemberUp(_)
                | Notification::MemberDown(_)
                | Notification::Rename(..)
                | Notification::Rejoin(_)
                | Notification::Defunct
                | Notification::Idle
        ) && !self.out.contains(&Output::MembersChanged)
        {
            self.out.push(Output::MembersChanged);
        }
    }

    fn send_to(&mut self, to: SpeakerId, data: &[u8]) {
        self.sent += 1;
        self.out.push(Output::Send {
            to: to.addr,
            datagram: auth::seal(self.key, data),
        });
    }

    fn submit_after(&mut self, event: foca::Timer<SpeakerId>, after: Duration) {
        self.out.push(Output::After {
            delay: after,
            timer: Timer(event),
        });
    }
}

type Swim = Foca<SpeakerId, PostcardCodec, StdRng, NoCustomBroadcast>;

/// One speaker's membership state.
pub struct Membership {
    swim: Swim,
    key: GossipKey,
    me: SpeakerId,
    counters: MembershipCounters,
}

impl Membership {
    /// A member that knows nobody yet. `seed` drives foca's random member choice.
    pub fn new(me: SpeakerId, key: GossipKey, config: &MembershipConfig, seed: u64) -> Self {
        let swim = Foca::new(
            me.clone(),
            config.to_foca(),
            StdRng::seed_from_u64(seed),
            PostcardCodec,
        );
        Membership {
            swim,
            key,
            me,
            counters: MembershipCounters::default(),
        }
    }

    fn collect(&mut self, f: impl FnOnce(&mut Swim, &mut Collect<'_>) -> bool) -> Vec<Output> {
        let mut rt = Collect {
            key: &self.key,
            out: Vec::new(),
            sent: 0,
        };
        if !f(&mut self.swim, &mut rt) {
            self.counters.protocol_errors += 1;
        }
        self.counters.sent += rt.sent;
        rt.out
    }

    /// Announces this member to `peers` (node name and gossip address, from the speaker Pods).
    /// Peers equal to this member's address are skipped.
    pub fn join(&mut self, peers: &[(String, SocketAddr)]) -> Vec<Output> {
        let me = self.me.addr;
        let targets: Vec<SpeakerId> = peers
            .iter()
            .filter(|(_, a)| *a != me)
            .map(|(node, addr)| SpeakerId {
                node: node.clone(),
                addr: *addr,
                generation: 0,
            })
            .collect();
        self.collect(|swim, rt| {
            targets
                .into_iter()
                .all(|t| swim.announce(t, &mut *rt).is_ok())
        })
    }

    /// Handles one received datagram; unauthenticated ones are counted and ignored.
    pub fn handle_datagram(&mut self, datagram: &[u8]) -> Vec<Output> {
        self.counters.received += 1;
        let payload = match auth::open(&self.key, datagram) {
            Ok(p) => p.to_vec(),
            Err(why) => {
                *self.counters.auth_failures.entry(why).or_default() += 1;
                return Vec::new();
            }
        };
        self.collect(|swim, rt| swim.handle_data(&payload, &mut *rt).is_ok())
    }

    /// Handles a timer that came due.
    pub fn handle_timer(&mut self, timer: Timer) -> Vec<Output> {
        self.collect(|swim, rt| swim.handle_timer(timer.0, &mut *rt).is_ok())
    }

    /// Nodes with a live speaker as this member sees them, itself included.
    pub fn live_nodes(&self) -> BTreeSet<String> {
        self.swim
            .iter_members()
            .map(|m| m.id().node.clone())
            .chain(std::iter::once(self.me.node.clone()))
            .collect()
    }

    /// This member's identity.
    pub fn me(&self) -> &SpeakerId {
        &self.me
    }

    /// The counters.
    pub fn counters(&self) -> &MembershipCounters {
        &self.counters
    }
}
