//! The gossip shell: one UDP socket and the membership core, on a thread of its own that
//! blocks in one poll(2) ([`super::wait`]) until a datagram, a nudge from another thread or the
//! next timer.
//!
//! Its own thread because gossip's timers are many and short (a probe every 80 ms, its
//! indirect-probe deadline 30 ms later, gossip rounds): on the speaker's shared runtime each new
//! earliest deadline set by a task on one worker had to wake the other worker parked in the
//! I/O driver (an `eventfd` write and a context switch, about 100 a second with nothing
//! changing: `scripts/wakeups`). Not a runtime of its own either: see [`super::wait`] for what
//! each wake-up cost on one. It also keeps probes and acks on time while a long sync pass (the
//! first list of thousands of Services) holds a worker of the shared runtime.
//!
//! ```text
//!  socket.recv_from ─────┐                       ┌─► socket.send_to
//!  due timers ───────────┤                       ├─► timer heap ─► due timers
//!  watch: seeds ─────────┼─► Membership (core) ──┼─► watch: live nodes
//!  watch: local state ───┤                       ├─► watch: states of live members
//!  watch: keys ──────────┘                       └─► watch: counters
//! ```
//!
//! Seeds, the local state and the keys are watches, not queues: a change nudges the thread,
//! which reads the latest value; a value equal to the current one does not even wake it. The
//! core is given the wall clock before every input.
//!
//! The core's timers wait in one heap on the thread, which sleeps until the earliest: no task
//! or kernel timer per timer. (A task per timer counted every member declared down for a day:
//! foca keeps a down member 24 h by default, and the soak saw the speaker's task count grow by
//! one at every kill or cut-off of another node. The core now forgets a down member after
//! [`MembershipConfig::remove_down_after`].)

use super::auth::KeyRing;
use super::core::{
    Membership, MembershipConfig, MembershipCounters, Output, SpeakerId, StateError, Timer,
};
use super::states::MAX_STATE_LEN;
use crate::wait::{Nudge, wait};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

use crate::watch::send_if_changed;

/// The states of live members, by node.
pub type States = BTreeMap<String, Vec<u8>>;

/// Largest datagram read (foca's packets stay under 1400 bytes plus framing).
const MAX_DATAGRAM: usize = 2048;

/// Errors of the membership shell.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The gossip port could not be bound.
    #[error("cannot bind the gossip socket on {addr} (is the port in use?): {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// The gossip thread or its runtime could not be started.
    #[error("cannot start the gossip thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// A running gossip member. Dropping it stops the task and its thread (peers then declare this
/// node down).
pub struct Gossip {
    live: watch::Receiver<BTreeSet<String>>,
    states: watch::Receiver<States>,
    counters: watch::Receiver<MembershipCounters>,
    rejoined: watch::Receiver<u64>,
    seeds: watch::Sender<Vec<(String, SocketAddr)>>,
    local_state: watch::Sender<Vec<u8>>,
    keys: watch::Sender<KeyRing>,
    /// Wakes the thread: an input changed, or it must stop.
    wake: Arc<Wake>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How other threads wake the gossip thread, and ask it to stop.
struct Wake {
    nudge: Nudge,
    stop: AtomicBool,
}

impl Gossip {
    /// Binds `bind`, joins as `node` reachable at `advertise`, and starts gossiping. The
    /// generation is the start time in milliseconds, so a restart replaces the former self.
    pub async fn start(
        node: String,
        bind: SocketAddr,
        advertise: SocketAddr,
        keys: impl Into<KeyRing>,
        config: MembershipConfig,
    ) -> Result<Gossip, MembershipError> {
        let keys: KeyRing = keys.into();
        let socket = UdpSocket::bind(bind)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|source| MembershipError::Bind { addr: bind, source })?;
        let wake = Arc::new(Wake {
            nudge: Nudge::new().map_err(MembershipError::Thread)?,
            stop: AtomicBool::new(false),
        });
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64);
        let me = SpeakerId {
            node: node.clone(),
            addr: advertise,
            generation,
        };
        let seed = generation ^ super::super::l2::election::score(&node, advertise.ip());
        let core = Membership::new(me, keys.clone(), &config, seed);
        let (live_tx, live) = watch::channel(core.live_nodes());
        let (states_tx, states) = watch::channel(core.states());
        let (counters_tx, counters) = watch::channel(MembershipCounters::default());
        let (rejoined_tx, rejoined) = watch::channel(0u64);
        let (seeds, seeds_rx) = watch::channel(Vec::new());
        let (local_state, local_state_rx) = watch::channel(Vec::new());
        let (keys, keys_rx) = watch::channel(keys);
        let shell = Shell {
            core,
            socket,
            timers: BinaryHeap::new(),
            seq: 0,
            watches: Watches {
                live: live_tx,
                states: states_tx,
                counters: counters_tx,
                rejoined: rejoined_tx,
            },
        };
        let inputs = Inputs {
            seeds: seeds_rx,
            local_state: local_state_rx,
            keys: keys_rx,
        };
        let thread_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("gossip".into())
            .spawn(move || shell.run(inputs, &thread_wake))
            .map_err(MembershipError::Thread)?;
        Ok(Gossip {
            live,
            states,
            counters,
            rejoined,
            seeds,
            local_state,
            keys,
            wake,
            thread: Some(thread),
        })
    }

    /// A watch of the live nodes (this one included).
    pub fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        self.live.clone()
    }

    /// Gives the seeds (node name, gossip address), typically every speaker Pod; call it as
    /// often as convenient. The core announces to a few seeds that are not live members, at
    /// most once per join period ([`Membership::join`]); the same seeds again cost nothing.
    pub fn set_seeds(&self, peers: Vec<(String, SocketAddr)>) {
        if send_if_changed(&self.seeds, peers) {
            self.wake.nudge.nudge();
        }
    }

    /// Publishes this member's state (opaque, at most [`MAX_STATE_LEN`] bytes) to every
    /// member; an empty state withdraws it. The same state again costs nothing.
    pub fn set_local_state(&self, state: Vec<u8>) -> Result<(), StateError> {
        if state.len() > MAX_STATE_LEN {
            return Err(StateError::TooLarge {
                len: state.len(),
                max: MAX_STATE_LEN,
            });
        }
        if send_if_changed(&self.local_state, state) {
            self.wake.nudge.nudge();
        }
        Ok(())
    }

    /// Replaces the keys (a rotation: send with the new one, accept it and the previous one);
    /// the same keys again cost nothing.
    pub fn set_keys(&self, keys: KeyRing) {
        if send_if_changed(&self.keys, keys) {
            self.wake.nudge.nudge();
        }
    }

    /// A watch of the states of live members by node (this one's included), sent only when
    /// they change.
    pub fn states(&self) -> watch::Receiver<States> {
        self.states.clone()
    }

    /// A watch of how often this member rejoined after the others had declared it dead (it
    /// stood still, or was cut off): [`MembershipCounters::rejoined`], sent only when it grows.
    pub fn rejoined(&self) -> watch::Receiver<u64> {
        self.rejoined.clone()
    }

    /// The counters at this moment.
    pub fn counters(&self) -> MembershipCounters {
        self.counters.borrow().clone()
    }
}

impl Drop for Gossip {
    /// Stops the thread and waits for it, so that the socket is closed when this returns (a
    /// member started again binds the same port). The thread stops when its wait returns: at
    /// once, or after the input it is handling.
    fn drop(&mut self) {
        self.wake.stop.store(true, Ordering::Release);
        self.wake.nudge.nudge();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the gossip thread panicked");
        }
    }
}

struct Inputs {
    seeds: watch::Receiver<Vec<(String, SocketAddr)>>,
    local_state: watch::Receiver<Vec<u8>>,
    keys: watch::Receiver<KeyRing>,
}

/// The wall clock, Unix milliseconds.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Watches {
    live: watch::Sender<BTreeSet<String>>,
    states: watch::Sender<States>,
    counters: watch::Sender<MembershipCounters>,
    rejoined: watch::Sender<u64>,
}

/// A timer of the core and when it is due; ordered by due time, then by when it was set.
struct Due {
    at: Instant,
    seq: u64,
    timer: Timer,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The gossip thread: the core, its socket and its timers.
struct Shell {
    core: Membership,
    socket: UdpSocket,
    timers: BinaryHeap<Reverse<Due>>,
    /// Orders timers set for the same instant.
    seq: u64,
    watches: Watches,
}

impl Shell {
    /// Runs until `wake.stop`: waits, then reads what woke it (the inputs, one datagram, the
    /// due timers) and hands it to the core.
    fn run(mut self, mut inputs: Inputs, wake: &Wake) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let timeout = self
                .timers
                .peek()
                .map(|Reverse(d)| d.at.saturating_duration_since(Instant::now()));
            let ready = match wait(&self.socket, &wake.nudge, timeout) {
                Ok(ready) => ready,
                Err(e) => {
                    // poll(2) fails only on a bad descriptor or no memory; do not spin.
                    tracing::error!(error = %e, "gossip cannot wait for its socket");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            if ready.nudged {
                if wake.stop.load(Ordering::Acquire) {
                    return;
                }
                self.inputs(&mut inputs);
            }
            if ready.datagram {
                match self.socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        self.core.set_time(wall_ms());
                        let out = self.core.handle_datagram_from(from, &buf[..n]);
                        self.apply(out);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => tracing::debug!(error = %e, "gossip receive failed"),
                }
            }
            let now = Instant::now();
            while self.timers.peek().is_some_and(|Reverse(d)| d.at <= now) {
                let Some(Reverse(due)) = self.timers.pop() else {
                    break;
                };
                self.core.set_time(wall_ms());
                let out = self.core.handle_timer(due.timer);
                self.apply(out);
            }
            if self.watches.counters.borrow().ne(self.core.counters()) {
                self.watches
                    .counters
                    .send_replace(self.core.counters().clone());
            }
            send_if_changed(&self.watches.rejoined, self.core.counters().rejoined);
        }
    }

    /// Hands the inputs that changed to the core.
    fn inputs(&mut self, inputs: &mut Inputs) {
        if inputs.keys.has_changed().unwrap_or(false) {
            let keys = inputs.keys.borrow_and_update().clone();
            tracing::info!("gossip keys changed: the new one is used to send in 10 s");
            self.core.set_time(wall_ms());
            self.core.set_keys(keys);
        }
        if inputs.seeds.has_changed().unwrap_or(false) {
            let peers = inputs.seeds.borrow_and_update().clone();
            self.core.set_time(wall_ms());
            let out = self.core.join(&peers);
            self.apply(out);
        }
        if inputs.local_state.has_changed().unwrap_or(false) {
            let state = inputs.local_state.borrow_and_update().clone();
            self.core.set_time(wall_ms());
            match self.core.set_local_state(state) {
                Ok(out) => self.apply(out),
                // Gossip::set_local_state checks the size first; only a node name that
                // cannot travel gets here.
                Err(e) => tracing::warn!(error = %e, "member state not published"),
            }
        }
    }

    /// Carries out the core's outputs.
    fn apply(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, datagram } => {
                    // Non-blocking: a full send buffer drops the datagram, as a lossy network
                    // would; SWIM is made for that.
                    if let Err(e) = self.socket.send_to(&datagram, to) {
                        tracing::debug!(%to, error = %e, "gossip send failed");
                    }
                }
                Output::After { delay, timer } => {
                    self.seq += 1;
                    self.timers.push(Reverse(Due {
                        at: Instant::now() + delay,
                        seq: self.seq,
                        timer,
                    }));
                }
                Output::Cancel { timer } => {
                    // A handful of timers wait at a time: a pass over them is cheap.
                    self.timers.retain(|Reverse(d)| d.timer != timer);
                }
                Output::MembersChanged => {
                    send_if_changed(&self.watches.live, self.core.live_nodes());
                }
                Output::StatesChanged => {
                    send_if_changed(&self.watches.states, self.core.states());
                }
            }
        }
    }
}
