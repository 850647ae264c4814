//! `ferrolb migrate` end to end from files: the built binary on the fixtures, its YAML read
//! back into FerroLB's types and compared field by field with what each MetalLB field means.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use ferrolb_api::v1beta1::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, DynamicAsn, IPAddressPool, L2Advertisement,
    PreferredNodeSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Deserialize;
use serde_json::Value;

const FULL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/full");
const TYPICAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/typical");

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn ferrolb(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolb"))
        .args(args)
        .output()
        .expect("the ferrolb binary runs");
    Run {
        status: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn summary_line(run: &Run) -> &str {
    run.stderr.lines().last().unwrap_or_default()
}

/// The FerroLB objects of a run's YAML, by kind and name.
#[derive(Default)]
struct Objects {
    pools: BTreeMap<String, IPAddressPool>,
    l2: BTreeMap<String, L2Advertisement>,
    bgp_adv: BTreeMap<String, BGPAdvertisement>,
    peers: BTreeMap<String, BGPPeer>,
    communities: BTreeMap<String, Community>,
    bfd: BTreeMap<String, BFDProfile>,
    order: Vec<(String, String)>,
}

impl Objects {
    fn count(&self) -> usize {
        self.order.len()
    }
}

fn parse_objects(yaml: &str) -> Objects {
    fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
    }
    let mut out = Objects::default();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let v = Value::deserialize(doc).unwrap();
        assert_eq!(v["apiVersion"], "ferrolb.io/v1beta1", "{v}");
        assert_eq!(v["metadata"]["namespace"], "ferrolb-system", "{v}");
        assert!(v.get("status").is_none(), "status is dropped: {v}");
        let kind = v["kind"].as_str().unwrap().to_string();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        out.order.push((kind.clone(), name.clone()));
        match kind.as_str() {
            "IPAddressPool" => drop(out.pools.insert(name, typed(&v))),
            "L2Advertisement" => drop(out.l2.insert(name, typed(&v))),
            "BGPAdvertisement" => drop(out.bgp_adv.insert(name, typed(&v))),
            "BGPPeer" => drop(out.peers.insert(name, typed(&v))),
            "Community" => drop(out.communities.insert(name, typed(&v))),
            "BFDProfile" => drop(out.bfd.insert(name, typed(&v))),
            other => panic!("unexpected kind {other}"),
        }
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}

fn both(pairs: &[(&str, &str)], requirement: LabelSelectorRequirement) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: Some(vec![requirement]),
    }
}

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn report_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("migrate-{}-{name}", std::process::id()))
}

#[test]
fn the_full_fixture_converts_every_kind_and_field_to_the_expected_ferrolb_objects() {
    let run = ferrolb(&["migrate", "--from", FULL]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        summary_line(&run),
        "12 objects converted, 1 fields without an equivalent, 2 objects skipped"
    );
    let o = parse_objects(&run.stdout);
    assert_eq!(o.count(), 12);
    let kinds: Vec<&str> = o.order.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Community",
            "BFDProfile",
            "IPAddressPool",
            "IPAddressPool",
            "IPAddressPool",
            "BGPPeer",
            "BGPPeer",
            "BGPPeer",
            "BGPPeer",
            "L2Advertisement",
            "BGPAdvertisement",
            "BGPAdvertisement",
        ],
        "referred-to kinds first"
    );

    // IPAddressPool: every field; metadata keeps labels and annotations, not the server's.
    let p = &o.pools["production"];
    assert_eq!(
        p.metadata.labels.as_ref(),
        Some(&labels(&[("tier", "production"), ("bgp", "announce")]))
    );
    assert_eq!(
        p.metadata.annotations.as_ref(),
        Some(&labels(&[("team", "network")])),
        "last-applied-configuration is not copied"
    );
    assert_eq!(p.metadata.uid, None);
    assert_eq!(p.metadata.resource_version, None);
    assert_eq!(p.metadata.generation, None);
    assert_eq!(p.metadata.creation_timestamp, None);
    assert_eq!(p.metadata.finalizers, None);
    assert_eq!(p.metadata.owner_references, None);
    assert_eq!(p.metadata.managed_fields, None);
    assert_eq!(
        p.spec.addresses,
        strings(&[
            "198.51.100.0/25",
            "198.51.100.200-198.51.100.220",
            "2001:db8:100::/120"
        ])
    );
    assert!(!p.spec.auto_assign);
    assert!(p.spec.avoid_buggy_ips);
    assert_eq!(p.spec.ip_mode, None, "the controller's default applies");
    let sa = p.spec.service_allocation.as_ref().unwrap();
    assert_eq!(sa.priority, Some(10));
    assert_eq!(sa.namespaces, strings(&["shop", "payments"]));
    assert_eq!(
        sa.namespace_selectors,
        vec![both(
            &[("env", "prod")],
            expression("team", "NotIn", &["sandbox"])
        )]
    );
    assert_eq!(
        sa.service_selectors,
        vec![both(
            &[("exposed", "yes")],
            expression("app", "In", &["web", "api"])
        )]
    );
    let lab = &o.pools["lab"];
    assert_eq!(lab.spec.addresses, strings(&["192.0.2.0/26"]));
    assert!(lab.spec.auto_assign, "MetalLB's default");
    assert_eq!(
        lab.spec.service_allocation.as_ref().unwrap().priority,
        None,
        "MetalLB's priority 0 is no priority"
    );
    assert_eq!(
        o.pools["bgp-aggregated"].metadata.labels.as_ref(),
        Some(&labels(&[("bgp", "aggregate")]))
    );

    // L2Advertisement.
    let l2 = &o.l2["l2-everything"].spec;
    assert_eq!(l2.ip_address_pools, strings(&["lab"]));
    assert_eq!(
        l2.service_selectors.len(),
        1,
        "serviceSelectors carried over"
    );
    assert_eq!(
        l2.preferred_node_selectors,
        vec![PreferredNodeSelector {
            weight: 50,
            preference: both(&[("zone", "a")], expression("rack", "In", &["r1"])),
        }]
    );
    assert_eq!(
        l2.ip_address_pool_selectors,
        vec![both(
            &[("tier", "production")],
            expression("bgp", "In", &["announce"])
        )]
    );
    assert_eq!(
        l2.node_selectors,
        vec![
            match_labels(&[("kubernetes.io/hostname", "node-a")]),
            LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![expression(
                    "node.example.com/state",
                    "NotIn",
                    &["maintenance"]
                )]),
            },
        ]
    );
    assert_eq!(l2.interfaces, strings(&["eth0", "bond0.100"]));

    // BGPAdvertisement.
    let agg = &o.bgp_adv["aggregated"].spec;
    assert_eq!(agg.aggregation_length, Some(24));
    assert_eq!(agg.aggregation_length_v6, Some(120));
    assert_eq!(agg.local_pref, Some(150));
    assert_eq!(
        agg.communities,
        strings(&["65000:100", "large:64512:1:2", "edge-tag"])
    );
    assert_eq!(agg.ip_address_pools, strings(&["bgp-aggregated"]));
    assert_eq!(
        agg.ip_address_pool_selectors,
        vec![both(
            &[("bgp", "aggregate")],
            expression("tier", "NotIn", &["lab"])
        )]
    );
    assert_eq!(
        agg.node_selectors,
        vec![both(
            &[("bgp", "true")],
            expression("zone", "In", &["a", "b"])
        )]
    );
    assert_eq!(agg.peers, strings(&["edge-router", "dynamic-peer"]));
    let sel = &o.bgp_adv["selected"].spec;
    assert_eq!(sel.aggregation_length, None);
    assert_eq!(sel.local_pref, None);
    assert_eq!(sel.communities, strings(&["big-tag"]));
    assert_eq!(
        sel.ip_address_pool_selectors,
        vec![match_labels(&[("bgp", "announce")])]
    );

    // Community.
    let aliases: Vec<(String, String)> = o.communities["aliases"]
        .spec
        .communities
        .iter()
        .map(|a| (a.name.clone(), a.value.clone()))
        .collect();
    assert_eq!(
        aliases,
        vec![
            ("edge-tag".into(), "65000:300".into()),
            ("big-tag".into(), "large:64512:10:20".into())
        ]
    );

    // BFDProfile (from JSON).
    let bfd = &o.bfd["full-bfd"].spec;
    assert_eq!(bfd.receive_interval, Some(200));
    assert_eq!(bfd.transmit_interval, Some(250));
    assert_eq!(bfd.detect_multiplier, Some(5));
    assert_eq!(bfd.echo_interval, Some(60));
    assert!(bfd.echo_mode);
    assert!(bfd.passive_mode);
    assert_eq!(bfd.minimum_ttl, Some(250));

    // BGPPeer v1beta2 with every field FerroLB has.
    let edge = &o.peers["edge-router"].spec;
    assert_eq!(edge.my_asn, 64512);
    assert_eq!(edge.peer_asn, Some(64513));
    assert_eq!(edge.dynamic_asn, None);
    assert_eq!(edge.peer_address, "198.51.100.1");
    assert_eq!(edge.source_address.as_deref(), Some("198.51.100.10"));
    assert_eq!(edge.peer_port, 1179);
    assert_eq!(edge.hold_time, "1m30s");
    assert_eq!(edge.keepalive_time.as_deref(), Some("30s"));
    assert_eq!(edge.connect_time.as_deref(), Some("10s"));
    assert_eq!(edge.router_id.as_deref(), Some("10.255.0.1"));
    assert_eq!(
        edge.node_selectors,
        vec![both(
            &[("bgp", "true")],
            expression("kubernetes.io/arch", "In", &["amd64"])
        )]
    );
    assert_eq!(edge.password, None);
    assert_eq!(edge.password_secret.as_ref().unwrap().name, "edge-bgp-auth");
    assert_eq!(edge.bfd_profile.as_deref(), Some("full-bfd"));
    assert!(edge.enable_graceful_restart);
    assert!(edge.ebgp_multi_hop);
    assert_eq!(edge.vrf.as_deref(), Some("red"));
    assert_eq!(edge.local_asn, Some(64600));
    assert_eq!(
        (edge.dual_stack_address_family, edge.disable_mp),
        (None, None),
        "dualStackAddressFamily: true is FerroLB's default; disableMP is not carried"
    );

    // BGPPeer v1beta2 with dynamicASN and only a keepalive.
    let dynamic = &o.peers["dynamic-peer"].spec;
    assert_eq!(dynamic.peer_asn, None);
    assert_eq!(dynamic.dynamic_asn, Some(DynamicAsn::External));
    assert_eq!(dynamic.peer_address, "2001:db8::1");
    assert_eq!(
        dynamic.dual_stack_address_family,
        Some(false),
        "MetalLB's default, one family, written out"
    );
    assert_eq!(
        dynamic.hold_time, "60s",
        "three times the keepalive, as MetalLB"
    );
    assert_eq!(dynamic.keepalive_time.as_deref(), Some("20s"));
    assert_eq!(dynamic.password.as_deref(), Some("s3cret"));
    assert_eq!(dynamic.peer_port, 179);
    assert!(!dynamic.ebgp_multi_hop);

    // BGPPeer v1beta1.
    let legacy = &o.peers["legacy-router"].spec;
    assert_eq!(legacy.my_asn, 64512);
    assert_eq!(legacy.peer_asn, Some(64514));
    assert_eq!(legacy.peer_address, "192.0.2.254");
    assert_eq!(legacy.source_address.as_deref(), Some("192.0.2.1"));
    assert_eq!(legacy.peer_port, 179, "0 is the default port");
    assert_eq!(legacy.hold_time, "3m");
    assert_eq!(legacy.keepalive_time, None, "v1beta1's 0s is unset");
    assert_eq!(legacy.connect_time, None);
    assert_eq!(legacy.router_id.as_deref(), Some("10.255.0.2"));
    assert_eq!(
        legacy.node_selectors,
        vec![both(
            &[("rack", "r1")],
            expression("kubernetes.io/os", "In", &["linux"])
        )]
    );
    assert_eq!(legacy.password.as_deref(), Some("legacy-pass"));
    assert_eq!(legacy.bfd_profile.as_deref(), Some("full-bfd"));
    assert!(!legacy.enable_graceful_restart);

    // BGPPeer v1beta2 given by its interface (BGP unnumbered).
    let unnumbered = &o.peers["unnumbered"].spec;
    assert_eq!(unnumbered.interface.as_deref(), Some("eth1"));
    assert_eq!(
        unnumbered.peer_address, "",
        "no address: serialised without one"
    );
    assert_eq!(unnumbered.dynamic_asn, Some(DynamicAsn::Internal));
    assert_eq!(
        unnumbered.dual_stack_address_family, None,
        "an unnumbered session carries both families in MetalLB too"
    );
}

#[test]
fn the_full_fixture_reports_each_field_without_an_equivalent_once_and_no_unknown_field() {
    let report = tmp("full-report.json");
    let run = ferrolb(&[
        "migrate",
        "--from",
        FULL,
        "--report-json",
        report.to_str().unwrap(),
    ]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let json = report_json(&report);
    let entries = json["entries"].as_array().unwrap();
    let of = |finding: &str| -> Vec<&Value> {
        entries.iter().filter(|e| e["finding"] == finding).collect()
    };
    let unsupported: BTreeSet<(String, String, String)> = of("unsupportedField")
        .iter()
        .map(|e| {
            (
                e["object"]["kind"].as_str().unwrap().to_string(),
                e["object"]["name"].as_str().unwrap().to_string(),
                e["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, String)> =
        [("BGPAdvertisement", "aggregated", "spec.asPathPrepend")]
            .into_iter()
            .map(|(k, n, p)| (k.into(), n.into(), p.into()))
            .collect();
    assert_eq!(unsupported, expected);
    assert_eq!(of("unsupportedField").len(), 1, "each exactly once");
    assert_eq!(
        of("unknownField"),
        Vec::<&Value>::new(),
        "every field of MetalLB's schema is mapped or in the table"
    );
    assert!(of("unsupportedField").iter().all(|e| {
        e["message"]
            .as_str()
            .unwrap()
            .contains("no FerroLB equivalent")
    }));

    assert_eq!(
        of("notWritten"),
        Vec::<&Value>::new(),
        "every object is written"
    );

    let ignored: Vec<&str> = of("ignored")
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(ignored, ["Service", "ServiceBGPStatus"]);

    let actions = of("actionNeeded");
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["object"]["name"], "edge-router");
    assert_eq!(actions[0]["action"]["name"], "edge-bgp-auth");
    assert_eq!(actions[0]["action"]["toNamespace"], "ferrolb-system");
    assert_eq!(
        of("notReady"),
        Vec::<&Value>::new(),
        "a consistent configuration"
    );

    assert_eq!(json["summary"]["converted"], 12);
    assert_eq!(json["summary"]["fieldsWithoutEquivalent"], 1);
    assert_eq!(json["summary"]["skipped"], 2);
    assert_eq!(json["exitStatus"], 0);

    // The same findings, one line each, on stderr.
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        entries.len() + 1,
        "one line per entry, then the summary"
    );
    assert!(lines.iter().any(|l| l.starts_with(
        "unsupported: BGPAdvertisement/aggregated (metallb.io/v1beta1): spec.asPathPrepend: no FerroLB equivalent"
    )));
    std::fs::remove_file(report).ok();
}

#[test]
fn the_full_fixture_exits_0_and_3_with_strict() {
    let mut args = vec!["migrate", "--from", FULL];
    let run = ferrolb(&args);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        summary_line(&run),
        "12 objects converted, 1 fields without an equivalent, 2 objects skipped"
    );
    assert_eq!(parse_objects(&run.stdout).count(), 12);

    args.push("--strict");
    let strict = ferrolb(&args);
    assert_eq!(strict.status, 3);
    assert_eq!(
        strict.stdout, run.stdout,
        "--strict changes only the exit status"
    );
}

#[test]
fn the_typical_fixture_converts_cleanly_and_exits_0_even_with_strict() {
    let run = ferrolb(&["migrate", "--from", TYPICAL, "--strict"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        summary_line(&run),
        "5 objects converted, 0 fields without an equivalent, 0 objects skipped"
    );
    let o = parse_objects(&run.stdout);
    let pool = &o.pools["first-pool"].spec;
    assert_eq!(
        pool.addresses,
        strings(&[
            "192.168.10.0/24",
            "192.168.9.1-192.168.9.5",
            "fc00:f853:ccd:e799::/124"
        ])
    );
    assert!(pool.auto_assign);
    let l2 = &o.l2["example"].spec;
    assert!(l2.ip_address_pools.is_empty() && l2.ip_address_pool_selectors.is_empty());
    let router = &o.peers["router"].spec;
    assert_eq!(router.peer_asn, Some(64501));
    assert_eq!(
        router.hold_time, "90s",
        "MetalLB's native default, FerroLB's default"
    );
    assert_eq!(router.password_secret.as_ref().unwrap().name, "bgp-auth");
    assert_eq!(router.bfd_profile.as_deref(), Some("fast"));
    assert_eq!(o.bfd["fast"].spec.receive_interval, Some(300));
    assert_eq!(o.bfd["fast"].spec.detect_multiplier, None);
    assert_eq!(
        o.bgp_adv["external"].spec.communities,
        strings(&["64500:100"])
    );
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("action needed: BGPPeer/router")
                && l.contains("`bgp-auth`")
                && l.contains("ferrolb-system")),
        "{}",
        run.stderr
    );
}

#[test]
fn output_goes_to_the_file_given_and_stdout_stays_empty() {
    let out = tmp("typical.yaml");
    let run = ferrolb(&["migrate", "--from", TYPICAL, "-o", out.to_str().unwrap()]);
    assert_eq!(run.status, 0);
    assert_eq!(run.stdout, "");
    let yaml = std::fs::read_to_string(&out).unwrap();
    assert_eq!(parse_objects(&yaml).count(), 5);
    std::fs::remove_file(out).ok();
}

#[test]
fn an_unreadable_input_exits_1_and_writes_no_yaml() {
    let run = ferrolb(&["migrate", "--from", "/nonexistent/metallb.yaml"]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("/nonexistent/metallb.yaml"),
        "{}",
        run.stderr
    );

    let bad = tmp("bad.yaml");
    std::fs::write(&bad, "apiVersion: metallb.io/v1beta1\nkind: [\n").unwrap();
    let run = ferrolb(&[
        "migrate",
        "--from",
        TYPICAL,
        "--from",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "", "no partial configuration");
    assert!(run.stderr.contains("is not valid YAML"), "{}", run.stderr);
    std::fs::remove_file(bad).ok();
}

#[test]
fn the_help_says_services_are_not_touched() {
    let run = ferrolb(&["migrate", "--help"]);
    assert_eq!(run.status, 0);
    assert!(
        run.stdout.contains("Services need no change"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("metallb.universe.tf/"));
    assert!(run.stdout.contains("status.loadBalancer.ingress"));
}
