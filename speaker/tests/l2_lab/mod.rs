//! A layer-2 lab in network namespaces: a bridge in a switch namespace, node namespaces running
//! `l2-probe`, a client namespace with `arping` / `ndisc6`. Shared by the `l2_*` tests.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Node names used for election, index-aligned with the node namespaces.
pub const NODE_NAMES: [&str; 3] = ["node-0", "node-1", "node-2"];

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Runs `ip`-style commands and returns their output.
pub fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"))
}

fn must(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

use ferrolb_tests::skip::skip;

/// Moves the calling thread into the network namespace at `path` (`/run/netns/NAME`); threads
/// it starts afterwards begin there too. `ferrolb_tests::netns::enter` makes the same call; the
/// speaker's tests do not depend on that crate.
#[allow(unsafe_code)]
fn enter_netns(path: &str) {
    use std::os::fd::AsRawFd;
    let file = File::open(path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    // SAFETY: setns(2) reads a descriptor we own for the duration of the call and a constant;
    // it touches no memory of ours and moves only this thread, as asked.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({path}): {}", std::io::Error::last_os_error());
}

fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    out: PathBuf,
}

/// The namespaces and processes of one test; all removed on drop.
pub struct Lab {
    prefix: String,
    switch: String,
    client: String,
    nodes: Vec<String>,
    probes: Vec<Option<Probe>>,
    watch: Option<Probe>,
    dir: PathBuf,
}

impl Lab {
    /// Builds the lab with `n` nodes, or prints why it cannot and returns `None`.
    pub fn new(n: usize) -> Option<Lab> {
        let root = run("id", &["-u"]);
        if String::from_utf8_lossy(&root.stdout).trim() != "0" {
            return skip("needs root for network namespaces");
        }
        for bin in ["ip", "arping", "ndisc6"] {
            if !have(bin) {
                return skip(format!(
                    "`{bin}` is not installed (apt-get install iproute2 iputils-arping ndisc6)"
                ));
            }
        }
        let prefix = format!(
            "fl2-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab {
            switch: format!("{prefix}-sw"),
            client: format!("{prefix}-c"),
            nodes: (0..n).map(|i| format!("{prefix}-n{i}")).collect(),
            probes: (0..n).map(|_| None).collect(),
            watch: None,
            prefix,
            dir,
        };
        lab.build();
        Some(lab)
    }

    fn build(&mut self) {
        let sw = self.switch.clone();
        for ns in std::iter::once(&self.switch)
            .chain(std::iter::once(&self.client))
            .chain(&self.nodes)
        {
            must("ip", &["netns", "add", ns]);
        }
        // Multicast snooping would make the bridge drop malformed IPv6 before the nodes see it.
        must(
            "ip",
            &[
                "-n",
                &sw,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ],
        );
        must("ip", &["-n", &sw, "link", "set", "br0", "up"]);
        // With br_netfilter loaded (bridge-nf-call-ip6tables=1, as on Docker hosts), the bridge
        // validates IPv6 headers and drops malformed ones; a real switch does not.
        for family in ["iptables", "ip6tables", "arptables"] {
            let key = format!("net.bridge.bridge-nf-call-{family}=0");
            let _ = run("ip", &["netns", "exec", &sw, "sysctl", "-qw", &key]);
        }
        let hosts: Vec<(String, String, String)> = std::iter::once((
            self.client.clone(),
            "10.99.0.2/24".to_string(),
            "fd00:99::2/64".to_string(),
        ))
        .chain(self.nodes.iter().enumerate().map(|(i, ns)| {
            let (v4, v6) = node_addrs(i);
            (ns.clone(), v4, v6)
        }))
        .collect();
        for (i, (ns, v4, v6)) in hosts.iter().enumerate() {
            self.link_host(i, ns, v4, v6, None);
        }
    }

    /// Connects host `ns` to the bridge through switch port `p{port}` (a veth whose other end
    /// is the host's `eth0`, with `mac` if given), with its addresses, up.
    fn link_host(&self, port: usize, ns: &str, v4: &str, v6: &str, mac: Option<&str>) {
        let sw = &self.switch;
        let port = format!("p{port}");
        let mut add = vec![
            "-n", sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ];
        if let Some(mac) = mac {
            add.extend(["address", mac]);
        }
        must("ip", &add);
        must(
            "ip",
            &["-n", sw, "link", "set", &port, "master", "br0", "up"],
        );
        must("ip", &["-n", ns, "addr", "add", v4, "dev", "eth0"]);
        must("ip", &["-n", ns, "addr", "add", v6, "dev", "eth0", "nodad"]);
        must("ip", &["-n", ns, "link", "set", "eth0", "up"]);
        must("ip", &["-n", ns, "link", "set", "lo", "up"]);
    }

    /// Deletes node `i`'s `eth0` (and its switch port) and creates it again, same name and
    /// addresses, with the MAC `mac` and a new interface index.
    pub fn recreate_node_link(&self, i: usize, mac: &str) {
        must("ip", &["-n", &self.nodes[i], "link", "del", "eth0"]);
        let (v4, v6) = node_addrs(i);
        self.link_host(i + 1, &self.nodes[i], &v4, &v6, Some(mac));
    }

    /// Runs `f` on a thread inside node `i`'s network namespace: the interfaces it reads and
    /// the sockets and threads it creates are the node's. Lab methods work from there too.
    pub fn in_node<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.nodes[i]);
        std::thread::scope(|scope| {
            let thread = scope.spawn(|| {
                enter_netns(&path);
                f()
            });
            thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Starts `l2-probe` in node `i` owning `addrs`; with `control`, its owned set can be
    /// changed later with [`Lab::control`].
    pub fn start_probe(&mut self, i: usize, addrs: &[String], control: bool) {
        let mut args = Vec::new();
        if control {
            args.push("--control".to_string());
        }
        args.extend(addrs.iter().cloned());
        self.start_probe_with(i, &args, control);
    }

    /// Starts node `i`'s probe in gossip mode: it owns what the election gives it among the
    /// live speakers of the lab, all sharing one key. `candidates` are the Service addresses.
    pub fn start_gossip_probe(&mut self, i: usize, candidates: &[String]) {
        self.start_gossip_probe_with(i, candidates, &[]);
    }

    /// [`Lab::start_gossip_probe`] with more `l2-probe` flags (`--prefer`, `--hold-down-ms`).
    pub fn start_gossip_probe_with(&mut self, i: usize, candidates: &[String], flags: &[String]) {
        let key = self.dir.join("gossip.key");
        if !key.exists() {
            std::fs::write(&key, b"lab gossip key, 32 bytes long...").unwrap();
        }
        let mut args = vec![
            "--node".to_string(),
            NODE_NAMES[i].into(),
            "--listen".into(),
            format!("{}:7946", self.node_ip(i)),
            "--key-file".into(),
            key.display().to_string(),
        ];
        for (j, name) in NODE_NAMES.iter().enumerate().take(self.nodes.len()) {
            args.push("--peer".into());
            args.push(format!("{name}@{}:7946", self.node_ip(j)));
        }
        args.extend(flags.iter().cloned());
        args.extend(candidates.iter().cloned());
        self.start_probe_with(i, &args, false);
    }

    /// Node `i`'s IPv4 address.
    pub fn node_ip(&self, i: usize) -> String {
        format!("10.99.0.{}", 11 + i)
    }

    /// Kills node `i`'s probe with SIGKILL and waits for it.
    pub fn kill_probe(&mut self, i: usize) {
        if let Some(p) = self.probes[i].as_mut() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// Everything node `i`'s probe printed so far.
    pub fn probe_output(&self, i: usize) -> String {
        self.probes[i]
            .as_ref()
            .and_then(|p| std::fs::read_to_string(&p.out).ok())
            .unwrap_or_default()
    }

    /// Starts `l2-watch` in the client for `addrs`; its lines are read with [`Lab::watch_output`].
    pub fn start_watch(&mut self, addrs: &[String]) {
        let out = self.dir.join("watch.out");
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            self.client.clone(),
            ferrolb_tests::tool("l2-watch"),
            "eth0".into(),
        ];
        args.extend(addrs.iter().cloned());
        let child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting l2-watch");
        self.watch = Some(Probe {
            child,
            stdin: None,
            out,
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.watch_output().starts_with("ready") {
            assert!(Instant::now() < deadline, "l2-watch did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What `l2-watch` printed so far.
    pub fn watch_output(&self) -> String {
        self.watch
            .as_ref()
            .and_then(|p| std::fs::read_to_string(&p.out).ok())
            .unwrap_or_default()
    }

    fn start_probe_with(&mut self, i: usize, extra: &[String], stdin: bool) {
        let out = self.dir.join(format!("probe-{i}.out"));
        let mut args = vec![
            "netns".to_string(),
            "exec".into(),
            self.nodes[i].clone(),
            ferrolb_tests::tool("l2-probe"),
            "--stats-ms".into(),
            "100".into(),
        ];
        args.extend(extra.iter().cloned());
        let control = stdin;
        let mut child = Command::new("ip")
            .args(&args)
            .stdin(if control {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting l2-probe");
        let stdin = child.stdin.take();
        self.probes[i] = Some(Probe { child, stdin, out });
    }

    /// Waits until every started probe printed its first counters line (it is up).
    pub fn wait_for_probes(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for i in 0..self.probes.len() {
            if self.probes[i].is_none() {
                continue;
            }
            while self.last_stats_line(i).is_none() {
                assert!(self.probe_alive(i), "probe {i} exited at start");
                assert!(Instant::now() < deadline, "probe {i} printed nothing");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn last_stats_line(&self, i: usize) -> Option<String> {
        let p = self.probes[i].as_ref()?;
        let text = std::fs::read_to_string(&p.out).ok()?;
        text.lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .map(str::to_owned)
    }

    /// The latest counters printed by node `i`'s probe.
    pub fn probe_stats(&self, i: usize) -> serde_json::Value {
        let line = self.last_stats_line(i).expect("no counters yet");
        serde_json::from_str(&line).unwrap()
    }

    /// Whether node `i`'s probe is still running.
    pub fn probe_alive(&mut self, i: usize) -> bool {
        self.probes[i]
            .as_mut()
            .is_some_and(|p| matches!(p.child.try_wait(), Ok(None)))
    }

    /// Sends a new owned set to node `i`'s probe and waits until it applied it.
    pub fn control(&mut self, i: usize, line: &str) {
        let p = self.probes[i].as_mut().expect("probe not started");
        let before = std::fs::read_to_string(&p.out)
            .unwrap_or_default()
            .matches("owned ")
            .count();
        let stdin = p.stdin.as_mut().expect("probe started without --control");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(&p.out)
            .unwrap_or_default()
            .matches("owned ")
            .count()
            == before
        {
            assert!(
                Instant::now() < deadline,
                "probe {i} did not apply `{line}`"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The MAC of node `i`'s `eth0`, lower case.
    pub fn node_mac(&self, i: usize) -> String {
        mac_of(&self.nodes[i])
    }

    /// The MACs that answered the client for `ip`: `arping` for IPv4, `ndisc6` (all replies)
    /// for IPv6. Lower case.
    pub fn resolve(&self, ip: IpAddr) -> BTreeSet<String> {
        let target = ip.to_string();
        let out = match ip {
            IpAddr::V4(_) => run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &self.client,
                    "arping",
                    "-c",
                    "3",
                    "-w",
                    "2",
                    "-I",
                    "eth0",
                    &target,
                ],
            ),
            IpAddr::V6(_) => run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &self.client,
                    "ndisc6",
                    "-n",
                    "-m",
                    "-r",
                    "2",
                    "-w",
                    "700",
                    &target,
                    "eth0",
                ],
            ),
        };
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        text.lines()
            .filter_map(|l| {
                if let Some(rest) = l.strip_prefix("unicast reply from ") {
                    let open = rest.find('[')?;
                    let close = rest.find(']')?;
                    Some(rest[open + 1..close].to_string())
                } else {
                    l.strip_prefix("target link-layer address: ")
                        .map(|m| m.trim().to_string())
                }
            })
            .collect()
    }

    /// Makes the client's kernel resolve `ip` by sending it one UDP datagram (arping and ndisc6
    /// do not fill the kernel's cache).
    pub fn client_learn(&self, ip: &str) {
        let _ = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.client,
                "bash",
                "-c",
                &format!("echo x > /dev/udp/{ip}/9"),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.client_neigh(ip).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The MAC the client's kernel holds for `ip`, if any.
    pub fn client_neigh(&self, ip: &str) -> Option<String> {
        let out = run(
            "ip",
            &["-n", &self.client, "neigh", "show", ip, "dev", "eth0"],
        );
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        let mut words = text.split_whitespace();
        while let Some(w) = words.next() {
            if w == "lladdr" {
                return words.next().map(str::to_owned);
            }
        }
        None
    }

    /// Runs `l2-flood` in the client and returns its JSON report.
    pub fn flood(&self, count: usize, v4: &str, v6: &str) -> serde_json::Value {
        let out = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.client,
                &ferrolb_tests::tool("l2-flood"),
                "eth0",
                &count.to_string(),
                v4,
                v6,
            ],
        );
        assert!(
            out.status.success(),
            "l2-flood: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The name of the client namespace.
    pub fn client(&self) -> &str {
        &self.client
    }

    /// The name of node `i`'s namespace.
    pub fn node(&self, i: usize) -> &str {
        &self.nodes[i]
    }
}

/// Node `i`'s addresses on `eth0`, with their prefix.
fn node_addrs(i: usize) -> (String, String) {
    (
        format!("10.99.0.{}/24", 11 + i),
        format!("fd00:99::{}/64", 11 + i),
    )
}

fn mac_of(ns: &str) -> String {
    let out = run("ip", &["-n", ns, "link", "show", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "link/ether" {
            return words.next().unwrap().to_string();
        }
    }
    panic!("no MAC on eth0 in {ns}: {text}");
}

impl Drop for Lab {
    fn drop(&mut self) {
        for p in self.probes.iter_mut().flatten().chain(self.watch.as_mut()) {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        for ns in self.nodes.iter().chain([&self.client, &self.switch]) {
            let _ = run("ip", &["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = &self.prefix;
    }
}
