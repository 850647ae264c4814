use super::*;
use ferrolb_api::v1beta1::{Component, ConfigurationResult, ConfigurationStateStatus};
use serde_json::json;

fn service(value: serde_json::Value) -> Service {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_service_of_another_class_or_type_is_not_ours_and_says_whose_it_is() {
    let objects = Objects {
        services: vec![
            service(
                json!({"metadata": {"name": "theirs", "namespace": "default"},
                       "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}}),
            ),
            service(
                json!({"metadata": {"name": "inside", "namespace": "default"},
                       "spec": {"type": "NodePort"}}),
            ),
            service(
                json!({"metadata": {"name": "plain", "namespace": "default"},
                       "spec": {"type": "LoadBalancer"}}),
            ),
        ],
        ..Objects::default()
    };
    let settings = Settings::default();
    let theirs = explain_service(&objects, &settings, "default", "theirs");
    assert!(theirs.found && !theirs.handled);
    assert!(
        theirs
            .handling
            .starts_with("loadBalancerClass is example.com/lb; FerroLB handles ferrolb.io/ferrolb"),
        "{}",
        theirs.handling
    );
    let inside = explain_service(&objects, &settings, "default", "inside");
    assert!(
        inside.handling.starts_with("type is NodePort"),
        "{}",
        inside.handling
    );
    let plain = explain_service(&objects, &settings, "default", "plain");
    assert!(plain.handled);
    let unclassed = Settings {
        ignore_unclassed: true,
        ..Settings::default()
    };
    let plain = explain_service(&objects, &unclassed, "default", "plain");
    assert!(!plain.handled);
    assert!(
        plain.handling.contains("--ignore-unclassed"),
        "{}",
        plain.handling
    );
    let missing = explain_service(&objects, &settings, "default", "gone");
    assert!(!missing.found);
}

#[test]
fn a_handled_service_without_any_pool_is_told_to_add_one() {
    let objects = Objects {
        services: vec![service(
            json!({"metadata": {"name": "web", "namespace": "default"},
                   "spec": {"type": "LoadBalancer", "ipFamilies": ["IPv4"]}}),
        )],
        ..Objects::default()
    };
    let e = explain_service(&objects, &Settings::default(), "default", "web");
    let why = e.no_address.expect("a reason");
    assert_eq!(why.code, "NoPoolAdmitsService", "{}", why.message);
}

#[test]
fn addresses_a_speaker_cannot_answer_for_are_read_from_its_configuration_state() {
    let state = |node: &str, summary: &str| ConfigurationState {
        metadata: Default::default(),
        spec: Default::default(),
        status: Some(ConfigurationStateStatus {
            component: Some(Component::Speaker),
            node: Some(node.into()),
            result: ConfigurationResult::Invalid,
            error_summary: summary.into(),
            conditions: Vec::new(),
        }),
    };
    let objects = Objects {
        config_states: vec![
            state(
                "a",
                "Address 10.0.0.1: elected to answer for it over layer 2 on node `a`, which cannot \
             (x; y); another node answers instead; Address fd00::1: elected to answer for it; \
             Interface eth9: interface `eth9` does not exist on this node",
            ),
            state("b", "BGPPeer tor: no Established session"),
        ],
        ..Objects::default()
    };
    let unable = objects.unable();
    assert_eq!(
        unable,
        BTreeMap::from([(
            "a".to_string(),
            BTreeSet::from([
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ])
        )])
    );
}

#[test]
fn lists_read_as_words() {
    assert_eq!(words::list(Vec::new()), "");
    assert_eq!(words::list(["a".to_string()]), "a");
    assert_eq!(words::list(["a", "b", "c"].map(String::from)), "a, b and c");
}
