//! Many membership cores on a simulated network: virtual time, one queue of deliveries and
//! timers, a latency drawn per datagram, independent loss, partitions. Pure: no I/O, no clock;
//! the same seed gives the same run.
//!
//! Member `i` is node `node-{i}` at [`Cluster::addr`]`(i)`. Outputs of a core are applied the
//! way the UDP shell applies them: a datagram is delivered after its latency unless lost, a
//! timer fires after its delay, unless its member was killed or restarted meanwhile.

use super::auth::GossipKey;
use super::core::{Membership, MembershipConfig, Output, SpeakerId, Timer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The gossip port of every simulated member.
pub const PORT: u16 = 7946;

/// The simulated network.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Shortest one-way latency of a datagram.
    pub latency_min: Duration,
    /// Longest one-way latency (drawn uniformly in between, per datagram).
    pub latency_max: Duration,
    /// Probability that a datagram is lost, independently of all others.
    pub loss: f64,
    /// Seeds the network's and every member's random choices.
    pub seed: u64,
    /// Timers due after this virtual time are dropped: a run that ends before never needs
    /// them, and foca's removal of down members (24 h after) would pile up otherwise.
    pub horizon: Option<Duration>,
}

impl Default for NetConfig {
    /// A LAN: 0.2 to 1 ms, no loss.
    fn default() -> Self {
        NetConfig {
            latency_min: Duration::from_micros(200),
            latency_max: Duration::from_millis(1),
            loss: 0.0,
            seed: 1,
            horizon: None,
        }
    }
}

/// What a member reported after handling an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// [`Output::MembersChanged`].
    Members,
    /// [`Output::StatesChanged`].
    States,
}

enum Event {
    Deliver {
        from: usize,
        to: usize,
        datagram: Vec<u8>,
    },
    Fire {
        member: usize,
        epoch: u64,
        timer: Timer,
    },
}

/// A queue entry: small, so the heap moves little; the event waits in `Cluster::events`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Scheduled {
    at_us: u64,
    seq: u64,
    event: usize,
}

struct Slot {
    member: Option<Membership>,
    /// Grows on every start and kill, so timers of a former incarnation are dropped.
    epoch: u64,
    bytes_sent: u64,
    datagrams_sent: u64,
    /// Timers the member cancelled that have not come due yet (a handful at most).
    cancelled: Vec<Timer>,
    /// Timers that came due and were handed to the member: a real shell's timer wake-ups.
    timers_fired: u64,
}

/// A cluster of cores on one simulated network.
pub struct Cluster {
    now_us: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    /// Events by index, `None` once taken; `free` lists the indices to reuse.
    events: Vec<Option<Event>>,
    free: Vec<usize>,
    slots: Vec<Slot>,
    net: NetConfig,
    rng: StdRng,
    config: MembershipConfig,
    key: GossipKey,
    /// Partition group per member: datagrams between groups are dropped.
    groups: Option<Vec<u8>>,
    changes: Vec<(usize, Change)>,
    lost: u64,
}

impl Cluster {
    /// `n` members, none started.
    pub fn new(n: usize, config: MembershipConfig, key: GossipKey, net: NetConfig) -> Cluster {
        assert!(n < 1 << 24, "addresses are drawn from 10.0.0.0/8");
        assert!(net.latency_min <= net.latency_max);
        Cluster {
            now_us: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            free: Vec::new(),
            slots: (0..n)
                .map(|_| Slot {
                    member: None,
                    epoch: 0,
                    bytes_sent: 0,
                    datagrams_sent: 0,
                    cancelled: Vec::new(),
                    timers_fired: 0,
                })
                .collect(),
            rng: StdRng::seed_from_u64(net.seed),
            net,
            config,
            key,
            groups: None,
            changes: Vec::new(),
            lost: 0,
        }
    }

    /// The node name of member `i`.
    pub fn name(i: usize) -> String {
        format!("node-{i}")
    }

    /// The gossip address of member `i`: 10.0.0.1 onwards.
    pub fn addr(i: usize) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::from(0x0a00_0001 + i as u32), PORT))
    }

    /// The member at `addr`, if it is one of ours.
    pub fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        let SocketAddr::V4(a) = addr else {
            return None;
        };
        let i = u32::from(*a.ip()).checked_sub(0x0a00_0001)? as usize;
        (a.port() == PORT && i < self.slots.len()).then_some(i)
    }

    /// Every member as a seed (what the speaker gives from its speaker Pods).
    pub fn seeds(&self) -> Vec<(String, SocketAddr)> {
        (0..self.slots.len())
            .map(|i| (Self::name(i), Self::addr(i)))
            .collect()
    }

    /// How many members there are (started or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no members at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now_us)
    }

    /// Starts (or restarts) member `i` with `generation` and joins it with `seeds`.
    pub fn start(&mut self, i: usize, generation: u64, seeds: &[(String, SocketAddr)]) {
        let mut m = self.member_for(i, generation);
        let out = m.join(seeds);
        let slot = &mut self.slots[i];
        slot.member = Some(m);
        slot.epoch += 1;
        slot.cancelled.clear();
        self.apply(i, out);
    }

    /// Starts every member with `generation`, each already holding all others live (as if
    /// the cluster had converged, without the traffic of getting there) and every member as a
    /// seed.
    ///
    /// Each member's timers and first datagrams start at its own offset within one probe
    /// period, drawn from the seed, as speakers started one by one run out of step. (Started
    /// in the same instant, every member's probe round would end in the same microsecond for
    /// the whole run: two members whose probes of a dead member failed together could never
    /// hear of each other's suspicion first, which real speakers do.)
    pub fn start_converged(&mut self, generation: u64) {
        let seeds = self.seeds();
        let ids: Vec<SpeakerId> = (0..self.slots.len())
            .map(|i| SpeakerId {
                node: Self::name(i),
                addr: Self::addr(i),
                generation,
            })
            .collect();
        for i in 0..self.slots.len() {
            let mut m = self.member_for(i, generation);
            let others = ids
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, id)| id.clone())
                .collect();
            let mut out = m.assume_live(others);
            out.extend(m.join(&seeds));
            let slot = &mut self.slots[i];
            slot.member = Some(m);
            slot.epoch += 1;
            slot.cancelled.clear();
            let offset = self
                .rng
                .random_range(0..self.config.probe_period.as_micros().max(1) as u64);
            self.apply_from(i, out, self.now_us + offset);
        }
    }

    fn member_for(&self, i: usize, generation: u64) -> Membership {
        let me = SpeakerId {
            node: Self::name(i),
            addr: Self::addr(i),
            generation,
        };
        let seed =
            self.net.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((i as u64) << 24) ^ generation;
        Membership::new(me, self.key.clone(), &self.config, seed)
    }

    /// Stops member `i` at once, as a SIGKILL would: no goodbye, its timers die with it.
    pub fn kill(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.member = None;
        slot.epoch += 1;
        slot.cancelled.clear();
    }

    /// Member `i`, unless killed or never started.
    pub fn member(&self, i: usize) -> Option<&Membership> {
        self.slots[i].member.as_ref()
    }

    /// Calls `f` on member `i` (when running) and applies the outputs it returns.
    pub fn with_member<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Membership) -> (R, Vec<Output>),
    ) -> Option<R> {
        let (r, out) = f(self.slots[i].member.as_mut()?);
        self.apply(i, out);
        Some(r)
    }

    /// Puts members in groups (`groups[i]` for member `i`): datagrams between groups are lost.
    /// `None` heals the network.
    pub fn partition(&mut self, groups: Option<Vec<u8>>) {
        if let Some(g) = &groups {
            assert_eq!(g.len(), self.slots.len());
        }
        self.groups = groups;
    }

    /// Delivers `datagram` to `to` after `after`, as if it came from outside the cluster.
    pub fn inject(&mut self, to: SocketAddr, datagram: Vec<u8>, after: Duration) {
        if let Some(to) = self.index_of(to) {
            let at = self.now_us + after.as_micros() as u64;
            self.push(
                at,
                Event::Deliver {
                    from: usize::MAX,
                    to,
                    datagram,
                },
            );
        }
    }

    /// Bytes member `i` sent (authenticated datagrams, without UDP/IP headers), over all its
    /// incarnations.
    pub fn bytes_sent(&self, i: usize) -> u64 {
        self.slots[i].bytes_sent
    }

    /// Datagrams member `i` sent, over all its incarnations.
    pub fn datagrams_sent(&self, i: usize) -> u64 {
        self.slots[i].datagrams_sent
    }

    /// Timers member `i` was handed when they came due, over all its incarnations (cancelled
    /// ones are dropped, as a shell drops them): the wake-ups a real shell would have for
    /// timers.
    pub fn timers_fired(&self, i: usize) -> u64 {
        self.slots[i].timers_fired
    }

    /// Datagrams the network lost so far (not counting those to stopped members).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    fn push(&mut self, at_us: u64, event: Event) {
        self.seq += 1;
        let index = match self.free.pop() {
            Some(i) => {
                self.events[i] = Some(event);
                i
            }
            None => {
                self.events.push(Some(event));
                self.events.len() - 1
            }
        };
        self.queue.push(Reverse(Scheduled {
            at_us,
            seq: self.seq,
            event: index,
        }));
    }

    fn latency_us(&mut self) -> u64 {
        let (lo, hi) = (
            self.net.latency_min.as_micros() as u64,
            self.net.latency_max.as_micros() as u64,
        );
        if lo == hi {
            lo
        } else {
            self.rng.random_range(lo..=hi)
        }
    }

    fn apply(&mut self, from: usize, out: Vec<Output>) {
        self.apply_from(from, out, self.now_us);
    }

    /// [`Cluster::apply`] as if the outputs came at `at_us`, not now.
    fn apply_from(&mut self, from: usize, out: Vec<Output>, at_us: u64) {
        for o in out {
            match o {
                Output::Send { to, datagram } => {
                    let slot = &mut self.slots[from];
                    slot.bytes_sent += datagram.len() as u64;
                    slot.datagrams_sent += 1;
                    let Some(to) = self.index_of(to) else {
                        continue;
                    };
                    if self.net.loss > 0.0 && self.rng.random_bool(self.net.loss) {
                        self.lost += 1;
                        continue;
                    }
                    let at = at_us + self.latency_us();
                    self.push(at, Event::Deliver { from, to, datagram });
                }
                Output::After { delay, timer } => {
                    let at = at_us + delay.as_micros() as u64;
                    if self.net.horizon.is_some_and(|h| at > h.as_micros() as u64) {
                        continue;
                    }
                    let epoch = self.slots[from].epoch;
                    self.push(
                        at,
                        Event::Fire {
                            member: from,
                            epoch,
                            timer,
                        },
                    );
                }
                // Dropped when it comes due, as the real shell drops it from its heap.
                Output::Cancel { timer } => self.slots[from].cancelled.push(timer),
                Output::MembersChanged => self.changes.push((from, Change::Members)),
                Output::StatesChanged => self.changes.push((from, Change::States)),
            }
        }
    }

    /// Runs every event due until `until` (virtual time since the start), calling
    /// `on_change(member_index, change, member, now)` for every change a member reports.
    pub fn run_until(
        &mut self,
        until: Duration,
        mut on_change: impl FnMut(usize, Change, &Membership, Duration),
    ) {
        let until_us = until.as_micros() as u64;
        loop {
            self.report(&mut on_change);
            let due = self
                .queue
                .peek()
                .is_some_and(|Reverse(s)| s.at_us <= until_us);
            if !due {
                break;
            }
            let Some(Reverse(s)) = self.queue.pop() else {
                break;
            };
            self.now_us = s.at_us;
            let Some(event) = self.events[s.event].take() else {
                continue;
            };
            self.free.push(s.event);
            match event {
                Event::Deliver { from, to, datagram } => {
                    if let Some(g) = &self.groups
                        && from != usize::MAX
                        && g[from] != g[to]
                    {
                        self.lost += 1;
                        continue;
                    }
                    if let Some(m) = self.slots[to].member.as_mut() {
                        m.set_time(self.now_us / 1000);
                        let out = if from == usize::MAX {
                            m.handle_datagram(&datagram)
                        } else {
                            m.handle_datagram_from(Self::addr(from), &datagram)
                        };
                        self.apply(to, out);
                    }
                }
                Event::Fire {
                    member,
                    epoch,
                    timer,
                } => {
                    let slot = &mut self.slots[member];
                    if slot.epoch != epoch {
                        continue;
                    }
                    if let Some(k) = slot.cancelled.iter().position(|c| *c == timer) {
                        slot.cancelled.swap_remove(k);
                        continue;
                    }
                    if let Some(m) = slot.member.as_mut() {
                        slot.timers_fired += 1;
                        m.set_time(self.now_us / 1000);
                        let out = m.handle_timer(timer);
                        self.apply(member, out);
                    }
                }
            }
        }
        self.now_us = self.now_us.max(until_us);
    }

    /// [`Cluster::run_until`] `now + d`.
    pub fn run_for(
        &mut self,
        d: Duration,
        on_change: impl FnMut(usize, Change, &Membership, Duration),
    ) {
        self.run_until(self.now() + d, on_change);
    }

    fn report(&mut self, on_change: &mut impl FnMut(usize, Change, &Membership, Duration)) {
        if self.changes.is_empty() {
            return;
        }
        let now = self.now();
        for (i, c) in std::mem::take(&mut self.changes) {
            if let Some(m) = self.slots[i].member.as_ref() {
                on_change(i, c, m, now);
            }
        }
    }
}
