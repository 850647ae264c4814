//! Runs real Helm on the chart (through `charts/tests/render.py`) and parses what it renders into
//! k8s-openapi types, refusing any field a type does not know.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{NAMESPACE, Scope, VARIANTS};

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

pub(crate) fn chart_dir() -> PathBuf {
    workspace().join("charts/ferrolb")
}

/// Why Helm could not be run, or what it said.
pub(crate) enum HelmRun {
    Rendered(String),
    Refused(String),
    Unavailable(String),
}

/// Runs `charts/tests/render.py` with `args`.
pub(crate) fn run_render(args: &[&str]) -> HelmRun {
    let output = Command::new("python3")
        .arg(workspace().join("charts/tests/render.py"))
        .args(["--namespace", NAMESPACE])
        .args(args)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return HelmRun::Unavailable(
                "python3 is not installed; then: python3 -m pip install helm-python-sdk==0.2.2"
                    .into(),
            );
        }
        Err(err) => panic!("cannot run charts/tests/render.py: {err}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    match output.status.code() {
        Some(0) => HelmRun::Rendered(String::from_utf8(output.stdout).expect("YAML is UTF-8")),
        Some(3) => HelmRun::Unavailable(stderr.trim().to_owned()),
        _ => HelmRun::Refused(stderr),
    }
}

/// `Some(yaml)` when Helm rendered, panics when it refused, `None` (after saying so) when Helm is
/// not installed here.
pub(crate) fn render_or_skip(args: &[&str]) -> Option<String> {
    match run_render(args) {
        HelmRun::Rendered(yaml) => Some(yaml),
        HelmRun::Refused(why) => panic!("helm refused the chart with {args:?}:\n{why}"),
        HelmRun::Unavailable(why) => skip(&why),
    }
}

/// Says why a chart test cannot run (Helm is missing); fails instead under
/// `FERROLB_REQUIRE_HELM=1` or `FERROLB_REQUIRE_BINARIES=1`.
pub(crate) fn skip<T>(why: &str) -> Option<T> {
    ferrolb_tests::skip::skip_unless(
        "FERROLB_REQUIRE_HELM",
        format!("chart tests need Helm: {why}"),
    )
}

/// Every object of one rendering, by kind.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) deployments: Vec<Deployment>,
    pub(crate) daemon_sets: Vec<DaemonSet>,
    pub(crate) service_accounts: Vec<ServiceAccount>,
    pub(crate) services: Vec<Service>,
    pub(crate) secrets: Vec<Secret>,
    /// The Grafana dashboard's ConfigMap, when enabled.
    pub(crate) config_maps: Vec<ConfigMap>,
    pub(crate) cluster_roles: Vec<ClusterRole>,
    pub(crate) cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub(crate) roles: Vec<Role>,
    pub(crate) role_bindings: Vec<RoleBinding>,
    /// prometheus-operator objects, whose types k8s-openapi does not have.
    pub(crate) monitoring: Vec<Value>,
    /// The rendered YAML itself, to apply to a real API server.
    pub(crate) yaml: String,
}

/// Drops `null` members: the typed form cannot tell them from absent ones.
pub(crate) fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// Parses `value` as `T` and checks that nothing was lost on the way: a field the Kubernetes type
/// does not know (a misspelt `readOnlyRootFileSystem`) would vanish from the round trip.
pub(crate) fn typed<T: DeserializeOwned + serde::Serialize>(value: &Value, what: &str) -> T {
    let parsed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|err| panic!("{what} does not parse as its Kubernetes type: {err}"));
    let back = serde_json::to_value(&parsed).expect("typed objects serialize");
    let mut lost = Vec::new();
    differences(
        &without_nulls(value.clone()),
        &back,
        String::new(),
        &mut lost,
    );
    assert!(
        lost.is_empty(),
        "{what} has fields its Kubernetes type does not know: {lost:?}"
    );
    parsed
}

/// The paths at which `rendered` and `typed` differ.
pub(crate) fn differences(rendered: &Value, typed: &Value, path: String, out: &mut Vec<String>) {
    match (rendered, typed) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (left, right) = (a.get(key), b.get(key));
                let at = format!("{path}.{key}");
                match (left, right) {
                    (Some(l), Some(r)) => differences(l, r, at, out),
                    _ => out.push(at),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (l, r)) in a.iter().zip(b).enumerate() {
                differences(l, r, format!("{path}[{i}]"), out);
            }
        }
        (l, r) if l != r => out.push(format!("{path}: {l} became {r}")),
        _ => {}
    }
}

pub(crate) fn parse_objects(yaml: &str) -> Objects {
    let mut objects = Objects {
        yaml: yaml.to_owned(),
        ..Objects::default()
    };
    for document in serde_norway::Deserializer::from_str(yaml) {
        let value = Value::deserialize(document).expect("rendered YAML parses");
        if value.is_null() {
            continue;
        }
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let what = format!("{kind} {}", value["metadata"]["name"]);
        match (api_version.as_str(), kind.as_str()) {
            ("apps/v1", "Deployment") => objects.deployments.push(typed(&value, &what)),
            ("apps/v1", "DaemonSet") => objects.daemon_sets.push(typed(&value, &what)),
            ("v1", "ServiceAccount") => objects.service_accounts.push(typed(&value, &what)),
            ("v1", "Service") => objects.services.push(typed(&value, &what)),
            ("v1", "Secret") => objects.secrets.push(typed(&value, &what)),
            ("v1", "ConfigMap") => objects.config_maps.push(typed(&value, &what)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                objects.cluster_roles.push(typed(&value, &what));
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                objects.cluster_role_bindings.push(typed(&value, &what));
            }
            ("rbac.authorization.k8s.io/v1", "Role") => objects.roles.push(typed(&value, &what)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                objects.role_bindings.push(typed(&value, &what));
            }
            ("monitoring.coreos.com/v1", "ServiceMonitor" | "PrometheusRule") => {
                assert!(value["metadata"]["name"].is_string(), "{what} has a name");
                assert!(value["spec"].is_object(), "{what} has a spec");
                objects.monitoring.push(value);
            }
            _ => panic!("the chart renders {api_version} {kind}, which this test does not check"),
        }
    }
    objects
}

/// The default values and every documented variant, each rendered once for all tests.
pub(crate) fn variants() -> Option<&'static [(String, Objects)]> {
    static RENDERED: OnceLock<Option<Vec<(String, Objects)>>> = OnceLock::new();
    RENDERED
        .get_or_init(|| {
            let mut rendered = vec![("default".to_owned(), parse_objects(&render_or_skip(&[])?))];
            for variant in VARIANTS {
                let file = chart_dir().join(format!("ci/{variant}-values.yaml"));
                let yaml = render_or_skip(&["-f", file.to_str().expect("UTF-8 path")])?;
                rendered.push(((*variant).to_owned(), parse_objects(&yaml)));
            }
            Some(rendered)
        })
        .as_deref()
}

pub(crate) fn variant(name: &str) -> Option<&'static Objects> {
    variants().map(|all| {
        &all.iter()
            .find(|(n, _)| n == name)
            .expect("a known variant")
            .1
    })
}

impl Objects {
    pub(crate) fn controller(&self) -> &Deployment {
        assert_eq!(self.deployments.len(), 1, "one Deployment: the controller");
        &self.deployments[0]
    }

    pub(crate) fn speaker(&self) -> &DaemonSet {
        assert_eq!(self.daemon_sets.len(), 1, "one DaemonSet: the speaker");
        &self.daemon_sets[0]
    }

    pub(crate) fn controller_pod(&self) -> &PodSpec {
        self.controller()
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod spec")
    }

    pub(crate) fn speaker_pod(&self) -> &PodSpec {
        self.speaker()
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod spec")
    }

    /// Every `(scope, group, resource, verb)` the ServiceAccount `account` is granted.
    pub(crate) fn grants(&self, account: &str) -> BTreeSet<(Scope, String, String, String)> {
        let bound_to_account = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
            subjects.iter().flatten().any(|s| {
                s.kind == "ServiceAccount"
                    && s.name == account
                    && s.namespace.as_deref() == Some(NAMESPACE)
            })
        };
        let mut grants = BTreeSet::new();
        for binding in &self.cluster_role_bindings {
            if bound_to_account(&binding.subjects) {
                assert_eq!(binding.role_ref.kind, "ClusterRole");
                let role = self
                    .cluster_roles
                    .iter()
                    .find(|r| r.metadata.name.as_deref() == Some(&binding.role_ref.name))
                    .expect("a ClusterRoleBinding refers to a rendered ClusterRole");
                add_grants(&mut grants, Scope::Cluster, role.rules.iter().flatten());
            }
        }
        for binding in &self.role_bindings {
            if bound_to_account(&binding.subjects) {
                assert_eq!(binding.metadata.namespace.as_deref(), Some(NAMESPACE));
                assert_eq!(
                    binding.role_ref.kind, "Role",
                    "RoleBindings grant Roles only"
                );
                let role = self
                    .roles
                    .iter()
                    .find(|r| r.metadata.name.as_deref() == Some(&binding.role_ref.name))
                    .expect("a RoleBinding refers to a rendered Role");
                assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
                add_grants(
                    &mut grants,
                    Scope::InstallNamespace,
                    role.rules.iter().flatten(),
                );
            }
        }
        grants
    }
}

pub(crate) fn add_grants<'a>(
    grants: &mut BTreeSet<(Scope, String, String, String)>,
    scope: Scope,
    rules: impl Iterator<Item = &'a PolicyRule>,
) {
    for rule in rules {
        assert!(
            rule.resource_names.is_none(),
            "rules are not limited by name: {rule:?}"
        );
        assert!(
            rule.non_resource_urls.is_none(),
            "no non-resource URLs: {rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    grants.insert((scope, group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
}

pub(crate) fn only_container(pod: &PodSpec) -> &Container {
    assert_eq!(pod.containers.len(), 1, "one container per Pod");
    assert!(pod.init_containers.is_none(), "no init containers");
    &pod.containers[0]
}

pub(crate) fn args(container: &Container) -> &[String] {
    container.args.as_deref().unwrap_or_default()
}

/// The value of `--flag=value` (or `Some("")` for a bare `--flag`).
pub(crate) fn flag<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    args(container).iter().find_map(|arg| {
        let (flag, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        (flag == name).then_some(value)
    })
}

pub(crate) fn env<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.iter().flatten().find(|e| e.name == name)
}

pub(crate) fn field_ref(var: &EnvVar) -> Option<&str> {
    var.value_from
        .as_ref()?
        .field_ref
        .as_ref()
        .map(|f| f.field_path.as_str())
}

pub(crate) fn chart_yaml() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    serde_norway::from_str(&text).expect("Chart.yaml parses")
}
