//! One test per session state transition (RFC 4271 §8), driven through the pure state machine.

mod bgp_support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use bgp_support::outputs::sent_messages;
use ferrolb_speaker::bgp::fsm::{
    CONNECT_TIMEOUT, Event, NotAnnounced, OPEN_HOLD_TIME, STABLE_SESSION,
};
use ferrolb_speaker::bgp::message::Message;
use ferrolb_speaker::bgp::open::{Capability, Open};
use ferrolb_speaker::bgp::update::EncodeError;
use ferrolb_speaker::bgp::wire::{Family, RouteRefresh, encode_keepalive, encode_route_refresh};
use ferrolb_speaker::bgp::{
    Advertisement, CeaseReason, Input, Notification, Output, PeerConfig, Session, State, Timer,
};

const OUR_AS: u32 = 64512;
const PEER_AS: u32 = 64513;

fn config() -> PeerConfig {
    let mut c = PeerConfig::new("r1", OUR_AS, PEER_AS, "10.99.0.2".parse().unwrap());
    c.connect_retry = Duration::from_secs(1);
    c
}

fn peer_open(asn: u32, hold: u16, caps: Vec<Capability>) -> Vec<u8> {
    let mut b = vec![];
    Open {
        my_as: u16::try_from(asn).unwrap_or(23456),
        hold_time: hold,
        bgp_id: Ipv4Addr::new(10, 99, 0, 2),
        capabilities: caps,
    }
    .encode(&mut b);
    b
}

fn full_caps(asn: u32) -> Vec<Capability> {
    vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::FourOctetAs(asn),
    ]
}

fn keepalive() -> Vec<u8> {
    let mut b = vec![];
    encode_keepalive(&mut b);
    b
}

struct Harness {
    s: Session,
    now: Instant,
}

impl Harness {
    fn new(cfg: PeerConfig) -> Self {
        Harness {
            s: Session::new(cfg),
            now: Instant::now(),
        }
    }
    fn feed(&mut self, input: Input) -> Vec<Output> {
        self.s.handle(self.now, input)
    }
    fn connected(&mut self) -> Vec<Output> {
        self.feed(Input::Start);
        self.feed(Input::Connected {
            local: "10.99.0.1:40000".parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: None,
        })
    }
    fn open_confirm(&mut self, hold: u16) -> Vec<Output> {
        self.connected();
        self.feed(Input::Received(peer_open(
            PEER_AS,
            hold,
            full_caps(PEER_AS),
        )))
    }
    fn established(&mut self) -> Vec<Output> {
        self.open_confirm(90);
        self.feed(Input::Received(keepalive()))
    }
    /// From Connect (after a start or a retry): the connection, the peer's OPEN and
    /// KEEPALIVE, and Established.
    fn connect_and_establish(&mut self) {
        self.feed(Input::Connected {
            local: "10.99.0.1:40000".parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: None,
        });
        self.feed(Input::Received(peer_open(PEER_AS, 90, full_caps(PEER_AS))));
        self.feed(Input::Received(keepalive()));
        assert_eq!(self.s.state(), State::Established);
    }
    fn advance(&mut self, d: Duration) {
        self.now += d;
    }
}

fn notification(out: &[Output]) -> Option<Notification> {
    sent_messages(out).into_iter().find_map(|m| match m {
        Message::Notification(n) => Some(n),
        _ => None,
    })
}

fn timer_set(out: &[Output], t: Timer) -> Option<Instant> {
    out.iter().rev().find_map(|o| match o {
        Output::SetTimer(x, at) if *x == t => Some(*at),
        _ => None,
    })
}

fn updates(out: &[Output]) -> Vec<(u32, u32)> {
    sent_messages(out)
        .into_iter()
        .filter_map(|m| match m {
            Message::Update(s) => Some((s.announced, s.withdrawn)),
            _ => None,
        })
        .collect()
}

fn adv(p: &str) -> Advertisement {
    Advertisement::new(p.parse().unwrap())
}

#[test]
fn a_new_session_waits_in_idle_until_started() {
    let h = Harness::new(config());
    assert_eq!(h.s.state(), State::Idle);
}

#[test]
fn starting_from_idle_connects_and_bounds_the_attempt_with_the_connect_retry_timer() {
    let mut h = Harness::new(config());
    let out = h.feed(Input::Start);
    assert_eq!(h.s.state(), State::Connect);
    assert!(out.contains(&Output::Connect));
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(h.now + CONNECT_TIMEOUT)
    );
}

#[test]
fn a_failed_connect_moves_to_active_and_waits_the_back_off() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    let out = h.feed(Input::ConnectFailed);
    assert_eq!(h.s.state(), State::Active);
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(h.now + Duration::from_secs(1))
    );
}

#[test]
fn the_connect_retry_timer_in_active_connects_again() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    h.feed(Input::ConnectFailed);
    h.advance(Duration::from_secs(1));
    let out = h.feed(Input::TimerExpired(Timer::ConnectRetry));
    assert_eq!(h.s.state(), State::Connect);
    assert!(out.contains(&Output::Connect));
}

#[test]
fn a_connect_attempt_that_outlives_the_timer_is_abandoned() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    h.advance(CONNECT_TIMEOUT);
    let out = h.feed(Input::TimerExpired(Timer::ConnectRetry));
    assert_eq!(h.s.state(), State::Active);
    assert!(out.contains(&Output::Disconnect));
}

#[test]
fn back_off_doubles_with_each_failure_up_to_two_minutes() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    let mut delays = vec![];
    for _ in 0..9 {
        let out = h.feed(Input::ConnectFailed);
        let at = timer_set(&out, Timer::ConnectRetry).unwrap();
        delays.push((at - h.now).as_secs());
        h.now = at;
        h.feed(Input::TimerExpired(Timer::ConnectRetry));
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 64, 120, 120]);
}

#[test]
fn a_connection_sends_our_open_and_moves_to_opensent() {
    let mut h = Harness::new(config());
    let out = h.connected();
    assert_eq!(h.s.state(), State::OpenSent);
    let Some(Message::Open(open)) = sent_messages(&out).into_iter().next() else {
        panic!("no OPEN")
    };
    assert_eq!(open.asn(), OUR_AS);
    assert_eq!(open.hold_time, 90);
    assert_eq!(open.bgp_id, Ipv4Addr::new(10, 99, 0, 1));
    assert_eq!(
        open.families(),
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
    assert!(open.has(|c| *c == Capability::RouteRefresh));
    assert!(!open.has(|c| matches!(c, Capability::GracefulRestart { .. })));
    assert_eq!(timer_set(&out, Timer::Hold), Some(h.now + OPEN_HOLD_TIME));
}

#[test]
fn a_four_octet_asn_is_sent_as_as_trans_with_the_capability() {
    let mut cfg = config();
    cfg.my_asn = 4_200_000_001;
    let mut h = Harness::new(cfg);
    let out = h.connected();
    let Some(Message::Open(open)) = sent_messages(&out).into_iter().next() else {
        panic!("no OPEN")
    };
    assert_eq!((open.my_as, open.asn()), (23456, 4_200_000_001));
}

#[test]
fn graceful_restart_is_advertised_with_forwarding_state_when_enabled() {
    let mut cfg = config();
    cfg.graceful_restart = true;
    let mut h = Harness::new(cfg);
    let out = h.connected();
    let Some(Message::Open(open)) = sent_messages(&out).into_iter().next() else {
        panic!("no OPEN")
    };
    assert!(open.has(|c| *c
        == Capability::GracefulRestart {
            restarted: false,
            restart_time: 120,
            families: vec![(Family::IPV4_UNICAST, true), (Family::IPV6_UNICAST, true)],
        }));
}

#[test]
fn a_valid_open_is_answered_with_a_keepalive_and_moves_to_openconfirm() {
    let mut h = Harness::new(config());
    let out = h.open_confirm(90);
    assert_eq!(h.s.state(), State::OpenConfirm);
    assert_eq!(sent_messages(&out), vec![Message::Keepalive]);
}

#[test]
fn holdtime_negotiation_uses_the_minimum() {
    let mut h = Harness::new(config());
    let out = h.open_confirm(30);
    let n = h.s.negotiated().unwrap();
    assert_eq!(n.hold_time, Duration::from_secs(30));
    assert_eq!(
        timer_set(&out, Timer::Hold),
        Some(h.now + Duration::from_secs(30))
    );
    let mut h = Harness::new(config());
    h.open_confirm(240);
    assert_eq!(h.s.negotiated().unwrap().hold_time, Duration::from_secs(90));
}

#[test]
fn keepalive_is_a_third_of_the_hold_time_unless_configured() {
    let mut h = Harness::new(config());
    let out = h.open_confirm(90);
    assert_eq!(
        timer_set(&out, Timer::Keepalive),
        Some(h.now + Duration::from_secs(30))
    );
    let mut cfg = config();
    cfg.keepalive_time = Some(Duration::from_secs(10));
    let mut h = Harness::new(cfg);
    let out = h.open_confirm(90);
    assert_eq!(
        timer_set(&out, Timer::Keepalive),
        Some(h.now + Duration::from_secs(10))
    );
}

#[test]
fn a_configured_keepalive_not_below_the_hold_time_falls_back_to_a_third() {
    let mut cfg = config();
    cfg.keepalive_time = Some(Duration::from_secs(60));
    let mut h = Harness::new(cfg);
    h.open_confirm(30);
    assert_eq!(h.s.negotiated().unwrap().keepalive, Duration::from_secs(10));
}

#[test]
fn hold_time_zero_means_no_keepalives_and_no_hold_timer() {
    let mut h = Harness::new(config());
    let out = h.open_confirm(0);
    assert_eq!(h.s.state(), State::OpenConfirm);
    assert!(out.contains(&Output::CancelTimer(Timer::Hold)));
    assert_eq!(timer_set(&out, Timer::Keepalive), None);
    let out = h.feed(Input::Received(keepalive()));
    assert_eq!(h.s.state(), State::Established);
    assert_eq!(timer_set(&out, Timer::Hold), None);
}

#[test]
fn hold_times_1_and_2_are_rejected_with_unacceptable_hold_time() {
    for hold in [1u16, 2] {
        let mut h = Harness::new(config());
        let out = h.open_confirm(hold);
        assert_eq!(h.s.state(), State::Idle);
        let n = notification(&out).unwrap();
        assert_eq!(
            (n.code, n.subcode, n.data),
            (2, 6, hold.to_be_bytes().to_vec())
        );
    }
}

#[test]
fn an_open_from_an_unexpected_as_is_rejected_with_bad_peer_as() {
    let mut h = Harness::new(config());
    h.connected();
    let out = h.feed(Input::Received(peer_open(65000, 90, full_caps(65000))));
    assert_eq!(h.s.state(), State::Idle);
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (2, 2));
    assert!(out.contains(&Output::Disconnect));
}

#[test]
fn dynamic_external_asn_accepts_any_other_as_and_is_ebgp() {
    for asn in [65000, 4_200_000_002] {
        let mut cfg = config();
        cfg.peer_asn_external = true;
        assert!(!cfg.is_ibgp() && cfg.ttl() == 1);
        let mut h = Harness::new(cfg);
        h.connected();
        h.feed(Input::Received(peer_open(asn, 90, full_caps(asn))));
        assert_eq!(h.s.state(), State::OpenConfirm, "AS {asn}");
    }
}

#[test]
fn dynamic_external_asn_refuses_a_peer_in_our_own_as_with_bad_peer_as() {
    let mut cfg = config();
    cfg.peer_asn_external = true;
    let mut h = Harness::new(cfg);
    h.connected();
    let out = h.feed(Input::Received(peer_open(OUR_AS, 90, full_caps(OUR_AS))));
    assert_eq!(h.s.state(), State::Idle);
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (2, 2));
}

#[test]
fn the_four_octet_capability_decides_the_peer_as() {
    let mut cfg = config();
    cfg.peer_asn = 4_200_000_002;
    let mut h = Harness::new(cfg);
    h.connected();
    h.feed(Input::Received(peer_open(
        4_200_000_002,
        90,
        full_caps(4_200_000_002),
    )));
    assert_eq!(h.s.state(), State::OpenConfirm);
}

#[test]
fn a_zero_bgp_identifier_is_rejected() {
    let mut h = Harness::new(config());
    h.connected();
    let mut open = peer_open(PEER_AS, 90, full_caps(PEER_AS));
    open[24..28].copy_from_slice(&[0, 0, 0, 0]);
    let n = notification(&h.feed(Input::Received(open))).unwrap();
    assert_eq!((n.code, n.subcode), (2, 3));
}

#[test]
fn an_ibgp_peer_using_our_identifier_is_rejected() {
    let mut cfg = config();
    cfg.peer_asn = OUR_AS;
    cfg.router_id = Some(Ipv4Addr::new(10, 99, 0, 2));
    let mut h = Harness::new(cfg);
    h.connected();
    let n =
        notification(&h.feed(Input::Received(peer_open(OUR_AS, 90, full_caps(OUR_AS))))).unwrap();
    assert_eq!((n.code, n.subcode), (2, 3));
}

#[test]
fn a_keepalive_in_openconfirm_establishes_and_sends_routes_then_end_of_rib() {
    let mut h = Harness::new(config());
    h.feed(Input::SetAdvertisements(vec![
        adv("10.99.1.1/32"),
        adv("10.99.1.2/32"),
    ]));
    h.open_confirm(90);
    let out = h.feed(Input::Received(keepalive()));
    assert_eq!(h.s.state(), State::Established);
    // One UPDATE with both prefixes, then End-of-RIB for IPv4 and IPv6.
    assert_eq!(updates(&out), vec![(2, 0), (0, 0), (0, 0)]);
    assert_eq!(h.s.adj_rib_out().len(), 2);
}

#[test]
fn an_open_in_openconfirm_is_an_fsm_error() {
    let mut h = Harness::new(config());
    h.open_confirm(90);
    let out = h.feed(Input::Received(peer_open(PEER_AS, 90, full_caps(PEER_AS))));
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (5, 2));
    assert_eq!(h.s.state(), State::Idle);
}

#[test]
fn an_open_in_established_is_an_fsm_error() {
    let mut h = Harness::new(config());
    h.established();
    let out = h.feed(Input::Received(peer_open(PEER_AS, 90, full_caps(PEER_AS))));
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (5, 3));
}

#[test]
fn a_notification_from_the_peer_ends_the_session_without_an_answer() {
    let mut h = Harness::new(config());
    h.established();
    let mut b = vec![];
    ferrolb_speaker::bgp::wire::encode_notification(
        &mut b,
        &Notification {
            code: 6,
            subcode: 2,
            data: vec![],
        },
    );
    let out = h.feed(Input::Received(b));
    assert_eq!(h.s.state(), State::Idle);
    assert_eq!(notification(&out), None);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Event(Event::NotificationReceived(Notification { code: 6, .. }))
    )));
    assert!(timer_set(&out, Timer::ConnectRetry).is_some());
}

#[test]
fn a_closed_connection_in_established_goes_idle_and_reconnects_after_the_back_off() {
    let mut h = Harness::new(config());
    h.feed(Input::SetAdvertisements(vec![adv("10.99.1.1/32")]));
    h.established();
    let out = h.feed(Input::Closed);
    assert_eq!(h.s.state(), State::Idle);
    assert!(h.s.adj_rib_out().is_empty());
    let at = timer_set(&out, Timer::ConnectRetry).unwrap();
    assert_eq!(at - h.now, Duration::from_secs(1));
    h.now = at;
    let out = h.feed(Input::TimerExpired(Timer::ConnectRetry));
    assert_eq!(h.s.state(), State::Connect);
    assert!(out.contains(&Output::Connect));
}

#[test]
fn a_closed_connection_in_opensent_goes_idle_and_retries() {
    let mut h = Harness::new(config());
    h.connected();
    let out = h.feed(Input::Closed);
    assert_eq!(h.s.state(), State::Idle);
    assert!(timer_set(&out, Timer::ConnectRetry).is_some());
}

/// Three failed connects, then a session reaches Established; returns the harness there.
fn established_after_three_failures() -> Harness {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    for _ in 0..3 {
        let out = h.feed(Input::ConnectFailed);
        h.now = timer_set(&out, Timer::ConnectRetry).unwrap();
        h.feed(Input::TimerExpired(Timer::ConnectRetry));
    }
    assert_eq!(h.s.backoff(), Duration::from_secs(4));
    h.connect_and_establish();
    h
}

#[test]
fn a_session_that_stayed_established_resets_the_back_off() {
    let mut h = established_after_three_failures();
    h.advance(STABLE_SESSION);
    let out = h.feed(Input::Closed);
    let at = timer_set(&out, Timer::ConnectRetry).unwrap();
    assert_eq!(at - h.now, Duration::from_secs(1));
}

#[test]
fn a_session_that_ends_soon_after_established_counts_as_a_failure() {
    let mut h = established_after_three_failures();
    h.advance(Duration::from_secs(1));
    let out = h.feed(Input::Closed);
    let at = timer_set(&out, Timer::ConnectRetry).unwrap();
    assert_eq!(at - h.now, Duration::from_secs(8));
}

#[test]
fn a_peer_that_flaps_every_second_is_retried_ever_later_up_to_two_minutes() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    let mut delays = vec![];
    for _ in 0..10 {
        h.connect_and_establish();
        h.advance(Duration::from_secs(1));
        let out = h.feed(Input::Closed);
        let at = timer_set(&out, Timer::ConnectRetry).unwrap();
        delays.push((at - h.now).as_secs());
        h.now = at;
        h.feed(Input::TimerExpired(Timer::ConnectRetry));
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 64, 120, 120, 120]);
}

#[test]
fn a_stop_after_a_stable_session_starts_the_next_one_with_the_base_delay() {
    let mut h = established_after_three_failures();
    h.advance(STABLE_SESSION);
    h.feed(Input::Stop(CeaseReason::OtherConfigurationChange));
    h.feed(Input::Start);
    let out = h.feed(Input::ConnectFailed);
    let at = timer_set(&out, Timer::ConnectRetry).unwrap();
    assert_eq!(at - h.now, Duration::from_secs(1));
}

#[test]
fn stop_in_established_sends_cease_administrative_shutdown_and_stays_down() {
    let mut h = Harness::new(config());
    h.established();
    let out = h.feed(Input::Stop(CeaseReason::AdministrativeShutdown));
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (6, 2));
    assert_eq!(h.s.state(), State::Idle);
    assert_eq!(timer_set(&out, Timer::ConnectRetry), None);
    assert!(out.contains(&Output::CancelTimer(Timer::Hold)));
}

#[test]
fn removing_a_peer_sends_cease_peer_deconfigured() {
    let mut h = Harness::new(config());
    h.established();
    let n = notification(&h.feed(Input::Stop(CeaseReason::PeerDeconfigured))).unwrap();
    assert_eq!((n.code, n.subcode), (6, 3));
}

#[test]
fn stop_while_connecting_abandons_the_attempt_without_a_notification() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    let out = h.feed(Input::Stop(CeaseReason::AdministrativeShutdown));
    assert_eq!(h.s.state(), State::Idle);
    assert!(out.contains(&Output::Disconnect));
    assert_eq!(notification(&out), None);
}

#[test]
fn a_connection_completing_after_stop_is_closed() {
    let mut h = Harness::new(config());
    h.feed(Input::Start);
    h.feed(Input::Stop(CeaseReason::AdministrativeShutdown));
    let out = h.feed(Input::Connected {
        local: "10.99.0.1:40000".parse().unwrap(),
        remote: "10.99.0.2:179".parse().unwrap(),
        other_family: None,
    });
    assert_eq!(out, vec![Output::Disconnect]);
    assert_eq!(h.s.state(), State::Idle);
}

#[test]
fn the_keepalive_timer_sends_a_keepalive_and_rearms() {
    let mut h = Harness::new(config());
    h.established();
    h.advance(Duration::from_secs(30));
    let out = h.feed(Input::TimerExpired(Timer::Keepalive));
    assert_eq!(sent_messages(&out), vec![Message::Keepalive]);
    assert_eq!(
        timer_set(&out, Timer::Keepalive),
        Some(h.now + Duration::from_secs(30))
    );
}

#[test]
fn a_received_keepalive_restarts_the_hold_timer() {
    let mut h = Harness::new(config());
    h.established();
    h.advance(Duration::from_secs(60));
    let out = h.feed(Input::Received(keepalive()));
    assert_eq!(
        timer_set(&out, Timer::Hold),
        Some(h.now + Duration::from_secs(90))
    );
}

#[test]
fn hold_timer_expiry_in_openconfirm_sends_hold_timer_expired() {
    let mut h = Harness::new(config());
    h.open_confirm(90);
    h.advance(Duration::from_secs(90));
    let n = notification(&h.feed(Input::TimerExpired(Timer::Hold))).unwrap();
    assert_eq!((n.code, n.subcode), (4, 0));
    assert_eq!(h.s.state(), State::Idle);
}

#[test]
fn a_stale_timer_expiry_is_ignored() {
    let mut h = Harness::new(config());
    h.established();
    h.advance(Duration::from_secs(60));
    h.feed(Input::Received(keepalive()));
    // The hold timer was re-armed to now + 90 s; an expiry for the old deadline means nothing.
    h.advance(Duration::from_secs(30));
    let out = h.feed(Input::TimerExpired(Timer::Hold));
    assert!(out.is_empty());
    assert_eq!(h.s.state(), State::Established);
}

#[test]
fn a_message_split_across_reads_is_reassembled() {
    let mut h = Harness::new(config());
    h.connected();
    let open = peer_open(PEER_AS, 90, full_caps(PEER_AS));
    for chunk in open.chunks(7) {
        h.feed(Input::Received(chunk.to_vec()));
    }
    assert_eq!(h.s.state(), State::OpenConfirm);
}

#[test]
fn set_advertisements_in_established_sends_only_the_difference() {
    let mut h = Harness::new(config());
    h.feed(Input::SetAdvertisements(vec![
        adv("10.99.1.1/32"),
        adv("10.99.1.2/32"),
    ]));
    h.established();
    let out = h.feed(Input::SetAdvertisements(vec![
        adv("10.99.1.2/32"),
        adv("10.99.1.3/32"),
    ]));
    assert_eq!(updates(&out), vec![(0, 1), (1, 0)]);
    let keys: Vec<String> = h.s.adj_rib_out().keys().map(|p| p.to_string()).collect();
    assert_eq!(keys, vec!["10.99.1.2/32", "10.99.1.3/32"]);
    let out = h.feed(Input::SetAdvertisements(vec![
        adv("10.99.1.2/32"),
        adv("10.99.1.3/32"),
    ]));
    assert!(out.is_empty());
}

#[test]
fn ipv6_prefixes_are_withheld_from_a_peer_without_ipv6_unicast() {
    let mut h = Harness::new(config());
    h.connected();
    h.feed(Input::Received(peer_open(
        PEER_AS,
        90,
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::FourOctetAs(PEER_AS),
        ],
    )));
    h.feed(Input::Received(keepalive()));
    let out = h.feed(Input::SetAdvertisements(vec![adv("fd00:99::1/128")]));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Event(Event::NotAnnounced {
            reason: NotAnnounced::FamilyNotNegotiated,
            ..
        })
    )));
    assert!(updates(&out).is_empty());
}

#[test]
fn ipv6_prefixes_over_an_ipv4_session_need_a_configured_next_hop() {
    let mut h = Harness::new(config());
    h.established();
    let out = h.feed(Input::SetAdvertisements(vec![adv("fd00:99::1/128")]));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Event(Event::NotAnnounced {
            reason: NotAnnounced::Encode(EncodeError::NoNextHop),
            ..
        })
    )));
    let mut cfg = config();
    cfg.next_hop_v6 = Some("fd00:99::1".parse().unwrap());
    let mut h = Harness::new(cfg);
    h.established();
    let out = h.feed(Input::SetAdvertisements(vec![adv("fd00:99::1/128")]));
    assert_eq!(updates(&out), vec![(1, 0)]);
}

#[test]
fn ipv6_prefixes_over_an_ipv4_session_use_the_interfaces_ipv6_address_by_default() {
    let mut h = Harness::new(config());
    h.feed(Input::SetAdvertisements(vec![adv("fd00:99:10::1/128")]));
    h.feed(Input::Start);
    h.feed(Input::Connected {
        local: "10.99.0.1:40000".parse().unwrap(),
        remote: "10.99.0.2:179".parse().unwrap(),
        other_family: Some("fd00:99::1".parse().unwrap()),
    });
    h.feed(Input::Received(peer_open(PEER_AS, 90, full_caps(PEER_AS))));
    let out = h.feed(Input::Received(keepalive()));
    assert_eq!(updates(&out)[0], (1, 0));
    let nh: std::net::Ipv6Addr = "fd00:99::1".parse().unwrap();
    let sent: Vec<u8> = out
        .iter()
        .flat_map(|o| match o {
            Output::Send(b) => b.clone(),
            _ => vec![],
        })
        .collect();
    assert!(sent.windows(16).any(|w| w == nh.octets()));
}

#[test]
fn a_route_refresh_re_sends_the_adj_rib_out_of_that_family() {
    let mut h = Harness::new(config());
    h.feed(Input::SetAdvertisements(vec![
        adv("10.99.1.1/32"),
        adv("10.99.1.2/32"),
    ]));
    h.established();
    let mut rr = vec![];
    encode_route_refresh(
        &mut rr,
        RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: 0,
        },
    );
    let out = h.feed(Input::Received(rr));
    assert_eq!(updates(&out), vec![(2, 0)]);
}

#[test]
fn a_malformed_update_in_established_ends_the_session_and_keeps_no_input() {
    let mut h = Harness::new(config());
    h.established();
    // Withdrawn Routes Length 9 in a 4-byte body, followed by more bytes that must be ignored.
    let mut b = vec![0xff; 16];
    b.extend_from_slice(&[0, 23, 2, 0, 9, 0, 0]);
    b.extend(keepalive());
    let out = h.feed(Input::Received(b));
    let n = notification(&out).unwrap();
    assert_eq!((n.code, n.subcode), (3, 1));
    assert_eq!(h.s.state(), State::Idle);
}
