//! One tokio task per peer: feeds socket reads, timer expiries and commands to the pure
//! [`Session`], and applies its outputs in one place ([`PeerTask::apply_outputs`]). I/O.
//!
//! ```text
//!  BgpSpeaker ──watch(advertisements)──▶ ┌──────────── peer task ────────────┐
//!             ──watch(stop)────────────▶ │ select!{ commands, socket read,   │──▶ TCP to peer
//!             ◀──watch(PeerStatus)────── │          connect, earliest timer, │
//!                                        │          BFD status }              │
//!                                        │   Session::handle ─▶ apply_outputs │
//!                                        └────────────────────────────────────┘
//! ```
//!
//! With BFD configured, a BFD session to the peer starts with the first TCP connection (from
//! its local address) and lives as long as the task. BFD going down after it was up closes the
//! connection at once, as a broken connection would (RFC 5882 §4.1): nothing reaches a peer
//! cut off, so no NOTIFICATION is written. A peer that never brings BFD up keeps its BGP
//! session (BFD is then only reported, in [`PeerStatus::bfd`]).
//!
//! An unnumbered peer (`PeerConfig::interface`) has a second task, the neighbour discovery
//! ([`socket::discover_neighbour`]), which tells the peer task through a `watch` which router
//! is on the interface: connections go to that router's link-local address; while there is
//! none (or several), a connection attempt fails at once with the reason in
//! [`PeerStatus::last_error`], and the attempt is made again as soon as one router is found.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::{Advertisement, BfdSettings, PeerConfig};
use super::error::{CeaseReason, Notification};
use super::fsm::{Event, Input, Output, Session, State, Timer};
use super::socket::{self, ConnectError};
use crate::bfd::sessions::{BfdHandle, BfdPeer, BfdSessions, BfdStatus};
use crate::netdev::{BindError, DeviceName};

/// A write that makes no progress for this long counts as a broken connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const READ_CHUNK: usize = 64 * 1024;
/// A timer found due more than this long ago when the task runs again means the process stood
/// still (SIGSTOP, a paused VM, a stalled host): the task's own timers are never that late
/// otherwise.
const STOOD_STILL: Duration = Duration::from_millis(200);
/// How long a connection attempt waits after the task stood still: what changed meanwhile (its
/// Node excluded, a Service gone) waits in the speaker's watch connections and reaches the
/// advertisements within milliseconds on an idle machine; a session re-established first (the
/// first reconnect comes about 12 ms after a failure) would announce what the node no longer
/// may. 1 s leaves room for a loaded machine: a process that was frozen for seconds loses
/// nothing by waiting a second more, while its peer (BFD) already withdrew its routes. (It was
/// raised from 300 ms after a CI failure whose cause proved to be the test's: it froze a speaker
/// whose BFD session was not up yet, so the router kept the routes for the hold time.)
const WAKE_SETTLE: Duration = Duration::from_secs(1);

/// What the speaker can see of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerStatus {
    /// Current FSM state.
    pub state: State,
    /// Prefixes the peer currently holds from us.
    pub announced_prefixes: usize,
    /// UPDATE messages sent since the task started.
    pub updates_sent: u64,
    /// NOTIFICATIONs we sent, by [`crate::bgp::SessionError::metric_label`].
    pub notifications_sent: BTreeMap<&'static str, u64>,
    /// NOTIFICATIONs received, by `code/subcode`.
    pub notifications_received: BTreeMap<String, u64>,
    /// Malformed UPDATEs received and survived (RFC 7606), by
    /// [`crate::bgp::update_check::Handling::metric_label`].
    pub malformed_updates: BTreeMap<&'static str, u64>,
    /// The last malformed UPDATE survived, for humans.
    pub last_malformed: Option<String>,
    /// The last reason the session went down or could not come up, for humans.
    pub last_error: Option<String>,
    /// When `last_error` first read as it does (a repeat of the same error keeps the time).
    pub last_error_at: Option<SystemTime>,
    /// The last NOTIFICATION the peer sent.
    pub last_notification_received: Option<NotificationRecord>,
    /// The last NOTIFICATION we sent.
    pub last_notification_sent: Option<NotificationRecord>,
    /// Times the session reached Established.
    pub established_count: u64,
    /// Since when the session is Established (wall clock); `None` while it is not.
    pub established_since: Option<SystemTime>,
    /// IPv4 prefixes the peer holds from us.
    pub announced_v4: usize,
    /// IPv6 prefixes the peer holds from us.
    pub announced_v6: usize,
    /// The hold time agreed at OPEN (`None` before the OPENs are exchanged).
    pub hold_time: Option<Duration>,
    /// The keepalive interval in force.
    pub keepalive: Option<Duration>,
    /// The peer's AS number from its OPEN (`None` before the OPENs are exchanged).
    pub peer_as: Option<u32>,
    /// What both sides agreed at OPEN (`ipv4-unicast`, `ipv6-unicast`, `4-octet-as`,
    /// `graceful-restart`, `extended-nexthop`, `bgp-role`).
    pub capabilities: Vec<&'static str>,
    /// The BFD session's state (`Up`, `Down`, `Init`, `AdminDown`), when BFD is configured.
    pub bfd: Option<crate::bfd::State>,
    /// Times BFD going down closed the BGP session.
    pub bfd_downs: u64,
    /// The router found on the interface of an unnumbered peer (its link-local address).
    pub neighbour: Option<std::net::Ipv6Addr>,
    /// The BFD detection time in force (the peer's multiplier times the slower of our receive
    /// and its transmit interval; the 1 s floor applies until the session is Up and has
    /// agreed faster timers).
    pub bfd_detection_time: Option<Duration>,
    /// The peer's VRF device, while it does not exist on this node: the last connection
    /// attempt could not bind to it. Attempts go on (with the connect back-off) and the next
    /// one that binds clears this.
    pub missing_vrf: Option<DeviceName>,
}

impl Default for PeerStatus {
    fn default() -> Self {
        PeerStatus {
            state: State::Idle,
            announced_prefixes: 0,
            updates_sent: 0,
            notifications_sent: BTreeMap::new(),
            notifications_received: BTreeMap::new(),
            malformed_updates: BTreeMap::new(),
            last_malformed: None,
            last_error: None,
            last_error_at: None,
            last_notification_received: None,
            last_notification_sent: None,
            established_count: 0,
            established_since: None,
            announced_v4: 0,
            announced_v6: 0,
            hold_time: None,
            keepalive: None,
            peer_as: None,
            capabilities: Vec::new(),
            bfd: None,
            bfd_downs: 0,
            neighbour: None,
            bfd_detection_time: None,
            missing_vrf: None,
        }
    }
}

/// A NOTIFICATION sent or received, with when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotificationRecord {
    /// Error code.
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Code and subcode in words (and the shutdown message, when the peer sent one).
    pub message: String,
    /// When.
    pub at: SystemTime,
}

impl NotificationRecord {
    fn new(n: &Notification) -> Self {
        NotificationRecord {
            code: n.code,
            subcode: n.subcode,
            message: n.describe(),
            at: SystemTime::now(),
        }
    }
}

impl PeerStatus {
    /// Records `error` as the last error; its time changes only when the text does.
    pub fn set_error(&mut self, error: String) {
        if self.last_error.as_ref() != Some(&error) {
            self.last_error = Some(error);
            self.last_error_at = Some(SystemTime::now());
        }
    }
}

type Connecting = JoinHandle<Result<TcpStream, ConnectError>>;

/// The state of one peer task.
pub(crate) struct PeerTask {
    session: Session,
    reader: Option<OwnedReadHalf>,
    writer: Option<OwnedWriteHalf>,
    connecting: Option<Connecting>,
    timers: [Option<Instant>; 3],
    status: watch::Sender<PeerStatus>,
    pending: VecDeque<Input>,
    /// The speaker's BFD sessions (started on demand), ours once the first connection exists.
    bfd_sessions: BfdSessions,
    bfd: Option<(BfdHandle, watch::Receiver<BfdStatus>)>,
    bfd_was_up: bool,
    /// When the connection attempt under way started.
    connect_started: Option<Instant>,
    /// The BFD settings in force (they change without a restart of the task).
    bfd_settings: Option<BfdSettings>,
    /// The local address of the current or last connection (BFD runs from it).
    bfd_local: Option<std::net::IpAddr>,
    /// Until when connection attempts wait, after the task stood still ([`WAKE_SETTLE`]).
    settle_until: Option<Instant>,
    /// An unnumbered peer's neighbour discovery: what it found, and its task.
    discovery: Option<(watch::Receiver<socket::Discovery>, JoinHandle<()>)>,
    /// Where the current or last connection attempt went.
    remote: Option<std::net::SocketAddr>,
}

async fn discovery_changed(
    d: &mut Option<(watch::Receiver<socket::Discovery>, JoinHandle<()>)>,
) -> socket::Discovery {
    match d {
        Some((rx, _)) => match rx.changed().await {
            Ok(()) => rx.borrow_and_update().clone(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

async fn bfd_changed(bfd: &mut Option<(BfdHandle, watch::Receiver<BfdStatus>)>) -> BfdStatus {
    match bfd {
        Some((_, rx)) => match rx.changed().await {
            Ok(()) => rx.borrow_and_update().clone(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

const TIMERS: [Timer; 3] = [Timer::ConnectRetry, Timer::Hold, Timer::Keepalive];

fn timer_index(t: Timer) -> usize {
    TIMERS.iter().position(|x| *x == t).unwrap_or(0)
}

async fn read_some(reader: &mut Option<OwnedReadHalf>, buf: &mut [u8]) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn connected(c: &mut Option<Connecting>) -> Result<TcpStream, ConnectError> {
    match c {
        Some(h) => h
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()).into())),
        None => std::future::pending().await,
    }
}

impl PeerTask {
    /// Runs a peer until `stop` carries a reason.
    pub(crate) async fn run(
        config: PeerConfig,
        mut advertisements: watch::Receiver<Arc<Vec<Advertisement>>>,
        mut stop: watch::Receiver<Option<CeaseReason>>,
        mut bfd_config: watch::Receiver<Option<BfdSettings>>,
        status: watch::Sender<PeerStatus>,
        bfd_sessions: BfdSessions,
    ) {
        let bfd_settings = *bfd_config.borrow_and_update();
        let discovery = config.interface.clone().map(|interface| {
            let (tx, rx) = watch::channel(Err(super::unnumbered::NeighbourError::NoneYet {
                interface: interface.clone(),
            }));
            (rx, tokio::spawn(socket::discover_neighbour(interface, tx)))
        });
        let mut task = PeerTask {
            session: Session::new(config),
            reader: None,
            writer: None,
            connecting: None,
            timers: [None; 3],
            status,
            pending: VecDeque::new(),
            bfd_sessions,
            bfd: None,
            bfd_was_up: false,
            connect_started: None,
            bfd_settings,
            bfd_local: None,
            settle_until: None,
            discovery,
            remote: None,
        };
        let initial = advertisements.borrow_and_update().as_ref().clone();
        task.pending.push_back(Input::SetAdvertisements(initial));
        task.pending.push_back(Input::Start);
        task.drain().await;
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let next_timer = task
                .timers
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|at| (at, TIMERS[i])))
                .min_by_key(|(at, _)| *at);
            let input = tokio::select! {
                changed = stop.changed() => {
                    let reason = match changed {
                        Ok(()) => (*stop.borrow()).unwrap_or(CeaseReason::AdministrativeShutdown),
                        Err(_) => CeaseReason::AdministrativeShutdown,
                    };
                    task.stop(reason).await;
                    return;
                }
                found = discovery_changed(&mut task.discovery) => {
                    match task.neighbour_changed(found) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                Ok(()) = bfd_config.changed() => {
                    let settings = *bfd_config.borrow_and_update();
                    task.reconfigure_bfd(settings).await;
                    continue;
                }
                st = bfd_changed(&mut task.bfd) => {
                    if task.bfd_event(&st) {
                        Input::Closed
                    } else {
                        continue;
                    }
                }
                Ok(()) = advertisements.changed() => {
                    Input::SetAdvertisements(advertisements.borrow_and_update().as_ref().clone())
                }
                read = read_some(&mut task.reader, &mut buf) => match read {
                    Ok(0) | Err(_) => Input::Closed,
                    Ok(n) => Input::Received(buf[..n].to_vec()),
                },
                result = connected(&mut task.connecting) => task.connect_ended(result),
                () = sleep_until(next_timer.map(|(at, _)| at)) => {
                    let (_, t) = next_timer.expect("a timer was armed");
                    task.timers[timer_index(t)] = None;
                    Input::TimerExpired(t)
                }
            };
            if let Some((at, _)) = next_timer
                && Instant::now().saturating_duration_since(at) > STOOD_STILL
            {
                tracing::info!(late = ?Instant::now().saturating_duration_since(at), settle = ?WAKE_SETTLE,
                    "this speaker stood still: a new connection to the peer waits until what changed meanwhile has reached the advertisements");
                task.settle_until = Some(Instant::now() + WAKE_SETTLE);
            }
            task.pending.push_back(input);
            task.drain().await;
        }
    }

    /// Sends the NOTIFICATION for `reason` and stops: the connection attempt, BFD and the
    /// discovery of an unnumbered peer's router end with the session.
    async fn stop(&mut self, reason: CeaseReason) {
        self.pending.push_back(Input::Stop(reason));
        self.drain().await;
        if let Some(h) = self.connecting.take() {
            h.abort();
        }
        if let Some((handle, _)) = self.bfd.take() {
            handle.shutdown().await;
        }
        if let Some((_, discovery)) = self.discovery.take() {
            discovery.abort();
        }
    }

    /// A connection attempt ended: the session's input for it (BFD starts with the
    /// connection; a failure is reported in the peer's status).
    fn connect_ended(&mut self, result: Result<TcpStream, ConnectError>) -> Input {
        self.connecting = None;
        match result {
            Ok(stream) => match (stream.local_addr(), stream.peer_addr()) {
                (Ok(local), Ok(remote)) => {
                    self.device_found();
                    self.start_bfd(local.ip());
                    let (r, w) = stream.into_split();
                    self.reader = Some(r);
                    self.writer = Some(w);
                    Input::Connected {
                        local,
                        remote,
                        other_family: socket::other_family_address(local.ip()),
                    }
                }
                _ => Input::ConnectFailed,
            },
            Err(ConnectError::Device(e)) => {
                self.device_failed(e);
                Input::ConnectFailed
            }
            Err(ConnectError::Io(e)) => {
                tracing::debug!(error = %e, "connect failed");
                self.device_found();
                let to = self.remote();
                self.status
                    .send_modify(|s| s.set_error(format!("TCP connection to {to}: {e}")));
                Input::ConnectFailed
            }
        }
    }

    /// Records that the socket could not be bound to the peer's VRF device; logged once per
    /// change, retried by the FSM's connect back-off.
    fn device_failed(&mut self, e: BindError) {
        let peer = self.session.config().id.clone();
        let missing = matches!(e, BindError::Missing(_)).then(|| e.device());
        let message = e.to_string();
        let new = self.status.borrow().last_error.as_ref() != Some(&message);
        if new {
            tracing::warn!(%peer, vrf = %e.device(), reason = e.metric_label(), error = %e,
                "cannot open the BGP session in its VRF; retrying");
        }
        self.status.send_modify(|s| {
            s.missing_vrf = missing;
            s.set_error(message);
        });
    }

    /// Records that the socket was bound to the peer's VRF device (or needs none).
    fn device_found(&mut self) {
        let peer = self.session.config().id.clone();
        self.status
            .send_if_modified(|s| match s.missing_vrf.take() {
                Some(vrf) => {
                    tracing::info!(%peer, %vrf, "VRF device found; connecting in it");
                    true
                }
                None => false,
            });
    }

    /// The peer's address and port, for messages.
    fn remote(&self) -> std::net::SocketAddr {
        let c = self.session.config();
        self.remote
            .unwrap_or_else(|| std::net::SocketAddr::new(c.peer_address, c.peer_port))
    }

    /// Where to connect: the configured address, or the router found on the interface of an
    /// unnumbered peer (an error saying why there is none).
    fn target(&self) -> Result<std::net::SocketAddr, String> {
        let c = self.session.config();
        let Some((found, _)) = &self.discovery else {
            return Ok(std::net::SocketAddr::new(c.peer_address, c.peer_port));
        };
        match &*found.borrow() {
            Ok((router, index)) => Ok(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                *router,
                c.peer_port,
                0,
                *index,
            ))),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Reacts to what the neighbour discovery found: a router found while waiting to retry is
    /// connected to at once; a connection to another router than the one found now is closed
    /// (the session comes up again with the new one).
    fn neighbour_changed(&mut self, found: socket::Discovery) -> Option<Input> {
        let peer = self.session.config().id.clone();
        match &found {
            Ok((router, _)) => tracing::info!(%peer, %router, "unnumbered peer: router found"),
            Err(e) => {
                tracing::warn!(%peer, reason = e.metric_label(), error = %e, "unnumbered peer: no router to connect to")
            }
        }
        let router = found.as_ref().ok().map(|(r, _)| *r);
        self.status.send_modify(|s| {
            s.neighbour = router;
            if let Err(e) = &found {
                s.set_error(e.to_string());
            }
        });
        let connected = self.reader.is_some() || self.writer.is_some();
        let connected_to = self.remote.map(|r| r.ip());
        match (router, self.session.state()) {
            (Some(r), _) if connected && connected_to != Some(std::net::IpAddr::V6(r)) => {
                tracing::warn!(%peer, "unnumbered peer: another router on the link; reconnecting");
                self.reader = None;
                self.writer = None;
                Some(Input::Closed)
            }
            (Some(_), State::Idle | State::Active) if !connected => Some(Input::Start),
            _ => None,
        }
    }

    /// Applies new BFD settings without touching the BGP session: new timers go to the
    /// running BFD session (agreed through a Poll Sequence), BFD starts (when connected) or
    /// stops (AdminDown to the peer).
    async fn reconfigure_bfd(&mut self, settings: Option<BfdSettings>) {
        self.bfd_settings = settings;
        let peer = self.session.config().id.clone();
        match (settings, self.bfd.as_ref()) {
            (Some(s), Some((handle, _))) => {
                tracing::info!(%peer, "BFD profile changed: new timers for the running session");
                handle.set_config(s.session_config());
            }
            (Some(_), None) => {
                let connected = self.reader.is_some() || self.writer.is_some();
                if let (true, Some(local)) = (connected, self.bfd_local) {
                    self.start_bfd(local);
                }
            }
            (None, Some(_)) => {
                tracing::info!(%peer, "BFD profile removed: BFD stops, the BGP session stays");
                if let Some((handle, _)) = self.bfd.take() {
                    handle.shutdown().await;
                }
                self.bfd_was_up = false;
                self.status.send_modify(|s| {
                    s.bfd = None;
                    s.bfd_detection_time = None;
                });
            }
            (None, None) => {}
        }
    }

    /// Starts the BFD session with the peer from `local`, once, when BFD is configured.
    fn start_bfd(&mut self, local: std::net::IpAddr) {
        self.bfd_local = Some(local);
        let config = self.session.config();
        let Some(settings) = self.bfd_settings else {
            return;
        };
        if self.bfd.is_some() {
            return;
        }
        if config.interface.is_some() {
            tracing::warn!(peer = %config.id, "BFD is not run on unnumbered sessions; BGP runs without it");
            self.status.send_modify(|s| {
                s.set_error("BFD is not run on unnumbered sessions (peer given by interface); BGP runs without it".into())
            });
            return;
        }
        let peer = BfdPeer {
            local,
            peer: config.peer_address,
            device: config.vrf,
            multihop: config.ebgp_multihop,
            config: settings.session_config(),
        };
        let id = config.id.clone();
        match self.bfd_sessions.start(peer) {
            Ok(handle) => {
                let rx = handle.status();
                self.status.send_modify(|s| s.bfd = Some(rx.borrow().state));
                self.bfd = Some((handle, rx));
            }
            Err(e) => {
                tracing::warn!(peer = %id, error = %e, "cannot run BFD with the peer; BGP runs without it");
                self.status
                    .send_modify(|s| s.set_error(format!("BFD: {e}")));
            }
        }
    }

    /// Records a BFD status change; true when it must take the BGP session down (BFD went
    /// down after it was up, while connected).
    fn bfd_event(&mut self, st: &BfdStatus) -> bool {
        let up = st.state == crate::bfd::State::Up;
        self.status.send_if_modified(|s| {
            let changed = s.bfd != Some(st.state) || s.bfd_detection_time != st.detection_time;
            s.bfd = Some(st.state);
            s.bfd_detection_time = st.detection_time;
            changed
        });
        let went_down = self.bfd_was_up && !up;
        self.bfd_was_up = up;
        // A peer that takes its own BFD down administratively is not a failure (RFC 5882
        // §3.2): its BGP session goes on as it was.
        let peer_admin_down = st.remote_state == crate::bfd::State::AdminDown;
        if !went_down || peer_admin_down || (self.reader.is_none() && self.writer.is_none()) {
            return false;
        }
        let peer = self.session.config().id.clone();
        tracing::warn!(%peer, diag = ?st.local_diag, "BFD went down: closing the BGP session");
        self.reader = None;
        self.writer = None;
        self.status.send_modify(|s| {
            s.bfd_downs += 1;
            s.set_error(format!("BFD went down ({:?})", st.local_diag));
        });
        true
    }

    /// Feeds queued inputs to the session until none are left.
    async fn drain(&mut self) {
        while let Some(input) = self.pending.pop_front() {
            let now = Instant::now().into_std();
            let outputs = self.session.handle(now, input);
            self.apply_outputs(outputs).await;
        }
        let rib = self.session.adj_rib_out();
        let announced = rib.len();
        let state = self.session.state();
        let session = &self.session;
        self.status.send_if_modified(|s| {
            let changed = s.state != state || s.announced_prefixes != announced;
            if s.announced_prefixes != announced {
                // Only when the count changed: a walk of what was sent, after an UPDATE.
                s.announced_v4 = rib
                    .keys()
                    .filter(|p| matches!(p, ipnet::IpNet::V4(_)))
                    .count();
                s.announced_v6 = announced - s.announced_v4;
            }
            if s.state != state {
                s.established_since = (state == State::Established).then(SystemTime::now);
                let n = session.negotiated();
                s.hold_time = n.map(|n| n.hold_time);
                s.keepalive = n.map(|n| n.keepalive);
                s.peer_as = n.map(|n| n.peer_as);
                s.capabilities = n.map(negotiated_capabilities).unwrap_or_default();
            }
            s.state = state;
            s.announced_prefixes = announced;
            changed
        });
    }

    /// The only place where the session's outputs become socket operations and timers.
    async fn apply_outputs(&mut self, outputs: Vec<Output>) {
        for output in outputs {
            match output {
                Output::Connect => {
                    let config = self.session.config().clone();
                    self.connect_started = Some(Instant::now());
                    match self.target() {
                        Ok(remote) => {
                            self.remote = Some(remote);
                            let settle = self.settle_until.take();
                            self.connecting = Some(tokio::spawn(async move {
                                if let Some(at) = settle {
                                    tokio::time::sleep_until(at).await;
                                }
                                socket::connect_to(&config, remote).await
                            }));
                        }
                        Err(why) => {
                            self.status.send_modify(|s| s.set_error(why));
                            self.pending.push_back(Input::ConnectFailed);
                        }
                    }
                }
                Output::Send(bytes) => {
                    let Some(w) = self.writer.as_mut() else {
                        continue;
                    };
                    let written = tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&bytes)).await;
                    if !matches!(written, Ok(Ok(()))) {
                        self.reader = None;
                        self.writer = None;
                        self.pending.push_back(Input::Closed);
                    }
                }
                Output::Disconnect => {
                    if let Some(h) = self.connecting.take() {
                        if !h.is_finished() && self.session.state() == State::Active {
                            // The connect-retry timer ran out on the attempt: nothing answered.
                            let to = self.remote();
                            let waited = self
                                .connect_started
                                .map(|t| Duration::from_millis(t.elapsed().as_millis() as u64))
                                .unwrap_or_default();
                            self.status.send_modify(|s| {
                                s.set_error(format!(
                                    "no TCP connection to {to} within {waited:?}: no answer to the SYN \
                                     (with TCP-MD5, a password the peer does not share looks like this; \
                                     else a filter, or nothing listening)"
                                ))
                            });
                        }
                        h.abort();
                    }
                    self.reader = None;
                    if let Some(mut w) = self.writer.take() {
                        // Flushes what was written (a NOTIFICATION) before the FIN.
                        let _ = tokio::time::timeout(Duration::from_secs(1), w.shutdown()).await;
                    }
                }
                Output::SetTimer(t, at) => {
                    self.timers[timer_index(t)] = Some(Instant::from_std(at))
                }
                Output::CancelTimer(t) => self.timers[timer_index(t)] = None,
                Output::Event(e) => self.observe(e),
            }
        }
    }

    fn observe(&mut self, event: Event) {
        let peer = self.session.config().id.clone();
        match event {
            Event::StateChanged { from, to } => {
                tracing::info!(%peer, ?from, ?to, "BGP session state changed");
                if to == State::Established {
                    self.status.send_modify(|s| s.established_count += 1);
                }
            }
            Event::NotificationSent(e) => {
                tracing::warn!(%peer, error = %e, notification = %e.notification(), "sent NOTIFICATION");
                let n = e.notification();
                self.status.send_modify(|s| {
                    *s.notifications_sent.entry(e.metric_label()).or_default() += 1;
                    s.set_error(format!("we sent {n} ({e})"));
                    s.last_notification_sent = Some(NotificationRecord::new(&n));
                });
            }
            Event::NotificationReceived(n) => {
                tracing::warn!(%peer, notification = %n, message = ?n.shutdown_message(), "received NOTIFICATION");
                self.status.send_modify(|s| {
                    *s.notifications_received
                        .entry(format!("{}/{}", n.code, n.subcode))
                        .or_default() += 1;
                    s.set_error(format!("the peer sent {}", n.describe()));
                    s.last_notification_received = Some(NotificationRecord::new(&n));
                });
            }
            Event::UpdatesSent {
                messages,
                announced,
                withdrawn,
            } => {
                tracing::debug!(%peer, messages, announced, withdrawn, "sent UPDATEs");
                self.status
                    .send_modify(|s| s.updates_sent += messages as u64);
            }
            Event::MalformedUpdate(m) => {
                let handling = m.handling.metric_label();
                tracing::warn!(%peer, error = %m.error, handling,
                    "malformed UPDATE from the peer; session kept (RFC 7606)");
                self.status.send_modify(|s| {
                    *s.malformed_updates.entry(handling).or_default() += 1;
                    s.last_malformed = Some(format!("{handling}: {}", m.error));
                });
            }
            Event::NotAnnounced {
                prefixes,
                reason: reason @ super::fsm::NotAnnounced::FamilyNotConfigured,
            } => {
                // The configuration chose one family for this session: not a fault.
                tracing::debug!(%peer, count = prefixes.len(), first = ?prefixes.first(), ?reason, "prefixes of the other family not announced on this single-family session");
            }
            Event::NotAnnounced { prefixes, reason } => {
                tracing::warn!(%peer, count = prefixes.len(), first = ?prefixes.first(), ?reason, "prefixes not announced");
            }
        }
    }
}

/// What both sides agreed at OPEN, as the names `BGPSessionState` shows.
fn negotiated_capabilities(n: &super::fsm::Negotiated) -> Vec<&'static str> {
    use super::wire::Family;
    let mut out = Vec::new();
    if n.families.contains(&Family::IPV4_UNICAST) {
        out.push("ipv4-unicast");
    }
    if n.families.contains(&Family::IPV6_UNICAST) {
        out.push("ipv6-unicast");
    }
    if n.four_octet_as {
        out.push("4-octet-as");
    }
    if n.graceful_restart {
        out.push("graceful-restart");
    }
    if n.ipv4_over_ipv6 {
        out.push("extended-nexthop");
    }
    if n.our_role.is_some() && n.peer_role.is_some() {
        out.push("bgp-role");
    }
    if !n.add_path_send.is_empty() {
        out.push("add-path");
    }
    out
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
