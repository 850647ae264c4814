//! Moving from MetalLB, on a real kube-apiserver: MetalLB v0.16's own controller (built by
//! `scripts/metallb`) assigns 200 Services of every kind (IPv4, IPv6, dual-stack, shared,
//! requested), is stopped, `ferrolb migrate --from-cluster --apply` converts its configuration,
//! and FerroLB's controller starts: every Service keeps exactly the address MetalLB gave it, and
//! new Services are assigned from the migrated pools.
//!
//! Needs the real control plane (`scripts/realkube`), MetalLB (`scripts/metallb`) and the
//! workspace binaries (`cargo build`); skips with the reason otherwise, and fails instead with
//! `FERROLB_REQUIRE_BINARIES=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use ferrolb_tests::metallb;
use ferrolb_tests::realkube::{self, RealKube, RealKubeConfig};

const APPS: &str = "apps";
const FERROLB_NS: &str = "ferrolb-system";

/// MetalLB's configuration, as an operator would have written it for v0.16.
const METALLB_CONFIG: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: front-v4, namespace: metallb-system, labels: {tier: front}}
spec:
  addresses: [198.51.100.0/24]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: front-v6, namespace: metallb-system, labels: {tier: front}}
spec:
  addresses: ["2001:db8:51::/120"]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: dual, namespace: metallb-system}
spec:
  addresses: [198.51.101.0/24, "2001:db8:52::/120"]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: reserved, namespace: metallb-system}
spec:
  addresses: [203.0.113.10-203.0.113.60]
  autoAssign: false
  avoidBuggyIPs: true
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: front, namespace: metallb-system}
spec:
  ipAddressPoolSelectors: [{matchLabels: {tier: front}}]
  interfaces: [eth0]
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec:
  communities: [{name: no-export, value: "65535:65281"}]
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor, namespace: metallb-system}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 10.0.0.1
  holdTime: 9s
  bfdProfile: fast
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: dual-routes, namespace: metallb-system}
spec:
  ipAddressPools: [dual, reserved]
  communities: [no-export]
  aggregationLength: 32
  aggregationLengthV6: 128
"#;

/// One Service to create: its name, annotations and family policy.
struct Want {
    name: String,
    annotations: Vec<(&'static str, String)>,
    families: Option<(&'static str, Vec<&'static str>)>,
    port: i32,
}

/// The 200 Services: 70 IPv4, 40 IPv6, 40 dual-stack, 15 pairs sharing an address, and 20 that
/// ask for an address of their own; both spellings of MetalLB's annotations.
fn services() -> Vec<Want> {
    let mut out = Vec::new();
    let simple = |name: String, families| Want {
        name,
        annotations: vec![],
        families,
        port: 80,
    };
    for i in 0..70 {
        out.push(simple(format!("v4-{i}"), None));
    }
    for i in 0..40 {
        out.push(simple(
            format!("v6-{i}"),
            Some(("SingleStack", vec!["IPv6"])),
        ));
    }
    for i in 0..40 {
        let mut w = simple(
            format!("dual-{i}"),
            Some(("RequireDualStack", vec!["IPv4", "IPv6"])),
        );
        let key = if i % 2 == 0 {
            "metallb.io/address-pool"
        } else {
            "metallb.universe.tf/address-pool"
        };
        w.annotations.push((key, "dual".into()));
        out.push(w);
    }
    for pair in 0..15 {
        for (side, port) in [("a", 80), ("b", 443)] {
            out.push(Want {
                name: format!("shared-{pair}-{side}"),
                annotations: vec![("metallb.io/allow-shared-ip", format!("key-{pair}"))],
                families: None,
                port,
            });
        }
    }
    for i in 0..20 {
        let key = if i % 2 == 0 {
            "metallb.io/loadBalancerIPs"
        } else {
            "metallb.universe.tf/loadBalancerIPs"
        };
        out.push(Want {
            name: format!("requested-{i}"),
            annotations: vec![(key, format!("203.0.113.{}", 20 + i))],
            families: None,
            port: 80,
        });
    }
    out
}

fn service(w: &Want) -> Service {
    let mut spec = json!({
        "type": "LoadBalancer",
        "selector": {"app": w.name},
        "ports": [{"name": "p", "port": w.port, "protocol": "TCP"}],
    });
    if let Some((policy, families)) = &w.families {
        spec["ipFamilyPolicy"] = json!(policy);
        spec["ipFamilies"] = json!(families);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": w.name,
            "namespace": APPS,
            "annotations": w.annotations.iter().cloned().collect::<BTreeMap<_, _>>(),
        },
        "spec": spec,
    }))
    .expect("a Service")
}

/// The Service's addresses as text, for messages and comparisons.
fn ingress(svc: &Service) -> Vec<String> {
    ferrolb_api::service::ingress_ips(svc)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn annotation<'a>(svc: &'a Service, key: &str) -> Option<&'a str> {
    svc.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Polls every 100 ms until `f` says done, or panics with `what` and the last state.
async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(()) => return,
            Err(state) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {state}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `FERROLB_TEST_LOG` (say `info`) shows what both controllers did; by default FerroLB's
/// warnings only and nothing of MetalLB's.
fn log_level() -> String {
    std::env::var("FERROLB_TEST_LOG").unwrap_or_else(|_| "warn".into())
}

/// Why the test cannot run here, if it cannot.
fn missing_part(bins: &Path) -> Option<String> {
    if !realkube::available() {
        return Some(format!(
            "the real control plane is not built in {} (scripts/realkube)",
            realkube::bin_dir().display()
        ));
    }
    if let Some(p) = metallb::missing() {
        return Some(format!("{} is missing (scripts/metallb)", p.display()));
    }
    for b in ["ferrolb", "ferrolb-controller"] {
        if !bins.join(b).is_file() {
            return Some(format!(
                "{} is not built (cargo build, or cargo test --workspace)",
                bins.join(b).display()
            ));
        }
    }
    None
}

/// `target/<profile>`, where the workspace binaries are.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

async fn create_services(api: &Api<Service>, wants: &[Want]) {
    futures::stream::iter(wants.iter().map(|w| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), &service(w)).await }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<_>>()
    .await
    .expect("Services created");
}

/// Every Service of `names` with an address: name to its addresses, sorted.
async fn addresses(api: &Api<Service>) -> BTreeMap<String, Vec<String>> {
    api.list(&ListParams::default())
        .await
        .expect("Services listed")
        .items
        .iter()
        .map(|s| {
            let mut ips = ingress(s);
            ips.sort();
            (s.metadata.name.clone().unwrap_or_default(), ips)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_keep_the_addresses_metallb_gave_them_after_ferrolb_migrate_and_new_ones_come_from_the_migrated_pools()
 {
    let bins = bin_dir();
    if let Some(why) = missing_part(&bins) {
        return ferrolb_tests::skip::skip(why).unwrap_or_default();
    }
    let kube = RealKube::start(RealKubeConfig {
        controller_manager: false,
        ..Default::default()
    })
    .await
    .expect("the real control plane starts");
    let client = kube.client().expect("a client");
    realkube::install_crds(
        &client,
        &[metallb::crd_dir(), ferrolb_api::crd::chart_crd_dir()],
    )
    .await
    .expect("MetalLB's and FerroLB's CRDs install");
    realkube::create_namespaces(&client, &[metallb::NAMESPACE, FERROLB_NS, APPS])
        .await
        .expect("namespaces created");
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(METALLB_CONFIG)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .collect();
    ferrolb_tests::lab::manifests::server_side_apply(&client, &docs, "operator")
        .await
        .expect("MetalLB's configuration applies");

    // MetalLB assigns the 200 Services.
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
    let services_api = Api::<Service>::namespaced(client.clone(), APPS);
    let wants = services();
    assert_eq!(wants.len(), 200);
    let mut metallb_controller = metallb::Process::controller(
        kube.kubeconfig(),
        &std::env::var("FERROLB_TEST_LOG").unwrap_or_else(|_| "none".into()),
    )
    .expect("MetalLB's controller starts");
    let started = Instant::now();
    create_services(&services_api, &wants).await;
    wait_until(
        Duration::from_secs(120),
        "MetalLB to assign every Service",
        || async {
            let all = addresses(&services_api).await;
            let pending: Vec<&String> = all
                .iter()
                .filter(|(_, ips)| ips.is_empty())
                .map(|(n, _)| n)
                .collect();
            if pending.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} without an address, e.g. {:?}",
                    pending.len(),
                    &pending[..pending.len().min(5)]
                ))
            }
        },
    )
    .await;
    eprintln!(
        "MetalLB {} assigned 200 Services in {:.1} s",
        metallb::version(),
        started.elapsed().as_secs_f64()
    );
    let before = addresses(&services_api).await;
    // What MetalLB did is what the test asks of it: the shapes are as requested.
    for w in &wants {
        let ips = &before[&w.name];
        let expect = if w.name.starts_with("dual-") { 2 } else { 1 };
        assert_eq!(ips.len(), expect, "{}: {ips:?}", w.name);
    }
    for pair in 0..15 {
        assert_eq!(
            before[&format!("shared-{pair}-a")],
            before[&format!("shared-{pair}-b")],
            "MetalLB shares key-{pair}"
        );
    }
    assert_eq!(before["requested-3"], vec!["203.0.113.23".to_string()]);
    metallb_controller.kill();
    assert!(!metallb_controller.running());

    // The migration: from the cluster's MetalLB objects to FerroLB's, applied.
    let out = Command::new(bins.join("ferrolb"))
        .args([
            "migrate",
            "--from-cluster",
            "--namespace",
            metallb::NAMESPACE,
            "--to-namespace",
            FERROLB_NS,
            "--apply",
        ])
        .env("KUBECONFIG", kube.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("ferrolb migrate runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("ferrolb migrate:\n{stderr}");
    assert!(
        out.status.success(),
        "ferrolb migrate failed: {stderr}\n{stdout}"
    );
    for applied in [
        "ipaddresspool.ferrolb.io/front-v4 applied",
        "ipaddresspool.ferrolb.io/dual applied",
        "ipaddresspool.ferrolb.io/reserved applied",
        "l2advertisement.ferrolb.io/front applied",
        "bgppeer.ferrolb.io/tor applied",
        "bgpadvertisement.ferrolb.io/dual-routes applied",
        "community.ferrolb.io/communities applied",
        "bfdprofile.ferrolb.io/fast applied",
    ] {
        assert!(
            stdout.contains(applied) || stderr.contains(applied),
            "ferrolb migrate did not say `{applied}`:\n{stdout}\n{stderr}"
        );
    }

    // FerroLB takes over: it adopts every address (its pool annotation shows it has looked at
    // the Service) and changes none.
    let controller = Command::new(bins.join("ferrolb-controller"))
        .args(["--kubeconfig", kube.kubeconfig().to_str().unwrap()])
        .args(["--namespace", FERROLB_NS, "--metrics-addr", "127.0.0.1:0"])
        .args([
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "500ms",
        ])
        .args(["--log-level", &log_level()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("FerroLB's controller starts");
    let _controller = KillOnDrop(controller);
    wait_until(
        Duration::from_secs(60),
        "FerroLB to adopt every Service",
        || async {
            let list = services_api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let unadopted: Vec<String> = list
                .items
                .iter()
                .filter(|s| annotation(s, ferrolb_api::names::IP_ALLOCATED_FROM_POOL).is_none())
                .filter_map(|s| s.metadata.name.clone())
                .collect();
            if unadopted.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} not yet adopted, e.g. {:?}",
                    unadopted.len(),
                    &unadopted[..unadopted.len().min(5)]
                ))
            }
        },
    )
    .await;
    let list = services_api.list(&ListParams::default()).await.unwrap();
    for svc in &list.items {
        let name = svc.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            annotation(svc, ferrolb_api::names::IP_ALLOCATED_FROM_POOL),
            annotation(svc, "metallb.io/ip-allocated-from-pool"),
            "{name}: FerroLB names the pool MetalLB assigned from"
        );
    }
    let after = addresses(&services_api).await;
    let changed: Vec<String> = before
        .iter()
        .filter(|(name, ips)| after.get(*name) != Some(ips))
        .map(|(name, ips)| format!("{name}: {ips:?} -> {:?}", after.get(name)))
        .collect();
    assert!(changed.is_empty(), "addresses changed: {changed:#?}");

    // New Services come from the migrated pools, clear of every address in use.
    let new = vec![
        Want {
            name: "new-v4".into(),
            annotations: vec![],
            families: None,
            port: 80,
        },
        Want {
            name: "new-v6".into(),
            annotations: vec![],
            families: Some(("SingleStack", vec!["IPv6"])),
            port: 80,
        },
        Want {
            name: "new-dual".into(),
            annotations: vec![("metallb.io/address-pool", "dual".into())],
            families: Some(("RequireDualStack", vec!["IPv4", "IPv6"])),
            port: 80,
        },
        Want {
            name: "new-requested".into(),
            annotations: vec![("metallb.universe.tf/loadBalancerIPs", "203.0.113.50".into())],
            families: None,
            port: 80,
        },
    ];
    create_services(&services_api, &new).await;
    wait_until(
        Duration::from_secs(30),
        "FerroLB to assign the new Services",
        || async {
            let all = addresses(&services_api).await;
            match new
                .iter()
                .find(|w| all.get(&w.name).is_none_or(Vec::is_empty))
            {
                None => Ok(()),
                Some(w) => Err(format!("{} has no address", w.name)),
            }
        },
    )
    .await;
    let all = addresses(&services_api).await;
    let in_use: Vec<&String> = before.values().flatten().collect();
    let within = |ip: &str, nets: &[&str]| {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        nets.iter()
            .any(|n| n.parse::<ipnet::IpNet>().unwrap().contains(&ip))
    };
    let v4 = &all["new-v4"];
    assert!(
        v4.len() == 1 && within(&v4[0], &["198.51.100.0/24"]),
        "new-v4: {v4:?}"
    );
    let v6 = &all["new-v6"];
    assert!(
        v6.len() == 1 && within(&v6[0], &["2001:db8:51::/120"]),
        "new-v6: {v6:?}"
    );
    let dual = &all["new-dual"];
    assert!(
        dual.len() == 2
            && dual
                .iter()
                .all(|ip| within(ip, &["198.51.101.0/24", "2001:db8:52::/120"])),
        "new-dual: {dual:?}"
    );
    assert_eq!(all["new-requested"], vec!["203.0.113.50".to_string()]);
    for w in &new {
        for ip in &all[&w.name] {
            assert!(
                !in_use.contains(&ip),
                "{} got {ip}, which MetalLB had given out",
                w.name
            );
        }
    }

    // Events are published from their own queue, after the writes: once the new Services'
    // IPAllocated Events are visible, those of the adoption pass before them are too. Only then
    // does "no IPChanged" mean something.
    let events_api = Api::<Event>::namespaced(client.clone(), APPS);
    wait_until(
        Duration::from_secs(30),
        "the new Services' IPAllocated Events",
        || async {
            let list = events_api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            match new.iter().find(|w| {
                !list.items.iter().any(|e| {
                    e.reason.as_deref() == Some("IPAllocated")
                        && e.involved_object.name.as_deref() == Some(w.name.as_str())
                })
            }) {
                None => Ok(()),
                Some(w) => Err(format!("none yet for {}", w.name)),
            }
        },
    )
    .await;
    let events = events_api.list(&ListParams::default()).await.unwrap();
    let changes: Vec<String> = events
        .items
        .iter()
        .filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("IPChanged" | "ClearAssignment" | "AllocationFailed")
            )
        })
        .map(|e| {
            format!(
                "{:?} {:?}: {:?}",
                e.reason, e.involved_object.name, e.message
            )
        })
        .collect();
    assert!(changes.is_empty(), "FerroLB reported: {changes:#?}");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
