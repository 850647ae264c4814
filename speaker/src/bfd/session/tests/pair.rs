//! Two sessions wired back to back in simulated time: bring-up, steady state, jitter, and how
//! fast a silent peer is detected.

use super::*;

#[test]
fn two_sessions_wired_back_to_back_come_up_through_init() {
    let mut pair = Pair::new(SessionConfig::default(), SessionConfig::default());
    pair.run_for(Duration::from_secs(5));
    for side in 0..2 {
        assert_eq!(
            pair.changes(side),
            [
                (State::Down, State::Init, Diag::NoDiagnostic),
                (State::Init, State::Up, Diag::NoDiagnostic)
            ],
            "side {side}"
        );
        let s = &pair.sessions[side];
        assert!(!s.poll_in_progress(), "side {side} still polls");
        assert_eq!(s.transmit_interval(), 300 * MS);
        assert_eq!(s.detection_time(), Some(900 * MS));
    }
    // Up within two slow intervals: Down → Init on the first packets, Init → Up on the next.
    let up_at = pair.change_times(0)[1];
    assert!(up_at <= Duration::from_secs(2) + 10 * MS, "{up_at:?}");
}

#[test]
fn the_jitter_keeps_every_interval_between_75_and_100_percent() {
    let gaps = steady_gaps(SessionConfig::default());
    assert!(gaps.len() > 100, "{}", gaps.len());
    check_band(&gaps, 300 * MS, 0.75, 1.0);
}

#[test]
fn with_detect_mult_one_the_jitter_keeps_every_interval_between_75_and_90_percent() {
    let config = SessionConfig {
        detect_mult: 1,
        ..SessionConfig::default()
    };
    let gaps = steady_gaps(config);
    assert!(gaps.len() > 100);
    check_band(&gaps, 300 * MS, 0.75, 0.90);
}

#[test]
fn a_passive_session_comes_up_with_an_active_peer() {
    let passive = SessionConfig {
        passive: true,
        ..SessionConfig::default()
    };
    let mut pair = Pair::new(SessionConfig::default(), passive);
    pair.run_for(Duration::from_secs(5));
    assert_eq!(pair.sessions[0].state(), State::Up);
    assert_eq!(pair.sessions[1].state(), State::Up);
    // The passive side spoke only after the active side's first packet reached it.
    let first_heard = pair
        .log
        .iter()
        .find(|l| l.side == 1 && matches!(l.seen, Seen::Received));
    let first_sent = pair
        .log
        .iter()
        .find(|l| l.side == 1 && matches!(l.seen, Seen::Output(Output::Send(_))));
    assert!(first_heard.unwrap().at <= first_sent.unwrap().at);
}

#[test]
fn with_300_ms_times_3_a_silent_peer_is_detected_within_900_ms_plus_one_interval() {
    let mut pair = Pair::new(SessionConfig::default(), SessionConfig::default());
    pair.run_for(Duration::from_secs(5));
    assert_eq!(pair.sessions[0].state(), State::Up);
    let cut = pair.elapsed();
    pair.cut[1] = true;
    pair.run_for(Duration::from_secs(3));
    let down: Vec<_> = pair
        .log
        .iter()
        .filter(|l| l.side == 0 && l.at > cut)
        .filter_map(|l| match l.seen {
            Seen::Output(Output::StateChanged {
                from: State::Up,
                to: State::Down,
                diag,
            }) => Some((l.at, diag)),
            _ => None,
        })
        .collect();
    let [(at, diag)] = down[..] else {
        panic!("expected one Up → Down, got {down:?}")
    };
    assert_eq!(diag, Diag::ControlDetectionTimeExpired);
    let waited = at - cut;
    assert!(waited <= 900 * MS + 300 * MS, "detected after {waited:?}");
    let last_heard = pair.last_received(0, cut).unwrap();
    assert_eq!(at - last_heard, 900 * MS);
    // The peer, still hearing us, follows with diag 3.
    assert!(
        pair.changes(1)
            .contains(&(State::Up, State::Down, Diag::NeighborSignaledDown))
    );
}

#[test]
fn a_session_that_lost_its_peer_comes_back_up_when_the_peer_returns() {
    let mut pair = Pair::new(SessionConfig::default(), SessionConfig::default());
    pair.run_for(Duration::from_secs(5));
    pair.cut = [true, true];
    pair.run_for(Duration::from_secs(5));
    assert_eq!(pair.sessions[0].state(), State::Down);
    assert_eq!(pair.sessions[1].state(), State::Down);
    pair.cut = [false, false];
    pair.run_for(Duration::from_secs(5));
    assert_eq!(pair.sessions[0].state(), State::Up);
    assert_eq!(pair.sessions[1].state(), State::Up);
    assert_eq!(pair.sessions[0].transmit_interval(), 300 * MS);
}

#[test]
fn a_session_stays_up_for_a_minute_of_steady_traffic() {
    for mult in [1, 3] {
        let config = SessionConfig {
            detect_mult: mult,
            ..SessionConfig::default()
        };
        let mut pair = Pair::new(config, config);
        pair.run_for(Duration::from_secs(60));
        for side in 0..2 {
            assert_eq!(
                pair.changes(side).len(),
                2,
                "mult {mult} side {side}: {:?}",
                pair.changes(side)
            );
        }
    }
}

/// Gaps between the periodic packets of side 0 once two sessions are Up and settled.
fn steady_gaps(config: SessionConfig) -> Vec<Duration> {
    let mut pair = Pair::new(config, config);
    pair.run_for(Duration::from_secs(5));
    let settled = pair.elapsed();
    pair.run_for(Duration::from_secs(60));
    let times: Vec<Duration> = pair
        .log
        .iter()
        .filter(|l| l.side == 0 && l.at >= settled)
        .filter_map(|l| match l.seen {
            Seen::Output(Output::Send(p)) if !p.fin => Some(l.at),
            _ => None,
        })
        .collect();
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

fn check_band(gaps: &[Duration], interval: Duration, low: f64, high: f64) {
    let (min, max) = (interval.mul_f64(low), interval.mul_f64(high));
    for gap in gaps {
        assert!(
            *gap >= min && *gap <= max,
            "gap {gap:?} outside {min:?}..={max:?}"
        );
    }
    // The draws spread over the band rather than sitting at one end.
    let lowest = gaps.iter().min().unwrap();
    let highest = gaps.iter().max().unwrap();
    assert!(
        *highest - *lowest > (max - min) / 2,
        "{lowest:?}..{highest:?}"
    );
}

/// What the simulation saw of one side.
#[derive(Debug)]
enum Seen {
    /// The side produced this output.
    Output(Output),
    /// This packet was delivered to the side.
    Received,
}

/// One thing seen, when and where.
#[derive(Debug)]
struct Logged {
    /// Since the start of the simulation.
    at: Duration,
    side: usize,
    seen: Seen,
}

/// Two sessions wired back to back with a 1 ms one-way delay, in simulated time: the clock jumps
/// to the next wakeup or delivery. Every packet goes through `encode` and `decode`.
struct Pair {
    start: Instant,
    now: Instant,
    sessions: [Session; 2],
    /// (delivery time, receiving side, packet).
    in_flight: Vec<(Instant, usize, ControlPacket)>,
    /// `cut[i]`: packets sent by side `i` are lost.
    cut: [bool; 2],
    log: Vec<Logged>,
}

impl Pair {
    const LATENCY: Duration = Duration::from_millis(1);

    fn new(a: SessionConfig, b: SessionConfig) -> Pair {
        let start = Instant::now();
        Pair {
            start,
            now: start,
            sessions: [
                Session::new(discr(1), a, start),
                Session::new(discr(2), b, start),
            ],
            in_flight: Vec::new(),
            cut: [false; 2],
            log: Vec::new(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn next_event(&self) -> Option<Instant> {
        let wakeups = self.sessions.iter().filter_map(Session::next_wakeup);
        let deliveries = self.in_flight.iter().map(|(at, _, _)| *at);
        wakeups.chain(deliveries).min()
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        let mut steps = 0;
        while let Some(at) = self.next_event() {
            if at > until {
                break;
            }
            self.now = self.now.max(at);
            self.step();
            steps += 1;
            assert!(steps < 1_000_000, "the simulation does not advance");
        }
        self.now = until;
    }

    fn step(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) =
            self.in_flight.drain(..).partition(|(at, _, _)| *at <= now);
        self.in_flight = later;
        for (_, to, packet) in due {
            self.log.push(Logged {
                at: now - self.start,
                side: to,
                seen: Seen::Received,
            });
            let out = self.sessions[to].receive(&packet, now);
            self.apply(to, out);
        }
        for side in 0..2 {
            if self.sessions[side].next_wakeup().is_some_and(|t| t <= now) {
                let out = self.sessions[side].poll(now);
                self.apply(side, out);
            }
        }
    }

    fn apply(&mut self, side: usize, outputs: Vec<Output>) {
        for output in outputs {
            if let Output::Send(p) = &output {
                assert!(
                    !(p.poll && p.fin),
                    "side {side} sent Poll and Final together: {p:?}"
                );
                let wire =
                    decode(&p.encode()).unwrap_or_else(|e| panic!("side {side} sent {p:?}: {e}"));
                assert_eq!(&wire, p);
                if !self.cut[side] {
                    self.in_flight
                        .push((self.now + Self::LATENCY, 1 - side, wire));
                }
            }
            self.log.push(Logged {
                at: self.now - self.start,
                side,
                seen: Seen::Output(output),
            });
        }
    }

    /// The state changes of `side`.
    fn changes(&self, side: usize) -> Vec<(State, State, Diag)> {
        self.log
            .iter()
            .filter(|l| l.side == side)
            .filter_map(|l| match l.seen {
                Seen::Output(Output::StateChanged { from, to, diag }) => Some((from, to, diag)),
                _ => None,
            })
            .collect()
    }

    fn change_times(&self, side: usize) -> Vec<Duration> {
        self.log
            .iter()
            .filter(|l| {
                l.side == side && matches!(l.seen, Seen::Output(Output::StateChanged { .. }))
            })
            .map(|l| l.at)
            .collect()
    }

    /// When `side` last received a packet, at or before `by`.
    fn last_received(&self, side: usize, by: Duration) -> Option<Duration> {
        self.log
            .iter()
            .filter(|l| l.side == side && l.at <= by && matches!(l.seen, Seen::Received))
            .map(|l| l.at)
            .next_back()
    }
}
