//! `BGPPeer`: both versions, timers, ASNs, the password Secret.

use ferrolb_api::v1beta1::DynamicAsn;
use serde_json::json;

use super::super::report::{Finding, Note, Problem, exit_status};
use super::super::*;
use super::*;

#[test]
fn a_v1beta2_field_in_a_v1beta1_peer_is_an_unknown_field() {
    let c = run(vec![peer_v1(json!({"vrf": "red", "connectTime": "5s"}))]);
    let mut found = field_findings(&c);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("legacy".into(), "spec.connectTime".into()),
            ("legacy".into(), "spec.vrf".into()),
        ]
    );
    assert!(
        c.report
            .iter()
            .all(|e| !matches!(e.finding, Finding::UnsupportedField { .. }))
    );
    assert_eq!(the_peer(&c).connect_time, None);
}

#[test]
fn a_v1beta2_peer_with_a_password_secret_is_converted_with_a_note_to_copy_the_secret() {
    let c = run(vec![peer_v2(json!({
        "passwordSecret": {"name": "bgp-auth", "namespace": "metallb-system"}
    }))]);
    assert_eq!(
        the_peer(&c).password_secret.as_ref().unwrap().name,
        "bgp-auth"
    );
    let copy = SecretCopy {
        name: "bgp-auth".into(),
        from_namespace: "metallb-system".into(),
        to_namespace: "ferrolb-system".into(),
    };
    assert_eq!(c.objects[0].password_secret.as_ref(), Some(&copy));
    assert!(findings(&c).contains(&&Finding::ActionNeeded {
        action: Action::CopySecret {
            name: copy.name.clone(),
            from_namespace: copy.from_namespace.clone(),
            to_namespace: copy.to_namespace.clone(),
        }
    }));
    assert_eq!(
        field_findings(&c),
        vec![],
        "an action, not an unsupported field"
    );
    assert_eq!(exit_status(&c.report, true), 0);
}

#[test]
fn a_password_secret_naming_another_namespace_is_taken_from_metallbs_namespace_with_a_note() {
    let c = run(vec![peer_v2(json!({
        "passwordSecret": {"name": "bgp-auth", "namespace": "elsewhere"}
    }))]);
    let copy = c.objects[0].password_secret.clone().unwrap();
    assert_eq!(copy.from_namespace, "metallb-system");
    assert!(notes(&c).contains(&(
        "spec.passwordSecret.namespace",
        &Note::SecretNamespaceIgnored {
            namespace: "elsewhere".into(),
            used: "metallb-system".into()
        }
    )));
}

#[test]
fn a_password_secret_without_a_name_is_unset() {
    let c = run(vec![peer_v2(json!({"passwordSecret": {"name": ""}}))]);
    assert_eq!(the_peer(&c).password_secret, None);
    assert_eq!(c.objects[0].password_secret, None);
}

#[test]
fn a_peer_with_both_password_and_password_secret_is_not_written_with_ferrolbs_message() {
    let c = run(vec![peer_v2(json!({
        "password": "x", "passwordSecret": {"name": "bgp-auth"}
    }))]);
    assert!(c.objects.is_empty());
    assert_eq!(
        problems(&c),
        vec![Problem::Rule {
            message: schema::MSG_PASSWORD.into()
        }]
    );
    assert!(
        !findings(&c)
            .iter()
            .any(|f| matches!(f, Finding::ActionNeeded { .. })),
        "nothing to do for an object not written"
    );
    assert_eq!(exit_status(&c.report, false), 1);
}

#[test]
fn a_v1beta1_peer_reads_zero_timers_as_unset_and_gets_the_default_hold_time() {
    let c = run(vec![peer_v1(
        json!({"holdTime": "0s", "keepaliveTime": "0s"}),
    )]);
    let spec = the_peer(&c);
    assert_eq!(spec.hold_time, "90s");
    assert_eq!(spec.keepalive_time, None);
    let n = notes(&c);
    assert!(n.contains(&("spec.holdTime", &Note::V1beta1ZeroTimerIsUnset)));
    assert!(n.contains(&("spec.keepaliveTime", &Note::V1beta1ZeroTimerIsUnset)));
    assert!(n.contains(&(
        "spec.holdTime",
        &Note::HoldTimeDefault {
            hold_time: "90s".into()
        }
    )));
}

#[test]
fn a_v1beta2_zero_hold_time_is_kept_as_no_keepalives_with_a_note() {
    let c = run(vec![peer_v2(json!({"holdTime": "0s"}))]);
    assert_eq!(the_peer(&c).hold_time, "0s");
    assert_eq!(notes(&c), vec![("spec.holdTime", &Note::ZeroHoldTimeKept)]);
}

#[test]
fn a_peer_with_only_a_keepalive_gets_three_times_it_as_hold_time() {
    let c = run(vec![peer_v2(json!({"keepaliveTime": "40s"}))]);
    let spec = the_peer(&c);
    assert_eq!(spec.hold_time, "120s");
    assert_eq!(spec.keepalive_time.as_deref(), Some("40s"));
    assert_eq!(
        notes(&c),
        vec![(
            "spec.holdTime",
            &Note::HoldTimeFromKeepalive {
                hold_time: "120s".into()
            }
        )]
    );
}

#[test]
fn a_hold_time_without_keepalive_is_carried_over_alone() {
    let c = run(vec![peer_v2(json!({"holdTime": "3m"}))]);
    let spec = the_peer(&c);
    assert_eq!(spec.hold_time, "3m");
    assert_eq!(
        spec.keepalive_time, None,
        "a third of the hold time, in both"
    );
}

#[test]
fn a_duration_in_go_only_syntax_is_rewritten_with_a_note() {
    let c = run(vec![peer_v2(
        json!({"holdTime": "90000000us", "connectTime": "+5s"}),
    )]);
    let spec = the_peer(&c);
    assert_eq!(spec.hold_time, "90s");
    assert_eq!(spec.connect_time.as_deref(), Some("5s"));
    assert!(notes(&c).contains(&(
        "spec.holdTime",
        &Note::DurationRewritten {
            from: "90000000us".into(),
            to: "90s".into()
        }
    )));
}

#[test]
fn timers_ferrolb_refuses_keep_the_peer_from_being_written() {
    for (spec, path) in [
        (json!({"holdTime": "-90s"}), "spec.holdTime"),
        (json!({"holdTime": "2s"}), "spec.holdTime"),
        (
            json!({"holdTime": "30s", "keepaliveTime": "40s"}),
            "spec.keepaliveTime",
        ),
        (json!({"connectTime": "500ms"}), "spec.connectTime"),
        (json!({"keepaliveTime": "often"}), "spec.keepaliveTime"),
    ] {
        let c = run(vec![peer_v2(spec.clone())]);
        assert!(c.objects.is_empty(), "{spec}");
        let p = problems(&c);
        assert!(
            p.iter().any(|p| p.to_string().starts_with(path)),
            "{spec}: {p:?}"
        );
    }
}

#[test]
fn dynamic_asn_maps_to_ferrolbs_field_and_a_zero_peer_asn_is_unset() {
    let c = run(vec![peer_v2(
        json!({"peerASN": 0, "dynamicASN": "internal"}),
    )]);
    let spec = the_peer(&c);
    assert_eq!(spec.peer_asn, None);
    assert_eq!(spec.dynamic_asn, Some(DynamicAsn::Internal));
    let c = run(vec![peer_v2(
        json!({"peerASN": null, "dynamicASN": "external"}),
    )]);
    assert_eq!(the_peer(&c).dynamic_asn, Some(DynamicAsn::External));
}

#[test]
fn a_peer_with_both_or_neither_of_peer_asn_and_dynamic_asn_is_not_written() {
    for spec in [
        json!({"dynamicASN": "external"}),
        json!({"peerASN": null}),
        json!({"peerASN": 0, "dynamicASN": ""}),
    ] {
        let c = run(vec![peer_v2(spec.clone())]);
        assert_eq!(
            problems(&c),
            vec![Problem::Rule {
                message: schema::MSG_ASN.into()
            }],
            "{spec}"
        );
    }
    let c = run(vec![peer_v2(
        json!({"peerASN": null, "dynamicASN": "sometimes"}),
    )]);
    assert!(c.objects.is_empty());
}

#[test]
fn a_v1beta1_peer_needs_a_peer_asn() {
    let c = run(vec![peer_v1(json!({"peerASN": 0}))]);
    assert!(c.objects.is_empty());
    assert!(
        problems(&c)
            .iter()
            .any(|p| matches!(p, Problem::Required { path, .. } if path == "spec.peerASN"))
    );
}

#[test]
fn a_v1beta1_node_selector_becomes_a_label_selector() {
    let c = run(vec![peer_v1(json!({"nodeSelectors": [{
        "matchLabels": {"rack": "r1"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]
    }]}))]);
    let sel = &the_peer(&c).node_selectors[0];
    assert_eq!(sel.match_labels.as_ref().unwrap()["rack"], "r1");
    let req = &sel.match_expressions.as_ref().unwrap()[0];
    assert_eq!((req.key.as_str(), req.operator.as_str()), ("zone", "In"));
    assert_eq!(
        req.values.as_deref(),
        Some(&["a".to_string(), "b".to_string()][..])
    );
}

#[test]
fn peer_port_zero_or_unset_is_179_and_others_are_kept() {
    assert_eq!(
        the_peer(&run(vec![peer_v1(json!({"peerPort": 0}))])).peer_port,
        179
    );
    assert_eq!(the_peer(&run(vec![peer_v2(json!({}))])).peer_port, 179);
    assert_eq!(
        the_peer(&run(vec![peer_v2(json!({"peerPort": 1179}))])).peer_port,
        1179
    );
    let c = run(vec![peer_v2(json!({"peerPort": 70000}))]);
    assert!(c.objects.is_empty(), "beyond MetalLB's uint16");
}

#[test]
fn a_peer_without_my_asn_or_with_zero_is_not_written() {
    let c = run(vec![peer_v2(json!({"myASN": null}))]);
    assert!(
        problems(&c)
            .iter()
            .any(|p| matches!(p, Problem::Required { path, .. } if path == "spec.myASN"))
    );
    let c = run(vec![peer_v2(json!({"myASN": 0}))]);
    assert!(
        problems(&c)
            .iter()
            .any(|p| matches!(p, Problem::OutOfRange { path, .. } if path == "spec.myASN"))
    );
}

#[test]
fn addresses_ferrolbs_rules_refuse_keep_the_peer_from_being_written() {
    for (spec, message) in [
        (
            json!({"peerAddress": "router.example"}),
            schema::MSG_PEER_ADDRESS,
        ),
        (json!({"routerID": "2001:db8::1"}), schema::MSG_ROUTER_ID),
        (json!({"sourceAddress": "2001:db8::2"}), schema::MSG_FAMILY),
    ] {
        let c = run(vec![peer_v2(spec.clone())]);
        assert!(
            problems(&c).iter().any(|p| p.to_string().contains(message)),
            "{spec}: {:?}",
            problems(&c)
        );
    }
}

#[test]
fn a_copied_secret_resolves_its_action_needed_entry() {
    let mut c = run(vec![peer_v2(
        json!({"passwordSecret": {"name": "bgp-auth"}}),
    )]);
    let peer = c.objects[0].from.clone();
    c.report.push(report::Entry {
        source: "cluster".into(),
        object: Some(peer),
        finding: Finding::SecretCopied {
            name: "bgp-auth".into(),
            from_namespace: "metallb-system".into(),
            to_namespace: "ferrolb-system".into(),
        },
    });
    report::drop_done_actions(&mut c.report);
    assert!(
        !findings(&c)
            .iter()
            .any(|f| matches!(f, Finding::ActionNeeded { .. }))
    );
    assert_eq!(c.report.len(), 2, "the hold-time note and the copy stay");
}
