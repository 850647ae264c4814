//! `bfd-probe`: runs BFD sessions alone, for end-to-end tests in network namespaces.
//!
//! Usage: `bfd-probe '<session JSON>'...`, one argument per session:
//! `{"local": "10.99.0.1", "peer": "10.99.0.2"}` plus, optionally, `"multihop"` (false),
//! `"tx_ms"` / `"rx_ms"` (300), `"multiplier"` (3), `"passive"` (false) and `"minimum_ttl"`
//! (254). Then reads commands from stdin, one per line: `"status"` prints every session's full
//! status; `"shutdown"` (or the end of stdin) disables every session (AdminDown) and exits.
//!
//! Prints one JSON line per session at start and then per state change seen (the status watch
//! coalesces, so a state held for microseconds may be skipped):
//! `{"peer": "10.99.0.2", "local": "10.99.0.1", "state": "Up", "remote_state": "Up",
//! "diag": "NoDiagnostic", "t": <seconds since start>}`.

use std::io::Write;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferrolb_speaker::bfd::{BfdHandle, BfdPeer, BfdSessions, BfdStatus, SessionConfig};
use serde::Deserialize;

fn default_ms() -> u64 {
    300
}

fn default_multiplier() -> u8 {
    3
}

fn default_minimum_ttl() -> u8 {
    254
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    local: IpAddr,
    peer: IpAddr,
    #[serde(default)]
    multihop: bool,
    #[serde(default = "default_ms")]
    tx_ms: u64,
    #[serde(default = "default_ms")]
    rx_ms: u64,
    #[serde(default = "default_multiplier")]
    multiplier: u8,
    #[serde(default)]
    passive: bool,
    #[serde(default = "default_minimum_ttl")]
    minimum_ttl: u8,
}

impl Spec {
    fn peer(&self) -> BfdPeer {
        BfdPeer {
            local: self.local,
            peer: self.peer,
            multihop: self.multihop,
            device: None,
            config: SessionConfig {
                desired_min_tx: Duration::from_millis(self.tx_ms),
                required_min_rx: Duration::from_millis(self.rx_ms),
                detect_mult: self.multiplier,
                passive: self.passive,
                minimum_ttl: self.minimum_ttl,
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Command {
    Status,
    Shutdown,
}

fn print(line: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the test is gone; nothing to tell it.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn status_json(status: &BfdStatus) -> serde_json::Value {
    serde_json::json!({
        "state": format!("{:?}", status.state),
        "remote_state": format!("{:?}", status.remote_state),
        "diag": format!("{:?}", status.local_diag),
        "detection_time_ms": status.detection_time.map(|d| d.as_secs_f64() * 1000.0),
        "up_for_s": status.up_since.map(|t| t.elapsed().as_secs_f64()),
        "packets_received": status.packets_received,
        "packets_sent": status.packets_sent,
        "dropped": status.dropped,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let specs: Vec<Spec> = std::env::args()
        .skip(1)
        .map(|a| serde_json::from_str(&a).with_context(|| format!("bad session JSON: {a}")))
        .collect::<Result<_>>()?;
    let start = Instant::now();
    let sessions = BfdSessions::new();
    let mut handles: Vec<(Spec, BfdHandle)> = Vec::new();
    for spec in specs {
        let handle = sessions
            .start(spec.peer())
            .with_context(|| format!("starting the BFD session to {}", spec.peer))?;
        let mut status = handle.status();
        let (peer, local) = (spec.peer, spec.local);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let now = status.borrow_and_update().clone();
                if last != Some(now.state) {
                    last = Some(now.state);
                    print(&serde_json::json!({
                        "peer": peer,
                        "local": local,
                        "state": format!("{:?}", now.state),
                        "remote_state": format!("{:?}", now.remote_state),
                        "diag": format!("{:?}", now.local_diag),
                        "t": start.elapsed().as_secs_f64(),
                    }));
                }
                if status.changed().await.is_err() {
                    return;
                }
            }
        });
        handles.push((spec, handle));
    }

    let mut rx = ferrolb_tests::tools::commands_from_stdin("bfd-probe", Command::Shutdown);

    while let Some(command) = rx.recv().await {
        match command {
            Command::Status => {
                for (spec, handle) in &handles {
                    let status = handle.status().borrow().clone();
                    print(&serde_json::json!({
                        "peer": spec.peer,
                        "local": spec.local,
                        "status": status_json(&status),
                        "unmatched": sessions.unmatched_drops(),
                        "t": start.elapsed().as_secs_f64(),
                    }));
                }
            }
            Command::Shutdown => break,
        }
    }
    futures::future::join_all(handles.into_iter().map(|(_, h)| h.shutdown())).await;
    print(&serde_json::json!({"shutdown": true, "t": start.elapsed().as_secs_f64()}));
    Ok(())
}
