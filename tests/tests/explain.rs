//! `ferrolb explain` and `ferrolb status` say why, in words: each situation is made to happen
//! on the API server (the test double, or a real kube-apiserver with `FERROLB_APISERVER=real`)
//! with the real `ferrolb-controller` running, and the words are checked.
//!
//! Speakers do not run here: what they write (`ServiceL2Status`, `ServiceBGPStatus`,
//! `BGPSessionState`) is written by the test as a speaker writes it, and their Pods are objects
//! with the status a kubelet writes. The lab suite (`e2e_lab`) runs `ferrolb explain` against
//! real speakers and a real router.

mod explain_support;

use explain_support::*;
use ferrolb_cli::explain::{self, Settings, text};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_which_pool_was_chosen_and_why_each_node_does_or_does_not_answer_over_layer_2()
{
    let env = Env::start().await;
    let c = &env.client;
    pool(
        c,
        "gold",
        &["10.99.40.0/28"],
        json!({"priority": 1, "namespaces": ["team-a"]}),
    )
    .await;
    pool(c, "silver", &["10.99.41.0/28"], json!({"priority": 2})).await;
    create(
        c,
        "ferrolb.io/v1beta1",
        "L2Advertisement",
        json!({"metadata": {"name": "near", "namespace": NS},
               "spec": {"ipAddressPools": ["silver"],
                        "nodeSelectors": [{"matchLabels": {"zone": "near"}}]}}),
    )
    .await;
    let near = json!({"zone": "near"});
    node(c, "node-a", near.clone(), false).await;
    node(
        c,
        "node-b",
        json!({"zone": "near", ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB: ""}),
        false,
    )
    .await;
    node(c, "node-c", near.clone(), true).await;
    node(c, "node-d", near.clone(), false).await;
    node(c, "node-e", json!({"zone": "far"}), false).await;
    node(c, "node-f", near.clone(), false).await;
    node(c, "node-g", near.clone(), false).await;
    for n in ["node-a", "node-b", "node-c", "node-d", "node-e", "node-g"] {
        speaker_pod(c, n).await;
    }
    service(
        c,
        "default",
        "web",
        json!({"externalTrafficPolicy": "Local"}),
    )
    .await;
    endpoints(
        c,
        "default",
        "web",
        &["node-a", "node-e", "node-f", "node-g"],
    )
    .await;

    let e = explained(&env, "default", "web", "an address from silver", |e| {
        (!e.addresses.is_empty()).then(|| e.clone())
    })
    .await;
    eprintln!("{}", text::service(&e));
    assert!(e.handled, "{}", e.handling);
    let pool = e.pool.as_ref().expect("a pool");
    assert_eq!(
        (pool.name.as_str(), pool.how.as_str()),
        ("silver", "Automatic")
    );
    assert_eq!(pool.passed_over.len(), 1, "{pool:?}");
    assert_eq!(pool.passed_over[0].pool, "gold");
    assert_eq!(pool.passed_over[0].reason.code, "PoolDoesNotAdmitService");
    let a = &e.addresses[0];
    assert_eq!(a.ip_mode.as_deref(), Some("VIP"));
    assert_eq!(a.pool.as_deref(), Some("silver"));
    let words = |node: &str| reason_of(&e, node);
    assert!(words("node-b").starts_with("Excluded: layer 2: the node carries the label node.kubernetes.io/exclude-from-external-load-balancers"), "{}", words("node-b"));
    assert!(
        words("node-c").starts_with(
            "NetworkUnavailable: layer 2: the node's NetworkUnavailable condition is True"
        ),
        "{}",
        words("node-c")
    );
    assert!(words("node-d").starts_with("NoLocalEndpoint: layer 2: externalTrafficPolicy is Local and no ready IPv4 endpoint of the Service runs on node-d"), "{}", words("node-d"));
    assert!(
        words("node-e").starts_with(
            "NodeSelectorMismatch: layer 2: no L2Advertisement of pool `silver` selects this node"
        ),
        "{}",
        words("node-e")
    );
    assert!(
        words("node-f")
            .starts_with("SpeakerNotLive: layer 2: no ready FerroLB speaker Pod runs on node-f"),
        "{}",
        words("node-f")
    );
    // node-a and node-g may both answer: one is elected, the other stands by.
    let (owner, standby) = if words("node-a").starts_with("Standby") {
        ("node-g", "node-a")
    } else {
        ("node-a", "node-g")
    };
    assert!(
        words(standby).starts_with(&format!("Standby: standing by: {owner} answers for")),
        "{}",
        words(standby)
    );
    assert!(
        words(owner).starts_with("NotReportedYet"),
        "{}",
        words(owner)
    );

    // The owner's speaker reports that it answers.
    create(
        c,
        "ferrolb.io/v1beta1",
        "ServiceL2Status",
        json!({"metadata": {"name": format!("web-{owner}"), "namespace": NS,
                            "labels": {ferrolb_api::names::STATUS_SERVICE_NAME_LABEL: "web",
                                       ferrolb_api::names::STATUS_SERVICE_NAMESPACE_LABEL: "default",
                                       ferrolb_api::names::STATUS_NODE_LABEL: owner}},
               "spec": {},
               "status": {"node": owner, "serviceName": "web", "serviceNamespace": "default",
                          "addresses": [a.ip.clone()], "interfaces": [{"name": "eth0"}]}}),
    )
    .await;
    let e = env.explain_service("default", "web").await;
    let text = text::service(&e);
    assert!(
        text.contains(&format!(
            "    {owner}: announces: layer 2: answers ARP on eth0"
        )),
        "{text}"
    );
    // The binary prints the same, and JSON for scripts.
    let (status, out) = env.ferrolb(&["explain", "-n", "default", "web"]);
    assert_eq!((status, out.as_str()), (0, text.as_str()));
    let (status, out) = env.ferrolb(&["explain", "service", "web", "-o", "json"]);
    assert_eq!(status, 0);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["pool"]["name"], "silver");
    assert_eq!(json["addresses"][0]["ipMode"], "VIP");
    // The owner's speaker then finds its interface gone: it stops answering (its
    // ServiceL2Status goes), says so in its ConfigurationState (and to the others over gossip),
    // and the node that stood by is elected.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ferrolb.io", "v1beta1", "ServiceL2Status"),
        "servicel2statuses",
    );
    Api::<DynamicObject>::namespaced_with(c.clone(), NS, &ar)
        .delete(&format!("web-{owner}"), &Default::default())
        .await
        .expect("the ServiceL2Status is deleted");
    create(
        c,
        "ferrolb.io/v1beta1",
        "ConfigurationState",
        json!({"metadata": {"name": ferrolb_api::v1beta1::speaker_object_name(owner),
                            "namespace": NS},
               "spec": {},
               "status": {"component": "speaker", "node": owner, "result": "Invalid",
                          "errorSummary": format!(
                              "Address {}: elected to answer for it over layer 2 on node `{owner}`, \
                               which cannot (no usable interface; the speaker's log and CannotAnswer \
                               Event say why); another node answers instead; Interface eth0: \
                               interface `eth0` does not exist on this node", a.ip)}}),
    )
    .await;
    let e = env.explain_service("default", "web").await;
    assert!(
        reason_of(&e, owner).starts_with(
            "CannotAnswer: layer 2: the node's speaker reported that it has no usable interface for the address; it reports: Address"
        ),
        "{}",
        reason_of(&e, owner)
    );
    assert!(reason_of(&e, owner).contains("interface `eth0` does not exist on this node"));
    assert!(
        reason_of(&e, standby).starts_with("NotReportedYet"),
        "{}",
        reason_of(&e, standby)
    );
    let (status, out) = env.ferrolb(&["explain", "-n", "default", "nothing-here"]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("no Service default/nothing-here"), "{out}");

    let node_text = text::node(&explain::explain_node(
        &env.objects().await,
        &Settings::default(),
        "node-b",
    ));
    assert!(
        node_text.contains("May not announce: any advertisement: the node carries the label")
            || node_text.contains("May not announce:"),
        "{node_text}"
    );
    assert!(node_text.contains("Excluded"), "{node_text}");
    let node_text = text::node(&explain::explain_node(
        &env.objects().await,
        &Settings::default(),
        "node-e",
    ));
    assert!(
        node_text.contains("Not selected by L2Advertisement(s): near"),
        "{node_text}"
    );
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_why_a_service_has_no_address_in_the_controllers_own_words() {
    let env = Env::start().await;
    let c = &env.client;
    pool(c, "tiny", &["10.99.42.1/32"], json!({})).await;
    pool(
        c,
        "team-only",
        &["10.99.43.0/28"],
        json!({"namespaceSelectors": [{"matchLabels": {"team": "a"}}]}),
    )
    .await;
    service(
        c,
        "default",
        "first",
        json!({"annotations": {"ferrolb.io/allow-shared-ip": "k1"}}),
    )
    .await;
    explained(&env, "default", "first", "an address for first", |e| {
        (!e.addresses.is_empty()).then_some(())
    })
    .await;
    service(c, "default", "second", json!({})).await;
    service(
        c,
        "default",
        "lost",
        json!({"annotations": {"ferrolb.io/address-pool": "nope"}}),
    )
    .await;
    service(
        c,
        "team-b",
        "outsider",
        json!({"annotations": {"ferrolb.io/address-pool": "team-only"}}),
    )
    .await;
    service(
        c,
        "default",
        "squatter",
        json!({"annotations": {"ferrolb.io/loadBalancerIPs": "10.99.42.1",
                               "ferrolb.io/allow-shared-ip": "k1"}}),
    )
    .await;
    service(
        c,
        "default",
        "taker",
        json!({"annotations": {"ferrolb.io/loadBalancerIPs": "10.99.42.1"}}),
    )
    .await;
    service(
        c,
        "default",
        "sixes",
        json!({"ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack",
               "annotations": {"ferrolb.io/address-pool": "tiny"}}),
    )
    .await;
    service(
        c,
        "default",
        "theirs",
        json!({"loadBalancerClass": "example.com/other"}),
    )
    .await;
    service(c, "default", "internal", json!({"type": "ClusterIP"})).await;

    let expect = [
        (
            "default",
            "second",
            "PoolExhausted",
            "no free IPv4 address in pool(s) `tiny`",
        ),
        (
            "default",
            "lost",
            "UnknownPool",
            "IPAddressPool `nope` does not exist",
        ),
        (
            "team-b",
            "outsider",
            "PoolDoesNotAdmitService",
            "IPAddressPool `team-only` does not admit this Service",
        ),
        ("default", "squatter", "SharingPortConflict", "80/TCP"),
        (
            "default",
            "taker",
            "RequestedIpInUse",
            "requested address 10.99.42.1 is in use by default/first",
        ),
        ("default", "sixes", "FamilyNotAvailable", "IPv6"),
    ];
    for (ns, name, code, words) in expect {
        let reason = explained(&env, ns, name, code, |e| e.no_address.clone()).await;
        eprintln!("{ns}/{name}: {} ({})", reason.message, reason.code);
        assert_eq!(reason.code, code, "{ns}/{name}: {}", reason.message);
        assert!(
            reason.message.contains(words),
            "{ns}/{name}: {}",
            reason.message
        );
        // The controller says the same in its Event.
        let e = explained(&env, ns, name, "the controller's Event", |e| {
            e.events
                .iter()
                .any(|ev| ev.contains("AllocationFailed"))
                .then(|| e.clone())
        })
        .await;
        let event = e
            .events
            .iter()
            .rev()
            .find(|ev| ev.contains("AllocationFailed"))
            .unwrap();
        assert!(
            event.ends_with(&reason.message),
            "{ns}/{name}: the Event `{event}` and explain's `{}` differ",
            reason.message
        );
    }
    let theirs = env.explain_service("default", "theirs").await;
    assert!(!theirs.handled);
    assert!(
        theirs
            .handling
            .contains("loadBalancerClass is example.com/other"),
        "{}",
        theirs.handling
    );
    let internal = env.explain_service("default", "internal").await;
    assert!(!internal.handled);
    assert!(
        internal
            .handling
            .starts_with("type is ClusterIP, not LoadBalancer"),
        "{}",
        internal.handling
    );

    // `ferrolb status` lists them, and the pools' use.
    let (status, out) = env.ferrolb(&["status"]);
    assert_eq!(status, 0, "{out}");
    eprintln!("{out}");
    assert!(out.contains("tiny: IPv4 1 used, 0 free"), "{out}");
    assert!(out.contains("Services without an address: 6"), "{out}");
    for (ns, name, code, _) in expect {
        assert!(
            out.contains(&format!("  {ns}/{name}: ")),
            "{ns}/{name}: {out}"
        );
        assert!(out.contains(&format!("({code})")), "{code}: {out}");
    }
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_which_router_holds_the_route_and_why_a_node_does_not_announce_over_bgp() {
    let env = Env::start().await;
    let c = &env.client;
    pool(c, "routed", &["10.99.44.0/28"], json!({})).await;
    create(
        c,
        "ferrolb.io/v1beta1",
        "BGPAdvertisement",
        json!({"metadata": {"name": "routed", "namespace": NS},
               "spec": {"ipAddressPools": ["routed"]}}),
    )
    .await;
    create(
        c,
        "ferrolb.io/v1beta1",
        "BGPPeer",
        json!({"metadata": {"name": "tor", "namespace": NS},
               "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "10.0.0.1",
                        "nodeSelectors": [{"matchLabels": {"rack": "r1"}}]}}),
    )
    .await;
    for n in ["node-a", "node-b", "node-c", "node-d"] {
        let rack = if n == "node-d" { "r2" } else { "r1" };
        node(c, n, json!({"rack": rack}), false).await;
        speaker_pod(c, n).await;
    }
    // The sessions as each node's speaker reports them.
    for (n, state, bfd, error) in [
        ("node-a", "Established", None, None),
        (
            "node-b",
            "Active",
            None,
            Some("connect to 10.0.0.1:179: connection refused"),
        ),
        ("node-c", "Established", Some("Down"), None),
    ] {
        let mut status = json!({"node": n, "peer": "tor", "peerAddress": "10.0.0.1:179",
                                "bgpState": state, "establishedCount": 1,
                                "ipv4Prefixes": 1, "ipv6Prefixes": 0});
        if let Some(b) = bfd {
            status["bfdState"] = json!(b);
        }
        if let Some(e) = error {
            status["lastError"] = json!(e);
        }
        create(
            c,
            "ferrolb.io/v1beta1",
            "BGPSessionState",
            json!({"metadata": {"name": format!("{n}-tor"), "namespace": NS,
                                "labels": {ferrolb_api::names::STATUS_NODE_LABEL: n,
                                           ferrolb_api::names::STATUS_PEER_LABEL: "tor"}},
                   "spec": {}, "status": status}),
        )
        .await;
    }
    service(c, "default", "api", json!({})).await;
    endpoints(c, "default", "api", &["node-a"]).await;
    create(
        c,
        "ferrolb.io/v1beta1",
        "ServiceBGPStatus",
        json!({"metadata": {"name": "api-node-a", "namespace": NS,
                            "labels": {ferrolb_api::names::STATUS_SERVICE_NAME_LABEL: "api",
                                       ferrolb_api::names::STATUS_SERVICE_NAMESPACE_LABEL: "default",
                                       ferrolb_api::names::STATUS_NODE_LABEL: "node-a"}},
               "spec": {},
               "status": {"node": "node-a", "serviceName": "api", "serviceNamespace": "default",
                          "peers": ["tor"]}}),
    )
    .await;
    let e = explained(&env, "default", "api", "an address", |e| {
        (!e.addresses.is_empty()).then(|| e.clone())
    })
    .await;
    let text = text::service(&e);
    eprintln!("{text}");
    assert!(
        text.contains("    node-a: announces: BGP: announced to tor (10.0.0.1:179), session Established\n      the router tor (10.0.0.1:179) holds the route"),
        "{text}"
    );
    assert!(
        reason_of(&e, "node-b").starts_with("SessionDown: BGP: the session to tor (10.0.0.1:179) is Active: last error: connect to 10.0.0.1:179: connection refused"),
        "{}", reason_of(&e, "node-b")
    );
    assert!(
        reason_of(&e, "node-c").starts_with("BFDDown: BGP: the session to tor (10.0.0.1:179) is Established but its BFD session is Down"),
        "{}", reason_of(&e, "node-c")
    );
    assert!(
        reason_of(&e, "node-d").starts_with("NoPeer: BGP: no BGPPeer selects this node"),
        "{}",
        reason_of(&e, "node-d")
    );
    let status = text::status(&explain::cluster_status(
        &env.objects().await,
        &Settings::default(),
    ));
    assert!(
        status.contains("BGP sessions not Established or BFD not Up: 2"),
        "{status}"
    );
    assert!(
        status.contains(
            "  node-b to tor: Active; last error: connect to 10.0.0.1:179: connection refused"
        ),
        "{status}"
    );
    let node = text::node(&explain::explain_node(
        &env.objects().await,
        &Settings::default(),
        "node-b",
    ));
    assert!(node.contains("BGP peers selecting it: tor"), "{node}");
    assert!(node.contains("session tor (10.0.0.1:179): Active; last error: connect to 10.0.0.1:179: connection refused"), "{node}");
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_why_an_address_is_announced_by_nobody_and_why_pools_were_passed_over() {
    let env = Env::start().await;
    let c = &env.client;
    pool(c, "manual", &["10.99.50.0/28"], json!({"priority": 1})).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ferrolb.io", "v1beta1", "IPAddressPool"),
        "ipaddresspools",
    );
    Api::<DynamicObject>::namespaced_with(c.clone(), NS, &ar)
        .patch(
            "manual",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"autoAssign": false}})),
        )
        .await
        .unwrap();
    pool(c, "older", &["10.99.51.0/28"], json!({})).await;
    // Overlaps `older`, which came first (or in the same second, and sorts first): not ready.
    pool(c, "zz-overlap", &["10.99.51.0/29"], json!({"priority": 2})).await;
    pool(c, "bare", &["10.99.52.0/28"], json!({})).await;
    pool(c, "picky", &["10.99.53.0/28"], json!({})).await;
    pool(c, "quiet", &["10.99.54.0/28"], json!({})).await;
    for (name, pool_name, selectors) in [
        (
            "picky",
            "picky",
            json!([{"matchLabels": {"app": "chosen"}}]),
        ),
        ("quiet", "quiet", json!([])),
    ] {
        create(
            c,
            "ferrolb.io/v1beta1",
            "L2Advertisement",
            json!({"metadata": {"name": name, "namespace": NS},
                   "spec": {"ipAddressPools": [pool_name], "serviceSelectors": selectors}}),
        )
        .await;
    }
    create(
        c,
        "ferrolb.io/v1beta1",
        "BGPAdvertisement",
        json!({"metadata": {"name": "quiet", "namespace": NS},
               "spec": {"ipAddressPools": ["quiet"]}}),
    )
    .await;
    create(
        c,
        "ferrolb.io/v1beta1",
        "BGPPeer",
        json!({"metadata": {"name": "tor", "namespace": NS},
               "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "10.0.0.1"}}),
    )
    .await;
    for n in ["node-a", "node-b"] {
        node(c, n, json!({}), false).await;
        speaker_pod(c, n).await;
    }
    // The controller has seen every pool (the overlap refused) before any Service asks.
    let pools: Api<ferrolb_api::v1beta1::IPAddressPool> = Api::namespaced(c.clone(), NS);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let list = pools.list(&Default::default()).await.unwrap();
        let ready = |name: &str| {
            list.items
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .and_then(|p| p.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone())
        };
        if ready("zz-overlap").as_deref() == Some("False")
            && ["manual", "older", "bare", "picky", "quiet"]
                .iter()
                .all(|p| ready(p).as_deref() == Some("True"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pools' Ready conditions"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    service(c, "default", "auto", json!({})).await;
    service(
        c,
        "default",
        "ignored",
        json!({"annotations": {"ferrolb.io/address-pool": "picky"}}),
    )
    .await;
    service(
        c,
        "default",
        "empty",
        json!({"annotations": {"ferrolb.io/address-pool": "quiet"}}),
    )
    .await;
    service(
        c,
        "default",
        "served",
        json!({"annotations": {"ferrolb.io/address-pool": "quiet"}}),
    )
    .await;
    endpoints(c, "default", "served", &["node-a"]).await;

    let has_address = |e: &ferrolb_cli::explain::service::ServiceExplanation| {
        (!e.addresses.is_empty()).then(|| e.clone())
    };
    let auto = explained(&env, "default", "auto", "an address", has_address).await;
    eprintln!("{}", text::service(&auto));
    let pool = auto.pool.as_ref().unwrap();
    assert_eq!(pool.name, "bare");
    let passed: Vec<(&str, &str)> = pool
        .passed_over
        .iter()
        .map(|p| (p.pool.as_str(), p.reason.code.as_str()))
        .collect();
    assert_eq!(
        passed,
        [("manual", "AutoAssignOff"), ("zz-overlap", "PoolNotReady")]
    );
    assert!(
        reason_of(&auto, "node-a").starts_with(
            "NoMatchingAdvertisement: no L2Advertisement or BGPAdvertisement covers pool `bare`"
        ),
        "{}",
        reason_of(&auto, "node-a")
    );

    let ignored = explained(&env, "default", "ignored", "an address", has_address).await;
    eprintln!("{}", text::service(&ignored));
    let why = ignored.addresses[0].layer2.as_ref().unwrap();
    assert_eq!(why.code, "NoServiceSelected", "{}", why.message);
    assert!(
        why.message
            .contains("L2Advertisements of pool `picky` select no Service")
    );

    let empty = explained(&env, "default", "empty", "an address", has_address).await;
    eprintln!("{}", text::service(&empty));
    assert_eq!(
        empty.addresses[0].layer2.as_ref().unwrap().code,
        "NoReadyEndpoints"
    );
    assert!(
        reason_of(&empty, "node-b")
            .contains("NoReadyEndpoints: BGP: the Service has no ready IPv4 endpoint on any node"),
        "{}",
        reason_of(&empty, "node-b")
    );

    let served = explained(&env, "default", "served", "an address", has_address).await;
    eprintln!("{}", text::service(&served));
    for n in ["node-a", "node-b"] {
        assert!(
            reason_of(&served, n).contains(
                "NoSession: BGP: no BGPSessionState for peer tor on this node: its speaker has not reported the session"
            ),
            "{n}: {}",
            reason_of(&served, n)
        );
    }
    drop(env);
}
