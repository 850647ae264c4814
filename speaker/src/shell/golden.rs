//! Golden replay of [`Speaker::sync`]: recorded cluster events in, what the speaker does out,
//! both checked in as files under `speaker/tests/sync_golden/`, the way the BGP vectors are.
//!
//! Each `NAME.json` holds the nodes to replay as (each a speaker of its own), the modes, and a
//! list of steps; a step is a list of
//! watch events (`{"apply": OBJECT}` or `{"delete": OBJECT}`, objects as the API server sends
//! them, dispatched on their `kind`) and the live speakers, then one `sync`. After each step
//! the replay writes down what a user could see of it: the addresses this node answers ARP/NDP
//! for and on which interface, the paths it gives each BGP peer, the status objects it queues
//! and the Events it emits. `NAME.expected` is that text; a difference fails the test and
//! shows both. `FERROLB_BLESS=1` writes the files anew (for a change that means it).
//!
//! The host is one interface, `golden0` (a name no machine has: the responder opens nothing),
//! on 10.99.0.0/24 and fd00:99::/64; the preference hold-down is off, so no step depends on
//! the clock.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrolb_telemetry::events::EventQueue;
use serde_json::Value;

use super::metrics::Metrics;
use super::status::StatusQueue;
use super::{Settings, Speaker};
use crate::cluster::{Cluster, Scope, Update};
use crate::l2::frame::MacAddr;
use crate::l2::host::HostRead;
use crate::l2::iface::InterfaceInfo;
use crate::l2::kernel_arp::ArpSysctls;
use crate::planner::incremental::Unable;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sync_golden")
}

/// The host every replay runs on.
fn host() -> HostRead {
    HostRead {
        interfaces: vec![InterfaceInfo {
            name: "golden0".into(),
            index: 1000,
            mac: Some(MacAddr([0x02, 0, 0, 0, 0, 0x0a])),
            up: true,
            loopback: false,
            noarp: false,
            networks: vec![
                "10.99.0.10/24".parse().unwrap(),
                "fd00:99::a/64".parse().unwrap(),
            ],
        }],
        arp: Ok(ArpSysctls::default()),
    }
}

/// Hands one watch event to the model, by the object's kind.
fn apply(cluster: &mut Cluster, event: &Value) {
    let (object, delete) = match (event.get("apply"), event.get("delete")) {
        (Some(o), None) => (o.clone(), false),
        (None, Some(o)) => (o.clone(), true),
        _ => panic!("an event is {{\"apply\": OBJECT}} or {{\"delete\": OBJECT}}: {event}"),
    };
    fn update<K: serde::de::DeserializeOwned>(object: Value, delete: bool) -> Update<K> {
        let k = serde_json::from_value(object).expect("a Kubernetes object of its kind");
        if delete {
            Update::Delete(k)
        } else {
            Update::Apply(k)
        }
    }
    match object["kind"].as_str().unwrap_or_default() {
        "Service" => cluster.service(update(object, delete)),
        "EndpointSlice" => cluster.slice(update(object, delete)),
        "Node" => cluster.node(update(object, delete)),
        "Pod" => cluster.speaker_pod(update(object, delete)),
        "IPAddressPool" => cluster.pool(update(object, delete)),
        "L2Advertisement" => cluster.l2_advertisement(update(object, delete)),
        "BGPAdvertisement" => cluster.bgp_advertisement(update(object, delete)),
        "BGPPeer" => cluster.peer(update(object, delete)),
        "BFDProfile" => cluster.bfd_profile(update(object, delete)),
        "Community" => cluster.community(update(object, delete)),
        "Secret" => cluster.secret(update(object, delete)),
        other => panic!("no watch of kind `{other}`"),
    }
}

/// What a user could see of the speaker after a step.
fn observe(speaker: &Speaker, status: &StatusQueue, events: &EventQueue, out: &mut String) {
    writeln!(out, "  layer 2 answers:").unwrap();
    for (ip, names) in speaker.planner.answering() {
        writeln!(out, "    {ip} on {}", names.join(", ")).unwrap();
    }
    writeln!(out, "  BGP paths:").unwrap();
    for (peer, ads) in speaker.planner.advertised() {
        for a in ads {
            let via = a
                .next_hop
                .map_or("the session's own".into(), |h| h.to_string());
            writeln!(out, "    to {peer}: {} next hop {via}", a.prefix).unwrap();
        }
    }
    writeln!(out, "  status objects queued:").unwrap();
    while let Some((key, desired)) = status.pop() {
        let l2 = desired.l2.map_or("no ServiceL2Status".into(), |s| {
            let names: Vec<&str> = s.interfaces.iter().map(|i| i.name.as_str()).collect();
            format!(
                "ServiceL2Status {} on {}",
                s.addresses.join(", "),
                names.join(", ")
            )
        });
        let bgp = desired.bgp.map_or("no ServiceBGPStatus".into(), |s| {
            format!("ServiceBGPStatus to {}", s.peers.join(", "))
        });
        writeln!(out, "    {key}: {l2}; {bgp}").unwrap();
        status.done(&key);
    }
    writeln!(out, "  Events:").unwrap();
    while let Some((target, event)) = events.pop() {
        writeln!(
            out,
            "    {} {}/{}: {} {}",
            target.kind.unwrap_or_default(),
            target.namespace.unwrap_or_default(),
            target.name.unwrap_or_default(),
            event.reason,
            event.note.unwrap_or_default()
        )
        .unwrap();
    }
}

/// Replays `NAME.json` as each of its nodes and returns the text `NAME.expected` must hold.
async fn replay_all(input: &Value) -> String {
    let mut out = String::new();
    for node in input["nodes"].as_array().expect("nodes") {
        let node = node.as_str().expect("a node name");
        writeln!(out, "== as {node}").unwrap();
        out += &replay(input, node).await;
    }
    out
}

/// Replays `input`'s steps as the speaker of `node`.
async fn replay(input: &Value, node: &str) -> String {
    let node = node.to_string();
    let settings = Settings {
        node: node.clone(),
        namespace: "ferrolb-system".into(),
        enable_l2: input["l2"].as_bool().unwrap_or(true),
        enable_bgp: input["bgp"].as_bool().unwrap_or(true),
        l2_handover: std::time::Duration::ZERO,
        l2_preference_hold_down: std::time::Duration::ZERO,
    };
    let status = StatusQueue::new();
    let events = Arc::new(EventQueue::new(1024));
    let mut speaker = Speaker::new(settings, Metrics::default(), status.clone(), events.clone());
    let mut cluster = Cluster::new(Scope {
        this_node: node.clone(),
        class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
        ignore_unclassed: false,
    });
    let mut out = String::new();
    for (i, step) in input["steps"].as_array().expect("steps").iter().enumerate() {
        for event in step["events"].as_array().into_iter().flatten() {
            apply(&mut cluster, event);
        }
        let live: BTreeSet<String> = step["live"]
            .as_array()
            .expect("live")
            .iter()
            .map(|n| n.as_str().expect("a node name").to_string())
            .collect();
        let host = (i == 0).then(host);
        let synced = speaker.sync(&mut cluster, &live, &Unable::new(), host);
        writeln!(
            out,
            "step {}: {}\n  sync: {} addresses decided, {} Services queued",
            i + 1,
            step["note"].as_str().unwrap_or_default(),
            synced.decided,
            synced.services
        )
        .unwrap();
        observe(&speaker, &status, &events, &mut out);
    }
    out
}

#[tokio::test]
async fn every_recorded_replay_of_sync_gives_the_checked_in_announcements_and_writes() {
    let bless = std::env::var_os("FERROLB_BLESS").is_some();
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("speaker/tests/sync_golden")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no replay in {}", dir().display());
    let mut differ = Vec::new();
    for path in &inputs {
        let input: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("JSON");
        let got = replay_all(&input).await;
        let expected_path = path.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            differ.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}",
                path.display()
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
