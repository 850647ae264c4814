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
//! - Gossip mode, `--node NAME --listen IP:PORT --key-file F [--peer NAME@IP:PORT]...`: the
//!   addresses are candidates; the node owns those the election gives it among the live
//!   speakers that gossip reports, and prints `owned <unix-nanos> <addrs|-> live <nodes>` on
//!   every change. `--prefer NODE=WEIGHT` (repeatable) gives NODE that preference score for
//!   every address, and `--hold-down-ms N` (default 0) holds a returning preferred node that
//!   long ([`ferrolb_speaker::l2::arrivals`]).

use anyhow::{Context, Result, bail};
use ferrolb_speaker::l2::arrivals::Arrivals;
use ferrolb_speaker::l2::election::{self, Standing};
use ferrolb_speaker::l2::iface::{self, InterfaceInfo};
use ferrolb_speaker::l2::{CounterSnapshot, Responder};
use ferrolb_speaker::membership::{Gossip, GossipKey, MembershipConfig};
use ferrolb_speaker::planner::Interfaces;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
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

/// Gossip mode: who is alive decides, through the election, what this node owns.
struct GossipArgs {
    node: String,
    listen: SocketAddr,
    peers: Vec<(String, SocketAddr)>,
    key_file: String,
    prefer: BTreeMap<String, u32>,
    hold_down: Duration,
}

fn parse_prefer(s: &str) -> Result<(String, u32)> {
    let (node, w) = s.split_once('=').context("--prefer wants NODE=WEIGHT")?;
    Ok((node.to_string(), w.parse().context("--prefer weight")?))
}

fn parse_peer(s: &str) -> Result<(String, SocketAddr)> {
    let (node, addr) = s.split_once('@').context("--peer wants NODE@IP:PORT")?;
    Ok((node.to_string(), addr.parse().context("--peer address")?))
}

fn run_gossip(g: GossipArgs, words: &[String], responder: &Responder) -> Result<()> {
    let key = std::fs::read(&g.key_file).with_context(|| format!("reading {}", g.key_file))?;
    let key = GossipKey::new(key).context("the gossip key must be at least 16 bytes")?;
    let candidates = parse_owned(words, &iface::system_interfaces())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let gossip = Gossip::start(
            g.node.clone(),
            g.listen,
            g.listen,
            key,
            MembershipConfig::default(),
        )
        .await?;
        gossip.set_seeds(g.peers.clone());
        let mut live = gossip.live();
        let mut arrivals = Arrivals::new(g.node.clone(), g.hold_down);
        loop {
            let nodes = live.borrow_and_update().clone();
            let now = std::time::Instant::now();
            arrivals.observe(now, &nodes);
            let hold_down = arrivals.hold_down(now, &BTreeMap::new());
            let wake = hold_down.next_expiry();
            let standing = |n: &str| {
                let preference = g.prefer.get(n).copied().unwrap_or(0);
                Standing::new(preference, hold_down.held(n))
            };
            let owned: BTreeMap<IpAddr, Vec<String>> = candidates
                .iter()
                .filter(|(ip, _)| {
                    let cands = nodes.iter().map(|n| (n.as_str(), standing(n)));
                    election::owner_by_standing(**ip, cands) == Some(g.node.as_str())
                })
                .map(|(ip, ifs)| (*ip, ifs.clone()))
                .collect();
            responder.set_owned(&owned)?;
            let list: Vec<String> = owned.keys().map(IpAddr::to_string).collect();
            let live_list: Vec<&str> = nodes.iter().map(String::as_str).collect();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "owned {} {} live {}",
                unix_nanos(),
                if list.is_empty() {
                    "-".to_string()
                } else {
                    list.join(",")
                },
                live_list.join(",")
            )?;
            out.flush()?;
            drop(out);
            // Until membership changes or a hold-down ends, report the gossip counters twice
            // a second.
            let until = wake.map(tokio::time::Instant::from_std);
            loop {
                let expiry = async {
                    match until {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = expiry => break,
                    r = live.changed() => {
                        if r.is_err() {
                            return Ok(());
                        }
                        break;
                    }
                    () = tokio::time::sleep(Duration::from_millis(500)) => {
                        let c = gossip.counters();
                        let line = serde_json::json!({
                            "received": c.received, "sent": c.sent,
                            "auth_failures": c.auth_failures_total(),
                            "protocol_errors": c.protocol_errors,
                        });
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "gossip {line}")?;
                        out.flush()?;
                    }
                }
            }
        }
    })
}

fn main() -> Result<()> {
    let mut stats_ms = 500u64;
    let mut control = false;
    let mut words = Vec::new();
    let (mut node, mut listen, mut peers, mut key_file) = (None, None, Vec::new(), None);
    let (mut prefer, mut hold_down) = (BTreeMap::new(), Duration::ZERO);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--stats-ms" => stats_ms = value()?.parse()?,
            "--control" => control = true,
            "--node" => node = Some(value()?),
            "--listen" => listen = Some(value()?.parse::<SocketAddr>()?),
            "--peer" => peers.push(parse_peer(&value()?)?),
            "--key-file" => key_file = Some(value()?),
            "--prefer" => {
                let (n, w) = parse_prefer(&value()?)?;
                prefer.insert(n, w);
            }
            "--hold-down-ms" => hold_down = Duration::from_millis(value()?.parse()?),
            _ => words.push(a),
        }
    }
    let gossip = match (node, listen, key_file) {
        (Some(node), Some(listen), Some(key_file)) => Some(GossipArgs {
            node,
            listen,
            peers,
            key_file,
            prefer,
            hold_down,
        }),
        (None, None, None) => None,
        _ => bail!("gossip mode needs --node, --listen and --key-file together"),
    };
    let host = iface::system_interfaces();
    let responder = Arc::new(Responder::new());
    if gossip.is_none() {
        responder.set_owned(&parse_owned(&words, &host)?)?;
    }
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
    if let Some(g) = gossip {
        run_gossip(g, &words, &responder)?;
    } else if control {
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
