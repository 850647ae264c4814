//! The lab: FerroLB's whole job on one machine. Network namespaces ([`crate::netns::Topology`]),
//! the test API server loaded with the CRDs and `examples/lab/*.yaml`, the real
//! `ferrolb-controller`, one real `ferrolb-speaker` per node, a BGP router, a kube-proxy stand-in,
//! and the checks a user makes (who answers, what the router learned, failover). Shared by the
//! `ferrolb-lab` binary and the `e2e_*` tests so both run the same code.
//!
//! ```text
//!   this process (threads of the runtime live in the switch namespace)
//!     ├─ ApiServer on 10.99.0.254:6443 ◄── kubeconfig ── controller (switch ns), speakers (node ns)
//!     ├─ kube-proxy stand-in task: Service status ──► `lb0` addresses on the nodes
//!     └─ checks: `ask` threads enter the client namespaces and open TCP connections
//!   node ns: ferrolb-speaker, `ferrolb-lab serve` (answers with the node name)
//!   router ns: bird or zebra+bgpd
//! ```
//!
//! The API server runs in-process, listening inside the switch namespace on the bridge address
//! 10.99.0.254: every node reaches it over the segment, nothing is added to the root namespace,
//! and parallel labs (tests) do not collide.

pub mod kubeproxy;
pub mod manifests;
pub mod nodes;
pub mod prometheus;
pub mod report;
pub mod router;
pub mod soak;
pub mod standin;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{BGPSessionStateStatus, ServiceBGPStatus, ServiceL2Status};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use tokio::runtime::Runtime;

use crate::backend::{Backend, BackendKind};
use crate::netns::topology::{API_V4, NODE_NAMES, node_v4, node_v6};
use crate::netns::{self, NetnsError, Process, Topology};
use crate::realkube::RealKubeConfig;
pub use kubeproxy::KubeProxy;
pub use router::{Router, RouterKind};
pub use standin::{Answer, NoAnswer, Requests, SERVICE_PORT, Watched};

/// The install namespace used by the lab's manifests.
pub const INSTALL_NS: &str = "ferrolb-system";
/// The API server's port on 10.99.0.254.
pub const API_PORT: u16 = 6443;

/// Errors of the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A namespace, command or prerequisite problem.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The API server did not start.
    #[error("the API server did not start: {0}")]
    ApiServer(String),
    /// A manifest could not be loaded.
    #[error("{path}: {message}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The real nodes (containerd, kubelet, the chart's install) could not start.
    #[error("real nodes: {0}")]
    Nodes(String),
    /// The real kube-proxy could not run, or did not become healthy.
    #[error("kube-proxy: {0}")]
    KubeProxy(String),
    /// A request to the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// Something did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
    },
    /// A file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result of the lab.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// Which implementation the lab runs: FerroLB, or MetalLB (v0.16's own controller and speaker,
/// built by `scripts/metallb`) for the side-by-side bench. With MetalLB the lab installs
/// MetalLB's CRDs and the lab's configuration in MetalLB's kinds (see
/// [`manifests::for_metallb`]), and always runs the real kube-apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum System {
    /// `ferrolb-controller` and `ferrolb-speaker`.
    #[default]
    FerroLb,
    /// MetalLB's `controller` and `speaker` (native BGP mode and layer 2).
    MetalLb,
    /// MetalLB's `controller` and `speaker` in frr-k8s mode (`METALLB_BGP_TYPE=frr-k8s`, the
    /// default of MetalLB's chart), with frr-k8s and FRR on every node ([`crate::frrk8s`]) and
    /// the lab's BFD profile kept (see [`manifests::for_metallb_frrk8s`]).
    MetalLbFrrK8s,
}

impl System {
    /// Whether this is MetalLB, in either BGP mode.
    pub fn is_metallb(self) -> bool {
        matches!(self, System::MetalLb | System::MetalLbFrrK8s)
    }
}

/// The binaries the lab runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `ferrolb-controller`.
    pub controller: PathBuf,
    /// `ferrolb-speaker`; `None` runs the lab without speakers (topology checks only).
    pub speaker: Option<PathBuf>,
    /// A binary whose `serve --node NAME --port P` runs [`standin::serve`] (`ferrolb-lab`).
    pub lab: PathBuf,
}

/// How to build a lab.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Prefix of every namespace name.
    pub prefix: String,
    /// The router's daemon.
    pub router: RouterKind,
    /// The binaries.
    pub binaries: Binaries,
    /// Where configs, logs and the kubeconfig go (created; removed on drop unless kept).
    pub dir: PathBuf,
    /// The manifests directory (`examples/lab`).
    pub manifests: PathBuf,
    /// The CRD directory (`charts/ferrolb/crds`).
    pub crds: PathBuf,
    /// Extra speaker arguments.
    pub speaker_args: Vec<String>,
    /// The API server: the in-process double (fast start, the default) or a real
    /// kube-apiserver with etcd in the switch namespace (`--apiserver real`). The default comes
    /// from `FERROLB_APISERVER`.
    pub apiserver: BackendKind,
    /// FerroLB (the default) or MetalLB; [`Binaries`] name that system's binaries.
    pub system: System,
    /// The data path: the stand-in (the default), or the real kube-proxy in one of its modes,
    /// which needs (and so always gets) the real API server. The default comes from
    /// `FERROLB_KUBE_PROXY`.
    pub kube_proxy: KubeProxy,
    /// The nodes: the lab's own (FerroLB as host processes, the default), or real ones
    /// ([`nodes`]: kubelet and containerd per node, FerroLB installed by Helm from its images,
    /// the backends real Pods), which need (and so always get) the real API server and the real
    /// kube-proxy (iptables mode unless another is chosen). The default comes from
    /// `FERROLB_LAB_CLUSTER` (`lab` or `real`).
    pub cluster: Cluster,
}

/// Which nodes the lab runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Cluster {
    /// Network namespaces with FerroLB's binaries run as host processes, Nodes and speaker Pods
    /// written by the lab.
    #[default]
    Lab,
    /// Real kubelets with containerd; FerroLB installed with `helm install` ([`nodes`]).
    Real,
}

impl Cluster {
    /// From `FERROLB_LAB_CLUSTER`: `lab` (or unset) or `real`; anything else is refused.
    pub fn from_env() -> std::result::Result<Self, String> {
        match std::env::var("FERROLB_LAB_CLUSTER").as_deref() {
            Err(_) | Ok("" | "lab") => Ok(Self::Lab),
            Ok("real") => Ok(Self::Real),
            Ok(other) => Err(format!("unknown cluster `{other}`: lab or real")),
        }
    }
}

impl LabConfig {
    /// The defaults of this source tree: manifests and CRDs found from the crate's directory.
    pub fn new(prefix: &str, router: RouterKind, binaries: Binaries, dir: PathBuf) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        Self {
            prefix: prefix.into(),
            router,
            binaries,
            dir,
            manifests: root.join("examples/lab"),
            crds: root.join("charts/ferrolb/crds"),
            speaker_args: Vec::new(),
            apiserver: BackendKind::from_env(),
            system: System::FerroLb,
            kube_proxy: KubeProxy::from_env().unwrap_or_else(|e| panic!("FERROLB_KUBE_PROXY: {e}")),
            cluster: Cluster::from_env().unwrap_or_else(|e| panic!("FERROLB_LAB_CLUSTER: {e}")),
        }
    }

    /// Applies what each choice implies: real nodes run the real kube-proxy (iptables mode
    /// unless another is chosen), and the real kube-proxy runs against the real API server only.
    /// [`Lab::start`] does it; call it first to print what will run.
    pub fn resolve(&mut self) {
        if self.cluster == Cluster::Real && !self.kube_proxy.is_real() {
            self.kube_proxy = KubeProxy::Iptables;
        }
        if self.kube_proxy.is_real() {
            self.apiserver = BackendKind::Real;
        }
    }
}

/// The tools the lab needs, with their Debian packages.
pub fn required_tools(router: RouterKind) -> Vec<(&'static str, &'static str)> {
    let mut t = vec![
        ("ip", "iproute2"),
        ("arping", "iputils-arping"),
        ("ndisc6", "ndisc6"),
        ("iptables", "iptables"),
    ];
    t.extend_from_slice(router.tools());
    t
}

/// One Service as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceView {
    /// `metadata.name` (all lab Services are in `default`).
    pub name: String,
    /// `status.loadBalancer.ingress[]` as (ip, ipMode).
    pub ingress: Vec<(IpAddr, String)>,
    /// `externalTrafficPolicy: Local`.
    pub local: bool,
    /// The pool annotation.
    pub pool: String,
}

/// A running lab. Dropping it stops every process and removes every namespace.
pub struct Lab {
    speakers: Vec<Option<Process>>,
    /// Per node, frr-k8s and FRR (MetalLB in frr-k8s mode only).
    frr: Vec<Option<crate::frrk8s::NodeFrr>>,
    controller: Option<Process>,
    standins: Vec<Process>,
    /// With the real kube-proxy: one per node, and the Pods' namespaces with their servers.
    kube_proxies: Vec<Process>,
    pods: Vec<crate::netns::Namespace>,
    /// With real nodes: their kubelets, containerds and the scheduler.
    nodes: Option<nodes::RealNodes>,
    /// The router daemons.
    pub router: Router,
    api: Option<Backend>,
    rt: Runtime,
    /// The namespaces.
    pub topo: Arc<Topology>,
    config: LabConfig,
    kubeconfig: PathBuf,
    keep_dir: bool,
}

impl Lab {
    /// Checks root and tools, builds the topology, starts the router, the API server (loaded with
    /// the CRDs and manifests), the kube-proxy stand-in and the controller, and the speakers when
    /// a speaker binary is given. Returns once everything is started, not once it converged.
    pub fn start(mut config: LabConfig) -> Result<Self> {
        netns::require_root()?;
        config.resolve();
        let images = if config.cluster == Cluster::Real {
            Some(nodes::images()?)
        } else {
            None
        };
        netns::require_tools(&required_tools(config.router))?;
        netns::require_tools(config.kube_proxy.tools())?;
        if let Some(refusal) = config.kube_proxy.kernel_refusal() {
            return Err(LabError::KubeProxy(format!(
                "mode {} cannot run here: {refusal}",
                config.kube_proxy.as_str()
            )));
        }
        if config.system == System::MetalLbFrrK8s {
            netns::require_tools(crate::frrk8s::TOOLS)?;
        }
        let _ = std::fs::remove_dir_all(&config.dir);
        std::fs::create_dir_all(&config.dir).map_err(|source| LabError::Io {
            context: format!("creating {}", config.dir.display()),
            source,
        })?;
        let topo = Arc::new(Topology::create(&config.prefix)?);
        let router = Router::start(config.router, &topo.router, &config.dir)?;
        let rt = netns::runtime_in(topo.switch.name())?;
        let (crds, kind) = match config.system {
            System::FerroLb => (vec![config.crds.clone()], config.apiserver),
            // MetalLB's controller is built on controller-runtime and is run here only against
            // the server it is built for.
            System::MetalLb => (vec![crate::metallb::crd_dir()], BackendKind::Real),
            System::MetalLbFrrK8s => (
                vec![crate::metallb::crd_dir(), crate::frrk8s::crd_dir()],
                BackendKind::Real,
            ),
        };
        let switch = topo.switch.name().to_owned();
        let real_nodes = images.is_some();
        let api_dir = config.dir.join("kube");
        let api = rt
            .block_on(rt.spawn(async move {
                Backend::start_kind(
                    kind,
                    &crds,
                    |mut c| {
                        c.listen = SocketAddr::new(API_V4.into(), API_PORT);
                        // A dual-stack cluster, so Services can ask for an IPv6 address too.
                        c.cluster.service_cidr_base = std::net::Ipv4Addr::new(10, 99, 96, 0);
                        c.cluster.service_cidr_v6 =
                            Some(std::net::Ipv6Addr::new(0xfd00, 0x99, 0, 0x96, 0, 0, 0, 0));
                        c
                    },
                    |r| RealKubeConfig {
                        address: API_V4.into(),
                        port: API_PORT,
                        netns: Some(switch),
                        // Pods need their namespace's `default` ServiceAccount, which the
                        // controller-manager makes.
                        controller_manager: true,
                        kubelets: real_nodes,
                        // Room for the side-by-side bench's 10,000 route Services and more.
                        service_cidrs: "10.99.64.0/18,fd00:99:0:96::/108".into(),
                        dir: Some(api_dir),
                        ..r
                    },
                )
                .await
            }))
            .map_err(|e| LabError::ApiServer(e.to_string()))?
            .map_err(LabError::ApiServer)?;
        let kubeconfig = config.dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig)
            .map_err(|source| LabError::Io {
                context: "writing the kubeconfig".into(),
                source,
            })?;
        let mut lab = Self {
            speakers: NODE_NAMES.iter().map(|_| None).collect(),
            frr: NODE_NAMES.iter().map(|_| None).collect(),
            controller: None,
            standins: Vec::new(),
            kube_proxies: Vec::new(),
            pods: Vec::new(),
            nodes: None,
            router,
            api: Some(api),
            rt,
            topo,
            kubeconfig,
            keep_dir: false,
            config,
        };
        let files = manifests::yaml_files(&lab.config.manifests)?;
        let client = lab.client();
        match lab.config.system {
            System::FerroLb if images.is_some() => {
                lab.block(async move {
                    manifests::apply_with(&client, &files, manifests::for_real_nodes).await
                })?;
            }
            System::FerroLb => {
                lab.block(async move { manifests::apply(&client, &files).await })?;
            }
            System::MetalLb | System::MetalLbFrrK8s => {
                let key_dir = lab.config.dir.join("memberlist");
                std::fs::create_dir_all(&key_dir)
                    .and_then(|()| std::fs::write(key_dir.join("secretkey"), METALLB_ML_KEY))
                    .map_err(|source| LabError::Io {
                        context: "writing MetalLB's memberlist key".into(),
                        source,
                    })?;
                let convert = match lab.config.system {
                    System::MetalLbFrrK8s => manifests::for_metallb_frrk8s,
                    _ => manifests::for_metallb,
                };
                lab.block(async move { manifests::apply_with(&client, &files, convert).await })?;
            }
        }
        if let Some(images) = images {
            lab.start_real_nodes(&images)?;
            return Ok(lab);
        }
        if lab.config.kube_proxy.is_real() {
            lab.start_kube_proxies()?;
        } else {
            lab.start_standins()?;
        }
        lab.start_controller()?;
        if lab.config.binaries.speaker.is_some() {
            for i in 0..NODE_NAMES.len() {
                lab.start_frr(i)?;
                lab.start_speaker(i)?;
            }
        }
        Ok(lab)
    }

    /// Runs a future on the lab's runtime (inside the switch namespace) and waits for it.
    pub fn block<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        match self.rt.block_on(self.rt.spawn(fut)) {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("lab task cancelled: {e}"),
        }
    }

    /// Starts a future on the lab's runtime (inside the switch namespace) without waiting.
    pub fn spawn<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.rt.spawn(fut)
    }

    /// A client of the API server. Use it inside [`Lab::block`]: its connections must be opened
    /// from the switch namespace.
    pub fn client(&self) -> kube::Client {
        let api = self.api.as_ref().expect("API server running");
        let _guard = self.rt.enter();
        api.client()
    }

    /// The kubeconfig file the binaries use.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory of configs and logs.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Leaves the directory (logs, kubeconfig) in place when the lab is dropped.
    pub fn keep_dir(&mut self) {
        self.keep_dir = true;
    }

    fn start_standins(&mut self) -> Result<()> {
        for (i, name) in NODE_NAMES.iter().enumerate() {
            let log = self.config.dir.join(format!("serve-{name}.log"));
            let p = self.topo.node(i).spawn(
                &[
                    self.config.binaries.lab.as_os_str(),
                    "serve".as_ref(),
                    "--node".as_ref(),
                    name.as_ref(),
                    "--port".as_ref(),
                    SERVICE_PORT.to_string().as_ref(),
                ],
                &log,
            )?;
            self.standins.push(p);
        }
        let client = self.client();
        let topo = self.topo.clone();
        self.rt.spawn(proxy_stand_in(client, topo));
        Ok(())
    }

    /// The real data path: the Pods of every node (their addresses from the EndpointSlices the
    /// manifests made), a server in each answering with its node's name, and kube-proxy in
    /// each node namespace; returns once every kube-proxy reports healthy.
    fn start_kube_proxies(&mut self) -> Result<()> {
        let client = self.client();
        let slices = self.block(async move {
            Api::<EndpointSlice>::namespaced(client, "default")
                .list(&ListParams::default())
                .await
        })?;
        let pods = kubeproxy::endpoints_by_node(&slices.items);
        self.pods = kubeproxy::build_pods(&self.topo.nodes, &self.topo.prefix, &pods)?;
        for (i, name) in NODE_NAMES.iter().enumerate() {
            let log = self.config.dir.join(format!("pod-{name}.log"));
            let p = self.pods[i].spawn(
                &[
                    self.config.binaries.lab.as_os_str(),
                    "serve".as_ref(),
                    "--node".as_ref(),
                    name.as_ref(),
                    "--port".as_ref(),
                    kubeproxy::TARGET_PORT.to_string().as_ref(),
                ],
                &log,
            )?;
            self.standins.push(p);
        }
        self.start_kube_proxy_processes(kubeproxy::CLUSTER_CIDRS)?;
        self.wait_kube_proxies_ready()
    }

    /// Starts kube-proxy on every node (ready once [`Lab::wait_kube_proxies_ready`] says so).
    fn start_kube_proxy_processes(&mut self, cluster_cidrs: &str) -> Result<()> {
        for i in 0..NODE_NAMES.len() {
            let p = kubeproxy::start(
                self.config.kube_proxy,
                self.topo.node(i),
                i,
                &self.kubeconfig,
                cluster_cidrs,
                &self.config.dir,
            )?;
            self.kube_proxies.push(p);
        }
        Ok(())
    }

    /// Waits until every kube-proxy has synced its rules once (`/healthz`).
    fn wait_kube_proxies_ready(&mut self) -> Result<()> {
        kubeproxy::wait_ready(
            &self.topo.nodes,
            &mut self.kube_proxies,
            Duration::from_secs(60),
        )
    }

    /// Real nodes ([`nodes`]): containerd and kubelet per node with the images imported,
    /// kube-scheduler, kube-proxy; once every Node is Ready, the backends
    /// (`examples/lab/real/*.yaml`) and FerroLB itself, installed by real Helm from the chart
    /// (which waits until the controller and every speaker are ready).
    fn start_real_nodes(&mut self, images: &[PathBuf]) -> Result<()> {
        self.nodes = Some(nodes::RealNodes::start(
            &self.topo,
            &self.kubeconfig,
            &self.config.dir,
            images,
        )?);
        // kube-proxy starts beside the kubelets, but its minute to report healthy begins only
        // once every Node is Ready: on two busy cores (the fuzzers beside), CI once saw a
        // kube-proxy still unhealthy a minute after it started with the kubelets.
        self.start_kube_proxy_processes(nodes::CLUSTER_CIDRS)?;
        let client = self.client();
        let ready = self.wait(Duration::from_secs(90), "every Node Ready", || {
            let client = client.clone();
            let nodes = self
                .block(async move {
                    Api::<k8s_openapi::api::core::v1::Node>::all(client)
                        .list(&ListParams::default())
                        .await
                })
                .ok()?;
            let ready = nodes
                .items
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count();
            (ready == NODE_NAMES.len()).then_some(())
        });
        if let Err(e) = ready {
            let log = self
                .nodes
                .as_ref()
                .map(|n| n.kubelet_log(0))
                .unwrap_or_default();
            return Err(LabError::Nodes(format!(
                "{e}; node-a's kubelet said last:\n{}",
                last_lines(&log, 20)
            )));
        }
        self.wait_kube_proxies_ready()?;
        let backends = manifests::yaml_files(&self.config.manifests.join("real"))?;
        let client = self.client();
        self.block(async move { manifests::apply(&client, &backends).await })?;
        let root = self
            .config
            .crds
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let script = root.join("tests/install.py");
        let out = self.topo.switch.exec(&[
            "python3".as_ref(),
            script.as_os_str(),
            "--kubeconfig".as_ref(),
            self.kubeconfig.as_os_str(),
            "--namespace".as_ref(),
            INSTALL_NS.as_ref(),
            "--timeout".as_ref(),
            "90".as_ref(),
        ])?;
        if !out.status.success() {
            return Err(LabError::Nodes(format!(
                "helm install ({}): {}\nPods:\n{}FerroLB's logs:\n{}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim(),
                self.pod_report(),
                self.nodes
                    .as_ref()
                    .map(|n| n.container_logs("ferrolb", 12))
                    .unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Every Pod with its node, phase and each container's state, one line each (for
    /// failure messages).
    fn pod_report(&self) -> String {
        let client = self.client();
        let pods = self.block(async move {
            Api::<k8s_openapi::api::core::v1::Pod>::all(client)
                .list(&ListParams::default())
                .await
        });
        let Ok(pods) = pods else {
            return "(the Pods could not be listed)".into();
        };
        let mut out = String::new();
        for p in pods.items {
            let status = p.status.unwrap_or_default();
            let containers: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .map(|c| {
                    let state = c.state.unwrap_or_default();
                    let why = if let Some(w) = state.waiting {
                        format!(
                            "waiting {} {}",
                            w.reason.unwrap_or_default(),
                            w.message.unwrap_or_default()
                        )
                    } else if let Some(t) = state.terminated {
                        format!(
                            "terminated {} {}",
                            t.reason.unwrap_or_default(),
                            t.message.unwrap_or_default()
                        )
                    } else {
                        "running".into()
                    };
                    format!(
                        "{}: {why}, ready {}, restarts {}",
                        c.name, c.ready, c.restart_count
                    )
                })
                .collect();
            out += &format!(
                "  {}/{} on {}: {} [{}]\n",
                p.metadata.namespace.unwrap_or_default(),
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                status.phase.unwrap_or_default(),
                containers.join("; ")
            );
        }
        out
    }

    /// Which nodes this lab runs.
    pub fn cluster(&self) -> Cluster {
        self.config.cluster
    }

    /// What carries Service traffic to the backends in this lab.
    pub fn kube_proxy(&self) -> KubeProxy {
        self.config.kube_proxy
    }

    /// The network namespace of a Pod on node `i` (not on the host network), as a name under
    /// `/run/netns` or a path, for [`crate::netns::in_namespace`]: the namespace of node `i`'s
    /// Pods with the real kube-proxy, one of its real Pods' with real nodes.
    pub fn pod_netns(&self, i: usize) -> Option<String> {
        if let Some(nodes) = &self.nodes {
            return nodes.pod_netns(i);
        }
        self.pods.get(i).map(|p| p.name().to_owned())
    }

    /// Starts (or restarts) the controller in the switch namespace.
    pub fn start_controller(&mut self) -> Result<()> {
        if let Some(mut old) = self.controller.take() {
            old.kill();
        }
        let log = self.config.dir.join("controller.log");
        let kc = self.kubeconfig.display().to_string();
        let bin = self.config.binaries.controller.display().to_string();
        if self.config.system.is_metallb() {
            let p = self.topo.switch.spawn(
                &[
                    bin.as_str(),
                    &format!("--kubeconfig={kc}"),
                    &format!("--namespace={}", crate::metallb::NAMESPACE),
                    &format!("--pod-name={}", crate::metallb::CONTROLLER_POD),
                    "--webhook-mode=disabled",
                    "--disable-cert-rotation",
                    "--port=0",
                    "--log-level=info",
                ],
                &log,
            )?;
            self.controller = Some(p);
            return Ok(());
        }
        let p = self.topo.switch.spawn(
            &[
                bin.as_str(),
                "--kubeconfig",
                &kc,
                "--namespace",
                INSTALL_NS,
                "--metrics-addr",
                "127.0.0.1:7472",
                "--identity",
                "lab-controller",
                "--lease-duration",
                "3s",
                "--renew-deadline",
                "2s",
                "--retry-period",
                "500ms",
            ],
            &log,
        )?;
        self.controller = Some(p);
        Ok(())
    }

    /// The process id of the controller, while one was started (to read its memory and file
    /// descriptors).
    pub fn controller_pid(&self) -> Option<u32> {
        self.controller.as_ref().map(Process::pid)
    }

    /// The controller's `/metrics` text (it listens on 127.0.0.1:7472 in the switch namespace),
    /// `None` when nothing answers.
    pub fn controller_metrics(&self) -> Option<String> {
        metrics_in(
            self.topo.switch.name(),
            SocketAddr::from(([127, 0, 0, 1], 7472)),
        )
    }

    /// Kills the controller with SIGKILL.
    pub fn kill_controller(&mut self) {
        if let Some(mut p) = self.controller.take() {
            p.kill();
        }
    }

    /// Starts node `i`'s speaker (a fresh process, its log appended with a marker).
    pub fn start_speaker(&mut self, i: usize) -> Result<()> {
        if let Some(nodes) = &self.nodes {
            // The kubelet, thawed, restarts the killed speaker's container.
            nodes.freeze_kubelet(i, false);
            return Ok(());
        }
        let Some(bin) = self.config.binaries.speaker.clone() else {
            return Ok(());
        };
        let name = NODE_NAMES[i];
        let log = self.config.dir.join(format!("speaker-{name}.log"));
        let kc = self.kubeconfig.display().to_string();
        if self.config.system.is_metallb() {
            let key_dir = self.config.dir.join("memberlist");
            let mut args: Vec<String> = vec![
                bin.display().to_string(),
                format!("--kubeconfig={kc}"),
                format!("--node-name={name}"),
                format!("--pod-name={}", manifests::metallb_speaker_pod(name)),
                format!("--namespace={}", crate::metallb::NAMESPACE),
                format!("--ml-bindaddr={}", node_v4(i)),
                format!("--ml-labels={}", manifests::METALLB_SPEAKER_LABELS),
                format!("--ml-secret-key-path={}", key_dir.display()),
                "--port=0".into(),
                "--log-level=info".into(),
            ];
            if self.config.system == System::MetalLbFrrK8s {
                // MetalLB's chart sets METALLB_BGP_TYPE in the speaker's environment; `env`
                // does here, with frr-k8s in MetalLB's namespace as the chart installs it.
                args.splice(
                    0..0,
                    ["env".to_string(), "METALLB_BGP_TYPE=frr-k8s".to_string()],
                );
                args.push(format!("--frrk8s-namespace={}", crate::metallb::NAMESPACE));
            }
            args.extend(self.config.speaker_args.iter().cloned());
            let p = self.topo.node(i).spawn(&args, &log)?;
            self.speakers[i] = Some(p);
            return Ok(());
        }
        let mut args: Vec<String> = vec![
            bin.display().to_string(),
            "--kubeconfig".into(),
            kc,
            "--node-name".into(),
            name.into(),
            "--namespace".into(),
            INSTALL_NS.into(),
            "--metrics-addr".into(),
            format!("{}:7473", node_v4(i)),
            "--enable-l2=true".into(),
            "--enable-bgp=true".into(),
        ];
        args.extend(self.config.speaker_args.iter().cloned());
        let p = self.topo.node(i).spawn(&args, &log)?;
        self.speakers[i] = Some(p);
        Ok(())
    }

    /// Starts (or restarts) node `i`'s frr-k8s Pod ([`crate::frrk8s::NodeFrr`]: FRR, the
    /// reloader and frr-k8s) when the lab runs MetalLB in frr-k8s mode; does nothing otherwise.
    pub fn start_frr(&mut self, i: usize) -> Result<()> {
        if self.config.system != System::MetalLbFrrK8s {
            return Ok(());
        }
        if let Some(mut old) = self.frr[i].take() {
            old.kill();
        }
        let name = NODE_NAMES[i];
        let dir = self.config.dir.join(format!("frr-k8s-{name}"));
        let node = crate::frrk8s::NodeFrr::start(
            self.topo.node(i),
            name,
            &dir,
            &self.kubeconfig,
            crate::metallb::NAMESPACE,
        )?;
        self.frr[i] = Some(node);
        Ok(())
    }

    /// Starts again, as the kubelet restarts a container that exited, every speaker (and
    /// frr-k8s Pod) that was started and has exited since: MetalLB's speaker and frr-k8s exit
    /// when the API server is unreachable at their start, as it can be for a moment after a
    /// node is plugged back in. Returns the nodes restarted.
    pub fn restart_exited(&mut self) -> Result<Vec<usize>> {
        let mut restarted = Vec::new();
        for i in 0..NODE_NAMES.len() {
            if self.frr[i].as_mut().is_some_and(|n| n.exited()) {
                self.start_frr(i)?;
                restarted.push(i);
            }
            if self.speakers[i].as_mut().is_some_and(|p| !p.alive()) {
                self.start_speaker(i)?;
                restarted.push(i);
            }
        }
        restarted.dedup();
        Ok(restarted)
    }

    /// Kills node `i`'s frr-k8s Pod (SIGKILL to every process), when one runs.
    pub fn kill_frr(&mut self, i: usize) {
        if let Some(mut node) = self.frr[i].take() {
            node.kill();
        }
    }

    /// Makes the API server unreachable from node `i` (`false`) or reachable again (`true`):
    /// its packets to the API server are dropped, so connections hang as they do behind a
    /// failed load balancer or a partitioned control plane (no reset, no error).
    pub fn set_api_reachable(&self, i: usize, reachable: bool) -> Result<()> {
        let op = if reachable { "-D" } else { "-I" };
        let port = API_PORT.to_string();
        for (tool, dst) in [
            ("iptables", API_V4.to_string()),
            ("ip6tables", crate::netns::topology::API_V6.to_string()),
        ] {
            self.topo.node(i).exec_ok(&[
                tool, op, "OUTPUT", "-d", &dst, "-p", "tcp", "--dport", &port, "-j", "DROP",
            ])?;
        }
        Ok(())
    }

    /// The process id of node `i`'s speaker, while one runs (to read its memory and CPU time).
    pub fn speaker_pid(&self, i: usize) -> Option<u32> {
        if let Some(nodes) = &self.nodes {
            return nodes.container_pids(i, "ferrolb-speaker").first().copied();
        }
        self.speakers[i].as_ref().map(Process::pid)
    }

    /// Kills node `i`'s speaker with SIGKILL, as a crash would. With real nodes, its
    /// container's process, the node's kubelet frozen first so that the speaker stays down
    /// until [`Lab::start_speaker`] thaws it (a kubelet restarts a crashed container at once).
    pub fn kill_speaker(&mut self, i: usize) {
        if let Some(nodes) = &self.nodes {
            nodes.freeze_kubelet(i, true);
            for pid in nodes.container_pids(i, "ferrolb-speaker") {
                let _ = netns::run(&["kill", "-9", &pid.to_string()]);
            }
            return;
        }
        if let Some(p) = self.speakers[i].as_mut() {
            p.kill();
        }
    }

    /// Stops node `i`'s speaker as a rolling update does: SIGTERM, SIGKILL after `grace` (the
    /// Pod's termination grace period). Returns whether it exited by itself in time.
    pub fn stop_speaker(&mut self, i: usize, grace: Duration) -> bool {
        match self.speakers[i].as_mut() {
            Some(p) => p.terminate(grace),
            None => true,
        }
    }

    /// Asks `ip` from the client behind the router every `interval` (each request given up
    /// after `timeout`) until `stop` is set, on a thread of its own; join it for every
    /// request's outcome.
    pub fn ask_from_remote_every(
        &self,
        ip: IpAddr,
        interval: Duration,
        timeout: Duration,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<Result<standin::Requests, NoAnswer>> {
        ask_every_from(self.topo.remote.name(), ip, interval, timeout, stop)
    }

    /// The same from the client on the segment.
    pub fn ask_from_client_every(
        &self,
        ip: IpAddr,
        interval: Duration,
        timeout: Duration,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<Result<standin::Requests, NoAnswer>> {
        ask_every_from(self.topo.client.name(), ip, interval, timeout, stop)
    }

    /// The implementation this lab runs.
    pub fn system(&self) -> System {
        self.config.system
    }

    /// Whether speakers run in this lab.
    pub fn has_speakers(&self) -> bool {
        self.config.binaries.speaker.is_some()
    }

    /// The lab's Services, sorted by name.
    pub fn services(&self) -> Result<Vec<ServiceView>> {
        let client = self.client();
        self.block(async move {
            let list = Api::<Service>::namespaced(client, "default")
                .list(&ListParams::default())
                .await?;
            let mut out: Vec<ServiceView> = list.items.iter().filter_map(service_view).collect();
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
    }

    /// Waits until every LoadBalancer Service has an address; returns them.
    pub fn wait_for_addresses(&self, limit: Duration) -> Result<Vec<ServiceView>> {
        self.wait(limit, "an address on every Service", || {
            let s = self.services().ok()?;
            (!s.is_empty() && s.iter().all(|v| !v.ingress.is_empty())).then_some(s)
        })
    }

    /// The layer-2 owner of each announced address, from the speakers' `ServiceL2Status`
    /// objects.
    pub fn l2_owners(&self) -> Result<BTreeMap<IpAddr, Vec<String>>> {
        let client = self.client();
        if self.config.system.is_metallb() {
            return self.block(metallb_l2_owners(client));
        }
        self.block(async move {
            let list = Api::<ServiceL2Status>::namespaced(client, INSTALL_NS)
                .list(&ListParams::default())
                .await?;
            let mut owners: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
            for st in list.items {
                let Some(s) = st.status else { continue };
                for a in &s.addresses {
                    if let Ok(ip) = a.parse() {
                        owners.entry(ip).or_default().push(s.node.clone());
                    }
                }
            }
            for v in owners.values_mut() {
                v.sort();
                v.dedup();
            }
            Ok(owners)
        })
    }

    /// `(service, node, peers)` from the speakers' `ServiceBGPStatus` objects.
    /// (MetalLB's lab: none, its `ServiceBGPStatus` is not read.)
    pub fn bgp_announcers(&self) -> Result<Vec<(String, String, Vec<String>)>> {
        if self.config.system.is_metallb() {
            return Ok(Vec::new());
        }
        let client = self.client();
        self.block(async move {
            let list = Api::<ServiceBGPStatus>::namespaced(client, INSTALL_NS)
                .list(&ListParams::default())
                .await?;
            let mut out: Vec<_> = list
                .items
                .into_iter()
                .filter_map(|st| st.status)
                .map(|s| (s.service_name, s.node, s.peers))
                .collect();
            out.sort();
            Ok(out)
        })
    }

    /// Node `i`'s speaker's `/metrics` text, `None` when nothing answers.
    pub fn speaker_metrics(&self, i: usize) -> Option<String> {
        speaker_metrics(&self.topo, i)
    }

    /// The speakers' `BGPSessionState` objects: `(object name, status)`, sorted by name.
    pub fn bgp_sessions(&self) -> Result<Vec<(String, BGPSessionStateStatus)>> {
        let client = self.client();
        self.block(async move {
            let list = Api::<ferrolb_api::v1beta1::BGPSessionState>::namespaced(client, INSTALL_NS)
                .list(&ListParams::default())
                .await?;
            let mut out: Vec<_> = list
                .items
                .into_iter()
                .filter_map(|o| Some((o.metadata.name?, o.status?)))
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(out)
        })
    }

    /// Waits until each L2 address of `services` has exactly one owner; returns the owners.
    pub fn wait_for_l2_owners(
        &self,
        addrs: &[IpAddr],
        limit: Duration,
    ) -> Result<BTreeMap<IpAddr, String>> {
        self.wait(limit, "one layer-2 owner per address", || {
            let owners = self.l2_owners().ok()?;
            addrs
                .iter()
                .map(|ip| match owners.get(ip).map(Vec::as_slice) {
                    Some([one]) => Some((*ip, one.clone())),
                    _ => None,
                })
                .collect()
        })
    }

    /// Waits until the router's kernel routes `ip` (as a /32 or /128) to exactly the next hops
    /// of `nodes` (their address of `ip`'s family).
    pub fn wait_for_route(&self, ip: IpAddr, nodes: &[usize], limit: Duration) -> Result<()> {
        let prefix = host_prefix(ip);
        let mut want: Vec<IpAddr> = nodes
            .iter()
            .map(|i| match ip {
                IpAddr::V4(_) => IpAddr::from(node_v4(*i)),
                IpAddr::V6(_) => IpAddr::from(node_v6(*i)),
            })
            .collect();
        want.sort();
        self.wait(
            limit,
            &format!("the router to route {prefix} to {want:?}"),
            || {
                self.router
                    .kernel_routes()
                    .iter()
                    .any(|r| r.prefix == prefix && r.next_hops == want)
                    .then_some(())
            },
        )
    }

    /// Opens a TCP connection to `ip` port 80 from the client on the segment and returns the
    /// name of the node that answered.
    pub fn ask_from_client(&self, ip: IpAddr) -> Result<String, NoAnswer> {
        standin::ask(
            self.topo.client.name(),
            SocketAddr::new(ip, SERVICE_PORT),
            Duration::from_secs(2),
        )
    }

    /// The same from the client behind the router.
    pub fn ask_from_remote(&self, ip: IpAddr) -> Result<String, NoAnswer> {
        standin::ask(
            self.topo.remote.name(),
            SocketAddr::new(ip, SERVICE_PORT),
            Duration::from_secs(2),
        )
    }

    /// Polls `what` every 100 ms until it returns `Some` or `limit` passes.
    pub fn wait<T>(
        &self,
        limit: Duration,
        what: &str,
        what_fn: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.wait_every(limit, Duration::from_millis(100), what, what_fn)
    }

    /// Like [`Lab::wait`], looking every `every`: a timing read from the moment the wait ends
    /// is known to within `every` plus one look.
    pub fn wait_every<T>(
        &self,
        limit: Duration,
        every: Duration,
        what: &str,
        mut what_fn: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            if let Some(v) = what_fn() {
                return Ok(v);
            }
            if start.elapsed() > limit {
                return Err(LabError::Timeout {
                    what: what.into(),
                    after: limit,
                });
            }
            std::thread::sleep(every);
        }
    }

    /// The last lines of a process log in the lab directory (for failure messages).
    pub fn log_tail(&self, file: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.config.dir.join(file)).unwrap_or_default();
        last_lines(&text, lines)
    }
}

/// The last `lines` lines of `text` (for failure messages).
pub fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Drop for Lab {
    fn drop(&mut self) {
        for p in self.speakers.iter_mut().flatten() {
            p.kill();
        }
        for node in self.frr.iter_mut().flatten() {
            node.kill();
        }
        self.kill_controller();
        self.standins.clear();
        self.kube_proxies.clear();
        self.pods.clear();
        self.nodes.take();
        self.api.take();
        // The stand-in task on the runtime holds the topology too; remove the namespaces now
        // rather than whenever its last reference goes.
        crate::netns::topology::remove(&self.topo.prefix);
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.config.dir);
        }
    }
}

/// The memberlist key of the MetalLB lab's speakers (fixed and not secret, as the FerroLB lab's).
const METALLB_ML_KEY: &str = "ferrolb lab: MetalLB memberlist key, not a secret";

/// MetalLB's `ServiceL2Status` objects name the node and the Service, not the address: the
/// owner of each address of the Service.
async fn metallb_l2_owners(client: kube::Client) -> Result<BTreeMap<IpAddr, Vec<String>>> {
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::GroupVersionKind;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "metallb.io",
        "v1beta1",
        "ServiceL2Status",
    ));
    let statuses =
        Api::<DynamicObject>::namespaced_with(client.clone(), crate::metallb::NAMESPACE, &ar)
            .list(&ListParams::default())
            .await?;
    let services = Api::<Service>::namespaced(client, "default")
        .list(&ListParams::default())
        .await?;
    let mut owners: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
    for st in statuses.items {
        let status = &st.data["status"];
        let (Some(node), Some(svc)) = (status["node"].as_str(), status["serviceName"].as_str())
        else {
            continue;
        };
        let Some(view) = services
            .items
            .iter()
            .filter_map(service_view)
            .find(|v| v.name == svc)
        else {
            continue;
        };
        for (ip, _) in view.ingress {
            owners.entry(ip).or_default().push(node.to_string());
        }
    }
    for v in owners.values_mut() {
        v.sort();
        v.dedup();
    }
    Ok(owners)
}

fn ask_every_from(
    ns: &str,
    ip: IpAddr,
    interval: Duration,
    timeout: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Result<standin::Requests, NoAnswer>> {
    let ns = ns.to_owned();
    let addr = SocketAddr::new(ip, SERVICE_PORT);
    std::thread::spawn(move || standin::ask_every(&ns, addr, interval, timeout, stop))
}

/// `GET /metrics` from node `i`'s speaker (`--metrics-addr` is the node's address, port 7473),
/// asked from inside the node's namespace; `None` when nothing answers.
pub fn speaker_metrics(topo: &Topology, i: usize) -> Option<String> {
    metrics_in(
        topo.node(i).name(),
        SocketAddr::new(node_v4(i).into(), 7473),
    )
}

/// `GET /metrics` from `addr`, asked from inside namespace `ns`; `None` when nothing answers.
fn metrics_in(ns: &str, addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    netns::in_namespace(ns, move || {
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: ferrolb\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    })
    .ok()
    .flatten()
}

/// `10.99.2.0/32` or `fd00:99:2::/128`.
pub fn host_prefix(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => format!("{ip}/32"),
        IpAddr::V6(_) => format!("{ip}/128"),
    }
}

fn service_view(s: &Service) -> Option<ServiceView> {
    let spec = s.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    let ingress = s
        .status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some((
                i.ip.as_ref()?.parse().ok()?,
                i.ip_mode.clone().unwrap_or_else(|| "-".into()),
            ))
        })
        .collect();
    Some(ServiceView {
        name: s.metadata.name.clone()?,
        ingress,
        local: spec.external_traffic_policy.as_deref() == Some("Local"),
        pool: s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| {
                a.get(ferrolb_api::names::ADDRESS_POOL)
                    .or_else(|| a.get(ferrolb_api::names::METALLB_ADDRESS_POOL))
            })
            .cloned()
            .unwrap_or_default(),
    })
}

/// The kube-proxy stand-in: puts on each node's `lb0` the addresses of the Services that node
/// accepts traffic for: all of them for `externalTrafficPolicy: Cluster`, and for `Local` only
/// on nodes with a ready endpoint of the address's family (elsewhere kube-proxy drops the
/// traffic: it programs each family from the EndpointSlices of that family). Like kube-proxy it
/// watches Services and EndpointSlices; at most every 300 ms after a change it works out each
/// node's addresses (linear in Services plus slices) and applies only what differs from what
/// it applied last, so 10,000 Services cost nothing while nothing changes.
async fn proxy_stand_in(client: kube::Client, topo: Arc<Topology>) {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use std::collections::{BTreeSet, HashMap};
    use std::sync::atomic::{AtomicU64, Ordering};

    let changes = Arc::new(AtomicU64::new(0));
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    fn count_events<S: futures::Stream + Send + 'static>(
        stream: S,
        changes: Arc<AtomicU64>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {
                changes.fetch_add(1, Ordering::SeqCst);
            }
        })
    }
    let config = watcher::Config::default();
    let _services_task = count_events(
        reflector(
            services_writer,
            watcher(
                Api::<Service>::namespaced(client.clone(), "default"),
                config.clone(),
            ),
        )
        .default_backoff(),
        changes.clone(),
    );
    let _slices_task = count_events(
        reflector(
            slices_writer,
            watcher(Api::<EndpointSlice>::namespaced(client, "default"), config),
        )
        .default_backoff(),
        changes.clone(),
    );
    let mut seen = 0;
    let mut applied: Vec<Option<BTreeSet<IpAddr>>> = vec![None; NODE_NAMES.len()];
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = changes.load(Ordering::SeqCst);
        if now == seen && applied.iter().all(Option::is_some) {
            continue;
        }
        seen = now;
        // The nodes with a ready endpoint, per Service name and family (IPv6 or not); FQDN
        // slices count for no family.
        let mut ready_on: HashMap<(String, bool), BTreeSet<String>> = HashMap::new();
        for slice in slices.state() {
            let Some(name) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
            else {
                continue;
            };
            let v6 = match slice.address_type.as_str() {
                "IPv4" => false,
                "IPv6" => true,
                _ => continue,
            };
            let nodes = ready_on.entry((name.clone(), v6)).or_default();
            for e in &slice.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready) != Some(false);
                if let (true, Some(node)) = (ready, &e.node_name) {
                    nodes.insert(node.clone());
                }
            }
        }
        let mut per_node: Vec<BTreeSet<IpAddr>> = vec![BTreeSet::new(); NODE_NAMES.len()];
        for s in services.state() {
            let Some(view) = service_view(&s) else {
                continue;
            };
            for (ip, _) in &view.ingress {
                let ready = ready_on.get(&(view.name.clone(), ip.is_ipv6()));
                for (i, node) in NODE_NAMES.iter().enumerate() {
                    if !view.local || ready.is_some_and(|r| r.contains(*node)) {
                        per_node[i].insert(*ip);
                    }
                }
            }
        }
        let changed: Vec<(usize, BTreeSet<IpAddr>)> = per_node
            .into_iter()
            .enumerate()
            .filter(|(i, addrs)| applied[*i].as_ref() != Some(addrs))
            .collect();
        let topo = topo.clone();
        let done = tokio::task::spawn_blocking(move || {
            changed
                .into_iter()
                .filter_map(|(i, addrs)| {
                    let list: Vec<IpAddr> = addrs.iter().copied().collect();
                    topo.set_service_addresses(i, &list)
                        .ok()
                        .map(|()| (i, addrs))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (i, addrs) in done {
            applied[i] = Some(addrs);
        }
    }
}
