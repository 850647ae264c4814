//! A day in an hour: churn and faults on a running lab, with what must hold through all of it.
//!
//! [`run`] drives a lab (three nodes, the router, the controller and the speakers) for
//! [`SoakPlan::duration`]:
//! - **churn**, one operation every [`SoakPlan::churn_every`]: Services (with an EndpointSlice
//!   naming every node) are created, deleted, given another port or label, switched between
//!   `externalTrafficPolicy` Cluster and Local, or moved to the other pool (the one change that
//!   asks for a new address); every 25th operation edits the layer-2 pool (a label, and an
//!   extra range added or removed);
//! - **a process killed** every [`SoakPlan::kill_every`] (SIGKILL, started again 2 s later as
//!   the kubelet would): the controller the second time, the speakers of node-b and node-c in
//!   turn otherwise. node-a's speaker is never killed, so one speaker lives the whole run;
//! - **a node cut off** the segment every [`SoakPlan::cut_every`] for [`SoakPlan::cut_for`]
//!   (node-a and node-c in turn), plugged back in with its speaker still running, as a cable
//!   pulled and put back;
//! - **a sample** every [`SoakPlan::sample_every`] of each process's RSS, open file
//!   descriptors and async tasks (`ferrolb_runtime_tasks` from its `/metrics`).
//!
//! A watch of the Services records every address each Service is given. What must hold, and
//! what [`SoakReport::violations`] lists otherwise: no Service's address changes unless the
//! Service was moved to the other pool or its address left its pool; no address is held by two
//! Services at once; after the churn every Service has an address, every layer-2 address has one
//! owner and every BGP address is routed to the nodes; and, over the last two thirds of the run,
//! RSS, file descriptors and tasks of the processes that lived through all of it show no growth
//! trend (the growth of their running peak and running floor over that window,
//! [`envelope_growth`], stays under [`Growth`]'s limits).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{INSTALL_NS, Lab, LabError, Result};
use crate::netns::topology::NODE_NAMES;

/// The namespace of the churned Services.
const NS: &str = "default";
/// The label every churned Service and EndpointSlice carries.
const SOAK_LABEL: &str = "ferrolb.io/soak";
/// The layer-2 pool of the churn: 40 addresses on the nodes' segment.
const L2_POOL: &str = "soak-l2";
const L2_RANGE: &str = "10.99.0.150-10.99.0.189";
/// The range pool edits add to and remove from [`L2_POOL`].
const L2_EXTRA: &str = "10.99.0.190-10.99.0.199";
/// The BGP pool of the churn: 64 addresses routed to the nodes.
const BGP_POOL: &str = "soak-bgp";
const BGP_RANGE: &str = "10.99.2.128/26";

/// How long the soak runs and how often each thing happens.
#[derive(Debug, Clone)]
pub struct SoakPlan {
    /// The whole run.
    pub duration: Duration,
    /// One churn operation this often.
    pub churn_every: Duration,
    /// One process killed this often.
    pub kill_every: Duration,
    /// One node cut off this often...
    pub cut_every: Duration,
    /// ...for this long.
    pub cut_for: Duration,
    /// One sample of every process this often.
    pub sample_every: Duration,
    /// The number of churned Services the churn keeps around (it creates below it, deletes
    /// above half of it).
    pub population: usize,
    /// The seed of the churn's choices (a run is repeatable up to timing).
    pub seed: u64,
}

impl SoakPlan {
    /// The schedule scaled to `duration`: for an hour, a kill every 5 min, a node cut
    /// off every 10 min for 90 s, a sample every minute; an operation every 500 ms whatever the
    /// length.
    pub fn over(duration: Duration) -> Self {
        Self {
            duration,
            churn_every: Duration::from_millis(500),
            kill_every: duration / 12,
            cut_every: duration / 6,
            cut_for: (duration / 40).max(Duration::from_secs(3)),
            sample_every: duration / 60,
            population: 30,
            seed: 27,
        }
    }
}

/// The growth over the judged window above which a resource counts as growing.
#[derive(Debug, Clone, Copy)]
pub struct Growth {
    /// RSS, KiB, on top of [`Growth::rss_fraction`] of the window's mean.
    pub rss_kib: f64,
    /// RSS, as a fraction of the window's mean.
    pub rss_fraction: f64,
    /// Open file descriptors.
    pub fds: f64,
    /// Async tasks.
    pub tasks: f64,
}

impl Default for Growth {
    fn default() -> Self {
        Self {
            rss_kib: 2048.0,
            rss_fraction: 0.05,
            fds: 2.0,
            tasks: 3.0,
        }
    }
}

/// One process's figures at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Since the soak started.
    pub at: Duration,
    /// `controller` or `speaker-node-a` ...
    pub process: String,
    /// Its pid (a new one after a kill).
    pub pid: u32,
    /// VmRSS, KiB.
    pub rss_kib: u64,
    /// Entries of `/proc/PID/fd`.
    pub fds: u64,
    /// `ferrolb_runtime_tasks`, when `/metrics` answered.
    pub tasks: Option<u64>,
}

/// A resource's trend over the judged window, for one process.
#[derive(Debug, Clone)]
pub struct Trend {
    /// The process.
    pub process: String,
    /// `rss KiB`, `fds` or `tasks`.
    pub resource: &'static str,
    /// Samples in the window.
    pub samples: usize,
    /// The window's mean.
    pub mean: f64,
    /// What the resource grew by, as judged: the smaller of the rise of its running peak and of
    /// its running floor over the window ([`envelope_growth`]). A leak raises both; a fault's
    /// dip that recovers raises neither peak, and a burst's spike that passes neither floor.
    pub growth: f64,
    /// The least-squares slope of the raw samples times the window's length, for the record: a
    /// dip early in the window or a spike late in it reads as growth here.
    pub fitted: f64,
    /// The growth allowed.
    pub limit: f64,
}

/// What a soak did and saw.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// Operations by kind.
    pub operations: BTreeMap<&'static str, u64>,
    /// Operations the API server refused (with the first few errors).
    pub failed_operations: u64,
    /// The first errors of refused operations.
    pub operation_errors: Vec<String>,
    /// Faults, in order, with when they came.
    pub faults: Vec<(Duration, String)>,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Address changes the Service asked for (moved to the other pool) or its pool's edit did.
    pub asked_changes: u64,
    /// Address changes nobody asked for: `service: old -> new at`.
    pub unasked_changes: Vec<String>,
    /// An address held by two Services at once: `ip: a and b at`.
    pub duplicates: Vec<String>,
    /// How long after the churn stopped everything had converged, if it did.
    pub converged_after: Option<Duration>,
    /// What did not converge.
    pub not_converged: Option<String>,
    /// The trends judged (processes that lived through the whole window).
    pub trends: Vec<Trend>,
    /// The window the trends are judged over, from the soak's start.
    pub window: (Duration, Duration),
}

impl SoakReport {
    /// Everything that broke a promise; empty when the soak passed.
    pub fn violations(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        v.extend(
            self.unasked_changes
                .iter()
                .map(|c| format!("address changed unasked: {c}")),
        );
        v.extend(
            self.duplicates
                .iter()
                .map(|d| format!("duplicate address: {d}")),
        );
        if let Some(n) = &self.not_converged {
            v.push(format!("did not converge after the churn: {n}"));
        }
        for t in &self.trends {
            if t.growth > t.limit {
                v.push(format!(
                    "{} {} grew by {:.1} over the window (limit {:.1}, mean {:.1}, {} samples)",
                    t.process, t.resource, t.growth, t.limit, t.mean, t.samples
                ));
            }
        }
        if !self.trends.iter().any(|t| t.process == "controller") {
            v.push(
                "the controller's trend was not judged (no instance lived through the window)"
                    .into(),
            );
        }
        v
    }

    /// The report as text: operations, faults, the samples as a table, the trends.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let ops: Vec<String> = self
            .operations
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "operations: {} ({} refused by the API server)",
            ops.join(", "),
            self.failed_operations
        );
        for e in &self.operation_errors {
            let _ = writeln!(out, "  refused: {e}");
        }
        let _ = writeln!(out, "faults ({}):", self.faults.len());
        for (at, f) in &self.faults {
            let _ = writeln!(out, "  {:>7.1} s  {f}", at.as_secs_f64());
        }
        let _ = writeln!(
            out,
            "addresses: {} changes asked for, {} unasked, {} duplicates; converged {}",
            self.asked_changes,
            self.unasked_changes.len(),
            self.duplicates.len(),
            match self.converged_after {
                Some(d) => format!("{:.1} s after the churn", d.as_secs_f64()),
                None => "never".into(),
            }
        );
        let mut processes: Vec<&str> = self.samples.iter().map(|s| s.process.as_str()).collect();
        processes.sort();
        processes.dedup();
        let _ = write!(out, "{:>8}", "at s");
        for p in &processes {
            let _ = write!(out, "  {p:>30}");
        }
        let _ = writeln!(
            out,
            "\n{:>8}  (each: RSS MiB / fds / tasks, * a new pid)",
            ""
        );
        let mut times: Vec<Duration> = self.samples.iter().map(|s| s.at).collect();
        times.dedup();
        let mut last_pid: HashMap<&str, u32> = HashMap::new();
        for t in times {
            let _ = write!(out, "{:>8.0}", t.as_secs_f64());
            for p in &processes {
                match self.samples.iter().find(|s| s.at == t && s.process == *p) {
                    Some(s) => {
                        let new = last_pid.insert(p, s.pid).is_some_and(|old| old != s.pid);
                        let tasks = s.tasks.map_or("-".into(), |n| n.to_string());
                        let cell = format!(
                            "{}{:.1} / {} / {}",
                            if new { "*" } else { "" },
                            s.rss_kib as f64 / 1024.0,
                            s.fds,
                            tasks
                        );
                        let _ = write!(out, "  {cell:>30}");
                    }
                    None => {
                        let _ = write!(out, "  {:>30}", "(not running)");
                    }
                }
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "trends from {:.0} s to {:.0} s (growth: the smaller rise of the running peak and the \
             running floor, least squares; fitted: least squares over the raw samples):",
            self.window.0.as_secs_f64(),
            self.window.1.as_secs_f64()
        );
        for t in &self.trends {
            let _ = writeln!(
                out,
                "  {:<16} {:<8} mean {:>9.1}  growth {:>+8.1}  limit {:>7.1}  fitted {:>+8.1}  \
                 ({} samples)",
                t.process, t.resource, t.mean, t.growth, t.limit, t.fitted, t.samples
            );
        }
        out
    }
}

/// What the Service watch knows of one Service.
#[derive(Debug, Default)]
struct Tracked {
    name: String,
    ips: Vec<IpAddr>,
    /// The Service was moved to the other pool: its next address is asked for.
    asked: bool,
}

/// The Service watch's state, shared with the churn.
#[derive(Debug, Default)]
struct Tracker {
    by_uid: HashMap<String, Tracked>,
    holder: HashMap<IpAddr, String>,
    /// Ranges removed from a pool: an address leaving one of them was asked to.
    removed_ranges: Vec<(IpAddr, IpAddr)>,
    started: Option<Instant>,
    asked_changes: u64,
    unasked: Vec<String>,
    duplicates: Vec<String>,
    /// uids seen since the watch's last (re)list started.
    relisting: Option<BTreeSet<String>>,
}

impl Tracker {
    fn at(&self) -> String {
        self.started
            .map(|s| format!("{:.1} s", s.elapsed().as_secs_f64()))
            .unwrap_or_default()
    }

    fn in_removed_range(&self, ip: &IpAddr) -> bool {
        self.removed_ranges
            .iter()
            .any(|(lo, hi)| lo <= ip && ip <= hi)
    }

    fn apply(&mut self, svc: &Service) {
        let Some(uid) = svc.metadata.uid.clone() else {
            return;
        };
        if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
            return;
        }
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(uid.clone());
        }
        let mut ips = ferrolb_api::service::ingress_ips(svc);
        ips.sort();
        let at = self.at();
        let t = self.by_uid.entry(uid.clone()).or_default();
        t.name = svc.metadata.name.clone().unwrap_or_default();
        if ips == t.ips {
            return;
        }
        let old = std::mem::replace(&mut t.ips, ips.clone());
        let (name, asked) = (t.name.clone(), t.asked);
        if !old.is_empty() {
            if asked || old.iter().all(|ip| self.in_removed_range(ip)) {
                self.asked_changes += 1;
            } else {
                self.unasked
                    .push(format!("{name}: {old:?} -> {ips:?} at {at}"));
            }
        }
        let t = self.by_uid.get_mut(&uid).expect("inserted above");
        if !ips.is_empty() {
            t.asked = false;
        }
        for ip in &old {
            if self.holder.get(ip) == Some(&uid) {
                self.holder.remove(ip);
            }
        }
        for ip in ips {
            if let Some(other) = self.holder.insert(ip, uid.clone())
                && other != uid
            {
                let other_name = self
                    .by_uid
                    .get(&other)
                    .map(|o| o.name.clone())
                    .unwrap_or(other);
                self.duplicates
                    .push(format!("{ip}: {other_name} and {name} at {at}"));
            }
        }
    }

    fn delete(&mut self, uid: &str) {
        if let Some(t) = self.by_uid.remove(uid) {
            for ip in t.ips {
                if self.holder.get(&ip).map(String::as_str) == Some(uid) {
                    self.holder.remove(&ip);
                }
            }
        }
    }

    fn event(&mut self, event: watcher::Event<Service>) {
        match event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => self.apply(&s),
            watcher::Event::Delete(s) => {
                if let Some(uid) = s.metadata.uid.as_deref() {
                    self.delete(uid);
                }
            }
            watcher::Event::Init => self.relisting = Some(BTreeSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<String> = self
                        .by_uid
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.delete(&uid);
                    }
                }
            }
        }
    }
}

/// One churned Service as the churn remembers it.
#[derive(Debug, Clone)]
struct Churned {
    name: String,
    pool: &'static str,
    port: i32,
    local: bool,
}

fn service(c: &Churned) -> Service {
    serde_json::from_value(json!({
        "metadata": {
            "name": c.name,
            "namespace": NS,
            "labels": {SOAK_LABEL: "churn"},
            "annotations": {"ferrolb.io/address-pool": c.pool},
        },
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": if c.local { "Local" } else { "Cluster" },
            "ports": [{"name": "http", "port": c.port, "targetPort": 8080}],
        },
    }))
    .expect("a Service")
}

fn endpoints(name: &str) -> EndpointSlice {
    let eps: Vec<serde_json::Value> = NODE_NAMES
        .iter()
        .enumerate()
        .map(|(i, node)| {
            json!({
                "addresses": [format!("10.99.10.{}", i + 1)],
                "conditions": {"ready": true},
                "nodeName": node,
            })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{name}-soak"),
            "namespace": NS,
            "labels": {SOAK_LABEL: "churn", "kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .expect("an EndpointSlice")
}

/// Creates the churn's pools and their advertisements.
fn install_pools(lab: &Lab) -> Result<()> {
    use ferrolb_api::v1beta1::{BGPAdvertisement, IPAddressPool, L2Advertisement};
    fn object<K: serde::de::DeserializeOwned>(name: &str, spec: serde_json::Value) -> K {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": INSTALL_NS},
            "spec": spec,
        }))
        .expect("a FerroLB object")
    }
    let client = lab.client();
    let pools: Api<IPAddressPool> = Api::namespaced(client.clone(), INSTALL_NS);
    let l2: Api<L2Advertisement> = Api::namespaced(client.clone(), INSTALL_NS);
    let bgp: Api<BGPAdvertisement> = Api::namespaced(client, INSTALL_NS);
    let pp = PostParams::default();
    lab.block(async move {
        pools
            .create(&pp, &object(L2_POOL, json!({"addresses": [L2_RANGE]})))
            .await?;
        pools
            .create(&pp, &object(BGP_POOL, json!({"addresses": [BGP_RANGE]})))
            .await?;
        l2.create(&pp, &object(L2_POOL, json!({"ipAddressPools": [L2_POOL]})))
            .await?;
        bgp.create(
            &pp,
            &object(BGP_POOL, json!({"ipAddressPools": [BGP_POOL]})),
        )
        .await?;
        Ok::<_, LabError>(())
    })
}

fn pool_api(lab: &Lab) -> Api<ferrolb_api::v1beta1::IPAddressPool> {
    Api::namespaced(lab.client(), INSTALL_NS)
}

/// The churn: the Services it made and its random choices.
struct Churn {
    rng: StdRng,
    live: Vec<Churned>,
    next: u64,
    extra_range: bool,
    pool_edits: u64,
}

impl Churn {
    /// One operation. Returns its kind, or the API server's error.
    fn step(
        &mut self,
        lab: &Lab,
        plan: &SoakPlan,
        tracker: &Arc<Mutex<Tracker>>,
        op_count: u64,
    ) -> (&'static str, std::result::Result<(), String>) {
        let client = lab.client();
        let services: Api<Service> = Api::namespaced(client.clone(), NS);
        let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
        if op_count % 25 == 24 {
            return ("pool edit", self.edit_pool(lab, tracker));
        }
        let n = self.live.len();
        let roll: u32 = self.rng.random_range(0..100);
        let kind = if n < plan.population / 2 || (n < plan.population && roll < 35) {
            "create"
        } else if roll < 55 {
            "delete"
        } else if roll < 70 {
            "port change"
        } else if roll < 80 {
            "label change"
        } else if roll < 92 {
            "traffic policy change"
        } else {
            "pool move"
        };
        match kind {
            "create" => {
                let c = Churned {
                    name: format!("soak-{}", self.next),
                    pool: if self.rng.random_bool(0.5) {
                        L2_POOL
                    } else {
                        BGP_POOL
                    },
                    port: 80,
                    local: self.rng.random_bool(0.3),
                };
                self.next += 1;
                let (svc, eps) = (service(&c), endpoints(&c.name));
                self.live.push(c);
                let r = lab.block(async move {
                    slices.create(&PostParams::default(), &eps).await?;
                    services.create(&PostParams::default(), &svc).await?;
                    Ok::<_, kube::Error>(())
                });
                (kind, r.map_err(|e| e.to_string()))
            }
            _ => {
                let i = self.rng.random_range(0..n);
                let c = &mut self.live[i];
                let name = c.name.clone();
                let patch = match kind {
                    "delete" => {
                        self.live.swap_remove(i);
                        let r = lab.block(async move {
                            services.delete(&name, &DeleteParams::default()).await?;
                            slices
                                .delete(&format!("{name}-soak"), &DeleteParams::default())
                                .await?;
                            Ok::<_, kube::Error>(())
                        });
                        return (kind, r.map_err(|e| e.to_string()));
                    }
                    "port change" => {
                        c.port = if c.port >= 90 { 80 } else { c.port + 1 };
                        json!({"spec": {"ports": [{"name": "http", "port": c.port, "targetPort": 8080}]}})
                    }
                    "label change" => {
                        json!({"metadata": {"labels": {"soak-generation": op_count.to_string()}}})
                    }
                    "traffic policy change" => {
                        c.local = !c.local;
                        let policy = if c.local { "Local" } else { "Cluster" };
                        json!({"spec": {"externalTrafficPolicy": policy}})
                    }
                    _ => {
                        c.pool = if c.pool == L2_POOL { BGP_POOL } else { L2_POOL };
                        // The next address this Service gets is asked for: marked before the
                        // patch, so that the watch cannot see the new status first.
                        let mut t = tracker.lock().unwrap();
                        if let Some(tracked) = t.by_uid.values_mut().find(|t| t.name == name) {
                            tracked.asked = true;
                        }
                        json!({"metadata": {"annotations": {"ferrolb.io/address-pool": c.pool}}})
                    }
                };
                let r = lab.block(async move {
                    services
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| ())
                });
                (kind, r.map_err(|e| e.to_string()))
            }
        }
    }

    /// A label on the layer-2 pool, and its extra range added, or removed (an address in it is
    /// then asked to move).
    fn edit_pool(
        &mut self,
        lab: &Lab,
        tracker: &Arc<Mutex<Tracker>>,
    ) -> std::result::Result<(), String> {
        self.extra_range = !self.extra_range;
        self.pool_edits += 1;
        let ranges: Vec<&str> = if self.extra_range {
            vec![L2_RANGE, L2_EXTRA]
        } else {
            let (lo, hi) = L2_EXTRA.split_once('-').expect("a range");
            let range = (
                lo.parse().expect("an address"),
                hi.parse().expect("an address"),
            );
            // The same range every time: recorded once.
            let mut t = tracker.lock().unwrap();
            if !t.removed_ranges.contains(&range) {
                t.removed_ranges.push(range);
            }
            vec![L2_RANGE]
        };
        let patch = json!({
            "metadata": {"labels": {"soak-edit": self.pool_edits.to_string()}},
            "spec": {"addresses": ranges},
        });
        let api = pool_api(lab);
        lab.block(async move {
            api.patch(L2_POOL, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        })
        .map_err(|e| e.to_string())
    }
}

/// The processes to sample: `(name, pid, metrics)`.
fn processes(lab: &Lab) -> Vec<(String, Option<u32>, Option<String>)> {
    let mut out = vec![(
        "controller".to_owned(),
        lab.controller_pid(),
        lab.controller_metrics(),
    )];
    for (i, node) in NODE_NAMES.iter().enumerate() {
        out.push((
            format!("speaker-{node}"),
            lab.speaker_pid(i),
            lab.speaker_metrics(i),
        ));
    }
    out
}

fn proc_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn proc_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// `ferrolb_runtime_tasks` from a `/metrics` text.
pub fn runtime_tasks(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("ferrolb_runtime_tasks "))?
        .trim()
        .parse()
        .ok()
}

fn sample(lab: &Lab, at: Duration, into: &mut Vec<Sample>) {
    for (process, pid, metrics) in processes(lab) {
        let Some(pid) = pid else { continue };
        let (Some(rss_kib), Some(fds)) = (proc_rss_kib(pid), proc_fds(pid)) else {
            continue;
        };
        into.push(Sample {
            at,
            process,
            pid,
            rss_kib,
            fds,
            tasks: metrics.as_deref().and_then(runtime_tasks),
        });
    }
}

/// Least-squares slope of `points` (x seconds, y) times the x span: the growth the trend says.
pub fn trend_growth(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return 0.0;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let span = points.last().map_or(0.0, |p| p.0) - points.first().map_or(0.0, |p| p.0);
    sxy / sxx * span
}

/// The growth a leak would show, unmoved by a dip or a spike that passes: the smaller of
/// [`trend_growth`] over the running peak (each sample's maximum with every earlier one) and
/// over the running floor (its minimum with every later one). A leak raises both envelopes
/// by what it leaked; a dip (a session down while its node was cut off, back a while later)
/// leaves the peak where it was, and a spike (a burst of requests holding extra connections
/// until they idle out) leaves the floor. `before` is the last sample before the window, which
/// the peak starts from, so that a dip under way when the window opens is seen as one.
pub fn envelope_growth(points: &[(f64, f64)], before: Option<f64>) -> f64 {
    let mut peak = before.unwrap_or(f64::NEG_INFINITY);
    let peaks: Vec<(f64, f64)> = points
        .iter()
        .map(|&(x, y)| {
            peak = peak.max(y);
            (x, peak)
        })
        .collect();
    let mut floor = f64::INFINITY;
    let mut floors: Vec<(f64, f64)> = points
        .iter()
        .rev()
        .map(|&(x, y)| {
            floor = floor.min(y);
            (x, floor)
        })
        .collect();
    floors.reverse();
    trend_growth(&peaks).min(trend_growth(&floors))
}

/// The trends of every process whose last instance lived through the whole `window`.
fn trends(samples: &[Sample], window: (Duration, Duration), limits: Growth) -> Vec<Trend> {
    let mut out = Vec::new();
    let mut names: Vec<&str> = samples.iter().map(|s| s.process.as_str()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let Some(last) = samples.iter().rev().find(|s| s.process == name) else {
            continue;
        };
        let mine: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.process == name && s.pid == last.pid)
            .collect();
        if mine.first().is_none_or(|s| s.at > window.0) {
            continue; // started (again) inside the window: not judged
        }
        let before = mine.iter().rev().find(|s| s.at < window.0).copied();
        let inside: Vec<&Sample> = mine.into_iter().filter(|s| s.at >= window.0).collect();
        // Each resource: its name, how a sample reads it, and its limit for a window's mean.
        type Read = fn(&Sample) -> Option<f64>;
        type Limit = fn(&Growth, f64) -> f64;
        let resources: [(&'static str, Read, Limit); 3] = [
            (
                "rss KiB",
                |s| Some(s.rss_kib as f64),
                |g, mean| g.rss_kib + g.rss_fraction * mean,
            ),
            ("fds", |s| Some(s.fds as f64), |g, _| g.fds),
            ("tasks", |s| s.tasks.map(|t| t as f64), |g, _| g.tasks),
        ];
        for (resource, read, limit) in resources {
            let points: Vec<(f64, f64)> = inside
                .iter()
                .filter_map(|s| Some((s.at.as_secs_f64(), read(s)?)))
                .collect();
            if points.len() < 3 {
                continue;
            }
            let prior = before.and_then(read);
            let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
            let limit = limit(&limits, mean);
            out.push(Trend {
                process: name.to_owned(),
                resource,
                samples: points.len(),
                mean,
                growth: envelope_growth(&points, prior),
                fitted: trend_growth(&points),
                limit,
            });
        }
    }
    out
}

/// A fault due at a moment of the run.
#[derive(Debug, Clone)]
enum Fault {
    Kill(Target),
    Start(Target),
    Cut(usize),
    Plug(usize),
}

#[derive(Debug, Clone, Copy)]
enum Target {
    Controller,
    Speaker(usize),
}

/// The run's faults, sorted by when they are due.
fn schedule(plan: &SoakPlan) -> Vec<(Duration, Fault)> {
    let mut out = Vec::new();
    let restart = Duration::from_secs(2);
    let mut k = 1u32;
    while plan.kill_every * k + restart < plan.duration {
        let target = match k {
            2 => Target::Controller,
            k if !k.is_multiple_of(2) => Target::Speaker(1),
            _ => Target::Speaker(2),
        };
        out.push((plan.kill_every * k, Fault::Kill(target)));
        out.push((plan.kill_every * k + restart, Fault::Start(target)));
        k += 1;
    }
    let mut j = 0u32;
    while plan.cut_every * j + plan.kill_every / 2 + plan.cut_for < plan.duration {
        let at = plan.cut_every * j + plan.kill_every / 2;
        let node = if j.is_multiple_of(2) { 0 } else { 2 };
        out.push((at, Fault::Cut(node)));
        out.push((at + plan.cut_for, Fault::Plug(node)));
        j += 1;
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

fn apply_fault(lab: &mut Lab, fault: &Fault) -> Result<String> {
    Ok(match *fault {
        Fault::Kill(Target::Controller) => {
            lab.kill_controller();
            "controller killed (SIGKILL)".into()
        }
        Fault::Start(Target::Controller) => {
            lab.start_controller()?;
            "controller started again".into()
        }
        Fault::Kill(Target::Speaker(i)) => {
            lab.kill_speaker(i);
            format!("speaker of {} killed (SIGKILL)", NODE_NAMES[i])
        }
        Fault::Start(Target::Speaker(i)) => {
            lab.start_speaker(i)?;
            format!("speaker of {} started again", NODE_NAMES[i])
        }
        Fault::Cut(i) => {
            lab.topo.set_node_link(i, false)?;
            format!("{} cut off the segment", NODE_NAMES[i])
        }
        Fault::Plug(i) => {
            lab.topo.set_node_link(i, true)?;
            format!("{} plugged back in (same speaker)", NODE_NAMES[i])
        }
    })
}

/// Runs the soak on `lab` (started, with its controller and speakers) and reports.
pub fn run(lab: &mut Lab, plan: &SoakPlan, limits: Growth) -> Result<SoakReport> {
    install_pools(lab)?;
    let tracker: Arc<Mutex<Tracker>> = Default::default();
    let started = Instant::now();
    tracker.lock().unwrap().started = Some(started);
    let watch = {
        let tracker = tracker.clone();
        let api: Api<Service> = Api::namespaced(lab.client(), NS);
        lab.spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                if let Ok(event) = event {
                    tracker.lock().unwrap().event(event);
                }
            }
        })
    };
    let mut report = SoakReport::default();
    let mut churn = Churn {
        rng: StdRng::seed_from_u64(plan.seed),
        live: Vec::new(),
        next: 0,
        extra_range: false,
        pool_edits: 0,
    };
    let faults = schedule(plan);
    let mut next_fault = 0;
    let mut next_op = Duration::ZERO;
    let mut next_sample = Duration::ZERO;
    let mut ops = 0u64;
    loop {
        let now = started.elapsed();
        if now >= plan.duration {
            break;
        }
        while next_fault < faults.len() && faults[next_fault].0 <= now {
            let what = apply_fault(lab, &faults[next_fault].1)?;
            report.faults.push((started.elapsed(), what));
            next_fault += 1;
        }
        if now >= next_sample {
            sample(lab, now, &mut report.samples);
            next_sample += plan.sample_every;
        }
        if now >= next_op {
            let (kind, result) = churn.step(lab, plan, &tracker, ops);
            ops += 1;
            *report.operations.entry(kind).or_default() += 1;
            if let Err(e) = result {
                report.failed_operations += 1;
                if report.operation_errors.len() < 5 {
                    report.operation_errors.push(format!("{kind}: {e}"));
                }
            }
            next_op += plan.churn_every;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every fault is undone: the killed process runs again, the cut node is plugged back in.
    for (_, fault) in &faults[next_fault..] {
        if matches!(fault, Fault::Start(_) | Fault::Plug(_)) {
            let what = apply_fault(lab, fault)?;
            report.faults.push((started.elapsed(), what));
        }
    }
    sample(lab, started.elapsed(), &mut report.samples);
    let churn_ended = Instant::now();
    match converged(lab, &churn.live, Duration::from_secs(60)) {
        Ok(()) => report.converged_after = Some(churn_ended.elapsed()),
        Err(e) => report.not_converged = Some(e.to_string()),
    }
    watch.abort();
    let t = tracker.lock().unwrap();
    report.asked_changes = t.asked_changes;
    report.unasked_changes = t.unasked.clone();
    report.duplicates = t.duplicates.clone();
    drop(t);
    report.window = (plan.duration / 3, plan.duration);
    report.trends = trends(&report.samples, report.window, limits);
    Ok(report)
}

/// Waits until every churned Service has an address, each layer-2 one a single owner and each
/// BGP one a route to the nodes that may announce it.
fn converged(lab: &Lab, live: &[Churned], limit: Duration) -> Result<()> {
    let names: BTreeMap<&str, &Churned> = live.iter().map(|c| (c.name.as_str(), c)).collect();
    let services = lab.wait(limit, "an address on every churned Service", || {
        let s = lab.services().ok()?;
        let ours: Vec<_> = s
            .into_iter()
            .filter(|v| names.contains_key(v.name.as_str()))
            .collect();
        (ours.len() == names.len() && ours.iter().all(|v| !v.ingress.is_empty())).then_some(ours)
    })?;
    let l2: Vec<IpAddr> = services
        .iter()
        .filter(|v| v.pool == L2_POOL)
        .flat_map(|v| v.ingress.iter().map(|(ip, _)| *ip))
        .collect();
    if lab.wait_for_l2_owners(&l2, limit).is_err() {
        let owners = lab.l2_owners()?;
        let wrong: Vec<String> = l2
            .iter()
            .filter(|ip| owners.get(ip).is_none_or(|o| o.len() != 1))
            .map(|ip| {
                let svc = services
                    .iter()
                    .find(|v| v.ingress.iter().any(|(a, _)| a == ip));
                format!(
                    "{ip} of {:?}: owners {:?}",
                    svc,
                    owners.get(ip).cloned().unwrap_or_default()
                )
            })
            .collect();
        return Err(LabError::Timeout {
            what: format!(
                "one layer-2 owner per address (not so: {})",
                wrong.join(", ")
            ),
            after: limit,
        });
    }
    for v in services.iter().filter(|v| v.pool == BGP_POOL) {
        for (ip, _) in &v.ingress {
            lab.wait_for_route(*ip, &[0, 1, 2], limit)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_series_has_no_growth_and_a_rising_one_grows_by_its_rise() {
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 5.0)).collect();
        assert_eq!(trend_growth(&flat), 0.0);
        let rising: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 6.0, i as f64 * 2.0)).collect();
        assert!((trend_growth(&rising) - 18.0).abs() < 1e-9);
    }

    #[test]
    fn a_dip_that_recovers_or_a_spike_that_passes_is_not_growth_but_a_staircase_is() {
        let series = |ys: &[f64]| -> Vec<(f64, f64)> {
            ys.iter()
                .enumerate()
                .map(|(i, y)| (i as f64 * 3.0, *y))
                .collect()
        };
        // A session down for the first half of the window: least squares calls it growth.
        let dip = series(&[37., 37., 37., 37., 37., 37., 40., 40., 40., 40., 40., 40.]);
        assert!(trend_growth(&dip) > 2.0, "{}", trend_growth(&dip));
        assert_eq!(envelope_growth(&dip, Some(40.)), 0.0);
        let spike = series(&[40., 40., 40., 40., 40., 40., 40., 44., 44., 44., 40., 40.]);
        assert_eq!(envelope_growth(&spike, Some(40.)), 0.0);
        // One descriptor more after every fault, with the faults' own dips between.
        let leak = series(&[40., 40., 39., 41., 41., 40., 42., 42., 41., 43., 43., 44.]);
        let judged = envelope_growth(&leak, Some(40.));
        assert!(judged > 3.0, "{judged}");
        let rising: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 6.0, i as f64 * 2.0)).collect();
        assert!((envelope_growth(&rising, None) - 18.0).abs() < 1e-9);
    }

    #[test]
    fn the_hour_kills_every_five_minutes_and_cuts_a_node_every_ten() {
        let faults = schedule(&SoakPlan::over(Duration::from_secs(3600)));
        let kills: Vec<_> = faults
            .iter()
            .filter(|(_, f)| matches!(f, Fault::Kill(_)))
            .collect();
        let cuts: Vec<_> = faults
            .iter()
            .filter(|(_, f)| matches!(f, Fault::Cut(_)))
            .collect();
        assert_eq!(kills.len(), 11);
        assert_eq!(kills[0].0, Duration::from_secs(300));
        assert_eq!(cuts.len(), 6);
        assert_eq!(cuts[1].0 - cuts[0].0, Duration::from_secs(600));
        // The controller is killed once, early, so that one instance lives through the last
        // 40 minutes; node-a's speaker never.
        let controller = kills
            .iter()
            .filter(|(_, f)| matches!(f, Fault::Kill(Target::Controller)))
            .count();
        assert_eq!(controller, 1);
        assert!(
            !kills
                .iter()
                .any(|(_, f)| matches!(f, Fault::Kill(Target::Speaker(0))))
        );
    }

    #[test]
    fn an_address_that_moves_unasked_is_reported_and_one_asked_for_is_not() {
        let svc = |uid: &str, name: &str, ip: &str| -> Service {
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": uid},
                "spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
            }))
            .unwrap()
        };
        let mut t = Tracker::default();
        t.apply(&svc("1", "a", "10.0.0.1"));
        t.apply(&svc("1", "a", "10.0.0.2"));
        assert_eq!(t.unasked.len(), 1, "{:?}", t.unasked);
        t.by_uid.get_mut("1").unwrap().asked = true;
        t.apply(&svc("1", "a", "10.0.0.3"));
        assert_eq!((t.unasked.len(), t.asked_changes), (1, 1));
        t.apply(&svc("2", "b", "10.0.0.3"));
        assert_eq!(t.duplicates.len(), 1, "{:?}", t.duplicates);
        t.delete("1");
        t.apply(&svc("3", "c", "10.0.0.1"));
        assert_eq!(t.duplicates.len(), 1);
    }
}
