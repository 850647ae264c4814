//! `bgp-probe`: runs the BGP speaker alone, for end-to-end tests in network namespaces and for
//! benchmarks.
//!
//! Usage: `bgp-probe '<PeerConfig JSON>'...`. Then reads commands from stdin, one per line:
//! `{"advertise": {"peer": "<id>", "advertisements": [<Advertisement>...]}}`,
//! `{"hosts": {"peer": "<id>", "base": "10.99.128.0", "count": 100000}}` (that many /32s),
//! `{"peers": [<PeerConfig>...]}` (the configured peers from now on), `"drain"` (announce every
//! route again with GRACEFUL_SHUTDOWN, RFC 8326) or `"shutdown"`. Prints each status change as
//! one JSON line:
//! `{"peer": "<id>", "status": <PeerStatus>, "elapsed_ms": <since start>}`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferrolb_speaker::bgp::{Advertisement, BgpSpeaker, PeerConfig, PeerId, PeerStatus};
use ipnet::IpNet;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Command {
    Advertise {
        peer: PeerId,
        advertisements: Vec<Advertisement>,
    },
    Hosts {
        peer: PeerId,
        base: Ipv4Addr,
        count: u32,
    },
    /// Replaces the configured peers (`BgpSpeaker::set_peers`).
    Peers(Vec<PeerConfig>),
    Drain,
    Shutdown,
}

#[tokio::main]
async fn main() -> Result<()> {
    let peers: Vec<PeerConfig> = std::env::args()
        .skip(1)
        .map(|a| serde_json::from_str(&a).with_context(|| format!("bad PeerConfig JSON: {a}")))
        .collect::<Result<_>>()?;
    let speaker = std::sync::Arc::new(BgpSpeaker::new());
    speaker.set_peers(peers);
    let start = Instant::now();

    let mut rx = ferrolb_tests::tools::commands_from_stdin("bgp-probe", Command::Shutdown);

    let mut last: BTreeMap<PeerId, PeerStatus> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd.unwrap_or(Command::Shutdown) {
                Command::Advertise { peer, advertisements } => {
                    speaker.set_advertisements(&peer, advertisements);
                }
                Command::Hosts { peer, base, count } => {
                    let base = u32::from(base);
                    let advs = (0..count)
                        .filter_map(|i| IpNet::new(IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i))), 32).ok())
                        .map(Advertisement::new)
                        .collect();
                    speaker.set_advertisements(&peer, advs);
                }
                Command::Peers(peers) => speaker.set_peers(peers),
                Command::Drain => speaker.drain(Duration::from_secs(5)).await,
                Command::Shutdown => {
                    speaker.shutdown().await;
                    return Ok(());
                }
            },
            _ = tick.tick() => {
                for (peer, status) in speaker.session_states() {
                    if last.get(&peer) != Some(&status) {
                        let line = serde_json::json!({
                            "peer": peer,
                            "status": status,
                            "elapsed_ms": start.elapsed().as_secs_f64() * 1000.0,
                        });
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{line}")?;
                        out.flush()?;
                        last.insert(peer, status);
                    }
                }
            }
        }
    }
}
