//! `l2-flood`: sends a mix of valid and malformed ARP / NDP frames on an interface, to check that
//! a responder survives hostile input and keeps answering. For tests in network namespaces.
//!
//! ```text
//! l2-flood IFACE COUNT IPV4_TARGET IPV6_TARGET
//! ```
//! One frame in ten is a valid ARP request for `IPV4_TARGET`, one in ten a valid Neighbor
//! Solicitation for `IPV6_TARGET`; the rest are truncated, corrupted or random. Prints one JSON
//! line with the counts sent per kind and the elapsed time.

use anyhow::{Context, Result, bail};
use ferrolb_speaker::l2::frame::{self, MacAddr};
use pnet::datalink::{self, Channel};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
}

fn arp_request(mac: MacAddr, sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    // A gratuitous request with the target changed is an ordinary request.
    let mut f = frame::gratuitous_arp_request(mac, sender).to_vec();
    f[38..42].copy_from_slice(&target.octets());
    f
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ifname, count, v4, v6] = args.as_slice() else {
        bail!("usage: l2-flood IFACE COUNT IPV4_TARGET IPV6_TARGET");
    };
    let count: usize = count.parse()?;
    let v4: Ipv4Addr = v4.parse()?;
    let v6: Ipv6Addr = v6.parse()?;
    let iface = datalink::interfaces()
        .into_iter()
        .find(|i| &i.name == ifname)
        .with_context(|| format!("no interface {ifname}"))?;
    let mac = MacAddr(iface.mac.context("interface without MAC")?.octets());
    let my_v4 = iface
        .ips
        .iter()
        .find_map(|n| match n.ip() {
            std::net::IpAddr::V4(a) => Some(a),
            _ => None,
        })
        .unwrap_or(Ipv4Addr::new(10, 99, 0, 2));
    let my_v6 = iface
        .ips
        .iter()
        .find_map(|n| match n.ip() {
            std::net::IpAddr::V6(a) if !a.is_unicast_link_local() => Some(a),
            _ => None,
        })
        .unwrap_or(Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2));
    let Ok(Channel::Ethernet(mut tx, _rx)) = datalink::channel(&iface, Default::default()) else {
        bail!("cannot open a packet channel on {ifname}");
    };
    let valid_arp = arp_request(mac, my_v4, v4);
    let valid_ns = frame::neighbor_solicitation(mac, my_v6, v6).to_vec();
    let mut rng = Rng(0x5eed_f00d_cafe_b0b0);
    let mut sent: BTreeMap<&str, u64> = BTreeMap::new();
    let start = Instant::now();
    for i in 0..count {
        let (kind, f): (&str, Vec<u8>) = match i % 10 {
            0 => ("valid_arp", valid_arp.clone()),
            1 => ("valid_ns", valid_ns.clone()),
            // The kernel refuses to send less than an Ethernet header.
            2 => ("truncated_arp", valid_arp[..14 + rng.below(28)].to_vec()),
            3 => {
                let mut f = valid_ns.clone();
                f[57] ^= 0x5a;
                ("bad_checksum_ns", f)
            }
            4 => {
                let mut f = valid_ns.clone();
                f[21] = 64;
                ("hop_limit_ns", f)
            }
            5 | 6 => {
                let len = rng.below(120) + 14;
                let mut f: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                f[6..12].copy_from_slice(&mac.0);
                let et: u16 = if i % 10 == 5 { 0x0806 } else { 0x86dd };
                f[12..14].copy_from_slice(&et.to_be_bytes());
                ("random", f)
            }
            7 => {
                let mut f = valid_ns.clone();
                f[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
                ("oversized_payload_length", f)
            }
            8 => {
                let mut f = valid_arp.clone();
                f[15] = 6;
                ("arp_bad_hardware", f)
            }
            _ => {
                let mut f = valid_ns.clone();
                f[62] = 0xff;
                let (src, dst) = (my_v6, frame::solicited_node(v6));
                f[56..58].fill(0);
                let sum = frame::icmpv6_checksum(src, dst, &f[54..]);
                f[56..58].copy_from_slice(&sum.to_be_bytes());
                ("multicast_target_ns", f)
            }
        };
        if let Some(Ok(())) = tx.send_to(&f, None) {
            *sent.entry(kind).or_default() += 1;
        } else {
            *sent.entry("send_failed").or_default() += 1;
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{}",
        serde_json::json!({"sent": sent, "elapsed_ms": elapsed.as_secs_f64() * 1000.0})
    );
    Ok(())
}
