//! SWIM membership core: the `foca` state machine behind an authenticated datagram layer,
//! bounded joins, and per-member states. Pure: no I/O, no clock (timers are outputs, the wall
//! clock comes in through [`Membership::set_time`], randomness comes from a seed).
//!
//! Every datagram leaves through [`auth::seal_on`] and enters through [`auth::open_any`] and
//! [`auth::ReplayGuard`]; foca never sees bytes that fail authentication or that it saw
//! before, so neither a forged nor a replayed message can change membership. Failures are
//! counted per [`AuthFailure`]. Keys rotate with [`Membership::set_keys`].
//!
//! # Joining
//! [`Membership::join`] is given every speaker of the cluster, again and again (the shell
//! passes on every change of the speaker Pods). It runs a join round at once unless one ran
//! less than a join period ([`MembershipConfig::announce_every`]) ago; then rounds follow by
//! themselves, one per period, with the latest seeds. A round announces to at most
//! [`JOIN_FANOUT`] seeds, picked at random among those that are not live members, and sends
//! nothing when none is missing. So:
//! - a member that starts alone announces at once, and once per period until it is in;
//! - a converged member sends nothing, however often it is given the same seeds;
//! - the cluster costs at most `JOIN_FANOUT` announces per member and period, instead of one
//!   per seed: a speaker Pod whose daemon does not answer receives about
//!   `members / announce_every` announces per second, never `members²`.
//!
//! Partitions heal through foca's periodic announces (to one live member and to two members
//! it holds down, every `announce_every`) and through the join rounds, which keep announcing to
//! seeds that are not live.
//!
//! # States
//! See [`super::states`]: [`Membership::set_local_state`] publishes, [`Membership::states`]
//! reads what the live members published.

use super::auth::{self, AuthFailure, Channel, KeyRing, Keys, ReplayGuard, Sealer};
use super::states::{MAX_NODE_LEN, MAX_STATE_LEN, SharedTable, StateHandler, StateItem};
use foca::{Codec, Foca, Message, Notification, PostcardCodec, Runtime};
use rand::rngs::StdRng;
use rand::seq::IteratorRandom;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

/// Most seeds one join round announces to.
pub const JOIN_FANOUT: usize = 3;

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
    /// How often to announce to a known member (heals partitions, finds returning members);
    /// also the join period (one round of at most [`JOIN_FANOUT`] announces to missing seeds)
    /// and how often a member pushes its state to one random member.
    pub announce_every: Duration,
    /// How long a member declared down is remembered (so that its old messages do not bring it
    /// back, and so that it is announced to, which heals a partition). foca's default is a
    /// day, which kept a record and a timer per death for a day; a speaker that comes back
    /// later than this is found again through the seeds, which the shell joins every
    /// `announce_every`.
    pub remove_down_after: Duration,
}

impl Default for MembershipConfig {
    /// Tuned for a LAN and a failover goal of 300 ms at the median and 500 ms at most: a dead
    /// speaker is probed within about one period, suspected at the end of the next, and
    /// declared down `suspect_to_down_after` later. Measured in the lab (`cargo bench -p
    /// ferrolb-speaker --bench l2_failover`, which also checks that busy cores and 10 % packet
    /// loss on the owner cause no false failover). Periodic gossip runs only while updates are
    /// pending, so its period costs nothing while nothing changes.
    fn default() -> Self {
        MembershipConfig {
            probe_period: Duration::from_millis(80),
            probe_rtt: Duration::from_millis(30),
            suspect_to_down_after: Duration::from_millis(150),
            gossip_every: Duration::from_millis(100),
            announce_every: Duration::from_secs(5),
            remove_down_after: Duration::from_secs(10 * 60),
        }
    }
}

/// Members asked to probe a member that did not answer directly. Five, not two: with 1 % of
/// datagrams lost, a direct probe fails about 2 % of the time and an indirect one (four
/// datagrams) about 4 %; with two helpers 1,000 members falsely suspected about 24 of each other a
/// minute (the simulation counted 21 declared dead in 60 s), too many to refute within the
/// 150 ms suspicion. With five, 0 in the same simulation. Costs datagrams only when a direct
/// probe fails; a small cluster asks as many as it has.
pub const INDIRECT_PROBES: usize = 5;

/// How long a confirmed suspicion waits before its member is declared down: none. A member's
/// probe that fails (direct and through [`INDIRECT_PROBES`] helpers) while another member's
/// suspicion of the same member is already known is a second, independent failure; the suspect
/// then had that other suspicion's time, from its start, to refute (Lifeguard's
/// confirmations, simplest form: one confirmation suffices). Only the first prober waits the
/// whole [`suspicion_for`]. In the simulation (`gossip_sim`, 1,000 members, 1 % loss, 120 s,
/// 20 kills) every member knew of a death after a median of 0.47 s without confirmations and
/// 0.39 s with them (each member: 0.39 and 0.31 s); no live member was declared down, there or
/// at 5 % loss. See [`Membership::handle_timer`].
pub const CONFIRMED_SUSPICION: Duration = Duration::ZERO;

/// How many times a member gossips news at once within one gossip period
/// ([`Membership::after_input`]): two, so that a death goes out the moment it is declared
/// although its suspicion went out a probe round or two before. With one, the death waited for
/// the next gossip round at every member that had just passed the suspicion on (100 members in
/// the simulation: the median member heard of a death about 60 ms after the first declaration,
/// instead of about 1.5 ms).
pub const PUSHES_PER_PERIOD: usize = 2;

/// How long a member may stay suspect in this member's view, on another member's suspicion,
/// before this member asks it directly: this many times [`suspicion_for`]. Past that the
/// suspicion has ended everywhere else (the prober declared the member down, or the member
/// refuted) and this member missed how: at 1,000 members and 5 % loss (`gossip_sim`, seed 3, 40
/// kills) one member got none of the roughly 11,000 datagrams that carried one death and held
/// its suspicion for 34 s, until its own probe rounds reached the dead member.
pub const STALE_SUSPICION_FACTOR: u32 = 4;

/// How many times a member asks a member whose suspicion went stale ([`STALE_SUSPICION_FACTOR`])
/// before it declares it down itself: one ask per probe period, an announce whose reply (the
/// suspect's feed) carries the suspect's incarnation, so a refutation this member missed ends
/// the suspicion. A suspect that never refuted was declared down by its prober already.
pub const STALE_ASKS: u8 = 3;

/// How often a member looks for stale suspicions: at a probe round at least this long after
/// the last look (no wake-up of its own; a look is one pass over foca's members).
const STALE_SCAN_EVERY_MS: u64 = 250;

/// Most down timers of this member's own failed probes remembered at once (one per probe
/// round at most, each for one suspicion: about four with the default timing).
const OWN_SUSPICIONS_MAX: usize = 64;

/// How many times each update is passed on, for `members` live members: 4 × ⌈log10(n + 1)⌉, at
/// least 8 (memberlist's rule, with foca's small-cluster floor). With 8 at 1,000 members, a death
/// reached every member but one in the simulation, and that one learned only when it probed the
/// dead member itself (60 s later); 16 makes missing all of them about e⁻¹⁶ per member.
pub fn transmissions_for(members: usize) -> u8 {
    let digits = (members as f64 + 1.0).log10().ceil() as u32;
    (4 * digits).clamp(8, 24) as u8
}

/// Probe periods of suspicion per decade of members ([`suspicion_for`]). One keeps the
/// configured 150 ms up to 74 members with the default 80 ms probe period (log10(74) × 80 ms =
/// 149.5 ms), so the small clusters' failover measured by the `l2_failover` bench is unchanged.
pub const SUSPICION_PER_DECADE: f64 = 1.0;

/// How long a suspect may refute before it is declared down, for `members` live members: the
/// configured `suspect_to_down_after`, or [`SUSPICION_PER_DECADE`] × log10(n) probe periods
/// when that is longer (memberlist's rule, with the configured value as the floor), rounded up
/// to 10 ms so that foca is reconfigured only every few members. With the default timing: 150 ms
/// up to 74 members, 160 ms at 75 to 100, 240 ms at 1,000, 300 ms at 5,000, 320 ms at 10,000.
///
/// Why it grows: only the member whose probe failed runs the timer at first; the suspect
/// learns of its suspicion through gossip and its refutation travels back the same way, which
/// takes longer the more members there are. In the simulation (`gossip_sim`, 1,000 members,
/// 5 % of datagrams lost, 120 s) with news gossiped at once ([`Membership`]'s `after_input`),
/// 150 ms let live members be declared down 1,354 times (34 members); 240 ms, not once. (When
/// news waited for the gossip rounds, three probe periods per decade were needed: 720 ms at
/// 1,000 members, and every member knew of a death after 1.14 s instead of 0.47 s now.)
pub fn suspicion_for(members: usize, config: &MembershipConfig) -> Duration {
    let decades = (members.max(1) as f64).log10();
    let period_ms = config.probe_period.as_micros() as f64 / 1_000.0;
    let scaled_ms = SUSPICION_PER_DECADE * decades * period_ms;
    // Whole 10 ms steps, up; the tolerance keeps 240.000…1 ms (log10 of a power of ten is not
    // always exact) at 240.
    let steps = (scaled_ms / 10.0 - 1e-6).ceil().max(0.0) as u64;
    config
        .suspect_to_down_after
        .max(Duration::from_millis(steps * 10))
}

/// Whether a gossip period has passed from `last_ms` to `now_ms` (wall clock, ms). A clock
/// stepped back before `last_ms` counts as a period over: otherwise news would wait for the
/// clock to catch up (an hour, after a step back of an hour) instead of going out at once.
fn period_over(last_ms: u64, now_ms: u64, period_ms: u64) -> bool {
    now_ms < last_ms || now_ms - last_ms >= period_ms
}

impl MembershipConfig {
    fn to_foca(&self, members: usize) -> foca::Config {
        let mut c = foca::Config::simple();
        c.probe_period = self.probe_period;
        c.probe_rtt = self.probe_rtt;
        c.suspect_to_down_after = suspicion_for(members, self);
        c.remove_down_after = self.remove_down_after;
        c.num_indirect_probes = NonZeroUsize::new(INDIRECT_PROBES).expect("non-zero");
        c.max_transmissions =
            NonZeroU8::new(transmissions_for(members)).expect("at least 8, never zero");
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
pub struct Timer(TimerKind);

#[derive(Clone, Debug, PartialEq, Eq)]
enum TimerKind {
    /// One of foca's.
    Swim(foca::Timer<SpeakerId>),
    /// The join period is over: announce to missing seeds again if there are any.
    Join,
    /// Push this member's state to one random member.
    StateRefresh,
}

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
    /// A timer handed out earlier is no longer needed: the shell may drop it, and save the
    /// wake-up. Handed back anyway, it does nothing.
    Cancel {
        /// The timer, as it came with [`Output::After`].
        timer: Timer,
    },
    /// The set of live nodes may have changed: read [`Membership::live_nodes`].
    MembersChanged,
    /// The states of live members may have changed: read [`Membership::states`].
    StatesChanged,
}

/// Why [`Membership::set_local_state`] refused a state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Larger than [`MAX_STATE_LEN`].
    #[error(
        "a member state holds at most {max} bytes, this one {len}; publish a smaller value \
         (the previous state stays published)"
    )]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// [`MAX_STATE_LEN`].
        max: usize,
    },
    /// This member's node name cannot travel in a state item (1 to 253 bytes).
    #[error("the node name is {len} bytes long; a member state needs a name of 1 to 253 bytes")]
    NodeName {
        /// Length of the node name.
        len: usize,
    },
}

/// A member held suspect on another member's word ([`Membership::stale_suspicions`]).
#[derive(Clone, Debug)]
struct Stale {
    id: SpeakerId,
    incarnation: foca::Incarnation,
    /// Asks sent so far.
    asks: u8,
    /// Wall clock ms: when this member first saw it suspect at `incarnation` before the first
    /// ask, when it last asked after.
    at_ms: u64,
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
    /// Authenticated datagrams that could not be used (decode or protocol error).
    pub protocol_errors: u64,
    /// Datagrams accepted with the previous key of a rotation (their senders still send
    /// with it; the previous key can go once this stops growing everywhere).
    pub previous_key: u64,
    /// Version-1 datagrams accepted (from speakers of the version before: no replay check).
    pub v1_datagrams: u64,
    /// Members this member saw go from live to down.
    pub declared_down: u64,
    /// Failed probes of a member already suspected by another member: its down timer was
    /// shortened to [`CONFIRMED_SUSPICION`] (it may still refute before that fires).
    pub confirmed_suspicions: u64,
    /// Suspicions held on another member's word that went stale and were asked about
    /// ([`STALE_SUSPICION_FACTOR`]): one per suspect, however many asks it took.
    pub stale_suspicions: u64,
    /// Of those, suspects declared down by this member after [`STALE_ASKS`] unanswered asks.
    pub stale_declared_down: u64,
    /// Times this member learnt it had been declared down while alive (a false positive, or a
    /// partition) and rejoined with the next generation.
    pub rejoined: u64,
}

impl MembershipCounters {
    /// All authentication failures.
    pub fn auth_failures_total(&self) -> u64 {
        self.auth_failures.values().sum()
    }
}

/// Collects foca's requests as [`Output`]s, and what the core must react to.
struct Collect<'a> {
    keys: &'a Keys,
    sealer: &'a mut Sealer,
    now_ms: u64,
    v1_members: &'a HashSet<SocketAddr>,
    table: &'a SharedTable,
    out: Vec<Output>,
    sent: u64,
    declared_down: u64,
    /// Members that came up (or replaced their former self): they need our state. Only
    /// collected when we have one.
    came_up: Option<Vec<SpeakerId>>,
    rejoined: bool,
    states_changed: bool,
}

impl Collect<'_> {
    fn members_changed(&mut self) {
        if !self.out.contains(&Output::MembersChanged) {
            self.out.push(Output::MembersChanged);
        }
    }

    /// A state of `node` may have been shown or hidden.
    fn liveness_of(&mut self, node: &str) {
        if !self.states_changed && self.table.with(|t| t.get(node).is_some()) {
            self.states_changed = true;
        }
    }
}

impl Runtime<SpeakerId> for Collect<'_> {
    fn notify(&mut self, notification: Notification<'_, SpeakerId>) {
        match notification {
            Notification::MemberUp(id) => {
                if let Some(c) = &mut self.came_up {
                    c.push(id.clone());
                }
                self.liveness_of(&id.node);
                self.members_changed();
            }
            Notification::MemberDown(id) => {
                self.declared_down += 1;
                self.liveness_of(&id.node);
                self.members_changed();
            }
            Notification::Rename(_, new) => {
                if let Some(c) = &mut self.came_up {
                    c.push(new.clone());
                }
                self.liveness_of(&new.node);
                self.members_changed();
            }
            Notification::Rejoin(_) => {
                self.rejoined = true;
                self.members_changed();
            }
            Notification::Defunct | Notification::Idle => self.members_changed(),
            Notification::Active => {}
        }
    }

    fn send_to(&mut self, to: SpeakerId, data: &[u8]) {
        self.sent += 1;
        self.out.push(Output::Send {
            to: to.addr,
            datagram: if self.v1_members.contains(&to.addr) {
                auth::seal_v1(self.keys.sending(self.now_ms), Channel::Swim, data)
            } else {
                auth::seal_on(
                    self.keys.sending(self.now_ms),
                    Channel::Swim,
                    self.sealer.stamp(self.now_ms),
                    data,
                )
            },
        });
    }

    fn submit_after(&mut self, event: foca::Timer<SpeakerId>, after: Duration) {
        self.out.push(Output::After {
            delay: after,
            timer: Timer(TimerKind::Swim(event)),
        });
    }
}

type Swim = Foca<SpeakerId, PostcardCodec, StdRng, StateHandler>;

/// One speaker's membership state.
pub struct Membership {
    swim: Swim,
    keys: Keys,
    sealer: Sealer,
    replay: ReplayGuard,
    /// The wall clock, Unix milliseconds, as last given to [`Membership::set_time`].
    now_ms: u64,
    /// Addresses whose last datagram was version 1 (a speaker of the version before, during a
    /// rolling update): they are answered in version 1. At most one per member.
    v1_members: HashSet<SocketAddr>,
    counters: MembershipCounters,
    /// Picks join targets and state refresh targets (foca has its own).
    rng: StdRng,
    /// Join rounds and state refreshes.
    period: Duration,
    /// The latest seeds given to [`Membership::join`].
    seeds: Vec<(String, SocketAddr)>,
    /// A join round ran less than one period ago.
    join_waiting: bool,
    /// The configuration, and the retransmission count and suspicion foca has now (they grow
    /// with the cluster: [`transmissions_for`], [`suspicion_for`]).
    config: MembershipConfig,
    transmissions: u8,
    suspicion: Duration,
    /// The newest state of every node, shared with foca's broadcast handler.
    table: SharedTable,
    /// What this member publishes, and its version (0: never published).
    local_state: Vec<u8>,
    local_version: u64,
    /// A state refresh is scheduled (from the first publication on).
    refresh_waiting: bool,
    /// foca's periodic gossip timer, held back while foca has nothing to gossip (see
    /// [`Membership::quiet_timers`]).
    parked_gossip: Option<foca::Timer<SpeakerId>>,
    /// The indirect-probe deadline of the probe under way, until its member acks.
    indirect_deadline: Option<foca::Timer<SpeakerId>>,
    /// An indirect-probe deadline handled when the ack came: ignored when it comes due.
    indirect_handled: Option<foca::Timer<SpeakerId>>,
    /// The member of the probe under way while that probe may still fail: set when foca
    /// starts it (its `SendIndirectProbe`), cleared by the member's direct ack.
    probed: Option<SpeakerId>,
    /// The down timers of this member's own failed probes, until they come due: a member
    /// suspected by us alone is not confirmed by our next probe of it (a small cluster may
    /// probe the same member twice in a row).
    own_suspicions: Vec<foca::Timer<SpeakerId>>,
    /// Members held suspect on another member's word, with when this member first saw them so.
    stale: Vec<Stale>,
    /// When this member last looked for stale suspicions, wall clock ms.
    stale_scan_ms: Option<u64>,
    /// When news was last gossiped at once ([`Membership::after_input`]), wall clock ms: at
    /// most [`PUSHES_PER_PERIOD`], the latest last.
    pushes_ms: Vec<u64>,
}

impl Membership {
    /// A member that knows nobody yet. `seed` drives the random choices (foca's and the
    /// core's).
    pub fn new(
        me: SpeakerId,
        keys: impl Into<KeyRing>,
        config: &MembershipConfig,
        seed: u64,
    ) -> Self {
        let table = SharedTable::default();
        // A boot id per start, so that a restarted member's datagrams (numbered from 1
        // again) are not taken for replays.
        let boot = StdRng::seed_from_u64(seed ^ 0x626f_6f74_5f69_6400).next_u64();
        let swim = Foca::with_custom_broadcast(
            me,
            config.to_foca(1),
            StdRng::seed_from_u64(seed),
            PostcardCodec,
            StateHandler(table.clone()),
        );
        Membership {
            swim,
            keys: Keys::new(keys.into()),
            sealer: Sealer::new(boot),
            replay: ReplayGuard::default(),
            now_ms: 0,
            v1_members: HashSet::new(),
            counters: MembershipCounters::default(),
            rng: StdRng::seed_from_u64(seed ^ 0x6a6f_696e_5f72_6e67),
            period: config.announce_every,
            seeds: Vec::new(),
            join_waiting: false,
            config: config.clone(),
            transmissions: transmissions_for(1),
            suspicion: suspicion_for(1, config),
            table,
            local_state: Vec::new(),
            local_version: 0,
            refresh_waiting: false,
            parked_gossip: None,
            indirect_deadline: None,
            indirect_handled: None,
            probed: None,
            own_suspicions: Vec::new(),
            stale: Vec::new(),
            stale_scan_ms: None,
            pushes_ms: Vec::with_capacity(PUSHES_PER_PERIOD),
        }
    }

    /// Runs `f` on foca and collects what it asks for; news goes out at once and the timers
    /// that would wake the shell for nothing are held back ([`Membership::after_input`]).
    fn collect(&mut self, f: impl FnOnce(&mut Swim, &mut Collect<'_>) -> bool) -> Vec<Output> {
        let before = self.backlog();
        let mut out = self.collect_once(f);
        self.after_input(before, &mut out);
        out
    }

    /// Updates and states foca has yet to pass on.
    fn backlog(&self) -> usize {
        self.swim.updates_backlog() + self.swim.custom_broadcast_backlog()
    }

    /// After an input that left `before` updates waiting before it: when it brought news (a
    /// member up, suspected, down or refuting; a state), gossips it at once to
    /// [`INDIRECT_PROBES`] random members instead of waiting for the next gossip round or
    /// probe. Each member does the same when the news reaches it, so a death crosses 1,000
    /// members in a few network hops (`gossip_sim`) rather than a few gossip periods; the
    /// periodic rounds then pass it on until it has been sent often enough. Then
    /// [`Membership::quiet_timers`].
    ///
    /// News is a longer backlog or a change of the members: a member's newer update replaces
    /// its older one in foca's backlog, so a death whose suspicion is still being passed on
    /// leaves the backlog as long as it was. A refutation that replaces a suspicion still
    /// waiting is neither: past the refuting member it travels with the periodic rounds.
    ///
    /// At most [`PUSHES_PER_PERIOD`] such pushes per gossip period: when a whole cluster
    /// starts at once every datagram brings news (a member learns of hundreds of others), and
    /// the periodic rounds carry that as well.
    fn after_input(&mut self, before: usize, out: &mut Vec<Output>) {
        let period_ms = self.config.gossip_every.as_millis() as u64;
        let now_ms = self.now_ms;
        self.pushes_ms
            .retain(|t| !period_over(*t, now_ms, period_ms));
        let news =
            self.backlog() > before || out.iter().any(|o| matches!(o, Output::MembersChanged));
        if news && self.swim.num_members() > 0 && self.pushes_ms.len() < PUSHES_PER_PERIOD {
            self.pushes_ms.push(now_ms);
            let mut more = self.collect_once(|swim, rt| swim.gossip(&mut *rt).is_ok());
            out.append(&mut more);
        }
        self.quiet_timers(out);
    }

    /// Two of foca's timers wake an idle member for nothing, about a quarter of its wake-ups
    /// with three members: its periodic gossip (every [`MembershipConfig::gossip_every`]) with
    /// no update to send, and the indirect-probe deadline of a probe whose member has already
    /// acked. So:
    /// - a periodic gossip timer set while foca has no update or state to send is held here
    ///   instead of going to the shell, and set again (one period) as soon as something is
    ///   waiting (which [`Membership::after_input`] has already sent once);
    /// - when the probed member's ack comes, the deadline is handled at once (foca then only
    ///   notes that the probe got that far) and [`Output::Cancel`]led; should it still come
    ///   due, it is ignored. Which ack: any from the probed member after the ping (a late ack
    ///   of an earlier probe of it would start the indirect probes early, not skip them).
    fn quiet_timers(&mut self, out: &mut Vec<Output>) {
        let mut i = 0;
        while i < out.len() {
            match &out[i] {
                Output::After {
                    timer: Timer(TimerKind::Swim(t @ foca::Timer::PeriodicGossip(_))),
                    ..
                } if self.backlog() == 0 => {
                    self.parked_gossip = Some(t.clone());
                    out.remove(i);
                    continue;
                }
                Output::After {
                    timer: Timer(TimerKind::Swim(t @ foca::Timer::SendIndirectProbe { .. })),
                    ..
                } => {
                    // A new probe: the earlier deadline came due before it did.
                    if let foca::Timer::SendIndirectProbe { probed_id, .. } = t {
                        self.probed = Some(probed_id.clone());
                    }
                    self.indirect_deadline = Some(t.clone());
                    self.indirect_handled = None;
                }
                _ => {}
            }
            i += 1;
        }
        if self.backlog() > 0
            && let Some(t) = self.parked_gossip.take()
        {
            out.push(Output::After {
                delay: self.config.gossip_every,
                timer: Timer(TimerKind::Swim(t)),
            });
        }
    }

    /// After foca took `payload`: if it is an ack from the member being probed, handles the
    /// probe's indirect deadline now ([`Membership::quiet_timers`]).
    fn ack_ends_probe(&mut self, payload: &[u8], out: &mut Vec<Output>) {
        let Some(foca::Timer::SendIndirectProbe { probed_id, .. }) = &self.indirect_deadline else {
            return;
        };
        let Ok(header) = Codec::<SpeakerId>::decode_header(&mut PostcardCodec, payload) else {
            return;
        };
        if !matches!(header.message, Message::Ack(_)) || header.src != *probed_id {
            return;
        }
        let Some(t) = self.indirect_deadline.take() else {
            return;
        };
        // This probe cannot fail any more: no suspicion to confirm when it ends.
        self.probed = None;
        self.indirect_handled = Some(t.clone());
        out.push(Output::Cancel {
            timer: Timer(TimerKind::Swim(t.clone())),
        });
        let mut more = self.collect(|swim, rt| swim.handle_timer(t, &mut *rt).is_ok());
        out.append(&mut more);
    }

    fn collect_once(&mut self, f: impl FnOnce(&mut Swim, &mut Collect<'_>) -> bool) -> Vec<Output> {
        let mut rt = Collect {
            keys: &self.keys,
            sealer: &mut self.sealer,
            now_ms: self.now_ms,
            v1_members: &self.v1_members,
            table: &self.table,
            out: Vec::new(),
            sent: 0,
            declared_down: 0,
            came_up: (!self.local_state.is_empty()).then(Vec::new),
            rejoined: false,
            states_changed: false,
        };
        if !f(&mut self.swim, &mut rt) {
            self.counters.protocol_errors += 1;
        }
        let Collect {
            mut out,
            sent,
            declared_down,
            came_up,
            rejoined,
            states_changed,
            ..
        } = rt;
        self.counters.sent += sent;
        self.counters.declared_down += declared_down;
        // Read before `publish`, which clears the flag for our own record.
        let table_changed = self.table.with(|t| t.take_changed());
        if rejoined {
            // Our generation changed: what we published under the former one is hidden now.
            self.counters.rejoined += 1;
            self.publish();
        }
        if let Some(came_up) = came_up.filter(|c| !c.is_empty()) {
            for id in came_up {
                self.counters.sent += 1;
                out.push(Output::Send {
                    to: id.addr,
                    datagram: self.state_datagram(id.addr),
                });
            }
        }
        if (table_changed || states_changed) && !out.contains(&Output::StatesChanged) {
            out.push(Output::StatesChanged);
        }
        if out.contains(&Output::MembersChanged) {
            let members = self.swim.num_members() + 1;
            let wanted = (
                transmissions_for(members),
                suspicion_for(members, &self.config),
            );
            if wanted != (self.transmissions, self.suspicion)
                && self.swim.set_config(self.config.to_foca(members)).is_ok()
            {
                (self.transmissions, self.suspicion) = wanted;
            }
        }
        if !self.v1_members.is_empty() && out.contains(&Output::MembersChanged) {
            // Bounded by the live members; one that speaks again is marked again.
            let live: HashSet<SocketAddr> = self.swim.iter_members().map(|m| m.id().addr).collect();
            self.v1_members.retain(|a| live.contains(a));
        }
        out
    }

    /// Gives this member the seeds (node name and gossip address, from the speaker Pods); an
    /// entry with this member's own address is skipped. See the module documentation: at most
    /// [`JOIN_FANOUT`] announces, only to seeds that are not live members, at most once per
    /// join period; the same seeds again cost nothing.
    pub fn join(&mut self, peers: &[(String, SocketAddr)]) -> Vec<Output> {
        if self.seeds != peers {
            self.seeds = peers.to_vec();
        }
        if self.join_waiting {
            return Vec::new();
        }
        self.join_round()
    }

    /// Announces to up to [`JOIN_FANOUT`] random seeds that are not live, then waits a period.
    /// Costs one pass over the seeds, and no datagram when none is missing.
    fn join_round(&mut self) -> Vec<Output> {
        let me = self.swim.identity().addr;
        if self.seeds.iter().all(|(_, a)| *a == me) {
            // No seed but ourselves: nothing to check until `join` brings some.
            return Vec::new();
        }
        let live: HashSet<SocketAddr> = self.swim.iter_members().map(|m| m.id().addr).collect();
        let targets: Vec<SpeakerId> = self
            .seeds
            .iter()
            .filter(|(_, a)| *a != me && !live.contains(a))
            .choose_multiple(&mut self.rng, JOIN_FANOUT)
            .into_iter()
            .map(|(node, addr)| SpeakerId {
                node: node.clone(),
                addr: *addr,
                generation: 0,
            })
            .collect();
        let mut out = if targets.is_empty() {
            Vec::new()
        } else {
            self.collect(|swim, rt| {
                targets
                    .into_iter()
                    .all(|t| swim.announce(t, &mut *rt).is_ok())
            })
        };
        // The next round checks again in one period, missing seeds or not: a member that goes
        // down later makes its seed missing without any new seed list.
        self.join_waiting = true;
        out.push(Output::After {
            delay: self.period,
            timer: Timer(TimerKind::Join),
        });
        out
    }

    /// Takes `members` as live without a word to them, as a simulation that starts from a
    /// converged cluster does ([`super::sim::Cluster::start_converged`]). Crate-private: a
    /// speaker learns members from the network only.
    pub(crate) fn assume_live(&mut self, members: Vec<SpeakerId>) -> Vec<Output> {
        self.collect(|swim, rt| {
            swim.apply_many(
                members.into_iter().map(foca::Member::alive),
                false,
                &mut *rt,
            )
            .is_ok()
        })
    }

    /// Publishes `state` (opaque, at most [`MAX_STATE_LEN`] bytes) to every member, replacing
    /// what this member published before; an empty state withdraws it. The same state again
    /// costs nothing.
    pub fn set_local_state(&mut self, state: Vec<u8>) -> Result<Vec<Output>, StateError> {
        if state.len() > MAX_STATE_LEN {
            return Err(StateError::TooLarge {
                len: state.len(),
                max: MAX_STATE_LEN,
            });
        }
        let node = &self.swim.identity().node;
        if !node_fits(node) {
            return Err(StateError::NodeName { len: node.len() });
        }
        if state == self.local_state {
            return Ok(Vec::new());
        }
        self.local_state = state;
        self.local_version += 1;
        let before = self.backlog();
        self.publish();
        let mut out = vec![Output::StatesChanged];
        self.after_input(before, &mut out);
        if !self.refresh_waiting {
            self.refresh_waiting = true;
            out.push(Output::After {
                delay: self.period,
                timer: Timer(TimerKind::StateRefresh),
            });
        }
        Ok(out)
    }

    fn local_item(&self) -> StateItem {
        let me = self.swim.identity();
        StateItem {
            node: me.node.clone(),
            generation: me.generation,
            version: self.local_version,
            state: self.local_state.clone(),
        }
    }

    /// Our state, sealed for `to` (in version 1 when `to` speaks only that).
    fn state_datagram(&mut self, to: SocketAddr) -> Vec<u8> {
        let key = self.keys.sending(self.now_ms);
        let item = self.local_item().encode();
        if self.v1_members.contains(&to) {
            return auth::seal_v1(key, Channel::State, &item);
        }
        auth::seal_on(key, Channel::State, self.sealer.stamp(self.now_ms), &item)
    }

    /// The wall clock (Unix milliseconds) the next inputs happen at: it stamps what is sent,
    /// and received datagrams must be within [`auth::MAX_SKEW`] of it.
    pub fn set_time(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// The keys from now on (the gossip Secret changed): both keys of `keys` are accepted at
    /// once, and datagrams are sealed with its send key after [`auth::KEY_SWITCH_DELAY`]
    /// (see [`auth::Keys`]).
    pub fn set_keys(&mut self, keys: KeyRing) {
        self.keys.replace(keys, self.now_ms);
    }

    /// Hands the current local state to foca for dissemination.
    fn publish(&mut self) {
        if self.local_version == 0 || !node_fits(&self.swim.identity().node) {
            return;
        }
        let item = self.local_item().encode();
        if self.swim.add_broadcast(&item).is_err() {
            self.counters.protocol_errors += 1;
        }
        // Our own state is read from `local_state`, not from the table.
        self.table.with(|t| t.take_changed());
    }

    /// Handles one received datagram from an address not known (tests, simulations): as
    /// [`Membership::handle_datagram_from`].
    pub fn handle_datagram(&mut self, datagram: &[u8]) -> Vec<Output> {
        self.handle_datagram_from(SocketAddr::from(([0, 0, 0, 0], 0)), datagram)
    }

    /// Handles one datagram received from `from`; unauthenticated, stale and replayed ones are
    /// counted and ignored. A version-1 datagram (no stamp, so no replay check) is taken during
    /// a rolling update from the version before, and `from` is answered in version 1 until it
    /// sends version 2.
    pub fn handle_datagram_from(&mut self, from: SocketAddr, datagram: &[u8]) -> Vec<Output> {
        self.counters.received += 1;
        let accepted = self.keys.accepted(self.now_ms);
        let opened = auth::open_any(&accepted, datagram).and_then(|o| {
            if let Some(stamp) = o.stamp {
                self.replay.check(self.now_ms, stamp)?;
            }
            Ok(o)
        });
        if let Ok(o) = opened {
            if o.previous_key {
                self.counters.previous_key += 1;
            }
            if o.stamp.is_none() {
                self.counters.v1_datagrams += 1;
                self.v1_members.insert(from);
            } else if !self.v1_members.is_empty() {
                self.v1_members.remove(&from);
            }
        }
        match opened.map(|o| (o.channel, o.payload)) {
            Ok((Channel::Swim, p)) => {
                let payload = p.to_vec();
                let mut out = self.collect(|swim, rt| swim.handle_data(&payload, &mut *rt).is_ok());
                self.ack_ends_probe(&payload, &mut out);
                out
            }
            Ok((Channel::State, p)) => match StateItem::decode(p) {
                Ok(item) if item.node != self.swim.identity().node => {
                    if self.table.with(|t| {
                        let news = t.offer(item);
                        t.take_changed();
                        news
                    }) {
                        vec![Output::StatesChanged]
                    } else {
                        Vec::new()
                    }
                }
                Ok(_) => Vec::new(),
                Err(_) => {
                    self.counters.protocol_errors += 1;
                    Vec::new()
                }
            },
            Err(why) => {
                *self.counters.auth_failures.entry(why).or_default() += 1;
                Vec::new()
            }
        }
    }

    /// Handles a timer that came due.
    ///
    /// # Confirmed suspicions
    /// foca ends a probe at its next probe round: if the member did not answer, directly or
    /// through the helpers, foca suspects it and asks for a down timer of [`suspicion_for`],
    /// even when that member was suspect already. When it was, and the suspicion came from
    /// another member (not from a down timer of ours still running), this failed probe is a
    /// second, independent one: the down timer is given [`CONFIRMED_SUSPICION`] instead.
    ///
    /// Guarantees: only the member whose probe just ended, only when it was suspect before that
    /// probe round, and only at the incarnation it was suspected at (foca declares it down
    /// only if it has not refuted since). Costs one look-up in foca's members per probe round
    /// whose member did not ack directly.
    ///
    /// Caveats: foca does not say who suspected a member, so a suspicion we sent that comes
    /// back through gossip after our own timer fired would count as another's; by then our
    /// timer has declared the member down or seen it refute, so nothing is left to confirm.
    pub fn handle_timer(&mut self, timer: Timer) -> Vec<Output> {
        match timer.0 {
            TimerKind::Swim(t) => {
                if self.indirect_handled.as_ref() == Some(&t) {
                    // Handled when the ack came; the shell did not drop it.
                    self.indirect_handled = None;
                    return Vec::new();
                }
                if self.indirect_deadline.as_ref() == Some(&t) {
                    self.indirect_deadline = None;
                }
                let probe_round = matches!(t, foca::Timer::ProbeRandomMember(_));
                if matches!(t, foca::Timer::ChangeSuspectToDown { .. }) {
                    self.own_suspicions.retain(|s| *s != t);
                }
                let confirmable = if probe_round {
                    self.probed
                        .take()
                        .and_then(|id| self.suspected_by_another(id))
                } else {
                    None
                };
                let mut out = self.collect(|swim, rt| swim.handle_timer(t, &mut *rt).is_ok());
                if probe_round {
                    self.note_suspicions(confirmable, &mut out);
                    self.stale_suspicions(&mut out);
                }
                out
            }
            TimerKind::Join => {
                self.join_waiting = false;
                self.join_round()
            }
            TimerKind::StateRefresh => {
                // Repairs a member that missed every broadcast of the current state (a
                // withdrawal included), one random member per period.
                let mut out = Vec::new();
                if let Some(to) = self
                    .swim
                    .iter_members()
                    .choose(&mut self.rng)
                    .map(|m| m.id().addr)
                {
                    self.counters.sent += 1;
                    out.push(Output::Send {
                        to,
                        datagram: self.state_datagram(to),
                    });
                }
                out.push(Output::After {
                    delay: self.period,
                    timer: Timer(TimerKind::StateRefresh),
                });
                out
            }
        }
    }

    /// Whether a down timer of this member's own failed probe runs for `id`.
    fn suspects_it_itself(&self, id: &SpeakerId) -> bool {
        self.own_suspicions.iter().any(
            |t| matches!(t, foca::Timer::ChangeSuspectToDown { member_id, .. } if member_id == id),
        )
    }

    /// `id` and the incarnation it is suspect at, when it is suspect in this member's view and
    /// no down timer of ours runs for it (so the suspicion is another member's).
    fn suspected_by_another(&self, id: SpeakerId) -> Option<(SpeakerId, foca::Incarnation)> {
        if self.suspects_it_itself(&id) {
            return None;
        }
        let incarnation = self
            .swim
            .iter_membership_state()
            .find(|m| *m.id() == id && m.state() == foca::State::Suspect)?
            .incarnation();
        Some((id, incarnation))
    }

    /// After a probe round: the down timer foca asked for the probe that ended is ours from
    /// now on, and it is shortened to [`CONFIRMED_SUSPICION`] when that probe confirms
    /// `confirmable` (see [`Membership::handle_timer`]).
    fn note_suspicions(
        &mut self,
        confirmable: Option<(SpeakerId, foca::Incarnation)>,
        out: &mut [Output],
    ) {
        for o in out.iter_mut() {
            let Output::After {
                delay,
                timer: Timer(TimerKind::Swim(t)),
            } = o
            else {
                continue;
            };
            let foca::Timer::ChangeSuspectToDown {
                member_id,
                incarnation,
                ..
            } = &*t
            else {
                continue;
            };
            if confirmable
                .as_ref()
                .is_some_and(|(id, inc)| id == member_id && inc == incarnation)
            {
                *delay = CONFIRMED_SUSPICION;
                self.counters.confirmed_suspicions += 1;
            }
            // Each comes due within one suspicion, a few probe rounds; the bound only guards
            // against a shell that drops timers (an entry dropped this late cannot matter).
            if self.own_suspicions.len() >= OWN_SUSPICIONS_MAX {
                self.own_suspicions.remove(0);
            }
            self.own_suspicions.push(t.clone());
        }
    }

    /// A backstop for a death or a refutation this member missed (SWIM has every member that
    /// holds a suspicion time it out; foca times it out at the prober only). At a probe round,
    /// at most every [`STALE_SCAN_EVERY_MS`]: a member held suspect on another's word for
    /// [`STALE_SUSPICION_FACTOR`] suspicions is asked directly (an announce) once per probe
    /// period; its reply carries its incarnation, so a refutation ends the suspicion here. After
    /// [`STALE_ASKS`] asks with the suspicion unchanged, this member declares it down (and
    /// passes that on), as its prober did long before.
    ///
    /// Costs one pass over foca's members per look, and datagrams only for a stale suspicion.
    fn stale_suspicions(&mut self, out: &mut Vec<Output>) {
        let now = self.now_ms;
        // Once asking, every probe round: an ask per probe period.
        let asking = self.stale.iter().any(|s| s.asks > 0);
        if !asking
            && self
                .stale_scan_ms
                .is_some_and(|t| !period_over(t, now, STALE_SCAN_EVERY_MS))
        {
            return;
        }
        self.stale_scan_ms = Some(now);
        let suspects: Vec<(SpeakerId, foca::Incarnation)> = self
            .swim
            .iter_membership_state()
            .filter(|m| m.state() == foca::State::Suspect)
            .map(|m| (m.id().clone(), m.incarnation()))
            .collect();
        // Forget suspicions that ended (or moved to another incarnation: a new one starts).
        self.stale.retain(|s| {
            suspects
                .iter()
                .any(|(id, inc)| *id == s.id && *inc == s.incarnation)
        });
        for (id, incarnation) in suspects {
            if self.suspects_it_itself(&id) || self.stale.iter().any(|s| s.id == id) {
                continue;
            }
            self.stale.push(Stale {
                id,
                incarnation,
                at_ms: now,
                asks: 0,
            });
        }
        let members = self.swim.num_members() + 1;
        let stale_after = suspicion_for(members, &self.config).as_millis() as u64
            * u64::from(STALE_SUSPICION_FACTOR);
        let period = self.config.probe_period.as_millis() as u64;
        let mut i = 0;
        while i < self.stale.len() {
            let s = &self.stale[i];
            let wait = if s.asks == 0 { stale_after } else { period };
            let due = period_over(s.at_ms, now, wait);
            if !due || self.suspects_it_itself(&s.id) {
                i += 1;
                continue;
            }
            if s.asks < STALE_ASKS {
                if s.asks == 0 {
                    self.counters.stale_suspicions += 1;
                }
                let id = s.id.clone();
                let s = &mut self.stale[i];
                s.asks += 1;
                s.at_ms = now;
                let mut more = self.collect(|swim, rt| swim.announce(id, &mut *rt).is_ok());
                out.append(&mut more);
                i += 1;
            } else {
                let s = self.stale.swap_remove(i);
                self.counters.stale_declared_down += 1;
                let down = foca::Member::new(s.id, s.incarnation, foca::State::Down);
                let mut more = self.collect(|swim, rt| {
                    swim.apply_many(std::iter::once(down), true, &mut *rt)
                        .is_ok()
                });
                out.append(&mut more);
            }
        }
    }

    /// Nodes with a live speaker as this member sees them, itself included.
    pub fn live_nodes(&self) -> BTreeSet<String> {
        self.swim
            .iter_members()
            .map(|m| m.id().node.clone())
            .chain(std::iter::once(self.swim.identity().node.clone()))
            .collect()
    }

    /// How many live members this member sees, itself included.
    pub fn live_count(&self) -> usize {
        self.swim.num_members() + 1
    }

    /// Whether this member sees a live speaker on `node` (itself included).
    pub fn is_live(&self, node: &str) -> bool {
        self.swim.identity().node == node || self.swim.iter_members().any(|m| m.id().node == node)
    }

    /// The non-empty states published by live members (this one included), by node. A
    /// state shows only while the member that published it (that very generation) is live.
    pub fn states(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        self.table.with(|t| {
            for m in self.swim.iter_members() {
                let id = m.id();
                if let Some(r) = t.get(&id.node)
                    && r.generation == id.generation
                    && !r.state.is_empty()
                {
                    out.insert(id.node.clone(), r.state.clone());
                }
            }
        });
        if !self.local_state.is_empty() {
            out.insert(self.swim.identity().node.clone(), self.local_state.clone());
        }
        out
    }

    /// This member's identity (its generation grows when it rejoins after being declared
    /// down).
    pub fn me(&self) -> &SpeakerId {
        self.swim.identity()
    }

    /// The counters.
    pub fn counters(&self) -> &MembershipCounters {
        &self.counters
    }
}

/// Whether a node name fits a state item (a Kubernetes node name always does).
fn node_fits(node: &str) -> bool {
    (1..=MAX_NODE_LEN).contains(&node.len())
}

#[cfg(test)]
mod scaling_tests {
    use super::{MembershipConfig, period_over, suspicion_for, transmissions_for};
    use std::time::Duration;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn news_goes_out_at_once_again_after_a_period_or_a_clock_stepped_back() {
        assert!(!period_over(1_000, 1_050, 100), "within the period");
        assert!(period_over(1_000, 1_100, 100), "a period later");
        assert!(period_over(1_000, 400, 100), "the clock stepped back");
    }

    #[test]
    fn three_members_keep_the_150_ms_suspicion() {
        let c = MembershipConfig::default();
        assert_eq!(c.suspect_to_down_after, ms(150));
        assert_eq!(suspicion_for(3, &c), ms(150));
    }

    #[test]
    fn up_to_74_members_the_configured_suspicion_is_kept() {
        let c = MembershipConfig::default();
        for n in 0..=74 {
            assert_eq!(suspicion_for(n, &c), ms(150), "{n} members");
        }
    }

    #[test]
    fn the_suspicion_grows_with_log10_of_the_member_count_in_10_ms_steps() {
        let c = MembershipConfig::default();
        assert_eq!(suspicion_for(74, &c), ms(150));
        assert_eq!(suspicion_for(75, &c), ms(160));
        assert_eq!(suspicion_for(100, &c), ms(160));
        assert_eq!(suspicion_for(1_000, &c), ms(240));
        assert_eq!(suspicion_for(5_000, &c), ms(300));
        assert_eq!(suspicion_for(10_000, &c), ms(320));
        let mut last = Duration::ZERO;
        for n in 1..=20_000 {
            let s = suspicion_for(n, &c);
            assert!(s >= last, "{n} members: {s:?} after {last:?}");
            assert_eq!(s.as_millis() % 10, 0, "{n} members: {s:?}");
            last = s;
        }
    }

    #[test]
    fn a_longer_configured_suspicion_is_never_shortened() {
        let c = MembershipConfig {
            suspect_to_down_after: ms(2_000),
            ..MembershipConfig::default()
        };
        assert_eq!(suspicion_for(3, &c), ms(2_000));
        assert_eq!(suspicion_for(5_000, &c), ms(2_000));
    }

    #[test]
    fn the_suspicion_scales_with_the_probe_period() {
        let c = MembershipConfig {
            probe_period: ms(200),
            probe_rtt: ms(80),
            suspect_to_down_after: ms(250),
            ..MembershipConfig::default()
        };
        assert_eq!(suspicion_for(3, &c), ms(250));
        assert_eq!(suspicion_for(1_000, &c), ms(600));
    }

    #[test]
    fn updates_are_passed_on_more_often_as_the_cluster_grows_from_eight_times_up() {
        assert_eq!(transmissions_for(1), 8);
        assert_eq!(transmissions_for(3), 8);
        assert_eq!(transmissions_for(99), 8);
        assert_eq!(transmissions_for(100), 12);
        assert_eq!(transmissions_for(1_000), 16);
        assert_eq!(transmissions_for(5_000), 16);
        assert_eq!(transmissions_for(10_000_000), 24);
    }
}
