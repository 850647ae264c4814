//! The lab's data path: the kube-proxy stand-in ([`super::standin`]), or the real kube-proxy of
//! the same Kubernetes release as the real API server (built by `scripts/realkube node`) in
//! each node's namespace, in iptables, nftables or IPVS mode, carrying traffic from a Service's
//! external address to its backends, which then run as "Pods": one namespace per node behind a
//! veth, holding that node's endpoint addresses (as the lab's EndpointSlices list them) and
//! answering on the target port with the node's name.
//!
//! ```text
//!   node ns (node-a): eth0 10.99.0.11 ── kube-proxy (iptables|nftables|ipvs), ferrolb-speaker
//!       └─ pod0 169.254.1.1, fe80::1 ──veth── pod ns: eth0 10.99.10.1, 10.99.10.4, fd00:99:10::1 ...
//!                                                ferrolb-lab serve --port 8080 (answers "node-a")
//!   routes: each node reaches its own Pods over pod0, the other nodes' through their eth0 address
//! ```
//!
//! What the real kube-proxy does that the stand-in did not: the address is never put on an
//! interface in iptables and nftables mode (the node answers for it only through the DNAT rules
//! on PREROUTING), the traffic of `externalTrafficPolicy: Cluster` Services is masqueraded to
//! the node's address (the backend does not see the client), `Local` Services keep the client's
//! address and are dropped on nodes without a local endpoint, each `Local` Service gets a
//! `healthCheckNodePort` server, and Services with `ipMode: Proxy` get no rule for their
//! external address at all (KEP-1860).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{LabError, Result};
use crate::netns::topology::{NODE_NAMES, node_v4, node_v6};
use crate::netns::{Namespace, Process};

/// The port the backends listen on (the lab Services' `targetPort`).
pub const TARGET_PORT: u16 = 8080;
/// kube-proxy's health server (`/healthz`, `/livez`) on every node.
pub const HEALTHZ_PORT: u16 = 10256;
/// The node's side of each Pod's veth, the Pods' default gateway.
pub const POD_GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The same for IPv6 (a link-local address).
pub const POD_GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
/// The Pod namespaces' addresses (`clusterCIDR`, for kube-proxy's local-traffic detection).
pub const CLUSTER_CIDRS: &str = "10.99.10.0/24,fd00:99:10::/64";

/// What carries a Service's traffic to its backends in the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubeProxy {
    /// The lab's stand-in: Service addresses on each node's `lb0`, answered by a server on the
    /// node itself (fast; runs with either API server).
    #[default]
    StandIn,
    /// The real kube-proxy in `iptables` mode (kube-proxy's default).
    Iptables,
    /// The real kube-proxy in `nftables` mode.
    Nftables,
    /// The real kube-proxy in `ipvs` mode (needs a kernel with `CONFIG_IP_VS`).
    Ipvs,
}

impl KubeProxy {
    /// The mode from `FERROLB_KUBE_PROXY` (`standin`, `iptables`, `nftables`, `ipvs`); the
    /// stand-in when unset.
    pub fn from_env() -> std::result::Result<Self, String> {
        match std::env::var("FERROLB_KUBE_PROXY") {
            Ok(v) if !v.is_empty() => v.parse(),
            _ => Ok(Self::StandIn),
        }
    }

    /// Whether this is the real kube-proxy.
    pub fn is_real(self) -> bool {
        self != Self::StandIn
    }

    /// kube-proxy's `mode`, or `standin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StandIn => "standin",
            Self::Iptables => "iptables",
            Self::Nftables => "nftables",
            Self::Ipvs => "ipvs",
        }
    }

    /// The tools this mode needs on the machine, with their Debian packages.
    pub fn tools(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::StandIn => &[],
            // nft: the suites read the rules of every mode with `nft list ruleset` (iptables
            // here is its nft backend).
            Self::Iptables => &[
                ("iptables", "iptables"),
                ("ip6tables", "iptables"),
                ("nft", "nftables"),
            ],
            Self::Nftables => &[("nft", "nftables")],
            Self::Ipvs => &[
                ("iptables", "iptables"),
                ("ipset", "ipset"),
                ("nft", "nftables"),
            ],
        }
    }

    /// Why this mode cannot run on this machine's kernel, if it cannot: IPVS needs
    /// `CONFIG_IP_VS`, which shows as `/proc/net/ip_vs` once the module is in.
    pub fn kernel_refusal(self) -> Option<String> {
        (self == Self::Ipvs && !Path::new("/proc/net/ip_vs").exists()).then(|| {
            format!(
                "kernel {} has no IPVS (no /proc/net/ip_vs: CONFIG_IP_VS is not set and no \
                 ip_vs module is loaded)",
                kernel_release()
            )
        })
    }
}

impl std::str::FromStr for KubeProxy {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "standin" | "stand-in" => Ok(Self::StandIn),
            "iptables" => Ok(Self::Iptables),
            "nftables" => Ok(Self::Nftables),
            "ipvs" => Ok(Self::Ipvs),
            other => Err(format!(
                "unknown kube-proxy `{other}`: standin, iptables, nftables or ipvs"
            )),
        }
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The real kube-proxy binary: next to the real API server's (`scripts/realkube node`).
pub fn binary() -> PathBuf {
    crate::realkube::bin_dir().join("kube-proxy")
}

/// The endpoint addresses of the lab's EndpointSlices, per node index.
pub fn endpoints_by_node(slices: &[EndpointSlice]) -> Vec<Vec<IpAddr>> {
    let mut out = vec![Vec::new(); NODE_NAMES.len()];
    for e in slices.iter().flat_map(|s| s.endpoints.iter()) {
        let Some(i) = e
            .node_name
            .as_deref()
            .and_then(|n| NODE_NAMES.iter().position(|x| *x == n))
        else {
            continue;
        };
        for a in &e.addresses {
            if let Ok(ip) = a.parse::<IpAddr>()
                && !out[i].contains(&ip)
            {
                out[i].push(ip);
            }
        }
    }
    out
}

/// Builds the Pods of every node: for node `i`, a namespace `{prefix}-pod-{node}` behind a
/// veth (`pod0` on the node, `eth0` in the Pod) holding `pods[i]`, and routes so that every node
/// reaches every Pod (its own over `pod0`, the others' through their node's address). Turns on
/// forwarding on the nodes, as on any Kubernetes node.
pub fn build_pods(
    nodes: &[Namespace],
    prefix: &str,
    pods: &[Vec<IpAddr>],
) -> Result<Vec<Namespace>> {
    let mut out = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let pod = Namespace::create(&format!("{prefix}-pod-{}", NODE_NAMES[i]))?;
        node.ip(&[
            "link",
            "add",
            "pod0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            pod.name(),
        ])?;
        node.ip(&[
            "addr",
            "add",
            &format!("{POD_GATEWAY_V4}/32"),
            "dev",
            "pod0",
        ])?;
        node.ip(&[
            "addr",
            "add",
            &format!("{POD_GATEWAY_V6}/64"),
            "dev",
            "pod0",
            "nodad",
        ])?;
        node.ip(&["link", "set", "pod0", "up"])?;
        node.sysctl("net.ipv4.ip_forward=1")?;
        node.sysctl("net.ipv6.conf.all.forwarding=1")?;
        pod.ip(&["link", "set", "eth0", "up"])?;
        pod.ip(&[
            "route",
            "add",
            &format!("{POD_GATEWAY_V4}/32"),
            "dev",
            "eth0",
        ])?;
        pod.ip(&[
            "route",
            "add",
            "default",
            "via",
            &POD_GATEWAY_V4.to_string(),
            "dev",
            "eth0",
        ])?;
        pod.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &POD_GATEWAY_V6.to_string(),
            "dev",
            "eth0",
        ])?;
        let mut batch = String::new();
        for ip in &pods[i] {
            match ip {
                IpAddr::V4(_) => batch += &format!("addr add {ip}/32 dev eth0\n"),
                IpAddr::V6(_) => batch += &format!("addr add {ip}/128 dev eth0 nodad\n"),
            }
        }
        if !batch.is_empty() {
            pod.ip_batch(&batch)?;
        }
        out.push(pod);
    }
    for (i, node) in nodes.iter().enumerate() {
        let mut batch = String::new();
        for (j, ips) in pods.iter().enumerate() {
            for ip in ips {
                let len = if ip.is_ipv4() { 32 } else { 128 };
                if i == j {
                    batch += &format!("route add {ip}/{len} dev pod0\n");
                } else {
                    let via: IpAddr = match ip {
                        IpAddr::V4(_) => node_v4(j).into(),
                        IpAddr::V6(_) => node_v6(j).into(),
                    };
                    batch += &format!("route add {ip}/{len} via {via}\n");
                }
            }
        }
        if !batch.is_empty() {
            node.ip_batch(&batch)?;
        }
    }
    Ok(out)
}

/// kube-proxy's configuration for node `i` in `mode`, the Pods' addresses in `cluster_cidrs`.
pub fn config(mode: KubeProxy, i: usize, kubeconfig: &Path, cluster_cidrs: &str) -> String {
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: {mode}
hostnameOverride: {node}
clientConnection:
  kubeconfig: {kubeconfig}
clusterCIDR: {cluster_cidrs}
healthzBindAddress: 0.0.0.0:{HEALTHZ_PORT}
metricsBindAddress: 127.0.0.1:10249
# The lab's node namespaces share one kernel: leave the global conntrack table size alone.
conntrack:
  maxPerCore: 0
  min: 0
ipvs:
  strictARP: true
",
        mode = mode.as_str(),
        node = NODE_NAMES[i],
        kubeconfig = kubeconfig.display(),
    )
}

/// Starts kube-proxy in node `i`'s namespace, with its configuration and log in `dir`.
pub fn start(
    mode: KubeProxy,
    node: &Namespace,
    i: usize,
    kubeconfig: &Path,
    cluster_cidrs: &str,
    dir: &Path,
) -> Result<Process> {
    let bin = binary();
    if !bin.exists() {
        return Err(LabError::KubeProxy(format!(
            "{} is missing: build it with `scripts/realkube node`",
            bin.display()
        )));
    }
    let file = dir.join(format!("kube-proxy-{}.yaml", NODE_NAMES[i]));
    std::fs::write(&file, config(mode, i, kubeconfig, cluster_cidrs)).map_err(|source| {
        LabError::Io {
            context: format!("writing {}", file.display()),
            source,
        }
    })?;
    let log = dir.join(format!("kube-proxy-{}.log", NODE_NAMES[i]));
    Ok(node.spawn(
        &[
            bin.as_os_str(),
            "--config".as_ref(),
            file.as_os_str(),
            "--v=2".as_ref(),
        ],
        &log,
    )?)
}

/// Waits until every kube-proxy answers `/healthz` with 200 (it has synced its rules once),
/// or fails with the log tail of the first that does not (or exited).
pub fn wait_ready(nodes: &[Namespace], procs: &mut [Process], within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    for (i, node) in nodes.iter().enumerate() {
        let addr = SocketAddr::new(node_v4(i).into(), HEALTHZ_PORT);
        loop {
            let ok = super::standin::get(node.name(), addr, "/healthz", Duration::from_secs(1))
                .is_ok_and(|a| a.status == 200);
            if ok {
                break;
            }
            let alive = procs[i].alive();
            if !alive || Instant::now() > deadline {
                let tail = super::last_lines(&procs[i].output(), 15);
                return Err(LabError::KubeProxy(format!(
                    "kube-proxy on {} {} (log {}):\n{}",
                    NODE_NAMES[i],
                    if alive {
                        "did not report healthy in time"
                    } else {
                        "exited"
                    },
                    procs[i].log().display(),
                    tail
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}
