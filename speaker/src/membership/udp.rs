//! The gossip shell: one tokio task that owns a UDP socket and the membership core, on a thread
//! of its own with a single-threaded runtime.
//!
//! Its own thread because gossip's timers are many and short (a probe every 80 ms, its
//! indirect-probe deadline 30 ms later, gossip rounds): on the speaker's shared runtime each new
//! earliest deadline set by a task on one worker had to wake the other worker parked in the
//! I/O driver (an `eventfd` write and a context switch, about 100 a second with nothing
//! changing: `scripts/wakeups`). Alone, the thread parks in its own driver until its own next
//! deadline or datagram. It also keeps probes and acks on time while a long sync pass (the
//! first list of thousands of Services) holds a worker of the shared runtime.
//!
//! ```text
//!  socket.recv_from ─────┐                       ┌─► socket.send_to
//!  due timers ───────────┤                       ├─► timer heap ─► due timers
//!  watch: seeds ─────────┼─► Membership (core) ──┼─► watch: live nodes
//!  watch: local state ───┤                       ├─► watch: states of live members
//!  watch: keys ──────────┘
//!                                                └─► watch: counters
//! ```
//!
//! Seeds, the local state and the keys are watches, not queues: the task reads the latest
//! value, and a value equal to the current one does not even wake it. The core is given the
//! wall clock before every input.
//!
//! The core's timers wait in one heap inside the task, which sleeps until the earliest: no task
//! per timer. (A task per timer counted every member declared down for a day: foca keeps a
//! down member 24 h by default, and the soak saw the speaker's task count grow by one at every
//! kill or cut-off of another node. The core now forgets a down member after
//! [`MembershipConfig::remove_down_after`].)

use super::auth::KeyRing;
use super::core::{
    Membership, MembershipConfig, MembershipCounters, Output, SpeakerId, StateError, Timer,
};
use super::states::MAX_STATE_LEN;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::{oneshot, watch};

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
    /// Dropped (with the `Gossip`) to stop the thread's task.
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        let socket = std::net::UdpSocket::bind(bind)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|source| MembershipError::Bind { addr: bind, source })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(MembershipError::Thread)?;
        let socket = {
            let _in = runtime.enter();
            UdpSocket::from_std(socket)
                .map_err(|source| MembershipError::Bind { addr: bind, source })?
        };
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
        let task = run(
            core,
            socket,
            Inputs {
                seeds: seeds_rx,
                local_state: local_state_rx,
                keys: keys_rx,
            },
            Watches {
                live: live_tx,
                states: states_tx,
                counters: counters_tx,
                rejoined: rejoined_tx,
            },
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gossip".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = task => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(MembershipError::Thread)?;
        Ok(Gossip {
            live,
            states,
            counters,
            rejoined,
            seeds,
            local_state,
            keys,
            stop: Some(stop),
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
        send_if_changed(&self.seeds, peers);
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
        send_if_changed(&self.local_state, state);
        Ok(())
    }

    /// Replaces the keys (a rotation: send with the new one, accept it and the previous one);
    /// the same keys again cost nothing.
    pub fn set_keys(&self, keys: KeyRing) {
        send_if_changed(&self.keys, keys);
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
    /// Stops the task and waits for its thread, so that the socket is closed when this returns
    /// (a member started again binds the same port). The task stops at its next await: at
    /// once, or after the datagram it is sending.
    fn drop(&mut self) {
        drop(self.stop.take());
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
    at: tokio::time::Instant,
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

async fn run(mut core: Membership, socket: UdpSocket, mut inputs: Inputs, watches: Watches) {
    let mut timers: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let next_due = timers.peek().map(|Reverse(d)| d.at);
        let out = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    core.set_time(wall_ms());
                    core.handle_datagram_from(from, &buf[..n])
                }
                Err(e) => {
                    tracing::debug!(error = %e, "gossip receive failed");
                    continue;
                }
            },
            () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)),
                if next_due.is_some() =>
            {
                let Some(Reverse(due)) = timers.pop() else { continue };
                core.set_time(wall_ms());
                core.handle_timer(due.timer)
            }
            Ok(()) = inputs.seeds.changed() => {
                let peers = inputs.seeds.borrow_and_update().clone();
                core.set_time(wall_ms());
                core.join(&peers)
            }
            Ok(()) = inputs.keys.changed() => {
                let keys = inputs.keys.borrow_and_update().clone();
                tracing::info!("gossip keys changed: the new one is used to send in 10 s");
                core.set_time(wall_ms());
                core.set_keys(keys);
                continue;
            }
            Ok(()) = inputs.local_state.changed() => {
                let state = inputs.local_state.borrow_and_update().clone();
                core.set_time(wall_ms());
                match core.set_local_state(state) {
                    Ok(out) => out,
                    Err(e) => {
                        // Gossip::set_local_state checks the size first; only a node name
                        // that cannot travel gets here.
                        tracing::warn!(error = %e, "member state not published");
                        continue;
                    }
                }
            }
        };
        for o in out {
            match o {
                Output::Send { to, datagram } => {
                    if let Err(e) = socket.send_to(&datagram, to).await {
                        tracing::debug!(%to, error = %e, "gossip send failed");
                    }
                }
                Output::After { delay, timer } => {
                    seq += 1;
                    timers.push(Reverse(Due {
                        at: tokio::time::Instant::now() + delay,
                        seq,
                        timer,
                    }));
                }
                Output::MembersChanged => {
                    send_if_changed(&watches.live, core.live_nodes());
                }
                Output::StatesChanged => {
                    send_if_changed(&watches.states, core.states());
                }
            }
        }
        if watches.counters.borrow().ne(core.counters()) {
            watches.counters.send_replace(core.counters().clone());
        }
        send_if_changed(&watches.rejoined, core.counters().rejoined);
    }
}
