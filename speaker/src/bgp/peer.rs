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

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::{Advertisement, PeerConfig};
use super::error::CeaseReason;
use super::fsm::{Event, Input, Output, Session, State, Timer};
use super::socket;
use crate::bfd::shell::{BfdHandle, BfdPeer, BfdSessions, BfdStatus};

/// A write that makes no progress for this long counts as a broken connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const READ_CHUNK: usize = 64 * 1024;

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
    /// The last reason the session went down, for humans.
    pub last_error: Option<String>,
    /// Times the session reached Established.
    pub established_count: u64,
    /// The BFD session's state (`Up`, `Down`, `Init`, `AdminDown`), when BFD is configured.
    pub bfd: Option<crate::bfd::State>,
    /// Times BFD going down closed the BGP session.
    pub bfd_downs: u64,
    /// The BFD detection time in force (the peer's multiplier times the slower of our receive
    /// and its transmit interval; the 1 s floor applies until the session is Up and has
    /// agreed faster timers).
    pub bfd_detection_time: Option<Duration>,
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
            established_count: 0,
            bfd: None,
            bfd_downs: 0,
            bfd_detection_time: None,
        }
    }
}

type Connecting = JoinHandle<std::io::Result<TcpStream>>;

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

async fn connected(c: &mut Option<Connecting>) -> std::io::Result<TcpStream> {
    match c {
        Some(h) => h
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
        None => std::future::pending().await,
    }
}

impl PeerTask {
    /// Runs a peer until `stop` carries a reason.
    pub(crate) async fn run(
        config: PeerConfig,
        mut advertisements: watch::Receiver<Arc<Vec<Advertisement>>>,
        mut stop: watch::Receiver<Option<CeaseReason>>,
        status: watch::Sender<PeerStatus>,
        bfd_sessions: BfdSessions,
    ) {
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
                    task.pending.push_back(Input::Stop(reason));
                    task.drain().await;
                    if let Some(h) = task.connecting.take() {
                        h.abort();
                    }
                    if let Some((handle, _)) = task.bfd.take() {
                        handle.shutdown().await;
                    }
                    return;
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
                result = connected(&mut task.connecting) => {
                    task.connecting = None;
                    match result {
                        Ok(stream) => match (stream.local_addr(), stream.peer_addr()) {
                            (Ok(local), Ok(remote)) => {
                                task.start_bfd(local.ip());
                                let (r, w) = stream.into_split();
                                task.reader = Some(r);
                                task.writer = Some(w);
                                Input::Connected {
                                    local,
                                    remote,
                                    other_family: socket::other_family_address(local.ip()),
                                }
                            }
                            _ => Input::ConnectFailed,
                        },
                        Err(e) => {
                            tracing::debug!(error = %e, "connect failed");
                            Input::ConnectFailed
                        }
                    }
                }
                () = sleep_until(next_timer.map(|(at, _)| at)) => {
                    let (_, t) = next_timer.expect("a timer was armed");
                    task.timers[timer_index(t)] = None;
                    Input::TimerExpired(t)
                }
            };
            task.pending.push_back(input);
            task.drain().await;
        }
    }

    /// Starts the BFD session with the peer from `local`, once, when BFD is configured.
    fn start_bfd(&mut self, local: std::net::IpAddr) {
        let config = self.session.config();
        let Some(settings) = config.bfd else { return };
        if self.bfd.is_some() {
            return;
        }
        let peer = BfdPeer {
            local,
            peer: config.peer_address,
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
                    .send_modify(|s| s.last_error = Some(format!("BFD: {e}")));
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
            s.last_error = Some(format!("BFD went down ({:?})", st.local_diag));
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
        let announced = self.session.adj_rib_out().len();
        let state = self.session.state();
        self.status.send_if_modified(|s| {
            let changed = s.state != state || s.announced_prefixes != announced;
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
                    self.connecting =
                        Some(tokio::spawn(async move { socket::connect(&config).await }));
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
                self.status.send_modify(|s| {
                    *s.notifications_sent.entry(e.metric_label()).or_default() += 1;
                    s.last_error = Some(format!("we sent {}: {e}", e.notification()));
                });
            }
            Event::NotificationReceived(n) => {
                tracing::warn!(%peer, notification = %n, message = ?n.shutdown_message(), "received NOTIFICATION");
                self.status.send_modify(|s| {
                    *s.notifications_received
                        .entry(format!("{}/{}", n.code, n.subcode))
                        .or_default() += 1;
                    s.last_error = Some(format!("peer sent {n}"));
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
            Event::NotAnnounced { prefixes, reason } => {
                tracing::warn!(%peer, count = prefixes.len(), first = ?prefixes.first(), ?reason, "prefixes not announced");
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
