//! One test per behaviour of RFC 5880 §6.8, against a scripted peer; [`pair`] runs two sessions
//! back to back in simulated time.

use super::*;
use crate::bfd::packet::decode;

const US: u32 = 0x0000_1234;
const PEER: u32 = 0x0000_beef;
const MS: Duration = Duration::from_millis(1);

mod pair;

fn discr(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn session(config: SessionConfig, now: Instant) -> Session {
    Session::new(discr(US), config, now)
}

/// A packet from the scripted peer: 300 ms / 300 ms, multiplier 3.
fn peer(state: State, your_discriminator: u32) -> ControlPacket {
    ControlPacket {
        version: VERSION,
        diag: Diag::NoDiagnostic,
        state,
        poll: false,
        fin: false,
        control_plane_independent: false,
        authentication_present: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discriminator: PEER,
        your_discriminator,
        desired_min_tx: 300_000,
        required_min_rx: 300_000,
        required_min_echo_rx: 0,
    }
}

fn sends(outputs: &[Output]) -> Vec<ControlPacket> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send(p) => Some(*p),
            _ => None,
        })
        .collect()
}

fn changes(outputs: &[Output]) -> Vec<(State, State, Diag)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::StateChanged { from, to, diag } => Some((*from, *to, *diag)),
            _ => None,
        })
        .collect()
}

/// Polls at `at` and returns the one packet sent then.
fn send_at(s: &mut Session, at: Instant) -> ControlPacket {
    let out = s.poll(at);
    let sent = sends(&out);
    assert_eq!(sent.len(), 1, "expected one packet at {at:?}: {out:?}");
    sent[0]
}

/// Polls at the next wakeup and returns the one packet sent then.
fn send_next(s: &mut Session) -> ControlPacket {
    let at = s.next_wakeup().expect("a wakeup is scheduled");
    send_at(s, at)
}

/// A session brought Up by the scripted peer at `now`, its Poll Sequence to 300 ms finished.
fn up_session(config: SessionConfig, now: Instant) -> Session {
    let mut s = session(config, now);
    s.poll(now);
    s.receive(&peer(State::Down, 0), now);
    assert_eq!(s.state(), State::Init);
    s.receive(&peer(State::Up, US), now);
    assert_eq!(s.state(), State::Up);
    assert!(s.poll_in_progress());
    s.receive(
        &ControlPacket {
            fin: true,
            ..peer(State::Up, US)
        },
        now,
    );
    s.receive(&peer(State::Up, US), now);
    assert!(!s.poll_in_progress());
    s
}

#[test]
fn the_default_config_is_metallbs_bfd_profile() {
    let c = SessionConfig::default();
    assert_eq!(c.desired_min_tx, 300 * MS);
    assert_eq!(c.required_min_rx, 300 * MS);
    assert_eq!(c.detect_mult, 3);
    assert!(!c.passive);
    assert_eq!(c.minimum_ttl, 254);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn a_config_the_protocol_cannot_carry_is_named_by_validate() {
    let base = SessionConfig::default();
    let cases = [
        (
            SessionConfig {
                detect_mult: 0,
                ..base
            },
            ConfigError::ZeroDetectMult,
        ),
        (
            SessionConfig {
                desired_min_tx: Duration::from_nanos(999),
                ..base
            },
            ConfigError::ZeroTransmitInterval,
        ),
        (
            SessionConfig {
                required_min_rx: Duration::ZERO,
                ..base
            },
            ConfigError::ZeroReceiveInterval,
        ),
        (
            SessionConfig {
                desired_min_tx: MAX_INTERVAL + MS,
                ..base
            },
            ConfigError::IntervalTooLong {
                value: MAX_INTERVAL + MS,
            },
        ),
    ];
    for (config, error) in cases {
        assert_eq!(config.validate(), Err(error));
    }
}

#[test]
fn values_the_protocol_cannot_carry_are_clamped_onto_the_wire() {
    let t0 = Instant::now();
    let config = SessionConfig {
        desired_min_tx: Duration::from_secs(10_000),
        required_min_rx: Duration::from_secs(10_000),
        detect_mult: 0,
        ..SessionConfig::default()
    };
    let mut s = session(config, t0);
    let p = send_at(&mut s, t0);
    assert_eq!(p.detect_mult, 1);
    assert_eq!((p.desired_min_tx, p.required_min_rx), (u32::MAX, u32::MAX));
    assert_eq!(decode(&p.encode()), Ok(p));
}

#[test]
fn a_new_session_is_down_and_sends_its_first_packet_at_once() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    assert_eq!(s.state(), State::Down);
    assert_eq!(s.local_diag(), Diag::NoDiagnostic);
    assert_eq!(s.detection_time(), None);
    assert_eq!(s.next_wakeup(), Some(t0));
    let p = send_at(&mut s, t0);
    assert_eq!(p.state, State::Down);
    assert_eq!(p.my_discriminator, US);
    assert_eq!(p.your_discriminator, 0);
    assert!(!p.poll && !p.fin);
    assert_eq!(p.required_min_echo_rx, 0);
}

#[test]
fn while_not_up_we_advertise_at_least_one_second() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    let p = send_at(&mut s, t0);
    assert_eq!(p.desired_min_tx, 1_000_000);
    assert_eq!(p.required_min_rx, 300_000);
    assert_eq!(s.transmit_interval(), SLOW_TX_INTERVAL);
    s.receive(&peer(State::Down, 0), t0);
    assert_eq!(s.state(), State::Init);
    assert_eq!(s.transmit_interval(), SLOW_TX_INTERVAL);
    // A slower configuration than the floor is kept as it is.
    let slow = SessionConfig {
        desired_min_tx: Duration::from_secs(2),
        ..SessionConfig::default()
    };
    let mut s = session(slow, t0);
    assert_eq!(send_at(&mut s, t0).desired_min_tx, 2_000_000);
}

#[test]
fn going_up_starts_a_poll_to_the_configured_faster_rate_at_once() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    s.poll(t0);
    s.receive(&peer(State::Down, 0), t0);
    let out = s.receive(&peer(State::Up, US), t0 + 10 * MS);
    assert_eq!(
        changes(&out),
        [(State::Init, State::Up, Diag::NoDiagnostic)]
    );
    assert!(s.poll_in_progress());
    assert_eq!(s.transmit_interval(), 300 * MS);
    let p = send_next(&mut s);
    assert!(p.poll);
    assert_eq!(p.desired_min_tx, 300_000);
    assert_eq!(p.state, State::Up);
    assert_eq!(p.your_discriminator, PEER);
}

#[test]
fn the_state_table_of_section_6_8_6_holds_for_every_pair_of_states() {
    use State::*;
    let t0 = Instant::now();
    let cases = [
        (AdminDown, AdminDown, None),
        (AdminDown, Down, None),
        (AdminDown, Init, None),
        (AdminDown, Up, None),
        (Down, AdminDown, None),
        (Down, Down, Some((Init, Diag::NoDiagnostic))),
        (Down, Init, Some((Up, Diag::NoDiagnostic))),
        (Down, Up, None),
        (Init, AdminDown, Some((Down, Diag::NeighborSignaledDown))),
        (Init, Down, None),
        (Init, Init, Some((Up, Diag::NoDiagnostic))),
        (Init, Up, Some((Up, Diag::NoDiagnostic))),
        (Up, AdminDown, Some((Down, Diag::NeighborSignaledDown))),
        (Up, Down, Some((Down, Diag::NeighborSignaledDown))),
        (Up, Init, None),
        (Up, Up, None),
    ];
    for (local, remote, expected) in cases {
        let mut s = match local {
            Up => up_session(SessionConfig::default(), t0),
            _ => session(SessionConfig::default(), t0),
        };
        match local {
            Init => {
                s.receive(&peer(Down, 0), t0);
            }
            AdminDown => {
                s.set_admin_down();
            }
            _ => {}
        }
        assert_eq!(s.state(), local);
        let your = if matches!(remote, Down | AdminDown) {
            0
        } else {
            US
        };
        let out = s.receive(&peer(remote, your), t0);
        let want: Vec<_> = expected
            .map(|(to, diag)| (local, to, diag))
            .into_iter()
            .collect();
        assert_eq!(changes(&out), want, "{local:?} receiving {remote:?}");
        assert_eq!(s.remote_state(), remote);
    }
}

#[test]
fn a_remote_down_takes_an_up_session_down_with_diag_3() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let out = s.receive(&peer(State::Down, 0), t0 + MS);
    assert_eq!(
        changes(&out),
        [(State::Up, State::Down, Diag::NeighborSignaledDown)]
    );
    assert_eq!(s.local_diag(), Diag::NeighborSignaledDown);
    // Back to the one-second floor at once, announced by a Poll.
    assert_eq!(s.transmit_interval(), SLOW_TX_INTERVAL);
    let p = send_next(&mut s);
    assert_eq!(
        (p.state, p.diag, p.desired_min_tx, p.poll),
        (State::Down, Diag::NeighborSignaledDown, 1_000_000, true)
    );
}

#[test]
fn a_remote_admin_down_takes_the_session_down_and_can_be_told_from_a_failure() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let out = s.receive(&peer(State::AdminDown, 0), t0 + MS);
    assert_eq!(
        changes(&out),
        [(State::Up, State::Down, Diag::NeighborSignaledDown)]
    );
    assert_eq!(s.remote_state(), State::AdminDown);
}

#[test]
fn the_detection_time_is_the_remote_multiplier_times_the_slower_of_our_rx_and_their_tx() {
    let t0 = Instant::now();
    let config = SessionConfig {
        required_min_rx: 200 * MS,
        ..SessionConfig::default()
    };
    let mut s = session(config, t0);
    assert_eq!(s.detection_time(), None);
    let their_tx_slower = ControlPacket {
        detect_mult: 5,
        desired_min_tx: 250_000,
        ..peer(State::Down, 0)
    };
    s.receive(&their_tx_slower, t0);
    assert_eq!(s.detection_time(), Some(1_250 * MS));
    let our_rx_slower = ControlPacket {
        desired_min_tx: 100_000,
        ..their_tx_slower
    };
    s.receive(&our_rx_slower, t0);
    assert_eq!(s.detection_time(), Some(1_000 * MS));
}

#[test]
fn the_transmit_interval_is_the_slower_of_our_tx_and_their_rx() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    s.receive(
        &ControlPacket {
            required_min_rx: 500_000,
            ..peer(State::Up, US)
        },
        t0,
    );
    assert_eq!(s.transmit_interval(), 500 * MS);
    s.receive(
        &ControlPacket {
            required_min_rx: 100_000,
            ..peer(State::Up, US)
        },
        t0,
    );
    assert_eq!(s.transmit_interval(), 300 * MS);
}

#[test]
fn a_poll_is_answered_with_final_at_once() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let sent = send_next(&mut s);
    let scheduled = s.next_wakeup();
    let out = s.receive(
        &ControlPacket {
            poll: true,
            ..peer(State::Up, US)
        },
        t0 + MS,
    );
    let answer = sends(&out);
    assert_eq!(answer.len(), 1, "{out:?}");
    assert!(answer[0].fin && !answer[0].poll);
    assert_eq!(answer[0].state, State::Up);
    // The Final does not move the periodic schedule.
    assert_eq!(s.next_wakeup(), scheduled);
    assert!(!sent.fin);
}

#[test]
fn a_final_never_carries_poll_even_during_our_own_poll_sequence() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    s.set_config(SessionConfig {
        desired_min_tx: 500 * MS,
        ..SessionConfig::default()
    });
    assert!(s.poll_in_progress());
    let out = s.receive(
        &ControlPacket {
            poll: true,
            ..peer(State::Up, US)
        },
        t0,
    );
    let answer = sends(&out);
    assert!(answer[0].fin && !answer[0].poll);
    assert_eq!(answer[0].desired_min_tx, 500_000);
    assert!(send_next(&mut s).poll);
}

#[test]
fn a_slower_transmit_interval_applies_only_after_the_final() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    s.set_config(SessionConfig {
        desired_min_tx: Duration::from_secs(1),
        ..SessionConfig::default()
    });
    assert_eq!(s.transmit_interval(), 300 * MS);
    let t1 = s.next_wakeup().unwrap();
    let p = send_at(&mut s, t1);
    assert!(p.poll);
    assert_eq!(p.desired_min_tx, 1_000_000);
    let next = s.next_wakeup().unwrap();
    assert!(next - t1 <= 300 * MS, "{:?}", next - t1);
    assert!(send_at(&mut s, next).poll);
    s.receive(
        &ControlPacket {
            fin: true,
            ..peer(State::Up, US)
        },
        next + MS,
    );
    assert!(!s.poll_in_progress());
    assert_eq!(s.transmit_interval(), Duration::from_secs(1));
    // The peer keeps talking, so the next wakeup is our packet, not its detection time.
    s.receive(&peer(State::Up, US), next + 500 * MS);
    let after = s.next_wakeup().unwrap();
    assert!(after - next >= 750 * MS, "{:?}", after - next);
    assert!(!send_at(&mut s, after).poll);
}

#[test]
fn a_faster_transmit_interval_applies_at_once() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    s.receive(
        &ControlPacket {
            required_min_rx: 50_000,
            ..peer(State::Up, US)
        },
        t0,
    );
    s.set_config(SessionConfig {
        desired_min_tx: 100 * MS,
        ..SessionConfig::default()
    });
    assert!(s.poll_in_progress());
    assert_eq!(s.transmit_interval(), 100 * MS);
}

#[test]
fn a_smaller_receive_interval_shortens_the_detection_time_only_after_the_final() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let fast_peer = ControlPacket {
        desired_min_tx: 100_000,
        ..peer(State::Up, US)
    };
    s.receive(&fast_peer, t0);
    assert_eq!(s.detection_time(), Some(900 * MS));
    s.set_config(SessionConfig {
        required_min_rx: 100 * MS,
        ..SessionConfig::default()
    });
    assert_eq!(s.detection_time(), Some(900 * MS));
    assert_eq!(send_next(&mut s).required_min_rx, 100_000);
    s.receive(
        &ControlPacket {
            fin: true,
            ..fast_peer
        },
        t0,
    );
    assert_eq!(s.detection_time(), Some(300 * MS));
    // A larger one is safe at once.
    s.receive(&fast_peer, t0);
    s.set_config(SessionConfig {
        required_min_rx: 500 * MS,
        ..SessionConfig::default()
    });
    assert!(s.poll_in_progress());
    assert_eq!(s.detection_time(), Some(1_500 * MS));
}

#[test]
fn a_second_change_during_a_poll_waits_for_the_final_and_a_packet_without_final() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    s.set_config(SessionConfig {
        desired_min_tx: 500 * MS,
        ..SessionConfig::default()
    });
    s.set_config(SessionConfig {
        desired_min_tx: 700 * MS,
        ..SessionConfig::default()
    });
    let t1 = s.next_wakeup().unwrap();
    let p = send_at(&mut s, t1);
    assert!(p.poll);
    assert_eq!(p.desired_min_tx, 500_000, "the second change must wait");
    s.receive(
        &ControlPacket {
            fin: true,
            ..peer(State::Up, US)
        },
        t1 + MS,
    );
    assert!(!s.poll_in_progress());
    assert_eq!(s.transmit_interval(), 500 * MS);
    let t2 = s.next_wakeup().unwrap();
    let p = send_at(&mut s, t2);
    assert!(!p.poll, "no new Poll before a packet without Final");
    assert_eq!(p.desired_min_tx, 500_000);
    s.receive(&peer(State::Up, US), t2 + MS);
    assert!(s.poll_in_progress());
    let p = send_next(&mut s);
    assert!(p.poll);
    assert_eq!(p.desired_min_tx, 700_000);
}

#[test]
fn a_final_without_a_poll_of_ours_changes_nothing() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let before = s.clone();
    s.receive(
        &ControlPacket {
            fin: true,
            ..peer(State::Up, US)
        },
        t0,
    );
    assert_eq!(s.transmit_interval(), before.transmit_interval());
    assert!(!s.poll_in_progress());
}

#[test]
fn silence_for_the_detection_time_takes_the_session_down_with_diag_1() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let last = t0 + 100 * MS;
    s.receive(&peer(State::Up, US), last);
    assert_eq!(s.detection_time(), Some(900 * MS));
    assert!(s.next_wakeup().unwrap() <= last + 900 * MS);
    assert!(changes(&s.poll(last + 899 * MS)).is_empty());
    let out = s.poll(last + 900 * MS);
    assert_eq!(
        changes(&out),
        [(State::Up, State::Down, Diag::ControlDetectionTimeExpired)]
    );
    assert_eq!(s.local_diag(), Diag::ControlDetectionTimeExpired);
    assert_eq!(s.remote_discriminator(), None);
    let p = send_next(&mut s);
    assert_eq!(
        (p.state, p.diag, p.your_discriminator),
        (State::Down, Diag::ControlDetectionTimeExpired, 0)
    );
}

#[test]
fn an_init_session_that_hears_nothing_more_goes_down_with_diag_1() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    s.receive(
        &ControlPacket {
            desired_min_tx: 1_000_000,
            ..peer(State::Down, 0)
        },
        t0,
    );
    assert_eq!(s.detection_time(), Some(Duration::from_secs(3)));
    let out = s.poll(t0 + Duration::from_secs(3));
    assert_eq!(
        changes(&out),
        [(State::Init, State::Down, Diag::ControlDetectionTimeExpired)]
    );
}

#[test]
fn a_down_session_forgets_a_silent_peer_without_changing_state() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    s.receive(&peer(State::Up, US), t0);
    assert_eq!(s.state(), State::Down);
    assert_eq!(s.remote_discriminator(), Some(discr(PEER)));
    let out = s.poll(t0 + 900 * MS);
    assert!(changes(&out).is_empty());
    assert_eq!(s.remote_discriminator(), None);
}

#[test]
fn a_packet_for_another_discriminator_is_discarded() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    let out = s.receive(&peer(State::Up, 999), t0);
    assert_eq!(
        out,
        [Output::Discarded(Discard::NotOurDiscriminator {
            received: 999,
            ours: US
        })]
    );
    assert_eq!(s.remote_discriminator(), None);
    assert_eq!(s.detection_time(), None);
}

#[test]
fn a_packet_that_decode_would_refuse_is_discarded() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    let out = s.receive(
        &ControlPacket {
            detect_mult: 0,
            ..peer(State::Down, 0)
        },
        t0,
    );
    assert_eq!(
        out,
        [Output::Discarded(Discard::Invalid(
            PacketError::ZeroDetectMult
        ))]
    );
    assert_eq!(s.state(), State::Down);
}

#[test]
fn an_admin_down_session_ignores_its_peer_and_says_admin_down() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let out = s.set_admin_down();
    assert_eq!(
        changes(&out),
        [(State::Up, State::AdminDown, Diag::AdministrativelyDown)]
    );
    assert!(s.set_admin_down().is_empty());
    let out = s.receive(
        &ControlPacket {
            poll: true,
            ..peer(State::Down, 0)
        },
        t0 + MS,
    );
    assert!(out.is_empty(), "{out:?}");
    let p = send_next(&mut s);
    assert_eq!(
        (p.state, p.diag, p.desired_min_tx),
        (State::AdminDown, Diag::AdministrativelyDown, 1_000_000)
    );
    // No detection timer: a long silence changes nothing, packets keep going out.
    let later = t0 + Duration::from_secs(60);
    assert!(changes(&s.poll(later)).is_empty());
    assert_eq!(s.state(), State::AdminDown);
    assert!(s.next_wakeup().is_some());
}

#[test]
fn disabling_a_session_sends_admin_down_at_once_so_the_peer_hears_it_before_detecting_silence() {
    // Found with two shells on loopback: at 300 ms x 3 the peer declares us down 900 ms after
    // our last packet, and the slow rate (1 s less 0-25 % jitter) that AdminDown switches to at
    // once put the next packet after that in about 40 % of runs.
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    send_next(&mut s);
    let out = s.set_admin_down();
    let sent = sends(&out);
    assert_eq!(sent.len(), 1, "{out:?}");
    assert_eq!(
        (sent[0].state, sent[0].diag, sent[0].your_discriminator),
        (State::AdminDown, Diag::AdministrativelyDown, PEER)
    );
    assert!(!sent[0].fin);
    assert_eq!(decode(&sent[0].encode()), Ok(sent[0]));
    assert!(s.set_admin_down().is_empty(), "only the transition sends");
    // The slow-rate packets follow as before.
    let p = send_next(&mut s);
    assert_eq!(p.state, State::AdminDown);
}

#[test]
fn disabling_a_session_that_sends_nothing_sends_nothing() {
    let t0 = Instant::now();
    let passive = SessionConfig {
        passive: true,
        ..SessionConfig::default()
    };
    let mut s = session(passive, t0);
    let out = s.set_admin_down();
    assert_eq!(changes(&out).len(), 1);
    assert!(sends(&out).is_empty(), "{out:?}");
}

#[test]
fn enabling_an_admin_down_session_returns_it_to_down() {
    let t0 = Instant::now();
    let mut s = session(SessionConfig::default(), t0);
    assert!(s.set_admin_up().is_empty());
    s.set_admin_down();
    let out = s.set_admin_up();
    assert_eq!(
        changes(&out),
        [(State::AdminDown, State::Down, Diag::NoDiagnostic)]
    );
    s.receive(&peer(State::Down, 0), t0);
    assert_eq!(s.state(), State::Init);
}

#[test]
fn a_passive_session_sends_nothing_until_it_hears_from_its_peer() {
    let t0 = Instant::now();
    let config = SessionConfig {
        passive: true,
        ..SessionConfig::default()
    };
    let mut s = session(config, t0);
    assert_eq!(s.next_wakeup(), None);
    for secs in 0..10 {
        assert!(s.poll(t0 + Duration::from_secs(secs)).is_empty());
    }
    let heard = t0 + Duration::from_secs(10);
    s.receive(&peer(State::Down, 0), heard);
    assert!(s.next_wakeup().unwrap() <= heard);
    let p = send_at(&mut s, heard);
    assert_eq!((p.state, p.your_discriminator), (State::Init, PEER));
}

#[test]
fn a_passive_session_goes_quiet_again_once_its_peer_is_forgotten() {
    let t0 = Instant::now();
    let config = SessionConfig {
        passive: true,
        ..SessionConfig::default()
    };
    let mut s = session(config, t0);
    s.receive(&peer(State::Up, US), t0);
    assert!(!sends(&s.poll(t0)).is_empty());
    s.poll(t0 + 900 * MS);
    assert_eq!(s.remote_discriminator(), None);
    assert_eq!(s.next_wakeup(), None);
}

#[test]
fn a_zero_remote_min_rx_stops_periodic_packets_but_not_finals() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let quiet = ControlPacket {
        required_min_rx: 0,
        ..peer(State::Up, US)
    };
    let mut now = t0;
    for _ in 0..10 {
        now += 200 * MS;
        assert!(sends(&s.receive(&quiet, now)).is_empty());
        assert!(sends(&s.poll(now)).is_empty());
    }
    assert_eq!(s.transmit_interval(), Duration::ZERO);
    assert_eq!(s.state(), State::Up);
    let out = s.receive(
        &ControlPacket {
            poll: true,
            ..quiet
        },
        now,
    );
    assert!(sends(&out)[0].fin);
}

#[test]
fn a_peer_in_demand_mode_stops_our_periodic_packets_once_both_are_up() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let demand = ControlPacket {
        demand: true,
        ..peer(State::Up, US)
    };
    let mut now = t0;
    for _ in 0..10 {
        now += 200 * MS;
        s.receive(&demand, now);
        assert!(sends(&s.poll(now)).is_empty());
    }
    // A Poll Sequence still goes out, at the transmit interval, until the Final.
    s.set_config(SessionConfig {
        desired_min_tx: 400 * MS,
        ..SessionConfig::default()
    });
    let p = send_at(&mut s, now);
    assert!(p.poll);
    s.receive(
        &ControlPacket {
            fin: true,
            ..demand
        },
        now + MS,
    );
    assert!(sends(&s.poll(now + 500 * MS)).is_empty());
}

#[test]
fn the_jitter_depends_only_on_the_discriminator() {
    let t0 = Instant::now();
    let times = |d: u32| {
        let mut s = Session::new(discr(d), SessionConfig::default(), t0);
        (0..20)
            .map(|_| {
                let at = s.next_wakeup().unwrap();
                s.poll(at);
                at - t0
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(times(7), times(7));
    assert_ne!(times(7), times(8));
}

#[test]
fn a_packet_received_after_three_quarters_of_the_interval_brings_our_next_packet_with_it() {
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let last = s.next_wakeup().unwrap();
    assert!(!send_at(&mut s, last).poll);
    // Before 75 % of 300 ms: the packet changes nothing of our schedule.
    let due = s.next_wakeup().unwrap();
    assert!(sends(&s.receive(&peer(State::Up, US), last + 224 * MS)).is_empty());
    assert_eq!(s.next_wakeup(), Some(due));
    // From 225 ms on: our periodic packet goes out with it. The next one waits for the
    // peer's next packet, up to the full 300 ms.
    let out = s.receive(&peer(State::Up, US), last + 225 * MS);
    let early = sends(&out);
    assert_eq!(early.len(), 1, "{out:?}");
    assert!(!early[0].fin && !early[0].poll);
    assert_eq!(early[0].state, State::Up);
    let then = last + 225 * MS;
    assert_eq!(s.next_wakeup(), Some(then + 300 * MS));
    // The peer is silent: our timer sends at 300 ms, and the gap after that is drawn again.
    send_at(&mut s, then + 300 * MS);
    let gap = s.next_wakeup().unwrap() - (then + 300 * MS);
    assert!((225 * MS..300 * MS).contains(&gap), "gap of {gap:?}");
}

#[test]
fn with_a_detect_mult_of_one_a_packet_that_went_with_the_peers_waits_at_most_90_percent() {
    let t0 = Instant::now();
    let mut s = up_session(
        SessionConfig {
            detect_mult: 1,
            ..SessionConfig::default()
        },
        t0,
    );
    let last = s.next_wakeup().unwrap();
    send_at(&mut s, last);
    assert_eq!(
        sends(&s.receive(&peer(State::Up, US), last + 250 * MS)).len(),
        1
    );
    assert_eq!(s.next_wakeup(), Some(last + 250 * MS + 270 * MS));
}

#[test]
fn our_packets_follow_a_peer_on_the_same_interval_and_every_gap_stays_in_the_jitter_range() {
    // A peer sending every 225-300 ms: after a few packets each of ours goes out with one of
    // its, and no gap between two of ours is under 75 % or over 100 % of the interval.
    let t0 = Instant::now();
    let mut s = up_session(SessionConfig::default(), t0);
    let mut peer_rng = SplitMix64::new(99);
    let mut peer_at = t0;
    let mut ours: Vec<Instant> = Vec::new();
    let mut with_peer = 0;
    for _ in 0..200 {
        peer_at += Duration::from_micros(225_000 + peer_rng.next_u64() % 75_001);
        // Our own timer first, if it comes before the peer's packet.
        while let Some(at) = s.next_wakeup().filter(|at| *at < peer_at) {
            if !sends(&s.poll(at)).is_empty() {
                ours.push(at);
            }
        }
        if !sends(&s.receive(&peer(State::Up, US), peer_at)).is_empty() {
            ours.push(peer_at);
            with_peer += 1;
        }
    }
    for gap in ours.windows(2).map(|w| w[1] - w[0]) {
        assert!((225 * MS..=300 * MS).contains(&gap), "gap of {gap:?}");
    }
    assert!(
        with_peer * 10 >= ours.len() * 9,
        "{with_peer} of {} packets went with the peer's",
        ours.len()
    );
}
