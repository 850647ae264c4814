//! The tokio shell around the BFD core: sockets, timers and demultiplexing for [`Session`]s.
//! I/O. Thin: every protocol decision (state, timers, what to send) is the core's; the shell
//! only decides which session a datagram belongs to and whether its TTL is acceptable.
//!
//! Every receiver and session task runs on a single-threaded runtime on a thread of its own
//! (`bfd`), started with the first session, not on the speaker's shared runtime. Why: a BFD
//! session of 300 ms × 3 must send on time even while a sync pass over 10,000 Services keeps
//! the shared workers busy; and an idle session's packets cost fewer wake-ups on one thread (on
//! the shared runtime each sent packet also woke the runtime's I/O driver through its eventfd
//! to re-arm the timer, and a packet received could wake a second worker).
//!
//! ```text
//!   peer ──UDP──► local:3784 (single hop, RFC 5881) / local:4784 (multihop, RFC 5883)
//!                 one socket per (local address, port), IP_RECVTTL / IPV6_RECVHOPLIMIT
//!                   │ recvmsg: datagram, source, TTL
//!                   ▼
//!           receiver task ── decode ── Demux (Your Discriminator, else (peer, local))
//!                   │          └─ TTL check (255, or ≥ minimum_ttl for multihop)
//!                   │  bounded channel per session (full: drop, count `queue_full`)
//!                   ▼
//!           session task ─ Session::receive / poll(Instant::now()) ◄─ sleep_until(next_wakeup)
//!             │   ├─ Output::Send ──encode──► send socket local:49152–65535 ──► peer:3784/4784
//!             │   └─ StateChanged / Discarded ──► watch::Sender<BfdStatus> ──► BfdHandle::status
//!             ▲
//!   BfdHandle: drop or shutdown() ──► set_admin_down: its AdminDown packet goes out at once, stop
//! ```
//!
//! # Layout
//!
//! This file holds the tasks and the handle; `demux` the pure session table and TTL rule
//! ([`Demux`], [`ttl_check`]); `socket` the sockets and the two system calls socket2 lacks.
//!
//! # Guarantees
//!
//! - Every datagram that reaches a receiver is either handed to exactly one session or counted
//!   as dropped under a [`DropReason`] label: in that session's [`BfdStatus::dropped`] when the
//!   datagram can be attributed to one, otherwise in [`BfdSessions::unmatched_drops`].
//! - Single-hop packets are accepted only with TTL / hop limit 255 (GTSM, RFC 5881 §5);
//!   multihop packets with at least [`SessionConfig::minimum_ttl`] (RFC 5883 §5). Everything
//!   we send carries TTL / hop limit 255, from one source port per session in 49152–65535
//!   (RFC 5881 §4).
//! - Discriminators are nonzero and unique within a [`BfdSessions`]; they start at a random
//!   value so that a restarted speaker does not reuse its predecessor's.
//! - The time given to the core is `std::time::Instant::now()` at each event.
//! - A stopped session (handle dropped or [`BfdHandle::shutdown`]) sends one AdminDown packet
//!   (diag 7) at once and stops; a passive session that never heard its peer sends nothing.
//!
//! # Caveats
//!
//! - RFC 5880 §6.8.16 asks for AdminDown packets during at least a detection time; we send one
//!   and stop (at the slow rate of one second that is what the period would hold anyway). If
//!   it is lost, the peer sees a detection timeout instead of AdminDown.
//! - No IPv6 link-local addresses (they need an interface).
//! - A session with a VRF device ([`BfdPeer::device`]) has its own receiver bound to that
//!   device and `local`, and its send socket bound to the device too (`SO_BINDTODEVICE`):
//!   packets of that VRF reach only its sockets, and ours leave through it.
//! - Receivers stay open while any session or the [`BfdSessions`] itself lives, so a session
//!   can be restarted without a race on the port; packets then arriving for no session are
//!   counted as `no_session`.
//! - The status watch wakes its receivers on a change of state, remote state, diagnostic,
//!   detection time or `up_since`; packet and drop counters are updated without waking them.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};

use super::packet::{ControlPacket, Diag, State};
use super::session::{Output, Session, SessionConfig};
use crate::netdev::{BindError, DeviceName};
use crate::watch::send_if_changed;

mod demux;
mod socket;

use demux::allocate_discriminator;
pub use demux::{Demux, Dispatch, DropReason, SessionKey, ttl_check};
use socket::{canonical, receive_socket, recv_with_ttl, send_socket};

/// Destination port of single-hop Control packets (RFC 5881 §4).
pub const SINGLE_HOP_PORT: u16 = 3784;
/// Destination port of multihop Control packets (RFC 5883 §5).
pub const MULTIHOP_PORT: u16 = 4784;
/// Source ports a session may use (RFC 5881 §4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// TTL / hop limit of every packet we send, and the only one single hop accepts (RFC 5881 §5).
pub const GTSM_TTL: u8 = 255;
/// Received packets queued per session; more are dropped as `queue_full`.
pub const SESSION_QUEUE: usize = 32;
/// Random source ports tried before giving up.
const SOURCE_PORT_TRIES: usize = 64;

/// One BFD session to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdPeer {
    /// Our address: packets are sent from it and received on it.
    pub local: IpAddr,
    /// The peer's address.
    pub peer: IpAddr,
    /// Multihop (RFC 5883, port 4784) rather than single hop (RFC 5881, port 3784).
    pub multihop: bool,
    /// The VRF device (any network device) the session's sockets are bound to; the default
    /// VRF when `None`.
    pub device: Option<DeviceName>,
    /// Intervals, multiplier, passive role and minimum TTL.
    pub config: SessionConfig,
}

impl BfdPeer {
    fn key(&self) -> SessionKey {
        SessionKey {
            peer: self.peer,
            local: self.local,
            multihop: self.multihop,
            device: self.device,
        }
    }
}

/// What a session looks like now, as [`BfdHandle::status`] publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdStatus {
    /// bfd.SessionState.
    pub state: State,
    /// The state in the peer's last packet.
    pub remote_state: State,
    /// bfd.LocalDiag: why we last changed state.
    pub local_diag: Diag,
    /// The detection time in force, once the peer was heard.
    pub detection_time: Option<Duration>,
    /// When the session last came Up, while it is Up.
    pub up_since: Option<Instant>,
    /// Packets handed to the session.
    pub packets_received: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets dropped (or not sent), by [`DropReason::metric_label`].
    pub dropped: BTreeMap<&'static str, u64>,
}

impl BfdStatus {
    fn new() -> BfdStatus {
        BfdStatus {
            state: State::Down,
            remote_state: State::Down,
            local_diag: Diag::NoDiagnostic,
            detection_time: None,
            up_since: None,
            packets_received: 0,
            packets_sent: 0,
            dropped: BTreeMap::new(),
        }
    }
}

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Local and peer addresses are of different families.
    #[error(
        "BFD peer {peer} and local address {local} are of different address families; give a \
         local address of the peer's family"
    )]
    AddressFamilyMismatch {
        /// Our address.
        local: IpAddr,
        /// The peer's.
        peer: IpAddr,
    },
    /// An IPv6 link-local address, which needs an interface.
    #[error(
        "BFD over the IPv6 link-local address {addr} needs an interface, which is not supported; \
         use a global or unique-local address"
    )]
    LinkLocal {
        /// The address.
        addr: IpAddr,
    },
    /// A session with the same addresses already runs.
    #[error("a BFD session {key} already runs; use its handle")]
    DuplicateSession {
        /// The addresses.
        key: SessionKey,
    },
    /// The receiving socket could not be bound.
    #[error(
        "cannot bind the BFD socket {addr}: {source}; check that the address belongs to this \
         node and that no other BFD daemon (bfdd, BIRD) holds the port there"
    )]
    Bind {
        /// Address and port.
        addr: SocketAddr,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// No free source port.
    #[error("no free UDP source port in 49152-65535 at {local} after {SOURCE_PORT_TRIES} tries")]
    NoSourcePort {
        /// Our address.
        local: IpAddr,
    },
    /// A socket could not be created or configured.
    #[error("BFD socket setup failed ({what}): {source}")]
    Socket {
        /// The step that failed.
        what: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The thread the sessions run on could not be started.
    #[error("the BFD thread could not be started: {0}")]
    Thread(#[source] io::Error),
    /// A socket could not be bound to the session's VRF device.
    #[error("BFD: {0}")]
    Device(#[from] BindError),
}

impl StartError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StartError::AddressFamilyMismatch { .. } => "address_family_mismatch",
            StartError::LinkLocal { .. } => "link_local",
            StartError::DuplicateSession { .. } => "duplicate_session",
            StartError::Bind { .. } => "bind",
            StartError::NoSourcePort { .. } => "no_source_port",
            StartError::Socket { .. } => "socket",
            StartError::Thread(_) => "thread",
            StartError::Device(e) => e.metric_label(),
        }
    }
}

/// Where the receiver hands a session's packets.
struct Route {
    packets: mpsc::Sender<ControlPacket>,
    status: watch::Sender<BfdStatus>,
}

struct Registry {
    demux: Demux,
    routes: HashMap<NonZeroU32, Route>,
    receivers: HashMap<(IpAddr, bool, Option<DeviceName>), AbortHandle>,
    unmatched: BTreeMap<&'static str, u64>,
    /// Drops counted by sessions that have ended.
    ended: BTreeMap<&'static str, u64>,
    next_discr: u32,
}

struct Shared {
    registry: Mutex<Registry>,
    /// The `bfd` thread's runtime, from the first session on.
    runtime: OnceLock<BfdRuntime>,
}

/// The single-threaded runtime on the `bfd` thread; stopped (its tasks dropped) when this is.
struct BfdRuntime {
    handle: tokio::runtime::Handle,
    /// Dropping it ends the thread's `block_on`.
    _stop: oneshot::Sender<()>,
}

impl BfdRuntime {
    /// Starts the `bfd` thread and its runtime.
    fn start() -> io::Result<BfdRuntime> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("bfd".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })?;
        Ok(BfdRuntime {
            handle,
            _stop: stop,
        })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock leaves plain maps behind; they stay usable.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let registry = self.registry.get_mut().unwrap_or_else(|e| e.into_inner());
        for receiver in registry.receivers.values() {
            receiver.abort();
        }
    }
}

/// The BFD sessions of one speaker: the receivers they share and the session table. Cheap to
/// clone; receivers close once it and every session are gone.
#[derive(Clone)]
pub struct BfdSessions {
    shared: Arc<Shared>,
}

impl Default for BfdSessions {
    fn default() -> Self {
        BfdSessions::new()
    }
}

impl BfdSessions {
    /// No sessions yet; discriminators start at a random value.
    pub fn new() -> BfdSessions {
        BfdSessions {
            shared: Arc::new(Shared {
                registry: Mutex::new(Registry {
                    demux: Demux::default(),
                    routes: HashMap::new(),
                    receivers: HashMap::new(),
                    unmatched: BTreeMap::new(),
                    ended: BTreeMap::new(),
                    next_discr: rand::random(),
                }),
                runtime: OnceLock::new(),
            }),
        }
    }

    /// Starts a session: opens the receiver for `peer.local` if it is not open yet, binds a send
    /// socket and spawns the session's task on the `bfd` thread (started with the first
    /// session).
    pub fn start(&self, peer: BfdPeer) -> Result<BfdHandle, StartError> {
        let runtime = self.runtime()?;
        // The receiver's socket registers with the reactor of the runtime it is made in.
        let _in_bfd_runtime = runtime.enter();
        if peer.local.is_ipv4() != peer.peer.is_ipv4() {
            return Err(StartError::AddressFamilyMismatch {
                local: peer.local,
                peer: peer.peer,
            });
        }
        for addr in [peer.local, peer.peer] {
            if let IpAddr::V6(a) = addr
                && a.is_unicast_link_local()
            {
                return Err(StartError::LinkLocal { addr });
            }
        }
        if let Err(e) = peer.config.validate() {
            tracing::warn!(peer = %peer.peer, local = %peer.local, error = %e, "BFD configuration clamped");
        }
        let key = peer.key();
        let send = send_socket(peer.local, peer.device)?;
        let (packets_tx, packets_rx) = mpsc::channel(SESSION_QUEUE);
        let (status_tx, status_rx) = watch::channel(BfdStatus::new());
        let discr = {
            let mut registry = self.shared.lock();
            if registry.demux.contains(&key) {
                return Err(StartError::DuplicateSession { key });
            }
            let receiver_key = (peer.local, peer.multihop, peer.device);
            if let Entry::Vacant(slot) = registry.receivers.entry(receiver_key) {
                let socket = receive_socket(peer.local, peer.multihop, peer.device)?;
                let task = runtime.spawn(run_receiver(
                    socket,
                    peer.key(),
                    Arc::downgrade(&self.shared),
                ));
                slot.insert(task.abort_handle());
            }
            let Registry {
                demux, next_discr, ..
            } = &mut *registry;
            let discr = allocate_discriminator(next_discr, |d| demux.has_discriminator(d));
            let inserted = demux.insert(discr, key, peer.config.minimum_ttl);
            debug_assert!(inserted, "addresses checked and discriminator fresh");
            registry.routes.insert(
                discr,
                Route {
                    packets: packets_tx,
                    status: status_tx.clone(),
                },
            );
            discr
        };
        let registration = Registration {
            shared: self.shared.clone(),
            discr,
        };
        let port = if peer.multihop {
            MULTIHOP_PORT
        } else {
            SINGLE_HOP_PORT
        };
        let driver = Driver {
            session: Session::new(discr, peer.config, Instant::now()),
            peer,
            socket: send,
            dest: SocketAddr::new(peer.peer, port),
            status: status_tx,
            send_failing: false,
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let (config_tx, config_rx) = watch::channel(peer.config);
        let task = runtime.spawn(driver.run(packets_rx, stop_rx, config_rx, registration));
        Ok(BfdHandle {
            discriminator: discr,
            status: status_rx,
            config: config_tx,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }

    /// The `bfd` thread's runtime, started on the first call.
    fn runtime(&self) -> Result<tokio::runtime::Handle, StartError> {
        if let Some(r) = self.shared.runtime.get() {
            return Ok(r.handle.clone());
        }
        let started = BfdRuntime::start().map_err(StartError::Thread)?;
        // Two first sessions at once: the loser's runtime (and thread) end as it is dropped.
        let r = self.shared.runtime.get_or_init(|| started);
        Ok(r.handle.clone())
    }

    /// Datagrams that no session could own, by [`DropReason::metric_label`].
    pub fn unmatched_drops(&self) -> BTreeMap<&'static str, u64> {
        self.shared.lock().unmatched.clone()
    }

    /// Every packet dropped since the first session started, by
    /// [`DropReason::metric_label`]: those no session could own, and those of every session,
    /// running or ended (the totals never go down).
    pub fn drops(&self) -> BTreeMap<&'static str, u64> {
        let registry = self.shared.lock();
        let mut total = registry.unmatched.clone();
        for (reason, n) in &registry.ended {
            *total.entry(reason).or_default() += n;
        }
        for route in registry.routes.values() {
            for (reason, n) in &route.status.borrow().dropped {
                *total.entry(reason).or_default() += n;
            }
        }
        total
    }
}

/// One running session. Dropping it stops the session as [`BfdHandle::shutdown`] does, without
/// waiting.
#[derive(Debug)]
pub struct BfdHandle {
    discriminator: NonZeroU32,
    status: watch::Receiver<BfdStatus>,
    config: watch::Sender<SessionConfig>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl BfdHandle {
    /// The session's status; see the module documentation for when it wakes.
    pub fn status(&self) -> watch::Receiver<BfdStatus> {
        self.status.clone()
    }

    /// bfd.LocalDiscr of the session.
    pub fn discriminator(&self) -> NonZeroU32 {
        self.discriminator
    }

    /// Changes the session's timers, multiplier, passive role or minimum TTL while it runs:
    /// new intervals are agreed with the peer through a Poll Sequence (RFC 5880 §6.8.3), and
    /// the session stays Up meanwhile.
    pub fn set_config(&self, config: SessionConfig) {
        send_if_changed(&self.config, config);
    }

    /// Disables the session (AdminDown, diag 7), sends that to the peer and waits until the task
    /// has stopped.
    pub async fn shutdown(mut self) {
        drop(self.stop.take());
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for BfdHandle {
    fn drop(&mut self) {
        // Dropping the sender wakes the task, which sends AdminDown and stops by itself.
        drop(self.stop.take());
    }
}

/// Removes a session from the table when its task ends, however it ends.
struct Registration {
    shared: Arc<Shared>,
    discr: NonZeroU32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.shared.lock();
        registry.demux.remove(self.discr);
        if let Some(route) = registry.routes.remove(&self.discr) {
            // Kept, so that the totals of [`BfdSessions::drops`] never go down.
            let dropped = route.status.borrow().dropped.clone();
            for (reason, n) in dropped {
                *registry.ended.entry(reason).or_default() += n;
            }
        }
    }
}

/// A session's task state: the core, its send socket and its status.
struct Driver {
    session: Session,
    peer: BfdPeer,
    socket: std::net::UdpSocket,
    dest: SocketAddr,
    status: watch::Sender<BfdStatus>,
    send_failing: bool,
}

impl Driver {
    async fn run(
        mut self,
        mut packets: mpsc::Receiver<ControlPacket>,
        mut stop: oneshot::Receiver<()>,
        mut config: watch::Receiver<SessionConfig>,
        registration: Registration,
    ) {
        loop {
            let wake = self.session.next_wakeup();
            tokio::select! {
                biased;
                _ = &mut stop => break,
                Ok(()) = config.changed() => {
                    let c = *config.borrow_and_update();
                    registration
                        .shared
                        .lock()
                        .demux
                        .set_minimum_ttl(registration.discr, c.minimum_ttl);
                    tracing::info!(peer = %self.peer.peer, local = %self.peer.local, config = ?c, "BFD session reconfigured");
                    self.session.set_config(c);
                    let outputs = self.session.poll(Instant::now());
                    self.apply(outputs, 0).await;
                }
                Some(packet) = packets.recv() => {
                    let outputs = self.session.receive(&packet, Instant::now());
                    self.apply(outputs, 1).await;
                }
                () = sleep_until(wake) => {
                    let outputs = self.session.poll(Instant::now());
                    self.apply(outputs, 0).await;
                }
            }
        }
        // The core sends the AdminDown packet at once (none if it sends nothing at all).
        let outputs = self.session.set_admin_down();
        self.apply(outputs, 0).await;
    }

    /// Carries out the core's outputs and updates the status; whether a packet was sent.
    async fn apply(&mut self, outputs: Vec<Output>, received: u64) -> bool {
        let (mut sent, mut drops) = (0u64, Vec::new());
        for output in outputs {
            match output {
                Output::Send(packet) => match self.socket.send_to(&packet.encode(), self.dest) {
                    Ok(_) => {
                        sent += 1;
                        self.send_failing = false;
                    }
                    Err(e) => {
                        if !self.send_failing {
                            tracing::warn!(peer = %self.peer.peer, local = %self.peer.local, error = %e, "sending a BFD packet failed");
                        }
                        self.send_failing = true;
                        drops.push(DropReason::SendFailed);
                    }
                },
                Output::StateChanged { from, to, diag } => {
                    tracing::info!(peer = %self.peer.peer, local = %self.peer.local, ?from, ?to, ?diag, "BFD session state changed");
                }
                Output::Discarded(d) => {
                    tracing::debug!(peer = %self.peer.peer, reason = %d, "BFD packet discarded by the session");
                    drops.push(DropReason::Refused(d));
                }
            }
        }
        let session = &self.session;
        self.status.send_if_modified(|s| {
            s.packets_received += received;
            s.packets_sent += sent;
            for d in drops {
                *s.dropped.entry(d.metric_label()).or_default() += 1;
            }
            let before = (s.state, s.remote_state, s.local_diag, s.detection_time);
            s.state = session.state();
            s.remote_state = session.remote_state();
            s.local_diag = session.local_diag();
            s.detection_time = session.detection_time();
            if s.state != State::Up {
                s.up_since = None;
            } else if s.up_since.is_none() {
                s.up_since = Some(Instant::now());
            }
            before != (s.state, s.remote_state, s.local_diag, s.detection_time)
        });
        sent > 0
    }
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// Reads one receiver's datagrams and hands each to its session, or counts it. `bound` is
/// the key of the first session on this receiver; its local address, port and device are the
/// receiver's own.
async fn run_receiver(socket: UdpSocket, bound: SessionKey, shared: std::sync::Weak<Shared>) {
    let SessionKey {
        local,
        multihop,
        device,
        ..
    } = bound;
    let mut buf = [0u8; 256];
    let fd = socket.as_raw_fd();
    loop {
        let datagram = match socket
            .async_io(Interest::READABLE, || recv_with_ttl(fd, &mut buf))
            .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(%local, error = %e, "BFD receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let arrival = SessionKey {
            peer: canonical(datagram.source.ip()),
            local,
            multihop,
            device,
        };
        let mut guard = shared.lock();
        let registry = &mut *guard;
        let dispatch = registry
            .demux
            .dispatch(arrival, &buf[..datagram.len], datagram.ttl);
        let (discr, reason) = match dispatch {
            Dispatch::Deliver(discr, packet) => match registry.routes.get(&discr) {
                None => (None, DropReason::NoSession),
                Some(route) => match route.packets.try_send(packet) {
                    Ok(()) => continue,
                    Err(mpsc::error::TrySendError::Full(_)) => (Some(discr), DropReason::QueueFull),
                    Err(mpsc::error::TrySendError::Closed(_)) => (None, DropReason::NoSession),
                },
            },
            Dispatch::Drop(discr, reason) => (discr, reason),
        };
        tracing::debug!(%local, source = %arrival.peer, %reason, "BFD datagram dropped");
        match discr.and_then(|d| registry.routes.get(&d)) {
            Some(route) => {
                route.status.send_if_modified(|s| {
                    *s.dropped.entry(reason.metric_label()).or_default() += 1;
                    false
                });
            }
            None => *registry.unmatched.entry(reason.metric_label()).or_default() += 1,
        }
    }
}

#[cfg(test)]
mod tests;
