//! `l2-watch`: prints every ARP packet and Neighbor Advertisement that claims one of the given
//! addresses, as a client on the segment sees them. For failover measurements.
//!
//! ```text
//! l2-watch IFACE ADDR...
//! ```
//! Output, one line per frame: `<unix-nanos> <arp-request|arp-reply|na> <addr> <mac>`, where
//! `mac` is the sender hardware address (ARP) or the Ethernet source (NA).

use anyhow::{Context, Result, bail};
use ferrolb_speaker::l2::frame::MacAddr;
use pnet::datalink::{self, Channel};
use std::collections::BTreeSet;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

/// The claim a frame makes, if any: (kind, address, MAC).
fn claim(f: &[u8]) -> Option<(&'static str, IpAddr, MacAddr)> {
    let ethertype = u16::from_be_bytes(f.get(12..14)?.try_into().ok()?);
    match ethertype {
        0x0806 => {
            let op = u16::from_be_bytes(f.get(20..22)?.try_into().ok()?);
            let mac = MacAddr(f.get(22..28)?.try_into().ok()?);
            let ip: [u8; 4] = f.get(28..32)?.try_into().ok()?;
            let kind = match op {
                1 => "arp-request",
                2 => "arp-reply",
                _ => return None,
            };
            Some((kind, IpAddr::V4(Ipv4Addr::from(ip)), mac))
        }
        0x86dd => {
            // ICMPv6 directly after the IPv6 header, type 136.
            if *f.get(20)? != 58 || *f.get(54)? != 136 {
                return None;
            }
            let src = MacAddr(f.get(6..12)?.try_into().ok()?);
            let target: [u8; 16] = f.get(62..78)?.try_into().ok()?;
            Some(("na", IpAddr::V6(Ipv6Addr::from(target)), src))
        }
        _ => None,
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((ifname, addrs)) = args.split_first() else {
        bail!("usage: l2-watch IFACE ADDR...");
    };
    let watched: BTreeSet<IpAddr> = addrs
        .iter()
        .map(|a| {
            a.parse()
                .with_context(|| format!("`{a}` is not an address"))
        })
        .collect::<Result<_>>()?;
    let iface = datalink::interfaces()
        .into_iter()
        .find(|i| &i.name == ifname)
        .with_context(|| format!("no interface {ifname}"))?;
    let Ok(Channel::Ethernet(_tx, mut rx)) = datalink::channel(&iface, Default::default()) else {
        bail!("cannot open a packet channel on {ifname}");
    };
    let mut out = std::io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;
    loop {
        let frame = rx.next()?;
        let Some((kind, ip, mac)) = claim(frame) else {
            continue;
        };
        if !watched.contains(&ip) {
            continue;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        writeln!(out, "{now} {kind} {ip} {mac}")?;
        out.flush()?;
    }
}
