//! Shared helpers of the BGP integration tests: the recorded vectors.
#![allow(dead_code)]

pub mod guest;
pub mod lab;
pub mod outputs;

use std::path::PathBuf;

/// One recorded message.
pub struct Recorded {
    /// `daemon->us` or `us->daemon`.
    pub from_daemon: bool,
    /// The raw message.
    pub bytes: Vec<u8>,
}

/// One vector file.
pub struct Vector {
    /// File name without `.json`.
    pub name: String,
    /// `bird`, `frr` or `gobgp`.
    pub daemon: String,
    /// Scenario name.
    pub scenario: String,
    /// Messages in wire order.
    pub messages: Vec<Recorded>,
    /// The NOTIFICATION the daemon answered with: code, subcode, data.
    pub notification: Option<(u8, u8, Vec<u8>)>,
    /// The daemon sent ADD-PATH path identifiers.
    pub addpath: bool,
}

pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bgp_vectors")
}

pub fn load(name: &str) -> Vector {
    let path = vectors_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let messages = v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| Recorded {
            from_daemon: m["direction"] == "daemon->us",
            bytes: hex(m["hex"].as_str().expect("hex")),
        })
        .collect();
    let notification = v["result"]["notification"].as_object().map(|n| {
        (
            n["code"].as_u64().unwrap() as u8,
            n["subcode"].as_u64().unwrap() as u8,
            hex(n["data"].as_str().unwrap_or("")),
        )
    });
    Vector {
        name: name.to_owned(),
        daemon: v["daemon"].as_str().unwrap().to_owned(),
        scenario: v["scenario"].as_str().unwrap().to_owned(),
        messages,
        notification,
        addpath: v["addpath_afis_daemon_to_us"].is_array(),
    }
}

pub fn all() -> Vec<Vector> {
    let mut names: Vec<String> = std::fs::read_dir(vectors_dir())
        .expect("vectors")
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".json").map(str::to_owned)
        })
        .collect();
    names.sort();
    names.iter().map(|n| load(n)).collect()
}
