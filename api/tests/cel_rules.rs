//! Every CEL rule of the CRDs, evaluated against a valid and an invalid object with the same CEL
//! implementation (kube-cel, Kubernetes' extension functions included) the test API server uses.

use ferrolb_api::v1beta1::{BGPAdvertisement, BGPPeer, IPAddressPool, all_crds};
use kube::CustomResourceExt;
use kube::core::cel::{ErrorKind, Validator, compile_schema};
use serde_json::{Value, json};

fn schema_of<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Validates `spec` wrapped in an object of kind `K`; returns the messages of failed rules.
fn failures<K: CustomResourceExt>(spec: Value) -> Vec<String> {
    let object = json!({
        "apiVersion": "ferrolb.io/v1beta1",
        "kind": K::crd().spec.names.kind,
        "metadata": {"name": "x", "namespace": "ferrolb-system"},
        "spec": spec,
    });
    match Validator::new().validate(&schema_of::<K>(), &object, None) {
        Ok(()) => vec![],
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| {
                assert_eq!(
                    e.kind,
                    ErrorKind::ValidationFailure,
                    "rule did not evaluate: {e}"
                );
                e.to_string()
            })
            .collect(),
    }
}

#[test]
fn every_cel_rule_of_every_crd_compiles() {
    for crd in all_crds() {
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let compiled = compile_schema(&schema);
        let errors = compiled.compilation_errors();
        assert!(errors.is_empty(), "{}: {errors:?}", crd.spec.names.kind);
    }
}

#[test]
fn pool_accepts_cidrs_and_ordered_ranges_of_both_families() {
    let spec = json!({"addresses": ["10.0.0.0/24", "10.0.1.10-10.0.1.20", "fd00:99::/64", "fd00:98::1-fd00:98::9"]});
    assert_eq!(failures::<IPAddressPool>(spec), Vec::<String>::new());
}

#[test]
fn pool_refuses_an_ipv4_range_whose_start_is_after_its_end() {
    let errs = failures::<IPAddressPool>(json!({"addresses": ["10.0.1.20-10.0.1.10"]}));
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("start not after end"), "{errs:?}");
}

#[test]
fn pool_refuses_a_range_that_mixes_families() {
    assert_eq!(
        failures::<IPAddressPool>(json!({"addresses": ["10.0.0.1-fd00::1"]})).len(),
        1
    );
}

#[test]
fn pool_refuses_an_entry_that_is_neither_cidr_nor_range() {
    for bad in [
        "10.0.0.0/33",
        "ten.0.0.0/24",
        "10.0.0.1",
        "10.0.0.1-10.0.0.2-10.0.0.3",
    ] {
        assert_eq!(
            failures::<IPAddressPool>(json!({"addresses": [bad]})).len(),
            1,
            "{bad}"
        );
    }
}

fn peer(extra: Value) -> Value {
    let mut spec = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "10.99.0.1"});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

#[test]
fn peer_with_defaults_is_valid() {
    assert_eq!(failures::<BGPPeer>(peer(json!({}))), Vec::<String>::new());
}

#[test]
fn peer_hold_time_may_be_zero_or_at_least_three_seconds() {
    for ok in ["0s", "3s", "90s", "1m30s"] {
        assert_eq!(
            failures::<BGPPeer>(peer(json!({"holdTime": ok}))),
            Vec::<String>::new(),
            "{ok}"
        );
    }
    for bad in ["1s", "2s", "2500ms"] {
        let errs = failures::<BGPPeer>(peer(json!({"holdTime": bad})));
        assert!(
            errs.iter().any(|e| e.contains("at least 3s")),
            "{bad}: {errs:?}"
        );
    }
}

#[test]
fn peer_hold_time_must_be_a_duration() {
    let errs = failures::<BGPPeer>(peer(json!({"holdTime": "ninety"})));
    assert!(
        errs.iter().any(|e| e.contains("duration such as 90s")),
        "{errs:?}"
    );
}

#[test]
fn peer_keepalive_may_not_exceed_hold_time() {
    assert!(
        failures::<BGPPeer>(peer(json!({"holdTime": "90s", "keepaliveTime": "30s"}))).is_empty()
    );
    let errs = failures::<BGPPeer>(peer(json!({"holdTime": "9s", "keepaliveTime": "30s"})));
    assert!(
        errs.iter()
            .any(|e| e.contains("keepaliveTime must not be above holdTime")),
        "{errs:?}"
    );
}

#[test]
fn peer_keepalive_is_checked_against_the_default_hold_time() {
    let errs = failures::<BGPPeer>(peer(json!({"keepaliveTime": "2m"})));
    assert!(
        errs.iter()
            .any(|e| e.contains("keepaliveTime must not be above holdTime")),
        "{errs:?}"
    );
}

#[test]
fn peer_password_and_password_secret_are_exclusive() {
    assert!(failures::<BGPPeer>(peer(json!({"password": "s3cret"}))).is_empty());
    assert!(failures::<BGPPeer>(peer(json!({"passwordSecret": {"name": "md5"}}))).is_empty());
    let errs = failures::<BGPPeer>(peer(
        json!({"password": "s3cret", "passwordSecret": {"name": "md5"}}),
    ));
    assert!(errs.iter().any(|e| e.contains("not both")), "{errs:?}");
}

#[test]
fn peer_addresses_must_be_ip_addresses() {
    let errs = failures::<BGPPeer>(peer(json!({"peerAddress": "router.example"})));
    assert!(
        errs.iter()
            .any(|e| e.contains("peerAddress must be an IPv4 or IPv6 address")),
        "{errs:?}"
    );
    let errs = failures::<BGPPeer>(peer(json!({"sourceAddress": "eth0"})));
    assert!(
        errs.iter()
            .any(|e| e.contains("sourceAddress must be an IPv4 or IPv6 address")),
        "{errs:?}"
    );
}

#[test]
fn peer_source_address_must_match_the_peer_family() {
    assert!(failures::<BGPPeer>(peer(json!({"sourceAddress": "10.99.0.2"}))).is_empty());
    let errs = failures::<BGPPeer>(peer(json!({"sourceAddress": "fd00:99::2"})));
    assert!(
        errs.iter().any(|e| e.contains("same IP family")),
        "{errs:?}"
    );
}

#[test]
fn peer_router_id_must_be_ipv4() {
    assert!(failures::<BGPPeer>(peer(json!({"routerID": "10.99.0.2"}))).is_empty());
    let errs = failures::<BGPPeer>(peer(json!({"routerID": "fd00:99::2"})));
    assert!(
        errs.iter()
            .any(|e| e.contains("routerID must be an IPv4 address")),
        "{errs:?}"
    );
}

#[test]
fn peer_connect_time_is_at_least_one_second() {
    assert!(failures::<BGPPeer>(peer(json!({"connectTime": "5s"}))).is_empty());
    let errs = failures::<BGPPeer>(peer(json!({"connectTime": "100ms"})));
    assert!(errs.iter().any(|e| e.contains("at least 1s")), "{errs:?}");
}

#[test]
fn advertisement_communities_halves_stay_within_sixteen_bits() {
    let ok = json!({"communities": ["65000:100", "large:64512:1:2", "no-advertise"]});
    assert!(failures::<BGPAdvertisement>(ok).is_empty());
    let errs = failures::<BGPAdvertisement>(json!({"communities": ["65536:1"]}));
    assert!(errs.iter().any(|e| e.contains("up to 65535")), "{errs:?}");
    let errs = failures::<BGPAdvertisement>(json!({"communities": ["large:4294967296:1:1"]}));
    assert!(
        errs.iter().any(|e| e.contains("up to 4294967295")),
        "{errs:?}"
    );
}

#[test]
fn an_unnumbered_peer_names_an_interface_instead_of_a_peer_address() {
    let mut unnumbered = peer(json!({"interface": "eth1"}));
    unnumbered.as_object_mut().unwrap().remove("peerAddress");
    assert_eq!(
        failures::<BGPPeer>(unnumbered.clone()),
        Vec::<String>::new()
    );
    let both = failures::<BGPPeer>(peer(json!({"interface": "eth1"})));
    assert!(both.iter().any(|e| e.contains("exactly one")), "{both:?}");
    let mut neither = peer(json!({}));
    neither.as_object_mut().unwrap().remove("peerAddress");
    let neither = failures::<BGPPeer>(neither);
    assert!(
        neither.iter().any(|e| e.contains("exactly one")),
        "{neither:?}"
    );
    unnumbered["sourceAddress"] = json!("10.0.0.1");
    let source = failures::<BGPPeer>(unnumbered.clone());
    assert!(
        source
            .iter()
            .any(|e| e.contains("sourceAddress cannot be set with interface")),
        "{source:?}"
    );
    unnumbered.as_object_mut().unwrap().remove("sourceAddress");
    unnumbered["interface"] = json!("eth/1");
    let bad = failures::<BGPPeer>(unnumbered);
    assert!(
        bad.iter().any(|e| e.contains("Linux interface name")),
        "{bad:?}"
    );
}
