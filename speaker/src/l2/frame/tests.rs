//! Byte/struct pairs. The captured frames were recorded with tcpdump on a veth pair between two
//! Linux 6 network namespaces: iputils `arping`, `ndisc6`, and the kernel's own answers and
//! duplicate address detection. Our builders must produce the kernel's answers byte for byte.

use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn hex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(char::is_ascii_hexdigit).collect();
    (0..clean.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&clean[i..i + 2], 16).unwrap())
        .collect()
}

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x0b]);

/// `arping -I fva0 10.99.7.2` from 10.99.7.1 (02:00:00:00:00:0a).
const ARPING_REQUEST: &str = "ffff ffff ffff 0200 0000 000a 0806 0001
    0800 0604 0001 0200 0000 000a 0a63 0701 ffff ffff ffff 0a63 0702";
/// The kernel of 10.99.7.2 (02:00:00:00:00:0b) answering it.
const KERNEL_ARP_REPLY: &str = "0200 0000 000a 0200 0000 000b 0806 0001
    0800 0604 0002 0200 0000 000b 0a63 0702 0200 0000 000a 0a63 0701";
/// `ndisc6 fd00:99:7::2 fva0` from fd00:99:7::1, with a source link-layer address option.
const NDISC6_NS: &str = "3333 ff00 0002 0200 0000 000a 86dd 6009
    0073 0020 3aff fd00 0099 0007 0000 0000 0000 0000 0001 ff02 0000 0000 0000 0000
    0001 ff00 0002 8700 7c4e 0000 0000 fd00 0099 0007 0000 0000 0000 0000 0002 0101
    0200 0000 000a";
/// The kernel of fd00:99:7::2 answering it (Solicited and Override set).
const KERNEL_NA: &str = "0200 0000 000a 0200 0000 000b 86dd 6000
    0000 0020 3aff fd00 0099 0007 0000 0000 0000 0000 0002 fd00 0099 0007 0000 0000
    0000 0000 0001 8800 1ab1 6000 0000 fd00 0099 0007 0000 0000 0000 0000 0002 0201
    0200 0000 000b";
/// The kernel's duplicate address detection for fe80::ff:fe00:a (source ::, nonce option).
const KERNEL_DAD_NS: &str = "3333 ff00 000a 0200 0000 000a 86dd 6000
    0000 0020 3aff 0000 0000 0000 0000 0000 0000 0000 0000 ff02 0000 0000 0000 0000
    0001 ff00 000a 8700 d5dc 0000 0000 fe80 0000 0000 0000 0000 00ff fe00 000a 0e01
    aea5 b37a 370d";
/// A router solicitation: IPv6 ICMPv6, but not a question for us.
const KERNEL_RS: &str = "3333 0000 0002 0200 0000 000a 86dd 6000
    0000 0010 3aff fe80 0000 0000 0000 0000 00ff fe00 000a ff02 0000 0000 0000 0000
    0000 0000 0002 8500 7b1a 0000 0000 0101 0200 0000 000a";

#[test]
fn an_arping_request_parses_to_its_fields() {
    let req = parse(&hex(ARPING_REQUEST)).unwrap();
    assert_eq!(
        req,
        Request::Arp(ArpRequest {
            eth_src: MAC_A,
            sender_mac: MAC_A,
            sender_ip: Ipv4Addr::new(10, 99, 7, 1),
            target_ip: Ipv4Addr::new(10, 99, 7, 2),
        })
    );
}

#[test]
fn our_arp_reply_is_the_kernels_byte_for_byte() {
    let Ok(Request::Arp(req)) = parse(&hex(ARPING_REQUEST)) else {
        panic!("not an ARP request")
    };
    assert_eq!(arp_reply(&req, MAC_B).to_vec(), hex(KERNEL_ARP_REPLY));
}

#[test]
fn an_ndisc6_solicitation_parses_without_reading_its_options() {
    let ns = parse(&hex(NDISC6_NS)).unwrap();
    assert_eq!(
        ns,
        Request::Ns(NeighborSolicitation {
            eth_src: MAC_A,
            source: "fd00:99:7::1".parse().unwrap(),
            destination: "ff02::1:ff00:2".parse().unwrap(),
            target: "fd00:99:7::2".parse().unwrap(),
        })
    );
}

#[test]
fn our_neighbor_advertisement_is_the_kernels_byte_for_byte() {
    let Ok(Request::Ns(ns)) = parse(&hex(NDISC6_NS)) else {
        panic!("not an NS")
    };
    assert_eq!(neighbor_advertisement(&ns, MAC_B).to_vec(), hex(KERNEL_NA));
}

#[test]
fn a_duplicate_address_detection_probe_is_answered_to_all_nodes_without_the_solicited_flag() {
    let Ok(Request::Ns(ns)) = parse(&hex(KERNEL_DAD_NS)) else {
        panic!("not an NS")
    };
    assert!(ns.source.is_unspecified());
    let na = neighbor_advertisement(&ns, MAC_B);
    assert_eq!(&na[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(
        &na[38..54],
        &"ff02::1".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(na[58], 0x20, "Override only");
}

#[test]
fn an_unsolicited_na_goes_to_all_nodes_with_override_and_a_valid_checksum() {
    let target: Ipv6Addr = "fd00:99::100".parse().unwrap();
    let f = unsolicited_na(MAC_B, target);
    assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(&f[6..12], &MAC_B.0);
    assert_eq!(f[21], 255, "hop limit");
    assert_eq!(f[54], 136);
    assert_eq!(f[58], 0x20, "Override, not Solicited");
    assert_eq!(&f[62..78], &target.octets());
    assert_eq!(&f[78..80], &[2, 1], "target link-layer address option");
    assert_eq!(&f[80..86], &MAC_B.0);
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    assert_eq!(icmpv6_checksum(target, all_nodes, &f[54..]), 0);
}

#[test]
fn pnet_agrees_with_our_icmpv6_checksum() {
    use pnet::packet::icmpv6::{Icmpv6Packet, checksum};
    let target: Ipv6Addr = "fd00:99::1:2:3".parse().unwrap();
    let f = unsolicited_na(MAC_A, target);
    let pkt = Icmpv6Packet::new(&f[54..]).unwrap();
    let ours = u16::from_be_bytes([f[56], f[57]]);
    assert_eq!(checksum(&pkt, &target, &"ff02::1".parse().unwrap()), ours);
}

#[test]
fn gratuitous_arp_comes_in_request_and_reply_form() {
    let ip = Ipv4Addr::new(10, 99, 0, 100);
    let req = gratuitous_arp_request(MAC_B, ip);
    let rep = gratuitous_arp_reply(MAC_B, ip);
    for f in [&req, &rep] {
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &MAC_B.0);
        assert_eq!(&f[22..28], &MAC_B.0, "sender hardware address");
        assert_eq!(&f[28..32], &ip.octets(), "sender protocol address");
        assert_eq!(&f[38..42], &ip.octets(), "target protocol address");
    }
    assert_eq!(&req[20..22], &[0, 1]);
    assert_eq!(&req[32..38], &[0; 6]);
    assert_eq!(&rep[20..22], &[0, 2]);
    assert_eq!(&rep[32..38], &MAC_B.0);
    // Another speaker must not take our announcement for a question.
    assert_eq!(parse(&req), Err(DropReason::ArpGratuitous));
    assert_eq!(parse(&rep), Err(DropReason::ArpNotRequest));
}

#[test]
fn another_speakers_gratuitous_arp_and_unsolicited_na_read_as_its_announcements() {
    let v4 = Ipv4Addr::new(10, 99, 0, 100);
    let v6: Ipv6Addr = "fd00:99::100".parse().unwrap();
    for f in [
        gratuitous_arp_request(MAC_B, v4).to_vec(),
        gratuitous_arp_reply(MAC_B, v4).to_vec(),
    ] {
        assert_eq!(
            announcement(&f),
            Some(Announcement {
                ip: IpAddr::V4(v4),
                from: MAC_B
            })
        );
    }
    assert_eq!(
        announcement(&unsolicited_na(MAC_B, v6)),
        Some(Announcement {
            ip: IpAddr::V6(v6),
            from: MAC_B
        })
    );
}

#[test]
fn questions_answers_to_questions_and_probes_are_not_announcements() {
    let mut probe = hex(ARPING_REQUEST);
    probe[28..32].copy_from_slice(&[0, 0, 0, 0]);
    for f in [
        hex(ARPING_REQUEST),
        hex(KERNEL_ARP_REPLY),
        probe,
        hex(NDISC6_NS),
        hex(KERNEL_NA),
        hex(KERNEL_DAD_NS),
        hex(KERNEL_RS),
    ] {
        assert_eq!(announcement(&f), None, "{f:02x?}");
    }
}

#[test]
fn an_unsolicited_na_without_override_or_with_a_bad_checksum_or_hop_limit_is_not_an_announcement() {
    let v6: Ipv6Addr = "fd00:99::100".parse().unwrap();
    let good = unsolicited_na(MAC_B, v6);
    let mut no_override = good;
    no_override[58] = 0;
    refresh_checksum(&mut no_override);
    let mut bad_checksum = good;
    bad_checksum[56] ^= 1;
    let mut off_link = good;
    off_link[21] = 64;
    for f in [no_override, bad_checksum, off_link] {
        assert_eq!(announcement(&f), None);
    }
    for len in 0..good.len() {
        assert_eq!(announcement(&good[..len]), None, "truncated to {len}");
    }
}

#[test]
fn an_arp_probe_from_the_unspecified_address_is_a_question() {
    let mut f = hex(ARPING_REQUEST);
    f[28..32].copy_from_slice(&[0, 0, 0, 0]);
    let Ok(Request::Arp(req)) = parse(&f) else {
        panic!("probe not parsed")
    };
    assert_eq!(req.sender_ip, Ipv4Addr::UNSPECIFIED);
    let rep = arp_reply(&req, MAC_B);
    assert_eq!(&rep[38..42], &[0, 0, 0, 0]);
}

#[test]
fn every_truncation_of_valid_frames_is_dropped_as_truncated() {
    for full in [hex(ARPING_REQUEST), hex(NDISC6_NS), hex(KERNEL_DAD_NS)] {
        for len in 0..full.len() {
            let r = parse(&full[..len]);
            assert!(
                matches!(
                    r,
                    Err(DropReason::Truncated | DropReason::Ipv6LengthMismatch)
                ),
                "length {len}: {r:?}"
            );
        }
    }
}

#[test]
fn ethernet_padding_after_an_arp_packet_is_accepted() {
    let mut f = hex(ARPING_REQUEST);
    f.resize(60, 0);
    assert!(matches!(parse(&f), Ok(Request::Arp(_))));
}

#[test]
fn other_traffic_is_dropped_with_a_reason_that_is_not_malformed() {
    let rs = parse(&hex(KERNEL_RS)).unwrap_err();
    assert_eq!(rs, DropReason::NotNeighborSolicitation);
    assert!(!rs.is_malformed());
    let mut ipv4 = hex(ARPING_REQUEST);
    ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
    assert_eq!(parse(&ipv4), Err(DropReason::OtherEtherType));
    let mut reply = hex(ARPING_REQUEST);
    reply[21] = 2;
    assert_eq!(parse(&reply), Err(DropReason::ArpNotRequest));
}

#[test]
fn arp_for_other_hardware_or_protocols_is_unsupported() {
    for (at, v) in [(15, 6u8), (17, 0xdd), (18, 8), (19, 16)] {
        let mut f = hex(ARPING_REQUEST);
        f[at] = v;
        assert_eq!(
            parse(&f),
            Err(DropReason::ArpUnsupportedFormat),
            "byte {at} = {v}"
        );
    }
}

/// Rewrites the checksum of an NS frame after a field was changed.
fn refresh_checksum(f: &mut [u8]) {
    f[56] = 0;
    f[57] = 0;
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&f[22..38]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&f[38..54]).unwrap());
    let sum = icmpv6_checksum(src, dst, &f[54..]);
    f[56..58].copy_from_slice(&sum.to_be_bytes());
}

#[test]
fn solicitations_that_break_rfc4861_validation_are_malformed() {
    let base = hex(NDISC6_NS);
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Mutation, DropReason)> = vec![
        (Box::new(|f| f[14] = 0x40), DropReason::Ipv6BadVersion),
        (Box::new(|f| f[21] = 64), DropReason::NdpHopLimit),
        (Box::new(|f| f[57] ^= 1), DropReason::NdpBadChecksum),
        (
            Box::new(|f| {
                f[55] = 1;
                refresh_checksum(f)
            }),
            DropReason::NdpBadCode,
        ),
        (
            Box::new(|f| {
                f[62] = 0xff;
                refresh_checksum(f)
            }),
            DropReason::NdpMulticastTarget,
        ),
        (
            Box::new(|f| {
                f[18..20].copy_from_slice(&[0, 0x40]);
                f.truncate(14 + 40 + 0x40);
            }),
            DropReason::Ipv6LengthMismatch,
        ),
        (
            Box::new(|f| {
                f[18..20].copy_from_slice(&[0, 16]);
                f.truncate(14 + 40 + 16);
                refresh_checksum(f)
            }),
            DropReason::NdpTooShort,
        ),
        (
            Box::new(|f| {
                f[22..38].fill(0);
                f[38..54].copy_from_slice(&"fd00:99:7::2".parse::<Ipv6Addr>().unwrap().octets());
                refresh_checksum(f)
            }),
            DropReason::NdpUnspecifiedSourceToUnicast,
        ),
        (Box::new(|f| f[20] = 0), DropReason::NotNeighborSolicitation),
    ];
    for (i, (mutate, want)) in cases.iter().enumerate() {
        let mut f = base.clone();
        mutate(&mut f);
        let got = parse(&f);
        assert_eq!(got, Err(*want), "case {i}");
        assert_eq!(
            want.is_malformed(),
            *want != DropReason::NotNeighborSolicitation
        );
    }
}

#[test]
fn a_solicitation_sent_to_the_target_itself_is_accepted() {
    // Neighbour unreachability detection sends the NS unicast to the target.
    let mut f = hex(NDISC6_NS);
    f[38..54].copy_from_slice(&"fd00:99:7::2".parse::<Ipv6Addr>().unwrap().octets());
    refresh_checksum(&mut f);
    assert!(matches!(parse(&f), Ok(Request::Ns(_))));
    // ...but not to somebody else's solicited-node group.
    f[38..54].copy_from_slice(&"ff02::1:ff00:3".parse::<Ipv6Addr>().unwrap().octets());
    refresh_checksum(&mut f);
    assert_eq!(parse(&f), Err(DropReason::NdpDestinationMismatch));
}

#[test]
fn solicited_node_groups_and_their_macs_follow_rfc4291_and_rfc2464() {
    let ip: Ipv6Addr = "fd00:99::12:3456:789a".parse().unwrap();
    assert_eq!(
        solicited_node(ip),
        "ff02::1:ff56:789a".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        MacAddr::ipv6_multicast(solicited_node(ip)).to_string(),
        "33:33:ff:56:78:9a"
    );
}

#[test]
fn every_drop_reason_has_a_distinct_label() {
    let labels: std::collections::BTreeSet<_> = DropReason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), DropReason::ALL.len());
}

mod fuzz_like {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
            let _ = announcement(&bytes);
        }

        #[test]
        fn parsing_mutated_valid_frames_never_panics_and_answers_stay_well_formed(
            which in 0usize..3, flips in prop::collection::vec((0usize..90, any::<u8>()), 1..6)
        ) {
            let mut f = hex([ARPING_REQUEST, NDISC6_NS, KERNEL_DAD_NS][which]);
            for (at, v) in flips {
                if let Some(b) = f.get_mut(at) { *b = v; }
            }
            match parse(&f) {
                Ok(Request::Arp(req)) => prop_assert_eq!(arp_reply(&req, MAC_B).len(), ARP_FRAME_LEN),
                Ok(Request::Ns(ns)) => {
                    let na = neighbor_advertisement(&ns, MAC_B);
                    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&na[22..38]).unwrap());
                    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&na[38..54]).unwrap());
                    prop_assert_eq!(icmpv6_checksum(src, dst, &na[54..]), 0);
                }
                Err(_) => {}
            }
        }
    }
}

#[test]
fn our_neighbor_solicitation_matches_what_ndisc6_sends_apart_from_the_flow_label() {
    let ns = neighbor_solicitation(
        MAC_A,
        "fd00:99:7::1".parse().unwrap(),
        "fd00:99:7::2".parse().unwrap(),
    );
    let mut want = hex(NDISC6_NS);
    // ndisc6 set a flow label; we send 0, which changes no checksum (not in the pseudo-header).
    want[15] = 0;
    want[16] = 0;
    want[17] = 0;
    assert_eq!(ns.to_vec(), want);
}
