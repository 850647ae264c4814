//! OPEN messages and the capabilities we speak (RFC 4271 §4.2, RFC 5492, RFC 6793, RFC 4760,
//! RFC 2918, RFC 4724, RFC 9072, RFC 8950, RFC 9234, RFC 7911). Pure: no I/O, no clock.

use std::net::Ipv4Addr;

use super::error::SessionError;
use super::wire::{Family, message_type, put_header};

/// AS_TRANS (RFC 6793): the 2-byte My-AS of a speaker whose AS does not fit in 16 bits.
pub const AS_TRANS: u16 = 23456;

/// Send/Receive value of the ADD-PATH capability (RFC 7911 §4): the sender can receive
/// several paths per prefix.
pub const ADD_PATH_RECEIVE: u8 = 1;
/// Send/Receive value: the sender would like to send several paths per prefix.
pub const ADD_PATH_SEND: u8 = 2;
/// Send/Receive value: both.
pub const ADD_PATH_BOTH: u8 = 3;

/// A capability (RFC 5492). Capabilities we do not use are kept only as their code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// Multiprotocol extensions for one family (code 1, RFC 4760).
    Multiprotocol(Family),
    /// Route refresh (code 2, RFC 2918).
    RouteRefresh,
    /// Extended next hop encoding (code 5, RFC 8950 §3): NLRI of these families may carry a
    /// next hop of the paired AFI (IPv4 unicast with an IPv6 next hop is `(IPV4_UNICAST, 2)`).
    ExtendedNextHop(Vec<(Family, u16)>),
    /// Graceful restart (code 64, RFC 4724).
    GracefulRestart {
        /// R bit: the sender has restarted.
        restarted: bool,
        /// Seconds the receiver should keep routes after the session drops.
        restart_time: u16,
        /// Families with their F bit (forwarding state preserved).
        families: Vec<(Family, bool)>,
    },
    /// The sender's BGP Role (code 9, RFC 9234 §4.1), as its raw value: values RFC 9234 does
    /// not define are kept so that the session can refuse them in words.
    Role(u8),
    /// 4-octet AS numbers with the sender's AS (code 65, RFC 6793).
    FourOctetAs(u32),
    /// ADD-PATH (code 69, RFC 7911 §4): per family, whether the sender can receive
    /// ([`ADD_PATH_RECEIVE`]), would like to send ([`ADD_PATH_SEND`]) or both
    /// ([`ADD_PATH_BOTH`]) several paths per prefix, each with a path identifier. The value is
    /// kept as sent: another one means neither (RFC 7911 §4 says to ignore it).
    AddPath(Vec<(Family, u8)>),
    /// Any other capability: its code, content skipped (FQDN 73, LLGR 71, enhanced route
    /// refresh 70, ...).
    Unrecognized(u8),
}

/// An OPEN message body. Decoding checks the version and structure; the session checks the
/// values against its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The 2-byte My Autonomous System field.
    pub my_as: u16,
    /// Proposed hold time in seconds.
    pub hold_time: u16,
    /// BGP identifier.
    pub bgp_id: Ipv4Addr,
    /// Capabilities, in wire order.
    pub capabilities: Vec<Capability>,
}

impl Open {
    /// The sender's AS: the 4-octet AS capability when present, otherwise My-AS.
    pub fn asn(&self) -> u32 {
        self.capabilities
            .iter()
            .find_map(|c| match c {
                Capability::FourOctetAs(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(u32::from(self.my_as))
    }

    /// Whether the sender announced the 4-octet AS capability.
    pub fn four_octet_as(&self) -> bool {
        self.capabilities
            .iter()
            .any(|c| matches!(c, Capability::FourOctetAs(_)))
    }

    /// Families the sender announced with the multiprotocol capability; IPv4 unicast alone when it
    /// announced none (RFC 4760 §8).
    pub fn families(&self) -> Vec<Family> {
        let v: Vec<Family> = self
            .capabilities
            .iter()
            .filter_map(|c| match c {
                Capability::Multiprotocol(f) => Some(*f),
                _ => None,
            })
            .collect();
        if v.is_empty() {
            vec![Family::IPV4_UNICAST]
        } else {
            v
        }
    }

    /// Whether the sender accepts `family` NLRI with a next hop of `next_hop_afi` (RFC 8950).
    pub fn extended_next_hop(&self, family: Family, next_hop_afi: u16) -> bool {
        self.capabilities.iter().any(|c| match c {
            Capability::ExtendedNextHop(v) => v.contains(&(family, next_hop_afi)),
            _ => false,
        })
    }

    /// Whether the sender can receive path identifiers for `family` (RFC 7911 §4: ADD-PATH
    /// with Send/Receive 1 or 3 for it).
    pub fn add_path_receive(&self, family: Family) -> bool {
        self.capabilities.iter().any(|c| match c {
            Capability::AddPath(v) => v
                .iter()
                .any(|(f, sr)| *f == family && matches!(*sr, ADD_PATH_RECEIVE | ADD_PATH_BOTH)),
            _ => false,
        })
    }

    /// The role values the sender announced, in wire order (RFC 9234 allows the capability more
    /// than once, as long as every copy agrees).
    pub fn roles(&self) -> impl Iterator<Item = u8> + '_ {
        self.capabilities.iter().filter_map(|c| match c {
            Capability::Role(r) => Some(*r),
            _ => None,
        })
    }

    /// Whether the sender announced `capability` (compared by kind).
    pub fn has(&self, pred: impl Fn(&Capability) -> bool) -> bool {
        self.capabilities.iter().any(pred)
    }

    /// Decodes an OPEN body (after the header). Version first (RFC 4271 §6.2), then the optional
    /// parameters, in both the classic and the RFC 9072 extended form, with any number of
    /// capabilities per parameter.
    pub fn decode(body: &[u8]) -> Result<Open, SessionError> {
        let fixed = body.get(..10).ok_or(SessionError::MalformedOpen)?;
        if fixed[0] != 4 {
            return Err(SessionError::UnsupportedVersion { version: fixed[0] });
        }
        let my_as = u16::from_be_bytes([fixed[1], fixed[2]]);
        let hold_time = u16::from_be_bytes([fixed[3], fixed[4]]);
        let bgp_id = Ipv4Addr::new(fixed[5], fixed[6], fixed[7], fixed[8]);
        let opt_len = fixed[9];
        let rest = &body[10..];
        // RFC 9072: length 255 followed by type 255 announces 2-byte lengths.
        let (params, extended) = if opt_len == 255 && rest.first() == Some(&255) {
            let len = rest.get(1..3).ok_or(SessionError::MalformedOpen)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            (&rest[3..], Some(len))
        } else {
            (rest, None)
        };
        let expected = extended.unwrap_or(usize::from(opt_len));
        if params.len() != expected {
            return Err(SessionError::MalformedOpen);
        }
        let mut capabilities = Vec::new();
        let mut p = params;
        while !p.is_empty() {
            let param_type = p[0];
            let (len, head) = if extended.is_some() {
                let l = p.get(1..3).ok_or(SessionError::MalformedOpen)?;
                (usize::from(u16::from_be_bytes([l[0], l[1]])), 3)
            } else {
                (
                    usize::from(*p.get(1).ok_or(SessionError::MalformedOpen)?),
                    2,
                )
            };
            let value = p.get(head..head + len).ok_or(SessionError::MalformedOpen)?;
            if param_type != 2 {
                return Err(SessionError::UnsupportedOptionalParameter { param_type });
            }
            decode_capabilities(value, &mut capabilities)?;
            p = &p[head + len..];
        }
        Ok(Open {
            my_as,
            hold_time,
            bgp_id,
            capabilities,
        })
    }

    /// Appends this OPEN as a complete message; all capabilities go in one optional parameter.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut caps = Vec::with_capacity(64);
        for c in &self.capabilities {
            encode_capability(c, &mut caps);
        }
        // Our capabilities are a few dozen bytes; the classic 1-byte length always suffices.
        let caps_len = u8::try_from(caps.len()).unwrap_or(u8::MAX);
        put_header(out, message_type::OPEN, 10 + 2 + caps.len());
        out.push(4);
        out.extend_from_slice(&self.my_as.to_be_bytes());
        out.extend_from_slice(&self.hold_time.to_be_bytes());
        out.extend_from_slice(&self.bgp_id.octets());
        out.push(caps_len.saturating_add(2));
        out.push(2);
        out.push(caps_len);
        out.extend_from_slice(&caps);
    }
}

fn decode_capabilities(mut v: &[u8], out: &mut Vec<Capability>) -> Result<(), SessionError> {
    while !v.is_empty() {
        let code = v[0];
        let len = usize::from(*v.get(1).ok_or(SessionError::MalformedOpen)?);
        let value = v.get(2..2 + len).ok_or(SessionError::MalformedOpen)?;
        let cap = match (code, len) {
            (1, 4) => Capability::Multiprotocol(Family {
                afi: u16::from_be_bytes([value[0], value[1]]),
                safi: value[3],
            }),
            (2, 0) => Capability::RouteRefresh,
            // RFC 8950 §3: triples of NLRI AFI (2), NLRI SAFI (2), next-hop AFI (2).
            (5, l) if l > 0 && l % 6 == 0 => Capability::ExtendedNextHop(
                value
                    .chunks_exact(6)
                    .map(|c| {
                        let afi = u16::from_be_bytes([c[0], c[1]]);
                        let safi = u16::from_be_bytes([c[2], c[3]]);
                        let nh_afi = u16::from_be_bytes([c[4], c[5]]);
                        // A SAFI above 255 names no family we speak; it can never match ours.
                        let safi = u8::try_from(safi).unwrap_or(u8::MAX);
                        (Family { afi, safi }, nh_afi)
                    })
                    .collect(),
            ),
            (64, l) if l >= 2 && (l - 2) % 4 == 0 => {
                let flags_time = u16::from_be_bytes([value[0], value[1]]);
                let families = value[2..]
                    .chunks_exact(4)
                    .map(|c| {
                        (
                            Family {
                                afi: u16::from_be_bytes([c[0], c[1]]),
                                safi: c[2],
                            },
                            c[3] & 0x80 != 0,
                        )
                    })
                    .collect();
                Capability::GracefulRestart {
                    restarted: flags_time & 0x8000 != 0,
                    restart_time: flags_time & 0x0fff,
                    families,
                }
            }
            (9, 1) => Capability::Role(value[0]),
            (65, 4) => Capability::FourOctetAs(u32::from_be_bytes([
                value[0], value[1], value[2], value[3],
            ])),
            // RFC 7911 §4: entries of AFI (2), SAFI (1), Send/Receive (1).
            (69, l) if l % 4 == 0 => Capability::AddPath(
                value
                    .chunks_exact(4)
                    .map(|c| {
                        let afi = u16::from_be_bytes([c[0], c[1]]);
                        (Family { afi, safi: c[2] }, c[3])
                    })
                    .collect(),
            ),
            (1 | 2 | 5 | 9 | 64 | 65 | 69, _) => return Err(SessionError::MalformedOpen),
            (other, _) => Capability::Unrecognized(other),
        };
        out.push(cap);
        v = &v[2 + len..];
    }
    Ok(())
}

fn encode_capability(c: &Capability, out: &mut Vec<u8>) {
    match c {
        Capability::Multiprotocol(f) => {
            out.extend_from_slice(&[1, 4]);
            out.extend_from_slice(&f.afi.to_be_bytes());
            out.extend_from_slice(&[0, f.safi]);
        }
        Capability::RouteRefresh => out.extend_from_slice(&[2, 0]),
        Capability::ExtendedNextHop(v) => {
            out.extend_from_slice(&[5, (6 * v.len()) as u8]);
            for (f, nh_afi) in v {
                out.extend_from_slice(&f.afi.to_be_bytes());
                out.extend_from_slice(&u16::from(f.safi).to_be_bytes());
                out.extend_from_slice(&nh_afi.to_be_bytes());
            }
        }
        Capability::GracefulRestart {
            restarted,
            restart_time,
            families,
        } => {
            out.extend_from_slice(&[64, (2 + 4 * families.len()) as u8]);
            let flags = if *restarted { 0x8000 } else { 0 };
            out.extend_from_slice(&(flags | (restart_time & 0x0fff)).to_be_bytes());
            for (f, forwarding) in families {
                out.extend_from_slice(&f.afi.to_be_bytes());
                out.push(f.safi);
                out.push(if *forwarding { 0x80 } else { 0 });
            }
        }
        Capability::Role(r) => out.extend_from_slice(&[9, 1, *r]),
        Capability::FourOctetAs(asn) => {
            out.extend_from_slice(&[65, 4]);
            out.extend_from_slice(&asn.to_be_bytes());
        }
        Capability::AddPath(v) => {
            out.extend_from_slice(&[69, (4 * v.len()) as u8]);
            for (f, send_receive) in v {
                out.extend_from_slice(&f.afi.to_be_bytes());
                out.extend_from_slice(&[f.safi, *send_receive]);
            }
        }
        // We never announce capabilities we do not implement.
        Capability::Unrecognized(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::message::{Message, decode_message};
    use crate::bgp::wire::DecodeContext;

    fn ours() -> Open {
        Open {
            my_as: AS_TRANS,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 99, 0, 1),
            capabilities: vec![
                Capability::Multiprotocol(Family::IPV4_UNICAST),
                Capability::Multiprotocol(Family::IPV6_UNICAST),
                Capability::RouteRefresh,
                Capability::GracefulRestart {
                    restarted: false,
                    restart_time: 120,
                    families: vec![(Family::IPV4_UNICAST, true), (Family::IPV6_UNICAST, true)],
                },
                Capability::FourOctetAs(4_200_000_001),
            ],
        }
    }

    #[test]
    fn our_open_round_trips_through_the_decoder() {
        let mut b = vec![];
        ours().encode(&mut b);
        let (m, used) = decode_message(&b, DecodeContext::default())
            .unwrap()
            .unwrap();
        assert_eq!(used, b.len());
        assert_eq!(m, Message::Open(ours()));
        let Message::Open(o) = m else { unreachable!() };
        assert_eq!(o.asn(), 4_200_000_001);
    }

    #[test]
    fn the_extended_next_hop_capability_for_ipv4_over_ipv6_is_code_5_with_afi_1_safi_1_nexthop_afi_2()
     {
        let open = Open {
            my_as: 64512,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 99, 0, 1),
            capabilities: vec![Capability::ExtendedNextHop(vec![(Family::IPV4_UNICAST, 2)])],
        };
        let mut b = vec![];
        open.encode(&mut b);
        // Optional parameters: length 10, type 2 (capabilities), length 8, then code 5,
        // length 6, AFI 1, SAFI 1 (two octets), next-hop AFI 2.
        assert_eq!(&b[28..], &[10, 2, 8, 5, 6, 0, 1, 0, 1, 0, 2]);
        let decoded = Open::decode(&b[19..]).unwrap();
        assert_eq!(decoded, open);
        assert!(decoded.extended_next_hop(Family::IPV4_UNICAST, 2));
        assert!(!decoded.extended_next_hop(Family::IPV6_UNICAST, 1));
    }

    #[test]
    fn an_extended_next_hop_capability_with_several_entries_decodes() {
        // Two entries: IPv4 unicast and IPv4 VPN (SAFI 128), both over IPv6.
        let caps = [5, 12, 0, 1, 0, 1, 0, 2, 0, 1, 0, 128, 0, 2];
        let mut out = vec![];
        decode_capabilities(&caps, &mut out).unwrap();
        let vpn = Family { afi: 1, safi: 128 };
        assert_eq!(
            out,
            vec![Capability::ExtendedNextHop(vec![
                (Family::IPV4_UNICAST, 2),
                (vpn, 2)
            ])]
        );
    }

    #[test]
    fn an_extended_next_hop_capability_of_a_length_not_a_multiple_of_6_is_a_malformed_open() {
        let mut out = vec![];
        assert_eq!(
            decode_capabilities(&[5, 4, 0, 1, 0, 1], &mut out),
            Err(SessionError::MalformedOpen)
        );
    }

    #[test]
    fn a_capability_running_past_its_parameter_is_a_malformed_open() {
        // version 4, AS 1, hold 90, id 1.1.1.1, params len 4: cap 65 claims 4 bytes, has 2.
        let body = [4, 0, 1, 0, 90, 1, 1, 1, 1, 4, 2, 2, 65, 4];
        assert_eq!(Open::decode(&body), Err(SessionError::MalformedOpen));
    }

    #[test]
    fn an_authentication_parameter_is_unsupported() {
        let body = [4, 0, 1, 0, 90, 1, 1, 1, 1, 2, 1, 0];
        assert_eq!(
            Open::decode(&body),
            Err(SessionError::UnsupportedOptionalParameter { param_type: 1 })
        );
    }

    #[test]
    fn extended_optional_parameters_decode() {
        // RFC 9072: 255, 255, length 6, then type 2 with a 2-byte length 4 carrying AS4.
        let body = [
            4, 0, 1, 0, 90, 1, 1, 1, 1, 255, 255, 0, 9, 2, 0, 6, 65, 4, 0, 0, 0, 7,
        ];
        assert_eq!(Open::decode(&body).unwrap().asn(), 7);
    }

    #[test]
    fn the_role_capability_is_code_9_with_one_byte_and_round_trips() {
        let open = Open {
            my_as: 64512,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 99, 0, 1),
            capabilities: vec![Capability::Role(3)],
        };
        let mut b = vec![];
        open.encode(&mut b);
        assert_eq!(&b[28..], &[5, 2, 3, 9, 1, 3]);
        let decoded = Open::decode(&b[19..]).unwrap();
        assert_eq!(decoded.roles().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn a_role_capability_of_another_length_is_a_malformed_open() {
        let mut out = vec![];
        assert_eq!(
            decode_capabilities(&[9, 2, 0, 3], &mut out),
            Err(SessionError::MalformedOpen)
        );
    }

    #[test]
    fn the_add_path_capability_to_send_ipv4_unicast_is_code_69_with_afi_1_safi_1_and_send_2() {
        let open = Open {
            my_as: 64512,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 99, 0, 1),
            capabilities: vec![Capability::AddPath(vec![(
                Family::IPV4_UNICAST,
                ADD_PATH_SEND,
            )])],
        };
        let mut b = vec![];
        open.encode(&mut b);
        // RFC 7911 §4: code 69, length 4, then AFI (2 octets) 1, SAFI (1 octet) 1,
        // Send/Receive (1 octet) 2, inside one capabilities parameter (type 2, length 6).
        assert_eq!(&b[28..], &[8, 2, 6, 69, 4, 0, 1, 1, 2]);
    }

    #[test]
    fn the_add_path_capability_for_both_families_round_trips_through_an_open() {
        let open = Open {
            capabilities: vec![
                Capability::Multiprotocol(Family::IPV4_UNICAST),
                Capability::AddPath(vec![
                    (Family::IPV4_UNICAST, ADD_PATH_SEND),
                    (Family::IPV6_UNICAST, ADD_PATH_BOTH),
                ]),
                Capability::FourOctetAs(64512),
            ],
            ..ours()
        };
        let mut b = vec![];
        open.encode(&mut b);
        let decoded = Open::decode(&b[19..]).unwrap();
        assert_eq!(decoded, open);
        assert!(!decoded.add_path_receive(Family::IPV4_UNICAST), "send only");
        assert!(decoded.add_path_receive(Family::IPV6_UNICAST), "both");
    }

    #[test]
    fn frrs_default_add_path_capability_offers_receive_and_birds_add_paths_tx_does_not() {
        // The capability as FRR 8.4 and BIRD 2.0.12 (`add paths tx`) sent it, from
        // tests/bgp_vectors/frr-open-plain.json and bird-open-addpath.json.
        let frr = [69, 8, 0, 1, 1, 1, 0, 2, 1, 1];
        let bird = [69, 8, 0, 1, 1, 2, 0, 2, 1, 2];
        for (bytes, receives) in [(frr, true), (bird, false)] {
            let mut capabilities = vec![];
            decode_capabilities(&bytes, &mut capabilities).unwrap();
            let open = Open {
                capabilities,
                ..ours()
            };
            for family in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
                assert_eq!(open.add_path_receive(family), receives, "{bytes:?}");
            }
        }
    }

    #[test]
    fn an_add_path_send_receive_value_rfc_7911_does_not_define_is_no_receive() {
        let open = Open {
            capabilities: vec![Capability::AddPath(vec![
                (Family::IPV4_UNICAST, 0),
                (Family::IPV6_UNICAST, 7),
            ])],
            ..ours()
        };
        assert!(!open.add_path_receive(Family::IPV4_UNICAST));
        assert!(!open.add_path_receive(Family::IPV6_UNICAST));
    }

    #[test]
    fn an_add_path_capability_of_a_length_not_a_multiple_of_4_is_a_malformed_open() {
        for bad in [&[69, 3, 0, 1, 1][..], &[69, 6, 0, 1, 1, 2, 0, 2]] {
            let mut out = vec![];
            assert_eq!(
                decode_capabilities(bad, &mut out),
                Err(SessionError::MalformedOpen),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_open_without_multiprotocol_means_ipv4_unicast() {
        let body = [4, 0, 1, 0, 90, 1, 1, 1, 1, 0];
        assert_eq!(
            Open::decode(&body).unwrap().families(),
            vec![Family::IPV4_UNICAST]
        );
    }
}
