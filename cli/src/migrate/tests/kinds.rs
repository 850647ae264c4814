//! Pools, advertisements, communities and BFD profiles, and the rules across them.

use ferrolb_api::validate::ConfigError;
use serde_json::json;

use super::super::report::{Finding, Note, Problem};
use super::super::*;
use super::*;

#[test]
fn pool_priority_zero_is_unset_and_a_negative_one_is_unset_with_a_note() {
    let c = run(vec![pool(
        "p",
        json!({"addresses": ["192.0.2.0/24"], "serviceAllocation": {"priority": 0}}),
    )]);
    assert_eq!(
        the_pool(&c).service_allocation.as_ref().unwrap().priority,
        None
    );
    assert!(notes(&c).is_empty());
    let c = run(vec![pool(
        "p",
        json!({"addresses": ["192.0.2.0/24"], "serviceAllocation": {"priority": -4}}),
    )]);
    assert_eq!(
        the_pool(&c).service_allocation.as_ref().unwrap().priority,
        None
    );
    assert_eq!(
        notes(&c),
        vec![(
            "spec.serviceAllocation.priority",
            &Note::NegativePriorityIsUnset { priority: -4 }
        )]
    );
}

#[test]
fn a_pool_priority_beyond_int32_is_not_written_rather_than_clamped() {
    let c = run(vec![pool(
        "p",
        json!({"addresses": ["192.0.2.0/24"], "serviceAllocation": {"priority": 3_000_000_000u64}}),
    )]);
    assert!(c.objects.is_empty());
    assert!(
        matches!(&problems(&c)[..], [Problem::OutOfRange { path, .. }] if path == "spec.serviceAllocation.priority")
    );
}

#[test]
fn a_pool_without_auto_assign_keeps_metallbs_default_true() {
    let c = run(vec![pool("p", json!({"addresses": ["192.0.2.0/24"]}))]);
    let spec = the_pool(&c);
    assert!(spec.auto_assign);
    assert!(!spec.avoid_buggy_ips);
    assert_eq!(spec.ip_mode, None);
}

#[test]
fn a_pool_ferrolb_would_refuse_is_not_written_with_ferrolbs_reason() {
    let c = run(vec![pool(
        "p",
        json!({"addresses": ["2001:db8::9-2001:db8::1"]}),
    )]);
    assert!(c.objects.is_empty());
    assert!(
        matches!(&problems(&c)[..], [Problem::Config(ConfigError::InvalidAddress { entry, .. })] if entry == "2001:db8::9-2001:db8::1")
    );
    let c = run(vec![pool("p", json!({"addresses": []}))]);
    assert!(
        matches!(&problems(&c)[..], [Problem::Length { path, len: 0, .. }] if path == "spec.addresses")
    );
    let c = run(vec![pool("p", json!({}))]);
    assert!(c.objects.is_empty(), "no spec: no addresses");
}

#[test]
fn local_pref_zero_is_unset_with_a_note() {
    let c = run(vec![object(
        "BGPAdvertisement",
        "v1beta1",
        "adv",
        json!({"localPref": 0}),
    )]);
    match &c.objects[0].object {
        FerroObject::BGPAdvertisement(a) => assert_eq!(a.spec.local_pref, None),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        notes(&c),
        vec![("spec.localPref", &Note::LocalPrefZeroIsUnset)]
    );
}

#[test]
fn advertisement_values_ferrolb_refuses_keep_it_from_being_written() {
    for spec in [
        json!({"aggregationLength": 33}),
        json!({"aggregationLengthV6": 129}),
        json!({"communities": ["65536:1"]}),
        json!({"communities": ["Upper-Alias"]}),
    ] {
        let c = run(vec![object(
            "BGPAdvertisement",
            "v1beta1",
            "adv",
            spec.clone(),
        )]);
        assert!(c.objects.is_empty(), "{spec}");
    }
}

#[test]
fn a_community_alias_ferrolb_refuses_keeps_the_object_from_being_written() {
    let c = run(vec![object(
        "Community",
        "v1beta1",
        "c",
        json!({"communities": [{"name": "Edge_Tag", "value": "65000:1"}]}),
    )]);
    assert!(c.objects.is_empty());
    assert!(
        matches!(&problems(&c)[..], [Problem::Refused { path, .. }] if path == "spec.communities[0].name")
    );
}

#[test]
fn a_community_alias_named_like_a_well_known_community_gets_a_note() {
    let c = run(vec![object(
        "Community",
        "v1beta1",
        "c",
        json!({"communities": [
            {"name": "no-export", "value": "65000:1"},
            {"name": "no-advertise", "value": "65535:65282"},
        ]}),
    )]);
    assert_eq!(
        notes(&c),
        vec![(
            "spec.communities[0].name",
            &Note::AliasShadowedByWellKnown {
                alias: "no-export".into()
            }
        )]
    );
}

#[test]
fn a_bfd_profile_out_of_ferrolbs_range_is_not_written() {
    let c = run(vec![object(
        "BFDProfile",
        "v1beta1",
        "b",
        json!({"detectMultiplier": 1}),
    )]);
    assert!(
        matches!(&problems(&c)[..], [Problem::OutOfRange { path, .. }] if path == "spec.detectMultiplier")
    );
}

#[test]
fn overlapping_pools_are_written_with_a_warning_on_the_one_ferrolb_ignores() {
    let c = run(vec![
        pool("a", json!({"addresses": ["192.0.2.0/24"]})),
        pool("b", json!({"addresses": ["192.0.2.128/25"]})),
    ]);
    assert_eq!(c.objects.len(), 2);
    let warned: Vec<&str> = c
        .report
        .iter()
        .filter(|e| matches!(e.finding, Finding::NotReady { .. }))
        .map(|e| e.object.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(warned, vec!["b"]);
}
