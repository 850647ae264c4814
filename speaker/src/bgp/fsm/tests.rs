//! The session with several paths per prefix (RFC 7911 ADD-PATH send), fed inputs at a fixed
//! time. Our UPDATEs carry path identifiers, which our decoder (made for what peers send) does
//! not read; [`sent`] reads them here.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use ipnet::IpNet;

use super::*;
use crate::bgp::open::{ADD_PATH_BOTH, ADD_PATH_RECEIVE};
use crate::bgp::wire::{RouteRefresh, encode_route_refresh, message_type};

const OUR_AS: u32 = 64512;
const PEER_AS: u32 = 64513;
const OWN: &str = "10.99.0.1";
const OTHER: &str = "10.99.0.3";
const THIRD: &str = "10.99.0.4";
const PREFIX: &str = "10.99.20.1/32";

/// One path as it went out: announced with its next hop, or withdrawn.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Path {
    Announced {
        id: Option<u32>,
        prefix: IpNet,
        next_hop: Ipv4Addr,
    },
    Withdrawn {
        id: Option<u32>,
        prefix: IpNet,
    },
}

fn announced(id: Option<u32>, prefix: &str, next_hop: &str) -> Path {
    Path::Announced {
        id,
        prefix: prefix.parse().unwrap(),
        next_hop: next_hop.parse().unwrap(),
    }
}

fn withdrawn(id: Option<u32>, prefix: &str) -> Path {
    Path::Withdrawn {
        id,
        prefix: prefix.parse().unwrap(),
    }
}

/// Reads IPv4 NLRI, each after a path identifier when `ids`.
fn ipv4_nlri(mut b: &[u8], ids: bool) -> Vec<(Option<u32>, IpNet)> {
    let mut v = vec![];
    while !b.is_empty() {
        let id = ids.then(|| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        b = &b[if ids { 4 } else { 0 }..];
        let bits = b[0];
        let n = usize::from(bits).div_ceil(8);
        let mut a = [0u8; 4];
        a[..n].copy_from_slice(&b[1..1 + n]);
        v.push((id, IpNet::new(IpAddr::from(a), bits).unwrap()));
        b = &b[1 + n..];
    }
    v
}

/// Every IPv4 path in the UPDATEs of `out`, in order (End-of-RIB markers carry none).
fn sent(out: &[Output], ids: bool) -> Vec<Path> {
    let mut paths = vec![];
    for o in out {
        let Output::Send(mut b) = o.clone() else {
            continue;
        };
        while !b.is_empty() {
            let len = usize::from(u16::from_be_bytes([b[16], b[17]]));
            let msg: Vec<u8> = b.drain(..len).collect();
            if msg[18] != message_type::UPDATE {
                continue;
            }
            let wlen = usize::from(u16::from_be_bytes([msg[19], msg[20]]));
            let withdrawn_field = &msg[21..21 + wlen];
            for (id, prefix) in ipv4_nlri(withdrawn_field, ids) {
                paths.push(Path::Withdrawn { id, prefix });
            }
            let alen = usize::from(u16::from_be_bytes([msg[21 + wlen], msg[22 + wlen]]));
            let attrs = &msg[23 + wlen..23 + wlen + alen];
            let nh = attrs
                .windows(3)
                .position(|w| w == [0x40, 3, 4])
                .map(|i| Ipv4Addr::new(attrs[i + 3], attrs[i + 4], attrs[i + 5], attrs[i + 6]));
            for (id, prefix) in ipv4_nlri(&msg[23 + wlen + alen..], ids) {
                let next_hop = nh.expect("NEXT_HOP with the NLRI");
                paths.push(Path::Announced {
                    id,
                    prefix,
                    next_hop,
                });
            }
        }
    }
    paths
}

fn config() -> PeerConfig {
    let mut c = PeerConfig::new("r", OUR_AS, PEER_AS, "10.99.0.2".parse().unwrap());
    c.add_path = true;
    c
}

/// The peer's OPEN with these ADD-PATH entries (none: no ADD-PATH capability).
fn peer_open(add_path: &[(Family, u8)]) -> Vec<u8> {
    let mut capabilities = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::FourOctetAs(PEER_AS),
    ];
    if !add_path.is_empty() {
        capabilities.push(Capability::AddPath(add_path.to_vec()));
    }
    let mut b = vec![];
    Open {
        my_as: PEER_AS as u16,
        hold_time: 90,
        bgp_id: Ipv4Addr::new(10, 99, 0, 2),
        capabilities,
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
    /// A session to a peer offering `add_path`, with `advs` desired; returns what it sent on
    /// reaching Established (our OPEN is checked to offer ADD-PATH send).
    fn established(
        config: PeerConfig,
        add_path: &[(Family, u8)],
        advs: Vec<Advertisement>,
    ) -> (Harness, Vec<Output>) {
        let mut h = Harness {
            s: Session::new(config),
            now: Instant::now(),
        };
        h.feed(Input::SetAdvertisements(advs));
        h.feed(Input::Start);
        h.feed(Input::Connected {
            local: format!("{OWN}:40000").parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: None,
        });
        h.feed(Input::Received(peer_open(add_path)));
        let out = h.feed(Input::Received(keepalive()));
        assert_eq!(h.s.state(), State::Established);
        (h, out)
    }

    fn feed(&mut self, input: Input) -> Vec<Output> {
        self.s.handle(self.now, input)
    }

    fn path_ids(&self) -> bool {
        self.s
            .negotiated()
            .is_some_and(|n| n.add_path_send.contains(&Family::IPV4_UNICAST))
    }

    fn set(&mut self, advs: Vec<Advertisement>) -> Vec<Path> {
        let out = self.feed(Input::SetAdvertisements(advs));
        sent(&out, self.path_ids())
    }
}

fn adv(prefix: &str) -> Advertisement {
    Advertisement::new(prefix.parse().unwrap())
}

fn via(prefix: &str, next_hop: &str) -> Advertisement {
    adv(prefix).via(next_hop.parse().unwrap())
}

const RECEIVES: [(Family, u8); 2] = [
    (Family::IPV4_UNICAST, ADD_PATH_RECEIVE),
    (Family::IPV6_UNICAST, ADD_PATH_BOTH),
];

#[test]
fn our_open_offers_add_path_send_for_each_family_only_when_configured() {
    for add_path in [true, false] {
        let mut s = Session::new(PeerConfig {
            add_path,
            ..config()
        });
        let now = Instant::now();
        s.handle(now, Input::Start);
        let out = s.handle(
            now,
            Input::Connected {
                local: format!("{OWN}:40000").parse().unwrap(),
                remote: "10.99.0.2:179".parse().unwrap(),
                other_family: None,
            },
        );
        let Some(Output::Send(b)) = out.iter().find(|o| matches!(o, Output::Send(_))) else {
            panic!("no OPEN: {out:?}")
        };
        let open = Open::decode(&b[19..]).unwrap();
        let offered = open.has(|c| {
            *c == Capability::AddPath(vec![
                (Family::IPV4_UNICAST, ADD_PATH_SEND),
                (Family::IPV6_UNICAST, ADD_PATH_SEND),
            ])
        });
        assert_eq!(offered, add_path);
    }
}

#[test]
fn two_paths_for_one_prefix_with_different_next_hops_go_out_with_two_path_ids() {
    let advs = vec![adv(PREFIX), via(PREFIX, OTHER)];
    let (h, out) = Harness::established(config(), &RECEIVES, advs);
    let n = h.s.negotiated().unwrap();
    assert_eq!(
        n.add_path_send,
        [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
    assert_eq!(
        sent(&out, true),
        [
            announced(Some(1), PREFIX, OWN),
            announced(Some(2), PREFIX, OTHER)
        ]
    );
    assert_eq!(
        h.s.adj_rib_out()[&PREFIX.parse::<IpNet>().unwrap()].len(),
        2
    );
}

#[test]
fn removing_one_of_two_paths_withdraws_only_its_path_id() {
    let advs = vec![adv(PREFIX), via(PREFIX, OTHER)];
    let (mut h, _) = Harness::established(config(), &RECEIVES, advs);
    assert_eq!(h.set(vec![adv(PREFIX)]), [withdrawn(Some(2), PREFIX)]);
    assert_eq!(h.set(vec![]), [withdrawn(Some(1), PREFIX)]);
    assert!(h.s.adj_rib_out().is_empty());
}

#[test]
fn a_peer_that_cannot_receive_gets_one_path_per_prefix_with_our_own_next_hop_preferred() {
    // BIRD's `add paths tx`: it would send, it does not receive.
    let send_only = [(Family::IPV4_UNICAST, ADD_PATH_SEND)];
    for peer in [&send_only[..], &[][..]] {
        let advs = vec![via(PREFIX, OTHER), adv(PREFIX)];
        let (h, out) = Harness::established(config(), peer, advs);
        assert!(h.s.negotiated().unwrap().add_path_send.is_empty());
        assert_eq!(
            sent(&out, false),
            [announced(None, PREFIX, OWN)],
            "{peer:?}"
        );
    }
}

#[test]
fn without_add_path_a_change_of_the_chosen_path_replaces_it_without_a_withdrawal() {
    let advs = vec![adv(PREFIX), via(PREFIX, THIRD)];
    let (mut h, _) = Harness::established(config(), &[], advs);
    // Our own path goes: the lowest third-party address takes its place, announced only.
    let now = h.set(vec![via(PREFIX, THIRD), via(PREFIX, OTHER)]);
    assert_eq!(now, [announced(None, PREFIX, OTHER)]);
    // A path that is not the chosen one changes nothing on the wire.
    assert_eq!(h.set(vec![via(PREFIX, OTHER)]), []);
    assert_eq!(
        h.set(vec![via(PREFIX, THIRD)]),
        [announced(None, PREFIX, THIRD)]
    );
    assert_eq!(h.set(vec![]), [withdrawn(None, PREFIX)]);
}

#[test]
fn path_ids_stay_with_their_next_hop_across_unrelated_changes() {
    const P2: &str = "10.99.20.2/32";
    const P3: &str = "10.99.20.3/32";
    let advs = vec![adv(PREFIX), via(PREFIX, OTHER), via(P2, THIRD)];
    let (mut h, out) = Harness::established(config(), &RECEIVES, advs);
    assert_eq!(
        sent(&out, true),
        [
            announced(Some(1), PREFIX, OWN),
            announced(Some(2), PREFIX, OTHER),
            announced(Some(3), P2, THIRD),
        ]
    );
    let changed = h.set(vec![adv(PREFIX), via(P2, THIRD), via(P3, "10.99.0.5")]);
    assert_eq!(
        changed,
        [
            withdrawn(Some(2), PREFIX),
            announced(Some(4), P3, "10.99.0.5")
        ]
    );
    // The next hop back: its identifier is the one it had.
    let back = h.set(vec![
        adv(PREFIX),
        via(PREFIX, OTHER),
        via(P2, THIRD),
        via(P3, "10.99.0.5"),
        via(P3, OTHER),
    ]);
    assert_eq!(
        back,
        [
            announced(Some(2), PREFIX, OTHER),
            announced(Some(2), P3, OTHER)
        ]
    );
}

#[test]
fn a_route_refresh_re_sends_both_paths_with_their_path_ids() {
    let advs = vec![adv(PREFIX), via(PREFIX, OTHER)];
    let (mut h, _) = Harness::established(config(), &RECEIVES, advs);
    let mut rr = vec![];
    encode_route_refresh(
        &mut rr,
        RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: 0,
        },
    );
    let out = h.feed(Input::Received(rr));
    assert_eq!(
        sent(&out, true),
        [
            announced(Some(1), PREFIX, OWN),
            announced(Some(2), PREFIX, OTHER)
        ]
    );
}

#[test]
fn path_ids_start_again_from_1_in_a_new_session() {
    let advs = vec![adv(PREFIX), via(PREFIX, OTHER)];
    let (mut h, _) = Harness::established(config(), &RECEIVES, advs);
    h.feed(Input::Closed);
    h.feed(Input::SetAdvertisements(vec![via(PREFIX, OTHER)]));
    h.now += h.s.backoff();
    h.feed(Input::TimerExpired(Timer::ConnectRetry));
    h.feed(Input::Connected {
        local: format!("{OWN}:40001").parse().unwrap(),
        remote: "10.99.0.2:179".parse().unwrap(),
        other_family: None,
    });
    h.feed(Input::Received(peer_open(&RECEIVES)));
    let out = h.feed(Input::Received(keepalive()));
    assert_eq!(sent(&out, true), [announced(Some(1), PREFIX, OTHER)]);
}
