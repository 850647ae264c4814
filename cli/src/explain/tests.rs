use super::*;
use ferrolb_api::v1beta1::{Component, ConfigurationResult, ConfigurationStateStatus};
use ferrolb_speaker::planner::{NotAnnounced, NotEligible};
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

#[test]
fn endpoint_reasons_name_the_family_of_the_address() {
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    let local = words::not_eligible(
        NotEligible::NoLocalEndpoint,
        ip("10.0.0.1"),
        Some("p"),
        "node-a",
        "L2Advertisement",
    );
    assert_eq!(
        local.message,
        "layer 2: externalTrafficPolicy is Local and no ready IPv4 endpoint of the Service runs on node-a"
    );
    let none = words::not_eligible(
        NotEligible::NoReadyEndpoints,
        ip("fd00::1"),
        None,
        "node-a",
        "BGPAdvertisement",
    );
    assert_eq!(
        none.message,
        "BGP: the Service has no ready IPv6 endpoint on any node"
    );
    let nobody = words::not_announced(
        NotAnnounced::NoReadyEndpoints,
        "fd00::1".parse().unwrap(),
        None,
    );
    assert_eq!(
        nobody.message,
        "layer 2: no Service on the address has a ready IPv6 endpoint"
    );
}

#[test]
fn a_dual_stack_local_services_addresses_are_explained_with_the_endpoints_of_their_own_family() {
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    };
    let speaker = |node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("speaker-{node}"), "namespace": "ferrolb-system"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    };
    let slice = |name: &str, address_type: &str, address: &str, node: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": address_type,
            "endpoints": [{"addresses": [address], "nodeName": node,
                           "conditions": {"ready": true}}],
        }))
        .unwrap()
    };
    let objects = Objects {
        services: vec![service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                     "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.10"}, {"ip": "fd00:99::10"}]}},
        }))],
        pools: vec![
            serde_json::from_value(json!({
                "metadata": {"name": "lab", "namespace": "ferrolb-system",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"addresses": ["10.99.0.0/24", "fd00:99::/120"]},
            }))
            .unwrap(),
        ],
        l2_advertisements: vec![
            serde_json::from_value(json!({
                "metadata": {"name": "all", "namespace": "ferrolb-system"},
                "spec": {},
            }))
            .unwrap(),
        ],
        bgp_advertisements: vec![
            serde_json::from_value(json!({
                "metadata": {"name": "all", "namespace": "ferrolb-system"},
                "spec": {},
            }))
            .unwrap(),
        ],
        peers: vec![
            serde_json::from_value(json!({
                "metadata": {"name": "tor", "namespace": "ferrolb-system"},
                "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "192.0.2.1"},
            }))
            .unwrap(),
        ],
        nodes: vec![node("node-a"), node("node-c")],
        speaker_pods: vec![speaker("node-a"), speaker("node-c")],
        slices: vec![
            slice("web-v4", "IPv4", "10.244.0.1", "node-a"),
            slice("web-v6", "IPv6", "fd00:244::1", "node-c"),
        ],
        ..Objects::default()
    };
    let e = explain_service(&objects, &Settings::default(), "default", "web");
    let reasons = |ip: &str, node: &str| -> String {
        let address = e.addresses.iter().find(|a| a.ip == ip).expect(ip);
        let verdict = address.nodes.iter().find(|n| n.node == node).expect(node);
        verdict
            .reasons
            .iter()
            .map(|r| format!("{}: {}", r.code, r.message))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    // The BGP reason is the address's own, though the Service's other address goes out from
    // the node.
    assert_eq!(
        reasons("10.99.0.10", "node-c"),
        "NoLocalEndpoint: layer 2: externalTrafficPolicy is Local and no ready IPv4 endpoint of \
         the Service runs on node-c | NoLocalEndpoint: BGP: externalTrafficPolicy is Local and no \
         ready IPv4 endpoint of the Service runs on node-c"
    );
    assert_eq!(
        reasons("fd00:99::10", "node-a"),
        "NoLocalEndpoint: layer 2: externalTrafficPolicy is Local and no ready IPv6 endpoint of \
         the Service runs on node-a | NoLocalEndpoint: BGP: externalTrafficPolicy is Local and no \
         ready IPv6 endpoint of the Service runs on node-a"
    );
    // Each address's own node is elected and announces (neither has reported it: no status
    // objects here).
    for (ip, node) in [("10.99.0.10", "node-a"), ("fd00:99::10", "node-c")] {
        let r = reasons(ip, node);
        assert!(
            r.starts_with("NotReportedYet: ") && r.contains("NoSession: "),
            "{r}"
        );
    }
}
