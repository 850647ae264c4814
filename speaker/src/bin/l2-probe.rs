//! `l2-probe`: runs the layer-2 responder alone, for tests in network namespaces until the full
//! speaker binary drives it.
//!
//! ```text
//! l2-probe [--stats-ms N] [--control] ADDR[@IF[+IF...]]...
//! ```
//! - `ADDR@IF+IF` answers on the named interfaces; a bare `ADDR` on the interfaces whose subnet
//!   holds it (the default choice of the speaker).
//! - `--stats-ms N` prints the counters as one JSON line every N milliseconds (default 500).
//! - `--control` reads new owned sets from standard input, one per line, in the same syntax
//!   (`-` alone means none), and prints `owned <unix-nanos>` after applying each.

use anyhow::{Context, Result, bail};
use ferrolb_speaker::l2::iface::{self, InterfaceInfo};
use ferrolb_speaker::l2::{CounterSnapshot, Responder};
use ferrolb_speaker::planner::Interfaces;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn parse_owned(words: &[String], host: &[InterfaceInfo]) -> Result<BTreeMap<IpAddr, Vec<String>>> {
    let mut owned = BTreeMap::new();
    for w in words {
        if w == "-" {
            continue;
        }
        let (addr, ifs) = match w.split_once('@') {
            Some((a, i)) => (a, Some(i)),
            None => (w.as_str(), None),
        };
        let ip: IpAddr = addr
            .parse()
            .with_context(|| format!("`{addr}` is not an IP address"))?;
        let wanted = match ifs {
            Some(list) => {
                Interfaces::Named(list.split('+').map(String::from).collect::<BTreeSet<_>>())
            }
            None => Interfaces::BySubnet,
        };
        let chosen = iface::choose(ip, &wanted, host);
        if chosen.is_empty() {
            bail!("no usable interface for {ip}");
        }
        owned.insert(ip, chosen);
    }
    Ok(owned)
}

fn stats_line(c: &CounterSnapshot) -> String {
    let drops: serde_json::Map<String, serde_json::Value> = c
        .drops
        .iter()
        .map(|(r, n)| (r.label().to_string(), (*n).into()))
        .collect();
    serde_json::json!({
        "frames": c.frames, "own_frames": c.own_frames,
        "arp_requests": c.arp_requests, "ns_requests": c.ns_requests, "not_owned": c.not_owned,
        "arp_replies": c.arp_replies, "na_replies": c.na_replies,
        "gratuitous_arp": c.gratuitous_arp, "unsolicited_na": c.unsolicited_na,
        "send_errors": c.send_errors, "read_errors": c.read_errors,
        "multicast_errors": c.multicast_errors, "malformed": c.malformed(), "drops": drops,
    })
    .to_string()
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn main() -> Result<()> {
    let mut stats_ms = 500u64;
    let mut control = false;
    let mut words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--stats-ms" => stats_ms = args.next().context("--stats-ms needs a value")?.parse()?,
            "--control" => control = true,
            _ => words.push(a),
        }
    }
    let host = iface::system_interfaces();
    let responder = Arc::new(Responder::new());
    responder.set_owned(&parse_owned(&words, &host)?)?;
    let stats = responder.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(stats_ms));
            let line = stats_line(&stats.counters());
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    });
    if control {
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            let words: Vec<String> = line.split_whitespace().map(String::from).collect();
            match parse_owned(&words, &iface::system_interfaces()) {
                Ok(owned) => {
                    responder.set_owned(&owned)?;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "owned {}", unix_nanos())?;
                    out.flush()?;
                }
                Err(e) => eprintln!("ignored `{line}`: {e:#}"),
            }
        }
    } else {
        loop {
            std::thread::park();
        }
    }
    Ok(())
}
