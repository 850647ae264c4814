//! The controller assigns addresses as a user sees them: in `status.loadBalancer.ingress`,
//! with `ipMode`, the pool annotation, and Events.

mod support;

use std::time::Duration;

use ferrolb_api::names;
use ferrolb_api::v1beta1::{BGPPeer, IpMode};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_gets_an_address_from_the_pool_with_ip_mode_vip() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.10.0/28"], None).await;
    let _controller = cluster.spawn_controller("c1");
    cluster.create_service("web", &[]).await;
    let ingress = wait_for_ingress(&cluster.client(), "web").await;
    assert_eq!(ingress, vec![("10.99.10.0".to_string(), "VIP".to_string())]);
    let svc = Api::<Service>::namespaced(cluster.client(), "default")
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        svc.metadata
            .annotations
            .unwrap()
            .get(names::IP_ALLOCATED_FROM_POOL)
            .map(String::as_str),
        Some("blue")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_from_a_proxy_pool_gets_ip_mode_proxy() {
    let cluster = Cluster::start().await;
    cluster
        .create_pool("proxied", &["10.99.11.0/28"], Some(IpMode::Proxy))
        .await;
    let _controller = cluster.spawn_controller("c1");
    cluster.create_service("ingress", &[]).await;
    let ingress = wait_for_ingress(&cluster.client(), "ingress").await;
    assert_eq!(ingress[0].1, "Proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_asking_for_an_unknown_pool_gets_an_allocation_failed_event_and_no_status() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.12.0/28"], None).await;
    let _controller = cluster.spawn_controller("c1");
    cluster
        .create_service("lost", &[(names::ADDRESS_POOL, "nope")])
        .await;
    cluster.create_service("found", &[]).await;
    // Once a later Service is served, the first one has been looked at too.
    wait_for_ingress(&cluster.client(), "found").await;
    let events = Api::<Event>::namespaced(cluster.client(), "default");
    let note = eventually(Duration::from_secs(10), "an AllocationFailed event", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                let regarding = e.regarding.as_ref()?.name.clone()?;
                (regarding == "lost" && e.reason.as_deref() == Some("AllocationFailed"))
                    .then(|| e.note.unwrap_or_default())
            })
        }
    })
    .await;
    assert!(note.contains("nope"), "{note}");
    let svc = Api::<Service>::namespaced(cluster.client(), "default")
        .get("lost")
        .await
        .unwrap();
    assert!(ingress(&svc).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_stops_being_a_load_balancer_loses_its_address_and_annotation() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.13.0/28"], None).await;
    let _controller = cluster.spawn_controller("c1");
    cluster.create_service("web", &[]).await;
    wait_for_ingress(&cluster.client(), "web").await;
    let api = Api::<Service>::namespaced(cluster.client(), "default");
    let patch = serde_json::json!({"spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "nodePort": null}]}});
    api.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(10), "the pool annotation to go", || {
        let api = api.clone();
        async move {
            let svc = api.get("web").await.ok()?;
            let annotated = svc
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .contains_key(names::IP_ALLOCATED_FROM_POOL);
            (!annotated && ingress(&svc).is_empty()).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_newer_pool_is_reported_not_ready_and_not_used() {
    let cluster = Cluster::start().await;
    cluster.create_pool("older", &["10.99.14.0/30"], None).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creationTimestamp has 1 s resolution
    cluster.create_pool("newer", &["10.99.14.0/24"], None).await;
    let _controller = cluster.spawn_controller("c1");
    let pools = Api::<ferrolb_api::v1beta1::IPAddressPool>::namespaced(cluster.client(), NS);
    let condition = eventually(
        Duration::from_secs(10),
        "the newer pool's condition",
        || {
            let pools = pools.clone();
            async move {
                let p = pools.get("newer").await.ok()?;
                p.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Ready")
            }
        },
    )
    .await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "Overlap")
    );
    for i in 0..5 {
        cluster.create_service(&format!("s{i}"), &[]).await;
    }
    // Four addresses in `older`; the fifth Service gets nothing rather than one from `newer`.
    for i in 0..4 {
        let ing = wait_for_ingress(&cluster.client(), &format!("s{i}")).await;
        assert!(ing[0].0.starts_with("10.99.14."), "{ing:?}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s4 = Api::<Service>::namespaced(cluster.client(), "default")
        .get("s4")
        .await
        .unwrap();
    assert!(ingress(&s4).is_empty(), "{:?}", ingress(&s4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_service_gets_one_address_per_family_in_its_family_order() {
    let cluster = Cluster::start_dual_stack().await;
    cluster
        .create_pool("dual", &["10.99.15.0/28", "fd00:99:15::/124"], None)
        .await;
    let _controller = cluster.spawn_controller("c1");
    cluster
        .create_service_with("both", &[], |spec| {
            spec.ip_family_policy = Some("RequireDualStack".into());
            spec.ip_families = Some(vec!["IPv6".into(), "IPv4".into()]);
        })
        .await;
    cluster
        .create_service_with("v6-only", &[], |spec| {
            spec.ip_families = Some(vec!["IPv6".into()]);
        })
        .await;
    let both = wait_for_ingress(&cluster.client(), "both").await;
    let ips: Vec<&str> = both.iter().map(|(ip, _)| ip.as_str()).collect();
    assert_eq!(ips, ["fd00:99:15::", "10.99.15.0"]);
    let v6 = wait_for_ingress(&cluster.client(), "v6-only").await;
    assert_eq!(v6, vec![("fd00:99:15::1".to_string(), "VIP".to_string())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_naming_a_missing_bfd_profile_is_not_ready_until_the_profile_is_created() {
    let cluster = Cluster::start().await;
    cluster
        .create_bgp_peer("tor", serde_json::json!({"bfdProfile": "fast"}))
        .await;
    let _controller = cluster.spawn_controller("c1");
    let condition = cluster.wait_for_ready::<BGPPeer>("tor", "False").await;
    assert_eq!(condition.reason, "BFDProfileNotFound");
    assert!(
        condition.message.contains("`fast`") && condition.message.contains("without BFD"),
        "{}",
        condition.message
    );
    cluster.create_bfd_profile("fast").await;
    let condition = cluster.wait_for_ready::<BGPPeer>("tor", "True").await;
    assert_eq!(condition.reason, "Valid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_naming_a_missing_password_secret_is_not_ready_until_the_secret_is_created() {
    let cluster = Cluster::start().await;
    cluster
        .create_bgp_peer(
            "tor",
            serde_json::json!({"passwordSecret": {"name": "md5"}}),
        )
        .await;
    cluster
        .create_bgp_peer("plain", serde_json::json!({}))
        .await;
    let _controller = cluster.spawn_controller("c1");
    let condition = cluster.wait_for_ready::<BGPPeer>("tor", "False").await;
    assert_eq!(condition.reason, "MissingSecret");
    assert!(condition.message.contains("`md5`"), "{}", condition.message);
    cluster.wait_for_ready::<BGPPeer>("plain", "True").await;
    cluster.create_password_secret("md5").await;
    cluster.wait_for_ready::<BGPPeer>("tor", "True").await;
}

/// The periodic safety net costs a lookup per Service that is in order, not a reconcile: over
/// three periodic passes, 40 Services holding their addresses are not reconciled again, while
/// one refused (an unknown pool) is, in each. Fails with every pass reconciling every Service.
/// With nothing changing it does not even look the 40 up in each pass: at most one of the
/// three looks over every Service (one in ten does), the others over the refused one only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_pass_reconciles_only_the_services_that_are_not_in_order() {
    const PASSES: &str = "ferrolb_controller_periodic_passes_total";
    const RECONCILED: &str = "ferrolb_services_reconciled_total";
    const LOOKUPS: &str = "ferrolb_controller_periodic_lookups_total";
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.13.0/26"], None).await;
    let metrics = free_local_addr();
    let _controller = cluster.spawn_controller_with("c1", &metrics, &["--resync-period", "1s"]);
    for i in 0..40 {
        cluster.create_service(&format!("s{i}"), &[]).await;
    }
    cluster
        .create_service("lost", &[(names::ADDRESS_POOL, "nope")])
        .await;
    for i in 0..40 {
        wait_for_ingress(&cluster.client(), &format!("s{i}")).await;
    }
    let read = |name: &'static str| {
        let metrics = metrics.clone();
        move || {
            let metrics = metrics.clone();
            async move { metric(&metrics, name) }
        }
    };
    // Two periodic passes after the last address: every Service has been seen in order at
    // the version the cache shows.
    let first = eventually(Duration::from_secs(60), "the metrics", read(PASSES)).await;
    let passes = |at_least: f64| {
        let read = read(PASSES);
        async move {
            eventually(Duration::from_secs(60), "periodic passes", move || {
                let f = read();
                async move { f.await.filter(|p| *p >= at_least) }
            })
            .await
        }
    };
    let p0 = passes(first + 2.0).await;
    let r0 = metric(&metrics, RECONCILED).expect("the reconcile count");
    let l0 = metric(&metrics, LOOKUPS).expect("the lookup count");
    let p1 = passes(p0 + 3.0).await;
    let r1 = metric(&metrics, RECONCILED).expect("the reconcile count");
    let l1 = metric(&metrics, LOOKUPS).expect("the lookup count");
    let (ran, reconciled, looked_up) = (p1 - p0, r1 - r0, l1 - l0);
    eprintln!(
        "{ran} periodic passes reconciled {reconciled} Services and looked {looked_up} up (41 exist)"
    );
    // Two full looks at most (a pass may fall between a count and the other's read), and one
    // lookup for the refused Service in each of the others: well under a full look per pass.
    assert!(
        looked_up <= 2.0 * 41.0 + ran + 1.0 && looked_up < 41.0 * ran,
        "a look over every Service in every periodic pass: {looked_up} lookups in {ran} passes"
    );
    // One pass may fall between a count and the other's read: a margin of one each way.
    assert!(
        reconciled >= ran - 1.0,
        "the refused Service is looked at again in every periodic pass: {reconciled} in {ran}"
    );
    assert!(
        reconciled <= ran + 2.0,
        "the 40 Services in order are not reconciled again: {reconciled} in {ran} passes"
    );
}

/// A controller that wins the election before its watches start builds its first term's
/// allocator from its caches, whose first LIST began while it led: every Service is listed
/// once at a cold start, not twice. Fails with the LIST of its own every term used to make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_leading_from_its_start_lists_the_services_once() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.14.0/26"], None).await;
    cluster.create_service("first", &[]).await;
    let _controller = cluster.spawn_controller("c1");
    wait_for_ingress(&cluster.client(), "first").await;
    let lists: Vec<String> = (cluster.server.request_log().into_iter())
        .filter(|r| {
            r.user_agent.starts_with("ferrolb-controller/")
                && r.verb == Some(ferrolb_tests::apiserver::Verb::List)
                && r.resource.as_deref() == Some("services")
                && r.status == 200
                && !r.query.contains("continue=")
        })
        .map(|r| r.query)
        .collect();
    assert_eq!(lists.len(), 1, "lists of Services, by query: {lists:?}");
}
