//! The speaker at cluster scale: the release `ferrolb-speaker` against a real kube-apiserver
//! (`scripts/realkube` builds it; `FERROLB_APISERVER=double` uses the in-repo test server) holding
//! N LoadBalancer Services, each with one ready endpoint in its own EndpointSlice, plus other
//! (headless) Services with a slice each, and many Nodes. The speaker is alone (no gossip key),
//! so it owns every address; it answers on a veth whose far end the bench captures with tcpdump.
//!
//! ```sh
//! cargo bench -p ferrolb-speaker --bench scale                       # 1,000 and 10,000
//! FERROLB_BENCH_SERVICES=1000 FERROLB_BENCH_OTHERS=5000 cargo bench -p ferrolb-speaker --bench scale
//! ```
//!
//! Prints, for each N: the time from start to the caches synced (the speaker's own log), from
//! start to the first gratuitous ARP of the last address (every address answered), the RSS once
//! settled and the peak, the idle CPU over 30 s with nothing changing, and the time from one
//! Service's status patch to its new address's first gratuitous ARP (p50/p99/max over 100
//! changes). Needs root, `ip` and `tcpdump`. Prints figures; asserts nothing.
//!
//! `FERROLB_BENCH_SYSTEMS=ferrolb,metallb` runs MetalLB v0.16's speaker too (`scripts/metallb`),
//! each with its own CRDs and the same pool and layer-2 advertisement (from node-0000 only, so
//! that MetalLB's speaker, without memberlist, also owns every address), one after the other:
//! the same figures side by side, except the two MetalLB's log and metrics do not give (caches
//! synced, status written).
//!
//! `FERROLB_BENCH_WRAP="heaptrack -o /tmp/speaker"` runs the speaker under a profiler (the command
//! and its arguments, split on spaces); the CPU and RSS figures are then the wrapper's, not the
//! speaker's.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrolb_tests::backend::{Backend, BackendKind};
use ferrolb_tests::realkube::RealKubeConfig;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

const NS: &str = "ferrolb-system";
const APPS: &str = "bench";
const NETNS: &str = "fbscale-node";
const HOST_IF: &str = "fbscale0";
const NODE_IF: &str = "eth0";
const API_ADDR: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
const NODE_ADDR: &str = "10.250.0.2/24";
/// The pool: the speaker's interface holds 10.128.255.254/16, so every address is on-link.
const POOL: &str = "10.128.0.0/16";
const CONCURRENCY: usize = 32;
const CHANGES: usize = 100;

/// Which speaker runs: FerroLB's, or MetalLB v0.16's (`scripts/metallb`) with the equivalent
/// configuration, for the side-by-side figures (`FERROLB_BENCH_SYSTEMS=ferrolb,metallb`).
#[derive(Clone, Copy, PartialEq, Debug)]
enum System {
    FerroLb,
    MetalLb,
}

impl System {
    /// Its name in `FERROLB_BENCH_SYSTEMS`.
    fn key(self) -> &'static str {
        match self {
            System::FerroLb => "ferrolb",
            System::MetalLb => "metallb",
        }
    }

    fn name(self) -> &'static str {
        match self {
            System::FerroLb => "FerroLB",
            System::MetalLb => "MetalLB",
        }
    }

    fn namespace(self) -> &'static str {
        match self {
            System::FerroLb => NS,
            System::MetalLb => ferrolb_tests::metallb::NAMESPACE,
        }
    }
}

fn run(cmd: &str, args: &[&str]) -> std::process::Output {
    Command::new(cmd).args(args).output().expect(cmd)
}

fn ok(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 128, (i / 250) as u8, (i % 250 + 1) as u8)
}

fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The first gratuitous ARP time (epoch seconds, tcpdump's clock) per announced address, read
/// from tcpdump's output as it grows (each call parses only the new lines).
struct Garps {
    path: PathBuf,
    read: usize,
    first: HashMap<Ipv4Addr, f64>,
}

impl Garps {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            read: 0,
            first: HashMap::new(),
        }
    }

    fn poll(&mut self) -> &HashMap<Ipv4Addr, f64> {
        let text = std::fs::read(&self.path).unwrap_or_default();
        let complete = text[self.read..]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(self.read, |i| self.read + i + 1);
        for line in String::from_utf8_lossy(&text[self.read..complete]).lines() {
            let Some((ts, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(ts) = ts.parse::<f64>() else { continue };
            // Gratuitous: "Request who-has X tell X" or "Reply X is-at ...".
            let target = rest
                .split_once("who-has ")
                .map(|(_, r)| r)
                .or_else(|| rest.split_once("Reply ").map(|(_, r)| r))
                .and_then(|r| r.split([' ', ',']).next())
                .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
            if let Some(ip) = target {
                self.first.entry(ip).or_insert(ts);
            }
        }
        self.read = complete;
        &self.first
    }
}

async fn create_all<K>(api: Api<K>, objects: Vec<K>)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    futures::stream::iter(objects)
        .for_each_concurrent(CONCURRENCY, |o| {
            let api = api.clone();
            async move {
                for _ in 0..50 {
                    match api.create(&PostParams::default(), &o).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                panic!("could not create an object");
            }
        })
        .await;
}

fn from_json<K: DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).expect("a valid object")
}

fn lb_service(i: usize) -> Service {
    from_json(json!({
        "metadata": {"name": format!("lb-{i:05}"), "namespace": APPS},
        "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                 "ports": [{"port": 80}]},
    }))
}

fn slice(service: &str, node: &str) -> EndpointSlice {
    from_json(json!({
        "metadata": {"name": format!("{service}-1"), "namespace": APPS,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.1"], "nodeName": node,
                       "conditions": {"ready": true}}],
    }))
}

async fn populate(client: &kube::Client, system: System, n: usize, others: usize, nodes: usize) {
    let t = Instant::now();
    for ns in [system.namespace(), APPS] {
        let _ = Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &from_json(json!({"metadata": {"name": ns}})),
            )
            .await;
    }
    let node_objects: Vec<Node> = (0..nodes)
        .map(|i| {
            from_json(json!({
                "metadata": {"name": format!("node-{i:04}"),
                             "labels": {"kubernetes.io/hostname": format!("node-{i:04}")}},
            }))
        })
        .collect();
    create_all(Api::all(client.clone()), node_objects).await;
    // One pool, announced over layer 2 from node-0000 only: with no other speaker running, that
    // makes the one speaker the owner of every address for MetalLB too (without memberlist it
    // counts every selected node as a candidate).
    let (api, ns) = match system {
        System::FerroLb => ("ferrolb.io/v1beta1", NS),
        System::MetalLb => ("metallb.io/v1beta1", ferrolb_tests::metallb::NAMESPACE),
    };
    let config = vec![
        json!({"apiVersion": api, "kind": "IPAddressPool",
               "metadata": {"name": "bench", "namespace": ns}, "spec": {"addresses": [POOL]}}),
        json!({"apiVersion": api, "kind": "L2Advertisement",
               "metadata": {"name": "bench", "namespace": ns},
               "spec": {"nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-0000"}}]}}),
    ];
    ferrolb_tests::lab::manifests::server_side_apply(client, &config, "bench")
        .await
        .expect("the pool and its advertisement");
    if system == System::MetalLb {
        ferrolb_tests::metallb::create_pods(
            client,
            &[(METALLB_POD, "app=metallb,component=speaker", Some(NODE_IP))],
        )
        .await
        .expect("the speaker's Pod object");
    }
    let services = Api::<Service>::namespaced(client.clone(), APPS);
    create_all(services.clone(), (0..n).map(lb_service).collect()).await;
    futures::stream::iter(0..n)
        .for_each_concurrent(CONCURRENCY, |i| {
            let services = services.clone();
            async move {
                let patch = json!({"status": {"loadBalancer": {"ingress": [
                    {"ip": address(i).to_string(), "ipMode": "VIP"}]}}});
                services
                    .patch_status(
                        &format!("lb-{i:05}"),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .expect("a status patch");
            }
        })
        .await;
    let headless: Vec<Service> = (0..others)
        .map(|i| {
            from_json(json!({
                "metadata": {"name": format!("other-{i:05}"), "namespace": APPS},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
            }))
        })
        .collect();
    create_all(services, headless).await;
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), APPS);
    let mut all: Vec<EndpointSlice> = (0..n)
        .map(|i| slice(&format!("lb-{i:05}"), &format!("node-{:04}", i % nodes)))
        .collect();
    all.extend(
        (0..others).map(|i| slice(&format!("other-{i:05}"), &format!("node-{:04}", i % nodes))),
    );
    create_all(slices, all).await;
    eprintln!(
        "  populated: {n} LoadBalancer + {others} other Services and slices, {nodes} Nodes in {:.0?}",
        t.elapsed()
    );
}

fn topology() {
    let _ = run("ip", &["netns", "del", NETNS]);
    let _ = run("ip", &["link", "del", HOST_IF]);
    ok("ip", &["netns", "add", NETNS]);
    ok(
        "ip",
        &[
            "link", "add", HOST_IF, "type", "veth", "peer", "name", NODE_IF, "netns", NETNS,
        ],
    );
    ok(
        "ip",
        &["addr", "add", &format!("{API_ADDR}/24"), "dev", HOST_IF],
    );
    ok("ip", &["link", "set", HOST_IF, "up"]);
    for args in [
        vec!["addr", "add", NODE_ADDR, "dev", NODE_IF],
        vec!["addr", "add", "10.128.255.254/16", "dev", NODE_IF],
        vec!["link", "set", NODE_IF, "up"],
        vec!["link", "set", "lo", "up"],
    ] {
        let mut all = vec!["-n", NETNS];
        all.extend(args);
        ok("ip", &all);
    }
}

/// MetalLB's speaker Pod object (it reads its own Pod at start).
const METALLB_POD: &str = "speaker-node-0000";
/// The speaker's node address (`NODE_ADDR` without its length).
const NODE_IP: &str = "10.250.0.2";

fn speaker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ferrolb-speaker"))
}

fn spawn_speaker(system: System, kubeconfig: &Path, log: &Path) -> Child {
    let wrap = std::env::var("FERROLB_BENCH_WRAP").unwrap_or_default();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NETNS])
        .args(wrap.split_whitespace());
    match system {
        System::FerroLb => cmd
            .arg(speaker_bin())
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--node-name", "node-0000", "--namespace", NS])
            .args(["--metrics-addr", "127.0.0.1:7473", "--log-level", "info"])
            .args(["--log-format", "json"]),
        // No memberlist (no --ml-* flags): alone, as FerroLB's speaker is without a gossip key.
        System::MetalLb => cmd
            .arg(ferrolb_tests::metallb::dir().join("speaker"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--node-name=node-0000",
                &format!("--pod-name={METALLB_POD}"),
            ])
            .arg(format!("--namespace={}", ferrolb_tests::metallb::NAMESPACE))
            .args(["--port=0", "--log-level=info"]),
    };
    cmd.stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
        .spawn()
        .expect("speaker binary")
}

/// The speaker's own figure for "every watch has listed", from its JSON log (`after`).
fn synced_after(log: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(log).ok()?
        + &std::fs::read_to_string(log.with_extension("err")).ok()?;
    let line = text
        .lines()
        .find(|l| l.contains("every watch has listed"))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    parse_debug_duration(v["after"].as_str()?)
}

fn parse_debug_duration(s: &str) -> Option<Duration> {
    for (unit, scale) in [("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)] {
        if let Some(v) = s.strip_suffix(unit) {
            return v
                .parse::<f64>()
                .ok()
                .map(|v| Duration::from_secs_f64(v * scale));
        }
    }
    None
}

fn metric(name: &str) -> Option<f64> {
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            NETNS,
            "bash",
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/7473; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3",
        ],
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

async fn bench(system: System, n: usize, others: usize, nodes: usize, kind: BackendKind) {
    eprintln!(
        "== {}: {n} LoadBalancer Services, {others} others, {nodes} Nodes ({})",
        system.name(),
        kind.as_str()
    );
    topology();
    let crds = match system {
        System::FerroLb => ferrolb_api::crd::chart_crd_dir(),
        System::MetalLb => ferrolb_tests::metallb::crd_dir(),
    };
    let backend = Backend::start_kind(
        kind,
        &[crds],
        |mut c| {
            c.listen = SocketAddr::new(API_ADDR.into(), 0);
            c
        },
        |r| RealKubeConfig {
            address: API_ADDR.into(),
            controller_manager: false,
            ..r
        },
    )
    .await
    .expect("an API server");
    let client = backend.client();
    populate(&client, system, n, others, nodes).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    backend.write_kubeconfig(&kubeconfig).unwrap();
    let dump = dir.path().join("arp.txt");
    let mut tcpdump = Command::new("tcpdump")
        .args(["-tt", "-n", "-l", "-B", "65536", "-i", HOST_IF, "arp"])
        .stdout(std::fs::File::create(&dump).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(500));
    let log = dir.path().join("speaker.log");
    let started = epoch();
    let start = Instant::now();
    let mut speaker = spawn_speaker(system, &kubeconfig, &log);
    let pid = speaker.id();
    // `ip netns exec` execs the speaker, so the pid is the speaker's.
    let wanted: Vec<Ipv4Addr> = (0..n).map(address).collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut garps = Garps::new(dump.clone());
    let last = loop {
        let seen = garps.poll();
        if wanted.iter().all(|ip| seen.contains_key(ip)) {
            break wanted.iter().map(|ip| seen[ip]).fold(0.0, f64::max);
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} addresses announced",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // MetalLB's log does not say when its caches synced.
    let synced = synced_after(&log);
    let answered = Duration::from_secs_f64(last - started);
    // Settled: every status object written (FerroLB says so in a metric; MetalLB gets the same
    // 5 s below and no more).
    let settle = Instant::now();
    while system == System::FerroLb
        && metric("ferrolb_status_pending") != Some(0.0)
        && settle.elapsed() < Duration::from_secs(600)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled_after = start.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = ferrolb_tests::process::CpuWindow::start(pid);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (idle, idle_ticks) = window.percent();
    eprintln!(
        "  idle CPU over 30 s: {idle:.4} % from schedstat (ns); {idle_ticks:.3} % from clock \
         ticks, whose resolution here is {:.3} %",
        window.tick_resolution_percent()
    );
    let rss = ferrolb_tests::process::status_kib(pid, "VmRSS:");
    let peak = ferrolb_tests::process::status_kib(pid, "VmHWM:");
    // What the RSS holds: the process's own memory, and the pages of its executable (and any
    // other file) it has mapped, which the page cache shares: how many of those depends on the
    // code that ran and on how the kernel maps the file's pages, not on what the speaker holds.
    let rss_anon = ferrolb_tests::process::status_kib(pid, "RssAnon:");
    let rss_file = ferrolb_tests::process::status_kib(pid, "RssFile:");
    eprintln!(
        "  RSS {:.1} MiB: {:.1} MiB anonymous, {:.1} MiB mapped from files",
        rss as f64 / 1024.0,
        rss_anon as f64 / 1024.0,
        rss_file as f64 / 1024.0
    );
    // One Service change to the wire: move one Service to a fresh address, wait for its GARP.
    let services = Api::<Service>::namespaced(client.clone(), APPS);
    let mut latencies = Vec::new();
    // The PATCH's own round trip (sent to answered): the server's part of the time to the
    // wire, which no speaker can shorten, printed beside it.
    let mut patches = Vec::new();
    for c in 0..CHANGES {
        let i = c * (n / CHANGES).max(1) % n;
        let ip = Ipv4Addr::new(10, 128, 250 + (c / 250) as u8, (c % 250 + 1) as u8);
        let t0 = epoch();
        let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
        services
            .patch_status(
                &format!("lb-{i:05}"),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .expect("a status patch");
        patches.push((epoch() - t0) * 1000.0);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(ts) = garps.poll().get(&ip) {
                latencies.push((ts - t0) * 1000.0);
                break;
            }
            assert!(Instant::now() < until, "{ip} never announced");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    patches.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct_of = |v: &[f64], p: f64| v[((v.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    let pct = |p: f64| pct_of(&latencies, p);
    let _ = speaker.kill();
    let _ = speaker.wait();
    let _ = tcpdump.kill();
    let _ = tcpdump.wait();
    drop(backend);
    let _ = run("ip", &["netns", "del", NETNS]);
    let _ = run("ip", &["link", "del", HOST_IF]);
    let secs = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()));
    println!(
        "| {} | {n:>6} | {others:>6} | {nodes:>5} | {} | {:>7.2} s | {} | {:>6.1} MiB | {:>6.1} MiB | {:>6.3} % | {:>6.1} / {:>6.1} / {:>6.1} ms | {:>5.0} s |",
        system.name(),
        secs(synced),
        answered.as_secs_f64(),
        secs(synced.map(|s| answered.saturating_sub(s))),
        rss as f64 / 1024.0,
        peak as f64 / 1024.0,
        idle,
        pct(0.5),
        pct(0.99),
        latencies.last().copied().unwrap_or_default(),
        settled_after.as_secs_f64(),
    );
    // For `side_by_side`'s headline rows (`figure <bench> <system> name=value ...`).
    println!(
        "figure scale {} services={n} others={others} nodes={nodes} rss_mib={:.1} \
         rss_anon_mib={:.1} rss_file_mib={:.1} peak_mib={:.1} wire_p50_ms={:.2} \
         wire_p99_ms={:.2} wire_max_ms={:.2} answered_s={:.2} patch_p50_ms={:.2} \
         patch_p99_ms={:.2}",
        system.key(),
        rss as f64 / 1024.0,
        rss_anon as f64 / 1024.0,
        rss_file as f64 / 1024.0,
        peak as f64 / 1024.0,
        pct(0.5),
        pct(0.99),
        latencies.last().copied().unwrap_or_default(),
        answered.as_secs_f64(),
        pct_of(&patches, 0.5),
        pct_of(&patches, 0.99),
    );
}

#[tokio::main]
async fn main() {
    ferrolb_tests::provenance::print();
    if run("id", &["-u"]).stdout != b"0\n"
        || run("sh", &["-c", "command -v tcpdump"]).stdout.is_empty()
    {
        eprintln!("skipped: needs root and tcpdump");
        return;
    }
    let kind = match std::env::var(ferrolb_tests::backend::BACKEND_ENV).as_deref() {
        Ok("double") => BackendKind::Double,
        _ => BackendKind::Real,
    };
    let sizes: Vec<usize> = std::env::var("FERROLB_BENCH_SERVICES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1000, 10_000]);
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let others = env("FERROLB_BENCH_OTHERS", 50_000);
    let nodes = env("FERROLB_BENCH_NODES", 1000);
    let systems: Vec<System> = std::env::var("FERROLB_BENCH_SYSTEMS")
        .unwrap_or_else(|_| "ferrolb".into())
        .split(',')
        .map(|s| match s.trim() {
            "metallb" => System::MetalLb,
            _ => System::FerroLb,
        })
        .collect();
    if systems.contains(&System::MetalLb)
        && let Some(p) = ferrolb_tests::metallb::missing()
    {
        eprintln!("scale: {} is missing (scripts/metallb)", p.display());
        std::process::exit(1);
    }
    println!(
        "| speaker | LB Services | others | Nodes | caches synced | last address answered | answered after sync | RSS | peak RSS | idle CPU | change → wire p50 / p99 / max | status written |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        for &system in &systems {
            bench(system, n, others, nodes, kind).await;
        }
    }
}
