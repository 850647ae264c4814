//! The real controller, started with the arguments and environment the chart renders, against the
//! test API server: every call it makes must be granted by the rendered RBAC, and the table of
//! calls the chart is checked against must be the calls it makes.
//!
//! Only `--metrics-addr` (a free loopback port, tests run in parallel) and `--kubeconfig` (there is
//! no in-cluster configuration here) differ from the chart; downward-API variables get the values
//! the kubelet would give.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig, RequestRecord};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use super::render::{Objects, chart_dir, only_container, variant, workspace};
use super::{ApiCall, CONTROLLER_API_CALLS, NAMESPACE, Scope};

/// Calls in the controller's table that this scenario does not provoke, and why.
const NOT_PROVOKED: &[(&str, &str, &str, &str)] = &[(
    "events.k8s.io",
    "events",
    "patch",
    "an Event is patched only when the same Event repeats",
)];

/// How long the controller gets to make every call the scenario provokes.
const SETTLE: Duration = Duration::from_secs(30);

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

/// The `ferrolb-controller` that cargo built next to this test, when it is newer than its
/// sources. Building it from here would make cargo resolve features for the controller alone and
/// rebuild shared dependencies back and forth; `cargo test --workspace` builds it anyway.
fn controller_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no target directory")?
        .join("ferrolb-controller");
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .map_err(|_| format!("{} is not built", binary.display()))?;
    let sources = ["controller/src", "api/src", "Cargo.lock"].map(|p| workspace().join(p));
    if sources.iter().any(|s| newer_than(s, built)) {
        return Err(format!("{} is older than its sources", binary.display()));
    }
    Ok(binary)
}

/// Whether `path`, or any file below it, was modified after `time`.
fn newer_than(path: &std::path::Path, time: std::time::SystemTime) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).into_iter().flatten().flatten();
        return entries.into_iter().any(|e| newer_than(&e.path(), time));
    }
    meta.modified().is_ok_and(|m| m > time)
}

fn dynamic(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta1", kind), plural)
}

async fn create(client: &kube::Client, resource: &ApiResource, object: serde_json::Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, resource);
    let object: DynamicObject = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("the test API server accepts it");
}

/// The configuration and Service the controller is to work on.
async fn seed(client: &kube::Client) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    // The server starts with `default`; the install namespace is ours to make.
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    let meta = |name: &str| json!({"name": name, "namespace": NAMESPACE});
    let pool = dynamic("ferrolb.io", "IPAddressPool", "ipaddresspools");
    let spec = json!({"addresses": ["10.99.7.0/28"]});
    create(client, &pool, json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool", "metadata": meta("pool"), "spec": spec})).await;
    let l2 = dynamic("ferrolb.io", "L2Advertisement", "l2advertisements");
    let spec = json!({"ipAddressPools": ["pool"]});
    create(client, &l2, json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement", "metadata": meta("l2"), "spec": spec})).await;
    let bgp = dynamic("ferrolb.io", "BGPAdvertisement", "bgpadvertisements");
    let spec = json!({"ipAddressPools": ["pool"], "communities": ["no-export-here"]});
    create(client, &bgp, json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "BGPAdvertisement", "metadata": meta("bgp"), "spec": spec})).await;
    let community = dynamic("ferrolb.io", "Community", "communities");
    let spec = json!({"communities": [{"name": "no-export-here", "value": "65000:1"}]});
    create(client, &community, json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "Community", "metadata": meta("aliases"), "spec": spec})).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    let service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "selector": {"app": "web"}}
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

/// Whether the rendered RBAC lets the controller make `record`: a ClusterRole anywhere, a Role
/// in the install namespace only.
fn granted(objects: &Objects, record: &RequestRecord, call: &Call) -> bool {
    let grants = objects.grants("ferrolb-controller");
    let (group, resource, verb) = call.clone();
    grants.contains(&(
        Scope::Cluster,
        group.clone(),
        resource.clone(),
        verb.clone(),
    )) || (record.namespace.as_deref() == Some(NAMESPACE)
        && grants.contains(&(Scope::InstallNamespace, group, resource, verb)))
}

#[tokio::test(flavor = "multi_thread")]
async fn controller_started_as_the_chart_says_makes_exactly_the_calls_its_rbac_grants() {
    let Some(objects) = tokio::task::block_in_place(|| variant("default")) else {
        return;
    };
    let binary = match controller_binary() {
        Ok(binary) => binary,
        Err(why) if std::env::var("FERROLB_REQUIRE_BINARIES").is_ok_and(|v| v == "1") => {
            panic!("{why}")
        }
        Err(why) => {
            eprintln!(
                "SKIPPED: {why}; run `cargo build -p ferrolb-controller` first \
                 (`cargo test --workspace` does)"
            );
            return;
        }
    };
    let container = only_container(objects.controller_pod());

    let server =
        ApiServer::start(ApiServerConfig::default().with_crd_dir(chart_dir().join("crds")))
            .await
            .expect("the test API server starts");
    seed(&server.client()).await;
    let dir = std::env::temp_dir().join(format!("ferrolb-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    server
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    server.clear_request_log();

    let mut command = Command::new(&binary);
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
            Some("metadata.namespace") => NAMESPACE.to_owned(),
            Some("metadata.name") => "ferrolb-controller-7d9f-abcde".to_owned(),
            Some(other) => panic!("the chart reads {other} from the downward API; map it here"),
            None => var.value.clone().unwrap_or_default(),
        };
        command.env(&var.name, value);
    }
    let _controller = Running(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the controller starts"),
    );

    let expected = table(CONTROLLER_API_CALLS);
    let provokable: BTreeSet<Call> = expected
        .iter()
        .filter(|(g, r, v)| {
            !NOT_PROVOKED
                .iter()
                .any(|(ng, nr, nv, _)| (ng, nr, nv) == (&g.as_str(), &r.as_str(), &v.as_str()))
        })
        .cloned()
        .collect();
    let deadline = Instant::now() + SETTLE;
    let recorded = loop {
        let recorded: BTreeSet<Call> = server.request_log().iter().filter_map(as_call).collect();
        if provokable.is_subset(&recorded) || Instant::now() > deadline {
            break recorded;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop(_controller);
    let _ = std::fs::remove_dir_all(&dir);

    let log = server.request_log();
    let refused: Vec<String> = log
        .iter()
        .filter_map(|r| as_call(r).map(|c| (r, c)))
        .filter(|(r, c)| !granted(objects, r, c))
        .map(|(r, c)| format!("{} {} in {:?} ({c:?})", r.method, r.path, r.namespace))
        .collect();
    assert!(
        refused.is_empty(),
        "the chart's RBAC would refuse: {refused:#?}"
    );
    let unlisted: Vec<_> = recorded.difference(&expected).collect();
    assert!(
        unlisted.is_empty(),
        "calls missing from CONTROLLER_API_CALLS: {unlisted:?}"
    );
    let unused: Vec<_> = provokable.difference(&recorded).collect();
    assert!(
        unused.is_empty(),
        "CONTROLLER_API_CALLS lists calls the controller did not make: {unused:?}"
    );
}
