//! Tests of the conversion core, one decision each: what holds for every kind here, the
//! peers' decisions in `peers.rs`, the other kinds' in `kinds.rs`.

mod kinds;
mod peers;

use ferrolb_api::v1beta1::{BGPPeerSpec, IPAddressPoolSpec};
use ferrolb_api::validate::ConfigError;
use serde_json::{Value, json};

use super::kinds::Kind;
use super::report::{Action, Finding, IgnoreReason, Note, Problem, exit_status};
use super::unsupported::UNSUPPORTED;
use super::*;

pub(super) fn options() -> Options {
    Options {
        to_namespace: "ferrolb-system".into(),
        metallb_namespace: "metallb-system".into(),
    }
}

pub(super) fn object(kind: &str, version: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("metallb.io/{version}"),
        "kind": kind,
        "metadata": {"name": name, "namespace": "metallb-system"},
        "spec": spec,
    })
}

pub(super) fn run(values: Vec<Value>) -> Conversion {
    let docs = values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Document {
            source: format!("test#{}", i + 1),
            value,
        })
        .collect();
    convert(docs, &options())
}

pub(super) fn findings(c: &Conversion) -> Vec<&Finding> {
    c.report.iter().map(|e| &e.finding).collect()
}

pub(super) fn field_findings(c: &Conversion) -> Vec<(String, String)> {
    c.report
        .iter()
        .filter(|e| e.is_field_without_equivalent())
        .map(|e| {
            (
                e.object
                    .as_ref()
                    .map(|o| o.name.clone())
                    .unwrap_or_default(),
                e.finding.path().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

pub(super) fn problems(c: &Conversion) -> Vec<Problem> {
    c.report
        .iter()
        .filter_map(|e| match &e.finding {
            Finding::NotWritten { problems } => Some(problems.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

pub(super) fn peer_v2(spec: Value) -> Value {
    let mut base = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"});
    merge(&mut base, spec);
    object("BGPPeer", "v1beta2", "edge", base)
}

pub(super) fn peer_v1(spec: Value) -> Value {
    let mut base = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"});
    merge(&mut base, spec);
    object("BGPPeer", "v1beta1", "legacy", base)
}

pub(super) fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            if v.is_null() {
                b.remove(&k);
            } else {
                b.insert(k, v);
            }
        }
    }
}

pub(super) fn pool(name: &str, spec: Value) -> Value {
    object("IPAddressPool", "v1beta1", name, spec)
}

pub(super) fn the_peer(c: &Conversion) -> &BGPPeerSpec {
    match c.objects.as_slice() {
        [
            Converted {
                object: FerroObject::BGPPeer(p),
                ..
            },
        ] => &p.spec,
        other => panic!("expected one peer, got {other:?} and {:?}", c.report),
    }
}

pub(super) fn the_pool(c: &Conversion) -> &IPAddressPoolSpec {
    match c.objects.as_slice() {
        [
            Converted {
                object: FerroObject::IPAddressPool(p),
                ..
            },
        ] => &p.spec,
        other => panic!("expected one pool, got {other:?} and {:?}", c.report),
    }
}

pub(super) fn notes(c: &Conversion) -> Vec<(&str, &Note)> {
    c.report
        .iter()
        .filter_map(|e| match &e.finding {
            Finding::Note { path, note } => Some((path.as_str(), note)),
            _ => None,
        })
        .collect()
}

/// A MetalLB object of `kind` that converts cleanly, with `path` (a `spec.` field) set.
pub(super) fn with_field(kind: Kind, field: &str, value: Value) -> Value {
    let spec = json!({ field: value });
    match kind {
        Kind::BGPPeer => peer_v2(spec),
        Kind::L2Advertisement => object("L2Advertisement", "v1beta1", "adv", spec),
        Kind::BGPAdvertisement => object("BGPAdvertisement", "v1beta1", "adv", spec),
        other => panic!("no sample object for {other}"),
    }
}

/// A value MetalLB would act on, and the field's default, for each row of the table.
pub(super) fn samples(field: &str) -> (Value, Value) {
    match field {
        "serviceSelectors" => (json!([{"matchLabels": {"app": "web"}}]), json!([])),
        "preferredNodeSelectors" => (
            json!([{"weight": 10, "preference": {"matchLabels": {"zone": "a"}}}]),
            json!([]),
        ),
        "asPathPrepend" => (json!(2), json!(0)),
        "localASN" => (json!(64600), json!(0)),
        "interface" => (json!("eth1"), json!("")),
        "vrf" => (json!("red"), json!("")),
        "disableMP" => (json!(true), json!(false)),
        other => panic!("no sample value for {other}: add one"),
    }
}

#[test]
fn each_unsupported_field_produces_exactly_one_finding_naming_object_and_path() {
    for row in UNSUPPORTED {
        let field = row.path.strip_prefix("spec.").expect("a spec field");
        let (set, _) = samples(field);
        let c = run(vec![with_field(row.kind, field, set)]);
        let name = if row.kind == Kind::BGPPeer {
            "edge"
        } else {
            "adv"
        };
        assert_eq!(
            field_findings(&c),
            vec![(name.to_string(), row.path.to_string())],
            "{} {}",
            row.kind,
            row.path
        );
        let entry = c
            .report
            .iter()
            .find(|e| e.is_field_without_equivalent())
            .unwrap();
        assert_eq!(entry.object.as_ref().unwrap().kind, row.kind);
        assert_eq!(
            entry.finding,
            Finding::UnsupportedField {
                path: row.path.into(),
                reason: row.reason
            }
        );
        assert!(entry.to_string().contains(row.path), "{entry}");
    }
}

#[test]
fn an_unsupported_field_set_to_its_metallb_default_produces_no_finding() {
    for row in UNSUPPORTED {
        let field = row.path.strip_prefix("spec.").unwrap();
        let (_, default) = samples(field);
        let c = run(vec![with_field(row.kind, field, default)]);
        assert_eq!(field_findings(&c), vec![], "{} {}", row.kind, row.path);
        assert_eq!(c.objects.len(), 1);
    }
}

#[test]
fn an_unknown_field_is_reported_at_any_depth_and_not_converted() {
    let c = run(vec![json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": {"name": "p", "weird": "x"},
        "spec": {
            "addresses": ["192.0.2.0/24"],
            "ipFamily": "IPv4",
            "serviceAllocation": {"priority": 1, "weight": 5},
        },
        "extra": true,
    })]);
    let mut found = field_findings(&c);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("p".into(), "extra".into()),
            ("p".into(), "metadata.weird".into()),
            ("p".into(), "spec.ipFamily".into()),
            ("p".into(), "spec.serviceAllocation.weight".into()),
        ]
    );
    assert!(
        c.report
            .iter()
            .filter(|e| e.is_field_without_equivalent())
            .all(|e| matches!(e.finding, Finding::UnknownField { .. })
                && e.to_string().contains("unknown field, not converted"))
    );
    assert_eq!(the_pool(&c).addresses, vec!["192.0.2.0/24"]);
}

#[test]
fn a_value_of_the_wrong_type_keeps_the_object_from_being_written_and_names_the_field() {
    let c = run(vec![peer_v2(json!({"peerASN": "64513"}))]);
    assert!(c.objects.is_empty());
    assert!(
        problems(&c)
            .iter()
            .any(|p| matches!(p, Problem::WrongType { path, .. } if path == "spec.peerASN"))
    );
}

#[test]
fn an_object_without_a_name_is_not_written() {
    let mut v = pool("x", json!({"addresses": ["192.0.2.0/24"]}));
    v["metadata"].as_object_mut().unwrap().remove("name");
    let c = run(vec![v]);
    assert!(c.objects.is_empty());
    assert_eq!(problems(&c), vec![Problem::MissingName]);
}

#[test]
fn metadata_keeps_name_labels_and_annotations_and_drops_what_the_server_manages() {
    let c = run(vec![json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "L2Advertisement",
        "metadata": {
            "name": "l2",
            "namespace": "metallb-system",
            "labels": {"tier": "edge"},
            "annotations": {"team": "net", LAST_APPLIED: "{}"},
            "uid": "u", "resourceVersion": "1", "generation": 2,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"name": "o"}],
            "finalizers": ["f"],
        },
        "status": {"anything": 1},
    })]);
    let meta = c.objects[0].object.metadata();
    assert_eq!(meta.name.as_deref(), Some("l2"));
    assert_eq!(meta.namespace.as_deref(), Some("ferrolb-system"));
    assert_eq!(meta.labels.as_ref().unwrap()["tier"], "edge");
    let annotations = meta.annotations.as_ref().unwrap();
    assert_eq!(annotations.len(), 1);
    assert_eq!(annotations["team"], "net");
    assert_eq!(meta.uid, None);
    assert_eq!(meta.resource_version, None);
    assert_eq!(meta.generation, None);
    assert_eq!(meta.creation_timestamp, None);
    assert_eq!(meta.managed_fields, None);
    assert_eq!(meta.owner_references, None);
    assert_eq!(meta.finalizers, None);
    assert!(c.objects[0].object.to_json().get("status").is_none());
    assert_eq!(
        c.report,
        vec![],
        "nothing silently dropped, nothing to report"
    );
}

#[test]
fn objects_of_other_kinds_and_versions_are_ignored_with_a_reason() {
    let c = run(vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status", "metadata": {"name": "s"}}),
        json!({"apiVersion": "metallb.io/v1beta2", "kind": "IPAddressPool", "metadata": {"name": "p"}}),
        json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool", "metadata": {"name": "q"}}),
        json!("just a string"),
    ]);
    let reasons: Vec<IgnoreReason> = c
        .report
        .iter()
        .filter_map(|e| match &e.finding {
            Finding::Ignored { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            IgnoreReason::NotMetallbConfiguration,
            IgnoreReason::NotMetallbConfiguration,
            IgnoreReason::UnknownVersion,
            IgnoreReason::NotMetallbConfiguration,
            IgnoreReason::NotAnObject,
        ]
    );
    assert!(
        c.report[0]
            .to_string()
            .contains("not a MetalLB configuration kind, ignored")
    );
    assert_eq!(c.summary().skipped, 5);
    assert_eq!(exit_status(&c.report, true), 0, "ignoring is not an error");
}

#[test]
fn list_items_are_converted_and_typed_list_items_take_the_lists_kind() {
    let c = run(vec![
        json!({"apiVersion": "v1", "kind": "List", "items": [
            pool("a", json!({"addresses": ["192.0.2.0/26"]})),
        ]}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPoolList", "items": [
            {"metadata": {"name": "b"}, "spec": {"addresses": ["192.0.2.64/26"]}},
        ]}),
    ]);
    let names: Vec<String> = c.objects.iter().map(|o| o.object.name()).collect();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(c.objects[1].source, "test#2 items[0]");
    assert_eq!(c.report, vec![]);
}

#[test]
fn a_duplicate_with_the_same_content_is_written_once_and_a_different_one_is_an_error() {
    let a = pool("p", json!({"addresses": ["192.0.2.0/24"]}));
    let c = run(vec![a.clone(), a.clone()]);
    assert_eq!(c.objects.len(), 1);
    assert!(matches!(
        findings(&c)[..],
        [Finding::Duplicate {
            same_content: true,
            ..
        }]
    ));
    assert_eq!(exit_status(&c.report, false), 0);
    let b = pool("p", json!({"addresses": ["198.51.100.0/24"]}));
    let c = run(vec![a, b]);
    assert_eq!(
        the_pool(&c).addresses,
        vec!["192.0.2.0/24"],
        "the first wins"
    );
    assert_eq!(exit_status(&c.report, false), 1);
}

#[test]
fn objects_come_out_with_what_is_referred_to_first_then_by_name() {
    let c = run(vec![
        object("BGPAdvertisement", "v1beta1", "adv", json!({})),
        object("L2Advertisement", "v1beta1", "l2", json!({})),
        peer_v2(json!({})),
        pool("z", json!({"addresses": ["192.0.2.0/26"]})),
        pool("a", json!({"addresses": ["192.0.2.64/26"]})),
        object("BFDProfile", "v1beta1", "bfd", json!({})),
        object("Community", "v1beta1", "c", json!({})),
    ]);
    let order: Vec<(Kind, String)> = c
        .objects
        .iter()
        .map(|o| (o.object.kind(), o.object.name()))
        .collect();
    assert_eq!(
        order,
        vec![
            (Kind::Community, "c".into()),
            (Kind::BFDProfile, "bfd".into()),
            (Kind::IPAddressPool, "a".into()),
            (Kind::IPAddressPool, "z".into()),
            (Kind::BGPPeer, "edge".into()),
            (Kind::L2Advertisement, "l2".into()),
            (Kind::BGPAdvertisement, "adv".into()),
        ]
    );
}

#[test]
fn references_to_objects_not_in_the_input_are_written_with_a_warning() {
    let c = run(vec![
        object(
            "L2Advertisement",
            "v1beta1",
            "l2",
            json!({"ipAddressPools": ["gone"]}),
        ),
        peer_v2(json!({"bfdProfile": "fast"})),
    ]);
    assert_eq!(c.objects.len(), 2);
    let warnings: Vec<&ConfigError> = c
        .report
        .iter()
        .filter_map(|e| match &e.finding {
            Finding::NotReady { error } => Some(error),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            warnings[..],
            [
                ConfigError::MissingBfdProfile { .. },
                ConfigError::UnknownPool { .. }
            ] | [
                ConfigError::UnknownPool { .. },
                ConfigError::MissingBfdProfile { .. }
            ]
        ),
        "{warnings:?}"
    );
    assert_eq!(exit_status(&c.report, true), 0, "a warning, not an error");
}

#[test]
fn an_error_wins_over_strict_and_strict_fails_only_on_fields_without_an_equivalent() {
    let unsupported = with_field(Kind::BGPAdvertisement, "asPathPrepend", json!(2));
    let c = run(vec![unsupported.clone()]);
    assert_eq!(exit_status(&c.report, false), 0);
    assert_eq!(exit_status(&c.report, true), 3);
    let c = run(vec![unsupported, peer_v2(json!({"myASN": 0}))]);
    assert_eq!(exit_status(&c.report, true), 1);
}

#[test]
fn the_summary_counts_objects_fields_and_skips() {
    let c = run(vec![
        with_field(Kind::BGPAdvertisement, "asPathPrepend", json!(2)),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config"}}),
    ]);
    assert_eq!(
        c.summary().to_string(),
        "1 objects converted, 1 fields without an equivalent, 1 objects skipped"
    );
}

#[test]
fn the_yaml_is_one_document_per_object_that_ferrolbs_types_read_back() {
    let c = run(vec![
        pool("p", json!({"addresses": ["192.0.2.0/24"]})),
        peer_v2(json!({})),
    ]);
    let yaml = c.to_yaml();
    assert_eq!(yaml.matches("---\n").count(), 2);
    let docs: Vec<Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    let pool: ferrolb_api::v1beta1::IPAddressPool =
        serde_json::from_value(docs[0].clone()).unwrap();
    assert_eq!(pool.spec.addresses, vec!["192.0.2.0/24"]);
    let peer: ferrolb_api::v1beta1::BGPPeer = serde_json::from_value(docs[1].clone()).unwrap();
    assert_eq!(peer.spec.peer_address, "192.0.2.1");
    assert_eq!(docs[1]["apiVersion"], "ferrolb.io/v1beta1");
}
