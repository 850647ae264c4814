//! MetalLB and FerroLB side by side, on the same machine in the same run, each against a real
//! kube-apiserver of its own (`scripts/realkube`) with its own CRDs and the equivalent
//! configuration, never both at once. MetalLB is v0.16's own controller (`scripts/metallb`), and
//! in the lab its speaker in native mode or in frr-k8s mode (frr-k8s from `scripts/frrk8s`, FRR
//! from Debian's `frr` and `frr-pythontools`); FerroLB is the release `ferrolb-controller` and
//! `ferrolb-speaker`, which the bench builds first (the figures are the printed commit's).
//!
//! ```sh
//! scripts/realkube && scripts/metallb && scripts/frrk8s
//! cargo bench -p ferrolb-tests --bench side_by_side
//! FERROLB_BENCH_REPEAT=3 FERROLB_BENCH_V6_SERVICES=2000 cargo bench -p ferrolb-tests --bench side_by_side
//! FERROLB_BENCH_SYSTEMS=metallb,metallb-frrk8s,ferrolb FERROLB_BENCH_ONLY=cut \
//!   cargo bench -p ferrolb-tests --bench side_by_side
//! ```
//!
//! Controller scenarios, each system against a real kube-apiserver of its own:
//! - **assign 1,000**: with the controller caught up, 1,000 Services are created (32 requests in
//!   flight); the time from the first create to the last address seen by a watch. Repeated
//!   `FERROLB_BENCH_REPEAT` times (10), every Service deleted in between.
//! - **restarts under churn**: with 1,000 Services assigned, the controller is killed (SIGKILL),
//!   50 Services are deleted and 50 created while it is down, and it starts again; 5 times. Counts
//!   the Services that existed before a restart and hold a different address after it. FerroLB
//!   restarts with the same identity, as a Pod whose container restarts does.
//! - **IPv6 /64 pool**: `FERROLB_BENCH_V6_SERVICES` (10,000) Services from a /64 pool: the time
//!   to assign them all, the controller's CPU time meanwhile, its peak and settled RSS, and its
//!   CPU 5 to 15 s after the last address and once settled, 35 to 65 s after it (one periodic
//!   pass over every Service falls in those 30 s); the CPU of each second after the last
//!   address is printed on the way, to show what each window holds.
//!
//! `FERROLB_BENCH_SYSTEMS` (`metallb`, `ferrolb`) runs the controller part for those only too.
//!
//! Lab scenarios (needs root; `side_by_side/lab.rs`): the lab's three nodes, BIRD router and two
//! clients, with each system's controller and speakers (`ferrolb-lab --system metallb` shows the
//! MetalLB lab): the owner's speaker SIGKILLed and the owner's node cut off, `FERROLB_BENCH_REPEAT`
//! times each (the client on the segment asks every 20 ms and captures ARP for the new owner's
//! first gratuitous ARP; the router's routes are watched); a
//! rolling restart of the three speakers with clients asking every 10 ms; 1,000, then 10,000
//! Services over BGP: from a speaker's start to all of them routed through its node at the
//! router (5 times each), then the speaker's RSS and idle CPU with 10,000.
//!
//! The lab part runs three systems: MetalLB in native BGP mode (no BFD: MetalLB refuses BFD
//! there), MetalLB in frr-k8s mode (the default of MetalLB's chart: frr-k8s and FRR on every
//! node, built by `scripts/frrk8s`, with the lab's BFD profile, 300 ms x 3, as FerroLB has it),
//! and FerroLB. The controller part runs MetalLB once: its controller is the same in both modes.
//!
//! Headline rows: a last table of the six figures FerroLB is judged on, with its targets,
//! from this run: the IPv6 pool's settled controller CPU and the lab's idle speaker and 1,000
//! routes from the parts above, and two benches run as children (`side_by_side/headline.rs`):
//! the speaker at 10,000 + 50,000 Services and 1,000 Nodes (`ferrolb-speaker`'s `scale`, both
//! systems: RSS, one change to the wire) and FerroLB's controller against the API server's
//! status-patch floor (`ferrolb-controller`'s `throughput`, 10,000). `FERROLB_BENCH_ONLY=headline`
//! runs only what those rows need (no assign/restart rounds, no lab faults, 1,000 routes):
//!
//! ```sh
//! FERROLB_BENCH_SYSTEMS=ferrolb,metallb FERROLB_BENCH_ONLY=headline FERROLB_BENCH_REPEAT=3 \
//!   cargo bench -p ferrolb-tests --bench side_by_side
//! ```
//!
//! `FERROLB_BENCH_ONLY=controller` or `=lab` runs one part, `=v6` only the IPv6 pool; `=routes` only the lab's route-count
//! scenario, `=cut` only the node cut off (layer 2 and BGP withdrawal), `=kill` only the speaker
//! SIGKILLed, `=rolling` only the rolling restart, or a list (`=cut,rolling`).
//! `FERROLB_BENCH_ROUTES` gives the route counts (`1000,10000`); `FERROLB_BENCH_SYSTEMS`
//! (`metallb`, `metallb-frrk8s`, `ferrolb`, comma-separated) runs the lab part for those only;
//! the table shows `-` for the others. Without `scripts/frrk8s` (or Debian's `frr-pythontools`)
//! the frr-k8s column is left out with a message, a failure under `FERROLB_REQUIRE_BINARIES=1`.
//!
//! Prints one table, the commit above it, with the systems and the ratios (MetalLB / FerroLB:
//! above 1, FerroLB is faster or smaller). Asserts nothing but that each system assigns every
//! Service.

#[path = "side_by_side/headline.rs"]
mod headline;
#[path = "side_by_side/lab.rs"]
mod lab;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_tests::metallb;
use ferrolb_tests::process::{cpu_time, cpu_time_ns, status_kib};
use ferrolb_tests::realkube::{self, RealKube, RealKubeConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const APPS: &str = "bench";
const FERROLB_NS: &str = "ferrolb-system";
const CONCURRENCY: usize = 32;
const V4_POOL: &str = "10.200.0.0/16";
const V6_POOL: &str = "2001:db8:64::/64";

#[derive(Clone, Copy, PartialEq)]
enum System {
    MetalLb,
    /// MetalLB in frr-k8s mode: lab scenarios only (its controller is MetalLB's one).
    MetalLbFrrK8s,
    FerroLb,
}

impl System {
    /// The lab's systems, in the table's order.
    const LAB: [System; 3] = [System::MetalLb, System::MetalLbFrrK8s, System::FerroLb];

    fn lab(self) -> ferrolb_tests::lab::System {
        match self {
            System::MetalLb => ferrolb_tests::lab::System::MetalLb,
            System::MetalLbFrrK8s => ferrolb_tests::lab::System::MetalLbFrrK8s,
            System::FerroLb => ferrolb_tests::lab::System::FerroLb,
        }
    }

    /// Its name in `FERROLB_BENCH_SYSTEMS`.
    fn key(self) -> &'static str {
        match self {
            System::MetalLb => "metallb",
            System::MetalLbFrrK8s => "metallb-frrk8s",
            System::FerroLb => "ferrolb",
        }
    }

    fn name(self) -> String {
        match self {
            System::MetalLb => format!("MetalLB {}", metallb::version()),
            System::MetalLbFrrK8s => {
                format!("MetalLB {} (frr-k8s, BFD 300 ms x 3)", metallb::version())
            }
            System::FerroLb => "FerroLB".into(),
        }
    }

    fn namespace(self) -> &'static str {
        match self {
            System::MetalLb | System::MetalLbFrrK8s => metallb::NAMESPACE,
            System::FerroLb => FERROLB_NS,
        }
    }

    /// The same two pools in each system's own kinds.
    fn config(self) -> Vec<Value> {
        let (api, ns) = match self {
            System::MetalLb | System::MetalLbFrrK8s => ("metallb.io/v1beta1", metallb::NAMESPACE),
            System::FerroLb => ("ferrolb.io/v1beta1", FERROLB_NS),
        };
        vec![
            json!({"apiVersion": api, "kind": "IPAddressPool",
                   "metadata": {"name": "v4", "namespace": ns},
                   "spec": {"addresses": [V4_POOL]}}),
            json!({"apiVersion": api, "kind": "IPAddressPool",
                   "metadata": {"name": "v6", "namespace": ns},
                   "spec": {"addresses": [V6_POOL], "autoAssign": false}}),
        ]
    }
}

/// A controller of either system, killed when dropped.
enum Controller {
    MetalLb(metallb::Process),
    FerroLb(std::process::Child),
}

impl Controller {
    fn start(system: System, kube: &RealKube) -> Self {
        match system {
            System::MetalLb | System::MetalLbFrrK8s => Controller::MetalLb(
                metallb::Process::controller(kube.kubeconfig(), "none")
                    .expect("MetalLB's controller starts"),
            ),
            System::FerroLb => Controller::FerroLb(
                Command::new(ferrolb_controller())
                    .args(["--kubeconfig", kube.kubeconfig().to_str().unwrap()])
                    .args(["--namespace", FERROLB_NS, "--metrics-addr", "127.0.0.1:0"])
                    // A fixed identity, as a Pod's name stays when its container restarts:
                    // the restarted controller renews its own Lease at once. (A new Pod, with
                    // another name, waits for the killed one's Lease to expire, 15 s.)
                    .args(["--identity", "bench-controller"])
                    .args(["--log-level", "warn"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("FerroLB's controller starts"),
            ),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Controller::MetalLb(p) => p.pid(),
            Controller::FerroLb(c) => c.id(),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        match self {
            Controller::MetalLb(p) => p.kill(),
            Controller::FerroLb(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn ferrolb_controller() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    // target/release/deps/side_by_side-HASH
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps")
        .join("ferrolb-controller")
}

/// A real control plane with one system's CRDs, its configuration, and a watch of the Services.
struct Cluster {
    kube: RealKube,
    services: Api<Service>,
    store: Store<Service>,
    _watch: tokio::task::JoinHandle<()>,
}

impl Cluster {
    async fn start(system: System) -> Self {
        let kube = RealKube::start(RealKubeConfig {
            controller_manager: false,
            ..Default::default()
        })
        .await
        .expect("the real control plane starts");
        let client = kube.client().expect("a client");
        let crds = match system {
            System::MetalLb | System::MetalLbFrrK8s => metallb::crd_dir(),
            System::FerroLb => ferrolb_api::crd::chart_crd_dir(),
        };
        realkube::install_crds(&client, &[crds])
            .await
            .expect("CRDs install");
        realkube::create_namespaces(&client, &[system.namespace(), APPS])
            .await
            .expect("namespaces");
        if system != System::FerroLb {
            metallb::create_pods(
                &client,
                &[(
                    metallb::CONTROLLER_POD,
                    "app=metallb,component=controller",
                    None,
                )],
            )
            .await
            .expect("MetalLB's controller Pod object");
        }
        ferrolb_tests::lab::manifests::server_side_apply(&client, &system.config(), "bench")
            .await
            .expect("the configuration applies");
        let services = Api::<Service>::namespaced(client.clone(), APPS);
        let (store, writer) = reflector::store();
        let stream = reflector(
            writer,
            watcher(services.clone(), watcher::Config::default()),
        )
        .default_backoff()
        .touched_objects();
        let watch = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {}
        });
        store.wait_until_ready().await.expect("the watch lists");
        Self {
            kube,
            services,
            store,
            _watch: watch,
        }
    }

    /// Name to addresses (sorted) of every Service the watch holds.
    fn addresses(&self) -> BTreeMap<String, Vec<String>> {
        self.store
            .state()
            .iter()
            .map(|s| (s.metadata.name.clone().unwrap_or_default(), ingress(s)))
            .collect()
    }

    /// Waits until the watch holds exactly `count` Services and each has an address; returns
    /// when the last one was seen.
    async fn wait_assigned(&self, count: usize, timeout: Duration) -> Instant {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.store.state();
            let assigned = state.iter().filter(|s| !ingress(s).is_empty()).count();
            if state.len() == count && assigned == count {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "{assigned} of {count} Services assigned after {timeout:?} ({} held)",
                state.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn create(&self, names: impl Iterator<Item = String>, v6: bool) {
        let api = self.services.clone();
        futures::stream::iter(names.map(|name| {
            let api = api.clone();
            async move {
                let svc = service(&name, v6);
                for attempt in 0.. {
                    match api.create(&PostParams::default(), &svc).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(e) if attempt < 20 => {
                            let _ = e;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("creating {name}: {e}"),
                    }
                }
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    }

    async fn delete(&self, names: impl Iterator<Item = String>) {
        let api = self.services.clone();
        futures::stream::iter(names.map(|name| {
            let api = api.clone();
            async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    }

    async fn wait_count(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.store.state().len() != count {
            assert!(Instant::now() < deadline, "the watch never held {count}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn service(name: &str, v6: bool) -> Service {
    let mut svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": APPS},
        // No node ports: 10,000 Services would exhaust the default node port range (2,768),
        // and a bare-metal load balancer does not need them.
        "spec": {"type": "LoadBalancer", "selector": {"app": name},
                 "allocateLoadBalancerNodePorts": false,
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    });
    if v6 {
        svc["metadata"]["annotations"] = json!({"metallb.io/address-pool": "v6"});
        svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        svc["spec"]["ipFamilies"] = json!(["IPv6"]);
    }
    serde_json::from_value(svc).expect("a Service")
}

fn ingress(svc: &Arc<Service>) -> Vec<String> {
    let mut ips: Vec<String> = ferrolb_api::service::ingress_ips(svc)
        .iter()
        .map(ToString::to_string)
        .collect();
    ips.sort();
    ips
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The figures of one system.
#[derive(Default)]
struct Figures {
    assign_1000: Vec<Duration>,
    restart_changed: usize,
    restart_survivors: usize,
    restart_catch_up: Vec<Duration>,
    v6_assign: Duration,
    v6_cpu: Duration,
    v6_peak_kib: u64,
    v6_rss_kib: u64,
    /// 5 to 15 s after the last address.
    v6_idle_cpu: f64,
    /// 35 to 65 s after it: one periodic pass, the Events published.
    v6_settled_cpu: f64,
}

async fn assign_and_restart(system: System, repeat: usize, f: &mut Figures) {
    let cluster = Cluster::start(system).await;
    let controller = Controller::start(system, &cluster.kube);
    // Caught up: one Service assigned.
    cluster
        .create(std::iter::once("warm-up".to_string()), false)
        .await;
    cluster.wait_assigned(1, Duration::from_secs(60)).await;
    cluster.delete(std::iter::once("warm-up".to_string())).await;
    cluster.wait_count(0).await;
    for round in 0..repeat {
        let start = Instant::now();
        cluster
            .create((0..1000).map(|i| format!("s{round}-{i}")), false)
            .await;
        let done = cluster.wait_assigned(1000, Duration::from_secs(300)).await;
        f.assign_1000.push(done - start);
        eprintln!(
            "  {}: assign 1,000 #{}: {:.2} s",
            system.name(),
            round + 1,
            (done - start).as_secs_f64()
        );
        if round + 1 < repeat {
            cluster
                .delete((0..1000).map(|i| format!("s{round}-{i}")))
                .await;
            cluster.wait_count(0).await;
        }
    }
    let last = repeat - 1;
    let mut live: Vec<String> = (0..1000).map(|i| format!("s{last}-{i}")).collect();
    let mut controller = Some(controller);
    for restart in 0..5 {
        let before = cluster.addresses();
        drop(controller.take());
        // While it is down: 50 of the oldest go, 50 new ones come.
        let gone: Vec<String> = live.drain(..50).collect();
        cluster.delete(gone.iter().cloned()).await;
        let new: Vec<String> = (0..50).map(|i| format!("r{restart}-{i}")).collect();
        cluster.create(new.iter().cloned(), false).await;
        live.extend(new);
        cluster.wait_count(live.len()).await;
        let start = Instant::now();
        controller = Some(Controller::start(system, &cluster.kube));
        let done = cluster
            .wait_assigned(live.len(), Duration::from_secs(120))
            .await;
        f.restart_catch_up.push(done - start);
        let after = cluster.addresses();
        for (name, ips) in &before {
            if let Some(now) = after.get(name) {
                f.restart_survivors += 1;
                if now != ips {
                    f.restart_changed += 1;
                    eprintln!("  {}: {name} changed {ips:?} -> {now:?}", system.name());
                }
            }
        }
    }
}

async fn v6_pool(system: System, count: usize, f: &mut Figures) {
    let cluster = Cluster::start(system).await;
    let controller = Controller::start(system, &cluster.kube);
    cluster
        .create(std::iter::once("warm-up".to_string()), true)
        .await;
    cluster.wait_assigned(1, Duration::from_secs(60)).await;
    let pid = controller.pid();
    let cpu0 = cpu_time(pid);
    let start = Instant::now();
    cluster
        .create((0..count).map(|i| format!("v6-{i}")), true)
        .await;
    let done = cluster
        .wait_assigned(count + 1, Duration::from_secs(900))
        .await;
    f.v6_assign = done - start;
    f.v6_cpu = cpu_time(pid) - cpu0;
    f.v6_peak_kib = status_kib(pid, "VmHWM:");
    // CPU second by second for 65 s after the last address: what the windows below hold
    // (Events still being published, the periodic pass over every Service), printed.
    let mut used = vec![cpu_time_ns(pid)];
    let tick = Instant::now();
    for s in 1..=65u32 {
        tokio::time::sleep_until((tick + Duration::from_secs(u64::from(s))).into()).await;
        used.push(cpu_time_ns(pid));
    }
    let share = |from: usize, to: usize| {
        used[to].saturating_sub(used[from]).as_secs_f64() / (to - from) as f64 * 100.0
    };
    let per_second: Vec<String> = (0..65).map(|s| format!("{:.1}", share(s, s + 1))).collect();
    eprintln!(
        "  {}: controller CPU (% of a core) each second after the last address: {}",
        system.name(),
        per_second.join(" ")
    );
    f.v6_idle_cpu = share(5, 15);
    f.v6_settled_cpu = share(35, 65);
    f.v6_rss_kib = status_kib(pid, "VmRSS:");
    drop(controller);
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn max(v: &[Duration]) -> Duration {
    v.iter().max().copied().unwrap_or_default()
}

/// One table row: the three systems' cells (MetalLB native, MetalLB frr-k8s, FerroLB) and the
/// two ratios to FerroLB.
fn row(what: &str, cells: [String; 3], ratios: [Option<f64>; 2]) {
    let [m, k, f] = cells;
    let [rm, rk] = ratios.map(|r| r.map_or("-".into(), |r| format!("{r:.2}")));
    println!("| {what} | {m} | {k} | {f} | {rm} | {rk} |");
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ratio(m: Duration, f: Duration) -> Option<f64> {
    (f.as_secs_f64() > 0.0).then(|| m.as_secs_f64() / f.as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    ferrolb_tests::provenance::print();
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    headline::build_release_binaries();
    for (what, missing) in [
        (
            "the real control plane (scripts/realkube)",
            (!realkube::available()).then(realkube::bin_dir),
        ),
        ("MetalLB (scripts/metallb)", metallb::missing()),
        (
            "the release controller (cargo build --release -p ferrolb-controller)",
            (!ferrolb_controller().is_file()).then(ferrolb_controller),
        ),
    ] {
        if let Some(p) = missing {
            eprintln!("side_by_side: needs {what}: {} is missing", p.display());
            std::process::exit(1);
        }
    }
    let repeat = env_usize("FERROLB_BENCH_REPEAT", 10).max(1);
    let v6_count = env_usize("FERROLB_BENCH_V6_SERVICES", 10_000);
    let mut figures = [Figures::default(), Figures::default()];
    let only = std::env::var("FERROLB_BENCH_ONLY").unwrap_or_default();
    // `headline`: only what the headline rows need (the IPv6 pool, the lab's 1,000 routes and
    // idle speaker, and the two child benches); empty: every part, the children too.
    let headline_only = only == "headline";
    let headline = only.is_empty() || headline_only;
    // `v6`: only the IPv6 pool (its cold start and its settled CPU).
    let v6_only = only == "v6";
    let (controllers, labs) = (
        only.is_empty() || only == "controller" || headline_only || v6_only,
        only != "controller" && !v6_only,
    );
    let route_counts: Vec<usize> = std::env::var("FERROLB_BENCH_ROUTES")
        .unwrap_or_else(|_| if headline_only { "1000" } else { "1000,10000" }.into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let systems = std::env::var("FERROLB_BENCH_SYSTEMS").unwrap_or_default();
    let chosen = |s: System| systems.is_empty() || systems.split(',').any(|n| n.trim() == s.key());
    let controllers_ran = [chosen(System::MetalLb), chosen(System::FerroLb)];
    for (i, system) in [System::MetalLb, System::FerroLb]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| controllers && controllers_ran[*i])
    {
        if !headline_only && !v6_only {
            eprintln!(
                "{}: assign 1,000 x{repeat}, then 5 restarts under churn",
                system.name()
            );
            assign_and_restart(system, repeat, &mut figures[i]).await;
        }
        eprintln!("{}: {v6_count} Services from an IPv6 /64", system.name());
        v6_pool(system, v6_count, &mut figures[i]).await;
    }
    let lab_missing = lab::missing();
    let mut lab_figures: [Option<lab::LabFigures>; 3] = [None, None, None];
    if !labs {
    } else if let Some(why) = &lab_missing {
        eprintln!("side_by_side: the lab scenarios need {why}; they are left out");
    } else {
        let systems = std::env::var("FERROLB_BENCH_SYSTEMS").unwrap_or_default();
        for (i, system) in System::LAB
            .into_iter()
            .enumerate()
            .filter(|(_, s)| systems.is_empty() || systems.split(',').any(|n| n.trim() == s.key()))
        {
            if system == System::MetalLbFrrK8s
                && let Some(why) = lab::frrk8s_missing()
            {
                // Asked for by name, or required: a missing part fails; else the column is `-`.
                assert!(
                    !ferrolb_tests::skip::required() && systems.is_empty(),
                    "side_by_side: {} needs {why}",
                    system.name()
                );
                eprintln!(
                    "side_by_side: {} needs {why}; its column is left out",
                    system.name()
                );
                continue;
            }
            let parts = lab_parts(&only);
            eprintln!(
                "{}: the lab ({})",
                system.name(),
                parts.describe(repeat, &route_counts)
            );
            // The lab runs its own runtime: on a thread of its own, outside this one's.
            let lab_system = system.lab();
            let counts = route_counts.clone();
            let figures = std::thread::spawn(move || lab::run(lab_system, repeat, parts, &counts))
                .join()
                .expect("the lab scenarios ran");
            lab_figures[i] = Some(figures);
        }
    }
    let mut read = headline::Read::default();
    if headline {
        let keys: Vec<&str> = [System::MetalLb, System::FerroLb]
            .into_iter()
            .filter(|s| chosen(*s))
            .map(System::key)
            .collect();
        eprintln!("the speaker at scale (10,000 + 50,000 Services, 1,000 Nodes): {keys:?}");
        headline::run_child(
            "ferrolb-speaker",
            "scale",
            &[
                ("FERROLB_BENCH_SERVICES", "10000".into()),
                ("FERROLB_BENCH_SYSTEMS", keys.join(",")),
            ],
            &mut read,
        );
        if chosen(System::FerroLb) {
            eprintln!("FerroLB's controller against the API server's floor, 10,000 Services");
            headline::run_child(
                "ferrolb-controller",
                "throughput",
                &[("FERROLB_BENCH_SERVICES", "10000".into())],
                &mut read,
            );
        }
    }
    println!();
    // The commit beside the table too: the run's log on stderr can put much between them.
    println!("figures from {}", ferrolb_tests::provenance::line());
    println!(
        "| scenario | {} (native BGP, no BFD) | {} | {} | MetalLB / FerroLB | MetalLB frr-k8s / FerroLB |",
        System::MetalLb.name(),
        System::MetalLbFrrK8s.name(),
        System::FerroLb.name()
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    if controllers {
        controller_rows(
            &figures,
            controllers_ran,
            repeat,
            v6_count,
            !headline_only && !v6_only,
        );
    }
    if lab_figures.iter().any(Option::is_some) {
        lab_rows(&lab_figures, repeat, lab_parts(&only));
    }
    if headline {
        let column = |i: usize, s: System| {
            let ran = chosen(s);
            let fig = &figures[i];
            let labf = lab_figures[if s == System::MetalLb { 0 } else { 2 }].as_ref();
            headline::Column {
                controller_settled_cpu: (ran && controllers).then_some(fig.v6_settled_cpu),
                speaker_idle: labf
                    .filter(|l| l.speaker_services > 0)
                    .map(|l| (l.speaker_idle_cpu, l.speaker_services)),
                wire: read.get("scale", s.key(), "wire_p50_ms").zip(read.get(
                    "scale",
                    s.key(),
                    "wire_p99_ms",
                )),
                patch: read.get("scale", s.key(), "patch_p50_ms").zip(read.get(
                    "scale",
                    s.key(),
                    "patch_p99_ms",
                )),
                of_floor: read.get("throughput", s.key(), "of_floor_pct"),
                of_floor_range: read
                    .get("throughput", s.key(), "of_floor_min_pct")
                    .zip(read.get("throughput", s.key(), "of_floor_max_pct")),
                scale_rss: read.get("scale", s.key(), "rss_mib"),
                scale_rss_split: read.get("scale", s.key(), "rss_anon_mib").zip(read.get(
                    "scale",
                    s.key(),
                    "rss_file_mib",
                )),
                routes_1000: labf
                    .and_then(|l| l.routes.iter().find(|(c, _)| *c == 1000))
                    .map(|(_, r)| r.clone())
                    .unwrap_or_default(),
            }
        };
        headline::print(
            &System::MetalLb.name(),
            &column(0, System::MetalLb),
            &column(1, System::FerroLb),
        );
    }
}

/// The lab scenarios `FERROLB_BENCH_ONLY` asks for; `headline` needs the route count only.
fn lab_parts(only: &str) -> lab::Parts {
    if only == "headline" {
        lab::Parts {
            kill: false,
            cut: false,
            rolling: false,
            routes: true,
        }
    } else {
        lab::Parts::from_only(only)
    }
}

/// `assigned`: the assign and restart rounds ran (not under `FERROLB_BENCH_ONLY=headline`).
fn controller_rows(
    figures: &[Figures; 2],
    ran: [bool; 2],
    repeat: usize,
    v6_count: usize,
    assigned: bool,
) {
    let [m, f] = figures;
    // A system left out (`FERROLB_BENCH_SYSTEMS`) shows `-`, not its empty figures.
    let row = |what: &str, cells: [String; 3], ratios: [Option<f64>; 2]| {
        let [a, k, b] = cells;
        let dash = |ran: bool, c: String| if ran { c } else { "-".into() };
        let ratios = if ran == [true, true] {
            ratios
        } else {
            [None, None]
        };
        row(
            what,
            [dash(ran[0], a), dash(ran[0], k), dash(ran[1], b)],
            ratios,
        );
    };
    // MetalLB's controller is the same in both BGP modes: one column measured.
    let same = || "(as native)".to_string();
    let timed = |what: &str, a: Duration, b: Duration| {
        row(what, [secs(a), same(), secs(b)], [ratio(a, b), None]);
    };
    if assigned {
        assign_rows(&row, &timed, m, f, repeat);
    }
    v6_rows(&row, &timed, m, f, v6_count);
}

type Row<'a> = dyn Fn(&str, [String; 3], [Option<f64>; 2]) + 'a;
type Timed<'a> = dyn Fn(&str, Duration, Duration) + 'a;

fn assign_rows(row: &Row, timed: &Timed, m: &Figures, f: &Figures, repeat: usize) {
    let same = || "(as native)".to_string();
    timed(
        &format!("assign 1,000 Services, median of {repeat}"),
        median(&m.assign_1000),
        median(&f.assign_1000),
    );
    timed(
        &format!("assign 1,000 Services, slowest of {repeat}"),
        max(&m.assign_1000),
        max(&f.assign_1000),
    );
    row(
        "5 restarts under churn: addresses changed",
        [
            format!("{} of {}", m.restart_changed, m.restart_survivors),
            same(),
            format!("{} of {}", f.restart_changed, f.restart_survivors),
        ],
        [None, None],
    );
    timed(
        "restart to every Service assigned, median of 5",
        median(&m.restart_catch_up),
        median(&f.restart_catch_up),
    );
}

fn v6_rows(row: &Row, timed: &Timed, m: &Figures, f: &Figures, v6_count: usize) {
    let same = || "(as native)".to_string();
    timed(
        &format!("IPv6 /64: assign {v6_count} Services"),
        m.v6_assign,
        f.v6_assign,
    );
    timed(
        &format!("IPv6 /64: controller CPU for {v6_count}"),
        m.v6_cpu,
        f.v6_cpu,
    );
    let mib = |k: u64| format!("{:.1} MiB", k as f64 / 1024.0);
    let kratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
    row(
        "IPv6 /64: controller peak RSS",
        [mib(m.v6_peak_kib), same(), mib(f.v6_peak_kib)],
        [kratio(m.v6_peak_kib, f.v6_peak_kib), None],
    );
    row(
        "IPv6 /64: controller RSS settled",
        [mib(m.v6_rss_kib), same(), mib(f.v6_rss_kib)],
        [kratio(m.v6_rss_kib, f.v6_rss_kib), None],
    );
    row(
        "IPv6 /64: controller CPU 5-15 s after the last address (schedstat, ns)",
        [
            format!("{:.2} %", m.v6_idle_cpu),
            same(),
            format!("{:.2} %", f.v6_idle_cpu),
        ],
        [None, None],
    );
    row(
        "IPv6 /64: controller CPU once settled, 35-65 s after (schedstat, ns)",
        [
            format!("{:.3} %", m.v6_settled_cpu),
            same(),
            format!("{:.3} %", f.v6_settled_cpu),
        ],
        [None, None],
    );
}

/// The lab's rows, one cell per system (`-` for a system that did not run).
fn lab_rows(figs: &[Option<lab::LabFigures>; 3], repeat: usize, parts: lab::Parts) {
    let [m, k, f] = figs;
    let mib = |k: u64| format!("{:.1} MiB", k as f64 / 1024.0);
    let spread = |v: &[Duration]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{} / {} ms", median(v).as_millis(), max(v).as_millis())
        }
    };
    let cells = |cell: &dyn Fn(&lab::LabFigures) -> String| {
        [m, k, f].map(|x| x.as_ref().map_or("-".to_string(), cell))
    };
    // MetalLB native / FerroLB and MetalLB frr-k8s / FerroLB, of `value`, where both ran.
    let ratios = |value: &dyn Fn(&lab::LabFigures) -> Option<f64>| {
        let of = |x: &Option<lab::LabFigures>| x.as_ref().and_then(value);
        let over = |a: Option<f64>| match (a, of(f)) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        [over(of(m)), over(of(k))]
    };
    let med = |pick: fn(&lab::LabFigures) -> &Vec<Duration>| {
        move |x: &lab::LabFigures| {
            let v = pick(x);
            (!v.is_empty()).then(|| median(v).as_secs_f64())
        }
    };
    let timed = |what: String, pick: fn(&lab::LabFigures) -> &Vec<Duration>| {
        row(&what, cells(&|x| spread(pick(x))), ratios(&med(pick)));
    };
    if parts.kill {
        timed(
            format!(
                "L2: owner's speaker SIGKILLed -> client answered by another node, median / max of {repeat}"
            ),
            |x| &x.kill_moved,
        );
        timed(
            format!(
                "L2: owner's speaker SIGKILLed -> new owner's first gratuitous ARP, median / max of {repeat}"
            ),
            |x| &x.kill_garp,
        );
    }
    if parts.cut {
        timed(
            format!(
                "L2: owner's node cut off -> new owner's first gratuitous ARP, median / max of {repeat}"
            ),
            |x| &x.cut_garp,
        );
        timed(
            format!(
                "L2: owner's node cut off -> client answered again (outage), median / max of {repeat}"
            ),
            |x| &x.cut_outage,
        );
        row(
            "L2: requests unanswered in those outages (every 20 ms)",
            cells(&|x| x.cut_unanswered.to_string()),
            [None, None],
        );
        timed(
            format!(
                "BGP: node cut off -> router withdraws, median / max of {repeat} (MetalLB native: no BFD)"
            ),
            |x| &x.cut_withdrawn,
        );
    }
    if parts.rolling {
        let rolled = |(n, t, r): (usize, usize, usize)| format!("{t} timed out, {r} reset of {n}");
        row(
            "rolling restart of 3 speakers: layer-2 requests lost",
            cells(&|x| rolled(x.rolling_l2)),
            [None, None],
        );
        row(
            "rolling restart of 3 speakers: BGP requests lost (MetalLB frr-k8s: FRR stays up)",
            cells(&|x| rolled(x.rolling_bgp)),
            [None, None],
        );
    }
    if !parts.routes {
        return;
    }
    let counts: Vec<usize> = figs
        .iter()
        .flatten()
        .flat_map(|x| x.routes.iter().map(|(c, _)| *c))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for count in counts {
        let runs = move |x: &lab::LabFigures| -> Vec<Duration> {
            x.routes
                .iter()
                .find(|(c, _)| *c == count)
                .map(|(_, r)| r.clone())
                .unwrap_or_default()
        };
        let n = figs
            .iter()
            .flatten()
            .map(|x| runs(x).len())
            .max()
            .unwrap_or(0);
        row(
            &format!(
                "BGP: speaker start -> {count} Service routes at BIRD, median / max of {n} \
                 (MetalLB frr-k8s: its frr-k8s Pod restarted too)"
            ),
            cells(&|x| spread(&runs(x))),
            ratios(&|x| {
                let r = runs(x);
                (!r.is_empty()).then(|| median(&r).as_secs_f64())
            }),
        );
    }
    let services = |x: &lab::LabFigures| x.speaker_services.to_string();
    let [sm, sk, sf] = cells(&services);
    row(
        &format!("speaker RSS, {sm} / {sk} / {sf} LoadBalancer Services (MetalLB's speaker alone)"),
        cells(&|x| mib(x.speaker_rss_kib)),
        ratios(&|x| (x.speaker_rss_kib > 0).then_some(x.speaker_rss_kib as f64)),
    );
    row(
        &format!("speaker idle CPU (schedstat, ns), {sm} / {sk} / {sf} LoadBalancer Services"),
        cells(&|x| format!("{:.2} %", x.speaker_idle_cpu)),
        [None, None],
    );
}
