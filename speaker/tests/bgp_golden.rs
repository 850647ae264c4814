//! Golden tests: the session is fed what the recording peer sent to BIRD, FRR and GoBGP, and must
//! react to each malformed message with the NOTIFICATION those daemons sent.
//!
//! The recording peer ("us" in the vectors) is the remote side here, and our session plays the
//! daemon: AS 64513 expecting peer AS 64512.

mod bgp_support;

use std::time::{Duration, Instant};

use bgp_support::{Vector, load};
use ferrolb_speaker::bgp::fsm::{Event, Input, Output, Session, State};
use ferrolb_speaker::bgp::message::{Message, decode_message};
use ferrolb_speaker::bgp::update_check::{Handling, Malformed};
use ferrolb_speaker::bgp::wire::DecodeContext;
use ferrolb_speaker::bgp::{Notification, PeerConfig, SessionError};

fn session() -> (Session, Instant) {
    let mut cfg = PeerConfig::new("rec", 64513, 64512, "10.98.0.1".parse().unwrap());
    cfg.router_id = Some("10.98.0.2".parse().unwrap());
    let mut s = Session::new(cfg);
    let now = Instant::now();
    s.handle(now, Input::Start);
    s.handle(
        now,
        Input::Connected {
            local: "10.98.0.2:40000".parse().unwrap(),
            remote: "10.98.0.1:179".parse().unwrap(),
            other_family: None,
        },
    );
    (s, now)
}

fn notification_sent(outputs: &[Output]) -> Option<Notification> {
    outputs.iter().find_map(|o| match o {
        Output::Send(b) => match decode_message(b, DecodeContext::default()) {
            Ok(Some((Message::Notification(n), _))) => Some(n),
            _ => None,
        },
        _ => None,
    })
}

/// Feeds every message the recording peer sent, in order, and returns our NOTIFICATION.
fn react(v: &Vector) -> Option<Notification> {
    let (mut s, now) = session();
    for m in v.messages.iter().filter(|m| !m.from_daemon) {
        let out = s.handle(now, Input::Received(m.bytes.clone()));
        if let Some(n) = notification_sent(&out) {
            assert_eq!(s.state(), State::Idle, "{}", v.name);
            return Some(n);
        }
    }
    None
}

/// Our reaction must equal FRR's (whose data fields follow the RFC) in code, subcode and data,
/// and BIRD's in code and subcode.
fn golden(scenario: &str) {
    let frr = load(&format!("frr-{scenario}"));
    let ours = react(&frr).unwrap_or_else(|| panic!("{scenario}: no NOTIFICATION from us"));
    let (code, subcode, data) = frr.notification.clone().expect("FRR answered");
    assert_eq!(
        (ours.code, ours.subcode, &ours.data),
        (code, subcode, &data),
        "{scenario}"
    );
    let bird = load(&format!("bird-{scenario}"));
    let (bcode, bsub, _) = bird.notification.clone().expect("BIRD answered");
    let ours_bird = react(&bird).expect("NOTIFICATION");
    assert_eq!(
        (ours_bird.code, ours_bird.subcode),
        (bcode, bsub),
        "{scenario}"
    );
}

#[test]
fn an_open_with_version_3_gets_unsupported_version_with_our_version_as_data() {
    golden("notif-open-version3");
}

#[test]
fn an_open_with_hold_time_1_gets_unacceptable_hold_time() {
    golden("notif-open-holdtime1");
}

#[test]
fn an_open_from_the_wrong_as_gets_bad_peer_as() {
    // FRR adds the AS as data and BIRD a 4-byte form of it; the RFC defines no data, and we,
    // like GoBGP, send none.
    for d in ["bird", "frr", "gobgp"] {
        let n = react(&load(&format!("{d}-notif-open-bad-peer-as"))).expect("NOTIFICATION");
        assert_eq!((n.code, n.subcode, n.data.len()), (2, 2, 0), "{d}");
    }
}

#[test]
fn a_length_18_header_in_opensent_gets_bad_message_length() {
    golden("notif-header-length18-opensent");
}

#[test]
fn a_length_18_header_in_established_gets_bad_message_length() {
    golden("notif-header-length18");
}

#[test]
fn a_bad_marker_in_opensent_gets_connection_not_synchronized() {
    golden("notif-header-bad-marker-opensent");
}

#[test]
fn a_bad_marker_in_established_gets_connection_not_synchronized() {
    golden("notif-header-bad-marker");
}

#[test]
fn message_type_9_in_opensent_gets_bad_message_type() {
    golden("notif-header-type9-opensent");
}

#[test]
fn message_type_9_in_established_gets_bad_message_type() {
    golden("notif-header-type9");
}

#[test]
fn a_keepalive_instead_of_an_open_gets_the_rfc_6608_fsm_error() {
    golden("notif-fsm-keepalive-in-opensent");
}

#[test]
fn an_attribute_length_running_past_the_update_gets_malformed_attribute_list() {
    golden("notif-update-attrlen-overrun");
}

#[test]
fn an_as_path_with_a_trailing_byte_is_treated_as_withdraw_wherever_it_sits_as_bird_and_gobgp_do() {
    // BIRD and GoBGP keep the session and take the route as withdrawn (RFC 7606 7.2), in both
    // attribute orders; FRR does too when AS_PATH is last, and loses its place in the
    // attribute walk (answering 3/10) when it is not. We do what BIRD and GoBGP do.
    for s in [
        "notif-update-aspath-trailing-byte",
        "notif-update-aspath-trailing-byte-last",
    ] {
        for daemon in ["bird", "gobgp"] {
            let v = load(&format!("{daemon}-{s}"));
            assert!(v.notification.is_none(), "{daemon} sent no NOTIFICATION");
        }
        let v = load(&format!("bird-{s}"));
        let (mut session, now) = session();
        let mut malformed = Vec::new();
        for m in v.messages.iter().filter(|m| !m.from_daemon) {
            let out = session.handle(now, Input::Received(m.bytes.clone()));
            assert!(notification_sent(&out).is_none(), "{s}: we reset");
            malformed.extend(out.into_iter().filter_map(|o| match o {
                Output::Event(Event::MalformedUpdate(m)) => Some(m),
                _ => None,
            }));
        }
        assert_eq!(session.state(), State::Established, "{s}");
        assert_eq!(
            malformed,
            vec![Malformed {
                handling: Handling::TreatAsWithdraw,
                error: SessionError::MalformedAsPath,
            }],
            "{s}"
        );
    }
}

#[test]
fn silence_for_the_negotiated_hold_time_gets_hold_timer_expired() {
    let v = load("frr-notif-hold-timer-expired");
    let (mut s, now) = session();
    for m in v.messages.iter().filter(|m| !m.from_daemon) {
        s.handle(now, Input::Received(m.bytes.clone()));
    }
    assert_eq!(s.state(), State::Established);
    assert_eq!(
        s.negotiated().map(|n| n.hold_time),
        Some(Duration::from_secs(3))
    );
    let out = s.handle(
        now + Duration::from_secs(3),
        Input::TimerExpired(ferrolb_speaker::bgp::Timer::Hold),
    );
    let n = notification_sent(&out).expect("NOTIFICATION");
    let (code, subcode, data) = v.notification.unwrap();
    assert_eq!((n.code, n.subcode, n.data), (code, subcode, data));
}

#[test]
fn the_recorded_peers_route_refresh_is_answered_with_our_routes() {
    let v = load("frr-route-refresh");
    let (mut s, now) = session();
    s.handle(
        now,
        Input::SetAdvertisements(vec![ferrolb_speaker::bgp::Advertisement::new(
            "10.99.5.0/24".parse().unwrap(),
        )]),
    );
    let mut updates_after_refresh = 0;
    for m in v.messages.iter().filter(|m| !m.from_daemon) {
        let is_refresh = m.bytes.get(18) == Some(&5);
        let out = s.handle(now, Input::Received(m.bytes.clone()));
        if is_refresh {
            updates_after_refresh += out
                .iter()
                .filter(|o| matches!(o, Output::Send(b) if b.get(18) == Some(&2)))
                .count();
        }
    }
    assert_eq!(s.state(), State::Established);
    // One ROUTE-REFRESH per family; only the IPv4 one has a route to re-send.
    assert_eq!(updates_after_refresh, 1);
}
