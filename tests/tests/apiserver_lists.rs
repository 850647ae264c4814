//! Conformance: label and field selectors, paging, list resourceVersion semantics.

mod support;

use ferrolb_tests::apiserver::TestCluster;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

async fn services(c: &mut TestCluster) -> (String, Api<Service>) {
    let ns = c.namespace("lists").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    for (name, labels) in [
        ("l-web", json!({"app": "web", "tier": "front"})),
        ("l-db", json!({"app": "db"})),
        ("l-none", json!({})),
        ("l-cache", json!({"app": "cache"})),
    ] {
        let s: Service = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"ports": [{"port": 80}]}})).unwrap();
        api.create(&PostParams::default(), &s).await.unwrap();
    }
    (ns, api)
}

async fn names(api: &Api<Service>, selector: &str) -> Vec<String> {
    api.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect()
}

#[tokio::test]
async fn not_equal_and_notin_also_match_objects_without_the_label() {
    let mut c = support::cluster().await;
    let (_, api) = services(&mut c).await;
    assert_eq!(
        names(&api, "app!=web").await,
        vec!["l-cache", "l-db", "l-none"]
    );
    assert_eq!(
        names(&api, "app notin (web,db)").await,
        vec!["l-cache", "l-none"]
    );
    assert_eq!(names(&api, "app in (web,db)").await, vec!["l-db", "l-web"]);
    assert_eq!(names(&api, "tier").await, vec!["l-web"]);
    assert_eq!(names(&api, "!app").await, vec!["l-none"]);
}

#[tokio::test]
async fn malformed_label_selector_is_400() {
    let mut c = support::cluster().await;
    let (ns, _) = services(&mut c).await;
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?labelSelector=app%20in%20web"),
            None,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["message"],
        "unable to parse requirement: found 'web' expected: '('"
    );
}

#[tokio::test]
async fn unsupported_field_selector_is_400_and_supported_ones_filter() {
    let mut c = support::cluster().await;
    let (ns, api) = services(&mut c).await;
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?fieldSelector=status.loadBalancer%3Dx"),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.body["message"].as_str()),
        (400, Some("field label not supported: status.loadBalancer"))
    );
    let got = api
        .list(&ListParams::default().fields("metadata.name=l-db"))
        .await
        .unwrap();
    assert_eq!(got.items.len(), 1);
    let got = api
        .list(&ListParams::default().fields("spec.type=ClusterIP,metadata.name!=l-db"))
        .await
        .unwrap();
    assert_eq!(got.items.len(), 3);
}

#[tokio::test]
async fn pods_are_selected_by_node_name() {
    let mut c = support::cluster().await;
    let ns = c.namespace("lists").await;
    let api: Api<Pod> = Api::namespaced(c.client(), &ns);
    for (name, node) in [("p1", "node-a"), ("p2", "node-b"), ("p3", "node-a")] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }
    let got = api
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .unwrap();
    let names: Vec<String> = got
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(names, vec!["p1", "p3"]);
}

#[tokio::test]
async fn paging_serves_later_pages_from_the_first_snapshot() {
    let mut c = support::cluster().await;
    let (ns, api) = services(&mut c).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(2));
    let token = first.metadata.continue_.clone().expect("a continue token");
    let late: Service = serde_json::from_value(
        json!({"metadata": {"name": "l-zz-late"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &late).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<String> = second
        .items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["l-none", "l-web"],
        "the object created between pages is not in this list"
    );
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    assert!(second.metadata.continue_.is_none());
    let raw = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?limit=2&labelSelector=app"),
            None,
        )
        .await;
    assert!(
        raw.body["metadata"].get("remainingItemCount").is_none(),
        "no remainingItemCount with a selector"
    );
    let garbage = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?limit=2&continue=garbage"),
            None,
        )
        .await;
    assert_eq!(garbage.status, 400);
}

#[tokio::test]
async fn resource_version_zero_ignores_limit_and_match_without_version_is_422() {
    let mut c = support::cluster().await;
    let (ns, _) = services(&mut c).await;
    // `resourceVersion=0` is "any version": a real server answers from its watch cache, which
    // may not hold the last create yet. Ask until it does; a server that honoured the limit
    // would answer 2 every time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = c
            .json(
                "GET",
                &format!("/api/v1/namespaces/{ns}/services?resourceVersion=0&limit=2"),
                None,
            )
            .await;
        let items = r.body["items"].as_array().unwrap().len();
        if items == 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a resourceVersion=0 list with limit=2 still had {items} of the 4 Services after 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?resourceVersionMatch=Exact"),
            None,
        )
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn built_in_list_items_carry_no_kind_and_the_list_carries_the_snapshot_version() {
    let mut c = support::cluster().await;
    let (ns, _) = services(&mut c).await;
    let r = c
        .json("GET", &format!("/api/v1/namespaces/{ns}/services"), None)
        .await;
    assert_eq!(r.body["kind"], "ServiceList");
    assert!(r.body["items"][0].get("kind").is_none());
    let list_rv: u64 = r.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let max_item: u64 = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max()
        .unwrap();
    assert!(list_rv >= max_item);
}

#[tokio::test]
async fn exact_list_and_continue_older_than_the_watch_cache_are_410() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let (ns, api) = services(&mut c).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let exact = c
        .json(
            "GET",
            &format!(
                "/api/v1/namespaces/{ns}/services?resourceVersion={rv}&resourceVersionMatch=Exact"
            ),
            None,
        )
        .await;
    assert_eq!(
        exact.status, 200,
        "an Exact list inside the window is served"
    );
    assert_eq!(exact.body["items"].as_array().unwrap().len(), 4);
    let s: Service = serde_json::from_value(
        json!({"metadata": {"name": "l-later"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    faults.expire_watch_cache();
    let exact = c
        .json(
            "GET",
            &format!(
                "/api/v1/namespaces/{ns}/services?resourceVersion={rv}&resourceVersionMatch=Exact"
            ),
            None,
        )
        .await;
    assert_eq!(
        (exact.status, exact.body["reason"].as_str()),
        (410, Some("Expired"))
    );
    let cont = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?limit=2&continue={token}"),
            None,
        )
        .await;
    assert_eq!(cont.status, 410);
    assert!(
        cont.body["metadata"]["continue"].is_string(),
        "the 410 carries a fresh continue token"
    );
}

#[tokio::test]
async fn aggregated_discovery_has_an_etag_and_answers_304_when_it_matches() {
    let c = support::cluster().await;
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let r = c.raw("GET", "/apis", "", None, &[("Accept", accept)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["kind"], "APIGroupDiscoveryList");
    let etag = r.header("etag").expect("an ETag").to_string();
    let again = c
        .raw(
            "GET",
            "/apis",
            "",
            None,
            &[("Accept", accept), ("If-None-Match", &etag)],
        )
        .await;
    assert_eq!(again.status, 304);
    let beta = c
        .raw(
            "GET",
            "/api",
            "",
            None,
            &[(
                "Accept",
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            )],
        )
        .await;
    assert_eq!(beta.status, 406);
}
