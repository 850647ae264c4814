//! A recorder of every Service status change, and the checks a user cares about over it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::ingress;

/// One observed state of one Service.
#[derive(Debug, Clone)]
pub enum Seen {
    /// The Service exists with these addresses (possibly none).
    Addresses(String, Vec<String>),
    /// The Service was deleted.
    Deleted(String),
}

/// Watches Services in `default` and records every state in order.
pub struct History {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    /// Starts recording.
    pub fn record(client: kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let api = Api::<Service>::namespaced(client, "default");
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            // A re-list (after a dropped watch or a 410) says nothing about what was deleted
            // meanwhile: a Service known before and absent from the re-list is recorded as
            // deleted, so its address may be reused without looking like a double holder.
            let mut live = BTreeSet::new();
            let mut relisted = BTreeSet::new();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let mut sink = sink.lock().unwrap();
                match ev {
                    watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                        let name = s.metadata.name.clone().unwrap_or_default();
                        let ips = ingress(&s).into_iter().map(|(ip, _)| ip).collect();
                        live.insert(name.clone());
                        relisted.insert(name.clone());
                        sink.push(Seen::Addresses(name, ips));
                    }
                    watcher::Event::Delete(s) => {
                        let name = s.metadata.name.clone().unwrap_or_default();
                        live.remove(&name);
                        sink.push(Seen::Deleted(name))
                    }
                    watcher::Event::Init => relisted.clear(),
                    watcher::Event::InitDone => {
                        for gone in live.difference(&relisted) {
                            sink.push(Seen::Deleted(gone.clone()));
                        }
                        live = relisted.clone();
                    }
                }
            }
        });
        Self { seen, task }
    }

    /// Stops recording and returns what was seen.
    pub fn finish(self) -> Vec<Seen> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}

/// Violations of "an address never changes while its Service lives" and "no address is held by
/// two Services at once", over a whole history.
pub fn violations(history: &[Seen]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new(); // service -> addresses
    let mut first: BTreeMap<String, Vec<String>> = BTreeMap::new(); // service -> first addresses
    let mut holder: BTreeMap<String, String> = BTreeMap::new(); // address -> service
    for seen in history {
        match seen {
            Seen::Deleted(name) => {
                for ip in held.remove(name).unwrap_or_default() {
                    holder.remove(&ip);
                }
                first.remove(name);
            }
            Seen::Addresses(name, ips) => {
                let before = held.get(name).cloned().unwrap_or_default();
                if before == *ips {
                    continue;
                }
                if !ips.is_empty() {
                    match first.get(name) {
                        Some(f) if f != ips => {
                            problems.push(format!("{name} changed from {f:?} to {ips:?}"))
                        }
                        Some(_) => {}
                        None => {
                            first.insert(name.clone(), ips.clone());
                        }
                    }
                } else if !before.is_empty() {
                    problems.push(format!("{name} lost its addresses {before:?}"));
                }
                for ip in &before {
                    holder.remove(ip);
                }
                for ip in ips {
                    if let Some(other) = holder.get(ip).filter(|o| *o != name) {
                        problems.push(format!("{ip} given to {name} while {other} holds it"));
                    }
                    holder.insert(ip.clone(), name.clone());
                }
                held.insert(name.clone(), ips.clone());
            }
        }
    }
    problems
}

/// The number of distinct Services that ever held an address.
pub fn services_with_addresses(history: &[Seen]) -> usize {
    history
        .iter()
        .filter_map(|s| match s {
            Seen::Addresses(n, ips) if !ips.is_empty() => Some(n.clone()),
            _ => None,
        })
        .collect::<BTreeSet<_>>()
        .len()
}
