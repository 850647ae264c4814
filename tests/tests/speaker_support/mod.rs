//! Shared by `speaker_l2`: the lab's network ([`Topology`]: three nodes and a client on one
//! bridge), the test API server listening in the switch namespace as the lab runs it, the lab's
//! Nodes, speaker Pods, gossip Secret and pools (`examples/lab`), and one real `ferrolb-speaker` per
//! node. No controller: tests write Service status themselves, through kube clients.
//!
//! Skips (prints why, returns `None`) when not root, when a tool is missing or when the speaker
//! is not built; with `FERROLB_REQUIRE_BINARIES=1` each of those is a failure instead.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{ServiceL2Status, ServiceL2StatusStatus};
use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig, ApiServerHandle};
use ferrolb_tests::lab::{API_PORT, INSTALL_NS, manifests};
use ferrolb_tests::netns::topology::{API_V4, NODE_NAMES, node_v4};
use ferrolb_tests::netns::{self, Process, Topology};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

/// The lab manifests every scenario starts from: namespaces, Ready Nodes with their addresses,
/// Ready speaker Pods (seeds of the gossip), the gossip key, and the pools (`lab-l2` holds
/// 10.99.0.100-109 and fd00:99::100-109 on the segment). Advertisements are each test's own.
const BASE_MANIFESTS: [&str; 5] = [
    "00-namespaces.yaml",
    "10-nodes.yaml",
    "20-speakers.yaml",
    "25-gossip-secret.yaml",
    "30-pools.yaml",
];

/// The pool of the segment's Service addresses, from `examples/lab/30-pools.yaml`.
pub const POOL: &str = "lab-l2";

/// How long ownership gets to settle after a change.
pub const CONVERGE: Duration = Duration::from_secs(15);

use ferrolb_tests::skip::skip;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

/// `ferrolb-speaker` as cargo built it next to this test (`target/<profile>/`).
fn speaker_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps")
        .join("ferrolb-speaker")
}

/// The namespaces, the API server and the speakers of one test. Dropping it stops the speakers
/// and the server and removes every namespace.
pub struct Cluster {
    speakers: Vec<Option<Process>>,
    api: Option<ApiServerHandle>,
    rt: Runtime,
    /// The network.
    pub topo: Topology,
    dir: PathBuf,
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Cluster {
    /// Builds the network, starts the API server with the CRDs and the base manifests, and one
    /// speaker per node (layer 2 only). `None` when the test must be skipped.
    pub fn start(base: &str) -> Option<Self> {
        if let Err(e) = netns::require_root().and_then(|()| {
            netns::require_tools(&[
                ("ip", "iproute2"),
                ("arping", "iputils-arping"),
                ("ndisc6", "ndisc6"),
            ])
        }) {
            return skip(e);
        }
        let binary = speaker_binary();
        if !binary.is_file() {
            return skip(format!(
                "{} is not built (cargo build -p ferrolb-speaker, or cargo test --workspace)",
                binary.display()
            ));
        }
        let prefix = netns::unique_prefix(base);
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let topo = Topology::create(&prefix).expect("the namespaces are built");
        let rt = netns::runtime_in(topo.switch.name()).expect("a runtime in the switch namespace");
        let crds = workspace().join("charts/ferrolb/crds");
        let api = rt
            .block_on(rt.spawn(async move {
                ApiServer::start(ApiServerConfig {
                    listen: SocketAddr::new(API_V4.into(), API_PORT),
                    ..ApiServerConfig::default().with_crd_dir(crds)
                })
                .await
            }))
            .expect("the API server task")
            .expect("the API server starts on the bridge");
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let mut cluster = Self {
            speakers: NODE_NAMES.iter().map(|_| None).collect(),
            api: Some(api),
            rt,
            topo,
            dir,
            binary,
            kubeconfig,
        };
        let files: Vec<PathBuf> = BASE_MANIFESTS
            .iter()
            .map(|f| workspace().join("examples/lab").join(f))
            .collect();
        let client = cluster.client();
        cluster
            .block(async move { manifests::apply(&client, &files).await })
            .expect("the lab's nodes, speaker Pods and gossip Secret load");
        for i in 0..NODE_NAMES.len() {
            cluster.start_speaker(i);
        }
        Some(cluster)
    }

    /// Starts node `i`'s speaker, as the lab does, with BGP off.
    pub fn start_speaker(&mut self, i: usize) {
        let log = self.dir.join(format!("speaker-{}.log", NODE_NAMES[i]));
        let args = [
            self.binary.display().to_string(),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--node-name={}", NODE_NAMES[i]),
            format!("--namespace={INSTALL_NS}"),
            format!("--metrics-addr={}:7473", node_v4(i)),
            "--enable-l2=true".into(),
            "--enable-bgp=false".into(),
        ];
        let p = self
            .topo
            .node(i)
            .spawn(&args, &log)
            .expect("the speaker starts");
        self.speakers[i] = Some(p);
    }

    /// Kills node `i`'s speaker (SIGKILL: no handover, as a crash).
    pub fn kill_speaker(&mut self, i: usize) {
        if let Some(mut p) = self.speakers[i].take() {
            p.kill();
        }
    }

    /// The API server's fault-injection handle.
    pub fn faults(&self) -> ferrolb_tests::apiserver::Faults {
        self.api.as_ref().expect("API server running").faults()
    }

    /// Runs a future inside the switch namespace (where the API server listens) and waits.
    pub fn block<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        match self.rt.block_on(self.rt.spawn(fut)) {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("task cancelled: {e}"),
        }
    }

    /// A client of the API server, to be used inside [`Cluster::block`].
    pub fn client(&self) -> kube::Client {
        let _guard = self.rt.enter();
        self.api.as_ref().expect("API server running").client()
    }

    /// The last lines of every speaker's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, p) in self.speakers.iter().enumerate() {
            let text = p.as_ref().map(Process::output).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- speaker {}\n", NODE_NAMES[i]));
            out.push_str(&lines[lines.len().saturating_sub(15)..].join("\n"));
            out.push('\n');
        }
        out
    }

    /// Polls `f` every 100 ms until it returns `Some`, or panics with `what` and the logs.
    pub fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > CONVERGE {
                panic!(
                    "timed out after {CONVERGE:?} waiting for {what}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node `i`'s speaker's `/metrics` text.
    pub fn metrics(&self, i: usize) -> Option<String> {
        ferrolb_tests::lab::speaker_metrics(&self.topo, i)
    }

    /// How many live speakers node `i`'s speaker sees through gossip (its `/metrics`).
    pub fn gossip_members(&self, i: usize) -> Option<i64> {
        self.metrics(i)?
            .lines()
            .find_map(|l| l.strip_prefix("ferrolb_gossip_members "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The nodes whose speaker exports `ferrolb_service_address_announced` for `ip` over
    /// `protocol`.
    pub fn announced_by(&self, ip: IpAddr, protocol: &str) -> Vec<usize> {
        let needle = format!("ip=\"{ip}\",protocol=\"{protocol}\"");
        (0..NODE_NAMES.len())
            .filter(|i| {
                self.metrics(*i).is_some_and(|m| {
                    m.lines().any(|l| {
                        l.starts_with("ferrolb_service_address_announced{")
                            && l.contains(&needle)
                            && l.ends_with(" 1")
                    })
                })
            })
            .collect()
    }

    /// Waits until every speaker sees all three through gossip, so ownership is computed from
    /// the same live set everywhere.
    pub fn wait_for_gossip(&self) {
        self.wait("every speaker to see three live members", || {
            (0..NODE_NAMES.len())
                .all(|i| self.gossip_members(i) == Some(NODE_NAMES.len() as i64))
                .then_some(())
        });
    }

    /// The `ServiceL2Status` payloads that name `ip`.
    pub fn l2_statuses(&self, ip: IpAddr) -> Vec<ServiceL2StatusStatus> {
        let client = self.client();
        let statuses = self.block(async move {
            Api::<ServiceL2Status>::namespaced(client, INSTALL_NS)
                .list(&ListParams::default())
                .await
                .expect("ServiceL2Status list")
        });
        statuses
            .items
            .into_iter()
            .filter_map(|s| s.status)
            .filter(|s| s.addresses.iter().any(|a| a.parse() == Ok(ip)))
            .collect()
    }

    /// The nodes that say, in a `ServiceL2Status`, that they answer for `ip`.
    pub fn owners(&self, ip: IpAddr) -> Vec<String> {
        let mut nodes: Vec<String> = self.l2_statuses(ip).into_iter().map(|s| s.node).collect();
        nodes.sort();
        nodes
    }

    /// Waits until exactly one node owns `ip` and `accept` agrees with it; returns the owner's
    /// index.
    pub fn wait_for_owner(&self, ip: IpAddr, accept: impl Fn(&str) -> bool) -> usize {
        let owner = self.wait(&format!("one accepted owner of {ip}"), || {
            match self.owners(ip).as_slice() {
                [one] if accept(one) => Some(one.clone()),
                _ => None,
            }
        });
        Topology::node_index(&owner).expect("a lab node")
    }

    /// Waits until the client's ARP request (IPv4) or neighbor solicitation (IPv6) for `ip` is
    /// answered by exactly `macs` (empty: by nobody), and returns what answered last.
    pub fn wait_for_answers(&self, ip: IpAddr, macs: &[String]) -> Vec<String> {
        let start = Instant::now();
        loop {
            let seen = self.topo.who_answers(ip).expect("arping / ndisc6 run");
            if seen == macs || start.elapsed() > CONVERGE {
                return seen;
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.speakers.iter_mut().flatten() {
            p.kill();
        }
        self.api.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ferrolb(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ferrolb.io", "v1beta1", kind),
        plural,
    )
}

/// Creates or replaces the spec of a `ferrolb.io` object in the install namespace.
pub async fn put_ferrolb(client: kube::Client, kind: &str, plural: &str, name: &str, spec: Value) {
    let ar = ferrolb(kind, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client, INSTALL_NS, &ar);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": kind,
        "metadata": {"name": name, "namespace": INSTALL_NS}, "spec": spec,
    }))
    .expect("a ferrolb.io object");
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .expect("the object is patched");
        }
        Err(e) => panic!("creating {kind} {name}: {e}"),
    }
}

/// Creates a LoadBalancer Service in `default` and writes its status (the controller's job) with
/// `ips` as ingress addresses.
pub async fn service(client: kube::Client, name: &str, ips: &[IpAddr], local: bool) {
    let services: Api<Service> = Api::namespaced(client, "default");
    let policy = if local { "Local" } else { "Cluster" };
    let mut spec = json!({
        "type": "LoadBalancer", "externalTrafficPolicy": policy,
        "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": name},
    });
    if ips.iter().any(IpAddr::is_ipv6) {
        spec["ipFamilyPolicy"] = json!("PreferDualStack");
    }
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"}, "spec": spec,
    }))
    .expect("a Service");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("the Service is created");
    let ingress: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"ip": ip.to_string(), "ipMode": "VIP"}))
        .collect();
    services
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
        )
        .await
        .expect("the Service status is written");
}

/// Makes `service`'s EndpointSlices hold one endpoint per `(node, ready)`, in each family (an
/// `IPv4` slice and an `IPv6` one, as the EndpointSlice controller writes them for a
/// dual-stack Service): the speaker counts endpoints per family, as kube-proxy does.
pub async fn endpoints(client: kube::Client, service: &str, at: &[(&str, bool)]) {
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    for (suffix, address_type) in [("1", "IPv4"), ("v6", "IPv6")] {
        let eps: Vec<Value> = at
            .iter()
            .enumerate()
            .map(|(i, (node, ready))| {
                let address = if address_type == "IPv4" {
                    format!("10.99.10.{}", 10 + i)
                } else {
                    format!("fd00:99:10::{:x}", 10 + i)
                };
                json!({
                    "addresses": [address],
                    "conditions": {"ready": ready, "serving": ready, "terminating": false},
                    "nodeName": node,
                })
            })
            .collect();
        let name = format!("{service}-{suffix}");
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": address_type, "endpoints": eps,
            "ports": [{"port": 80, "protocol": "TCP"}],
        }))
        .expect("an EndpointSlice");
        match slices.create(&PostParams::default(), &slice).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                slices
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "endpoints": eps })),
                    )
                    .await
                    .expect("the EndpointSlice is patched");
            }
            Err(e) => panic!("creating the EndpointSlice {name} of {service}: {e}"),
        }
    }
}

/// Sets (or, with `None`, removes) a label on a Node.
pub async fn node_label(client: kube::Client, node: &str, key: &str, value: Option<&str>) {
    Api::<Node>::all(client)
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .expect("the Node is labelled");
}

/// Writes a Node's conditions: Ready, and `NetworkUnavailable` as given.
pub async fn network_unavailable(client: kube::Client, node: &str, unavailable: bool) {
    let (status, reason) = if unavailable {
        ("True", "NoRouteCreated")
    } else {
        ("False", "RouteCreated")
    };
    let conditions = json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "NetworkUnavailable", "status": status, "reason": reason},
    ]);
    Api::<Node>::all(client)
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .expect("the Node's conditions are written");
}

/// The `reason` of every events.k8s.io Event about Service `name` in `default`, with the
/// reporting instance (the node).
pub async fn service_events(client: kube::Client, name: &str) -> BTreeMap<String, Vec<String>> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let list = events
        .list(&ListParams::default())
        .await
        .expect("Event list");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in list.items {
        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
            continue;
        }
        out.entry(e.reason.unwrap_or_default())
            .or_default()
            .push(e.reporting_instance.unwrap_or_default());
    }
    out
}
