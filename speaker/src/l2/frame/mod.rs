//! ARP and NDP on Ethernet frames held in byte slices. Pure: no I/O, no clock.
//!
//! [`parse`] reads an ARP request (RFC 826) or an IPv6 Neighbor Solicitation (RFC 4861 §4.3)
//! and returns either the request or a typed [`DropReason`]; it checks the length before every
//! read and never looks past the frame or past the IPv6 payload length. It does not read NDP
//! options: a reply goes to the Ethernet source of the solicitation, which is where the
//! source link-layer address option would point on any sane host.
//!
//! [`announcement`] reads the other direction: another host's gratuitous ARP or unsolicited
//! Neighbor Advertisement, by which a speaker handing an address over learns that the new
//! owner has taken it.
//!
//! The builders produce complete Ethernet frames: ARP replies, gratuitous ARP in request and
//! reply form, solicited and unsolicited Neighbor Advertisements (RFC 4861 §4.4, §7.2.4,
//! §7.2.6) with their ICMPv6 checksum.

mod build;
mod parse;

pub use build::{
    arp_reply, gratuitous_arp_reply, gratuitous_arp_request, neighbor_advertisement,
    neighbor_solicitation, unsolicited_na,
};
pub use parse::{announcement, parse};

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of an Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Length of an Ethernet frame carrying an ARP packet for Ethernet/IPv4 (no padding).
pub const ARP_FRAME_LEN: usize = ETH_HEADER_LEN + 28;
/// Length of an Ethernet frame carrying a Neighbor Advertisement with one target link-layer
/// address option.
pub const NA_FRAME_LEN: usize = ETH_HEADER_LEN + 40 + 32;

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// The Ethernet address an IPv6 multicast group maps to (RFC 2464 §7): `33:33` and the
    /// group's last four octets.
    pub fn ipv6_multicast(group: Ipv6Addr) -> MacAddr {
        let o = group.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// The solicited-node multicast address of `ip` (RFC 4291 §2.7.1): `ff02::1:ff00:0/104` and the
/// low 24 bits of `ip`.
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let o = ip.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// An ARP who-has for an IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRequest {
    /// Source MAC of the Ethernet frame: where the reply goes.
    pub eth_src: MacAddr,
    /// Sender hardware address in the ARP packet.
    pub sender_mac: MacAddr,
    /// Sender protocol address (`0.0.0.0` for an RFC 5227 probe).
    pub sender_ip: Ipv4Addr,
    /// The address asked about.
    pub target_ip: Ipv4Addr,
}

/// An IPv6 Neighbor Solicitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborSolicitation {
    /// Source MAC of the Ethernet frame: where the reply goes.
    pub eth_src: MacAddr,
    /// IPv6 source (`::` during duplicate address detection).
    pub source: Ipv6Addr,
    /// IPv6 destination: the target itself or its solicited-node group.
    pub destination: Ipv6Addr,
    /// The address asked about.
    pub target: Ipv6Addr,
}

/// Another host's claim on an address, read by [`announcement`]: a gratuitous ARP or an
/// unsolicited Neighbor Advertisement with the override flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcement {
    /// The address announced.
    pub ip: IpAddr,
    /// Source MAC of the Ethernet frame: the host that holds it now.
    pub from: MacAddr,
}

/// A request this module can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// ARP who-has.
    Arp(ArpRequest),
    /// IPv6 Neighbor Solicitation.
    Ns(NeighborSolicitation),
}

/// Why a frame was not turned into a [`Request`]. Some reasons are ordinary traffic that is not
/// ours to answer ([`DropReason::is_malformed`] is false), the others are malformed frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// Shorter than the headers it claims to carry.
    Truncated,
    /// Neither ARP nor IPv6 (including VLAN-tagged frames).
    OtherEtherType,
    /// ARP for something other than Ethernet hardware and IPv4 protocol addresses.
    ArpUnsupportedFormat,
    /// An ARP packet that is not a request (replies are not questions).
    ArpNotRequest,
    /// A gratuitous ARP request from another host (an announcement, not a question).
    ArpGratuitous,
    /// The IPv6 version field is not 6.
    Ipv6BadVersion,
    /// The IPv6 payload length runs past the end of the frame.
    Ipv6LengthMismatch,
    /// IPv6 traffic other than a Neighbor Solicitation (including any extension header).
    NotNeighborSolicitation,
    /// Hop limit other than 255: the packet may come from off-link (RFC 4861 §7.1.1).
    NdpHopLimit,
    /// ICMPv6 code other than 0 (RFC 4861 §7.1.1).
    NdpBadCode,
    /// ICMPv6 length under 24 octets (RFC 4861 §7.1.1).
    NdpTooShort,
    /// The ICMPv6 checksum does not verify.
    NdpBadChecksum,
    /// The target is a multicast address (RFC 4861 §7.1.1).
    NdpMulticastTarget,
    /// Unspecified source sent to something other than the target's solicited-node group
    /// (RFC 4861 §7.1.1).
    NdpUnspecifiedSourceToUnicast,
    /// The destination is neither the target nor the target's solicited-node group.
    NdpDestinationMismatch,
}

impl DropReason {
    /// Every reason, for metrics that list all labels up front.
    pub const ALL: [DropReason; 15] = [
        DropReason::Truncated,
        DropReason::OtherEtherType,
        DropReason::ArpUnsupportedFormat,
        DropReason::ArpNotRequest,
        DropReason::ArpGratuitous,
        DropReason::Ipv6BadVersion,
        DropReason::Ipv6LengthMismatch,
        DropReason::NotNeighborSolicitation,
        DropReason::NdpHopLimit,
        DropReason::NdpBadCode,
        DropReason::NdpTooShort,
        DropReason::NdpBadChecksum,
        DropReason::NdpMulticastTarget,
        DropReason::NdpUnspecifiedSourceToUnicast,
        DropReason::NdpDestinationMismatch,
    ];

    /// A stable snake_case label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::OtherEtherType => "other_ethertype",
            DropReason::ArpUnsupportedFormat => "arp_unsupported_format",
            DropReason::ArpNotRequest => "arp_not_request",
            DropReason::ArpGratuitous => "arp_gratuitous",
            DropReason::Ipv6BadVersion => "ipv6_bad_version",
            DropReason::Ipv6LengthMismatch => "ipv6_length_mismatch",
            DropReason::NotNeighborSolicitation => "not_neighbor_solicitation",
            DropReason::NdpHopLimit => "ndp_hop_limit",
            DropReason::NdpBadCode => "ndp_bad_code",
            DropReason::NdpTooShort => "ndp_too_short",
            DropReason::NdpBadChecksum => "ndp_bad_checksum",
            DropReason::NdpMulticastTarget => "ndp_multicast_target",
            DropReason::NdpUnspecifiedSourceToUnicast => "ndp_unspecified_source_to_unicast",
            DropReason::NdpDestinationMismatch => "ndp_destination_mismatch",
        }
    }

    /// True for frames that break the protocol; false for well-formed traffic that simply is not
    /// a question for us.
    pub fn is_malformed(self) -> bool {
        !matches!(
            self,
            DropReason::OtherEtherType
                | DropReason::ArpNotRequest
                | DropReason::ArpGratuitous
                | DropReason::NotNeighborSolicitation
                | DropReason::NdpDestinationMismatch
        )
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The ICMPv6 checksum (RFC 4443 §2.3) of `message` between `src` and `dst`: the one's
/// complement of the one's complement sum over the pseudo-header (RFC 8200 §8.1) and the
/// message. A message whose checksum field is already filled in sums to zero.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        let mut chunks = bytes.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    // Upper-layer length as 32 bits, then 3 zero octets and the next header (58).
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    add(&len.to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(message);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests;
