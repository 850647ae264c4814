//! The BGP session state machine (RFC 4271 §8) for an announce-only speaker that opens the
//! connection itself. Pure: no I/O, no clock.
//!
//! The shell feeds [`Input`]s with the current time; the session answers with [`Output`]s: bytes
//! to write, a connection to open or close, timers to arm or cancel, and events to observe.
//!
//! What goes to the peer once Established (the Adj-RIB-Out, path identifiers, route refresh)
//! is in the `outbound` submodule.
//!
//! Deviations from the RFC, on purpose:
//! - We never accept connections (passive TCP establishment off), so there is no collision
//!   detection; Active is the state "waiting to retry after a failed connect".
//! - Automatic restart with damping (§8.1.1): after any session failure the ConnectRetry timer
//!   runs in Idle with an exponential back-off, reset once a session reaches Established.

mod outbound;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ipnet::IpNet;

use super::config::{Advertisement, GRACEFUL_RESTART_TIME, MAX_CONNECT_RETRY, PeerConfig, Role};
use super::error::{CeaseReason, FsmErrorState, Notification, SessionError};
use super::message::{Message, decode_message};
use super::open::{ADD_PATH_SEND, AS_TRANS, Capability, Open};
use super::rib::{PathIds, Routes, desired_routes};
use super::update::{EncodeError, encode_end_of_rib};
use super::wire::{DecodeContext, Family, encode_keepalive, encode_notification};

/// Hold timer while waiting for the peer's OPEN (RFC 4271 §8.2.2 suggests 4 minutes).
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);
/// How long one TCP connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a session must stay Established for its end to count as a fresh start: reconnect
/// after the base delay. A session that ends sooner (a peer that flaps, resets every session
/// it accepts, or drops it on a configuration it refuses) counts as one more failure, so the
/// back-off keeps growing up to [`MAX_CONNECT_RETRY`] instead of reconnecting at the base
/// rate for ever.
pub const STABLE_SESSION: Duration = Duration::from_secs(30);

/// Session states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum State {
    /// Not running, or waiting for the back-off before reconnecting.
    Idle,
    /// A TCP connection attempt is under way.
    Connect,
    /// The last attempt failed; waiting to retry.
    Active,
    /// Our OPEN is sent; waiting for the peer's.
    OpenSent,
    /// OPENs exchanged; waiting for the peer's KEEPALIVE.
    OpenConfirm,
    /// Routes flow.
    Established,
}

/// The session's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Bounds a connect attempt, and paces reconnects.
    ConnectRetry,
    /// Ends the session when the peer stays silent.
    Hold,
    /// Paces our KEEPALIVEs.
    Keepalive,
}

impl Timer {
    const ALL: [Timer; 3] = [Timer::ConnectRetry, Timer::Hold, Timer::Keepalive];
    fn index(self) -> usize {
        self as usize
    }
}

/// What happens to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Start connecting (ManualStart).
    Start,
    /// End the session with a Cease and stay down (ManualStop).
    Stop(CeaseReason),
    /// The TCP connection is up.
    Connected {
        /// Our end.
        local: SocketAddr,
        /// The peer's end.
        remote: SocketAddr,
        /// An address of the other family on the interface that carries `local`: the next hop
        /// for that family's routes when the configuration names none. When `local` is an
        /// IPv6 link-local address (BGP unnumbered), a global IPv6 address of the interface
        /// instead, if it has one: the global half of the RFC 2545 next hop.
        other_family: Option<IpAddr>,
    },
    /// The TCP connection attempt failed.
    ConnectFailed,
    /// The peer closed the connection, or it broke.
    Closed,
    /// Bytes read from the connection.
    Received(Vec<u8>),
    /// A timer armed by [`Output::SetTimer`] fired.
    TimerExpired(Timer),
    /// The complete set of routes this peer should have.
    SetAdvertisements(Vec<Advertisement>),
}

/// What the shell must do, or may observe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Open a TCP connection to the peer and report [`Input::Connected`] or
    /// [`Input::ConnectFailed`].
    Connect,
    /// Write these bytes (one or more whole messages) to the connection.
    Send(Vec<u8>),
    /// Close the connection, or abandon the attempt under way.
    Disconnect,
    /// Arm (or re-arm) a timer.
    SetTimer(Timer, Instant),
    /// Cancel a timer.
    CancelTimer(Timer),
    /// Something worth a log line, a metric or an Event.
    Event(Event),
}

/// Observable facts about the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The state changed.
    StateChanged {
        /// Old state.
        from: State,
        /// New state.
        to: State,
    },
    /// We sent a NOTIFICATION because of this error.
    NotificationSent(SessionError),
    /// The peer sent us a NOTIFICATION.
    NotificationReceived(Notification),
    /// UPDATEs went out.
    UpdatesSent {
        /// Messages written.
        messages: usize,
        /// Paths announced in them (prefixes, without ADD-PATH).
        announced: usize,
        /// Paths withdrawn in them.
        withdrawn: usize,
    },
    /// The peer sent an UPDATE that RFC 7606 handles without a reset (the session is kept).
    MalformedUpdate(crate::bgp::update_check::Malformed),
    /// Prefixes (or some of their paths) that could not be announced, and why.
    NotAnnounced {
        /// The prefixes.
        prefixes: Vec<IpNet>,
        /// Why.
        reason: NotAnnounced,
    },
}

/// Why a desired prefix is not announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotAnnounced {
    /// The peer did not negotiate the prefix's address family.
    FamilyNotNegotiated,
    /// The session is configured for the other family only (`dualStackAddressFamily: false`
    /// or `disableMP: true`).
    FamilyNotConfigured,
    /// See [`EncodeError`].
    Encode(EncodeError),
}

/// Values agreed with the peer at OPEN time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Hold time in effect; zero means no hold timer and no keepalives.
    pub hold_time: Duration,
    /// Our keepalive interval (zero when the hold time is zero).
    pub keepalive: Duration,
    /// Families both sides announced.
    pub families: Vec<Family>,
    /// Both sides speak 4-octet AS numbers.
    pub four_octet_as: bool,
    /// Both sides announced graceful restart.
    pub graceful_restart: bool,
    /// IPv4 routes go with an IPv6 next hop (RFC 8950): we offered it (unnumbered sessions
    /// only) and the peer announced it too.
    pub ipv4_over_ipv6: bool,
    /// Families whose paths we send with path identifiers, several per prefix (RFC 7911 §5):
    /// we offered ADD-PATH send ([`PeerConfig::add_path`]) and the peer offered receive.
    /// We never offer receive, so what the peer sends never carries path identifiers.
    pub add_path_send: Vec<Family>,
    /// The peer's BGP identifier.
    pub peer_id: Ipv4Addr,
    /// The peer's AS number, from its OPEN (what `dynamicASN` found).
    pub peer_as: u32,
    /// The BGP Role the peer announced (RFC 9234), when it announced one we know.
    pub peer_role: Option<Role>,
    /// Our BGP Role in force on this session (none on iBGP).
    pub our_role: Option<Role>,
}

/// One BGP session.
#[derive(Debug)]
pub struct Session {
    config: PeerConfig,
    state: State,
    stopped: bool,
    failures: u32,
    established_at: Option<Instant>,
    deadlines: [Option<Instant>; 3],
    rx: Vec<u8>,
    local: Option<SocketAddr>,
    other_family: Option<IpAddr>,
    negotiated: Option<Negotiated>,
    desired: Routes,
    adj_rib_out: Routes,
    path_ids: PathIds,
}

impl Session {
    /// A session in Idle; nothing happens until [`Input::Start`].
    pub fn new(config: PeerConfig) -> Self {
        Session {
            config,
            state: State::Idle,
            stopped: true,
            failures: 0,
            established_at: None,
            deadlines: [None; 3],
            rx: Vec::new(),
            local: None,
            other_family: None,
            negotiated: None,
            desired: Routes::new(),
            adj_rib_out: Routes::new(),
            path_ids: PathIds::default(),
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// What was agreed with the peer, while a session is past OpenSent.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Routes the peer has been sent and not withdrawn: each prefix with its paths (one
    /// without ADD-PATH).
    pub fn adj_rib_out(&self) -> &Routes {
        &self.adj_rib_out
    }

    /// The peer's configuration.
    pub fn config(&self) -> &PeerConfig {
        &self.config
    }

    /// Delay before the next reconnect: the configured base doubled per consecutive failure
    /// (a session that ended within [`STABLE_SESSION`] of reaching Established is one).
    pub fn backoff(&self) -> Duration {
        let factor = 1u32 << self.failures.saturating_sub(1).min(16);
        self.config
            .connect_retry
            .saturating_mul(factor)
            .min(MAX_CONNECT_RETRY)
    }

    /// Feeds one input and returns what to do.
    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Start => {
                self.stopped = false;
                if matches!(self.state, State::Idle | State::Active) {
                    self.connect(now, &mut out);
                }
            }
            Input::Stop(reason) => self.stop(now, reason, &mut out),
            Input::Connected {
                local,
                other_family,
                ..
            } => self.connected(now, local, other_family, &mut out),
            Input::ConnectFailed => {
                if self.state == State::Connect {
                    self.failures += 1;
                    out.push(Output::Disconnect);
                    self.set_timer(Timer::ConnectRetry, now + self.backoff(), &mut out);
                    self.goto(State::Active, &mut out);
                }
            }
            Input::Closed => {
                if matches!(
                    self.state,
                    State::OpenSent | State::OpenConfirm | State::Established
                ) {
                    self.session_down(now, None, &mut out);
                }
            }
            Input::Received(bytes) => self.received(now, &bytes, &mut out),
            Input::TimerExpired(t) => {
                // Ignore an expiry the session no longer expects (cancelled or re-armed since).
                if self.deadlines[t.index()].is_some_and(|d| d <= now) {
                    self.deadlines[t.index()] = None;
                    self.timer_expired(now, t, &mut out);
                }
            }
            Input::SetAdvertisements(advs) => {
                self.desired = desired_routes(advs);
                if self.state == State::Established {
                    self.sync(&mut out);
                }
            }
        }
        out
    }

    fn goto(&mut self, to: State, out: &mut Vec<Output>) {
        if self.state != to {
            out.push(Output::Event(Event::StateChanged {
                from: self.state,
                to,
            }));
            self.state = to;
        }
    }

    fn set_timer(&mut self, t: Timer, at: Instant, out: &mut Vec<Output>) {
        self.deadlines[t.index()] = Some(at);
        out.push(Output::SetTimer(t, at));
    }

    fn cancel_timer(&mut self, t: Timer, out: &mut Vec<Output>) {
        if self.deadlines[t.index()].take().is_some() {
            out.push(Output::CancelTimer(t));
        }
    }

    fn connect(&mut self, now: Instant, out: &mut Vec<Output>) {
        out.push(Output::Connect);
        self.set_timer(Timer::ConnectRetry, now + CONNECT_TIMEOUT, out);
        self.goto(State::Connect, out);
    }

    /// A session that stayed Established for [`STABLE_SESSION`] clears the failure count.
    fn session_ended(&mut self, now: Instant) {
        if self
            .established_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) >= STABLE_SESSION)
        {
            self.failures = 0;
        }
    }

    fn stop(&mut self, now: Instant, reason: CeaseReason, out: &mut Vec<Output>) {
        self.stopped = true;
        self.session_ended(now);
        if matches!(
            self.state,
            State::OpenSent | State::OpenConfirm | State::Established
        ) {
            self.notify(SessionError::Cease(reason), out);
        }
        if self.state != State::Idle {
            out.push(Output::Disconnect);
        }
        for t in Timer::ALL {
            self.cancel_timer(t, out);
        }
        self.reset_connection();
        self.goto(State::Idle, out);
    }

    fn reset_connection(&mut self) {
        self.rx = Vec::new();
        self.local = None;
        self.other_family = None;
        self.negotiated = None;
        self.adj_rib_out.clear();
        // RFC 7911: identifiers mean something only within a session.
        self.path_ids.clear();
    }

    fn notify(&mut self, e: SessionError, out: &mut Vec<Output>) {
        let mut bytes = Vec::new();
        encode_notification(&mut bytes, &e.notification());
        out.push(Output::Send(bytes));
        out.push(Output::Event(Event::NotificationSent(e)));
    }

    /// Ends the session (after sending a NOTIFICATION for `error`), and arms the reconnect.
    fn session_down(&mut self, now: Instant, error: Option<SessionError>, out: &mut Vec<Output>) {
        if let Some(e) = error {
            self.notify(e, out);
        }
        out.push(Output::Disconnect);
        self.cancel_timer(Timer::Hold, out);
        self.cancel_timer(Timer::Keepalive, out);
        self.reset_connection();
        self.session_ended(now);
        self.failures += 1;
        if !self.stopped {
            self.set_timer(Timer::ConnectRetry, now + self.backoff(), out);
        }
        self.goto(State::Idle, out);
    }

    fn connected(
        &mut self,
        now: Instant,
        local: SocketAddr,
        other_family: Option<IpAddr>,
        out: &mut Vec<Output>,
    ) {
        if self.state != State::Connect {
            // A connection we no longer want (stopped or timed out meanwhile).
            out.push(Output::Disconnect);
            return;
        }
        self.cancel_timer(Timer::ConnectRetry, out);
        self.local = Some(local);
        self.other_family = other_family;
        let mut bytes = Vec::new();
        self.our_open(local).encode(&mut bytes);
        out.push(Output::Send(bytes));
        self.set_timer(Timer::Hold, now + OPEN_HOLD_TIME, out);
        self.goto(State::OpenSent, out);
    }

    fn router_id(&self, local: SocketAddr) -> Ipv4Addr {
        if let Some(id) = self.config.router_id {
            return id;
        }
        match (local.ip(), self.config.next_hop_v4) {
            (IpAddr::V4(a), _) => a,
            (_, Some(a)) => a,
            (IpAddr::V6(a), None) => {
                let o = a.octets();
                Ipv4Addr::new(o[12], o[13], o[14], o[15])
            }
        }
    }

    fn our_open(&self, local: SocketAddr) -> Open {
        let families = self.config.families();
        let mut capabilities: Vec<Capability> = families
            .iter()
            .map(|f| Capability::Multiprotocol(*f))
            .collect();
        capabilities.push(Capability::RouteRefresh);
        if self.config.interface.is_some() {
            // RFC 8950 §3: with no IPv4 address on the link, IPv4 routes need an IPv6 next hop.
            capabilities.push(Capability::ExtendedNextHop(vec![(Family::IPV4_UNICAST, 2)]));
        }
        if self.config.graceful_restart {
            // F bit set: the data plane keeps forwarding while the speaker restarts.
            capabilities.push(Capability::GracefulRestart {
                restarted: false,
                restart_time: GRACEFUL_RESTART_TIME.as_secs() as u16,
                families: families.iter().map(|f| (*f, true)).collect(),
            });
        }
        if let Some(role) = self.config.ebgp_role() {
            capabilities.push(Capability::Role(role.value()));
        }
        if self.config.add_path {
            // RFC 7911 §4: send only; we keep nothing of the peer's routes.
            let v = families.iter().map(|f| (*f, ADD_PATH_SEND)).collect();
            capabilities.push(Capability::AddPath(v));
        }
        // The AS in force: `localASN` replaces `myASN` towards this peer.
        let local_as = self.config.local_as();
        capabilities.push(Capability::FourOctetAs(local_as));
        Open {
            my_as: u16::try_from(local_as).unwrap_or(AS_TRANS),
            hold_time: self.config.hold_time.as_secs().min(u64::from(u16::MAX)) as u16,
            bgp_id: self.router_id(local),
            capabilities,
        }
    }

    fn decode_context(&self) -> DecodeContext {
        DecodeContext {
            four_octet_as: self.negotiated.as_ref().is_some_and(|n| n.four_octet_as),
        }
    }

    fn received(&mut self, now: Instant, bytes: &[u8], out: &mut Vec<Output>) {
        if !matches!(
            self.state,
            State::OpenSent | State::OpenConfirm | State::Established
        ) {
            return;
        }
        self.rx.extend_from_slice(bytes);
        let mut used = 0;
        loop {
            match decode_message(&self.rx[used..], self.decode_context()) {
                Ok(None) => break,
                Ok(Some((message, len))) => {
                    used += len;
                    self.message(now, message, out);
                }
                Err(e) => {
                    self.session_down(now, Some(e), out);
                }
            }
            if !matches!(
                self.state,
                State::OpenSent | State::OpenConfirm | State::Established
            ) {
                // The session ended; whatever follows belongs to no session.
                self.rx.clear();
                return;
            }
        }
        self.rx.drain(..used);
    }

    fn message(&mut self, now: Instant, message: Message, out: &mut Vec<Output>) {
        if let Message::Notification(n) = message {
            out.push(Output::Event(Event::NotificationReceived(n)));
            self.session_down(now, None, out);
            return;
        }
        match (self.state, message) {
            (State::OpenSent, Message::Open(open)) => match self.accept_open(&open) {
                Ok(n) => {
                    let mut bytes = Vec::new();
                    encode_keepalive(&mut bytes);
                    out.push(Output::Send(bytes));
                    if n.hold_time.is_zero() {
                        self.cancel_timer(Timer::Hold, out);
                    } else {
                        self.set_timer(Timer::Hold, now + n.hold_time, out);
                        self.set_timer(Timer::Keepalive, now + n.keepalive, out);
                    }
                    self.negotiated = Some(n);
                    self.goto(State::OpenConfirm, out);
                }
                Err(e) => self.session_down(now, Some(e), out),
            },
            (State::OpenSent, _) => self.session_down(
                now,
                Some(SessionError::UnexpectedMessage(FsmErrorState::OpenSent)),
                out,
            ),
            (State::OpenConfirm, Message::Keepalive) => {
                self.restart_hold(now, out);
                // The back-off starts again only once the session has proved stable.
                self.established_at = Some(now);
                self.goto(State::Established, out);
                self.sync(out);
                let families = self.negotiated.as_ref().map(|n| n.families.clone());
                let mut bytes = Vec::new();
                for f in families.unwrap_or_default() {
                    encode_end_of_rib(&mut bytes, f);
                }
                out.push(Output::Send(bytes));
            }
            (State::OpenConfirm, _) => self.session_down(
                now,
                Some(SessionError::UnexpectedMessage(FsmErrorState::OpenConfirm)),
                out,
            ),
            (State::Established, Message::Keepalive) => self.restart_hold(now, out),
            (State::Established, Message::Update(summary)) => {
                self.restart_hold(now, out);
                // RFC 7606: treat-as-withdraw and attribute discard keep the session; with
                // nothing of the peer's kept, there is nothing else to do but say so.
                if let Some(malformed) = summary.malformed {
                    out.push(Output::Event(Event::MalformedUpdate(malformed)));
                }
            }
            (State::Established, Message::RouteRefresh(rr)) => {
                self.restart_hold(now, out);
                // Subtypes 1 and 2 (BoRR/EoRR) only bracket a peer's own re-advertisement.
                if rr.subtype == 0 {
                    self.refresh(rr.family, out);
                }
            }
            (State::Established, _) => self.session_down(
                now,
                Some(SessionError::UnexpectedMessage(FsmErrorState::Established)),
                out,
            ),
            // received() only decodes in the three states above.
            _ => {}
        }
    }

    fn restart_hold(&mut self, now: Instant, out: &mut Vec<Output>) {
        if let Some(n) = &self.negotiated
            && !n.hold_time.is_zero()
        {
            let at = now + n.hold_time;
            self.deadlines[Timer::Hold.index()] = Some(at);
            out.push(Output::SetTimer(Timer::Hold, at));
        }
    }

    /// Checks the peer's OPEN against our configuration (RFC 4271 §6.2) and negotiates.
    fn accept_open(&self, open: &Open) -> Result<Negotiated, SessionError> {
        let peer_as = open.asn();
        if self.config.peer_asn_external {
            // "External" is relative to the AS we present (`localASN` when set).
            if peer_as == self.config.local_as() {
                return Err(SessionError::PeerAsNotExternal { received: peer_as });
            }
        } else if peer_as != self.config.peer_asn {
            return Err(SessionError::BadPeerAs {
                received: peer_as,
                expected: self.config.peer_asn,
            });
        }
        let our_id = self.local.map(|l| self.router_id(l));
        if open.bgp_id.is_unspecified() || (self.config.is_ibgp() && Some(open.bgp_id) == our_id) {
            return Err(SessionError::BadBgpId);
        }
        if matches!(open.hold_time, 1 | 2) {
            return Err(SessionError::UnacceptableHoldTime {
                hold_time: open.hold_time,
            });
        }
        let peer_role = self.check_roles(open)?;
        let ours = self.config.hold_time.as_secs().min(u64::from(u16::MAX)) as u16;
        let hold_time = Duration::from_secs(u64::from(ours.min(open.hold_time)));
        let keepalive = match self.config.keepalive_time {
            _ if hold_time.is_zero() => Duration::ZERO,
            Some(k) if !k.is_zero() && k < hold_time => k,
            _ => hold_time / 3,
        };
        let theirs = open.families();
        let families: Vec<Family> = self
            .config
            .families()
            .iter()
            .copied()
            .filter(|f| theirs.contains(f))
            .collect();
        // RFC 7911 §5: path identifiers go where we offered send and the peer receive.
        let add_path_send = families
            .iter()
            .copied()
            .filter(|f| self.config.add_path && open.add_path_receive(*f))
            .collect();
        Ok(Negotiated {
            hold_time,
            keepalive,
            families,
            four_octet_as: open.four_octet_as(),
            graceful_restart: self.config.graceful_restart
                && open.has(|c| matches!(c, Capability::GracefulRestart { .. })),
            peer_id: open.bgp_id,
            ipv4_over_ipv6: self.config.interface.is_some()
                && open.extended_next_hop(Family::IPV4_UNICAST, 2),
            add_path_send,
            peer_as,
            peer_role,
            our_role: self.config.ebgp_role(),
        })
    }

    /// RFC 9234 §4.2: with a role of ours on an eBGP session, the peer's must be its
    /// counterpart, announced once or in agreeing copies; none is accepted unless
    /// `strictRole`. A role the peer announces when we have none is only recorded.
    fn check_roles(&self, open: &Open) -> Result<Option<Role>, SessionError> {
        if self.config.is_ibgp() {
            // RFC 9234 §4: roles belong to eBGP; on iBGP the capability is ignored.
            return Ok(None);
        }
        let mut theirs: Vec<u8> = Vec::new();
        for r in open.roles() {
            if !theirs.contains(&r) {
                theirs.push(r);
            }
        }
        let mismatch = |ours| SessionError::RoleMismatch {
            ours,
            theirs: theirs.clone(),
        };
        match (self.config.ebgp_role(), theirs.as_slice()) {
            (Some(ours), [_, _, ..]) => Err(mismatch(ours)),
            (Some(ours), []) if self.config.strict_role => Err(mismatch(ours)),
            (Some(ours), [one]) if Role::from_value(*one) != Some(ours.counterpart()) => {
                Err(mismatch(ours))
            }
            (_, [one]) => Ok(Role::from_value(*one)),
            _ => Ok(None),
        }
    }

    fn timer_expired(&mut self, now: Instant, t: Timer, out: &mut Vec<Output>) {
        match (t, self.state) {
            (Timer::ConnectRetry, State::Idle | State::Active) if !self.stopped => {
                self.connect(now, out)
            }
            (Timer::ConnectRetry, State::Connect) => {
                self.failures += 1;
                out.push(Output::Disconnect);
                self.set_timer(Timer::ConnectRetry, now + self.backoff(), out);
                self.goto(State::Active, out);
            }
            (Timer::Hold, State::OpenSent | State::OpenConfirm | State::Established) => {
                self.session_down(now, Some(SessionError::HoldTimerExpired), out)
            }
            (Timer::Keepalive, State::OpenConfirm | State::Established) => {
                let mut bytes = Vec::new();
                encode_keepalive(&mut bytes);
                out.push(Output::Send(bytes));
                if let Some(k) = self.negotiated.as_ref().map(|n| n.keepalive) {
                    self.set_timer(Timer::Keepalive, now + k, out);
                }
            }
            _ => {}
        }
    }
}
