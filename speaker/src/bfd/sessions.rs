//! The shell around the BFD core: sockets, timers and demultiplexing for [`Session`]s. I/O.
//! Thin: every protocol decision (state, timers, what to send) is the core's; the shell only
//! decides which session a datagram belongs to and whether its TTL is acceptable.
//!
//! Every receiver and session of a [`BfdSessions`] lives on one thread of its own (`bfd`,
//! started with the first session), blocked in one poll(2) on the receivers and an eventfd
//! ([`crate::wait`]) for at most the time to the earliest session timer; callers reach it
//! through a command list and that eventfd. Why not tasks on the speaker's tokio runtime: a
//! session of 300 ms × 3 must send on time even while a sync pass over 10,000 Services keeps
//! the shared workers busy; and an idle session woke about twice as often as it had packets to
//! handle there (lab node-a: 12.3 wake-ups a second, 0.084 % of a core, for about 6.5
//! packets): tokio's timer wheel wakes at a 64 ms slot to move a deadline further away than
//! that to its 1 ms wheel, and re-arming a timer wrote to the runtime's eventfd.
//!
//! ```text
//!   peer ──UDP──► local:3784 (single hop, RFC 5881) / local:4784 (multihop, RFC 5883)
//!                 one socket per (local address, port), IP_RECVTTL / IPV6_RECVHOPLIMIT,
//!                 and per session one connected to its peer's source once it has sent
//!                   │ poll(2) readable ─► recvmsg (up to 64 per socket): datagram, source, TTL
//!                   ▼
//!           bfd thread ── decode ── Demux (Your Discriminator, else (peer, local))
//!                   │          └─ TTL check (255, or ≥ minimum_ttl for multihop)
//!                   ▼
//!           Session::receive / poll(Instant::now()) ◄─ poll(2) timeout: earliest next_wakeup
//!             │   ├─ Output::Send ──encode──► send socket local:49152–65535 ──► peer:3784/4784
//!             │   └─ StateChanged / Discarded ──► watch::Sender<BfdStatus> ──► BfdHandle::status
//!             ▲
//!   BfdSessions::start, BfdHandle: set_config, drop or shutdown() ── command / eventfd ──┘
//!     (a stopped session sends its AdminDown packet at once and ends)
//! ```
//!
//! # Layout
//!
//! This file holds the thread and the handle; `demux` the pure session table and TTL rule
//! ([`Demux`], [`ttl_check`]); `socket` the sockets and the two system calls socket2 lacks.
//!
//! # Guarantees
//!
//! - Every datagram that reaches a receiver is either handed to exactly one session or counted
//!   as dropped under a [`DropReason`] label: in that session's [`BfdStatus::dropped`] when the
//!   datagram can be attributed to one, otherwise in [`BfdSessions::unmatched_drops`].
//! - A session's peer has a queue of its own ([`socket::peer_queue`]) from its first packet
//!   the session takes: the shared receiver's queue can be filled by a flood (the kernel then
//!   drops what arrives), and a flood from anyone but the peer's own source address and port
//!   never reaches the peer's queue. The thread reads at most 64 datagrams from one socket
//!   before it looks at the others and at the timers.
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::packet::{Diag, State};
use super::session::{Output, Session, SessionConfig};
use crate::netdev::{BindError, DeviceName};
use crate::wait::{Nudge, poll, readable};
use crate::watch::send_if_changed;

mod demux;
mod socket;

use demux::allocate_discriminator;
pub use demux::{Demux, Dispatch, DropReason, SessionKey, ttl_check};
use socket::{canonical, peer_queue, receive_socket, recv_with_ttl, send_socket};

/// Destination port of single-hop Control packets (RFC 5881 §4).
pub const SINGLE_HOP_PORT: u16 = 3784;
/// Destination port of multihop Control packets (RFC 5883 §5).
pub const MULTIHOP_PORT: u16 = 4784;
/// Source ports a session may use (RFC 5881 §4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// TTL / hop limit of every packet we send, and the only one single hop accepts (RFC 5881 §5).
pub const GTSM_TTL: u8 = 255;
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

/// What the `bfd` thread publishes a session's status through.
struct Route {
    status: watch::Sender<BfdStatus>,
}

struct Registry {
    demux: Demux,
    routes: HashMap<NonZeroU32, Route>,
    /// The receivers opened, by (local address, multihop, device).
    receivers: HashSet<(IpAddr, bool, Option<DeviceName>)>,
    unmatched: BTreeMap<&'static str, u64>,
    /// Drops counted by sessions that have ended.
    ended: BTreeMap<&'static str, u64>,
    next_discr: u32,
}

struct Shared {
    registry: Mutex<Registry>,
    /// The `bfd` thread, from the first session on.
    engine: OnceLock<Arc<Link>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock leaves plain maps behind; they stay usable.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // No session and no `BfdSessions` is left: the thread closes the receivers and ends.
        if let Some(link) = self.engine.get() {
            link.exit.store(true, Ordering::Release);
            link.nudge.nudge();
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
                    receivers: HashSet::new(),
                    unmatched: BTreeMap::new(),
                    ended: BTreeMap::new(),
                    next_discr: rand::random(),
                }),
                engine: OnceLock::new(),
            }),
        }
    }

    /// Starts a session: opens the receiver for `peer.local` if it is not open yet, binds a send
    /// socket and hands the session to the `bfd` thread (started with the first session).
    pub fn start(&self, peer: BfdPeer) -> Result<BfdHandle, StartError> {
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
        let link = self.engine()?;
        let key = peer.key();
        let send = send_socket(peer.local, peer.device)?;
        let (status_tx, status_rx) = watch::channel(BfdStatus::new());
        let discr = {
            let mut registry = self.shared.lock();
            if registry.demux.contains(&key) {
                return Err(StartError::DuplicateSession { key });
            }
            let receiver_key = (peer.local, peer.multihop, peer.device);
            if !registry.receivers.contains(&receiver_key) {
                let socket = receive_socket(peer.local, peer.multihop, peer.device, None)?;
                link.push(Command::Receiver(Receiver {
                    socket,
                    bound: key,
                    paused_until: None,
                }));
                registry.receivers.insert(receiver_key);
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
                    status: status_tx.clone(),
                },
            );
            discr
        };
        let port = if peer.multihop {
            MULTIHOP_PORT
        } else {
            SINGLE_HOP_PORT
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let (config_tx, config_rx) = watch::channel(peer.config);
        link.push(Command::Start(Box::new(Running {
            queue: PeerQueue::default(),
            driver: Driver {
                session: Session::new(discr, peer.config, Instant::now()),
                peer,
                socket: send,
                dest: SocketAddr::new(peer.peer, port),
                status: status_tx,
                send_failing: false,
            },
            stop: stop_rx,
            config: config_rx,
            done: Some(done_tx),
            registration: Registration {
                shared: self.shared.clone(),
                discr,
            },
        })));
        link.nudge.nudge();
        Ok(BfdHandle {
            discriminator: discr,
            status: status_rx,
            config: config_tx,
            stop: Some(stop_tx),
            done: Some(done_rx),
            link,
        })
    }

    /// The `bfd` thread's link; the thread is started on the first call.
    fn engine(&self) -> Result<Arc<Link>, StartError> {
        if let Some(link) = self.shared.engine.get() {
            return Ok(link.clone());
        }
        let link = Arc::new(Link {
            nudge: Nudge::new().map_err(StartError::Thread)?,
            commands: Mutex::new(Vec::new()),
            exit: AtomicBool::new(false),
        });
        // The thread is started before the link is stored: a thread that could not start
        // leaves nothing behind, and the next session tries again (a link stored without its
        // thread would take sessions that never run).
        let engine = Engine {
            shared: Arc::downgrade(&self.shared),
            link: link.clone(),
            receivers: Vec::new(),
            sessions: HashMap::new(),
        };
        std::thread::Builder::new()
            .name("bfd".into())
            .spawn(move || engine.run())
            .map_err(StartError::Thread)?;
        // Two first sessions at once: the link not stored has its thread end.
        let stored = self.shared.engine.get_or_init(|| link.clone()).clone();
        if !Arc::ptr_eq(&stored, &link) {
            link.exit.store(true, Ordering::Release);
            link.nudge.nudge();
        }
        Ok(stored)
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
    /// Closed by the `bfd` thread once the session has sent its AdminDown and ended.
    done: Option<oneshot::Receiver<()>>,
    link: Arc<Link>,
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
        self.link.nudge.nudge();
    }

    /// Disables the session (AdminDown, diag 7), sends that to the peer and waits until the
    /// session has ended.
    pub async fn shutdown(mut self) {
        drop(self.stop.take());
        self.link.nudge.nudge();
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for BfdHandle {
    fn drop(&mut self) {
        // The thread sees the closed sender, sends AdminDown and ends the session.
        if self.stop.take().is_some() {
            self.link.nudge.nudge();
        }
    }
}

/// Removes a session from the table when it ends, however it ends.
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

/// Between the callers of [`BfdSessions`] and [`BfdHandle`] and the `bfd` thread.
struct Link {
    /// Wakes the thread: a command, a stop, a new configuration, or the end.
    nudge: Nudge,
    commands: Mutex<Vec<Command>>,
    /// The [`BfdSessions`] and every session are gone: the thread ends.
    exit: AtomicBool,
}

impl Link {
    fn push(&self, command: Command) {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(command);
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

/// What the `bfd` thread is asked to do.
enum Command {
    /// Read a new receiver.
    Receiver(Receiver),
    /// Run a new session.
    Start(Box<Running>),
}

/// A receiving socket on the `bfd` thread. `bound` is the key of the first session on it; its
/// local address, port and device are the receiver's own.
struct Receiver {
    socket: std::net::UdpSocket,
    bound: SessionKey,
    /// After a receive error the socket is left alone until then (an error that persists
    /// would otherwise wake the thread without pause).
    paused_until: Option<Instant>,
}

/// A session on the `bfd` thread, with what ends or changes it.
struct Running {
    driver: Driver,
    /// The session's own queue, once a packet of its peer has arrived.
    queue: PeerQueue,
    stop: oneshot::Receiver<()>,
    config: watch::Receiver<SessionConfig>,
    /// Dropped once the session has ended ([`BfdHandle::shutdown`] waits for that).
    done: Option<oneshot::Sender<()>>,
    registration: Registration,
}

/// A session's own receiving socket ([`peer_queue`]), connected to the source address of the
/// last packet its peer sent to the shared receiver: after the first packet (and after the
/// peer restarts on another source port) the peer's packets have a queue of their own.
#[derive(Default)]
struct PeerQueue {
    socket: Option<std::net::UdpSocket>,
    /// The source the socket was opened for; kept when opening failed, so that it is tried
    /// again only for another source.
    source: Option<SocketAddr>,
}

impl PeerQueue {
    /// Opens the queue for `source` unless it is open for it (or failed for it) already.
    fn follow(&mut self, peer: &BfdPeer, source: SocketAddr) {
        if self.source == Some(source) {
            return;
        }
        self.source = Some(source);
        self.socket = match peer_queue(peer.local, peer.multihop, peer.device, source) {
            Ok(socket) => Some(socket),
            Err(error) => {
                tracing::warn!(peer = %peer.peer, local = %peer.local, %source, %error, "BFD: no queue of its own for the session; its packets share the port's");
                None
            }
        };
    }
}

/// Where a datagram is read from: a shared receiver (by index) or a session's own queue.
#[derive(Debug, Clone, Copy)]
enum Inbox {
    Shared(usize),
    Own(NonZeroU32),
}

/// Datagrams read from one socket per readiness, at most: a flood at one socket cannot keep
/// the thread from the others or from the timers.
const BATCH: usize = 64;

/// The `bfd` thread: every receiver and session of one [`BfdSessions`].
struct Engine {
    shared: Weak<Shared>,
    link: Arc<Link>,
    receivers: Vec<Receiver>,
    sessions: HashMap<NonZeroU32, Running>,
}

impl Engine {
    /// Until the [`BfdSessions`] and every session are gone: waits in one poll(2) on the
    /// receivers and the nudge, for at most the time to the earliest session timer, then
    /// handles what is ready.
    fn run(mut self) {
        let mut fds = Vec::new();
        let mut inboxes = Vec::new();
        let mut buf = [0u8; 256];
        while !self.link.exit.load(Ordering::Acquire) {
            self.take_commands();
            let now = Instant::now();
            fds.clear();
            inboxes.clear();
            fds.push(self.link.nudge.pollfd());
            for (i, r) in self.receivers.iter_mut().enumerate() {
                if r.paused_until.is_some_and(|t| t <= now) {
                    r.paused_until = None;
                }
                // A negative descriptor is skipped by poll(2).
                let fd = match r.paused_until {
                    Some(_) => -1,
                    None => r.socket.as_raw_fd(),
                };
                fds.push(readable(fd));
                inboxes.push(Inbox::Shared(i));
            }
            for (discr, running) in &self.sessions {
                if let Some(socket) = &running.queue.socket {
                    fds.push(readable(socket.as_raw_fd()));
                    inboxes.push(Inbox::Own(*discr));
                }
            }
            let wake = self
                .sessions
                .values()
                .filter_map(|s| s.driver.session.next_wakeup())
                .chain(self.receivers.iter().filter_map(|r| r.paused_until))
                .min();
            let timeout = wake.map(|w| w.saturating_duration_since(now));
            if let Err(e) = poll(&mut fds, timeout) {
                tracing::warn!(error = %e, "BFD: waiting for packets failed");
                std::thread::sleep(RECEIVE_ERROR_PAUSE);
                continue;
            }
            if fds[0].revents != 0 {
                self.link.nudge.clear();
                self.take_commands();
                self.ends_and_changes();
            }
            for (fd, inbox) in fds[1..].iter().zip(&inboxes) {
                if fd.revents != 0 {
                    for _ in 0..BATCH {
                        if !self.receive(*inbox, &mut buf) {
                            break;
                        }
                    }
                }
            }
            let now = Instant::now();
            for running in self.sessions.values_mut() {
                if running
                    .driver
                    .session
                    .next_wakeup()
                    .is_some_and(|at| at <= now)
                {
                    let outputs = running.driver.session.poll(now);
                    running.driver.apply(outputs, 0);
                }
            }
        }
    }

    fn take_commands(&mut self) {
        let commands =
            std::mem::take(&mut *self.link.commands.lock().unwrap_or_else(|e| e.into_inner()));
        for command in commands {
            match command {
                Command::Receiver(r) => self.receivers.push(r),
                Command::Start(running) => {
                    let mut running = *running;
                    let outputs = running.driver.session.poll(Instant::now());
                    running.driver.apply(outputs, 0);
                    self.sessions.insert(running.registration.discr, running);
                }
            }
        }
    }

    /// Sessions whose handle was dropped or shut down end (AdminDown first); changed
    /// configurations are handed to their sessions.
    fn ends_and_changes(&mut self) {
        let ended: Vec<NonZeroU32> = self
            .sessions
            .iter_mut()
            .filter_map(|(discr, r)| {
                matches!(
                    r.stop.try_recv(),
                    Err(oneshot::error::TryRecvError::Closed) | Ok(())
                )
                .then_some(*discr)
            })
            .collect();
        for discr in ended {
            if let Some(mut running) = self.sessions.remove(&discr) {
                // The core sends the AdminDown packet at once (none if it sends nothing at all).
                let outputs = running.driver.session.set_admin_down();
                running.driver.apply(outputs, 0);
                drop(running.registration);
                drop(running.done.take());
            }
        }
        for running in self.sessions.values_mut() {
            if running.config.has_changed().unwrap_or(false) {
                let c = *running.config.borrow_and_update();
                running
                    .registration
                    .shared
                    .lock()
                    .demux
                    .set_minimum_ttl(running.registration.discr, c.minimum_ttl);
                tracing::info!(peer = %running.driver.peer.peer, local = %running.driver.peer.local, config = ?c, "BFD session reconfigured");
                running.driver.session.set_config(c);
                let outputs = running.driver.session.poll(Instant::now());
                running.driver.apply(outputs, 0);
            }
        }
    }

    /// Reads one datagram of `inbox` and hands it to its session, or counts it. False when
    /// there was none to read (or reading failed).
    fn receive(&mut self, inbox: Inbox, buf: &mut [u8; 256]) -> bool {
        let (fd, bound) = match inbox {
            Inbox::Shared(i) => {
                let r = &self.receivers[i];
                (r.socket.as_raw_fd(), r.bound)
            }
            Inbox::Own(discr) => {
                let Some(running) = self.sessions.get(&discr) else {
                    return false;
                };
                let Some(socket) = &running.queue.socket else {
                    return false;
                };
                (socket.as_raw_fd(), running.driver.peer.key())
            }
        };
        let SessionKey {
            local,
            multihop,
            device,
            ..
        } = bound;
        let datagram = match recv_with_ttl(fd, buf) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) => {
                tracing::warn!(%local, error = %e, "BFD receive failed");
                match inbox {
                    Inbox::Shared(i) => {
                        self.receivers[i].paused_until = Some(Instant::now() + RECEIVE_ERROR_PAUSE);
                    }
                    // Its peer's packets reach the shared receiver again.
                    Inbox::Own(discr) => {
                        if let Some(running) = self.sessions.get_mut(&discr) {
                            running.queue.socket = None;
                        }
                    }
                }
                return false;
            }
        };
        let Some(shared) = self.shared.upgrade() else {
            return false;
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
            Dispatch::Deliver(discr, packet) => match self.sessions.get_mut(&discr) {
                Some(running) => {
                    drop(guard);
                    let outputs = running.driver.session.receive(&packet, Instant::now());
                    // Only a packet the session took moves its queue to the packet's source.
                    let taken = !outputs.iter().any(|o| matches!(o, Output::Discarded(_)));
                    running.driver.apply(outputs, 1);
                    if taken && matches!(inbox, Inbox::Shared(_)) {
                        running.queue.follow(&running.driver.peer, datagram.source);
                    }
                    return true;
                }
                None => (None, DropReason::NoSession),
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
        true
    }
}

/// How long a receiver is left alone after a receive error.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A session's state on the `bfd` thread: the core, its send socket and its status.
struct Driver {
    session: Session,
    peer: BfdPeer,
    socket: std::net::UdpSocket,
    dest: SocketAddr,
    status: watch::Sender<BfdStatus>,
    send_failing: bool,
}

impl Driver {
    /// Carries out the core's outputs and updates the status.
    fn apply(&mut self, outputs: Vec<Output>, received: u64) {
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
    }
}

#[cfg(test)]
mod tests;
