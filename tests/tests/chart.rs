//! The Helm chart as real Helm renders it: lint, template, and what the rendered objects grant.
//!
//! Helm comes from PyPI's `helm-python-sdk` (Helm's Go library behind a C ABI) through
//! `charts/tests/render.py`, which runs `helm lint --strict` and then `helm template` offline. Each
//! test renders the default values and every documented variant in `charts/ferrolb/ci/`. When
//! python3 or the package is missing the tests print why and pass without checking anything; set
//! `FERROLB_REQUIRE_HELM=1` (as CI should) to make that a failure instead.
//!
//! `recorded_calls` runs the real `ferrolb-controller` and `ferrolb-speaker` with the rendered
//! arguments against the test API server and compares their recorded API calls with the rendered
//! RBAC and with `CONTROLLER_API_CALLS` / `SPEAKER_API_CALLS`; it needs the binaries built
//! (`cargo test --workspace` builds them) and, for the speaker (run in a node namespace), root. It
//! skips with a printed reason otherwise, or fails with `FERROLB_REQUIRE_BINARIES=1`.

#[path = "chart/alert_rules.rs"]
mod alert_rules;
#[path = "chart/clap_flags.rs"]
mod clap_flags;
#[path = "chart/crd_schema.rs"]
mod crd_schema;
#[path = "chart/dashboard.rs"]
mod dashboard;
#[path = "dashboard_support/mod.rs"]
mod dashboard_support;
#[path = "chart/lookup_server.rs"]
mod lookup_server;
#[path = "chart/monitoring.rs"]
mod monitoring;
#[path = "chart/recorded_calls.rs"]
mod recorded_calls;
#[path = "chart/render.rs"]
mod render;
#[path = "chart/variant_switches.rs"]
mod variant_switches;

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

use crd_schema::{crd_schemas, schema_mismatches};
use lookup_server::LookupServer;
use render::{
    HelmRun, args, chart_dir, chart_yaml, env, field_ref, flag, only_container, parse_objects,
    render_or_skip, run_render, skip, variant, variants, workspace,
};

// ---------------------------------------------------------------------------------------------
// What the binaries use. These tables are the reference the chart is checked against; the API
// calls recorded from the real binaries (`recorded_calls`) are checked against the same tables.
// ---------------------------------------------------------------------------------------------

/// Where a permission is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    /// A ClusterRole bound by a ClusterRoleBinding.
    Cluster,
    /// A Role bound by a RoleBinding in the install namespace.
    InstallNamespace,
}

/// One kind of API call a binary makes: on `resource` (or `resource/subresource`) of `group`.
struct ApiCall {
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
}

const fn call(
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
) -> ApiCall {
    ApiCall {
        scope,
        group,
        resource,
        verbs,
    }
}

const WATCH: &[&str] = &["list", "watch"];
const PATCH: &[&str] = &["patch"];
/// What a speaker does with the status objects it owns (their status is a separate `PATCH`).
const OWN: &[&str] = &["list", "create", "delete"];

use Scope::{Cluster, InstallNamespace as Ns};

/// The API calls `ferrolb-controller` makes (read from its code: reflectors list and watch,
/// Secrets' metadata only; status (with the pool annotation) and conditions are merge patches of
/// `/status`, the Lease is read, created and replaced, Events are created).
const CONTROLLER_API_CALLS: &[ApiCall] = &[
    // The pool annotation rides on the status patch: no write to the Service itself.
    call(Cluster, "", "services", WATCH),
    call(Cluster, "", "services/status", PATCH),
    call(Cluster, "", "namespaces", WATCH),
    // Each Event is a new object (controller/src/events.rs): never patched.
    call(Cluster, "events.k8s.io", "events", &["create"]),
    call(
        Ns,
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    ),
    call(Ns, "ferrolb.io", "ipaddresspools", WATCH),
    call(Ns, "ferrolb.io", "ipaddresspools/status", PATCH),
    call(Ns, "ferrolb.io", "l2advertisements", WATCH),
    call(Ns, "ferrolb.io", "l2advertisements/status", PATCH),
    call(Ns, "ferrolb.io", "bgpadvertisements", WATCH),
    call(Ns, "ferrolb.io", "bgpadvertisements/status", PATCH),
    call(Ns, "ferrolb.io", "bgppeers", WATCH),
    call(Ns, "ferrolb.io", "bgppeers/status", PATCH),
    call(Ns, "ferrolb.io", "communities", WATCH),
    call(Ns, "ferrolb.io", "communities/status", PATCH),
    call(Ns, "ferrolb.io", "bfdprofiles", WATCH),
    // Its ConfigurationState: read once per leadership term, created when missing.
    call(Ns, "ferrolb.io", "configurationstates", &["get", "create"]),
    call(Ns, "ferrolb.io", "configurationstates/status", PATCH),
    // Names only (metadata-only list and watch): a peer's password Secret must exist.
    call(Ns, "", "secrets", WATCH),
];

/// The API calls `ferrolb-speaker` makes (recorded from the binary by `recorded_calls`:
/// watchers list and watch; its own status objects are listed by node label, created empty,
/// given their status with a merge patch of `/status`, and deleted when it stops announcing;
/// Events are created, each a new object, as the controller's are).
const SPEAKER_API_CALLS: &[ApiCall] = &[
    call(Cluster, "", "services", WATCH),
    call(Cluster, "discovery.k8s.io", "endpointslices", WATCH),
    call(Cluster, "", "nodes", WATCH),
    call(Cluster, "events.k8s.io", "events", &["create"]),
    call(Ns, "", "pods", WATCH),
    call(Ns, "", "secrets", WATCH),
    // The `ferrolb-l2-view` Lease: watched by name; created or replaced (under its
    // resourceVersion) while gossip misses speakers Kubernetes counts as up.
    call(
        Ns,
        "coordination.k8s.io",
        "leases",
        &["list", "watch", "create", "update"],
    ),
    call(Ns, "ferrolb.io", "ipaddresspools", WATCH),
    call(Ns, "ferrolb.io", "l2advertisements", WATCH),
    call(Ns, "ferrolb.io", "bgpadvertisements", WATCH),
    call(Ns, "ferrolb.io", "bgppeers", WATCH),
    call(Ns, "ferrolb.io", "communities", WATCH),
    call(Ns, "ferrolb.io", "bfdprofiles", WATCH),
    call(Ns, "ferrolb.io", "servicel2statuses", OWN),
    call(Ns, "ferrolb.io", "servicel2statuses/status", PATCH),
    call(Ns, "ferrolb.io", "servicebgpstatuses", OWN),
    call(Ns, "ferrolb.io", "servicebgpstatuses/status", PATCH),
    call(Ns, "ferrolb.io", "bgpsessionstates", OWN),
    call(Ns, "ferrolb.io", "bgpsessionstates/status", PATCH),
    // Its node's ConfigurationState: listed by node label at start, created when missing.
    call(Ns, "ferrolb.io", "configurationstates", &["list", "create"]),
    call(Ns, "ferrolb.io", "configurationstates/status", PATCH),
];

/// The command-line flags `ferrolb-controller` defines.
const CONTROLLER_FLAGS: &[&str] = &[
    "--namespace",
    "--load-balancer-class",
    "--ignore-unclassed",
    "--log-level",
    "--log-format",
    "--metrics-addr",
    "--lease-name",
    "--lease-duration",
    "--renew-deadline",
    "--retry-period",
    "--default-ip-mode",
    "--identity",
];

/// The command-line flags `ferrolb-speaker` defines.
const SPEAKER_FLAGS: &[&str] = &[
    "--node-name",
    "--namespace",
    "--metrics-addr",
    "--log-level",
    "--log-format",
    "--enable-l2",
    "--enable-bgp",
    "--gossip-port",
    "--gossip-secret",
    "--load-balancer-class",
    "--ignore-unclassed",
    "--bgp-drain-time",
    "--l2-preference-hold-down",
];

/// The values variants the chart documents, one file each in `charts/ferrolb/ci/`.
const VARIANTS: &[&str] = &[
    "bgp-only",
    "dashboard",
    "l2-only",
    "monitoring",
    "proxy-mode",
    "tolerations",
];

const NAMESPACE: &str = "ferrolb-system";

fn expected_grants(calls: &[ApiCall]) -> BTreeSet<(Scope, String, String, String)> {
    calls
        .iter()
        .flat_map(|c| {
            c.verbs.iter().map(|verb| {
                (
                    c.scope,
                    c.group.to_owned(),
                    c.resource.to_owned(),
                    (*verb).to_owned(),
                )
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn every_documented_values_variant_has_a_file_and_passes_strict_lint() {
    let mut files: Vec<String> = std::fs::read_dir(chart_dir().join("ci"))
        .expect("charts/ferrolb/ci exists")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let documented: Vec<String> = VARIANTS
        .iter()
        .map(|v| format!("{v}-values.yaml"))
        .collect();
    assert_eq!(
        files, documented,
        "every ci/*-values.yaml file is a documented, tested variant"
    );
    // Rendering runs `helm lint --strict` first and fails on any warning.
    let Some(all) = variants() else { return };
    assert_eq!(all.len(), VARIANTS.len() + 1);
}

#[test]
fn every_variant_renders_both_binaries_their_accounts_rbac_and_metrics_services() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        objects.controller();
        objects.speaker();
        let mut accounts: Vec<_> = objects
            .service_accounts
            .iter()
            .filter_map(|a| a.metadata.name.clone())
            .collect();
        accounts.sort();
        assert_eq!(
            accounts,
            ["ferrolb-controller", "ferrolb-speaker"],
            "{name}"
        );
        assert_eq!(objects.cluster_roles.len(), 2, "{name}");
        assert_eq!(objects.roles.len(), 2, "{name}");
        assert_eq!(
            objects.services.len(),
            2,
            "{name}: one metrics Service per binary"
        );
        assert_eq!(objects.secrets.len(), 1, "{name}: the gossip Secret");
    }
}

#[test]
fn rbac_bound_to_each_binary_is_exactly_the_api_calls_it_makes() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        for (account, calls) in [
            ("ferrolb-controller", CONTROLLER_API_CALLS),
            ("ferrolb-speaker", SPEAKER_API_CALLS),
        ] {
            let granted = objects.grants(account);
            let expected = expected_grants(calls);
            let extra: Vec<_> = granted.difference(&expected).collect();
            let missing: Vec<_> = expected.difference(&granted).collect();
            assert!(
                extra.is_empty() && missing.is_empty(),
                "{name}: {account} is granted more than it uses: {extra:?}; \
                 and lacks what it uses: {missing:?}"
            );
        }
        let pods = [objects.controller_pod(), objects.speaker_pod()];
        let accounts: Vec<_> = pods
            .iter()
            .map(|p| p.service_account_name.as_deref())
            .collect();
        assert_eq!(
            accounts,
            [Some("ferrolb-controller"), Some("ferrolb-speaker")],
            "{name}"
        );
    }
}

#[test]
fn speaker_capabilities_are_exactly_net_raw_and_net_admin() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        let pod = objects.speaker_pod();
        assert_eq!(
            pod.host_network,
            Some(true),
            "{name}: the speaker uses the node's network"
        );
        assert!(
            pod.host_pid.is_none() && pod.host_ipc.is_none(),
            "{name}: no host PID/IPC"
        );
        assert!(
            pod.volumes.is_none(),
            "{name}: the speaker mounts nothing from the host"
        );
        let security = only_container(pod)
            .security_context
            .as_ref()
            .expect("securityContext");
        let capabilities = security.capabilities.as_ref().expect("capabilities");
        let mut added = capabilities.add.clone().unwrap_or_default();
        added.sort();
        assert_eq!(added, ["NET_ADMIN", "NET_RAW", "SYS_NICE"], "{name}");
        assert_eq!(
            capabilities.drop.as_deref(),
            Some(&["ALL".to_owned()][..]),
            "{name}"
        );
        assert_ne!(security.privileged, Some(true), "{name}");
        assert_eq!(security.allow_privilege_escalation, Some(false), "{name}");
        assert_eq!(security.read_only_root_filesystem, Some(true), "{name}");
    }
}

#[test]
fn controller_runs_as_non_root_with_a_read_only_root_filesystem_and_no_capabilities() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        let pod = objects.controller_pod();
        let pod_security = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(pod_security.run_as_non_root, Some(true), "{name}");
        assert!(
            pod_security.run_as_user.is_some_and(|uid| uid != 0),
            "{name}: a non-zero uid"
        );
        let seccomp = pod_security
            .seccomp_profile
            .as_ref()
            .expect("seccompProfile");
        assert_eq!(seccomp.type_, "RuntimeDefault", "{name}");
        assert_ne!(pod.host_network, Some(true), "{name}");
        let security = only_container(pod)
            .security_context
            .as_ref()
            .expect("securityContext");
        assert_eq!(security.read_only_root_filesystem, Some(true), "{name}");
        assert_eq!(security.allow_privilege_escalation, Some(false), "{name}");
        assert_ne!(security.run_as_user, Some(0), "{name}");
        let capabilities = security.capabilities.as_ref().expect("capabilities");
        assert!(
            capabilities.add.is_none(),
            "{name}: the controller adds no capability"
        );
        assert_eq!(
            capabilities.drop.as_deref(),
            Some(&["ALL".to_owned()][..]),
            "{name}"
        );
        let replicas = objects.controller().spec.as_ref().and_then(|s| s.replicas);
        assert_eq!(
            replicas,
            Some(2),
            "{name}: a standby replica behind the leader Lease"
        );
    }
}

#[test]
fn rendered_arguments_are_only_flags_the_binaries_define() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        for (binary, container, flags) in [
            (
                "controller",
                only_container(objects.controller_pod()),
                CONTROLLER_FLAGS,
            ),
            (
                "speaker",
                only_container(objects.speaker_pod()),
                SPEAKER_FLAGS,
            ),
        ] {
            assert!(
                container.command.is_none(),
                "{name}: {binary} runs the image's entrypoint"
            );
            for arg in args(container) {
                let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
                assert!(
                    flags.contains(&flag),
                    "{name}: {binary} has no flag {flag} ({arg})"
                );
            }
        }
    }
}

#[test]
fn flags_and_environment_the_chart_sets_are_defined_in_the_binaries_code() {
    let Some(objects) = variant("default") else {
        return;
    };
    let proxy_mode = variant("proxy-mode").expect("rendered with the default");
    for (binary, table, containers) in [
        (
            "controller",
            CONTROLLER_FLAGS,
            [objects, proxy_mode].map(|o| only_container(o.controller_pod())),
        ),
        (
            "speaker",
            SPEAKER_FLAGS,
            [objects, proxy_mode].map(|o| only_container(o.speaker_pod())),
        ),
    ] {
        let source = workspace().join(format!("{binary}/src/main.rs"));
        let Some(defined) = clap_flags::defined_in(&source) else {
            eprintln!(
                "{} is not written yet: {binary} checked against its flag table only",
                source.display()
            );
            continue;
        };
        for flag in table {
            assert!(
                defined.flags.contains(*flag),
                "{binary}'s table lists {flag}, its code does not define it"
            );
        }
        for container in containers {
            for arg in args(container) {
                let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
                assert!(
                    defined.flags.contains(flag),
                    "the chart passes {arg}; {binary} defines no {flag}"
                );
            }
            for var in container.env.iter().flatten() {
                assert!(
                    defined.env.contains(&var.name),
                    "the chart sets {}; {binary} reads no such variable",
                    var.name
                );
            }
        }
    }
}

#[test]
fn binaries_learn_their_node_namespace_and_pod_name_from_the_downward_api() {
    let Some(objects) = variant("default") else {
        return;
    };
    let speaker = only_container(objects.speaker_pod());
    assert_eq!(
        env(speaker, "NODE_NAME").and_then(field_ref),
        Some("spec.nodeName")
    );
    assert_eq!(
        env(speaker, "POD_NAMESPACE").and_then(field_ref),
        Some("metadata.namespace")
    );
    let controller = only_container(objects.controller_pod());
    assert_eq!(
        env(controller, "POD_NAMESPACE").and_then(field_ref),
        Some("metadata.namespace")
    );
    assert_eq!(
        env(controller, "POD_NAME").and_then(field_ref),
        Some("metadata.name")
    );
}

#[test]
fn probes_and_metrics_services_use_the_ports_the_binaries_listen_on() {
    let Some(objects) = variant("default") else {
        return;
    };
    let controller = only_container(objects.controller_pod());
    assert_eq!(flag(controller, "--metrics-addr"), Some("0.0.0.0:7472"));
    let speaker = only_container(objects.speaker_pod());
    for (probe, path) in [
        (&controller.liveness_probe, "/healthz"),
        (&controller.readiness_probe, "/readyz"),
        (&speaker.liveness_probe, "/healthz"),
        (&speaker.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("metrics".into())
        );
    }
    assert_eq!(flag(speaker, "--metrics-addr"), Some("0.0.0.0:7473"));
    for (container, port) in [(controller, 7472), (speaker, 7473)] {
        let named = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("metrics"));
        assert_eq!(named.map(|p| p.container_port), Some(port));
    }
    let mut service_ports: Vec<_> = objects
        .services
        .iter()
        .map(|s| {
            let spec = s.spec.as_ref().expect("Service spec");
            let selector = spec.selector.as_ref().expect("a selector");
            let component = selector["app.kubernetes.io/component"].clone();
            (component, spec.ports.as_ref().expect("ports")[0].port)
        })
        .collect();
    service_ports.sort();
    assert_eq!(
        service_ports,
        [
            ("controller".to_owned(), 7472),
            ("speaker".to_owned(), 7473)
        ]
    );
}

#[test]
fn a_typo_in_values_fails_rendering_at_every_level() {
    for typo in [
        r#"loadBalancerClas="example.com/x""#,
        r#"speaker={"tolerateControlPlan":true}"#,
        r#"controller={"image":{"tags":"v1"}}"#,
        r#"metrics={"prometheusRule":{"addressPoolUsage":{"warn":80}}}"#,
        r#"speaker={"tolerations":[{"key":"a","operater":"Exists"}]}"#,
        r#"controller={"resources":{"requets":{"cpu":"1"}}}"#,
        r#"log={"level":"verbose"}"#,
        r#"ipMode="proxy""#,
        r#"controller={"leaderElection":{"leaseDuration":"1h"}}"#,
    ] {
        match run_render(&["--set-json", typo]) {
            HelmRun::Refused(why) => assert!(why.contains("schema"), "{typo}: {why}"),
            HelmRun::Rendered(_) => panic!("values with a typo were accepted: {typo}"),
            HelmRun::Unavailable(why) => {
                skip::<()>(&why);
                return;
            }
        }
    }
}

#[test]
fn gossip_secret_holds_a_fresh_32_byte_key_that_the_speaker_is_pointed_at() {
    let Some(all) = variants() else { return };
    let mut keys = BTreeSet::new();
    for (name, objects) in all {
        let secret = &objects.secrets[0];
        let key = &secret.data.as_ref().expect("data")["secretkey"].0;
        assert_eq!(key.len(), 32, "{name}");
        keys.insert(key.clone());
        let speaker = only_container(objects.speaker_pod());
        assert_eq!(
            flag(speaker, "--gossip-secret"),
            secret.metadata.name.as_deref(),
            "{name}"
        );
        assert_eq!(secret.metadata.namespace.as_deref(), Some(NAMESPACE));
    }
    assert_eq!(
        keys.len(),
        all.len(),
        "each fresh install gets its own random key"
    );
    let Some(yaml) = render_or_skip(&[
        "--set-json",
        r#"speaker={"memberlist":{"existingSecret":"mine"}}"#,
    ]) else {
        return;
    };
    let objects = parse_objects(&yaml);
    assert!(
        objects.secrets.is_empty(),
        "an existing Secret is used, not created"
    );
    assert_eq!(
        flag(only_container(objects.speaker_pod()), "--gossip-secret"),
        Some("mine")
    );
}

#[test]
fn default_images_are_the_dockerfile_stages_tagged_with_the_workspace_version() {
    let chart = chart_yaml();
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "appVersion follows the workspace"
    );
    let dockerfile = std::fs::read_to_string(workspace().join("Dockerfile")).expect("Dockerfile");
    for stage in ["controller", "speaker"] {
        assert!(
            dockerfile.contains(&format!(" AS {stage}\n")),
            "a `{stage}` stage"
        );
        assert!(dockerfile.contains(&format!("ENTRYPOINT [\"/usr/local/bin/ferrolb-{stage}\"]")));
        assert!(dockerfile.contains(&format!(
            "-t ghcr.io/ferrolb/ferrolb-{stage}:{}",
            env!("CARGO_PKG_VERSION")
        )));
    }
    let Some(objects) = variant("default") else {
        return;
    };
    let version = env!("CARGO_PKG_VERSION");
    for (pod, image) in [
        (objects.controller_pod(), "controller"),
        (objects.speaker_pod(), "speaker"),
    ] {
        let want = format!("ghcr.io/ferrolb/ferrolb-{image}:{version}");
        assert_eq!(only_container(pod).image.as_deref(), Some(want.as_str()));
    }
}

#[test]
fn objects_are_named_after_the_release_and_live_in_its_namespace() {
    let Some(yaml) = render_or_skip(&["--release", "edge"]) else {
        return;
    };
    let objects = parse_objects(&yaml);
    assert_eq!(
        objects.controller().metadata.name.as_deref(),
        Some("edge-ferrolb-controller")
    );
    let speaker = only_container(objects.speaker_pod());
    assert_eq!(
        flag(speaker, "--gossip-secret"),
        Some("edge-ferrolb-memberlist")
    );
    let controller = only_container(objects.controller_pod());
    assert_eq!(
        flag(controller, "--lease-name"),
        Some("edge-ferrolb-controller")
    );
    let namespaced = objects
        .deployments
        .iter()
        .map(|o| &o.metadata)
        .chain(objects.daemon_sets.iter().map(|o| &o.metadata))
        .chain(objects.service_accounts.iter().map(|o| &o.metadata))
        .chain(objects.services.iter().map(|o| &o.metadata))
        .chain(objects.secrets.iter().map(|o| &o.metadata))
        .chain(objects.roles.iter().map(|o| &o.metadata))
        .chain(objects.role_bindings.iter().map(|o| &o.metadata));
    for meta in namespaced {
        assert_eq!(
            meta.namespace.as_deref(),
            Some(NAMESPACE),
            "{:?}",
            meta.name
        );
    }
    // Two installs in different namespaces must not share cluster-wide objects.
    for role in &objects.cluster_roles {
        let name = role.metadata.name.as_deref().unwrap_or_default();
        assert!(name.starts_with(&format!("{NAMESPACE}:")), "{name}");
    }
}

#[test]
fn notes_give_a_ready_pool_and_advertisement_that_fit_the_crds() {
    let schemas = crd_schemas();
    for (variant_name, kinds) in [
        ("default", &["IPAddressPool", "L2Advertisement"][..]),
        (
            "bgp-only",
            &["IPAddressPool", "BGPPeer", "BGPAdvertisement"][..],
        ),
    ] {
        let file = chart_dir().join(format!("ci/{variant_name}-values.yaml"));
        let mut args = vec!["--notes"];
        if variant_name != "default" {
            args.extend(["-f", file.to_str().expect("UTF-8 path")]);
        }
        let Some(notes) = render_or_skip(&args) else {
            return;
        };
        let example = notes
            .split_once("kubectl apply -f -\n")
            .and_then(|(_, rest)| rest.split_once("\nYAML\n"))
            .map(|(yaml, _)| yaml)
            .unwrap_or_else(|| panic!("{variant_name}: NOTES carry a heredoc to apply:\n{notes}"));
        let mut found = Vec::new();
        for document in serde_norway::Deserializer::from_str(example) {
            let object = Value::deserialize(document).expect("the example parses");
            let kind = object["kind"].as_str().expect("a kind").to_owned();
            let (api_version, schema) = schemas
                .get(&kind)
                .unwrap_or_else(|| panic!("no CRD for {kind}"));
            assert_eq!(
                object["apiVersion"],
                api_version.as_str(),
                "{variant_name} {kind}"
            );
            assert_eq!(
                object["metadata"]["namespace"], NAMESPACE,
                "{variant_name} {kind}"
            );
            let mut mismatches = Vec::new();
            schema_mismatches(schema, &object["spec"], "spec", &mut mismatches);
            assert!(
                mismatches.is_empty(),
                "{variant_name} {kind}: {mismatches:?}"
            );
            found.push(kind);
        }
        assert_eq!(found, kinds, "{variant_name}");
        let status = if variant_name == "default" {
            "servicel2statuses"
        } else {
            "servicebgpstatuses"
        };
        assert!(
            notes.contains(&format!("kubectl get {status} -n {NAMESPACE}")),
            "{notes}"
        );
    }
}

#[test]
fn gossip_key_already_in_the_cluster_is_kept_on_upgrade() {
    let earlier_key = b"key made by the first install 32".to_vec();
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("ferrolb-memberlist".into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "secretkey".to_owned(),
            k8s_openapi::ByteString(earlier_key.clone()),
        )])),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{NAMESPACE}/secrets/ferrolb-memberlist");
    let cluster = LookupServer::start(BTreeMap::from([(
        path,
        serde_json::to_value(&secret).expect("a Secret serializes"),
    )]));
    let url = cluster.url();
    let Some(yaml) = render_or_skip(&["--kube-apiserver", &url, "--upgrade"]) else {
        return;
    };
    let rendered = parse_objects(&yaml);
    let key = &rendered.secrets[0].data.as_ref().expect("data")["secretkey"].0;
    assert_eq!(
        key, &earlier_key,
        "the upgrade keeps the key the speakers already share"
    );

    let empty_cluster = LookupServer::start(BTreeMap::new());
    let url = empty_cluster.url();
    let Some(yaml) = render_or_skip(&["--kube-apiserver", &url]) else {
        return;
    };
    let rendered = parse_objects(&yaml);
    let key = &rendered.secrets[0].data.as_ref().expect("data")["secretkey"].0;
    assert_eq!(key.len(), 32, "a first install makes a fresh 32-byte key");
    assert_ne!(key, &earlier_key);
}
