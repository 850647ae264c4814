//! Encoding of the UPDATEs we send: announcements packed many prefixes to a message, withdrawals
//! and End-of-RIB markers (RFC 4271 §4.3, RFC 4760, RFC 4724 §2), IPv6 next hops with their
//! link-local half (RFC 2545 §3) and IPv4 routes with an IPv6 next hop (RFC 8950). Pure: no
//! I/O, no clock.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::config::RouteAttrs;
use super::open::AS_TRANS;
use super::wire::{Family, HEADER_LEN, MAX_MESSAGE_LEN, message_type, put_header};

const ORIGIN: u8 = 1;
const AS_PATH: u8 = 2;
const NEXT_HOP: u8 = 3;
const LOCAL_PREF: u8 = 5;
const COMMUNITIES: u8 = 8;
const MP_REACH: u8 = 14;
const MP_UNREACH: u8 = 15;
const AS4_PATH: u8 = 17;
const LARGE_COMMUNITIES: u8 = 32;
const ONLY_TO_CUSTOMER: u8 = 35;

const WELL_KNOWN: u8 = 0x40;
const OPTIONAL_TRANSITIVE: u8 = 0xc0;
const OPTIONAL: u8 = 0x80;
const EXTENDED_LENGTH: u8 = 0x10;
const AS_SEQUENCE: u8 = 2;

/// Room for the two 2-byte length fields of an UPDATE.
const UPDATE_FIXED: usize = 4;

/// What the encoder needs to know about the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeParams {
    /// Our AS number.
    pub my_asn: u32,
    /// The peer is in our AS: empty AS_PATH and LOCAL_PREF.
    pub ibgp: bool,
    /// 4-octet AS numbers were negotiated.
    pub four_octet_as: bool,
    /// NEXT_HOP for IPv4 routes.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop inside MP_REACH for IPv6 routes (the global one, RFC 2545 §3).
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Our link-local address on a session over one link (BGP unnumbered): sent after
    /// `next_hop_v6` in a 32-byte next hop, or alone in a 16-byte one when there is no global
    /// address (RFC 2545 §3).
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
    /// The peer accepts IPv4 routes with an IPv6 next hop (RFC 8950, negotiated): IPv4 routes
    /// go in MP_REACH with the IPv6 next hop instead of the NEXT_HOP attribute.
    pub ipv4_over_ipv6: bool,
    /// The AS to put in the Only-to-Customer attribute (RFC 9234 §5) of every route: ours,
    /// when our role makes the peer a customer, a lateral peer or a route-server client.
    pub only_to_customer: Option<u32>,
}

impl EncodeParams {
    /// Whether `family`'s routes carry the NEXT_HOP attribute (classic IPv4 NLRI) rather than
    /// a next hop inside MP_REACH.
    fn classic(&self, family: Family) -> bool {
        family == Family::IPV4_UNICAST && !self.ipv4_over_ipv6
    }

    /// The next hop field of MP_REACH for IPv6 next hops: global and link-local (32 bytes),
    /// or whichever of the two exists (16 bytes).
    fn mp_next_hop_v6(&self) -> Option<Vec<u8>> {
        match (self.next_hop_v6, self.next_hop_v6_link_local) {
            (Some(g), Some(ll)) => Some([g.octets(), ll.octets()].concat()),
            (Some(a), None) | (None, Some(a)) => Some(a.octets().to_vec()),
            (None, None) => None,
        }
    }
}

/// The family of a prefix.
pub fn family_of(prefix: &IpNet) -> Family {
    match prefix {
        IpNet::V4(_) => Family::IPV4_UNICAST,
        IpNet::V6(_) => Family::IPV6_UNICAST,
    }
}

fn put_attr(out: &mut Vec<u8>, flags: u8, type_code: u8, value: &[u8]) {
    if value.len() > 255 {
        out.extend_from_slice(&[flags | EXTENDED_LENGTH, type_code]);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, type_code, value.len() as u8]);
    }
    out.extend_from_slice(value);
}

fn put_prefix(out: &mut Vec<u8>, prefix: &IpNet) {
    let bits = prefix.prefix_len();
    out.push(bits);
    let n = usize::from(bits).div_ceil(8);
    match prefix.network() {
        IpAddr::V4(a) => out.extend_from_slice(&a.octets()[..n]),
        IpAddr::V6(a) => out.extend_from_slice(&a.octets()[..n]),
    }
}

fn prefix_wire_len(prefix: &IpNet) -> usize {
    1 + usize::from(prefix.prefix_len()).div_ceil(8)
}

/// Path attributes of one attribute set, split around the place MP_REACH takes so that the
/// message carries them in ascending type order.
struct Attributes {
    before_mp: Vec<u8>,
    after_mp: Vec<u8>,
}

fn build_attributes(p: &EncodeParams, attrs: &RouteAttrs, family: Family) -> Attributes {
    let mut before = Vec::with_capacity(64);
    let mut after = Vec::new();
    put_attr(&mut before, WELL_KNOWN, ORIGIN, &[0]);
    if p.ibgp {
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &[]);
    } else if p.four_octet_as {
        let mut v = vec![AS_SEQUENCE, 1];
        v.extend_from_slice(&p.my_asn.to_be_bytes());
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &v);
    } else {
        // RFC 6793 §4.2.2: a 2-octet peer sees AS_TRANS, the real AS travels in AS4_PATH.
        let two = u16::try_from(p.my_asn).unwrap_or(AS_TRANS);
        let mut v = vec![AS_SEQUENCE, 1];
        v.extend_from_slice(&two.to_be_bytes());
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &v);
        if p.my_asn > u32::from(u16::MAX) {
            let mut v4 = vec![AS_SEQUENCE, 1];
            v4.extend_from_slice(&p.my_asn.to_be_bytes());
            put_attr(&mut after, OPTIONAL_TRANSITIVE, AS4_PATH, &v4);
        }
    }
    if p.classic(family) {
        let nh = p.next_hop_v4.unwrap_or(Ipv4Addr::UNSPECIFIED);
        put_attr(&mut before, WELL_KNOWN, NEXT_HOP, &nh.octets());
    }
    if p.ibgp {
        let lp = attrs.local_pref.unwrap_or(100);
        put_attr(&mut before, WELL_KNOWN, LOCAL_PREF, &lp.to_be_bytes());
    }
    if !attrs.communities.is_empty() {
        let v: Vec<u8> = attrs
            .communities
            .iter()
            .flat_map(|c| c.0.to_be_bytes())
            .collect();
        put_attr(&mut before, OPTIONAL_TRANSITIVE, COMMUNITIES, &v);
    }
    if !attrs.large_communities.is_empty() {
        let v: Vec<u8> = attrs
            .large_communities
            .iter()
            .flat_map(|c| {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&c.global.to_be_bytes());
                b[4..8].copy_from_slice(&c.local1.to_be_bytes());
                b[8..].copy_from_slice(&c.local2.to_be_bytes());
                b
            })
            .collect();
        put_attr(&mut after, OPTIONAL_TRANSITIVE, LARGE_COMMUNITIES, &v);
    }
    if let Some(asn) = p.only_to_customer {
        put_attr(
            &mut after,
            OPTIONAL_TRANSITIVE,
            ONLY_TO_CUSTOMER,
            &asn.to_be_bytes(),
        );
    }
    Attributes {
        before_mp: before,
        after_mp: after,
    }
}

/// Why prefixes could not be put in an UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum EncodeError {
    /// The attributes alone leave no room for a prefix in a 4096-byte message.
    #[error("route attributes are too large for a BGP message; use fewer communities")]
    AttributesTooLarge,
    /// No next hop is known for the prefix's family.
    #[error("no next hop for this address family; set the peer's next hop for it")]
    NoNextHop,
}

/// Appends UPDATEs announcing `prefixes`, which share `attrs` and `family`, packed as densely as
/// 4096-byte messages allow. Returns how many messages were written.
pub fn encode_announcements<'a>(
    out: &mut Vec<u8>,
    p: &EncodeParams,
    attrs: &RouteAttrs,
    family: Family,
    prefixes: impl IntoIterator<Item = &'a IpNet>,
) -> Result<usize, EncodeError> {
    let a = build_attributes(p, attrs, family);
    let mut prefixes = prefixes.into_iter().peekable();
    let mut messages = 0;
    if p.classic(family) {
        if p.next_hop_v4.is_none() {
            return Err(EncodeError::NoNextHop);
        }
        let fixed = HEADER_LEN + UPDATE_FIXED + a.before_mp.len() + a.after_mp.len();
        let room = MAX_MESSAGE_LEN
            .checked_sub(fixed)
            .filter(|r| *r >= 5)
            .ok_or(EncodeError::AttributesTooLarge)?;
        let mut nlri = Vec::with_capacity(room);
        while prefixes.peek().is_some() {
            nlri.clear();
            while let Some(px) = prefixes.next_if(|px| nlri.len() + prefix_wire_len(px) <= room) {
                put_prefix(&mut nlri, px);
            }
            let attrs_len = a.before_mp.len() + a.after_mp.len();
            put_header(
                out,
                message_type::UPDATE,
                UPDATE_FIXED + attrs_len + nlri.len(),
            );
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(attrs_len as u16).to_be_bytes());
            out.extend_from_slice(&a.before_mp);
            out.extend_from_slice(&a.after_mp);
            out.extend_from_slice(&nlri);
            messages += 1;
        }
    } else {
        let nh = p.mp_next_hop_v6().ok_or(EncodeError::NoNextHop)?;
        // MP_REACH: flags, type, 2-byte length, AFI, SAFI, next-hop length, next hop, reserved.
        let mp_fixed = 4 + 3 + 1 + nh.len() + 1;
        let fixed = HEADER_LEN + UPDATE_FIXED + a.before_mp.len() + a.after_mp.len() + mp_fixed;
        let room = MAX_MESSAGE_LEN
            .checked_sub(fixed)
            .filter(|r| *r >= 17)
            .ok_or(EncodeError::AttributesTooLarge)?;
        let mut nlri = Vec::with_capacity(room);
        while prefixes.peek().is_some() {
            nlri.clear();
            while let Some(px) = prefixes.next_if(|px| nlri.len() + prefix_wire_len(px) <= room) {
                put_prefix(&mut nlri, px);
            }
            let mp_len = mp_fixed - 4 + nlri.len();
            let attrs_len = a.before_mp.len() + 4 + mp_len + a.after_mp.len();
            put_header(out, message_type::UPDATE, UPDATE_FIXED + attrs_len);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(attrs_len as u16).to_be_bytes());
            out.extend_from_slice(&a.before_mp);
            out.extend_from_slice(&[OPTIONAL | EXTENDED_LENGTH, MP_REACH]);
            out.extend_from_slice(&(mp_len as u16).to_be_bytes());
            out.extend_from_slice(&family.afi.to_be_bytes());
            out.extend_from_slice(&[family.safi, nh.len() as u8]);
            out.extend_from_slice(&nh);
            out.push(0);
            out.extend_from_slice(&nlri);
            out.extend_from_slice(&a.after_mp);
            messages += 1;
        }
    }
    Ok(messages)
}

/// Appends UPDATEs withdrawing `prefixes` of one family. Returns how many messages were written.
pub fn encode_withdrawals<'a>(
    out: &mut Vec<u8>,
    family: Family,
    prefixes: impl IntoIterator<Item = &'a IpNet>,
) -> usize {
    let mut prefixes = prefixes.into_iter().peekable();
    let mut messages = 0;
    let ipv4 = family == Family::IPV4_UNICAST;
    // IPv6 withdrawals travel in MP_UNREACH: flags, type, 2-byte length, AFI, SAFI.
    let overhead = HEADER_LEN + UPDATE_FIXED + if ipv4 { 0 } else { 7 };
    let room = MAX_MESSAGE_LEN - overhead;
    let mut nlri = Vec::with_capacity(room);
    while prefixes.peek().is_some() {
        nlri.clear();
        while let Some(px) = prefixes.next_if(|px| nlri.len() + prefix_wire_len(px) <= room) {
            put_prefix(&mut nlri, px);
        }
        if ipv4 {
            put_header(out, message_type::UPDATE, UPDATE_FIXED + nlri.len());
            out.extend_from_slice(&(nlri.len() as u16).to_be_bytes());
            out.extend_from_slice(&nlri);
            out.extend_from_slice(&[0, 0]);
        } else {
            let mp_len = 3 + nlri.len();
            put_header(out, message_type::UPDATE, UPDATE_FIXED + 4 + mp_len);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&((4 + mp_len) as u16).to_be_bytes());
            out.extend_from_slice(&[OPTIONAL | EXTENDED_LENGTH, MP_UNREACH]);
            out.extend_from_slice(&(mp_len as u16).to_be_bytes());
            out.extend_from_slice(&family.afi.to_be_bytes());
            out.push(family.safi);
            out.extend_from_slice(&nlri);
        }
        messages += 1;
    }
    messages
}

/// Appends the End-of-RIB marker of a family (RFC 4724 §2): an empty UPDATE for IPv4 unicast, an
/// empty MP_UNREACH otherwise.
pub fn encode_end_of_rib(out: &mut Vec<u8>, family: Family) {
    if family == Family::IPV4_UNICAST {
        put_header(out, message_type::UPDATE, UPDATE_FIXED);
        out.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        put_header(out, message_type::UPDATE, UPDATE_FIXED + 6);
        out.extend_from_slice(&[0, 0, 0, 6, OPTIONAL, MP_UNREACH, 3]);
        out.extend_from_slice(&family.afi.to_be_bytes());
        out.push(family.safi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::config::{Community, LargeCommunity};
    use crate::bgp::wire::{DecodeContext, Message, decode_message};

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
            encode_announcements(&mut b, &p, &attrs, family, [&prefix]).unwrap();
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
            Family::IPV4_UNICAST,
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
            Family::IPV6_UNICAST,
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
            Family::IPV6_UNICAST,
            [&p],
        )
        .unwrap();
        let mp = [&[0x90, 14, 0, 38, 0, 2, 1, 16][..], &FE80_1, &[0, 128]].concat();
        assert!(out.windows(mp.len()).any(|w| w == mp), "{out:02x?}");
    }

    #[test]
    fn many_ipv4_routes_with_an_ipv6_next_hop_pack_into_full_messages() {
        let prefixes: Vec<IpNet> = (0..2_000u32)
            .map(|i| IpNet::new(IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i)), 32).unwrap())
            .collect();
        let mut out = vec![];
        let n = encode_announcements(
            &mut out,
            &unnumbered(),
            &RouteAttrs::default(),
            Family::IPV4_UNICAST,
            &prefixes,
        )
        .unwrap();
        let msgs = decode_all(&out);
        assert_eq!(msgs.len(), n);
        let total: u32 = msgs
            .iter()
            .map(|(m, _)| match m {
                Message::Update(s) => s.announced,
                _ => 0,
            })
            .sum();
        assert_eq!(total, 2_000);
        assert!(msgs.iter().all(|(_, len)| *len <= 4096));
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
            Family::IPV4_UNICAST,
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
        encode_announcements(&mut out, &params, &attrs, Family::IPV4_UNICAST, [&p]).unwrap();
        let body = &out[23..];
        assert_eq!(&body[..7], &[0x40, 1, 1, 0, 0x40, 2, 0]);
        assert!(body.windows(7).any(|w| w == [0x40, 5, 4, 0, 0, 0, 150]));
    }

    #[test]
    fn ten_thousand_host_routes_pack_into_full_messages() {
        let prefixes: Vec<IpNet> = (0..10_000u32)
            .map(|i| IpNet::new(IpAddr::V4(Ipv4Addr::from(0x0a63_0000 + i)), 32).unwrap())
            .collect();
        let mut out = vec![];
        let n = encode_announcements(
            &mut out,
            &ebgp(),
            &RouteAttrs::default(),
            Family::IPV4_UNICAST,
            &prefixes,
        )
        .unwrap();
        let msgs = decode_all(&out);
        assert_eq!(msgs.len(), n);
        let total: u32 = msgs
            .iter()
            .map(|(m, _)| match m {
                Message::Update(s) => s.announced,
                _ => 0,
            })
            .sum();
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
        encode_announcements(&mut out, &ebgp(), &attrs, Family::IPV6_UNICAST, &prefixes).unwrap();
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
        encode_withdrawals(&mut out, Family::IPV4_UNICAST, [&v4]);
        encode_withdrawals(&mut out, Family::IPV6_UNICAST, [&v6]);
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
            Family::IPV4_UNICAST,
            [&p],
        )
        .unwrap();
        assert!(out.windows(7).any(|w| w == [0x40, 2, 4, 2, 1, 0x5b, 0xa0]));
        assert!(out.windows(3).any(|w| w == [0xc0, 17, 6]));
    }
}
