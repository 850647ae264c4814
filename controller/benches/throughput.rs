//! End-to-end throughput of the real controller binary against the test API server: Services
//! per second from creation to status written, and the controller's peak RSS.
//!
//! `cargo bench -p ferrolb-controller --bench throughput` (10,000 Services by default;
//! `FERROLB_BENCH_SERVICES=N` to change). Prints figures; asserts nothing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{IPAddressPool, IPAddressPoolSpec};
use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("FERROLB_BENCH_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let server = ApiServer::start(
        ApiServerConfig::default().with_crd_dir(ferrolb_api::crd::chart_crd_dir()),
    )
    .await
    .expect("test API server");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let client = server.client();
    for ns in ["ferrolb-system", "default"] {
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // `default` exists from the start, as in a real cluster.
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await;
    }
    let pool = IPAddressPool {
        metadata: ObjectMeta {
            name: Some("bench".into()),
            namespace: Some("ferrolb-system".into()),
            ..Default::default()
        },
        spec: IPAddressPoolSpec {
            addresses: vec!["10.96.0.0/12".into()],
            auto_assign: true,
            avoid_buggy_ips: false,
            service_allocation: None,
            ip_mode: None,
        },
        status: None,
    };
    Api::<IPAddressPool>::namespaced(client.clone(), "ferrolb-system")
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrolb-controller"))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace",
            "ferrolb-system",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-level",
            "error",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("controller binary");
    // Let it become leader before the clock starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api = Api::<Service>::namespaced(client.clone(), "default");
    // Count Services with an address from a watch (polling a 10,000-item list would measure
    // the list, not the controller).
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let watch_api = api.clone();
    tokio::spawn(async move {
        let mut with_address = std::collections::HashSet::new();
        let stream = watcher(watch_api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = ev {
                let has = s
                    .status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if has {
                    with_address.insert(s.metadata.name.unwrap_or_default());
                }
                if with_address.len() == n {
                    let _ = done_tx.send(Instant::now());
                    return;
                }
            }
        }
    });
    let start = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let api = api.clone();
            async move {
                let svc = Service {
                    metadata: ObjectMeta {
                        name: Some(format!("s{i:05}")),
                        ..Default::default()
                    },
                    spec: Some(ServiceSpec {
                        type_: Some("LoadBalancer".into()),
                        ports: Some(vec![ServicePort {
                            port: 80,
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    status: None,
                };
                api.create(&PostParams::default(), &svc).await.unwrap();
            }
        })
        .await;
    let created = start.elapsed();
    let finished = done_rx
        .await
        .expect("the watch saw every Service get an address");
    let total = finished - start;
    let rss = peak_rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    println!("services:            {n}");
    println!("created in:          {:.2} s", created.as_secs_f64());
    println!("all statuses in:     {:.2} s", total.as_secs_f64());
    println!(
        "throughput:          {:.0} Services/s (creation to status written)",
        n as f64 / total.as_secs_f64()
    );
    match rss {
        Some(kib) => println!("controller peak RSS: {:.1} MiB", kib as f64 / 1024.0),
        None => println!("controller peak RSS: unavailable"),
    }
}
