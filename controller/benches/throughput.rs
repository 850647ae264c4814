//! The controller at the API server's speed: the real `ferrolb-controller` binary (release
//! build) against a real kube-apiserver + etcd (`scripts/realkube` builds them;
//! `FERROLB_APISERVER=double` uses the in-repo test API server instead), measured side by side
//! with the server's own floor in the same run.
//!
//! ```sh
//! cargo bench -p ferrolb-controller --bench throughput                 # 1,000 and 10,000
//! FERROLB_BENCH_SERVICES=1000 cargo bench -p ferrolb-controller --bench throughput
//! FERROLB_BENCH_COLD_ONLY=1 FERROLB_BENCH_SERVICES=10000 cargo bench -p ferrolb-controller --bench throughput
//! ```
//!
//! For each N it prints:
//! - rounds (`FERROLB_BENCH_ROUNDS`, default 5), each on the same N Services with no address:
//!   - floor: Service status merge patches per second from a minimal client with the
//!     controller's concurrency (16), one to each of the N Services, until a watch has seen
//!     them all (as the cold start is timed); then every address is taken away again;
//!   - cold start: the controller starts: Services/s until all have an address, the ratio to
//!     the round's floor, API writes per Service, controller CPU per Service; then (but after
//!     the last round) the controller stops, its Lease and every address are taken away;
//!
//!   and the medians of the rounds (the figure: the median of the rounds' ratios). Both
//!   halves of a round write the same objects on the same server a few seconds apart, so
//!   the ratio moves with the controller more than with the server's pace, which moved by
//!   13 % between runs;
//! - keeping up: N more Services created (16 at a time) while it runs: Services/s from the
//!   first create to the last address, and how long after the last create it finished;
//! - a standby replica's RSS before and after 10,000 changes (label patches, round-robin) to
//!   the Services that exist: its watch cache holds them all, so only a queue it should not
//!   keep could make it grow.
//!
//! Prints figures; asserts nothing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{IPAddressPool, IPAddressPoolSpec};
use ferrolb_tests::backend::{Backend, BackendKind};
use ferrolb_tests::realkube::RealKubeConfig;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// The controller's write concurrency (`WRITES_AT_ONCE` in `reconcile.rs`).
const CONCURRENCY: usize = 16;
const NS: &str = "ferrolb-system";
/// The controllers' Lease (`--lease-name`), taken away between rounds.
const LEASE: &str = "throughput-bench";
/// Changes made to existing Services while the standby's RSS is watched.
const CHANGES: usize = 10_000;

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Writes between two counts of [`controller_writes`]. The audit log is never rotated
/// (`realkube` sets its size limit out of reach), so a count that went backwards is a bug to
/// see, not a figure to print.
fn sub(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    let back = "the request log lost records between two reads";
    (
        a.0.checked_sub(b.0).expect(back),
        a.1.checked_sub(b.1).expect(back),
    )
}

fn service(name: &str, class: Option<&str>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            load_balancer_class: class.map(Into::into),
            // Beyond 2,768 LoadBalancer Services the NodePort range is full.
            allocate_load_balancer_node_ports: Some(false),
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

async fn create_services(api: &Api<Service>, names: Vec<String>, class: Option<&str>) {
    futures::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                let svc = service(&name, class);
                for _ in 0..20 {
                    match api.create(&PostParams::default(), &svc).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                panic!("could not create {name}");
            }
        })
        .await;
}

/// Resolves when `n` Services whose name starts with `prefix` have an address (`addressed`),
/// or have none (`!addressed`).
fn count_addressed(
    api: Api<Service>,
    prefix: String,
    n: usize,
    addressed: bool,
) -> tokio::sync::oneshot::Receiver<Instant> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    tokio::spawn(async move {
        let mut matching = std::collections::HashSet::new();
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev {
                let name = s.metadata.name.clone().unwrap_or_default();
                if !name.starts_with(&prefix) {
                    continue;
                }
                let has = s
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if has == addressed {
                    matching.insert(name);
                } else {
                    matching.remove(&name);
                }
                if matching.len() == n {
                    let _ = done_tx.send(Instant::now());
                    return;
                }
            }
        }
    });
    done_rx
}

fn spawn_controller(kubeconfig: &std::path::Path, identity: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferrolb-controller"))
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["--namespace", NS, "--metrics-addr", "127.0.0.1:0"])
        .args(["--identity", identity, "--lease-name", LEASE, "--log-level"])
        // FERROLB_BENCH_CONTROLLER_LOG=info shows the controller's start on stderr.
        .arg(std::env::var("FERROLB_BENCH_CONTROLLER_LOG").unwrap_or_else(|_| "error".into()))
        .stdout(Stdio::null())
        .spawn()
        .expect("controller binary")
}

/// Writes by the controller (its User-Agent) recorded so far: (to Services, all, Events included).
fn controller_writes(backend: &Backend) -> (usize, usize) {
    let log = backend.request_log();
    let writes: Vec<_> = log
        .iter()
        .filter(|r| r.user_agent.starts_with("ferrolb-controller/"))
        .filter(|r| r.method != "GET")
        .collect();
    let services = writes
        .iter()
        .filter(|r| r.resource.as_deref() == Some("services"))
        .count();
    (services, writes.len())
}

/// The cold start's line: its rate against the floor, writes and CPU per Service.
fn cold_line(
    n: usize,
    cold: Duration,
    floor_rate: f64,
    writes: (usize, usize),
    cpu: Duration,
) -> String {
    let per_s = n as f64 / cold.as_secs_f64();
    format!(
        "cold start: all addressed in {:.2} s = {per_s:.0} Services/s = {:.0} % of the floor; \
         {:.2} writes to Services and {:.2} API writes in all (Events included) per Service; \
         {:.3} ms CPU per Service",
        cold.as_secs_f64(),
        100.0 * per_s / floor_rate,
        writes.0 as f64 / n as f64,
        writes.1 as f64 / n as f64,
        cpu.as_secs_f64() * 1000.0 / n as f64
    )
}

/// The floor: a status patch to each of `names` (the cold start's own Services, which have no
/// address), [`CONCURRENCY`] at a time, timed as the cold start is: until the bench's watch has
/// seen every address (that watch costs the server and this machine as much in both). Services
/// patched per second; the addresses are taken away again before it returns.
async fn floor(api: &Api<Service>, prefix: &str, names: &[String]) -> f64 {
    let seen = count_addressed(api.clone(), prefix.into(), names.len(), true);
    let start = Instant::now();
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(CONCURRENCY, |(i, name)| {
            let api = api.clone();
            async move {
                let ip = format!("10.200.{}.{}", i / 256, i % 256);
                let patch = json!({
                    "metadata": {"annotations": {"bench.example/pool": "floor"}},
                    "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}},
                });
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .expect("a status patch");
            }
        })
        .await;
    let done = seen.await.expect("the watch saw every floor address");
    let rate = names.len() as f64 / (done - start).as_secs_f64();
    take_addresses(api, prefix, names).await;
    rate
}

/// Takes every address (and the pool annotations) from `names`; returns once a watch has seen
/// all of them without one.
async fn take_addresses(api: &Api<Service>, prefix: &str, names: &[String]) {
    let cleared = count_addressed(api.clone(), prefix.into(), names.len(), false);
    futures::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                let patch = json!({
                    "metadata": {"annotations": {
                        "bench.example/pool": null,
                        ferrolb_api::names::IP_ALLOCATED_FROM_POOL: null,
                    }},
                    "status": {"loadBalancer": {"ingress": null}},
                });
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .expect("an address taken away");
            }
        })
        .await;
    cleared.await.expect("the watch saw every address go");
}

/// The median of `v` (the mean of the middle two when even).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

async fn run(n: usize, kind: BackendKind) {
    let backend = Backend::start_kind(
        kind,
        &[ferrolb_api::crd::chart_crd_dir()],
        |c| c,
        |r| RealKubeConfig {
            controller_manager: false,
            ..r
        },
    )
    .await
    .expect("the API server starts");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    backend.write_kubeconfig(&kubeconfig).unwrap();
    let client = backend.client();
    for ns in [NS, "default"] {
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await;
    }
    let pool = IPAddressPool {
        metadata: ObjectMeta {
            name: Some("bench".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: IPAddressPoolSpec {
            addresses: vec!["10.128.0.0/12".into()],
            auto_assign: true,
            avoid_buggy_ips: false,
            service_allocation: None,
            ip_mode: None,
        },
        status: None,
    };
    Api::<IPAddressPool>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let api = Api::<Service>::namespaced(client.clone(), "default");

    // (b) Rounds of the floor and a cold start on the same N Services.
    let names: Vec<String> = (0..n).map(|i| format!("a{i:05}")).collect();
    create_services(&api, names.clone(), None).await;
    let rounds: usize = std::env::var("FERROLB_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    println!("== {n} Services, {} API server", kind.as_str());
    let leases = Api::<Lease>::namespaced(client.clone(), NS);
    let (mut floors, mut colds, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut leader = None;
    for round in 1..=rounds {
        let floor_rate = floor(&api, "a", &names).await;
        let writes_before = controller_writes(&backend);
        let cold_done = count_addressed(api.clone(), "a".into(), n, true);
        let start = Instant::now();
        let mut controller = spawn_controller(&kubeconfig, "leader");
        let cold_at = cold_done.await.expect("every Service got an address");
        let cold = cold_at - start;
        let cold_cpu = ferrolb_tests::process::cpu_time(controller.id());
        let cold_writes = sub(controller_writes(&backend), writes_before);
        println!(
            "round {round}: floor (status merge patches, {CONCURRENCY} at a time) {floor_rate:.0}/s; {}",
            cold_line(n, cold, floor_rate, cold_writes, cold_cpu)
        );
        let cold_rate = n as f64 / cold.as_secs_f64();
        floors.push(floor_rate);
        colds.push(cold_rate);
        ratios.push(100.0 * cold_rate / floor_rate);
        if round < rounds {
            // The next round starts from nothing again: no controller, no Lease, no address.
            let _ = controller.kill();
            let _ = controller.wait();
            leases
                .delete(LEASE, &Default::default())
                .await
                .expect("the controller's Lease taken away");
            take_addresses(&api, "a", &names).await;
        } else {
            leader = Some(controller);
        }
    }
    let mut leader = leader.expect("at least one round");
    let lowest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = ratios.iter().copied().fold(0.0, f64::max);
    let (floor_rate, cold_rate, of_floor) = (median(floors), median(colds), median(ratios));
    println!(
        "median of {rounds} rounds: floor {floor_rate:.0}/s, cold start {cold_rate:.0}/s, \
         {of_floor:.0} % of the floor (the median of the rounds' ratios; they ran from \
         {lowest:.0} to {highest:.0} %)"
    );
    // For `side_by_side`'s headline rows (`figure <bench> <system> name=value ...`).
    println!(
        "figure throughput ferrolb services={n} rounds={rounds} floor_per_s={floor_rate:.1} \
         cold_per_s={cold_rate:.1} of_floor_pct={of_floor:.1} of_floor_min_pct={lowest:.1} \
         of_floor_max_pct={highest:.1}"
    );
    if std::env::var("FERROLB_BENCH_COLD_ONLY").is_ok_and(|v| v == "1") {
        let _ = leader.kill();
        let _ = leader.wait();
        return;
    }
    // A standby replica, then (c) N more Services created while the leader runs.
    let mut standby = spawn_controller(&kubeconfig, "standby");
    tokio::time::sleep(Duration::from_secs(3)).await; // its caches are synced
    let standby_before = proc_status_kib(standby.id(), "VmRSS:");
    let cpu_before = ferrolb_tests::process::cpu_time(leader.id());
    let writes_before = controller_writes(&backend);
    let live_done = count_addressed(api.clone(), "b".into(), n, true);
    let start = Instant::now();
    create_services(&api, (0..n).map(|i| format!("b{i:05}")).collect(), None).await;
    let created = start.elapsed();
    let live_at = live_done.await.expect("every new Service got an address");
    let live = live_at - start;
    let live_cpu = ferrolb_tests::process::cpu_time(leader.id()) - cpu_before;
    let live_writes = sub(controller_writes(&backend), writes_before);
    let peak = proc_status_kib(leader.id(), "VmHWM:");
    // (d) 10,000 changes to existing Services, with the standby's RSS before and after.
    let standby_before = proc_status_kib(standby.id(), "VmRSS:").or(standby_before);
    futures::stream::iter(0..CHANGES)
        .for_each_concurrent(CONCURRENCY, |i| {
            let api = api.clone();
            async move {
                let name = format!("b{:05}", i % n);
                let patch =
                    json!({"metadata": {"labels": {"bench.example/change": i.to_string()}}});
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
            }
        })
        .await;
    // Let the last changes reach the standby (watch latency is milliseconds here).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let standby_after = proc_status_kib(standby.id(), "VmRSS:");
    for c in [&mut leader, &mut standby] {
        let _ = c.kill();
        let _ = c.wait();
    }

    let per_s = |t: Duration| n as f64 / t.as_secs_f64();
    let mib = |k: Option<u64>| k.map_or("n/a".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "keeping up: {n} created in {:.2} s, all addressed {:.2} s after the first create \
         ({:.0} Services/s, {:.2} s after the last create); {:.2} writes to Services and {:.2} \
         in all per Service; {:.3} ms CPU per Service",
        created.as_secs_f64(),
        live.as_secs_f64(),
        per_s(live),
        (live - created).as_secs_f64(),
        live_writes.0 as f64 / n as f64,
        live_writes.1 as f64 / n as f64,
        live_cpu.as_secs_f64() * 1000.0 / n as f64
    );
    println!("leader peak RSS: {}", mib(peak));
    println!(
        "figure throughput ferrolb services={n} live_per_s={:.1}",
        per_s(live)
    );
    println!(
        "standby RSS: {} before, {} after {CHANGES} changes to existing Services",
        mib(standby_before),
        mib(standby_after)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    ferrolb_tests::provenance::print();
    let kind = match std::env::var("FERROLB_APISERVER").as_deref() {
        Ok("double") => BackendKind::Double,
        _ => BackendKind::Real,
    };
    let sizes: Vec<usize> = std::env::var("FERROLB_BENCH_SERVICES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for n in sizes {
        run(n, kind).await;
    }
}
