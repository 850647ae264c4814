//! FerroLB's CRDs as the API server applies them: every schema rule (types, ranges, patterns,
//! required fields, defaults) and every CEL rule refuses a bad object with a readable 422 and
//! accepts a good one. Runs against the test API server, or a real cluster with the CRDs
//! installed when `FERROLB_TEST_KUBECONFIG` is set.

use ferrolb_tests::apiserver::{ApiServerConfig, RawResponse, TestCluster};
use serde_json::{Value, json};

async fn cluster() -> (TestCluster, String) {
    let config = ApiServerConfig::default().with_crd_dir(ferrolb_api::crd::chart_crd_dir());
    let mut c = TestCluster::start(config).await;
    let ns = c.namespace("crd-rules").await;
    (c, ns)
}

async fn create(
    c: &TestCluster,
    ns: &str,
    plural: &str,
    kind: &str,
    name: &str,
    spec: Value,
) -> RawResponse {
    let body = json!({"apiVersion": "ferrolb.io/v1beta1", "kind": kind, "metadata": {"name": name}, "spec": spec});
    c.json(
        "POST",
        &format!("/apis/ferrolb.io/v1beta1/namespaces/{ns}/{plural}"),
        Some(body),
    )
    .await
}

/// Asserts a 422 whose message mentions `needle`.
fn refused(r: &RawResponse, needle: &str) {
    assert_eq!(r.status, 422, "{}", r.text);
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "message {message:?} lacks {needle:?}"
    );
}

fn accepted(r: &RawResponse) {
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn a_pool_needs_at_least_one_valid_address_entry() {
    let (c, ns) = cluster().await;
    let r = create(
        &c,
        &ns,
        "ipaddresspools",
        "IPAddressPool",
        "ok",
        json!({"addresses": ["10.99.0.0/24"]}),
    )
    .await;
    accepted(&r);
    assert_eq!(
        r.body["spec"]["autoAssign"],
        json!(true),
        "autoAssign defaults to true"
    );
    assert_eq!(r.body["spec"]["avoidBuggyIPs"], json!(false));
    refused(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "empty",
            json!({"addresses": []}),
        )
        .await,
        "spec.addresses",
    );
    refused(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "none",
            json!({}),
        )
        .await,
        "spec.addresses",
    );
    refused(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "reversed",
            json!({"addresses": ["10.99.0.9-10.99.0.1"]}),
        )
        .await,
        "start not after end",
    );
}

#[tokio::test]
async fn a_pool_ip_mode_is_vip_or_proxy_and_priority_is_not_negative() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "proxy",
            json!({"addresses": ["10.99.1.0/24"], "ipMode": "Proxy"}),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "bad-mode",
            json!({"addresses": ["10.99.2.0/24"], "ipMode": "DSR"}),
        )
        .await,
        "spec.ipMode",
    );
    refused(
        &create(
            &c,
            &ns,
            "ipaddresspools",
            "IPAddressPool",
            "bad-prio",
            json!({"addresses": ["10.99.3.0/24"], "serviceAllocation": {"priority": -1}}),
        )
        .await,
        "spec.serviceAllocation.priority",
    );
}

#[tokio::test]
async fn an_l2_advertisement_interface_name_fits_the_kernel_limit() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "l2advertisements",
            "L2Advertisement",
            "ok",
            json!({"interfaces": ["eth0"]}),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "l2advertisements",
            "L2Advertisement",
            "long",
            json!({"interfaces": ["a-very-long-interface"]}),
        )
        .await,
        "spec.interfaces",
    );
}

#[tokio::test]
async fn an_l2_advertisement_preference_weighs_1_to_100_and_needs_its_selector() {
    let (c, ns) = cluster().await;
    let l2 = |name: &'static str, preferred: Value| {
        let c = &c;
        let ns = &ns;
        async move {
            create(
                c,
                ns,
                "l2advertisements",
                "L2Advertisement",
                name,
                json!({ "preferredNodeSelectors": preferred }),
            )
            .await
        }
    };
    accepted(
        &l2(
            "ok",
            json!([
                {"weight": 1, "preference": {"matchLabels": {"zone": "a"}}},
                {"weight": 100, "preference": {}}
            ]),
        )
        .await,
    );
    refused(
        &l2("zero", json!([{"weight": 0, "preference": {}}])).await,
        "spec.preferredNodeSelectors[0].weight",
    );
    refused(
        &l2("heavy", json!([{"weight": 101, "preference": {}}])).await,
        "spec.preferredNodeSelectors[0].weight",
    );
    refused(
        &l2("no-weight", json!([{"preference": {}}])).await,
        "spec.preferredNodeSelectors[0].weight",
    );
    refused(
        &l2("no-preference", json!([{"weight": 5}])).await,
        "spec.preferredNodeSelectors[0].preference",
    );
}

#[tokio::test]
async fn aggregation_lengths_stay_within_the_family() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "ok",
            json!({"aggregationLength": 24, "aggregationLengthV6": 64}),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "v4",
            json!({"aggregationLength": 33}),
        )
        .await,
        "spec.aggregationLength",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "v6",
            json!({"aggregationLengthV6": 129}),
        )
        .await,
        "spec.aggregationLengthV6",
    );
}

#[tokio::test]
async fn service_selectors_are_label_selectors_on_both_advertisements() {
    let (c, ns) = cluster().await;
    let selectors = json!([
        {"matchLabels": {"tier": "public"}},
        {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}
    ]);
    for (plural, kind) in [
        ("l2advertisements", "L2Advertisement"),
        ("bgpadvertisements", "BGPAdvertisement"),
    ] {
        let r = create(
            &c,
            &ns,
            plural,
            kind,
            "selective",
            json!({"serviceSelectors": selectors}),
        )
        .await;
        accepted(&r);
        assert_eq!(r.body["spec"]["serviceSelectors"], selectors, "{kind}");
        refused(
            &create(
                &c,
                &ns,
                plural,
                kind,
                "not-a-selector",
                json!({"serviceSelectors": [{"matchLabels": "tier=public"}]}),
            )
            .await,
            "spec.serviceSelectors[0].matchLabels",
        );
    }
}

#[tokio::test]
async fn bgp_service_selectors_only_go_with_host_routes() {
    let (c, ns) = cluster().await;
    let selectors = json!([{"matchLabels": {"tier": "public"}}]);
    accepted(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "host-routes",
            json!({"serviceSelectors": selectors, "aggregationLength": 32, "aggregationLengthV6": 128}),
        )
        .await,
    );
    accepted(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "aggregate-without-selectors",
            json!({"serviceSelectors": [], "aggregationLength": 24}),
        )
        .await,
    );
    for (name, lengths) in [
        ("v4-aggregate", json!({"aggregationLength": 24})),
        ("v6-aggregate", json!({"aggregationLengthV6": 64})),
    ] {
        let mut spec = lengths;
        spec["serviceSelectors"] = selectors.clone();
        refused(
            &create(&c, &ns, "bgpadvertisements", "BGPAdvertisement", name, spec).await,
            "serviceSelectors need host routes",
        );
    }
}

#[tokio::test]
async fn advertisement_communities_are_values_or_alias_names() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "ok",
            json!({"communities": ["65000:1", "large:1:2:3", "no-export"]}),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "syntax",
            json!({"communities": ["65000:1:2"]}),
        )
        .await,
        "spec.communities",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgpadvertisements",
            "BGPAdvertisement",
            "range",
            json!({"communities": ["70000:1"]}),
        )
        .await,
        "up to 65535",
    );
}

fn peer(extra: Value) -> Value {
    let mut spec = json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "10.99.0.1"});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

#[tokio::test]
async fn a_peer_gets_defaults_and_needs_its_required_fields() {
    let (c, ns) = cluster().await;
    let r = create(&c, &ns, "bgppeers", "BGPPeer", "ok", peer(json!({}))).await;
    accepted(&r);
    assert_eq!(r.body["spec"]["holdTime"], json!("90s"));
    assert_eq!(r.body["spec"]["peerPort"], json!(179));
    for missing in ["myASN", "peerASN"] {
        let mut spec = peer(json!({}));
        spec.as_object_mut().unwrap().remove(missing);
        refused(
            &create(&c, &ns, "bgppeers", "BGPPeer", "missing", spec).await,
            &format!("spec.{missing}"),
        );
    }
}

#[tokio::test]
async fn peer_numbers_stay_in_range() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "four-octet",
            peer(json!({"myASN": 4200000000u32, "peerPort": 1179})),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "asn0",
            peer(json!({"myASN": 0})),
        )
        .await,
        "spec.myASN",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "port0",
            peer(json!({"peerPort": 0})),
        )
        .await,
        "spec.peerPort",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "pw",
            peer(json!({"password": "x".repeat(81)})),
        )
        .await,
        "spec.password",
    );
}

#[tokio::test]
async fn peer_cel_rules_are_enforced_by_the_api_server() {
    let (c, ns) = cluster().await;
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "hold",
            peer(json!({"holdTime": "2s"})),
        )
        .await,
        "at least 3s",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "ka",
            peer(json!({"holdTime": "9s", "keepaliveTime": "10s"})),
        )
        .await,
        "keepaliveTime must not be above holdTime",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "pw2",
            peer(json!({"password": "a", "passwordSecret": {"name": "s"}})),
        )
        .await,
        "not both",
    );
}

#[tokio::test]
async fn a_peer_has_either_a_peer_asn_or_a_dynamic_asn_of_internal_or_external() {
    let (c, ns) = cluster().await;
    for kind in ["internal", "external"] {
        let mut spec = peer(json!({"dynamicASN": kind}));
        spec.as_object_mut().unwrap().remove("peerASN");
        accepted(&create(&c, &ns, "bgppeers", "BGPPeer", kind, spec).await);
    }
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "both",
            peer(json!({"dynamicASN": "external"})),
        )
        .await,
        "set peerASN, or dynamicASN",
    );
    let mut other = peer(json!({"dynamicASN": "sideways"}));
    other.as_object_mut().unwrap().remove("peerASN");
    refused(
        &create(&c, &ns, "bgppeers", "BGPPeer", "other", other).await,
        "spec.dynamicASN",
    );
}

#[tokio::test]
async fn a_peer_role_is_one_of_rfc_9234s_five_and_strict_role_needs_one() {
    let (c, ns) = cluster().await;
    for role in ["provider", "customer", "peer", "rs-server", "rs-client"] {
        let r = create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            role,
            peer(json!({"role": role, "strictRole": true})),
        )
        .await;
        accepted(&r);
        assert_eq!(r.body["spec"]["role"], json!(role));
    }
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "transit",
            peer(json!({"role": "transit"})),
        )
        .await,
        "spec.role",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "strict-alone",
            peer(json!({"strictRole": true})),
        )
        .await,
        "strictRole needs role",
    );
    accepted(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "not-strict",
            peer(json!({"strictRole": false})),
        )
        .await,
    );
}

#[tokio::test]
async fn announcing_all_nodes_needs_a_peer_address_not_an_unnumbered_interface() {
    let (c, ns) = cluster().await;
    let r = create(
        &c,
        &ns,
        "bgppeers",
        "BGPPeer",
        "all-nodes",
        peer(json!({"announceAllNodes": true})),
    )
    .await;
    accepted(&r);
    assert_eq!(r.body["spec"]["announceAllNodes"], json!(true));
    let unnumbered = json!({"myASN": 64512, "peerASN": 64513, "interface": "eth1",
                           "announceAllNodes": true});
    refused(
        &create(&c, &ns, "bgppeers", "BGPPeer", "unnumbered", unnumbered).await,
        "announceAllNodes cannot be set with interface",
    );
}

#[tokio::test]
async fn a_peer_vrf_is_a_linux_interface_name() {
    let (c, ns) = cluster().await;
    for (name, vrf) in [
        ("red", "red"),
        ("longest", "vrf-0123456789a"),
        ("dotted", "eth0.100"),
    ] {
        let r = create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            name,
            peer(json!({"vrf": vrf})),
        )
        .await;
        accepted(&r);
        assert_eq!(r.body["spec"]["vrf"], json!(vrf), "{}", r.text);
    }
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "empty",
            peer(json!({"vrf": ""})),
        )
        .await,
        "spec.vrf",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "long",
            peer(json!({"vrf": "vrf-0123456789ab"})),
        )
        .await,
        "spec.vrf",
    );
    for (name, vrf) in [
        ("slash", "red/blue"),
        ("colon", "red:1"),
        ("space", "red blue"),
        ("tab", "red\tb"),
        ("dot", "."),
        ("dotdot", ".."),
    ] {
        refused(
            &create(
                &c,
                &ns,
                "bgppeers",
                "BGPPeer",
                name,
                peer(json!({"vrf": vrf})),
            )
            .await,
            "vrf is a Linux interface name",
        );
    }
}

#[tokio::test]
async fn a_peer_has_either_a_peer_address_or_an_interface() {
    let (c, ns) = cluster().await;
    let unnumbered = |extra: Value| {
        let mut spec = peer(json!({"interface": "eth1"}));
        spec.as_object_mut().unwrap().remove("peerAddress");
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let r = create(
        &c,
        &ns,
        "bgppeers",
        "BGPPeer",
        "unnumbered",
        unnumbered(json!({})),
    )
    .await;
    accepted(&r);
    assert_eq!(r.body["spec"]["interface"], json!("eth1"));
    assert!(r.body["spec"].get("peerAddress").is_none(), "{}", r.text);
    let mut neither = peer(json!({}));
    neither.as_object_mut().unwrap().remove("peerAddress");
    refused(
        &create(&c, &ns, "bgppeers", "BGPPeer", "neither", neither).await,
        "set peerAddress, or interface (BGP unnumbered), exactly one of them",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "both",
            peer(json!({"interface": "eth1"})),
        )
        .await,
        "set peerAddress, or interface (BGP unnumbered), exactly one of them",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "source",
            unnumbered(json!({"sourceAddress": "10.0.0.1"})),
        )
        .await,
        "sourceAddress cannot be set with interface",
    );
    for bad in ["", "a-name-of-16-chr", "eth/1", "eth 1", ".", ".."] {
        refused(
            &create(
                &c,
                &ns,
                "bgppeers",
                "BGPPeer",
                "badif",
                unnumbered(json!({"interface": bad})),
            )
            .await,
            "interface is a Linux interface name",
        );
    }
    accepted(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "longest",
            unnumbered(json!({"interface": "a-name-of-15ch."})),
        )
        .await,
    );
}

#[tokio::test]
async fn community_aliases_have_a_name_and_a_value() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "communities",
            "Community",
            "ok",
            json!({"communities": [{"name": "gold", "value": "65000:100"}]}),
        )
        .await,
    );
    refused(
        &create(
            &c,
            &ns,
            "communities",
            "Community",
            "name",
            json!({"communities": [{"name": "Gold!", "value": "65000:100"}]}),
        )
        .await,
        "name",
    );
    refused(
        &create(
            &c,
            &ns,
            "communities",
            "Community",
            "value",
            json!({"communities": [{"name": "gold", "value": "gold"}]}),
        )
        .await,
        "value",
    );
}

#[tokio::test]
async fn bfd_profile_timers_stay_within_metallbs_ranges() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "bfdprofiles",
            "BFDProfile",
            "ok",
            json!({"receiveInterval": 300, "transmitInterval": 300, "detectMultiplier": 3,
                   "passiveMode": true, "minimumTtl": 254}),
        )
        .await,
    );
    accepted(&create(&c, &ns, "bfdprofiles", "BFDProfile", "empty", json!({})).await);
    for (name, spec, needle) in [
        ("rx", json!({"receiveInterval": 5}), "receiveInterval"),
        ("tx", json!({"transmitInterval": 60001}), "transmitInterval"),
        ("mult", json!({"detectMultiplier": 1}), "detectMultiplier"),
        ("ttl", json!({"minimumTtl": 255}), "minimumTtl"),
    ] {
        refused(
            &create(&c, &ns, "bfdprofiles", "BFDProfile", name, spec).await,
            needle,
        );
    }
}

#[tokio::test]
async fn a_peer_local_asn_is_a_four_octet_as_number() {
    let (c, ns) = cluster().await;
    let r = create(
        &c,
        &ns,
        "bgppeers",
        "BGPPeer",
        "local",
        peer(json!({"localASN": 4200000000u32})),
    )
    .await;
    accepted(&r);
    assert_eq!(r.body["spec"]["localASN"], json!(4200000000u32));
    let mut dynamic = peer(json!({"localASN": 64600, "dynamicASN": "internal"}));
    dynamic.as_object_mut().unwrap().remove("peerASN");
    accepted(&create(&c, &ns, "bgppeers", "BGPPeer", "local-dynamic", dynamic).await);
    for (name, asn) in [("zero", json!(0)), ("big", json!(4294967296u64))] {
        refused(
            &create(
                &c,
                &ns,
                "bgppeers",
                "BGPPeer",
                name,
                peer(json!({"localASN": asn})),
            )
            .await,
            "spec.localASN",
        );
    }
}

#[tokio::test]
async fn a_peer_carries_both_families_unless_told_otherwise_and_disable_mp_cannot_contradict_dual_stack()
 {
    let (c, ns) = cluster().await;
    let r = create(&c, &ns, "bgppeers", "BGPPeer", "default", peer(json!({}))).await;
    accepted(&r);
    assert!(
        r.body["spec"].get("dualStackAddressFamily").is_none()
            && r.body["spec"].get("disableMP").is_none(),
        "no default is written: {}",
        r.body["spec"]
    );
    for (name, extra) in [
        ("single", json!({"dualStackAddressFamily": false})),
        ("dual", json!({"dualStackAddressFamily": true})),
        ("no-mp", json!({"disableMP": true})),
        (
            "no-mp-single",
            json!({"disableMP": true, "dualStackAddressFamily": false}),
        ),
        (
            "mp-dual",
            json!({"disableMP": false, "dualStackAddressFamily": true}),
        ),
        (
            "mp-single",
            json!({"disableMP": false, "dualStackAddressFamily": false}),
        ),
        (
            "null-mp",
            json!({"disableMP": null, "dualStackAddressFamily": true}),
        ),
    ] {
        accepted(&create(&c, &ns, "bgppeers", "BGPPeer", name, peer(extra)).await);
    }
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "contradiction",
            peer(json!({"disableMP": true, "dualStackAddressFamily": true})),
        )
        .await,
        "disableMP: true (one family) contradicts dualStackAddressFamily: true",
    );
    refused(
        &create(
            &c,
            &ns,
            "bgppeers",
            "BGPPeer",
            "not-bool",
            peer(json!({"dualStackAddressFamily": "yes"})),
        )
        .await,
        "spec.dualStackAddressFamily",
    );
}

/// Merge patches the status subresource of `plural` `name` in `ns` with `body`.
async fn merge_patch_status(
    c: &TestCluster,
    ns: &str,
    plural: &str,
    name: &str,
    body: &Value,
) -> RawResponse {
    c.raw(
        "PATCH",
        &format!("/apis/ferrolb.io/v1beta1/namespaces/{ns}/{plural}/{name}/status"),
        "application/merge-patch+json",
        Some(&body.to_string()),
        &[],
    )
    .await
}

/// Merge patches the status of ConfigurationState `name` in `ns`.
async fn patch_state_status(c: &TestCluster, ns: &str, name: &str, status: Value) -> RawResponse {
    merge_patch_status(
        c,
        ns,
        "configurationstates",
        name,
        &json!({ "status": status }),
    )
    .await
}

#[tokio::test]
async fn a_configuration_state_takes_a_result_and_a_summary_that_fit_its_rules() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "configurationstates",
            "ConfigurationState",
            "controller",
            json!({}),
        )
        .await,
    );
    let ok = patch_state_status(
        &c,
        &ns,
        "controller",
        json!({"component": "controller", "result": "Invalid",
               "errorSummary": "IPAddressPool b: overlaps pool `a`"}),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.body["status"]["result"], "Invalid");
    let valid = patch_state_status(
        &c,
        &ns,
        "controller",
        json!({"result": "Valid", "errorSummary": null}),
    )
    .await;
    assert_eq!(valid.status, 200, "{}", valid.text);
    assert!(valid.body["status"].get("errorSummary").is_none());
    for (status, needle) in [
        (json!({"result": "Broken"}), "status.result"),
        (
            json!({"result": "Valid", "errorSummary": "BGPPeer x: down"}),
            "errorSummary must be empty when result is Valid",
        ),
        (
            json!({"component": "speaker", "result": "Valid"}),
            "a speaker's ConfigurationState names its node",
        ),
        (json!({"component": "router"}), "status.component"),
        (
            json!({"result": "Invalid", "errorSummary": "x".repeat(4097)}),
            "status.errorSummary",
        ),
    ] {
        refused(
            &patch_state_status(&c, &ns, "controller", status).await,
            needle,
        );
    }
    let speaker = create(
        &c,
        &ns,
        "configurationstates",
        "ConfigurationState",
        "speaker-node-a",
        json!({}),
    )
    .await;
    accepted(&speaker);
    let r = patch_state_status(
        &c,
        &ns,
        "speaker-node-a",
        json!({"component": "speaker", "node": "node-a", "result": "Valid"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_configuration_state_prints_its_component_node_result_and_summary() {
    let (c, ns) = cluster().await;
    accepted(
        &create(
            &c,
            &ns,
            "configurationstates",
            "ConfigurationState",
            "speaker-node-a",
            json!({}),
        )
        .await,
    );
    let r = patch_state_status(
        &c,
        &ns,
        "speaker-node-a",
        json!({"component": "speaker", "node": "node-a", "result": "Invalid",
               "errorSummary": "Interface eth9: interface `eth9` does not exist on this node"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let table = c
        .raw(
            "GET",
            &format!("/apis/ferrolb.io/v1beta1/namespaces/{ns}/configurationstates"),
            "application/json",
            None,
            &[(
                "Accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )],
        )
        .await;
    assert_eq!(table.status, 200, "{}", table.text);
    let names: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .expect("a Table")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["Name", "Component", "Node", "Result", "ErrorSummary", "Age"]
    );
    let cells = &table.body["rows"][0]["cells"];
    assert_eq!(cells[0], "speaker-node-a");
    assert_eq!(cells[1], "speaker");
    assert_eq!(cells[2], "node-a");
    assert_eq!(cells[3], "Invalid");
    assert_eq!(
        cells[4],
        "Interface eth9: interface `eth9` does not exist on this node"
    );
}

#[tokio::test]
async fn a_session_state_patched_as_the_speaker_does_loses_what_a_session_that_went_down_no_longer_has()
 {
    use ferrolb_api::patch::StatusSchema;
    use ferrolb_api::v1beta1::BGPSessionStateStatus;
    static SCHEMA: StatusSchema = StatusSchema::of::<BGPSessionStateStatus>();
    let (c, ns) = cluster().await;
    let name = "tor.node-a";
    accepted(
        &create(
            &c,
            &ns,
            "bgpsessionstates",
            "BGPSessionState",
            name,
            json!({}),
        )
        .await,
    );
    let patch = |status: BGPSessionStateStatus| {
        let (c, ns) = (&c, &ns);
        async move {
            merge_patch_status(c, ns, "bgpsessionstates", name, &SCHEMA.replacing(&status)).await
        }
    };
    let up: BGPSessionStateStatus = serde_json::from_value(json!({
        "node": "node-a", "peer": "tor", "peerAddress": "192.0.2.1:179",
        "bgpState": "Established", "bfdState": "Up", "establishedTime": "2026-12-01T00:00:00Z",
        "establishedCount": 1, "ipv4Prefixes": 2, "holdTime": "90s", "keepaliveTime": "30s",
        "capabilities": ["4-octet-as"], "bfdDetectionTime": "900ms",
    }))
    .unwrap();
    let r = patch(up).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"]["holdTime"], "90s", "{}", r.text);
    let down = BGPSessionStateStatus {
        node: "node-a".into(),
        peer: "tor".into(),
        peer_address: "192.0.2.1:179".into(),
        bgp_state: "Active".into(),
        established_count: 1,
        last_error: Some("TCP connection to 192.0.2.1:179: connection refused".into()),
        ..Default::default()
    };
    let r = patch(down).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let status = r.body["status"].as_object().unwrap();
    assert_eq!(status["bgpState"], "Active");
    assert_eq!(status["ipv4Prefixes"], 0);
    for gone in [
        "bfdState",
        "establishedTime",
        "holdTime",
        "keepaliveTime",
        "capabilities",
        "bfdDetectionTime",
    ] {
        assert!(!status.contains_key(gone), "{gone} stayed: {}", r.text);
    }
    assert!(status["lastError"].as_str().unwrap().contains("refused"));
}
