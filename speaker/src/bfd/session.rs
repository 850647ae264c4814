//! One BFD session, asynchronous mode (RFC 5880 §6.8). Pure: no I/O, no clock; time comes in as
//! `Instant` arguments and packets as decoded [`ControlPacket`]s.
//!
//! The shell calls [`Session::receive`] for every packet demultiplexed to this session,
//! [`Session::poll`] whenever [`Session::next_wakeup`] has passed, and applies the [`Output`]s:
//! packets to send, state changes to report.
//!
//! # Guarantees
//!
//! - Every packet we send passes every check of [`decode`](super::packet::decode): version 1,
//!   Detect Mult ≥ 1, nonzero My Discriminator, Your Discriminator zero only while Down or
//!   AdminDown, never both Poll and Final, never authentication, multipoint or demand.
//! - Periodic packets are spaced by the transmit interval (§6.8.7: the larger of our
//!   DesiredMinTxInterval and the peer's RequiredMinRxInterval) reduced by a jitter of 0–25 %
//!   (10–25 % when our Detect Mult is 1, so the gap stays within 75–90 %), drawn per packet from
//!   a generator seeded by our discriminator, so a run is reproducible. A packet received once
//!   75 % of the interval has passed brings the next periodic packet forward to that moment,
//!   and the one after it then waits for the peer's next packet up to the longest gap allowed
//!   ([`Session::receive`]): every gap stays within the allowed range, and with a peer on the
//!   same interval the shell wakes once per interval for both packets.
//! - While the session is not Up we advertise a DesiredMinTxInterval of at least one second
//!   (§6.8.3). Every change of the advertised intervals runs a Poll Sequence (§6.5); a slower
//!   transmit interval, or a smaller receive interval (hence a shorter detection time), only
//!   takes effect once the peer's Final arrives; a faster transmit or a larger receive interval
//!   at once. A change made while a Poll Sequence runs waits until it ends and one more packet
//!   without Final is received (§6.8.3, third option), so a Final always answers the values it
//!   acknowledges.
//! - A Poll is answered with a Final from [`Session::receive`] itself, whatever the timers say.
//!
//! # Caveats
//!
//! - No Demand mode of our own, no Echo function, no authentication. A peer that asks for Demand
//!   mode is honoured (we stop periodic packets while both ends are Up, §6.8.7).
//! - Going Down or AdminDown abandons a Poll Sequence in flight: the intervals are
//!   re-derived at once (the one-second floor of §6.8.3 must apply while not Up) and a new Poll
//!   Sequence announces them.
//! - AdminDown keeps sending AdminDown packets at the slow rate for as long as it lasts (§6.8.16
//!   asks for at least a detection time), and the detection timer does not run. The first one
//!   goes out at once, from [`Session::set_admin_down`], outside the transmit interval of
//!   §6.8.7 (as a Final does): the slow rate takes effect at once, and without it the peer's
//!   detection time (3 x 300 ms with the default profile) often ran out before our next packet,
//!   so the peer saw a failure instead of AdminDown (RFC 5882 §3.2).

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use super::packet::{ControlPacket, Diag, PacketError, State, VERSION};

/// The floor of the advertised DesiredMinTxInterval while the session is not Up (RFC 5880
/// §6.8.3).
pub const SLOW_TX_INTERVAL: Duration = Duration::from_secs(1);

/// The longest interval the 32-bit microsecond fields can carry (about 71 minutes).
pub const MAX_INTERVAL: Duration = Duration::from_micros(u32::MAX as u64);

/// How a session runs: the values of a BFD profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionConfig {
    /// bfd.DesiredMinTxInterval once Up: how often we would like to send.
    pub desired_min_tx: Duration,
    /// bfd.RequiredMinRxInterval: the fastest rate at which we accept the peer's packets.
    pub required_min_rx: Duration,
    /// bfd.DetectMult: the peer declares us down after this many missed intervals.
    pub detect_mult: u8,
    /// Passive role (§6.1): send nothing until the peer is heard.
    pub passive: bool,
    /// Lowest TTL / hop limit accepted on received packets. Not used by the session: carried for
    /// the shell, which checks it (RFC 5881 §5 wants 255 for single hop; RFC 5883 §5 leaves
    /// multihop to configuration).
    pub minimum_ttl: u8,
}

impl Default for SessionConfig {
    /// The defaults of MetalLB's BFDProfile: 300 ms / 300 ms, multiplier 3, active, minimum TTL
    /// 254.
    fn default() -> Self {
        SessionConfig {
            desired_min_tx: Duration::from_millis(300),
            required_min_rx: Duration::from_millis(300),
            detect_mult: 3,
            passive: false,
            minimum_ttl: 254,
        }
    }
}

/// A configuration that the protocol cannot carry. [`Session`] never fails on one (it clamps, as
/// documented on each variant); the shell should report it with [`SessionConfig::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ConfigError {
    /// Detect Mult 0; the session uses 1.
    #[error("BFD detect multiplier is 0; it must be between 1 and 255 (1 is used)")]
    ZeroDetectMult,
    /// A transmit interval below one microsecond; the session uses 1 µs.
    #[error(
        "BFD transmit interval is below one microsecond; set it in milliseconds (1 µs is used)"
    )]
    ZeroTransmitInterval,
    /// A receive interval below one microsecond: the peer is asked to send nothing, and the
    /// session can never stay Up.
    #[error(
        "BFD receive interval is below one microsecond, which asks the peer to send nothing, so \
         the session cannot stay up; set it in milliseconds"
    )]
    ZeroReceiveInterval,
    /// An interval longer than [`MAX_INTERVAL`]; the session uses [`MAX_INTERVAL`].
    #[error(
        "BFD interval {value:?} is longer than the protocol's maximum of {MAX_INTERVAL:?}, which is used instead"
    )]
    IntervalTooLong {
        /// The interval configured.
        value: Duration,
    },
}

impl ConfigError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ConfigError::ZeroDetectMult => "zero_detect_mult",
            ConfigError::ZeroTransmitInterval => "zero_transmit_interval",
            ConfigError::ZeroReceiveInterval => "zero_receive_interval",
            ConfigError::IntervalTooLong { .. } => "interval_too_long",
        }
    }
}

impl SessionConfig {
    /// Whether the protocol can carry this configuration as it is.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.detect_mult == 0 {
            return Err(ConfigError::ZeroDetectMult);
        }
        for value in [self.desired_min_tx, self.required_min_rx] {
            if value > MAX_INTERVAL {
                return Err(ConfigError::IntervalTooLong { value });
            }
        }
        if self.desired_min_tx < Duration::from_micros(1) {
            return Err(ConfigError::ZeroTransmitInterval);
        }
        if self.required_min_rx < Duration::from_micros(1) {
            return Err(ConfigError::ZeroReceiveInterval);
        }
        Ok(())
    }

    fn wire_detect_mult(&self) -> u8 {
        self.detect_mult.max(1)
    }
}

/// What the shell must do, or may observe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send this packet to the peer (encode it with [`ControlPacket::encode`]).
    Send(ControlPacket),
    /// The session changed state; `diag` is the reason we now advertise. A change to Down with
    /// [`Diag::NeighborSignaledDown`] while [`Session::remote_state`] is AdminDown means the peer
    /// was disabled on purpose, which RFC 5882 §3.2 says clients should not treat as a failure.
    StateChanged {
        /// The state before.
        from: State,
        /// The state now.
        to: State,
        /// bfd.LocalDiag after the change.
        diag: Diag,
    },
    /// A packet was not for this session or not valid; nothing else happened.
    Discarded(Discard),
}

/// Why [`Session::receive`] dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Discard {
    /// Your Discriminator is set and is not ours (§6.8.6).
    #[error(
        "BFD packet for discriminator {received} reached the session with discriminator {ours}; \
         the shell's demultiplexing is wrong, or the peer has stale state"
    )]
    NotOurDiscriminator {
        /// The packet's Your Discriminator.
        received: u32,
        /// Our discriminator.
        ours: u32,
    },
    /// The packet fails a check of [`decode`](super::packet::decode) (it was not decoded by it).
    #[error(transparent)]
    Invalid(#[from] PacketError),
}

impl Discard {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Discard::NotOurDiscriminator { .. } => "not_our_discriminator",
            Discard::Invalid(e) => e.metric_label(),
        }
    }
}

/// The two intervals a session advertises, in microseconds as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timers {
    /// bfd.DesiredMinTxInterval.
    tx: u32,
    /// bfd.RequiredMinRxInterval.
    rx: u32,
}

/// Where the Poll Sequence (§6.5) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollSequence {
    /// None in flight; a change may start one.
    Idle,
    /// Our periodic packets carry Poll until a Final arrives.
    Polling,
    /// The Final arrived; the next change waits for a packet without Final (§6.8.3).
    AwaitingClear,
}

/// What the peer last told us (the bfd.Remote* variables of §6.8.1).
#[derive(Debug, Clone, Copy)]
struct Remote {
    /// bfd.RemoteDiscr; zero when unknown.
    discr: u32,
    /// bfd.RemoteSessionState.
    state: State,
    /// bfd.RemoteDemandMode.
    demand: bool,
    /// bfd.RemoteMinRxInterval, in µs; 1 until heard (§6.8.1).
    min_rx: u32,
    /// The peer's Desired Min TX Interval (µs) and Detect Mult, once heard.
    heard: Option<(u32, u8)>,
}

/// One BFD session. See the module documentation for what it guarantees.
#[derive(Debug, Clone)]
pub struct Session {
    config: SessionConfig,
    local_discr: NonZeroU32,
    state: State,
    local_diag: Diag,
    remote: Remote,
    /// What our packets carry.
    advertised: Timers,
    /// What our timers use: differs from `advertised` while a Poll Sequence holds back a change.
    in_use: Timers,
    poll_sequence: PollSequence,
    /// Last valid packet received, while the detection timer runs.
    last_rx: Option<Instant>,
    /// Last periodic packet sent.
    last_tx: Option<Instant>,
    /// When the session was created: the first packet is due then.
    created: Instant,
    rng: SplitMix64,
    /// This packet's jitter draw, 0..=u16::MAX across the allowed reduction.
    jitter: u16,
    /// Our last periodic packet went out with a packet of the peer's ([`Session::receive`]):
    /// the next one waits for the peer's next packet, up to the longest gap allowed.
    led: bool,
}

impl Session {
    /// A session in state Down. `my_discriminator` must be unique among the local sessions (the
    /// shell demultiplexes on it). The first packet is due at `now` unless `config.passive`.
    pub fn new(my_discriminator: NonZeroU32, config: SessionConfig, now: Instant) -> Session {
        let mut rng = SplitMix64::new(u64::from(my_discriminator.get()));
        let jitter = rng.next_u64() as u16;
        let mut session = Session {
            config,
            local_discr: my_discriminator,
            state: State::Down,
            local_diag: Diag::NoDiagnostic,
            remote: Remote {
                discr: 0,
                state: State::Down,
                demand: false,
                min_rx: 1,
                heard: None,
            },
            advertised: Timers { tx: 0, rx: 0 },
            in_use: Timers { tx: 0, rx: 0 },
            poll_sequence: PollSequence::Idle,
            last_rx: None,
            last_tx: None,
            created: now,
            rng,
            jitter,
            led: false,
        };
        session.advertised = session.wanted();
        session.in_use = session.advertised;
        session
    }

    /// Handles a packet the shell demultiplexed to this session (RFC 5880 §6.8.6, from "If the
    /// Your Discriminator field is nonzero" on). `packet` should come from
    /// [`decode`](super::packet::decode); its checks are repeated here all the same.
    pub fn receive(&mut self, packet: &ControlPacket, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        if let Err(e) = packet.check() {
            out.push(Output::Discarded(Discard::Invalid(e)));
            return out;
        }
        let ours = self.local_discr.get();
        if packet.your_discriminator != 0 && packet.your_discriminator != ours {
            out.push(Output::Discarded(Discard::NotOurDiscriminator {
                received: packet.your_discriminator,
                ours,
            }));
            return out;
        }
        self.remote = Remote {
            discr: packet.my_discriminator,
            state: packet.state,
            demand: packet.demand,
            min_rx: packet.required_min_rx,
            heard: Some((packet.desired_min_tx, packet.detect_mult)),
        };
        match (packet.fin, self.poll_sequence) {
            (true, PollSequence::Polling) => {
                self.in_use = self.advertised;
                self.poll_sequence = PollSequence::AwaitingClear;
            }
            (false, PollSequence::AwaitingClear) => self.poll_sequence = PollSequence::Idle,
            _ => {}
        }
        if self.state == State::AdminDown {
            // Discarded after the remote variables are noted (§6.8.6); no Final either.
            self.sync_timers();
            return out;
        }
        if let Some((to, diag)) = next_state(self.state, packet.state) {
            self.transition(to, diag, &mut out);
        }
        self.sync_timers();
        if packet.poll {
            out.push(Output::Send(self.control_packet(false, true)));
        } else {
            self.send_early(now, &mut out);
        }
        self.last_rx = Some(now);
        out
    }

    /// Sends the next periodic packet now, with the wake-up a received packet caused, when
    /// at least the shortest gap the jitter allows (75 % of the interval, §6.8.7) has passed
    /// since the last one; the shell is then not woken again a few milliseconds later for it.
    /// A packet sent so waits for the peer's next packet, up to the longest gap allowed (100 %,
    /// or 90 % with a Detect Mult of 1), instead of a gap of its own draw: with a peer on the
    /// same interval (its own gaps jittered within 75-100 %), each of our packets then goes out
    /// with one of its, and the session costs one wake-up per interval instead of two. Our gaps
    /// are then the peer's, random within the allowed range; when the peer's packet does not
    /// come by the longest gap, our timer sends, and the gap after that is drawn again.
    fn send_early(&mut self, now: Instant, out: &mut Vec<Output>) {
        let Some(last) = self.last_tx else {
            return;
        };
        if self.transmit_due().is_none() {
            return;
        }
        if now.saturating_duration_since(last) >= Self::shortest_gap(self.transmit_interval()) {
            self.send_periodic(now, true, out);
        }
    }

    /// The periodic packet (§6.8.7), a Poll while a Poll Sequence runs; `led`: it goes out with
    /// a packet of the peer's ([`Session::send_early`]).
    fn send_periodic(&mut self, now: Instant, led: bool, out: &mut Vec<Output>) {
        let polling = self.poll_sequence == PollSequence::Polling;
        out.push(Output::Send(self.control_packet(polling, false)));
        self.last_tx = Some(now);
        self.led = led;
        self.jitter = self.rng.next_u64() as u16;
    }

    /// Runs the timers due at `now`: the detection time (§6.8.4) and the periodic transmission
    /// (§6.8.7). Cheap when nothing is due; call it at least at [`Session::next_wakeup`].
    pub fn poll(&mut self, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        if let Some(deadline) = self.detection_deadline()
            && now >= deadline
        {
            // §6.8.1: bfd.RemoteDiscr is zeroed when a detection time passes in silence.
            self.last_rx = None;
            self.remote.discr = 0;
            if matches!(self.state, State::Init | State::Up) {
                self.transition(State::Down, Diag::ControlDetectionTimeExpired, &mut out);
                self.sync_timers();
            }
        }
        if let Some(due) = self.transmit_due()
            && now >= due
        {
            self.send_periodic(now, false, &mut out);
        }
        out
    }

    /// The earliest time [`Session::poll`] has something to do, or `None` when nothing will
    /// happen until a packet arrives or the configuration changes (a passive session that never
    /// heard its peer, a peer that asked for no packets and went silent).
    pub fn next_wakeup(&self) -> Option<Instant> {
        match (self.transmit_due(), self.detection_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Disables the session (§6.8.16): state AdminDown, diag Administratively Down. The first
    /// AdminDown packet is among the outputs, unless the session sends nothing at all (passive
    /// and never heard, or asked for no packets); more keep going out at the slow rate, counted
    /// from the last periodic packet. Packets from the peer are ignored.
    pub fn set_admin_down(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        if self.state != State::AdminDown {
            self.transition(State::AdminDown, Diag::AdministrativelyDown, &mut out);
            self.last_rx = None;
            self.sync_timers();
            if self.transmitting() {
                let polling = self.poll_sequence == PollSequence::Polling;
                out.push(Output::Send(self.control_packet(polling, false)));
            }
        }
        out
    }

    /// Enables a disabled session (§6.8.16): state Down, as if new.
    pub fn set_admin_up(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        if self.state == State::AdminDown {
            self.transition(State::Down, Diag::NoDiagnostic, &mut out);
            self.sync_timers();
        }
        out
    }

    /// Replaces the configuration. A change of the advertised intervals starts a Poll Sequence
    /// (or waits for the one in flight, see the module documentation); a faster transmit
    /// interval applies at once, a slower one once the peer's Final arrives (§6.8.3). Values the
    /// protocol cannot carry are clamped (see [`SessionConfig::validate`]).
    pub fn set_config(&mut self, config: SessionConfig) {
        self.config = config;
        self.sync_timers();
    }

    /// bfd.SessionState.
    pub fn state(&self) -> State {
        self.state
    }

    /// bfd.LocalDiag: why the session last changed state, as our packets say.
    pub fn local_diag(&self) -> Diag {
        self.local_diag
    }

    /// bfd.LocalDiscr.
    pub fn local_discriminator(&self) -> NonZeroU32 {
        self.local_discr
    }

    /// bfd.RemoteDiscr, when known (it is forgotten after a detection time of silence).
    pub fn remote_discriminator(&self) -> Option<NonZeroU32> {
        NonZeroU32::new(self.remote.discr)
    }

    /// bfd.RemoteSessionState: the state in the peer's last packet (Down until one arrives).
    pub fn remote_state(&self) -> State {
        self.remote.state
    }

    /// The configuration in force.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Whether our packets carry Poll: a change of our intervals awaits the peer's Final.
    pub fn poll_in_progress(&self) -> bool {
        self.poll_sequence == PollSequence::Polling
    }

    /// The detection time (§6.8.4): the peer's Detect Mult times the larger of our
    /// RequiredMinRxInterval and the peer's last Desired Min TX Interval; `None` until the peer
    /// is heard.
    pub fn detection_time(&self) -> Option<Duration> {
        let (remote_tx, remote_mult) = self.remote.heard?;
        let slower = self.in_use.rx.max(remote_tx);
        Some(Duration::from_micros(
            u64::from(remote_mult) * u64::from(slower),
        ))
    }

    /// The negotiated transmit interval before jitter (§6.8.7): the larger of our
    /// DesiredMinTxInterval and the peer's RequiredMinRxInterval. Zero when the peer asked for
    /// no periodic packets.
    pub fn transmit_interval(&self) -> Duration {
        if self.remote.min_rx == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(u64::from(self.in_use.tx.max(self.remote.min_rx)))
    }

    /// The intervals the configuration and the state call for (§6.8.3's floor while not Up).
    fn wanted(&self) -> Timers {
        let mut tx = wire_micros(self.config.desired_min_tx).max(1);
        if self.state != State::Up {
            tx = tx.max(wire_micros(SLOW_TX_INTERVAL));
        }
        Timers {
            tx,
            rx: wire_micros(self.config.required_min_rx),
        }
    }

    /// Brings the advertised intervals to what is wanted, through a Poll Sequence (§6.8.3).
    fn sync_timers(&mut self) {
        let wanted = self.wanted();
        if wanted == self.advertised || self.poll_sequence != PollSequence::Idle {
            return;
        }
        self.in_use = if self.state == State::Up {
            // A slower tx and a smaller rx wait for the Final; the other directions are safe now.
            Timers {
                tx: self.in_use.tx.min(wanted.tx),
                rx: self.in_use.rx.max(wanted.rx),
            }
        } else {
            wanted
        };
        self.advertised = wanted;
        self.poll_sequence = PollSequence::Polling;
    }

    fn transition(&mut self, to: State, diag: Diag, out: &mut Vec<Output>) {
        let from = self.state;
        self.state = to;
        self.local_diag = diag;
        if matches!(to, State::Down | State::AdminDown) {
            self.in_use = self.advertised;
            self.poll_sequence = PollSequence::Idle;
        }
        out.push(Output::StateChanged { from, to, diag });
    }

    /// §6.8.7: whether periodic packets (or Poll packets to a peer in Demand mode) go out.
    fn transmitting(&self) -> bool {
        if self.config.passive && self.remote.discr == 0 {
            return false;
        }
        if self.remote.min_rx == 0 {
            return false;
        }
        let remote_demand =
            self.remote.demand && self.state == State::Up && self.remote.state == State::Up;
        !remote_demand || self.poll_sequence == PollSequence::Polling
    }

    fn transmit_due(&self) -> Option<Instant> {
        if !self.transmitting() {
            return None;
        }
        match self.last_tx {
            None => Some(self.created),
            Some(last) if self.led => last.checked_add(self.longest_gap(self.transmit_interval())),
            Some(last) => last.checked_add(self.jittered(self.transmit_interval())),
        }
    }

    /// The span of the allowed reduction, in ten-thousandths of the interval: 25 %, or 15 %
    /// when our Detect Mult is 1 (§6.8.7: the gap then stays within 75–90 %).
    fn jitter_span(&self) -> u64 {
        if self.config.wire_detect_mult() == 1 {
            1_500
        } else {
            2_500
        }
    }

    /// `interval` scaled to `per_10k` ten-thousandths; never below one microsecond, so time
    /// always moves.
    fn scaled(interval: Duration, per_10k: u64) -> Duration {
        let micros = interval.as_micros().min(u128::from(u32::MAX)) as u64;
        Duration::from_micros((micros * per_10k / 10_000).max(1))
    }

    /// `interval` reduced by this packet's jitter: to 75–100 %, or 75–90 % when our Detect Mult
    /// is 1 (§6.8.7).
    fn jittered(&self, interval: Duration) -> Duration {
        let per_10k = 7_500 + u64::from(self.jitter) * self.jitter_span() / u64::from(u16::MAX);
        Self::scaled(interval, per_10k)
    }

    /// The shortest gap the jitter allows: 75 % of `interval`.
    fn shortest_gap(interval: Duration) -> Duration {
        Self::scaled(interval, 7_500)
    }

    /// The longest gap the jitter allows: 100 %, or 90 % when our Detect Mult is 1.
    fn longest_gap(&self, interval: Duration) -> Duration {
        Self::scaled(interval, 7_500 + self.jitter_span())
    }

    fn detection_deadline(&self) -> Option<Instant> {
        if self.state == State::AdminDown {
            return None;
        }
        self.last_rx?.checked_add(self.detection_time()?)
    }

    /// Our Control packet as §6.8.7 fills it.
    fn control_packet(&self, poll: bool, fin: bool) -> ControlPacket {
        ControlPacket {
            version: VERSION,
            diag: self.local_diag,
            state: self.state,
            poll,
            fin,
            control_plane_independent: false,
            authentication_present: false,
            demand: false,
            multipoint: false,
            detect_mult: self.config.wire_detect_mult(),
            my_discriminator: self.local_discr.get(),
            your_discriminator: self.remote.discr,
            desired_min_tx: self.advertised.tx,
            required_min_rx: self.advertised.rx,
            required_min_echo_rx: 0,
        }
    }
}

/// The state table of RFC 5880 §6.8.6 for a packet that was not discarded: our next state and
/// diagnostic, or `None` to stay.
fn next_state(local: State, remote: State) -> Option<(State, Diag)> {
    match (local, remote) {
        (State::AdminDown, _) | (State::Down, State::AdminDown) => None,
        (_, State::AdminDown) => Some((State::Down, Diag::NeighborSignaledDown)),
        (State::Down, State::Down) => Some((State::Init, Diag::NoDiagnostic)),
        (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
            Some((State::Up, Diag::NoDiagnostic))
        }
        (State::Up, State::Down) => Some((State::Down, Diag::NeighborSignaledDown)),
        (State::Down, State::Up)
        | (State::Init, State::Down)
        | (State::Up, State::Init | State::Up) => None,
    }
}

/// `d` in whole microseconds, saturated to the 32-bit wire field.
fn wire_micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny deterministic generator for the jitter, so a run
/// is reproducible from the discriminator. Not for anything that must be unpredictable.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests;
