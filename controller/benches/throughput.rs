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
//! - floor: Service status merge patches per second from a minimal client with the
//!   controller's concurrency (16), on N Services of another `loadBalancerClass`, until a
//!   watch has seen them all (as the cold start is timed), measured
//!   once the N Services of the cold start exist (the server holds what it holds during the
//!   cold start) and deleted before it starts (its LIST reads what it read before);
//! - cold start: N Services exist, the controller starts: Services/s until all have an address,
//!   the ratio to the floor, API writes per Service, controller CPU per Service, peak RSS;
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
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// The controller's write concurrency (`WRITES_AT_ONCE` in `reconcile.rs`).
const CONCURRENCY: usize = 16;
const NS: &str = "ferrolb-system";
/// Changes made to existing Services while the standby's RSS is watched.
const CHANGES: usize = 10_000;

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn sub(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 - b.0, a.1 - b.1)
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

/// Resolves when `n` Services whose name starts with `prefix` have an address.
fn count_addressed(
    api: Api<Service>,
    prefix: String,
    n: usize,
) -> tokio::sync::oneshot::Receiver<Instant> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    tokio::spawn(async move {
        let mut with_address = std::collections::HashSet::new();
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev {
                let name = s.metadata.name.clone().unwrap_or_default();
                let has = s
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if has && name.starts_with(&prefix) {
                    with_address.insert(name);
                }
                if with_address.len() == n {
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
        .args(["--identity", identity, "--log-level"])
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

/// The floor: `n` status patches, as many as the cold start writes, so that both are averaged
/// over the same stretch of the server's work (2,000 patches, about 2 s, once stood for 10,000:
/// their ratio swung between 65 and 131 % from run to run with the controller unchanged),
/// timed as the cold start is: until the bench's watch has seen every address (that watch
/// costs the server and this machine as much in both). The Services patched are deleted again
/// before it returns.
async fn floor(client: &kube::Client, ns: &str, n: usize) -> f64 {
    let api = Api::<Service>::namespaced(client.clone(), ns);
    let names: Vec<String> = (0..n).map(|i| format!("f{i:05}")).collect();
    create_services(&api, names.clone(), Some("bench.example/other")).await;
    let seen = count_addressed(api.clone(), "f".into(), n);
    let start = Instant::now();
    futures::stream::iter(names.iter().cloned().enumerate())
        .for_each_concurrent(CONCURRENCY, |(i, name)| {
            let api = api.clone();
            async move {
                let ip = format!("10.200.{}.{}", i / 256, i % 256);
                let patch = json!({
                    "metadata": {"annotations": {"bench.example/pool": "floor"}},
                    "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}},
                });
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .expect("a status patch");
            }
        })
        .await;
    let done = seen.await.expect("the watch saw every floor address");
    let rate = n as f64 / (done - start).as_secs_f64();
    futures::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                api.delete(&name, &Default::default())
                    .await
                    .expect("a floor Service deleted");
            }
        })
        .await;
    rate
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
    for ns in [NS, "default", "floor"] {
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

    // (b) Cold start with N Services already there; the floor measured beside them.
    create_services(&api, (0..n).map(|i| format!("a{i:05}")).collect(), None).await;
    let floor_rate = floor(&client, "floor", n).await;
    let writes_before = controller_writes(&backend);
    let cold_done = count_addressed(api.clone(), "a".into(), n);
    let start = Instant::now();
    let mut leader = spawn_controller(&kubeconfig, "leader");
    let cold_at = cold_done.await.expect("every Service got an address");
    let cold = cold_at - start;
    let cold_cpu = ferrolb_tests::process::cpu_time(leader.id());
    let cold_writes = sub(controller_writes(&backend), writes_before);

    if std::env::var("FERROLB_BENCH_COLD_ONLY").is_ok_and(|v| v == "1") {
        let _ = leader.kill();
        let _ = leader.wait();
        println!(
            "== {n} Services, {} API server (cold start only)",
            kind.as_str()
        );
        println!("floor (status merge patches, {CONCURRENCY} at a time): {floor_rate:.0}/s");
        println!("{}", cold_line(n, cold, floor_rate, cold_writes, cold_cpu));
        return;
    }
    // A standby replica, then (c) N more Services created while the leader runs.
    let mut standby = spawn_controller(&kubeconfig, "standby");
    tokio::time::sleep(Duration::from_secs(3)).await; // its caches are synced
    let standby_before = proc_status_kib(standby.id(), "VmRSS:");
    let cpu_before = ferrolb_tests::process::cpu_time(leader.id());
    let writes_before = controller_writes(&backend);
    let live_done = count_addressed(api.clone(), "b".into(), n);
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
    println!("== {n} Services, {} API server", kind.as_str());
    println!(
        "floor (status merge patches, {CONCURRENCY} at a time): {:.0}/s",
        floor_rate
    );
    println!("{}", cold_line(n, cold, floor_rate, cold_writes, cold_cpu));
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
    // For `side_by_side`'s headline rows (`figure <bench> <system> name=value ...`).
    println!(
        "figure throughput ferrolb services={n} floor_per_s={floor_rate:.1} cold_per_s={:.1} \
         of_floor_pct={:.1} live_per_s={:.1}",
        per_s(cold),
        100.0 * per_s(cold) / floor_rate,
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
