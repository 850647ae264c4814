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
    for missing in ["myASN", "peerASN", "peerAddress"] {
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

/// Merge patches the status of ConfigurationState `name` in `ns`.
async fn patch_state_status(c: &TestCluster, ns: &str, name: &str, status: Value) -> RawResponse {
    c.raw(
        "PATCH",
        &format!("/apis/ferrolb.io/v1beta1/namespaces/{ns}/configurationstates/{name}/status"),
        "application/merge-patch+json",
        Some(&json!({ "status": status }).to_string()),
        &[],
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
