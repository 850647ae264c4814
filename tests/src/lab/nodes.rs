//! Real nodes for the lab (`ferrolb-lab --cluster real`): in each node namespace a real kubelet
//! of the API server's own release (`scripts/realkube node`) with a containerd and runc of its
//! own (Debian's), Pods on a CNI bridge (Debian's `containernetworking-plugins`), and
//! kube-scheduler beside the API server. The images come from `target/images/*.oci.tar`
//! (`scripts/images`), imported into each node's containerd: nothing is pulled, and the Pod
//! sandboxes run the lab's own image (`ferrolb-echo` pauses without arguments).
//!
//! ```text
//!   switch ns: kube-apiserver, etcd, kube-controller-manager, kube-scheduler
//!   node ns (node-a): kubelet ──CRI──► containerd ──► runc: Pods
//!       cni0 10.99.16.1/24, fd00:99:16:1::1/64 ── Pods (10.99.16.x, fd00:99:16:1::x)
//!       kube-proxy; the chart's speaker Pod (host network)
//!   routes: each node and the switch reach node N's Pods through node N's address
//! ```
//!
//! What the sandbox this runs in needs (found here, Linux 6.18, no `CAP_SYS_RESOURCE`):
//! - kubelet, containerd and runc enter only the node's network namespace (`nsenter --net`), not
//!   a mount namespace of their own: `ip netns exec` mounts a fresh `/sys` there, which hides the
//!   cgroup mounts ("failed to find cgroup mounts", "no cgroup mount found in mountinfo");
//! - containerd's `restrict_oom_score_adj`: runc could not lower a sandbox's `oom_score_adj` to
//!   kubelet's -998 without `CAP_SYS_RESOURCE` ("failed to update /proc/self/oom_score_adj:
//!   Permission denied"); it keeps containerd's own 0 instead;
//! - kubelet's `failCgroupV1: false`: these machines mount cgroup v1 (hybrid), which kubelet
//!   1.35 and later refuse by default; and no QoS cgroups (`cgroupsPerQOS: false`), so that the
//!   three kubelets sharing one host's cgroups do not manage the same ones.
//!
//! Each node's containerd keeps its root, state and sockets under the lab's directory (its Pod
//! network namespaces in `/run/netns`, as `cni-*`); [`RealNodes::stop`] kills the containers,
//! unmounts what they mounted and removes their namespaces, so that nothing outlives the lab.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{LabError, Result};
use crate::netns::topology::{NODE_NAMES, Topology, node_v4, node_v6};
use crate::netns::{self, Namespace, Process};

/// Each node's Pod subnets (IPv4), in the order of [`NODE_NAMES`].
pub const POD_CIDRS_V4: [&str; 3] = ["10.99.16.0/24", "10.99.17.0/24", "10.99.18.0/24"];
/// Each node's Pod subnets (IPv6).
pub const POD_CIDRS_V6: [&str; 3] = [
    "fd00:99:16:1::/64",
    "fd00:99:16:2::/64",
    "fd00:99:16:3::/64",
];
/// Every Pod address (kube-proxy's `clusterCIDR`).
pub const CLUSTER_CIDRS: &str = "10.99.16.0/20,fd00:99:16::/48";
/// The CNI plugins' directory (Debian's `containernetworking-plugins`).
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The tools real nodes need, with their Debian packages.
pub const TOOLS: &[(&str, &str)] = &[
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("nsenter", "util-linux"),
];

/// The images every node imports: FerroLB's two and the lab's own (`scripts/images`).
pub fn images() -> Result<Vec<PathBuf>> {
    let dir = crate::built_dir("FERROLB_IMAGES_DIR", "images");
    let version = env!("CARGO_PKG_VERSION");
    let files: Vec<PathBuf> = ["controller", "speaker", "echo"]
        .iter()
        .map(|c| dir.join(format!("ferrolb-{c}-{version}.oci.tar")))
        .collect();
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        return Err(LabError::Nodes(format!(
            "{} is missing: build the images with `scripts/images`",
            missing.display()
        )));
    }
    if !Path::new(CNI_BIN_DIR).join("bridge").is_file() {
        return Err(LabError::Nodes(format!(
            "{CNI_BIN_DIR}/bridge is missing: install the Debian package containernetworking-plugins"
        )));
    }
    Ok(files)
}

/// The name an image archive was tagged with (`ghcr.io/ferrolb/ferrolb-echo:0.1.0`).
pub fn image_name(component: &str) -> String {
    format!(
        "ghcr.io/ferrolb/ferrolb-{component}:{}",
        env!("CARGO_PKG_VERSION")
    )
}

struct Node {
    dir: PathBuf,
    socket: PathBuf,
    containerd: Process,
    kubelet: Option<Process>,
}

/// The running real nodes and the scheduler. [`RealNodes::stop`] (or dropping) removes every
/// container, mount and Pod network namespace they made.
pub struct RealNodes {
    nodes: Vec<Node>,
    /// The node namespaces' names, in the order of [`NODE_NAMES`].
    netns: Vec<String>,
    scheduler: Option<Process>,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> LabError {
    move |source| LabError::Io { context, source }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))
}

/// containerd's configuration for a node whose files live in `dir`.
fn containerd_config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
        sandbox = image_name("echo"),
    )
}

/// The CNI network of node `i`: a bridge with both families' Pod subnets.
fn cni_config(i: usize, dir: &Path) -> String {
    format!(
        r#"{{"cniVersion": "1.0.0", "name": "lab", "plugins": [
  {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {{"type": "host-local", "dataDir": "{d}/ipam",
      "ranges": [[{{"subnet": "{v4}"}}], [{{"subnet": "{v6}"}}]],
      "routes": [{{"dst": "0.0.0.0/0"}}, {{"dst": "::/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
]}}
"#,
        d = dir.display(),
        v4 = POD_CIDRS_V4[i],
        v6 = POD_CIDRS_V6[i],
    )
}

/// kubelet's configuration for node `i`.
fn kubelet_config(i: usize, dir: &Path) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{d}/containerd.sock
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
# This sandbox mounts cgroup v1; three kubelets share its cgroups (module docs).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
resolvConf: \"\"
podCIDR: {v4}
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
nodeStatusReportFrequency: 10s
podLogsDir: {d}/pod-logs
",
        d = dir.display(),
        ip = node_v4(i),
        v4 = POD_CIDRS_V4[i],
    )
}

impl RealNodes {
    /// Starts containerd on every node, imports `images` into it, wires the Pod subnets, then
    /// starts the kubelets (which register their Nodes) and kube-scheduler in the switch.
    /// Returns once every containerd answers; the caller waits for the Nodes to be Ready.
    pub fn start(
        topo: &Topology,
        kubeconfig: &Path,
        dir: &Path,
        images: &[PathBuf],
    ) -> Result<Self> {
        netns::require_tools(TOOLS)?;
        let bin = crate::realkube::bin_dir();
        for b in ["kubelet", "kube-scheduler"] {
            if !bin.join(b).is_file() {
                return Err(LabError::Nodes(format!(
                    "{} is missing: build it with `scripts/realkube node`",
                    bin.join(b).display()
                )));
            }
        }
        let mut out = Self {
            nodes: Vec::new(),
            netns: topo.nodes.iter().map(|n| n.name().to_owned()).collect(),
            scheduler: None,
        };
        for (i, name) in NODE_NAMES.iter().enumerate() {
            let d = dir.join(format!("node-{name}"));
            for sub in ["cni", "kubelet", "ipam"] {
                std::fs::create_dir_all(d.join(sub))
                    .map_err(io(format!("creating {}", d.join(sub).display())))?;
            }
            write(&d.join("containerd.toml"), &containerd_config(&d))?;
            write(&d.join("cni/10-lab.conflist"), &cni_config(i, &d))?;
            write(&d.join("kubelet.yaml"), &kubelet_config(i, &d))?;
            let node = topo.node(i);
            node.sysctl("net.ipv4.ip_forward=1")?;
            node.sysctl("net.ipv6.conf.all.forwarding=1")?;
            let config = d.join("containerd.toml");
            let containerd = node.spawn_with_host_mounts(
                &[
                    "containerd".as_ref(),
                    "--config".as_ref(),
                    config.as_os_str(),
                ],
                &d.join("containerd.log"),
            )?;
            out.nodes.push(Node {
                socket: d.join("containerd.sock"),
                dir: d,
                containerd,
                kubelet: None,
            });
        }
        for node in &mut out.nodes {
            wait_for_socket(node)?;
            for image in images {
                let sock = node.socket.display().to_string();
                netns::must(&[
                    "ctr".as_ref(),
                    "-a".as_ref(),
                    sock.as_ref(),
                    "-n".as_ref(),
                    "k8s.io".as_ref(),
                    "images".as_ref(),
                    "import".as_ref(),
                    image.as_os_str(),
                ])?;
            }
        }
        route_pods(topo)?;
        for (i, name) in NODE_NAMES.iter().enumerate() {
            let d = out.nodes[i].dir.clone();
            let ips = format!("{},{}", node_v4(i), node_v6(i));
            let kubelet = topo.node(i).spawn_with_host_mounts(
                &[
                    bin.join("kubelet").as_os_str(),
                    "--config".as_ref(),
                    d.join("kubelet.yaml").as_os_str(),
                    "--kubeconfig".as_ref(),
                    kubeconfig.as_os_str(),
                    "--root-dir".as_ref(),
                    d.join("kubelet").as_os_str(),
                    "--hostname-override".as_ref(),
                    name.as_ref(),
                    "--node-ip".as_ref(),
                    ips.as_ref(),
                    "--v=1".as_ref(),
                ],
                &d.join("kubelet.log"),
            )?;
            out.nodes[i].kubelet = Some(kubelet);
        }
        let scheduler = topo.switch.spawn(
            &[
                bin.join("kube-scheduler").as_os_str(),
                "--kubeconfig".as_ref(),
                kubeconfig.as_os_str(),
                "--leader-elect=false".as_ref(),
                "--secure-port=0".as_ref(),
            ],
            &dir.join("kube-scheduler.log"),
        )?;
        out.scheduler = Some(scheduler);
        Ok(out)
    }

    /// The pids of node `i`'s running containers whose process is `program` (its path's last
    /// part), from containerd's task list and `/proc`.
    pub fn container_pids(&self, i: usize, program: &str) -> Vec<u32> {
        self.task_pids(i)
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .ok()
                    .and_then(|c| c.split('\0').next().map(str::to_owned))
                    .is_some_and(|exe| exe.rsplit('/').next() == Some(program))
            })
            .collect()
    }

    /// The network namespace of one of node `i`'s Pods off the host network
    /// (`/proc/PID/ns/net` of its process), if it runs any.
    pub fn pod_netns(&self, i: usize) -> Option<String> {
        let host = ns_inode(&format!("/run/netns/{}", self.netns[i]))?;
        self.task_pids(i)
            .into_iter()
            .map(|pid| format!("/proc/{pid}/ns/net"))
            .find(|path| ns_inode(path).is_some_and(|ino| ino != host))
    }

    /// The pids of node `i`'s running containers.
    fn task_pids(&self, i: usize) -> Vec<u32> {
        let sock = self.nodes[i].socket.display().to_string();
        let Ok(out) = netns::must(&["ctr", "-a", &sock, "-n", "k8s.io", "tasks", "ls"]) else {
            return Vec::new();
        };
        out.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok())
            .collect()
    }

    /// The last `lines` lines of every container log (kubelet's `podLogsDir` of each node)
    /// whose Pod name contains `pod`, each headed by its file (for failure messages).
    pub fn container_logs(&self, pod: &str, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let Ok(pods) = std::fs::read_dir(node.dir.join("pod-logs")) else {
                continue;
            };
            for p in pods
                .flatten()
                .filter(|p| p.file_name().to_string_lossy().contains(pod))
            {
                for c in std::fs::read_dir(p.path()).into_iter().flatten().flatten() {
                    for f in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
                        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                        let last = super::last_lines(&text, lines);
                        out += &format!("--- {}\n{last}\n", f.path().display());
                    }
                }
            }
        }
        out
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) node `i`'s kubelet: frozen, it restarts no
    /// container, so a killed speaker stays down, as on a node whose kubelet is wedged.
    pub fn freeze_kubelet(&self, i: usize, frozen: bool) {
        if let Some(k) = &self.nodes[i].kubelet {
            let signal = if frozen { "-STOP" } else { "-CONT" };
            let _ = netns::run(&["kill", signal, &k.pid().to_string()]);
        }
    }

    /// Node `i`'s kubelet log so far.
    pub fn kubelet_log(&self, i: usize) -> String {
        self.nodes[i]
            .kubelet
            .as_ref()
            .map(Process::output)
            .unwrap_or_default()
    }

    /// Stops the scheduler and kubelets, kills every container, then containerd and its shims,
    /// and unmounts and removes what they left under the lab's directory (root filesystems,
    /// volumes, Pod network namespaces).
    pub fn stop(&mut self) {
        self.scheduler.take();
        for node in &mut self.nodes {
            node.kubelet.take();
        }
        // The Pods' network namespaces (containerd 1.6 keeps them in /run/netns as cni-*),
        // known by the namespace of each container's process while it still runs.
        let pod_namespaces: Vec<u64> = (0..self.nodes.len())
            .flat_map(|i| self.task_pids(i))
            .filter_map(|pid| ns_inode(&format!("/proc/{pid}/ns/net")))
            .collect();
        for node in &mut self.nodes {
            let sock = node.socket.display().to_string();
            let ctr = |args: &[&str]| {
                let mut full = vec!["ctr", "-a", &sock, "-n", "k8s.io"];
                full.extend_from_slice(args);
                netns::run(&full)
            };
            if let Ok(out) = ctr(&["tasks", "ls", "-q"]) {
                let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect();
                for id in &ids {
                    let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
                }
                for id in &ids {
                    let _ = ctr(&["tasks", "delete", "-f", id]);
                }
            }
            node.containerd.kill();
            let _ = netns::run(&["pkill", "-9", "-f", &format!("-address {sock}")]);
        }
        for node in &self.nodes {
            unmount_under(&node.dir);
        }
        for name in netns::list_namespaces() {
            let path = format!("/run/netns/{name}");
            if name.starts_with("cni-")
                && ns_inode(&path).is_some_and(|i| pod_namespaces.contains(&i))
            {
                let _ = netns::run(&["ip", "netns", "del", &name]);
            }
        }
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_for_socket(node: &mut Node) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let sock = node.socket.display().to_string();
    loop {
        if netns::run(&["ctr", "-a", &sock, "version"]).is_ok_and(|o| o.status.success()) {
            return Ok(());
        }
        if !node.containerd.alive() || Instant::now() > deadline {
            return Err(LabError::Nodes(format!(
                "containerd ({}) did not answer:\n{}",
                node.containerd.log().display(),
                super::last_lines(&node.containerd.output(), 15)
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Routes to every node's Pod subnets: on the other nodes and in the switch (where the API
/// server answers the Pods), through that node's address.
fn route_pods(topo: &Topology) -> Result<()> {
    let hosts: Vec<(Option<usize>, &Namespace)> = topo
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (Some(i), n))
        .chain([(None, &topo.switch)])
        .collect();
    for (me, ns) in hosts {
        let mut batch = String::new();
        for j in 0..NODE_NAMES.len() {
            if me == Some(j) {
                continue;
            }
            let (v4, v6): (IpAddr, IpAddr) = (node_v4(j).into(), node_v6(j).into());
            batch += &format!("route add {} via {v4}\n", POD_CIDRS_V4[j]);
            batch += &format!("route add {} via {v6}\n", POD_CIDRS_V6[j]);
        }
        ns.ip_batch(&batch)?;
    }
    Ok(())
}

/// Unmounts every mount below `dir` (deepest first, lazily), so the directory can be removed.
fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.display().to_string();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = netns::run(&["umount", "-l", p]);
    }
}

/// The inode of a network namespace file (`/proc/PID/ns/net`, `/run/netns/NAME`).
fn ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
