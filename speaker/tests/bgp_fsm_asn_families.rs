//! The pure session with `localASN` and single-family sessions: what the OPEN offers, which
//! AS_PATH our routes carry, when a session is iBGP, and which families are announced.

mod bgp_support;

use std::net::Ipv4Addr;
use std::time::Instant;

use bgp_support::outputs::{sent_bytes, sent_messages};
use ferrolb_speaker::bgp::fsm::{Event, NotAnnounced};
use ferrolb_speaker::bgp::message::Message;
use ferrolb_speaker::bgp::open::{AS_TRANS, Capability, Open};
use ferrolb_speaker::bgp::wire::{Family, encode_keepalive};
use ferrolb_speaker::bgp::{Advertisement, Input, Output, PeerConfig, Session, State};

const MY_AS: u32 = 64512;
const LOCAL_AS: u32 = 64600;
const PEER_AS: u32 = 64513;

fn config() -> PeerConfig {
    PeerConfig::new("r1", MY_AS, PEER_AS, "10.99.0.2".parse().unwrap())
}

fn with_local_as(peer_asn: u32) -> PeerConfig {
    let mut c = config();
    c.local_asn = Some(LOCAL_AS);
    c.peer_asn = peer_asn;
    c
}

fn peer_open(asn: u32) -> Vec<u8> {
    let mut b = vec![];
    Open {
        my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
        hold_time: 90,
        bgp_id: Ipv4Addr::new(10, 99, 0, 2),
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::FourOctetAs(asn),
        ],
    }
    .encode(&mut b);
    b
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
    fn new(c: PeerConfig) -> Self {
        let mut h = Harness {
            s: Session::new(c),
            now: Instant::now(),
        };
        h.feed(Input::SetAdvertisements(vec![
            Advertisement::new("10.99.1.0/24".parse().unwrap()),
            Advertisement::new("fd00:99:1::/64".parse().unwrap()),
        ]));
        h
    }

    fn feed(&mut self, input: Input) -> Vec<Output> {
        self.s.handle(self.now, input)
    }

    /// Our OPEN.
    fn open(&mut self) -> Open {
        self.feed(Input::Start);
        let out = self.feed(Input::Connected {
            local: "10.99.0.1:40000".parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: Some("fd00:99::1".parse().unwrap()),
        });
        sent_messages(&out)
            .into_iter()
            .find_map(|m| match m {
                Message::Open(o) => Some(o),
                _ => None,
            })
            .expect("an OPEN")
    }

    /// What the session sends from the peer's OPEN (AS `peer_as`) to Established.
    fn establish(&mut self, peer_as: u32) -> Vec<Output> {
        self.open();
        let mut out = self.feed(Input::Received(peer_open(peer_as)));
        out.extend(self.feed(Input::Received(keepalive())));
        out
    }
}

fn multiprotocol(open: &Open) -> Vec<Family> {
    open.capabilities
        .iter()
        .filter_map(|c| match c {
            Capability::Multiprotocol(f) => Some(*f),
            _ => None,
        })
        .collect()
}

/// The AS_PATH attribute of an eBGP UPDATE: one AS_SEQUENCE holding `asn` alone.
fn as_path_of(asn: u32) -> Vec<u8> {
    let mut v = vec![0x40, 2, 6, 2, 1];
    v.extend_from_slice(&asn.to_be_bytes());
    v
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_session_with_local_asn_opens_with_that_asn() {
    let open = Harness::new(with_local_as(PEER_AS)).open();
    assert_eq!(open.my_as, LOCAL_AS as u16);
    assert_eq!(open.asn(), LOCAL_AS);
    assert!(!open.capabilities.contains(&Capability::FourOctetAs(MY_AS)));
}

#[test]
fn a_four_octet_local_asn_is_sent_as_as_trans_with_the_capability() {
    let mut c = config();
    c.local_asn = Some(4_200_000_001);
    let open = Harness::new(c).open();
    assert_eq!(open.my_as, AS_TRANS);
    assert!(
        open.capabilities
            .contains(&Capability::FourOctetAs(4_200_000_001))
    );
}

#[test]
fn a_session_without_local_asn_opens_with_my_asn() {
    let open = Harness::new(config()).open();
    assert_eq!(open.asn(), MY_AS);
}

#[test]
fn the_as_path_of_a_local_asn_session_is_that_asn_alone() {
    let mut h = Harness::new(with_local_as(PEER_AS));
    let bytes = sent_bytes(&h.establish(PEER_AS));
    assert_eq!(h.s.state(), State::Established);
    assert!(
        contains(&bytes, &as_path_of(LOCAL_AS)),
        "AS_PATH [64600] expected"
    );
    assert!(
        !contains(&bytes, &MY_AS.to_be_bytes()),
        "myASN is neither sent nor prepended"
    );
}

#[test]
fn a_peer_in_the_local_asn_is_ibgp_with_an_empty_as_path_and_local_pref() {
    let mut h = Harness::new(with_local_as(LOCAL_AS));
    let bytes = sent_bytes(&h.establish(LOCAL_AS));
    assert_eq!(h.s.state(), State::Established);
    // ORIGIN IGP, then an empty AS_PATH; LOCAL_PREF 100.
    assert!(contains(&bytes, &[0x40, 1, 1, 0, 0x40, 2, 0]));
    assert!(contains(&bytes, &[0x40, 5, 4, 0, 0, 0, 100]));
}

#[test]
fn a_peer_in_my_asn_is_ebgp_when_a_different_local_asn_is_presented() {
    let mut h = Harness::new(with_local_as(MY_AS));
    let bytes = sent_bytes(&h.establish(MY_AS));
    assert_eq!(h.s.state(), State::Established);
    assert!(contains(&bytes, &as_path_of(LOCAL_AS)));
    assert!(!contains(&bytes, &[0x40, 5, 4]), "no LOCAL_PREF on eBGP");
}

#[test]
fn dynamic_internal_with_local_asn_expects_the_peer_in_the_local_asn() {
    // The conversion gives `dynamicASN: internal` the AS presented as the peer's.
    let mut ok = Harness::new(with_local_as(LOCAL_AS));
    ok.establish(LOCAL_AS);
    assert_eq!(ok.s.state(), State::Established);
    let mut refused = Harness::new(with_local_as(LOCAL_AS));
    refused.establish(MY_AS);
    assert_eq!(refused.s.state(), State::Idle, "a peer in myASN is refused");
}

#[test]
fn dynamic_external_with_local_asn_refuses_only_a_peer_in_the_local_asn() {
    let external = || {
        let mut c = with_local_as(0);
        c.peer_asn_external = true;
        c
    };
    let mut same = Harness::new(external());
    let out = same.establish(LOCAL_AS);
    assert_eq!(same.s.state(), State::Idle);
    assert!(
        sent_messages(&out)
            .iter()
            .any(|m| matches!(m, Message::Notification(n) if (n.code, n.subcode) == (2, 2))),
        "Bad Peer AS"
    );
    let mut other = Harness::new(external());
    let bytes = sent_bytes(&other.establish(MY_AS));
    assert_eq!(other.s.state(), State::Established);
    assert_eq!(other.s.negotiated().map(|n| n.peer_as), Some(MY_AS));
    assert!(contains(&bytes, &as_path_of(LOCAL_AS)));
}

#[test]
fn a_dual_stack_session_offers_both_families() {
    let open = Harness::new(config()).open();
    assert_eq!(
        multiprotocol(&open),
        [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
}

#[test]
fn a_single_family_session_offers_only_its_peer_address_family() {
    let mut c = config();
    c.dual_stack = false;
    c.graceful_restart = true;
    let open = Harness::new(c).open();
    assert_eq!(multiprotocol(&open), [Family::IPV4_UNICAST]);
    let gr = open.capabilities.iter().find_map(|c| match c {
        Capability::GracefulRestart { families, .. } => Some(families.clone()),
        _ => None,
    });
    assert_eq!(gr, Some(vec![(Family::IPV4_UNICAST, true)]));
}

#[test]
fn a_single_family_session_announces_only_its_family_and_says_the_other_is_not_configured() {
    let mut c = config();
    c.dual_stack = false;
    let mut h = Harness::new(c);
    let out = h.establish(PEER_AS);
    assert_eq!(h.s.state(), State::Established);
    assert_eq!(
        h.s.negotiated().map(|n| n.families.clone()),
        Some(vec![Family::IPV4_UNICAST])
    );
    let announced: Vec<_> = h.s.adj_rib_out().keys().map(|p| p.to_string()).collect();
    assert_eq!(announced, ["10.99.1.0/24"]);
    assert!(out.iter().any(|o| matches!(o,
        Output::Event(Event::NotAnnounced { prefixes, reason: NotAnnounced::FamilyNotConfigured })
            if prefixes == &["fd00:99:1::/64".parse::<ipnet::IpNet>().unwrap()])));
    assert!(!out.iter().any(|o| matches!(
        o,
        Output::Event(Event::NotAnnounced {
            reason: NotAnnounced::FamilyNotNegotiated,
            ..
        })
    )));
    // One End-of-RIB, IPv4's (an empty UPDATE), and no MP_UNREACH for IPv6.
    let bytes = sent_bytes(&out);
    assert!(!contains(&bytes, &[0x80, 15, 3, 0, 2, 1]));
}

#[test]
fn a_dual_stack_session_announces_both_families() {
    let mut h = Harness::new(config());
    h.establish(PEER_AS);
    assert_eq!(h.s.adj_rib_out().len(), 2);
}
