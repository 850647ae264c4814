//! Shared by the `explain*` suites: an API server with FerroLB's CRDs and the real controller,
//! and helpers that create objects as their owners write them.
#![allow(dead_code)] // each suite uses a different part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_cli::explain::service::ServiceExplanation;
use ferrolb_cli::explain::{self, Objects, Settings, text};
use ferrolb_cli::snapshot::{self, Scope};
use ferrolb_tests::backend::Backend;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// FerroLB's install namespace in these tests.
pub const NS: &str = "ferrolb-system";

/// An API server with FerroLB's CRDs, the namespaces the tests use, and the controller.
pub struct Env {
    _server: Backend,
    /// Its kubeconfig file.
    pub kubeconfig: PathBuf,
    /// A client.
    pub client: kube::Client,
    controller: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.controller.kill();
        let _ = self.controller.wait();
    }
}

/// `target/<profile>`, where the workspace's binaries are.
pub fn bin_dir() -> PathBuf {
    ferrolb_tests::test_bin_dir()
}

/// A workspace binary; the test fails when it is not built (`cargo test --workspace` builds it).
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built: cargo build -p ferrolb-cli -p ferrolb-controller",
        path.display()
    );
    path
}

impl Env {
    /// Starts the server, the namespaces and the controller.
    pub async fn start() -> Env {
        // Dual-stack, as the real server always is here (IPv6 Services).
        let dual_stack = |mut c: ferrolb_tests::apiserver::ApiServerConfig| {
            c.cluster.service_cidr_v6 = Some("fd00:10:96::".parse().unwrap());
            c
        };
        let server = Backend::start(&[ferrolb_api::crd::chart_crd_dir()], dual_stack, |r| {
            ferrolb_tests::realkube::RealKubeConfig {
                controller_manager: false,
                ..r
            }
        })
        .await
        .expect("the API server starts");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        for (ns, team) in [(NS, ""), ("default", ""), ("team-a", "a"), ("team-b", "b")] {
            let labels = if team.is_empty() {
                json!({})
            } else {
                json!({ "team": team })
            };
            create(
                &client,
                "v1",
                "Namespace",
                json!({"metadata": {"name": ns, "labels": labels}}),
            )
            .await;
        }
        // Pods need their namespace's default ServiceAccount on a real server (run without
        // kube-controller-manager, nothing makes it); the double has no ServiceAccounts.
        if server.kind() == ferrolb_tests::backend::BackendKind::Real {
            create(
                &client,
                "v1",
                "ServiceAccount",
                json!({"metadata": {"name": "default", "namespace": NS}}),
            )
            .await;
        }
        let controller = Command::new(binary("ferrolb-controller"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", NS, "--metrics-addr", "127.0.0.1:0"])
            .args(["--identity", "explain", "--lease-duration", "3s"])
            .args(["--renew-deadline", "2s", "--retry-period", "500ms"])
            .args([
                "--log-level",
                &std::env::var("FERROLB_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("the controller starts");
        Env {
            _server: server,
            kubeconfig,
            client,
            controller,
            _dir: dir,
        }
    }

    /// Reads the cluster as `ferrolb explain service` does.
    pub async fn explain_service(&self, namespace: &str, name: &str) -> ServiceExplanation {
        let settings = Settings::default();
        let scope = Scope {
            service: Some((namespace.into(), name.into())),
            all_endpoints: false,
        };
        let objects = snapshot::read(&self.client, &settings, &scope)
            .await
            .expect("the objects are listed");
        explain::explain_service(&objects, &settings, namespace, name)
    }

    /// Everything, as `ferrolb status` and `ferrolb explain node` read it.
    pub async fn objects(&self) -> Objects {
        let scope = Scope {
            service: None,
            all_endpoints: true,
        };
        snapshot::read(&self.client, &Settings::default(), &scope)
            .await
            .expect("the objects are listed")
    }

    /// Runs the `ferrolb` binary with `args`: its exit status and stdout.
    pub fn ferrolb(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new(binary("ferrolb"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("ferrolb runs");
        assert!(
            out.stderr.is_empty() || out.status.code() != Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

/// Creates an object from its JSON (kind and apiVersion given apart); its `status`, if any, is
/// then written through the status subresource, as the component owning it would.
pub async fn create(client: &kube::Client, api_version: &str, kind: &str, mut body: Value) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ServiceL2Status" => "servicel2statuses".to_string(),
        "ServiceBGPStatus" => "servicebgpstatuses".to_string(),
        "IPAddressPool" | "L2Advertisement" | "BGPAdvertisement" | "BGPPeer"
        | "BGPSessionState" | "ConfigurationState" | "Pod" | "Node" | "Service" | "Namespace"
        | "ServiceAccount" | "EndpointSlice" => {
            format!("{}s", kind.to_lowercase())
        }
        other => panic!("no plural for {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    body["apiVersion"] = json!(api_version);
    body["kind"] = json!(kind);
    let namespace = body["metadata"]["namespace"].as_str().map(str::to_owned);
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    let status = body.get("status").cloned();
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating {kind} {name}: {e}"),
    }
    // Nodes keep the status they are created with; other kinds take it from /status.
    if let Some(status) = status.filter(|_| kind != "Node") {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("writing the status of {kind} {name}: {e}"));
    }
}

pub async fn pool(client: &kube::Client, name: &str, addresses: &[&str], allocation: Value) {
    create(
        client,
        "ferrolb.io/v1beta1",
        "IPAddressPool",
        json!({"metadata": {"name": name, "namespace": NS},
               "spec": {"addresses": addresses, "serviceAllocation": allocation}}),
    )
    .await;
}

pub async fn service(client: &kube::Client, namespace: &str, name: &str, extra: Value) {
    let mut spec = json!({"type": "LoadBalancer", "selector": {"app": name},
                          "ports": [{"port": 80, "protocol": "TCP"}]});
    let mut annotations = json!({});
    if let Some(map) = extra.as_object() {
        for (k, v) in map {
            if k == "annotations" {
                annotations = v.clone();
            } else {
                spec[k] = v.clone();
            }
        }
    }
    create(
        client,
        "v1",
        "Service",
        json!({"metadata": {"name": name, "namespace": namespace, "annotations": annotations},
               "spec": spec}),
    )
    .await;
}

/// A Node with `labels`, Ready, and `NetworkUnavailable` as given.
pub async fn node(client: &kube::Client, name: &str, labels: Value, network_unavailable: bool) {
    create(
        client,
        "v1",
        "Node",
        json!({"metadata": {"name": name, "labels": labels},
               "status": {"conditions": [
                   {"type": "Ready", "status": "True"},
                   {"type": "NetworkUnavailable",
                    "status": if network_unavailable { "True" } else { "False" }}]}}),
    )
    .await;
}

/// A Ready speaker Pod on `node`, as the DaemonSet and the kubelet leave it.
pub async fn speaker_pod(client: &kube::Client, node: &str) {
    create(
        client,
        "v1",
        "Pod",
        json!({"metadata": {"name": format!("speaker-{node}"), "namespace": NS,
                            "labels": {ferrolb_api::names::SPEAKER_POD_LABEL:
                                       ferrolb_api::names::SPEAKER_POD_LABEL_VALUE}},
               "spec": {"nodeName": node, "automountServiceAccountToken": false,
                        "containers": [{"name": "speaker", "image": "ferrolb-speaker:test"}]},
               "status": {"phase": "Running",
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .await;
}

/// An EndpointSlice of Service `namespace/name` with a ready endpoint on each of `nodes`.
pub async fn endpoints(client: &kube::Client, namespace: &str, name: &str, nodes: &[&str]) {
    let endpoints: Vec<Value> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"addresses": [format!("10.244.{}.10", i + 1)], "nodeName": n,
                   "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    create(
        client,
        "discovery.k8s.io/v1",
        "EndpointSlice",
        json!({"metadata": {"name": format!("{name}-1"), "namespace": namespace,
                            "labels": {ferrolb_api::names::SERVICE_NAME_LABEL: name}},
               "addressType": "IPv4", "endpoints": endpoints,
               "ports": [{"port": 80, "protocol": "TCP"}]}),
    )
    .await;
}

/// Waits until `check` of a fresh explanation of `namespace/name` returns `Some`.
pub async fn explained<T>(
    env: &Env,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&ServiceExplanation) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let e = env.explain_service(namespace, name).await;
        if let Some(t) = check(&e) {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen in 30 s; last explanation:\n{}",
            text::service(&e)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The reason given for `node` in the explanation's first address, as `CODE: message`.
pub fn reason_of(e: &ServiceExplanation, node: &str) -> String {
    let n = e.addresses[0]
        .nodes
        .iter()
        .find(|n| n.node == node)
        .unwrap_or_else(|| panic!("{node} is not listed:\n{}", text::service(e)));
    n.reasons
        .iter()
        .map(|r| format!("{}: {}", r.code, r.message))
        .collect::<Vec<_>>()
        .join(" | ")
}
