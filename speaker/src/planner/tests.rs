use super::*;
use crate::cluster::convert::{self, l2_advertisement_info, node_info, pool_infos, service_info};
use crate::l2::election;
use ferrolb_api::validate::AddressRange;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        ..Default::default()
    }
}

/// A ready endpoint on `node` from an `IPv4` EndpointSlice.
fn ready_on(node: &str) -> EndpointInfo {
    ready_of(AddressType::Ipv4, node)
}

/// A ready endpoint on `node` from an EndpointSlice of `address_type`.
fn ready_of(address_type: AddressType, node: &str) -> EndpointInfo {
    EndpointInfo {
        node_name: Some(node.into()),
        ready: Some(true),
        serving: None,
        terminating: None,
        address_type,
    }
}

/// A ready endpoint of each family on `node`.
fn dual_stack_on(node: &str) -> [EndpointInfo; 2] {
    [
        ready_of(AddressType::Ipv4, node),
        ready_of(AddressType::Ipv6, node),
    ]
}

fn svc(name: &str, ips: &[&str], local: bool, endpoints: Vec<EndpointInfo>) -> ServiceInfo {
    ServiceInfo {
        key: ServiceKey::new("default", name),
        ingress: ips.iter().map(|s| ip(s)).collect(),
        local_traffic_policy: local,
        endpoints,
        labels: Default::default(),
    }
}

/// Three live nodes, one pool for 10.99.0.0/24 and fd00:99::/64, one advertisement for all pools.
fn cluster(this: &str, services: Vec<ServiceInfo>) -> Snapshot {
    Snapshot {
        services,
        nodes: NODES
            .iter()
            .map(|n| {
                (
                    (*n).to_string(),
                    NodeInfo {
                        name: (*n).into(),
                        labels: labels(&[("kubernetes.io/hostname", n)]),
                        network_unavailable: false,
                        ..Default::default()
                    },
                )
            })
            .collect(),
        pools: vec![PoolInfo {
            name: "blue".into(),
            labels: labels(&[("color", "blue")]),
            ranges: vec![
                AddressRange::parse("10.99.0.0/24").unwrap(),
                AddressRange::parse("fd00:99::/64").unwrap(),
            ],
        }],
        l2_advertisements: vec![L2AdvertisementInfo {
            name: "all".into(),
            ..Default::default()
        }],
        live_speakers: NODES.iter().map(|n| (*n).to_string()).collect(),
        this_node: this.into(),
        unable: BTreeMap::new(),
        hold_down: Default::default(),
    }
}

fn web() -> ServiceInfo {
    svc(
        "web",
        &["10.99.0.100", "fd00:99::100"],
        false,
        dual_stack_on("node-a").into(),
    )
}

#[test]
fn a_cluster_policy_address_is_owned_by_the_elected_node_and_only_by_it() {
    let s = cluster("node-a", vec![web()]);
    for addr in ["10.99.0.100", "fd00:99::100"] {
        let want = election::owner(ip(addr), NODES).unwrap();
        let mut owners = Vec::new();
        for n in NODES {
            let plan = plan_l2(&Snapshot {
                this_node: n.into(),
                ..s.clone()
            });
            assert_eq!(plan.addresses[&ip(addr)].owner.as_deref(), Ok(want));
            if plan.owned.contains_key(&ip(addr)) {
                owners.push(n);
            }
        }
        assert_eq!(owners, vec![want], "{addr}");
    }
}

#[test]
fn an_address_outside_every_ready_pool_is_not_announced() {
    let s = cluster(
        "node-a",
        vec![svc("x", &["10.99.1.1"], false, vec![ready_on("node-a")])],
    );
    let plan = plan_l2(&s);
    assert_eq!(
        plan.addresses[&ip("10.99.1.1")].owner,
        Err(NotAnnounced::NotInAnyPool)
    );
    assert!(plan.owned.is_empty());
}

#[test]
fn a_pool_without_advertisement_is_not_announced() {
    let mut s = cluster("node-a", vec![web()]);
    s.l2_advertisements[0].pools = vec!["red".into()];
    let plan = plan_l2(&s);
    assert_eq!(
        plan.addresses[&ip("10.99.0.100")].owner,
        Err(NotAnnounced::NoMatchingAdvertisement)
    );
}

#[test]
fn advertisements_select_pools_by_name_or_by_label() {
    for adv in [
        L2AdvertisementInfo {
            pools: vec!["blue".into()],
            ..Default::default()
        },
        L2AdvertisementInfo {
            pool_selectors: vec![selector(&[("color", "blue")])],
            ..Default::default()
        },
    ] {
        let mut s = cluster("node-a", vec![web()]);
        s.l2_advertisements = vec![adv];
        assert!(plan_l2(&s).addresses[&ip("10.99.0.100")].owner.is_ok());
    }
}

#[test]
fn a_service_without_usable_endpoints_is_not_announced() {
    let not_ready = EndpointInfo {
        node_name: Some("node-a".into()),
        ready: Some(false),
        serving: Some(true),
        terminating: Some(true),
        address_type: AddressType::Ipv4,
    };
    let s = cluster(
        "node-a",
        vec![svc("x", &["10.99.0.7"], false, vec![not_ready])],
    );
    assert_eq!(
        plan_l2(&s).addresses[&ip("10.99.0.7")].owner,
        Err(NotAnnounced::NoReadyEndpoints)
    );
}

#[test]
fn a_serving_endpoint_that_is_not_terminating_counts_as_usable() {
    let serving = EndpointInfo {
        node_name: Some("node-b".into()),
        ready: Some(false),
        serving: Some(true),
        terminating: Some(false),
        address_type: AddressType::Ipv4,
    };
    let s = cluster(
        "node-b",
        vec![svc("x", &["10.99.0.7"], true, vec![serving])],
    );
    assert_eq!(
        plan_l2(&s).addresses[&ip("10.99.0.7")].owner.as_deref(),
        Ok("node-b")
    );
}

/// Makes `node` ineligible with `how`, and checks the reason and that the address moves away.
fn assert_node_loses(how: impl Fn(&mut Snapshot, &str), reason: NotEligible) {
    for addr in ["10.99.0.100", "fd00:99::100"] {
        let mut s = cluster("node-a", vec![web()]);
        let owner = plan_l2(&s).addresses[&ip(addr)].owner.clone().unwrap();
        how(&mut s, &owner);
        let plan = plan_l2(&s);
        let a = &plan.addresses[&ip(addr)];
        assert_eq!(a.not_eligible.get(&owner), Some(&reason), "{addr}");
        assert_ne!(a.owner.as_deref(), Ok(owner.as_str()));
        assert!(a.owner.is_ok(), "another node takes it");
    }
}

#[test]
fn the_exclusion_label_makes_a_node_ineligible_whatever_its_value() {
    assert_node_loses(
        |s, n| {
            s.nodes.get_mut(n).unwrap().labels.insert(
                ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB.into(),
                String::new(),
            );
        },
        NotEligible::Excluded,
    );
}

#[test]
fn network_unavailable_makes_a_node_ineligible() {
    assert_node_loses(
        |s, n| s.nodes.get_mut(n).unwrap().network_unavailable = true,
        NotEligible::NetworkUnavailable,
    );
}

#[test]
fn node_selectors_that_miss_a_node_make_it_ineligible() {
    assert_node_loses(
        |s, n| {
            let others: Vec<&str> = NODES.iter().copied().filter(|x| *x != n).collect();
            s.l2_advertisements[0].node_selectors = others
                .iter()
                .map(|o| selector(&[("kubernetes.io/hostname", o)]))
                .collect();
        },
        NotEligible::NodeSelectorMismatch,
    );
}

#[test]
fn a_dead_speaker_loses_its_addresses_and_only_them() {
    let many: Vec<ServiceInfo> = (1..60)
        .map(|i| {
            svc(
                &format!("s{i}"),
                &[&format!("10.99.0.{i}")],
                false,
                vec![ready_on("node-c")],
            )
        })
        .collect();
    let s = cluster("node-a", many);
    let before = plan_l2(&s);
    let mut dead = s.clone();
    dead.live_speakers.remove("node-b");
    let after = plan_l2(&dead);
    for (addr, b) in &before.addresses {
        let a = &after.addresses[addr];
        if b.owner.as_deref() == Ok("node-b") {
            assert_eq!(a.owner.as_deref(), Ok(b.candidates[1].as_str()));
        } else {
            assert_eq!(a.owner, b.owner);
        }
        assert_eq!(
            a.not_eligible.get("node-b"),
            Some(&NotEligible::SpeakerNotLive)
        );
    }
}

#[test]
fn with_local_policy_the_owner_always_has_a_local_endpoint_and_follows_the_endpoints() {
    for home in NODES {
        let s = cluster(
            "node-a",
            vec![svc("l", &["10.99.0.50"], true, vec![ready_on(home)])],
        );
        let a = &plan_l2(&s).addresses[&ip("10.99.0.50")];
        assert_eq!(a.owner.as_deref(), Ok(home));
        for other in NODES.iter().filter(|n| **n != home) {
            assert_eq!(
                a.not_eligible.get(*other),
                Some(&NotEligible::NoLocalEndpoint)
            );
        }
    }
}

#[test]
fn endpoints_elsewhere_do_not_make_a_local_policy_node_eligible() {
    let eps = vec![
        ready_on("node-b"),
        EndpointInfo {
            node_name: None,
            ..ready_on("node-a")
        },
    ];
    let s = cluster("node-a", vec![svc("l", &["10.99.0.50"], true, eps)]);
    let a = &plan_l2(&s).addresses[&ip("10.99.0.50")];
    assert_eq!(a.candidates, vec!["node-b".to_string()]);
}

#[test]
fn a_shared_address_needs_a_node_every_service_behind_it_can_use() {
    let cluster_svc = svc("c", &["10.99.0.60"], false, vec![ready_on("node-a")]);
    let local_svc = svc("l", &["10.99.0.60"], true, vec![ready_on("node-c")]);
    let s = cluster("node-a", vec![cluster_svc, local_svc]);
    let a = &plan_l2(&s).addresses[&ip("10.99.0.60")];
    assert_eq!(a.services.len(), 2);
    assert_eq!(a.owner.as_deref(), Ok("node-c"));
}

#[test]
fn a_local_services_ipv4_address_goes_only_to_nodes_with_a_ready_ipv4_endpoint() {
    let eps = vec![
        ready_of(AddressType::Ipv4, "node-a"),
        ready_of(AddressType::Ipv6, "node-c"),
    ];
    let s = cluster(
        "node-c",
        vec![svc("l", &["10.99.0.50", "fd00:99::50"], true, eps)],
    );
    let plan = plan_l2(&s);
    let v4 = &plan.addresses[&ip("10.99.0.50")];
    assert_eq!(v4.candidates, ["node-a"]);
    assert_eq!(
        v4.not_eligible.get("node-c"),
        Some(&NotEligible::NoLocalEndpoint),
        "an IPv6 endpoint does not serve the IPv4 address"
    );
    let v6 = &plan.addresses[&ip("fd00:99::50")];
    assert_eq!(v6.candidates, ["node-c"]);
    assert_eq!(
        v6.not_eligible.get("node-a"),
        Some(&NotEligible::NoLocalEndpoint)
    );
    let owned: Vec<IpAddr> = plan.owned.keys().copied().collect();
    assert_eq!(owned, [ip("fd00:99::50")]);
}

#[test]
fn an_address_of_a_family_without_endpoints_is_not_announced() {
    // Only IPv6 endpoints: kube-proxy has no rule for the IPv4 address, whatever the policy.
    for local in [false, true] {
        let eps = vec![ready_of(AddressType::Ipv6, "node-b")];
        let s = cluster(
            "node-b",
            vec![svc("x", &["10.99.0.70", "fd00:99::70"], local, eps)],
        );
        let plan = plan_l2(&s);
        assert_eq!(
            plan.addresses[&ip("10.99.0.70")].owner,
            Err(NotAnnounced::NoReadyEndpoints),
            "local={local}"
        );
        assert!(
            plan.addresses[&ip("fd00:99::70")].owner.is_ok(),
            "local={local}"
        );
    }
}

#[test]
fn endpoints_of_an_fqdn_slice_serve_no_address() {
    let eps = vec![ready_of(AddressType::Other, "node-a")];
    let s = cluster(
        "node-a",
        vec![svc("x", &["10.99.0.71", "fd00:99::71"], false, eps)],
    );
    let plan = plan_l2(&s);
    for addr in ["10.99.0.71", "fd00:99::71"] {
        assert_eq!(
            plan.addresses[&ip(addr)].owner,
            Err(NotAnnounced::NoReadyEndpoints),
            "{addr}"
        );
    }
}

#[test]
fn a_shared_address_needs_a_node_with_an_endpoint_of_its_family_for_every_local_service() {
    // Both Services have an endpoint on node-a, but of the other family: only node-b runs an
    // IPv4 endpoint of each.
    let dual = svc(
        "dual",
        &["10.99.0.80", "fd00:99::80"],
        true,
        vec![
            ready_of(AddressType::Ipv4, "node-b"),
            ready_of(AddressType::Ipv6, "node-a"),
        ],
    );
    let single = svc(
        "single",
        &["10.99.0.80"],
        true,
        vec![
            ready_of(AddressType::Ipv4, "node-b"),
            ready_of(AddressType::Ipv4, "node-c"),
            ready_of(AddressType::Ipv6, "node-a"),
        ],
    );
    let plan = plan_l2(&cluster("node-a", vec![dual, single]));
    let a = &plan.addresses[&ip("10.99.0.80")];
    assert_eq!(a.candidates, ["node-b"]);
    assert_eq!(
        a.not_eligible.get("node-a"),
        Some(&NotEligible::NoLocalEndpoint)
    );
    assert_eq!(
        plan.addresses[&ip("fd00:99::80")].owner.as_deref(),
        Ok("node-a")
    );
}

#[test]
#[cfg(target_pointer_width = "64")]
fn an_endpoint_is_no_larger_for_knowing_its_family() {
    // The speaker keeps the endpoints of every Service it announces: the family fits in the
    // padding after the three conditions (24 bytes before it too).
    assert_eq!(std::mem::size_of::<EndpointInfo>(), 24);
}

#[test]
fn the_owner_answers_on_the_union_of_its_advertisements_interfaces() {
    let mut s = cluster("node-a", vec![web()]);
    s.l2_advertisements = vec![
        L2AdvertisementInfo {
            interfaces: vec!["eth1".into()],
            ..Default::default()
        },
        L2AdvertisementInfo {
            interfaces: vec!["eth2".into()],
            ..Default::default()
        },
        L2AdvertisementInfo {
            node_selectors: vec![selector(&[("kubernetes.io/hostname", "nowhere")])],
            ..Default::default()
        },
    ];
    let a = &plan_l2(&s).addresses[&ip("10.99.0.100")];
    let want: BTreeSet<String> = ["eth1".into(), "eth2".into()].into();
    assert_eq!(a.interfaces, Interfaces::Named(want));
    s.l2_advertisements.push(L2AdvertisementInfo::default());
    assert_eq!(
        plan_l2(&s).addresses[&ip("10.99.0.100")].interfaces,
        Interfaces::BySubnet
    );
}

#[test]
fn every_node_computes_a_partition_of_the_announced_addresses() {
    let services: Vec<ServiceInfo> = (1..40)
        .map(|i| {
            svc(
                &format!("s{i}"),
                &[&format!("10.99.0.{i}"), &format!("fd00:99::{i:x}")],
                i % 3 == 0,
                [
                    dual_stack_on(NODES[i % 3]),
                    dual_stack_on(NODES[(i + 1) % 3]),
                ]
                .concat(),
            )
        })
        .collect();
    let base = cluster("", services);
    let mut seen: BTreeMap<IpAddr, Vec<&str>> = BTreeMap::new();
    for n in NODES {
        let plan = plan_l2(&Snapshot {
            this_node: n.into(),
            ..base.clone()
        });
        for addr in plan.owned.keys() {
            seen.entry(*addr).or_default().push(n);
        }
    }
    assert_eq!(seen.len(), 78);
    assert!(seen.values().all(|v| v.len() == 1));
}

// --- conversions from API objects ---

#[test]
fn a_service_merges_the_endpoints_of_all_its_slices_and_ignores_others() {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.100"}, {"ip": "fd00:99::100"}, {"hostname": "x"}]}}
    }))
    .unwrap();
    let slice = |name: &str, ns: &str, svc: &str, node: &str, ready: bool| {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.1"], "nodeName": node, "conditions": {"ready": ready}}]
        }))
        .unwrap()
    };
    let slices = vec![
        slice("web-1", "shop", "web", "node-a", true),
        slice("web-2", "shop", "web", "node-b", false),
        slice("api-1", "shop", "api", "node-c", true),
        slice("web-x", "other", "web", "node-c", true),
    ];
    let info = service_info(
        &svc,
        &slices,
        ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS,
        false,
    )
    .unwrap();
    assert_eq!(info.key, ServiceKey::new("shop", "web"));
    assert_eq!(info.ingress, vec![ip("10.99.0.100"), ip("fd00:99::100")]);
    assert!(info.local_traffic_policy);
    let nodes: Vec<_> = info
        .endpoints
        .iter()
        .map(|e| (e.node_name.as_deref().unwrap().to_string(), e.usable()))
        .collect();
    assert_eq!(
        nodes,
        vec![("node-a".into(), true), ("node-b".into(), false)]
    );
}

/// An EndpointSlice `name` of `shop/web` of `address_type` with one ready endpoint on `node`.
fn slice_of(name: &str, address_type: &str, address: &str, node: &str) -> EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": address_type,
        "endpoints": [{"addresses": [address], "nodeName": node, "conditions": {"ready": true}}]
    }))
    .unwrap()
}

#[test]
fn an_endpoint_takes_the_family_of_its_slices_address_type() {
    for (address_type, address, want) in [
        ("IPv4", "10.1.0.1", AddressType::Ipv4),
        ("IPv6", "fd00:1::1", AddressType::Ipv6),
        ("FQDN", "backend.example.com", AddressType::Other),
        ("IPv5", "?", AddressType::Other),
    ] {
        let slice = slice_of("web-1", address_type, address, "node-a");
        let eps = convert::endpoints(&slice, &mut |n| n.into());
        assert_eq!(eps.len(), 1);
        assert_eq!(eps[0].address_type, want, "{address_type}");
    }
}

#[test]
fn a_dual_stack_services_addresses_each_follow_the_slices_of_their_family() {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local"},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.100"}, {"ip": "fd00:99::100"}]}}
    }))
    .unwrap();
    let slices = vec![
        slice_of("web-v4", "IPv4", "10.1.0.1", "node-a"),
        slice_of("web-v6", "IPv6", "fd00:1::1", "node-c"),
        slice_of("web-fqdn", "FQDN", "backend.example.com", "node-b"),
    ];
    let info = service_info(
        &svc,
        &slices,
        ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS,
        false,
    )
    .unwrap();
    assert_eq!(info.endpoints.len(), 3);
    let plan = plan_l2(&cluster("node-a", vec![info]));
    assert_eq!(plan.addresses[&ip("10.99.0.100")].candidates, ["node-a"]);
    assert_eq!(plan.addresses[&ip("fd00:99::100")].candidates, ["node-c"]);
}

#[test]
fn services_of_another_class_or_type_are_not_planned() {
    let mk = |spec: serde_json::Value| -> k8s_openapi::api::core::v1::Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "d"},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}
        }))
        .unwrap()
    };
    let class = ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS;
    assert!(
        service_info(
            &mk(serde_json::json!({"type": "LoadBalancer"})),
            &[],
            class,
            false
        )
        .is_some()
    );
    assert!(
        service_info(
            &mk(serde_json::json!({"type": "LoadBalancer", "loadBalancerClass": class})),
            &[],
            class,
            false
        )
        .is_some()
    );
    assert!(
        service_info(
            &mk(serde_json::json!({"type": "LoadBalancer", "loadBalancerClass": "other.io/lb"})),
            &[],
            class,
            false
        )
        .is_none()
    );
    assert!(
        service_info(
            &mk(serde_json::json!({"type": "ClusterIP"})),
            &[],
            class,
            false
        )
        .is_none()
    );
}

#[test]
fn the_speaker_skips_what_the_controller_skips_unclassed_with_the_flag_and_services_being_deleted()
{
    let class = ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS;
    let unclassed: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "d"},
            "spec": {"type": "LoadBalancer"},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}
        }))
        .unwrap();
    assert!(service_info(&unclassed, &[], class, true).is_none());
    let mut deleting = unclassed.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
        ));
    assert!(service_info(&deleting, &[], class, false).is_none());
}

#[test]
fn a_node_condition_network_unavailable_true_is_read() {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "status": {"conditions": [{"type": "NetworkUnavailable", "status": "True"}, {"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    let info = node_info(&node);
    assert!(info.network_unavailable);
    assert_eq!(info.labels.get("zone").map(String::as_str), Some("a"));
}

#[test]
fn overlapping_pools_are_left_out_and_advertisements_keep_their_fields() {
    let pool = |name: &str, ts: &str, addrs: &[&str]| -> ferrolb_api::v1beta1::IPAddressPool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": name, "namespace": "ferrolb", "creationTimestamp": ts},
            "spec": {"addresses": addrs}
        }))
        .unwrap()
    };
    let pools = pool_infos(&[
        pool("old", "2025-01-01T00:00:00Z", &["10.99.0.0/24"]),
        pool("new", "2025-06-01T00:00:00Z", &["10.99.0.128/25"]),
    ]);
    assert_eq!(
        pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        vec!["old"]
    );
    assert!(pools[0].contains(ip("10.99.0.255")));
    assert!(!pools[0].contains(ip("10.99.1.0")));
    let adv: ferrolb_api::v1beta1::L2Advertisement = serde_json::from_value(serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": {"name": "a", "namespace": "ferrolb"},
        "spec": {"ipAddressPools": ["old"], "interfaces": ["eth0"],
                 "nodeSelectors": [{"matchLabels": {"zone": "a"}}]}
    }))
    .unwrap();
    let info = l2_advertisement_info(&adv);
    assert_eq!(info.pools, vec!["old".to_string()]);
    assert_eq!(info.interfaces, vec!["eth0".to_string()]);
    assert_eq!(info.node_selectors.len(), 1);
}

// --- serviceSelectors ---

fn labelled(mut s: ServiceInfo, pairs: &[(&str, &str)]) -> ServiceInfo {
    s.labels = ServiceLabels::new(&labels(pairs));
    s
}

fn for_services(pairs: &[(&str, &str)]) -> L2AdvertisementInfo {
    L2AdvertisementInfo {
        name: "selective".into(),
        service_selectors: pairs.iter().map(|p| selector(&[*p])).collect(),
        ..Default::default()
    }
}

#[test]
fn an_advertisement_with_service_selectors_announces_only_the_services_they_select() {
    let public = labelled(
        svc("public", &["10.99.0.1"], false, vec![ready_on("node-a")]),
        &[("tier", "public")],
    );
    let internal = labelled(
        svc("internal", &["10.99.0.2"], false, vec![ready_on("node-a")]),
        &[("tier", "internal")],
    );
    let unlabelled = svc("plain", &["10.99.0.3"], false, vec![ready_on("node-a")]);
    let mut s = cluster("node-a", vec![public, internal, unlabelled]);
    s.l2_advertisements = vec![for_services(&[("tier", "public")])];
    let plan = plan_l2(&s);
    assert!(plan.addresses[&ip("10.99.0.1")].owner.is_ok());
    for other in ["10.99.0.2", "10.99.0.3"] {
        assert_eq!(
            plan.addresses[&ip(other)].owner,
            Err(NotAnnounced::NoServiceSelected),
            "{other}"
        );
    }
    // Any of the selectors will do; an advertisement without selectors takes every Service.
    s.l2_advertisements = vec![for_services(&[("tier", "public"), ("tier", "internal")])];
    let plan = plan_l2(&s);
    assert!(plan.addresses[&ip("10.99.0.2")].owner.is_ok());
    assert_eq!(
        plan.addresses[&ip("10.99.0.3")].owner,
        Err(NotAnnounced::NoServiceSelected)
    );
    s.l2_advertisements.push(L2AdvertisementInfo::default());
    assert!(plan_l2(&s).addresses.values().all(|a| a.owner.is_ok()));
}

#[test]
fn service_selectors_read_match_expressions_as_kubernetes_does() {
    let without_tier = svc("plain", &["10.99.0.3"], false, vec![ready_on("node-a")]);
    let internal = labelled(
        svc("internal", &["10.99.0.2"], false, vec![ready_on("node-a")]),
        &[("tier", "internal")],
    );
    let mut s = cluster("node-a", vec![without_tier, internal]);
    s.l2_advertisements = vec![L2AdvertisementInfo {
        service_selectors: vec![LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["internal".into()]),
                },
            ]),
            ..Default::default()
        }],
        ..Default::default()
    }];
    let plan = plan_l2(&s);
    assert!(
        plan.addresses[&ip("10.99.0.3")].owner.is_ok(),
        "no tier label at all"
    );
    assert_eq!(
        plan.addresses[&ip("10.99.0.2")].owner,
        Err(NotAnnounced::NoServiceSelected)
    );
}

#[test]
fn a_shared_address_is_announced_when_one_of_its_services_is_selected() {
    // The selected Service decides: the other one's local traffic policy and endpoints
    // (on node-b only) take no part.
    let selected = labelled(
        svc("selected", &["10.99.0.60"], true, vec![ready_on("node-c")]),
        &[("tier", "public")],
    );
    let other = svc("other", &["10.99.0.60"], true, vec![ready_on("node-b")]);
    let mut s = cluster("node-c", vec![selected, other]);
    s.l2_advertisements = vec![for_services(&[("tier", "public")])];
    let plan = plan_l2(&s);
    let a = &plan.addresses[&ip("10.99.0.60")];
    assert_eq!(a.services.len(), 2, "both Services hold the address");
    assert_eq!(a.owner.as_deref(), Ok("node-c"));
    assert_eq!(a.not_selected, [ServiceKey::new("default", "other")]);
    assert!(plan.owned.contains_key(&ip("10.99.0.60")));
}

#[test]
fn a_selected_service_without_endpoints_is_not_announced_through_an_unselected_one() {
    let selected = labelled(
        svc("selected", &["10.99.0.61"], false, vec![]),
        &[("tier", "public")],
    );
    let other = svc("other", &["10.99.0.61"], false, vec![ready_on("node-b")]);
    let mut s = cluster("node-a", vec![selected, other]);
    s.l2_advertisements = vec![for_services(&[("tier", "public")])];
    assert_eq!(
        plan_l2(&s).addresses[&ip("10.99.0.61")].owner,
        Err(NotAnnounced::NoReadyEndpoints)
    );
}

#[test]
fn services_sharing_an_address_through_different_advertisements_get_their_union() {
    // `public` answers from node-a on eth1, `internal` from node-b on eth2: the shared address
    // has one owner among both, answering on what the advertisements selecting it name.
    let public = labelled(
        svc("public", &["10.99.0.62"], false, vec![ready_on("node-a")]),
        &[("tier", "public")],
    );
    let internal = labelled(
        svc("internal", &["10.99.0.62"], false, vec![ready_on("node-b")]),
        &[("tier", "internal")],
    );
    let on = |node: &str, tier: &str, interface: &str| L2AdvertisementInfo {
        node_selectors: vec![selector(&[("kubernetes.io/hostname", node)])],
        interfaces: vec![interface.into()],
        ..for_services(&[("tier", tier)])
    };
    let mut s = cluster("node-a", vec![public.clone(), internal.clone()]);
    s.l2_advertisements = vec![
        on("node-a", "public", "eth1"),
        on("node-b", "internal", "eth2"),
    ];
    let a = &plan_l2(&s).addresses[&ip("10.99.0.62")];
    let mut candidates = a.candidates.clone();
    candidates.sort();
    assert_eq!(candidates, ["node-a", "node-b"]);
    assert_eq!(
        a.not_eligible.get("node-c"),
        Some(&NotEligible::NodeSelectorMismatch)
    );
    let owner = a.owner.clone().unwrap();
    let want = if owner == "node-a" { "eth1" } else { "eth2" };
    assert_eq!(a.interfaces, Interfaces::Named([want.to_string()].into()));
    // With `internal` gone, only `public`'s node and interface remain.
    s.services = vec![public];
    let a = &plan_l2(&s).addresses[&ip("10.99.0.62")];
    assert_eq!(a.candidates, ["node-a"]);
    assert_eq!(a.interfaces, Interfaces::Named(["eth1".to_string()].into()));
}

#[test]
fn service_labels_are_packed_and_read_back() {
    let l = ServiceLabels::new(&labels(&[
        ("b", "2"),
        ("a", ""),
        ("app.kubernetes.io/name", "web"),
    ]));
    assert_eq!(
        l.iter().collect::<Vec<_>>(),
        [("a", ""), ("app.kubernetes.io/name", "web"), ("b", "2")]
    );
    assert_eq!(l.get("a"), Some(""));
    assert_eq!(l.get("c"), None);
    assert!(ServiceLabels::new(&labels(&[])).is_empty());
    let odd = ServiceLabels::new(&labels(&[("x\0y", "1"), ("ok", "v\0")]));
    assert!(odd.is_empty(), "labels the API server refuses are left out");
}

#[test]
fn a_service_and_the_advertisements_keep_what_service_selectors_read() {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop", "labels": {"tier": "public"}},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.100"}]}}
    }))
    .unwrap();
    let info = service_info(
        &svc,
        &[],
        ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS,
        false,
    )
    .unwrap();
    assert_eq!(info.labels.get("tier"), Some("public"));
    let adv: ferrolb_api::v1beta1::L2Advertisement = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "namespace": "ferrolb"},
        "spec": {"serviceSelectors": [{"matchLabels": {"tier": "public"}}]}
    }))
    .unwrap();
    let adv = l2_advertisement_info(&adv);
    assert!(adv.selects_service(&info));
    let bgp: ferrolb_api::v1beta1::BGPAdvertisement = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "b", "namespace": "ferrolb"},
        "spec": {"serviceSelectors": [{"matchLabels": {"tier": "internal"}}]}
    }))
    .unwrap();
    let bgp = convert::bgp_advertisements(&[bgp], &[]);
    assert_eq!(bgp[0].service_selectors.len(), 1);
}
