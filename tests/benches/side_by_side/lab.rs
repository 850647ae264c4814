//! The side-by-side scenarios that need the speakers: the lab (`ferrolb_tests::lab`: three nodes,
//! a BIRD router, a client on the segment and one behind the router, a real kube-apiserver),
//! once with FerroLB, once with MetalLB in native BGP mode and once with MetalLB in frr-k8s mode
//! (frr-k8s and FRR on every node, `ferrolb_tests::frrk8s`), each with its own CRDs and the
//! lab's configuration in its own kinds (`manifests::for_metallb`, which drops BFD, and
//! `manifests::for_metallb_frrk8s`, which keeps it).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrolb_tests::backend::BackendKind;
use ferrolb_tests::lab::report::{self, Fault};
use ferrolb_tests::lab::{Binaries, Lab, LabConfig, NoAnswer, Requests, RouterKind, System};
use ferrolb_tests::netns::topology::{NODE_NAMES, node_v4};
use ferrolb_tests::process::{CpuWindow, status_kib, threads, threads_between};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The pool of the route-count scenario: 16,384 addresses on no segment, announced over BGP.
const ROUTES_POOL: &str = "10.100.0.0/18";

/// What one system did in the lab.
#[derive(Default)]
pub struct LabFigures {
    /// SIGKILL of the owner's speaker → the client on the segment answered by another node.
    pub kill_moved: Vec<Duration>,
    /// SIGKILL of the owner's speaker → the new owner's first gratuitous ARP for the address, as
    /// captured on the client.
    pub kill_garp: Vec<Duration>,
    /// The owner's node cut off → the new owner's first gratuitous ARP.
    pub cut_garp: Vec<Duration>,
    /// The owner's node cut off the segment → the client answered by another node.
    pub cut_outage: Vec<Duration>,
    /// Requests (every 20 ms) unanswered during those outages.
    pub cut_unanswered: usize,
    /// The node cut off → the router no longer routes through it.
    pub cut_withdrawn: Vec<Duration>,
    /// Rolling restart of the three speakers: requests, timeouts, resets (layer 2, then BGP).
    pub rolling_l2: (usize, usize, usize),
    /// The same for the BGP Service, asked from behind the router.
    pub rolling_bgp: (usize, usize, usize),
    /// A speaker started → the router routes every one of N Services through its node, for
    /// each N of the scenario (1,000, then 10,000).
    pub routes: Vec<(usize, Vec<Duration>)>,
    /// LoadBalancer Services in the lab when the speaker's RSS and idle CPU were taken.
    pub speaker_services: usize,
    /// Speaker RSS (KiB) of node-a's speaker then.
    pub speaker_rss_kib: u64,
    /// Idle CPU of node-a's speaker over 30 s with nothing changing.
    pub speaker_idle_cpu: f64,
}

fn config(system: System, prefix: &str, dir: std::path::PathBuf) -> LabConfig {
    let release = super::ferrolb_controller()
        .parent()
        .expect("target/release")
        .to_path_buf();
    let binaries = match system {
        System::FerroLb => Binaries {
            controller: release.join("ferrolb-controller"),
            speaker: Some(release.join("ferrolb-speaker")),
            lab: env!("CARGO_BIN_EXE_ferrolb-lab").into(),
        },
        System::MetalLb | System::MetalLbFrrK8s => Binaries {
            controller: ferrolb_tests::metallb::dir().join("controller"),
            speaker: Some(ferrolb_tests::metallb::dir().join("speaker")),
            lab: env!("CARGO_BIN_EXE_ferrolb-lab").into(),
        },
    };
    let mut c = LabConfig::new(prefix, RouterKind::Bird, binaries, dir);
    c.system = system;
    c.apiserver = BackendKind::Real;
    c
}

/// Whether the lab part can run here; the reason otherwise.
pub fn missing() -> Option<String> {
    if let Err(e) = ferrolb_tests::netns::require_root() {
        return Some(e.to_string());
    }
    let speaker = super::ferrolb_controller().with_file_name("ferrolb-speaker");
    (!speaker.is_file()).then(|| {
        format!(
            "{} (cargo build --release -p ferrolb-speaker)",
            speaker.display()
        )
    })
}

/// Which lab scenarios run.
#[derive(Clone, Copy)]
pub struct Parts {
    /// The owner's speaker SIGKILLed.
    pub kill: bool,
    /// The owner's node cut off (layer 2 and the BGP withdrawal).
    pub cut: bool,
    /// The rolling restart of the three speakers.
    pub rolling: bool,
    /// The route-count scenario.
    pub routes: bool,
}

impl Parts {
    /// Every scenario.
    pub const ALL: Parts = Parts {
        kill: true,
        cut: true,
        rolling: true,
        routes: true,
    };

    /// The parts `FERROLB_BENCH_ONLY` names: `lab` or empty (all), `routes`, `cut`, `rolling`,
    /// `kill`, or a comma-separated list of the last four.
    pub fn from_only(only: &str) -> Parts {
        if only.is_empty() || only == "lab" {
            return Parts::ALL;
        }
        let has = |p: &str| only.split(',').any(|o| o.trim() == p);
        Parts {
            kill: has("kill"),
            cut: has("cut"),
            rolling: has("rolling"),
            routes: has("routes"),
        }
    }
}

impl Parts {
    /// `speaker killed x3, node cut off x3, rolling restart, routes [1000]`: what runs.
    pub fn describe(self, repeat: usize, route_counts: &[usize]) -> String {
        [
            (self.kill, format!("speaker killed x{repeat}")),
            (self.cut, format!("node cut off x{repeat}")),
            (self.rolling, "rolling restart".to_string()),
            (self.routes, format!("routes {route_counts:?}")),
        ]
        .into_iter()
        .filter_map(|(on, what)| on.then_some(what))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Runs the lab scenarios `parts` names for `system`, `repeat` times where timed; the
/// route-count scenario for each count in `route_counts`.
pub fn run(system: System, repeat: usize, parts: Parts, route_counts: &[usize]) -> LabFigures {
    let mut f = LabFigures::default();
    let prefix = ferrolb_tests::netns::unique_prefix("fbsbs");
    let dir = std::env::temp_dir().join(&prefix);
    let mut lab = Lab::start(config(system, &prefix, dir)).expect("the lab starts");
    let services = lab
        .wait_for_addresses(Duration::from_secs(60))
        .expect("every lab Service has an address");
    let web_v4 = services
        .iter()
        .find(|s| s.name == "web")
        .and_then(|s| s.ingress.iter().find(|(ip, _)| ip.is_ipv4()))
        .map(|(ip, _)| *ip)
        .expect("web has an IPv4 address");
    let bgp_v4 = services
        .iter()
        .find(|s| s.name == "web-bgp")
        .and_then(|s| s.ingress.iter().find(|(ip, _)| ip.is_ipv4()))
        .map(|(ip, _)| *ip)
        .expect("web-bgp has an IPv4 address");
    lab.wait_for_route(bgp_v4, &[0, 1, 2], Duration::from_secs(60))
        .expect("the router routes web-bgp through every node");

    failovers_and_rolling_restart(&mut lab, system, repeat, parts, web_v4, bgp_v4, &mut f);
    if parts.routes {
        routes(&mut lab, system, repeat.min(5), route_counts, &mut f);
    }
    f
}

/// Scenarios 1 and 2: the owner's speaker SIGKILLed and the owner's node cut off, `repeat`
/// times each, then the rolling restart of the three speakers (those of them `parts` names).
fn failovers_and_rolling_restart(
    lab: &mut Lab,
    system: System,
    repeat: usize,
    parts: Parts,
    web_v4: IpAddr,
    bgp_v4: IpAddr,
    f: &mut LabFigures,
) {
    // Every ARP packet the client sees, stamped as the fault is (seconds since the epoch).
    let arp_dump = lab.dir().join("client-arp.txt");
    let mut tcpdump = lab
        .topo
        .client
        .spawn(
            &["tcpdump", "-tt", "-n", "-e", "-l", "-i", "eth0", "arp"],
            &arp_dump,
        )
        .expect("tcpdump on the client");
    let macs: Vec<String> = (0..NODE_NAMES.len())
        .map(|i| lab.topo.node_mac(i).expect("a node's MAC"))
        .collect();
    for (fault, what) in [
        (Fault::SpeakerKilled, "owner's speaker killed"),
        (Fault::NodeCutOff, "owner's node cut off"),
    ]
    .into_iter()
    .filter(|(fault, _)| match fault {
        Fault::SpeakerKilled => parts.kill,
        Fault::NodeCutOff => parts.cut,
    }) {
        for run in 0..repeat {
            let r = report::failover_address(lab, "web", web_v4, fault, Duration::from_secs(60))
                .expect("another node answers");
            eprintln!(
                "  {}: {what} #{}: answered by {} after {} ms ({} unanswered), router withdrew \
                 in {}",
                system_name(system),
                run + 1,
                r.new_owner,
                r.elapsed.as_millis(),
                r.failures,
                r.bgp_withdrawn
                    .map_or("-".into(), |d| format!("{} ms", d.as_millis()))
            );
            let new = NODE_NAMES
                .iter()
                .position(|n| *n == r.new_owner)
                .expect("a lab node");
            let garp = lab
                .wait(
                    Duration::from_secs(5),
                    "the new owner's gratuitous ARP",
                    || first_garp(&arp_dump, r.fault_epoch, &macs[new], web_v4),
                )
                .expect("the new owner announces the address");
            let garp = Duration::from_secs_f64((garp - r.fault_epoch).max(0.0));
            eprintln!(
                "    new owner's first gratuitous ARP {} ms after the fault",
                garp.as_millis()
            );
            match fault {
                Fault::SpeakerKilled => f.kill_garp.push(garp),
                Fault::NodeCutOff => f.cut_garp.push(garp),
            }
            match fault {
                Fault::SpeakerKilled => f.kill_moved.push(r.elapsed),
                Fault::NodeCutOff => {
                    f.cut_outage.push(r.elapsed);
                    f.cut_unanswered += r.failures;
                    if let Some(d) = r.bgp_withdrawn {
                        f.cut_withdrawn.push(d);
                    }
                }
            }
            report::restore(lab, &r).expect("the fault is undone");
            // A session that ended by its hold time puts BIRD in its error wait (60 s at
            // first) before it takes the node's session again. A speaker (or frr-k8s) that
            // exited, finding the API server unreachable just after the node came back, is
            // started again after 10 s, the kubelet's first back-off.
            let back = Instant::now() + Duration::from_secs(180);
            while lab
                .wait_for_route(bgp_v4, &[0, 1, 2], Duration::from_secs(10))
                .is_err()
            {
                assert!(Instant::now() < back, "every node routed through again");
                let restarted = lab.restart_exited().expect("an exited speaker restarts");
                for i in restarted {
                    eprintln!(
                        "    {}'s speaker had exited after the node came back: started again",
                        NODE_NAMES[i]
                    );
                }
            }
        }
    }

    tcpdump.kill();
    if !parts.rolling {
        return;
    }
    let (l2, bgp) = rolling_restart(lab, web_v4, bgp_v4);
    f.rolling_l2 = l2;
    f.rolling_bgp = bgp;
    eprintln!(
        "  {}: rolling restart: layer 2 {} requests, {} timed out, {} reset; BGP {} requests, \
         {} timed out, {} reset",
        system_name(system),
        l2.0,
        l2.1,
        l2.2,
        bgp.0,
        bgp.1,
        bgp.2
    );
}

/// The stamp of the first gratuitous ARP (a request or reply for `ip` sent by `ip` itself) from
/// `mac` after `after` in a `tcpdump -tt -n -e` capture.
fn first_garp(dump: &std::path::Path, after: f64, mac: &str, ip: IpAddr) -> Option<f64> {
    let text = std::fs::read_to_string(dump).ok()?;
    let ip = ip.to_string();
    text.lines().find_map(|line| {
        let ts: f64 = line.split_whitespace().next()?.parse().ok()?;
        let from_mac = line.split_whitespace().nth(1)? == mac;
        let gratuitous = line.contains(&format!("who-has {ip} tell {ip}"))
            || line.contains(&format!("Reply {ip} is-at"));
        (ts > after && from_mac && gratuitous).then_some(ts)
    })
}

fn system_name(system: System) -> &'static str {
    match system {
        System::FerroLb => "FerroLB",
        System::MetalLb => "MetalLB",
        System::MetalLbFrrK8s => "MetalLB (frr-k8s)",
    }
}

/// `(requests, timed out, reset)`.
fn tally(r: &Requests) -> (usize, usize, usize) {
    let lost = r.lost();
    for (at, why) in &lost {
        eprintln!("    lost: the request sent {at:?} after the client started: {why:?}");
    }
    let resets = lost
        .iter()
        .filter(|(_, why)| matches!(why, Err(NoAnswer::Refused(_) | NoAnswer::Reset(_))))
        .count();
    (r.results.len(), lost.len() - resets, resets)
}

/// A DaemonSet rolling update of the speakers: SIGTERM (30 s grace), a new speaker once the old
/// one has exited, the next node once the router has every node's session and route again and
/// 5 s have passed (`minReadySeconds: 5`): the same pacing for both systems, whatever their own
/// readiness signals. Meanwhile the client on the segment asks `l2` and the client behind the
/// router asks `bgp`, every 10 ms, each request given up after 250 ms.
fn rolling_restart(
    lab: &mut Lab,
    l2: IpAddr,
    bgp: IpAddr,
) -> ((usize, usize, usize), (usize, usize, usize)) {
    let stop = Arc::new(AtomicBool::new(false));
    let every = Duration::from_millis(10);
    let give_up = Duration::from_millis(250);
    let segment = lab.ask_from_client_every(l2, every, give_up, stop.clone());
    let remote = lab.ask_from_remote_every(bgp, every, give_up, stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    eprintln!("    the first SIGTERM: 1 s after the clients started");
    for (i, name) in NODE_NAMES.iter().enumerate() {
        assert!(
            lab.stop_speaker(i, Duration::from_secs(30)),
            "{name}'s speaker ignored SIGTERM"
        );
        lab.start_speaker(i).expect("the speaker starts");
        lab.wait_for_route(bgp, &[0, 1, 2], Duration::from_secs(120))
            .expect("routed through every node again");
        std::thread::sleep(Duration::from_secs(5));
    }
    stop.store(true, Ordering::SeqCst);
    let segment = segment.join().unwrap().expect("the segment client ran");
    let remote = remote.join().unwrap().expect("the remote client ran");
    (tally(&segment), tally(&remote))
}

/// Services from their own pool, announced over BGP, each with a ready endpoint on every node,
/// created up to each count of `counts` in turn (1,000, then 10,000): at each count node-a's
/// speaker is killed and started `repeat` times, and the time from its start to the router
/// routing all of them through node-a again is measured (MetalLB in frr-k8s mode: the speaker
/// and node-a's frr-k8s Pod, from the start of the latter). Then, at the last count, node-a's
/// speaker's RSS, and its CPU over 30 s with nothing changing (from 20 s after its start).
fn routes(lab: &mut Lab, system: System, repeat: usize, counts: &[usize], f: &mut LabFigures) {
    let (api, ns) = match system {
        System::FerroLb => ("ferrolb.io/v1beta1", ferrolb_tests::lab::INSTALL_NS),
        System::MetalLb | System::MetalLbFrrK8s => {
            ("metallb.io/v1beta1", ferrolb_tests::metallb::NAMESPACE)
        }
    };
    let config = vec![
        json!({"apiVersion": api, "kind": "IPAddressPool",
               "metadata": {"name": "routes", "namespace": ns},
               "spec": {"addresses": [ROUTES_POOL], "autoAssign": false}}),
        json!({"apiVersion": api, "kind": "BGPAdvertisement",
               "metadata": {"name": "routes", "namespace": ns},
               "spec": {"ipAddressPools": ["routes"]}}),
    ];
    let client = lab.client();
    lab.block(async move {
        ferrolb_tests::lab::manifests::server_side_apply(&client, &config, "bench")
            .await
            .expect("the routes pool applies");
    });
    let pool: ipnet::IpNet = ROUTES_POOL.parse().unwrap();
    let through_a = |lab: &Lab| {
        let hop = IpAddr::from(node_v4(0));
        lab.router
            .kernel_routes()
            .iter()
            .filter(|r| {
                r.prefix
                    .split('/')
                    .next()
                    .and_then(|p| p.parse::<IpAddr>().ok())
                    .is_some_and(|ip| pool.contains(&ip))
                    && r.next_hops.contains(&hop)
            })
            .count()
    };
    let mut created = 0;
    for &count in counts {
        create_route_services(lab, created..count);
        created = count;
        // The controller assigns them all first: up to 2 minutes per 1,000 Services. In
        // frr-k8s mode every change reaches FRR through frr-reload.py, which took 40-55 s per
        // reload with 1,000 Services on the bench's 2-core machine (three nodes reloading at
        // once): 10 minutes per 1,000 there.
        let per_1000 = if system == System::MetalLbFrrK8s {
            600
        } else {
            120
        };
        let patience = Duration::from_secs(per_1000 * (count as u64).div_ceil(1000));
        let what = format!("{count} routes through node-a");
        lab.wait(patience, &what, || (through_a(lab) == count).then_some(()))
            .unwrap_or_else(|_| panic!("the router routes all {count} Services through node-a"));
        wait_for_controller_manager_slices(lab);
        let mut runs = Vec::new();
        for run in 0..repeat {
            lab.kill_speaker(0);
            // In frr-k8s mode the routes are FRR's, which outlives MetalLB's speaker: node-a's
            // frr-k8s Pod goes too, and the timed start is of both (frr-k8s first).
            lab.kill_frr(0);
            lab.wait(
                Duration::from_secs(120),
                "node-a's routes withdrawn",
                || (through_a(lab) == 0).then_some(()),
            )
            .expect("the router withdraws a killed speaker's routes");
            let start = Instant::now();
            lab.start_frr(0).expect("frr-k8s starts");
            lab.start_speaker(0).expect("the speaker starts");
            // Looked at every 20 ms, not the lab's usual 100: with 100 ms (and two `ip route`
            // runs per look) a start could be read up to about 110 ms late.
            lab.wait_every(
                Duration::from_secs(600),
                Duration::from_millis(20),
                &what,
                || (through_a(lab) == count).then_some(()),
            )
            .unwrap_or_else(|_| panic!("all {count} routes back"));
            let took = start.elapsed();
            eprintln!(
                "  {}: {count} routes #{} at the router {:.2} s after the speaker started",
                system_name(system),
                run + 1,
                took.as_secs_f64()
            );
            runs.push(took);
        }
        f.routes.push((count, runs));
    }
    let pid = lab.speaker_pid(0).expect("node-a's speaker runs");
    // Settled: 20 s after the last restart, then 30 s with nothing changing.
    std::thread::sleep(Duration::from_secs(20));
    let idle = Duration::from_secs(30);
    let window = CpuWindow::start(pid);
    let threads_before = threads(pid);
    std::thread::sleep(idle);
    (f.speaker_idle_cpu, _) = window.percent();
    // Where it went: each thread's share, its wake-ups a second (what sleeps between inputs
    // wakes once per input) and its returns after a preemption, and its time per wake-up.
    for t in threads_between(&threads_before, &threads(pid)) {
        if t.runs == 0 {
            continue;
        }
        eprintln!(
            "    thread {}: {:.3} %, {:.1} wake-ups/s and {:.1} preemptions/s, {:.0} us per wake-up",
            t.name,
            t.cpu.as_secs_f64() / idle.as_secs_f64() * 100.0,
            t.wakeups() as f64 / idle.as_secs_f64(),
            t.preempted as f64 / idle.as_secs_f64(),
            t.cpu.as_secs_f64() * 1e6 / t.wakeups().max(1) as f64
        );
    }
    f.speaker_rss_kib = status_kib(pid, "VmRSS:");
    f.speaker_services = lab
        .block({
            let client = lab.client();
            async move {
                Api::<Service>::all(client)
                    .list(&Default::default())
                    .await
                    .map(|l| {
                        l.items
                            .iter()
                            .filter(|s| {
                                s.spec.as_ref().and_then(|sp| sp.type_.as_deref())
                                    == Some("LoadBalancer")
                            })
                            .count()
                    })
            }
        })
        .expect("the Services list");
    eprintln!(
        "  {}: speaker RSS {:.1} MiB, CPU with nothing changing {:.2} %, {} LoadBalancer Services",
        system_name(system),
        f.speaker_rss_kib as f64 / 1024.0,
        f.speaker_idle_cpu,
        f.speaker_services
    );
}

/// Waits until kube-controller-manager has stopped creating its own EndpointSlices for the
/// route Services (their selectors select no Pod: each gets an empty slice beside the lab's).
/// It creates them at its client's 20 requests a second, so for 1,000 Services for about 50 s
/// after they were created: what is timed after this, the speaker's restarts and its CPU "with
/// nothing changing", would otherwise share those seconds with a stream of slice events. Done
/// when the count of its slices has not moved for 6 s (at most 3 minutes; a lab without the
/// controller manager has none, and waits the 6 s).
fn wait_for_controller_manager_slices(lab: &mut Lab) {
    let count = |lab: &mut Lab| -> usize {
        let client = lab.client();
        lab.block(async move {
            let lp = kube::api::ListParams::default()
                .labels("endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io");
            Api::<EndpointSlice>::namespaced(client, "default")
                .list_metadata(&lp)
                .await
                .map(|l| l.items.len())
        })
        .unwrap_or(usize::MAX)
    };
    let started = Instant::now();
    let (mut last, mut since) = (count(lab), Instant::now());
    while since.elapsed() < Duration::from_secs(6) && started.elapsed() < Duration::from_secs(180) {
        std::thread::sleep(Duration::from_secs(1));
        let now = count(lab);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    eprintln!(
        "  kube-controller-manager's EndpointSlices: {last}, still for 6 s after {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// Creates the Services `route-{i}` for `range`, from the routes pool, without NodePorts (the
/// default range has 2,768), each with an EndpointSlice holding a ready endpoint on every node:
/// 16 requests in flight, each retried for up to a minute (an object that exists already
/// counts); panics naming the last error when one cannot be created.
fn create_route_services(lab: &mut Lab, range: std::ops::Range<usize>) {
    let client = lab.client();
    lab.block(async move {
        let services = Api::<Service>::namespaced(client.clone(), "default");
        let slices = Api::<EndpointSlice>::namespaced(client, "default");
        futures::stream::iter(range.map(|i| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                let name = format!("route-{i}");
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name, "annotations": {"metallb.io/address-pool": "routes"}},
                    "spec": {"type": "LoadBalancer", "selector": {"app": name},
                             "allocateLoadBalancerNodePorts": false,
                             "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
                }))
                .unwrap();
                let endpoints: Vec<_> = (0..NODE_NAMES.len())
                    .map(|n| json!({"addresses": [format!("10.99.{}.{}", 20 + n, i % 250 + 1)],
                                    "conditions": {"ready": true}, "nodeName": NODE_NAMES[n]}))
                    .collect();
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-lab"),
                                 "labels": {"kubernetes.io/service-name": name}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                }))
                .unwrap();
                create_retrying(&services, &svc).await;
                create_retrying(&slices, &slice).await;
            }
        }))
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    });
}

/// Creates `object`, retrying every 200 ms for up to a minute; "already exists" is success.
async fn create_retrying<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => return,
            Err(e) if Instant::now() > deadline => {
                panic!("cannot create {:?}: {e}", object.meta().name)
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Why MetalLB in frr-k8s mode cannot run here (`scripts/frrk8s` not run, or FRR's tools
/// missing); `None` when it can.
pub fn frrk8s_missing() -> Option<String> {
    if let Some(p) = ferrolb_tests::frrk8s::missing() {
        return Some(format!("{} (run scripts/frrk8s)", p.display()));
    }
    ferrolb_tests::netns::require_tools(ferrolb_tests::frrk8s::TOOLS)
        .err()
        .map(|e| e.to_string())
}
