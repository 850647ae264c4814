//! Parsing of ARP requests and Neighbor Solicitations. Pure: no I/O, no clock.
//!
//! Every read goes through `take`, which checks the slice length first; nothing
//! here indexes a slice without a bound check that returns [`DropReason::Truncated`].

use super::{
    Announcement, ArpRequest, DropReason, ETH_HEADER_LEN, ETHERTYPE_ARP, ETHERTYPE_IPV6, MacAddr,
    NeighborSolicitation, Request, icmpv6_checksum, solicited_node,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// ICMPv6 next-header value.
const NEXT_HEADER_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
const ICMPV6_NEIGHBOR_SOLICITATION: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
const ICMPV6_NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Neighbor Advertisement flags (RFC 4861 §4.4), in the octet after the checksum.
const NA_FLAG_SOLICITED: u8 = 0x40;
/// The override flag: the sender asks neighbours to replace the link-layer address they hold.
const NA_FLAG_OVERRIDE: u8 = 0x20;
/// Fixed part of a Neighbor Advertisement: type, code, checksum, flags, target.
const NA_FIXED_LEN: usize = 24;
/// Fixed part of a Neighbor Solicitation: type, code, checksum, reserved, target.
const NS_FIXED_LEN: usize = 24;
/// Length of the IPv6 header.
const IPV6_HEADER_LEN: usize = 40;

/// `bytes[at..at + N]` as an array, or `Truncated`.
fn take<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], DropReason> {
    let end = at.checked_add(N).ok_or(DropReason::Truncated)?;
    bytes
        .get(at..end)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(DropReason::Truncated)
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, DropReason> {
    take::<2>(bytes, at).map(u16::from_be_bytes)
}

fn u8_at(bytes: &[u8], at: usize) -> Result<u8, DropReason> {
    take::<1>(bytes, at).map(|[b]| b)
}

/// Parses an Ethernet II frame into an ARP request or a Neighbor Solicitation.
pub fn parse(frame: &[u8]) -> Result<Request, DropReason> {
    let eth_src = MacAddr(take::<6>(frame, 6)?);
    let ethertype = u16_at(frame, 12)?;
    let payload = frame.get(ETH_HEADER_LEN..).ok_or(DropReason::Truncated)?;
    match ethertype {
        ETHERTYPE_ARP => parse_arp(eth_src, payload).map(Request::Arp),
        ETHERTYPE_IPV6 => parse_ns(eth_src, payload).map(Request::Ns),
        _ => Err(DropReason::OtherEtherType),
    }
}

/// RFC 826 packet for Ethernet (htype 1) and IPv4 (ptype 0x0800, lengths 6 and 4).
fn parse_arp(eth_src: MacAddr, p: &[u8]) -> Result<ArpRequest, DropReason> {
    // Read the whole fixed packet first so a short frame is Truncated whatever its fields say.
    let pkt = take::<28>(p, 0)?;
    let htype = u16::from_be_bytes([pkt[0], pkt[1]]);
    let ptype = u16::from_be_bytes([pkt[2], pkt[3]]);
    if htype != 1 || ptype != 0x0800 || pkt[4] != 6 || pkt[5] != 4 {
        return Err(DropReason::ArpUnsupportedFormat);
    }
    let op = u16::from_be_bytes([pkt[6], pkt[7]]);
    if op != 1 {
        return Err(DropReason::ArpNotRequest);
    }
    let sender_mac = MacAddr(take::<6>(&pkt, 8)?);
    let sender_ip = Ipv4Addr::from(take::<4>(&pkt, 14)?);
    let target_ip = Ipv4Addr::from(take::<4>(&pkt, 24)?);
    if sender_ip == target_ip {
        return Err(DropReason::ArpGratuitous);
    }
    Ok(ArpRequest {
        eth_src,
        sender_mac,
        sender_ip,
        target_ip,
    })
}

/// RFC 4861 §4.3 message, validated as §7.1.1 asks (except the options, which are not read).
fn parse_ns(eth_src: MacAddr, p: &[u8]) -> Result<NeighborSolicitation, DropReason> {
    let header = take::<IPV6_HEADER_LEN>(p, 0)?;
    if header[0] >> 4 != 6 {
        return Err(DropReason::Ipv6BadVersion);
    }
    let payload_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    let next_header = header[6];
    let hop_limit = header[7];
    let source = Ipv6Addr::from(take::<16>(&header, 8)?);
    let destination = Ipv6Addr::from(take::<16>(&header, 24)?);
    // The ICMPv6 message is exactly the payload; Ethernet padding after it is not part of it.
    let message = p
        .get(IPV6_HEADER_LEN..IPV6_HEADER_LEN + payload_len)
        .ok_or(DropReason::Ipv6LengthMismatch)?;
    if next_header != NEXT_HEADER_ICMPV6 {
        return Err(DropReason::NotNeighborSolicitation);
    }
    if u8_at(message, 0)? != ICMPV6_NEIGHBOR_SOLICITATION {
        return Err(DropReason::NotNeighborSolicitation);
    }
    if hop_limit != 255 {
        return Err(DropReason::NdpHopLimit);
    }
    if u8_at(message, 1)? != 0 {
        return Err(DropReason::NdpBadCode);
    }
    if message.len() < NS_FIXED_LEN {
        return Err(DropReason::NdpTooShort);
    }
    if icmpv6_checksum(source, destination, message) != 0 {
        return Err(DropReason::NdpBadChecksum);
    }
    let target = Ipv6Addr::from(take::<16>(message, 8)?);
    if target.is_multicast() {
        return Err(DropReason::NdpMulticastTarget);
    }
    let to_group = destination == solicited_node(target);
    if source.is_unspecified() && !to_group {
        return Err(DropReason::NdpUnspecifiedSourceToUnicast);
    }
    if !to_group && destination != target {
        return Err(DropReason::NdpDestinationMismatch);
    }
    Ok(NeighborSolicitation {
        eth_src,
        source,
        destination,
        target,
    })
}

/// Reads another host's announcement that it now holds an address: a gratuitous ARP (request
/// or reply, RFC 5227 §3: sender and target address the same, not `0.0.0.0`) or an unsolicited
/// Neighbor Advertisement with the override flag (RFC 4861 §7.2.6: Solicited clear), validated
/// as RFC 4861 §7.1.2 asks (hop limit 255, code 0, checksum, target not multicast). `None` for
/// anything else, malformed frames included; [`parse`] counts those.
pub fn announcement(frame: &[u8]) -> Option<Announcement> {
    let eth_src = MacAddr(take::<6>(frame, 6).ok()?);
    let payload = frame.get(ETH_HEADER_LEN..)?;
    let ip = match u16_at(frame, 12).ok()? {
        ETHERTYPE_ARP => {
            let pkt = take::<28>(payload, 0).ok()?;
            let ethernet_ipv4 = pkt[0..6] == [0, 1, 8, 0, 6, 4];
            let op = u16::from_be_bytes([pkt[6], pkt[7]]);
            let sender = Ipv4Addr::from(take::<4>(&pkt, 14).ok()?);
            let target = Ipv4Addr::from(take::<4>(&pkt, 24).ok()?);
            let gratuitous = (op == 1 || op == 2) && sender == target && !sender.is_unspecified();
            (ethernet_ipv4 && gratuitous).then_some(IpAddr::V4(sender))?
        }
        ETHERTYPE_IPV6 => {
            let header = take::<IPV6_HEADER_LEN>(payload, 0).ok()?;
            let payload_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
            let source = Ipv6Addr::from(take::<16>(&header, 8).ok()?);
            let destination = Ipv6Addr::from(take::<16>(&header, 24).ok()?);
            let message = payload.get(IPV6_HEADER_LEN..IPV6_HEADER_LEN + payload_len)?;
            let valid = header[0] >> 4 == 6
                && header[6] == NEXT_HEADER_ICMPV6
                && header[7] == 255
                && message.len() >= NA_FIXED_LEN
                && message[0] == ICMPV6_NEIGHBOR_ADVERTISEMENT
                && message[1] == 0
                && icmpv6_checksum(source, destination, message) == 0;
            let flags = message.get(4).copied().unwrap_or(0);
            let unsolicited = flags & NA_FLAG_SOLICITED == 0 && flags & NA_FLAG_OVERRIDE != 0;
            let target = Ipv6Addr::from(take::<16>(message, 8).ok()?);
            (valid && unsolicited && !target.is_multicast()).then_some(IpAddr::V6(target))?
        }
        _ => return None,
    };
    Some(Announcement { ip, from: eth_src })
}
