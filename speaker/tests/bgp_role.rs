//! BGP Role and Only-to-Customer (RFC 9234), driven through the pure session state machine:
//! the capability we send, the pairs we accept, the NOTIFICATION for the others, and the OTC
//! attribute on what we announce.

mod bgp_support;

use std::net::Ipv4Addr;
use std::time::Instant;

use bgp_support::outputs::{sent_bytes, sent_messages};
use ferrolb_speaker::bgp::config::Role;
use ferrolb_speaker::bgp::fsm::Event;
use ferrolb_speaker::bgp::message::Message;
use ferrolb_speaker::bgp::open::{Capability, Open};
use ferrolb_speaker::bgp::wire::{Family, encode_keepalive};
use ferrolb_speaker::bgp::{Advertisement, Input, Output, PeerConfig, Session, State};

const OUR_AS: u32 = 64512;
const PEER_AS: u32 = 64513;

fn config(role: Option<Role>, strict: bool) -> PeerConfig {
    let mut c = PeerConfig::new("r1", OUR_AS, PEER_AS, "10.99.0.2".parse().unwrap());
    c.role = role;
    c.strict_role = strict;
    c
}

fn open_with_roles(asn: u32, roles: &[u8]) -> Vec<u8> {
    let mut capabilities = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::FourOctetAs(asn),
    ];
    capabilities.extend(roles.iter().map(|r| Capability::Role(*r)));
    let mut b = vec![];
    Open {
        my_as: asn as u16,
        hold_time: 90,
        bgp_id: Ipv4Addr::new(10, 99, 0, 2),
        capabilities,
    }
    .encode(&mut b);
    b
}

/// Starts a session, connects it, and returns our OPEN and what the peer's OPEN (with `roles`,
/// from AS `asn`) brought.
fn exchange(cfg: PeerConfig, asn: u32, roles: &[u8]) -> (Session, Open, Vec<Output>) {
    let now = Instant::now();
    let mut s = Session::new(cfg);
    s.handle(
        now,
        Input::SetAdvertisements(vec![Advertisement::new("10.99.1.1/32".parse().unwrap())]),
    );
    s.handle(now, Input::Start);
    let out = s.handle(
        now,
        Input::Connected {
            local: "10.99.0.1:40000".parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: None,
        },
    );
    let ours = sent_messages(&out)
        .into_iter()
        .find_map(|m| match m {
            Message::Open(o) => Some(o),
            _ => None,
        })
        .expect("our OPEN");
    let out = s.handle(now, Input::Received(open_with_roles(asn, roles)));
    (s, ours, out)
}

fn establish(s: &mut Session) -> Vec<Output> {
    let mut k = vec![];
    encode_keepalive(&mut k);
    s.handle(Instant::now(), Input::Received(k))
}

fn role_mismatch_words(out: &[Output]) -> Option<String> {
    let sent = sent_messages(out).into_iter().find_map(|m| match m {
        Message::Notification(n) => Some(n),
        _ => None,
    })?;
    assert_eq!((sent.code, sent.subcode), (2, 11), "{sent:?}");
    out.iter().find_map(|o| match o {
        Output::Event(Event::NotificationSent(e)) => Some(e.to_string()),
        _ => None,
    })
}

/// The 7 bytes of an Only-to-Customer attribute carrying `asn`.
fn otc(asn: u32) -> Vec<u8> {
    let mut v = vec![0xc0, 35, 4];
    v.extend_from_slice(&asn.to_be_bytes());
    v
}

#[test]
fn our_open_carries_the_configured_role_on_an_ebgp_session() {
    for role in Role::ALL {
        let (_, ours, _) = exchange(config(Some(role), false), PEER_AS, &[]);
        assert_eq!(ours.roles().collect::<Vec<_>>(), vec![role.value()]);
    }
    let (_, ours, _) = exchange(config(None, false), PEER_AS, &[]);
    assert_eq!(ours.roles().count(), 0);
}

#[test]
fn an_ibgp_session_sends_no_role_and_ignores_the_peers() {
    let mut cfg = config(Some(Role::Customer), true);
    cfg.peer_asn = OUR_AS;
    let (mut s, ours, out) = exchange(cfg, OUR_AS, &[Role::Customer.value()]);
    assert_eq!(ours.roles().count(), 0);
    assert_eq!(role_mismatch_words(&out), None);
    establish(&mut s);
    assert_eq!(s.state(), State::Established);
}

#[test]
fn every_pair_of_rfc_9234_roles_comes_up_and_every_other_pair_is_refused_with_role_mismatch() {
    for ours in Role::ALL {
        for theirs in Role::ALL {
            let (mut s, _, out) = exchange(config(Some(ours), false), PEER_AS, &[theirs.value()]);
            if theirs == ours.counterpart() {
                assert_eq!(role_mismatch_words(&out), None, "{ours} with {theirs}");
                establish(&mut s);
                assert_eq!(s.state(), State::Established, "{ours} with {theirs}");
                assert_eq!(s.negotiated().unwrap().peer_role, Some(theirs));
            } else {
                let words = role_mismatch_words(&out).expect("a Role Mismatch NOTIFICATION");
                assert_eq!(
                    words,
                    format!(
                        "role mismatch: we are {ours}, the peer announced {theirs}; a {ours}'s peer must be {} (RFC 9234)",
                        ours.counterpart()
                    )
                );
                assert_eq!(s.state(), State::Idle);
            }
        }
    }
}

#[test]
fn a_peer_without_a_role_comes_up_unless_strict_role_asks_for_one() {
    let (mut s, _, out) = exchange(config(Some(Role::Customer), false), PEER_AS, &[]);
    assert_eq!(role_mismatch_words(&out), None);
    establish(&mut s);
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.negotiated().unwrap().peer_role, None);

    let (s, _, out) = exchange(config(Some(Role::Customer), true), PEER_AS, &[]);
    assert_eq!(
        role_mismatch_words(&out).unwrap(),
        "role mismatch: we are customer and strictRole requires the peer to announce its BGP role (RFC 9234); it announced none"
    );
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn a_role_repeated_with_the_same_value_is_one_role_and_two_different_ones_are_a_mismatch() {
    let provider = Role::Provider.value();
    let (mut s, _, out) = exchange(
        config(Some(Role::Customer), false),
        PEER_AS,
        &[provider, provider],
    );
    assert_eq!(role_mismatch_words(&out), None);
    establish(&mut s);
    assert_eq!(s.state(), State::Established);

    let (_, _, out) = exchange(
        config(Some(Role::Customer), false),
        PEER_AS,
        &[provider, Role::Peer.value()],
    );
    assert_eq!(
        role_mismatch_words(&out).unwrap(),
        "role mismatch: the peer announced several different roles (provider, peer); RFC 9234 allows one"
    );
}

#[test]
fn a_role_value_rfc_9234_does_not_define_is_a_mismatch_named_by_its_value() {
    let (_, _, out) = exchange(config(Some(Role::Customer), false), PEER_AS, &[7]);
    assert!(
        role_mismatch_words(&out)
            .unwrap()
            .contains("the peer announced value 7, which RFC 9234 does not define"),
    );
}

#[test]
fn a_peer_announcing_a_role_when_we_have_none_comes_up_and_its_role_is_recorded() {
    let (mut s, _, _) = exchange(config(None, false), PEER_AS, &[Role::Provider.value()]);
    establish(&mut s);
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.negotiated().unwrap().peer_role, Some(Role::Provider));
}

#[test]
fn routes_to_a_customer_peer_or_route_server_client_carry_only_to_customer_with_our_as() {
    for ours in Role::ALL {
        let (mut s, _, _) = exchange(
            config(Some(ours), false),
            PEER_AS,
            &[ours.counterpart().value()],
        );
        let bytes = sent_bytes(&establish(&mut s));
        let marked = bytes.windows(7).any(|w| w == otc(OUR_AS).as_slice());
        assert_eq!(marked, ours.marks_only_to_customer(), "{ours}");
        assert_eq!(
            marked,
            matches!(ours, Role::Provider | Role::Peer | Role::RsServer),
            "{ours}"
        );
    }
}

#[test]
fn only_to_customer_carries_the_local_asn_when_one_replaces_my_asn() {
    let mut cfg = config(Some(Role::Provider), false);
    cfg.local_asn = Some(4_200_000_001);
    let (mut s, _, _) = exchange(cfg, PEER_AS, &[Role::Customer.value()]);
    let bytes = sent_bytes(&establish(&mut s));
    assert!(bytes.windows(7).any(|w| w == otc(4_200_000_001).as_slice()));
}

#[test]
fn a_received_only_to_customer_of_the_wrong_length_is_treat_as_withdraw_and_the_session_stays() {
    let (mut s, _, _) = exchange(
        config(Some(Role::Customer), false),
        PEER_AS,
        &[Role::Provider.value()],
    );
    establish(&mut s);
    // ORIGIN IGP, AS_PATH [64513], NEXT_HOP 10.99.0.2, OTC of 3 bytes, NLRI 10.99.2.0/24.
    let attrs: Vec<u8> = [
        &[0x40, 1, 1, 0][..],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfb, 0xf9],
        &[0x40, 3, 4, 10, 99, 0, 2],
        &[0xc0, 35, 3, 0, 0, 1],
    ]
    .concat();
    let mut body = vec![0, 0];
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(&attrs);
    body.extend_from_slice(&[24, 10, 99, 2]);
    let mut msg = vec![0xff; 16];
    msg.extend_from_slice(&((19 + body.len()) as u16).to_be_bytes());
    msg.push(2);
    msg.extend_from_slice(&body);
    let out = s.handle(Instant::now(), Input::Received(msg));
    let malformed = out.iter().find_map(|o| match o {
        Output::Event(Event::MalformedUpdate(m)) => Some(m.clone()),
        _ => None,
    });
    let malformed = malformed.expect("a malformed UPDATE event");
    assert_eq!(malformed.handling.metric_label(), "treat_as_withdraw");
    assert_eq!(s.state(), State::Established);
}
