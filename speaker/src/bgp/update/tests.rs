//! Codec tests: the exact bytes of our UPDATEs (with and without path identifiers), and
//! the packing of many prefixes into messages of at most 4096 bytes.

use super::*;
use crate::bgp::config::{Community, LargeCommunity};
use crate::bgp::message::{Message, decode_message};
use crate::bgp::wire::DecodeContext;

fn ebgp() -> EncodeParams {
    EncodeParams {
        my_asn: 64512,
        ibgp: false,
        four_octet_as: true,
        next_hop_v4: Some(Ipv4Addr::new(10, 99, 0, 1)),
        next_hop_v6: Some("fd00:99::1".parse().unwrap()),
        next_hop_v6_link_local: None,
        ipv4_over_ipv6: false,
        only_to_customer: None,
    }
}

#[test]
fn only_to_customer_follows_large_communities_in_type_order_and_the_update_checks_clean() {
    let p = EncodeParams {
        only_to_customer: Some(64512),
        ..ebgp()
    };
    let attrs = RouteAttrs {
        large_communities: [LargeCommunity {
            global: 64512,
            local1: 1,
            local2: 2,
        }]
        .into(),
        ..RouteAttrs::default()
    };
    for family in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
        let prefix: IpNet = if family == Family::IPV4_UNICAST {
            "10.99.1.1/32".parse().unwrap()
        } else {
            "fd00:99:1::1/128".parse().unwrap()
        };
        let mut b = vec![];
        encode_announcements(&mut b, &p, &attrs, PathGroup::own(family), [&prefix]).unwrap();
        let otc = [0xc0, 35, 4, 0, 0, 0xfc, 0x00];
        let at_otc = b.windows(7).position(|w| w == otc).expect("OTC");
        let at_large = b.windows(2).position(|w| w == [0xc0, 32]).expect("LARGE");
        assert!(at_large < at_otc, "{family:?}");
        let (m, _) = decode_message(
            &b,
            DecodeContext {
                four_octet_as: true,
            },
        )
        .unwrap()
        .unwrap();
        let Message::Update(summary) = m else {
            panic!("not an UPDATE")
        };
        assert_eq!((summary.announced, summary.malformed), (1, None));
    }
}

/// An eBGP session over a link with no IPv4 address and no global IPv6 one.
fn unnumbered() -> EncodeParams {
    EncodeParams {
        next_hop_v4: None,
        next_hop_v6: None,
        next_hop_v6_link_local: Some("fe80::1".parse().unwrap()),
        ipv4_over_ipv6: true,
        ..ebgp()
    }
}

const FE80_1: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

#[test]
fn an_ipv4_route_with_an_ipv6_next_hop_goes_in_mp_reach_afi_1_without_next_hop() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.0/24".parse().unwrap();
    let params = unnumbered();
    encode_announcements(
        &mut out,
        &params,
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV4_UNICAST),
        [&p],
    )
    .unwrap();
    // ORIGIN, AS_PATH, then MP_REACH (optional, extended length): AFI 1, SAFI 1, next hop
    // length 16, fe80::1, reserved, 10.99.1.0/24. No NEXT_HOP, no classic NLRI.
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 65, 2, 0, 0, 0, 42],
        &[0x40, 1, 1, 0],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00],
        &[0x90, 14, 0, 25, 0, 1, 1, 16],
        &FE80_1,
        &[0, 24, 10, 99, 1],
    ]
    .concat();
    assert_eq!(out, expected);
    let msgs = decode_all(&out);
    assert_eq!(
        msgs[0].0,
        Message::Update(crate::bgp::update_check::UpdateSummary {
            withdrawn: 0,
            announced: 1,
            malformed: None,
        })
    );
}

#[test]
fn an_ipv6_route_with_a_global_and_a_link_local_address_carries_a_32_byte_next_hop() {
    let mut out = vec![];
    let p: IpNet = "fd00:99:1::/64".parse().unwrap();
    let params = EncodeParams {
        next_hop_v6: Some("fd00:99::1".parse().unwrap()),
        ..unnumbered()
    };
    encode_announcements(
        &mut out,
        &params,
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV6_UNICAST),
        [&p],
    )
    .unwrap();
    let global: Ipv6Addr = "fd00:99::1".parse().unwrap();
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 86, 2, 0, 0, 0, 63],
        &[0x40, 1, 1, 0],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00],
        &[0x90, 14, 0, 46, 0, 2, 1, 32],
        &global.octets(),
        &FE80_1,
        &[0, 64, 0xfd, 0, 0, 0x99, 0, 1, 0, 0],
    ]
    .concat();
    assert_eq!(out, expected);
    assert_eq!(decode_all(&out).len(), 1);
}

#[test]
fn an_ipv6_route_with_only_a_link_local_address_carries_it_alone_in_16_bytes() {
    let mut out = vec![];
    let p: IpNet = "fd00:99:1::1/128".parse().unwrap();
    encode_announcements(
        &mut out,
        &unnumbered(),
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV6_UNICAST),
        [&p],
    )
    .unwrap();
    let mp = [&[0x90, 14, 0, 38, 0, 2, 1, 16][..], &FE80_1, &[0, 128]].concat();
    assert!(out.windows(mp.len()).any(|w| w == mp), "{out:02x?}");
}

#[test]
fn many_ipv4_routes_with_an_ipv6_next_hop_pack_into_full_messages() {
    let prefixes: Vec<IpNet> = host_routes(2_000);
    let mut out = vec![];
    let n = encode_announcements(
        &mut out,
        &unnumbered(),
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV4_UNICAST),
        &prefixes,
    )
    .unwrap();
    let msgs = decode_all(&out);
    assert_eq!(msgs.len(), n);
    let total = announced(&msgs);
    assert_eq!(total, 2_000);
    assert!(msgs.iter().all(|(_, len)| *len <= 4096));
}

/// `n` IPv4 host routes from 10.99.0.0 on.
fn host_routes(n: u32) -> Vec<IpNet> {
    (0..n)
        .map(|i| IpNet::new(IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i)), 32).unwrap())
        .collect()
}

/// How many prefixes the decoded UPDATEs announce.
fn announced(msgs: &[(Message, usize)]) -> u32 {
    msgs.iter()
        .map(|(m, _)| match m {
            Message::Update(s) => s.announced,
            _ => 0,
        })
        .sum()
}

fn decode_all(mut b: &[u8]) -> Vec<(Message, usize)> {
    let ctx = DecodeContext {
        four_octet_as: true,
    };
    let mut v = vec![];
    while !b.is_empty() {
        let (m, used) = decode_message(b, ctx).unwrap().unwrap();
        v.push((m, used));
        b = &b[used..];
    }
    v
}

#[test]
fn the_ebgp_as_path_is_one_sequence_with_our_asn() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.0/24".parse().unwrap();
    encode_announcements(
        &mut out,
        &ebgp(),
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV4_UNICAST),
        [&p],
    )
    .unwrap();
    // header, withdrawn 0, attrs len, ORIGIN IGP, AS_PATH SEQUENCE(64512), NEXT_HOP, NLRI.
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 47, 2, 0, 0, 0, 20],
        &[0x40, 1, 1, 0],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00],
        &[0x40, 3, 4, 10, 99, 0, 1],
        &[24, 10, 99, 1],
    ]
    .concat();
    assert_eq!(out, expected);
}

#[test]
fn ibgp_updates_carry_an_empty_as_path_and_local_pref() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.1/32".parse().unwrap();
    let attrs = RouteAttrs {
        local_pref: Some(150),
        ..Default::default()
    };
    let params = EncodeParams {
        ibgp: true,
        ..ebgp()
    };
    encode_announcements(
        &mut out,
        &params,
        &attrs,
        PathGroup::own(Family::IPV4_UNICAST),
        [&p],
    )
    .unwrap();
    let body = &out[23..];
    assert_eq!(&body[..7], &[0x40, 1, 1, 0, 0x40, 2, 0]);
    assert!(body.windows(7).any(|w| w == [0x40, 5, 4, 0, 0, 0, 150]));
}

#[test]
fn ten_thousand_host_routes_pack_into_full_messages() {
    let prefixes: Vec<IpNet> = host_routes(10_000);
    let mut out = vec![];
    let n = encode_announcements(
        &mut out,
        &ebgp(),
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV4_UNICAST),
        &prefixes,
    )
    .unwrap();
    let msgs = decode_all(&out);
    assert_eq!(msgs.len(), n);
    let total = announced(&msgs);
    assert_eq!(total, 10_000);
    // (4096 - 19 - 4 - 20) / 5 = 810 prefixes per message.
    assert_eq!(n, 10_000usize.div_ceil(810));
    assert!(msgs[..n - 1].iter().all(|(_, len)| *len > 4090));
}

#[test]
fn ipv6_announcements_use_mp_reach_with_the_ipv6_next_hop() {
    let mut out = vec![];
    let prefixes: Vec<IpNet> = vec![
        "fd00:99:1::/64".parse().unwrap(),
        "fd00:99:2::/64".parse().unwrap(),
    ];
    let attrs = RouteAttrs {
        communities: [Community(0xfc00_0064)].into(),
        large_communities: [LargeCommunity {
            global: 64512,
            local1: 1,
            local2: 2,
        }]
        .into(),
        ..Default::default()
    };
    encode_announcements(
        &mut out,
        &ebgp(),
        &attrs,
        PathGroup::own(Family::IPV6_UNICAST),
        &prefixes,
    )
    .unwrap();
    let msgs = decode_all(&out);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        msgs[0].0,
        Message::Update(crate::bgp::update_check::UpdateSummary {
            withdrawn: 0,
            announced: 2,
            malformed: None,
        })
    );
    let nh: Ipv6Addr = "fd00:99::1".parse().unwrap();
    assert!(out.windows(16).any(|w| w == nh.octets()));
    assert!(out.windows(7).any(|w| w == [0xc0, 8, 4, 0xfc, 0, 0, 0x64]));
}

#[test]
fn withdrawals_and_end_of_rib_decode_as_updates() {
    let mut out = vec![];
    let v4: IpNet = "10.99.2.0/24".parse().unwrap();
    let v6: IpNet = "fd00:99:2::/64".parse().unwrap();
    encode_withdrawals(&mut out, Family::IPV4_UNICAST, [own(v4)]);
    encode_withdrawals(&mut out, Family::IPV6_UNICAST, [own(v6)]);
    encode_end_of_rib(&mut out, Family::IPV4_UNICAST);
    encode_end_of_rib(&mut out, Family::IPV6_UNICAST);
    let msgs: Vec<u32> = decode_all(&out)
        .into_iter()
        .map(|(m, _)| match m {
            Message::Update(s) => s.withdrawn,
            _ => 99,
        })
        .collect();
    assert_eq!(msgs, vec![1, 1, 0, 0]);
    assert_eq!(out.len(), 27 + 19 + 4 + 7 + 9 + 23 + 29);
}

fn own(prefix: IpNet) -> Nlri {
    Nlri {
        path_id: None,
        prefix,
    }
}

fn via(family: Family, next_hop: &str, path_id: u32) -> PathGroup {
    PathGroup {
        family,
        next_hop: Some(next_hop.parse().unwrap()),
        path_id: Some(path_id),
    }
}

const HOST_V6: [u8; 16] = [0xfd, 0, 0, 0x99, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

#[test]
fn an_ipv4_announcement_with_a_path_id_carries_it_before_the_prefix_and_the_third_party_next_hop() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.1/32".parse().unwrap();
    let group = via(Family::IPV4_UNICAST, "192.168.1.3", 2);
    encode_announcements(&mut out, &ebgp(), &RouteAttrs::default(), group, [&p]).unwrap();
    // RFC 7911 §3: Path Identifier (4 octets), then Length and Prefix, in the NLRI field;
    // NEXT_HOP is the third-party address, not the session's 10.99.0.1.
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 52, 2, 0, 0, 0, 20],
        &[0x40, 1, 1, 0],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00],
        &[0x40, 3, 4, 192, 168, 1, 3],
        &[0, 0, 0, 2, 32, 10, 99, 1, 1],
    ]
    .concat();
    assert_eq!(out, expected);
}

#[test]
fn an_ipv4_withdrawal_with_path_ids_carries_each_before_its_prefix_in_withdrawn_routes() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.1/32".parse().unwrap();
    let paths = [1, 2].map(|id| Nlri {
        path_id: Some(id),
        prefix: p,
    });
    assert_eq!(encode_withdrawals(&mut out, Family::IPV4_UNICAST, paths), 1);
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 41, 2, 0, 18],
        &[0, 0, 0, 1, 32, 10, 99, 1, 1],
        &[0, 0, 0, 2, 32, 10, 99, 1, 1],
        &[0, 0],
    ]
    .concat();
    assert_eq!(out, expected);
}

#[test]
fn an_ipv6_announcement_with_a_path_id_carries_it_in_mp_reach_with_the_third_party_next_hop_alone()
{
    let mut out = vec![];
    let p: IpNet = "fd00:99:1::1/128".parse().unwrap();
    // A link-local half of our own would not belong to another node's address.
    let params = EncodeParams {
        next_hop_v6_link_local: Some("fe80::1".parse().unwrap()),
        ..ebgp()
    };
    let group = via(Family::IPV6_UNICAST, "fd00:99::3", 2);
    encode_announcements(&mut out, &params, &RouteAttrs::default(), group, [&p]).unwrap();
    let nh: Ipv6Addr = "fd00:99::3".parse().unwrap();
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 82, 2, 0, 0, 0, 59],
        &[0x40, 1, 1, 0],
        &[0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00],
        &[0x90, 14, 0, 42, 0, 2, 1, 16],
        &nh.octets(),
        &[0],
        &[0, 0, 0, 2, 128],
        &HOST_V6,
    ]
    .concat();
    assert_eq!(out, expected);
}

#[test]
fn an_ipv6_withdrawal_with_a_path_id_carries_it_in_mp_unreach() {
    let mut out = vec![];
    let path = Nlri {
        path_id: Some(1),
        prefix: "fd00:99:1::1/128".parse().unwrap(),
    };
    encode_withdrawals(&mut out, Family::IPV6_UNICAST, [path]);
    let expected: Vec<u8> = [
        &[0xff; 16][..],
        &[0, 51, 2, 0, 0, 0, 28],
        &[0x90, 15, 0, 24, 0, 2, 1],
        &[0, 0, 0, 1, 128],
        &HOST_V6,
    ]
    .concat();
    assert_eq!(out, expected);
}

/// Splits UPDATEs without withdrawals or MP attributes into (message length, NLRI with
/// their path identifiers); our decoder does not read path identifiers (we never offer to
/// receive them).
fn ipv4_nlri_with_path_ids(mut b: &[u8]) -> Vec<(usize, Vec<(u32, IpNet)>)> {
    let mut v = vec![];
    while !b.is_empty() {
        let len = usize::from(u16::from_be_bytes([b[16], b[17]]));
        let attrs_len = usize::from(u16::from_be_bytes([b[21], b[22]]));
        let mut nlri = &b[23 + attrs_len..len];
        let mut paths = vec![];
        while !nlri.is_empty() {
            let id = u32::from_be_bytes([nlri[0], nlri[1], nlri[2], nlri[3]]);
            let bits = nlri[4];
            let n = usize::from(bits).div_ceil(8);
            let mut a = [0u8; 4];
            a[..n].copy_from_slice(&nlri[5..5 + n]);
            paths.push((id, IpNet::new(Ipv4Addr::from(a).into(), bits).unwrap()));
            nlri = &nlri[5 + n..];
        }
        v.push((len, paths));
        b = &b[len..];
    }
    v
}

#[test]
fn ten_thousand_host_routes_with_a_path_id_pack_into_full_messages_of_at_most_4096_bytes() {
    let prefixes: Vec<IpNet> = host_routes(10_000);
    let mut out = vec![];
    let group = via(Family::IPV4_UNICAST, "10.99.0.3", 7);
    let n =
        encode_announcements(&mut out, &ebgp(), &RouteAttrs::default(), group, &prefixes).unwrap();
    // (4096 - 19 - 4 - 20) / 9 = 450 paths per message: each NLRI is 4 bytes longer.
    assert_eq!(n, 10_000usize.div_ceil(450));
    let msgs = ipv4_nlri_with_path_ids(&out);
    assert_eq!(msgs.len(), n);
    assert!(msgs.iter().all(|(len, _)| *len <= 4096));
    assert!(msgs[..n - 1].iter().all(|(len, _)| *len > 4096 - 9));
    let sent: Vec<(u32, IpNet)> = msgs.into_iter().flat_map(|(_, p)| p).collect();
    let expected: Vec<(u32, IpNet)> = prefixes.iter().map(|p| (7, *p)).collect();
    assert_eq!(sent, expected);
}

#[test]
fn withdrawals_and_ipv6_announcements_with_path_ids_stay_within_4096_bytes() {
    let v4: Vec<Nlri> = (0..1_000u32)
        .zip(host_routes(1_000))
        .map(|(i, prefix)| Nlri {
            path_id: Some(i % 3 + 1),
            prefix,
        })
        .collect();
    let mut out = vec![];
    // (4096 - 19 - 4) / 9 = 452 per message.
    assert_eq!(encode_withdrawals(&mut out, Family::IPV4_UNICAST, v4), 3);
    let v6: Vec<IpNet> = (0..2_000u128)
        .map(|i| {
            IpNet::new(
                IpAddr::V6(Ipv6Addr::from((0xfd00_0099_u128 << 96) | i)),
                128,
            )
        })
        .map(Result::unwrap)
        .collect();
    let group = via(Family::IPV6_UNICAST, "fd00:99::3", 2);
    // (4096 - 19 - 4 - 13 - 25) / 21 = 192 per message.
    let n = encode_announcements(&mut out, &ebgp(), &RouteAttrs::default(), group, &v6);
    assert_eq!(n, Ok(2_000usize.div_ceil(192)));
    let mut b = &out[..];
    let mut lengths = vec![];
    while !b.is_empty() {
        let len = usize::from(u16::from_be_bytes([b[16], b[17]]));
        lengths.push(len);
        b = &b[len..];
    }
    assert_eq!(lengths.len(), 3 + 11);
    assert!(lengths.iter().all(|l| *l <= 4096), "{lengths:?}");
}

#[test]
fn an_ipv4_prefix_takes_an_ipv6_third_party_next_hop_only_with_extended_next_hop() {
    let p: IpNet = "10.99.1.1/32".parse().unwrap();
    let group = via(Family::IPV4_UNICAST, "fd00:99::3", 1);
    let mut out = vec![];
    assert_eq!(
        encode_announcements(&mut out, &ebgp(), &RouteAttrs::default(), group, [&p]),
        Err(EncodeError::NextHopOfTheOtherFamily {
            next_hop: "fd00:99::3".parse().unwrap()
        })
    );
    assert!(out.is_empty());
    encode_announcements(&mut out, &unnumbered(), &RouteAttrs::default(), group, [&p]).unwrap();
    let nh: Ipv6Addr = "fd00:99::3".parse().unwrap();
    let mp = [&[0x90, 14, 0, 30, 0, 1, 1, 16][..], &nh.octets(), &[0]].concat();
    assert!(out.windows(mp.len()).any(|w| w == mp), "{out:02x?}");
}

#[test]
fn an_ipv4_third_party_next_hop_goes_in_next_hop_also_on_an_extended_next_hop_session() {
    let p: IpNet = "10.99.1.1/32".parse().unwrap();
    let group = via(Family::IPV4_UNICAST, "10.99.0.3", 1);
    let mut out = vec![];
    encode_announcements(&mut out, &unnumbered(), &RouteAttrs::default(), group, [&p]).unwrap();
    assert!(out.windows(7).any(|w| w == [0x40, 3, 4, 10, 99, 0, 3]));
    assert!(!out.windows(2).any(|w| w == [0x90, 14]));
    let v6 = via(Family::IPV6_UNICAST, "10.99.0.3", 1);
    let q: IpNet = "fd00:99:1::1/128".parse().unwrap();
    assert!(matches!(
        encode_announcements(&mut out, &unnumbered(), &RouteAttrs::default(), v6, [&q]),
        Err(EncodeError::NextHopOfTheOtherFamily { .. })
    ));
}

#[test]
fn a_two_octet_peer_sees_as_trans_and_an_as4_path() {
    let mut out = vec![];
    let p: IpNet = "10.99.1.0/24".parse().unwrap();
    let params = EncodeParams {
        my_asn: 4_200_000_001,
        four_octet_as: false,
        ..ebgp()
    };
    encode_announcements(
        &mut out,
        &params,
        &RouteAttrs::default(),
        PathGroup::own(Family::IPV4_UNICAST),
        [&p],
    )
    .unwrap();
    assert!(out.windows(7).any(|w| w == [0x40, 2, 4, 2, 1, 0x5b, 0xa0]));
    assert!(out.windows(3).any(|w| w == [0xc0, 17, 6]));
}
