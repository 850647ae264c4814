//! The real controller and speaker, started with the arguments and environment the chart renders,
//! against an API server: every call each makes must be granted by the rendered RBAC, and the
//! table of calls the chart is checked against must be the calls it makes.
//!
//! Against the test double (default) the calls come from its request log and the grants are read
//! off the rendered RBAC. With `FERROLB_APISERVER=real` the rendered chart is applied whole to a
//! real kube-apiserver (server-side apply), each binary runs on a token of its own ServiceAccount
//! under the real RBAC authorizer, the calls come from the server's audit log, and no call may be
//! refused (403). `a_rule_removed_from_the_charts_rbac_is_refused_by_the_real_server` shows that
//! this check can fail.
//!
//! Only `--metrics-addr` (a free loopback port, tests run in parallel) and `--kubeconfig` (there is
//! no in-cluster configuration here) differ from the chart; downward-API variables get the values
//! the kubelet would give. The speaker runs in a node namespace of the lab's network (it opens
//! raw sockets and BGP sessions from the node's addresses), so its half needs root.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_tests::apiserver::{ApiServerConfig, RequestRecord};
use ferrolb_tests::backend::{Backend, BackendKind};
use ferrolb_tests::lab::{API_PORT, manifests};
use ferrolb_tests::netns::topology::API_V4;
use ferrolb_tests::netns::{self, Topology};
use ferrolb_tests::realkube::{RealKubeConfig, service_account_token};
use k8s_openapi::api::core::v1::{Container, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;

use super::render::{Objects, chart_dir, flag, only_container, variant, variants, workspace};
use super::{ApiCall, CONTROLLER_API_CALLS, NAMESPACE, SPEAKER_API_CALLS, Scope};

/// Calls in the controller's table that its scenario does not provoke, and why.
const CONTROLLER_NOT_PROVOKED: &[(&str, &str, &str, &str)] = &[];

/// Calls in the speaker's table that its scenario does not provoke, and why.
const SPEAKER_NOT_PROVOKED: &[(&str, &str, &str, &str)] = &[];

/// How long a binary gets to make every call a step of the scenario provokes.
const SETTLE: Duration = Duration::from_secs(30);

/// The node the speaker runs on.
const NODE: &str = "node-a";

/// One recorded call in RBAC terms.
type Call = (String, String, String);

/// Kills the process when dropped, so a failing test leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use ferrolb_tests::skip::skip;

/// The binary `name` that cargo built next to this test, when it is newer than `sources`.
/// Building it from here would make cargo resolve features for that crate alone and rebuild
/// shared dependencies back and forth; `cargo test --workspace` builds it anyway.
fn built_binary(name: &str, sources: &[&str]) -> Option<PathBuf> {
    let found = (|| {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let binary = exe
            .parent()
            .and_then(|deps| deps.parent())
            .ok_or("no target directory")?
            .join(name);
        let built = std::fs::metadata(&binary)
            .and_then(|m| m.modified())
            .map_err(|_| format!("{} is not built", binary.display()))?;
        if sources
            .iter()
            .chain(&["api/src", "Cargo.lock"])
            .any(|s| newer_than(&workspace().join(s), built))
        {
            return Err(format!("{} is older than its sources", binary.display()));
        }
        Ok(binary)
    })();
    found
        .or_else(|why: String| {
            skip(format!(
                "{why}; run `cargo build -p {name}` first (`cargo test --workspace` does)"
            ))
            .ok_or(())
        })
        .ok()
}

/// Whether `path`, or any file below it, was modified after `time`.
fn newer_than(path: &Path, time: std::time::SystemTime) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).into_iter().flatten().flatten();
        return entries.into_iter().any(|e| newer_than(&e.path(), time));
    }
    meta.modified().is_ok_and(|m| m > time)
}

/// `program` (possibly behind `ip netns exec NS`) with the container's rendered arguments and
/// environment, `--metrics-addr` moved to a free loopback port and `--kubeconfig` added.
/// `downward` gives the value of each downward-API field the chart reads.
fn as_rendered(
    program: &[OsString],
    container: &Container,
    kubeconfig: &Path,
    downward: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(&program[0]);
    command.args(&program[1..]);
    for arg in container.args.iter().flatten() {
        match arg.split_once('=') {
            Some(("--metrics-addr", _)) => command.arg("--metrics-addr=127.0.0.1:0"),
            _ => command.arg(arg),
        };
    }
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env_remove("KUBECONFIG");
    for var in container.env.iter().flatten() {
        let field = var.value_from.as_ref().and_then(|v| v.field_ref.as_ref());
        let value = match field.map(|f| f.field_path.as_str()) {
            Some(path) => downward
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, v)| (*v).to_owned())
                .unwrap_or_else(|| {
                    panic!("the chart reads {path} from the downward API; map it here")
                }),
            None => var.value.clone().unwrap_or_default(),
        };
        command.env(&var.name, value);
    }
    command.stdout(Stdio::null()).stderr(Stdio::inherit());
    command
}

fn dynamic(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta1", kind), plural)
}

async fn create(
    client: &kube::Client,
    kind: &str,
    plural: &str,
    name: &str,
    spec: serde_json::Value,
) {
    let resource = dynamic("ferrolb.io", kind, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
    let object = json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec,
    });
    let object: DynamicObject = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("the test API server accepts it");
}

async fn create_namespace(client: &kube::Client) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    // The server starts with `default`; the install namespace is ours to make.
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// The configuration the binaries work on: a pool announced over layer 2 and BGP with a
/// community alias, and a Service. `address` is the pool (a range or CIDR).
async fn seed_configuration(client: &kube::Client, address: &str) {
    create(
        client,
        "IPAddressPool",
        "ipaddresspools",
        "pool",
        json!({"addresses": [address]}),
    )
    .await;
    create(
        client,
        "L2Advertisement",
        "l2advertisements",
        "l2",
        json!({"ipAddressPools": ["pool"]}),
    )
    .await;
    let spec = json!({"ipAddressPools": ["pool"], "communities": ["no-export-here"]});
    create(client, "BGPAdvertisement", "bgpadvertisements", "bgp", spec).await;
    let spec = json!({"communities": [{"name": "no-export-here", "value": "65000:1"}]});
    create(client, "Community", "communities", "aliases", spec).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        // `Local`: per-node ServiceBGPStatus objects are written only for such Services.
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "selector": {"app": "web"},
                 "externalTrafficPolicy": "Local"}
    }))
    .expect("a Service");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("Service created");
}

fn as_call(record: &RequestRecord) -> Option<Call> {
    let resource = record.resource.as_ref()?;
    let resource = match &record.subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.clone(),
    };
    Some((
        record.group.clone(),
        resource,
        record.verb?.as_str().to_owned(),
    ))
}

fn table(calls: &[ApiCall]) -> BTreeSet<Call> {
    calls
        .iter()
        .flat_map(|c| {
            c.verbs
                .iter()
                .map(|v| (c.group.to_owned(), c.resource.to_owned(), (*v).to_owned()))
        })
        .collect()
}

/// The calls of `table` less those listed in `not_provoked`.
fn provokable(table: &BTreeSet<Call>, not_provoked: &[(&str, &str, &str, &str)]) -> BTreeSet<Call> {
    table
        .iter()
        .filter(|(g, r, v)| {
            !not_provoked
                .iter()
                .any(|(ng, nr, nv, _)| (ng, nr, nv) == (&g.as_str(), &r.as_str(), &v.as_str()))
        })
        .cloned()
        .collect()
}

/// Whether the rendered RBAC lets `account` make `record`: a ClusterRole anywhere, a Role in the
/// install namespace only.
fn granted(objects: &Objects, account: &str, record: &RequestRecord, call: &Call) -> bool {
    let grants = objects.grants(account);
    let (group, resource, verb) = call.clone();
    grants.contains(&(
        Scope::Cluster,
        group.clone(),
        resource.clone(),
        verb.clone(),
    )) || (record.namespace.as_deref() == Some(NAMESPACE)
        && grants.contains(&(Scope::InstallNamespace, group, resource, verb)))
}

/// The requests `account` made (told apart by the User-Agent each binary sets).
fn requests_of(server: &Backend, account: &str) -> Vec<RequestRecord> {
    server
        .request_log()
        .into_iter()
        .filter(|r| r.user_agent.starts_with(&format!("{account}/")))
        .collect()
}

fn calls_of(server: &Backend, account: &str) -> BTreeSet<Call> {
    requests_of(server, account)
        .iter()
        .filter_map(as_call)
        .collect()
}

/// Polls (every 200 ms, in a blocking-safe way) until `account` has made every call of `want`;
/// returns whether it did within [`SETTLE`].
fn wait_for_calls(server: &Backend, account: &str, want: &BTreeSet<Call>) -> bool {
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        if want.is_subset(&calls_of(server, account)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// The assertions both binaries answer to: every call granted, every call in the table, every
/// provokable call of the table made.
fn assert_calls_match(
    server: &Backend,
    objects: &Objects,
    account: &str,
    table_name: &str,
    expected: &BTreeSet<Call>,
    provokable: &BTreeSet<Call>,
) {
    let log = requests_of(server, account);
    let refused: Vec<String> = log
        .iter()
        .filter_map(|r| as_call(r).map(|c| (r, c)))
        .filter(|(r, c)| !granted(objects, account, r, c))
        .map(|(r, c)| format!("{} {} in {:?} ({c:?})", r.method, r.path, r.namespace))
        .collect();
    assert!(
        refused.is_empty(),
        "the chart's RBAC would refuse {account}: {refused:#?}"
    );
    let recorded: BTreeSet<Call> = log.iter().filter_map(as_call).collect();
    let unlisted: Vec<_> = recorded.difference(expected).collect();
    assert!(
        unlisted.is_empty(),
        "calls missing from {table_name}: {unlisted:?}"
    );
    let unused: Vec<_> = provokable.difference(&recorded).collect();
    assert!(
        unused.is_empty(),
        "{table_name} lists calls {account} did not make: {unused:?}"
    );
    if let Some(real) = server.real() {
        let user = format!("system:serviceaccount:{NAMESPACE}:{account}");
        let forbidden: Vec<String> = real
            .request_log()
            .into_iter()
            .filter(|r| r.user == user && r.request.status == 403)
            .map(|r| format!("{} {}", r.request.method, r.request.path))
            .collect();
        assert!(
            forbidden.is_empty(),
            "the real RBAC authorizer refused {account}: {forbidden:#?}"
        );
        assert!(
            real.request_log().iter().any(|r| r.user == user),
            "{account} made its calls as its ServiceAccount {user}"
        );
    }
}

/// The rendered chart (its CRDs are installed by [`Backend::start`]) applied whole with
/// server-side apply, as `helm install` would create it; `edit` may change the documents first.
async fn apply_chart(
    client: &kube::Client,
    yaml: &str,
    edit: impl FnOnce(&mut Vec<serde_json::Value>),
) {
    let mut docs: Vec<serde_json::Value> = Vec::new();
    for de in serde_norway::Deserializer::from_str(yaml) {
        let v = <serde_json::Value as serde::Deserialize>::deserialize(de).expect("rendered YAML");
        if !v.is_null() {
            docs.push(v);
        }
    }
    for d in &mut docs {
        if d["metadata"]["namespace"].is_null() && !cluster_scoped(d["kind"].as_str().unwrap_or(""))
        {
            d["metadata"]["namespace"] = json!(NAMESPACE);
        }
    }
    edit(&mut docs);
    // `helm install --create-namespace`: the release namespace first.
    docs.insert(
        0,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    );
    manifests::server_side_apply(client, &docs, "helm")
        .await
        .unwrap_or_else(|e| panic!("the real API server refused the rendered chart: {e}"));
}

fn cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition" | "Namespace"
    )
}

/// The real server's configuration here: the scenarios need no kube-controller-manager.
fn no_controller_manager(r: RealKubeConfig) -> RealKubeConfig {
    RealKubeConfig {
        controller_manager: false,
        ..r
    }
}

/// A real kube-apiserver (whatever `FERROLB_APISERVER` says) serving the CRDs in `crds`.
async fn real_server(crds: &[PathBuf]) -> Backend {
    Backend::start_kind(BackendKind::Real, crds, |c| c, no_controller_manager)
        .await
        .expect("the real API server starts")
}

/// The kubeconfig a binary runs with: the admin's on the double; on a real server, a token of
/// the ServiceAccount the rendered Pod names (so the real RBAC authorizer judges every call).
/// `mint` runs the token request (on a runtime that reaches the server).
fn kubeconfig_for(
    server: &Backend,
    pod: &k8s_openapi::api::core::v1::PodSpec,
    path: &Path,
    mint: impl FnOnce(String) -> String,
) {
    match server.real() {
        None => server.write_kubeconfig(path).expect("kubeconfig written"),
        Some(real) => {
            let account = pod
                .service_account_name
                .clone()
                .expect("the chart names the Pod's ServiceAccount");
            std::fs::write(path, real.kubeconfig_yaml(&mint(account))).expect("kubeconfig written");
        }
    }
}

/// The controller binary as the chart runs it, on the kubeconfig [`kubeconfig_for`] gives it
/// (written to `kubeconfig`). Call it from a multi-thread runtime.
fn start_controller(
    server: &Backend,
    client: &kube::Client,
    objects: &Objects,
    binary: PathBuf,
    kubeconfig: &Path,
) -> Running {
    let minting = client.clone();
    kubeconfig_for(server, objects.controller_pod(), kubeconfig, |account| {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(service_account_token(
                minting,
                NAMESPACE.into(),
                account,
            ))
        })
        .expect("a ServiceAccount token")
    });
    let downward = [
        ("metadata.namespace", NAMESPACE),
        ("metadata.name", "ferrolb-controller-7d9f-abcde"),
    ];
    let container = only_container(objects.controller_pod());
    Running(
        as_rendered(&[binary.into()], container, kubeconfig, &downward)
            .spawn()
            .expect("the controller starts"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn controller_started_as_the_chart_says_makes_exactly_the_calls_its_rbac_grants() {
    let Some(objects) = tokio::task::block_in_place(|| variant("default")) else {
        return;
    };
    let Some(binary) = built_binary("ferrolb-controller", &["controller/src"]) else {
        return;
    };

    let server = Backend::start(&[chart_dir().join("crds")], |c| c, no_controller_manager)
        .await
        .expect("the API server starts");
    let client = server.client();
    match server.kind() {
        BackendKind::Double => create_namespace(&client).await,
        BackendKind::Real => apply_chart(&client, &objects.yaml, |_| {}).await,
    }
    seed_configuration(&client, "10.99.7.0/28").await;
    // A peer for its Ready condition (`bgppeers/status`); the speaker's scene has its own.
    let spec = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "10.99.7.254"});
    create(&client, "BGPPeer", "bgppeers", "router", spec).await;
    let dir = std::env::temp_dir().join(format!("ferrolb-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    let controller = start_controller(&server, &client, objects, binary, &kubeconfig);

    let expected = table(CONTROLLER_API_CALLS);
    let provokable = provokable(&expected, CONTROLLER_NOT_PROVOKED);
    tokio::task::block_in_place(|| wait_for_calls(&server, "ferrolb-controller", &provokable));
    // It did its job: the Service has its address.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let web = services.get("web").await.expect("the Service");
    let ingress = web
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress);
    assert!(
        ingress.is_some_and(|i| i
            .iter()
            .any(|a| a.ip.as_deref().is_some_and(|ip| ip.starts_with("10.99.7.")))),
        "the controller assigned an address from the pool"
    );
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    assert_calls_match(
        &server,
        objects,
        "ferrolb-controller",
        "CONTROLLER_API_CALLS",
        &expected,
        &provokable,
    );
}

/// The lab's network, the test API server on its bridge, and what the speaker needs on top of
/// [`seed_configuration`]: Nodes and speaker Pods (`examples/lab`), the rendered gossip Secret
/// under the name the rendered arguments give, a BGP peer (the router's address, where nothing
/// listens: the session is configured and retried, never established), the Service's address
/// and a ready endpoint on the speaker's node.
struct SpeakerScene {
    server: Backend,
    rt: tokio::runtime::Runtime,
    topo: Topology,
    dir: PathBuf,
}

impl SpeakerScene {
    fn start(objects: &Objects) -> Self {
        let topo = Topology::create(&netns::unique_prefix("fchart")).expect("namespaces built");
        let rt = netns::runtime_in(topo.switch.name()).expect("runtime in the switch namespace");
        let crds = chart_dir().join("crds");
        let switch = topo.switch.name().to_owned();
        let server = rt
            .block_on(rt.spawn(async move {
                Backend::start(
                    &[crds],
                    |c| ApiServerConfig {
                        listen: SocketAddr::new(API_V4.into(), API_PORT),
                        ..c
                    },
                    |r| RealKubeConfig {
                        address: API_V4.into(),
                        port: API_PORT,
                        netns: Some(switch),
                        controller_manager: false,
                        ..r
                    },
                )
                .await
            }))
            .expect("API server task")
            .expect("the API server starts on the bridge");
        let dir = std::env::temp_dir().join(format!("{}-chart", topo.prefix));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let scene = Self {
            server,
            rt,
            topo,
            dir,
        };
        let container = only_container(objects.speaker_pod());
        let secret_name = flag(container, "--gossip-secret")
            .expect("the chart names the gossip Secret")
            .to_owned();
        let mut secret: Secret = objects
            .secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(secret_name.as_str()))
            .expect("the chart renders the Secret its speaker is pointed at")
            .clone();
        secret.metadata.namespace = Some(NAMESPACE.into());
        let lab = workspace().join("examples/lab");
        let files = ["10-nodes.yaml", "20-speakers.yaml"].map(|f| lab.join(f));
        let client = scene.client();
        let real = scene.server.kind() == BackendKind::Real;
        let yaml = objects.yaml.clone();
        scene.block(async move {
            if real {
                apply_chart(&client, &yaml, |_| {}).await;
                // The ServiceAccount admission plugin wants a `default` account for the Pods;
                // kube-controller-manager would make it, and it does not run here.
                let sa = serde_json::from_value(json!({"metadata": {"name": "default"}}))
                    .expect("a ServiceAccount");
                let _ = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
                    client.clone(),
                    NAMESPACE,
                )
                .create(&PostParams::default(), &sa)
                .await;
            } else {
                create_namespace(&client).await;
            }
            manifests::apply(&client, &files)
                .await
                .expect("Nodes and speaker Pods");
            if !real {
                Api::<Secret>::namespaced(client.clone(), NAMESPACE)
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("the gossip Secret");
            }
            seed_configuration(&client, "10.99.0.100-10.99.0.109").await;
            let spec = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "10.99.0.1",
                              "holdTime": "9s", "connectTime": "2s"});
            create(&client, "BGPPeer", "bgppeers", "router", spec).await;
            Api::<Service>::namespaced(client.clone(), "default")
                .patch_status(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                        {"ip": "10.99.0.100", "ipMode": "VIP"}]}}})),
                )
                .await
                .expect("the Service's address");
            let slice: EndpointSlice = serde_json::from_value(json!({
                "metadata": {"name": "web-1", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.99.10.10"], "conditions": {"ready": true},
                               "nodeName": NODE}],
                "ports": [{"port": 80, "protocol": "TCP"}],
            }))
            .expect("an EndpointSlice");
            Api::<EndpointSlice>::namespaced(client, "default")
                .create(&PostParams::default(), &slice)
                .await
                .expect("the EndpointSlice");
        });
        scene
    }

    fn client(&self) -> kube::Client {
        let _guard = self.rt.enter();
        self.server.client()
    }

    fn block<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        self.rt
            .block_on(self.rt.spawn(fut))
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// Deletes the BGPPeer: the speaker deletes its BGPSessionState.
    fn delete_peer(&self) {
        let client = self.client();
        self.block(async move {
            let resource = dynamic("ferrolb.io", "BGPPeer", "bgppeers");
            let api: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &resource);
            api.delete("router", &Default::default())
                .await
                .expect("the BGPPeer is deleted");
        });
    }

    /// Marks the Service's only endpoint ready or not: the speaker stops or starts announcing.
    fn endpoint_ready(&self, ready: bool) {
        let client = self.client();
        self.block(async move {
            let patch = json!({"endpoints": [{"addresses": ["10.99.10.10"],
                "conditions": {"ready": ready}, "nodeName": NODE}]});
            Api::<EndpointSlice>::namespaced(client, "default")
                .patch("web-1", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("the EndpointSlice is patched");
        });
    }
}

impl Drop for SpeakerScene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn call(group: &str, resource: &str, verb: &str) -> Call {
    (group.into(), resource.into(), verb.into())
}

#[test]
fn speaker_started_as_the_chart_says_makes_exactly_the_calls_its_rbac_grants() {
    let Some(objects) = variant("default") else {
        return;
    };
    if let Err(e) = netns::require_root() {
        skip::<()>(format!("the speaker runs in a node namespace: {e}"));
        return;
    }
    let Some(binary) = built_binary("ferrolb-speaker", &["speaker/src"]) else {
        return;
    };
    let container = only_container(objects.speaker_pod());
    for (name, want) in [("--enable-l2", "true"), ("--enable-bgp", "true")] {
        assert_eq!(flag(container, name), Some(want), "default values: {name}");
    }
    let scene = SpeakerScene::start(objects);
    let kubeconfig = scene.dir.join("kubeconfig");
    kubeconfig_for(
        &scene.server,
        objects.speaker_pod(),
        &kubeconfig,
        |account| {
            scene
                .block(service_account_token(
                    scene.client(),
                    NAMESPACE.into(),
                    account,
                ))
                .expect("a ServiceAccount token")
        },
    );
    let node = scene.topo.node(0).name().to_owned();
    let program: Vec<OsString> = vec![
        "ip".into(),
        "netns".into(),
        "exec".into(),
        node.into(),
        binary.into(),
    ];
    let downward = [
        ("spec.nodeName", NODE),
        ("metadata.namespace", NAMESPACE),
        ("metadata.name", "ferrolb-speaker-x7k2p"),
    ];
    let speaker = Running(
        as_rendered(&program, container, &kubeconfig, &downward)
            .spawn()
            .expect("the speaker starts"),
    );

    let account = "ferrolb-speaker";
    let expected = table(SPEAKER_API_CALLS);
    let provokable = provokable(&expected, SPEAKER_NOT_PROVOKED);
    // 1. It announces: status objects created and written, `nodeAssigned` recorded.
    let l2 = "servicel2statuses";
    let bgp = "servicebgpstatuses";
    let announced: BTreeSet<Call> = [
        call("ferrolb.io", l2, "create"),
        call("ferrolb.io", &format!("{l2}/status"), "patch"),
        call("ferrolb.io", bgp, "create"),
        call("ferrolb.io", &format!("{bgp}/status"), "patch"),
        call("ferrolb.io", "bgpsessionstates", "create"),
        call("ferrolb.io", "bgpsessionstates/status", "patch"),
        call("events.k8s.io", "events", "create"),
    ]
    .into();
    let step = |what: &str, want: &BTreeSet<Call>| {
        assert!(
            wait_for_calls(&scene.server, account, want),
            "{what}: missing {:?}",
            want.difference(&calls_of(&scene.server, account))
                .collect::<Vec<_>>()
        );
    };
    step("announcing", &announced);
    // 2. The endpoint stops being ready: it withdraws and deletes its status objects.
    scene.endpoint_ready(false);
    let withdrawn: BTreeSet<Call> = [
        call("ferrolb.io", l2, "delete"),
        call("ferrolb.io", bgp, "delete"),
    ]
    .into();
    step("withdrawing", &withdrawn);
    // 3. Ready again: it announces again (a new `nodeAssigned` Event).
    scene.endpoint_ready(true);
    // 4. The BGPPeer goes: so does its BGPSessionState.
    scene.delete_peer();
    wait_for_calls(&scene.server, account, &provokable);
    drop(speaker);
    assert_calls_match(
        &scene.server,
        objects,
        account,
        "SPEAKER_API_CALLS",
        &expected,
        &provokable,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_removed_from_the_charts_rbac_is_refused_by_the_real_server() {
    let Some(objects) = tokio::task::block_in_place(|| variant("default")) else {
        return;
    };
    let Some(binary) = built_binary("ferrolb-controller", &["controller/src"]) else {
        return;
    };
    if !ferrolb_tests::realkube::available() {
        skip::<()>("the real control plane is not built: run scripts/realkube");
        return;
    }
    let server = real_server(&[chart_dir().join("crds")]).await;
    let client = server.client();
    // The chart without its grant to write Service status.
    let mut removed = 0;
    apply_chart(&client, &objects.yaml, |docs| {
        for d in docs.iter_mut().filter(|d| d["kind"] == "ClusterRole") {
            if let Some(rules) = d["rules"].as_array_mut() {
                let before = rules.len();
                rules.retain(|r| {
                    !r["resources"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|x| x == "services/status"))
                });
                removed += before - rules.len();
            }
        }
    })
    .await;
    assert_eq!(removed, 1, "the chart grants services/status in one rule");
    seed_configuration(&client, "10.99.8.0/28").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let _controller = start_controller(&server, &client, objects, binary, &kubeconfig);
    let real = server.real().expect("a real server");
    let account = objects.controller_pod().service_account_name.clone();
    let user = format!(
        "system:serviceaccount:{NAMESPACE}:{}",
        account.unwrap_or_default()
    );
    let deadline = Instant::now() + SETTLE;
    let refused = loop {
        let refused = real.request_log().into_iter().find(|r| {
            r.user == user
                && r.request.status == 403
                && r.request.resource.as_deref() == Some("services")
                && r.request.subresource.as_deref() == Some("status")
        });
        if refused.is_some() || Instant::now() > deadline {
            break refused;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let refused = refused.expect("the real server refuses the status write with 403");
    assert_eq!(refused.request.verb.map(|v| v.as_str()), Some("patch"));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_values_variant_is_applied_whole_by_a_real_api_server() {
    let Some(all) = tokio::task::block_in_place(variants) else {
        return;
    };
    if !ferrolb_tests::realkube::available() {
        skip::<()>("the real control plane is not built: run scripts/realkube");
        return;
    }
    let monitoring = workspace().join("tests/fixtures/monitoring-crds");
    let server = real_server(&[chart_dir().join("crds"), monitoring]).await;
    let client = server.client();
    // One release, upgraded through every variant in turn; `apply_chart` fails on any refusal.
    for (name, objects) in all {
        apply_chart(&client, &objects.yaml, |_| {}).await;
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), NAMESPACE);
        let controller = objects
            .controller()
            .metadata
            .name
            .clone()
            .unwrap_or_default();
        assert!(
            deployments
                .get_opt(&controller)
                .await
                .expect("a read")
                .is_some(),
            "variant {name}: the controller Deployment is stored"
        );
    }
}
