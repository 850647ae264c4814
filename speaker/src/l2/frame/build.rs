//! Building ARP replies, gratuitous ARP and Neighbor Advertisements. Pure: no I/O, no clock.

use super::{
    ARP_FRAME_LEN, ArpRequest, ETHERTYPE_ARP, ETHERTYPE_IPV6, MacAddr, NA_FRAME_LEN,
    NeighborSolicitation, icmpv6_checksum,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// All-nodes multicast, the destination of unsolicited advertisements (RFC 4861 §7.2.6).
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Neighbor Advertisement flags (RFC 4861 §4.4): Solicited and Override.
const NA_SOLICITED: u8 = 0x40;
const NA_OVERRIDE: u8 = 0x20;

fn ethernet(buf: &mut [u8], dst: MacAddr, src: MacAddr, ethertype: u16) {
    buf[0..6].copy_from_slice(&dst.0);
    buf[6..12].copy_from_slice(&src.0);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

/// One ARP frame for Ethernet/IPv4.
fn arp(
    eth_dst: MacAddr,
    op: u16,
    sha: MacAddr,
    spa: Ipv4Addr,
    tha: MacAddr,
    tpa: Ipv4Addr,
) -> [u8; ARP_FRAME_LEN] {
    let mut f = [0u8; ARP_FRAME_LEN];
    ethernet(&mut f, eth_dst, sha, ETHERTYPE_ARP);
    let a = &mut f[14..];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&op.to_be_bytes());
    a[8..14].copy_from_slice(&sha.0);
    a[14..18].copy_from_slice(&spa.octets());
    a[18..24].copy_from_slice(&tha.0);
    a[24..28].copy_from_slice(&tpa.octets());
    f
}

/// The reply to `req` saying `req.target_ip` is at `mac`, sent to the requester's Ethernet
/// source.
pub fn arp_reply(req: &ArpRequest, mac: MacAddr) -> [u8; ARP_FRAME_LEN] {
    arp(
        req.eth_src,
        2,
        mac,
        req.target_ip,
        req.sender_mac,
        req.sender_ip,
    )
}

/// A gratuitous ARP request announcing that `ip` is at `mac` (RFC 5227 §3's announcement:
/// sender and target protocol address both `ip`, target hardware address zero), broadcast.
pub fn gratuitous_arp_request(mac: MacAddr, ip: Ipv4Addr) -> [u8; ARP_FRAME_LEN] {
    arp(MacAddr::BROADCAST, 1, mac, ip, MacAddr::default(), ip)
}

/// A gratuitous ARP reply announcing that `ip` is at `mac` (the form of RFC 5944 §4.6: target
/// hardware address equal to the sender's), broadcast. Some hosts update their caches only
/// from replies, others only from requests, so both are sent.
pub fn gratuitous_arp_reply(mac: MacAddr, ip: Ipv4Addr) -> [u8; ARP_FRAME_LEN] {
    arp(MacAddr::BROADCAST, 2, mac, ip, mac, ip)
}

/// One Neighbor Advertisement frame for `target` at `mac` with a target link-layer address
/// option, from `target` itself, hop limit 255.
fn na(
    eth_dst: MacAddr,
    dst: Ipv6Addr,
    mac: MacAddr,
    target: Ipv6Addr,
    flags: u8,
) -> [u8; NA_FRAME_LEN] {
    let mut f = [0u8; NA_FRAME_LEN];
    ethernet(&mut f, eth_dst, mac, ETHERTYPE_IPV6);
    let ip = &mut f[14..54];
    ip[0] = 0x60; // version 6, traffic class 0, flow label 0
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = 58; // ICMPv6
    ip[7] = 255; // RFC 4861 §7.1.2: receivers drop anything else
    ip[8..24].copy_from_slice(&target.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    let m = &mut f[54..];
    m[0] = 136; // Neighbor Advertisement
    m[1] = 0;
    m[4] = flags;
    m[8..24].copy_from_slice(&target.octets());
    m[24] = 2; // option: target link-layer address
    m[25] = 1; // length in units of 8 octets
    m[26..32].copy_from_slice(&mac.0);
    let sum = icmpv6_checksum(target, dst, m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    f
}

/// The advertisement answering `ns` for `ns.target` at `mac` (RFC 4861 §7.2.4): to the
/// soliciting host with Solicited and Override set, or, when the solicitation came from the
/// unspecified address (duplicate address detection), to all nodes with only Override set.
pub fn neighbor_advertisement(ns: &NeighborSolicitation, mac: MacAddr) -> [u8; NA_FRAME_LEN] {
    if ns.source.is_unspecified() {
        unsolicited_na(mac, ns.target)
    } else {
        na(
            ns.eth_src,
            ns.source,
            mac,
            ns.target,
            NA_SOLICITED | NA_OVERRIDE,
        )
    }
}

/// An unsolicited advertisement of `target` at `mac` to all nodes with the Override flag
/// (RFC 4861 §7.2.6), sent when ownership is taken.
pub fn unsolicited_na(mac: MacAddr, target: Ipv6Addr) -> [u8; NA_FRAME_LEN] {
    na(
        MacAddr::ipv6_multicast(ALL_NODES),
        ALL_NODES,
        mac,
        target,
        NA_OVERRIDE,
    )
}

/// A Neighbor Solicitation for `target` from `src` at `mac`, to the target's solicited-node
/// group, with a source link-layer address option (RFC 4861 §4.3), as a host resolving the
/// address sends it. Used by tests and the flood tool.
pub fn neighbor_solicitation(mac: MacAddr, src: Ipv6Addr, target: Ipv6Addr) -> [u8; NA_FRAME_LEN] {
    let group = super::solicited_node(target);
    let mut f = na(MacAddr::ipv6_multicast(group), group, mac, target, 0);
    // Same layout as an advertisement: fix the source, type, option type and checksum.
    f[22..38].copy_from_slice(&src.octets());
    let m = &mut f[54..];
    m[0] = 135;
    m[24] = 1; // option: source link-layer address
    m[2] = 0;
    m[3] = 0;
    let sum = icmpv6_checksum(src, group, m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    f
}
