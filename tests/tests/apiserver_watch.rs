//! Conformance: watch semantics (initial events, replay, 410, bookmarks, timeouts, selector
//! transitions) and a kube-runtime watcher across forced closes and expiry.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolb_tests::apiserver::{Failure, Verb};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;

fn svc(name: &str, labels: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn watch_from_a_list_version_sees_added_modified_deleted_then_a_bookmark_and_closes_at_timeout()
 {
    let mut c = support::cluster().await;
    let ns = c.namespace("watch").await;
    let list = c
        .json("GET", &format!("/api/v1/namespaces/{ns}/services"), None)
        .await;
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let path = format!(
        "/api/v1/namespaces/{ns}/services?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5"
    );
    let watch = c.json("GET", &path, None);
    let writes = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        api.create(&PostParams::default(), &svc("w1", json!({"set": "watch"})))
            .await
            .unwrap();
        api.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"step": "2"}}})),
        )
        .await
        .unwrap();
        api.delete("w1", &DeleteParams::default()).await.unwrap();
    };
    let (r, ()) = tokio::join!(watch, writes);
    assert_eq!(r.status, 200);
    let lines = r.lines();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    // kube-apiserver may send more than one bookmark before the timeout closes the watch.
    let events: Vec<&str> = types.iter().copied().filter(|t| *t != "BOOKMARK").collect();
    assert_eq!(events, vec!["ADDED", "MODIFIED", "DELETED"], "{types:?}");
    assert!(
        types[3..].iter().all(|t| *t == "BOOKMARK") && types.len() > 3,
        "a bookmark follows the events: {types:?}"
    );
    let rv = |l: &serde_json::Value| {
        l["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    // Other writers may have moved the revision on: the bookmark is never behind what was sent.
    assert!(
        rv(&lines[3]) >= rv(&lines[2]),
        "the bookmark carries the latest revision"
    );
    assert_eq!(
        lines[3]["object"]["spec"],
        json!({}),
        "a Service bookmark is an empty object"
    );
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_synthetic_added_events() {
    let mut c = support::cluster().await;
    let ns = c.namespace("watch").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    for n in ["a", "b"] {
        api.create(&PostParams::default(), &svc(n, json!({"set": "watch"})))
            .await
            .unwrap();
    }
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?watch=true&timeoutSeconds=1"),
            None,
        )
        .await;
    let names: Vec<String> = r
        .lines()
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l["type"].as_str().unwrap(),
                l["object"]["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, vec!["ADDED a", "ADDED b"]);
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_an_annotated_bookmark() {
    let mut c = support::cluster().await;
    let ns = c.namespace("watch").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &svc("a", json!({})))
        .await
        .unwrap();
    let path = format!(
        "/api/v1/namespaces/{ns}/services?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    );
    let lines = c.json("GET", &path, None).await.lines();
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[1]["type"], "BOOKMARK");
    assert_eq!(
        lines[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let r = c.json("GET", &format!("/api/v1/namespaces/{ns}/services?watch=true&sendInitialEvents=true&timeoutSeconds=1"), None).await;
    assert_eq!(
        r.status, 422,
        "sendInitialEvents requires resourceVersionMatch=NotOlderThan"
    );
}

#[tokio::test]
async fn watch_with_a_label_selector_reports_an_object_leaving_as_deleted_and_returning_as_added() {
    let mut c = support::cluster().await;
    let ns = c.namespace("watch").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let created = api
        .create(&PostParams::default(), &svc("s", json!({"set": "in"})))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let path = format!(
        "/api/v1/namespaces/{ns}/services?watch=true&labelSelector=set%3Din&resourceVersion={rv}&timeoutSeconds=2"
    );
    let watch = c.json("GET", &path, None);
    let writes = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        api.patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"set": "out"}}})),
        )
        .await
        .unwrap();
        api.patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"set": "in"}}})),
        )
        .await
        .unwrap();
    };
    let (r, ()) = tokio::join!(watch, writes);
    let lines = r.lines();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["DELETED", "ADDED"]);
    assert_eq!(
        lines[0]["object"]["metadata"]["labels"]["set"], "in",
        "DELETED carries the old state"
    );
}

#[tokio::test]
async fn watch_from_expired_version_is_410_gone() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("watch").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let created = api
        .create(&PostParams::default(), &svc("s", json!({})))
        .await
        .unwrap();
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    faults.expire_watch_cache();
    let rv = created.metadata.resource_version.unwrap();
    let r = c
        .json(
            "GET",
            &format!(
                "/api/v1/namespaces/{ns}/services?watch=true&resourceVersion={rv}&timeoutSeconds=2"
            ),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "the 410 arrives inside the stream");
    let lines = r.lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["type"], "ERROR");
    assert_eq!(lines[0]["object"]["code"], 410);
    assert_eq!(lines[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn watch_from_a_version_in_the_cache_replays_history() {
    let mut c = support::cluster().await;
    let ns = c.namespace("watch").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let created = api
        .create(&PostParams::default(), &svc("s", json!({})))
        .await
        .unwrap();
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    api.delete("s", &DeleteParams::default()).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let r = c
        .json(
            "GET",
            &format!(
                "/api/v1/namespaces/{ns}/services?watch=true&resourceVersion={rv}&timeoutSeconds=1"
            ),
            None,
        )
        .await;
    let types: Vec<String> = r
        .lines()
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, vec!["MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn watch_with_a_non_numeric_timeout_is_400() {
    let c = support::cluster().await;
    let r = c
        .json(
            "GET",
            "/api/v1/namespaces/default/services?watch=true&timeoutSeconds=abc",
            None,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["message"],
        "strconv.ParseInt: parsing \"abc\": invalid syntax"
    );
}

/// The state a watcher's events describe, rebuilt the way a reflector does.
fn apply_event(
    store: &mut BTreeMap<String, String>,
    buffer: &mut BTreeMap<String, String>,
    e: Event<Service>,
) {
    let key = |s: &Service| s.metadata.name.clone().unwrap();
    let value = |s: &Service| {
        s.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("v")
            .cloned()
            .unwrap_or_default()
    };
    match e {
        Event::Apply(s) => {
            store.insert(key(&s), value(&s));
        }
        Event::Delete(s) => {
            store.remove(&key(&s));
        }
        Event::Init => buffer.clear(),
        Event::InitApply(s) => {
            buffer.insert(key(&s), value(&s));
        }
        Event::InitDone => *store = std::mem::take(buffer),
    }
}

/// Waits until the events received so far describe `expected`.
async fn settle(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event<Service>>,
    seen: &mut BTreeMap<String, String>,
    buffer: &mut BTreeMap<String, String>,
    expected: &BTreeMap<String, String>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while seen != expected {
        let e = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("watcher caught up in time")
            .expect("watcher running");
        apply_event(seen, buffer, e);
    }
}

/// Waits until the double has served `n` watch requests in `ns`.
async fn watches_served(c: &ferrolb_tests::apiserver::TestCluster, ns: &str, n: usize) {
    for _ in 0..200 {
        let log = c.server().unwrap().request_log();
        if log
            .iter()
            .filter(|r| {
                r.verb == Some(Verb::Watch) && r.status == 200 && r.namespace.as_deref() == Some(ns)
            })
            .count()
            >= n
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the watcher never opened watch number {n}");
}

#[tokio::test]
async fn kube_runtime_watcher_sees_every_change_across_forced_close_and_410() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("watcher").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    // The watcher runs on its own, as in a controller, with kube-runtime's default backoff.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let task = tokio::spawn(async move {
        while let Some(e) = stream.next().await {
            if let Ok(e) = e
                && tx.send(e).is_err()
            {
                return;
            }
        }
    });
    let (mut seen, mut buffer, mut expected) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    watches_served(&c, &ns, 1).await;

    // Round 1: changes while the first watch is open, then a forced close.
    for i in 0..3 {
        api.create(
            &PostParams::default(),
            &svc(&format!("s{i}"), json!({"v": "1"})),
        )
        .await
        .unwrap();
        expected.insert(format!("s{i}"), "1".to_string());
    }
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    faults.close_watches();
    watches_served(&c, &ns, 2).await;

    // Round 2: changes on the re-opened watch, then a close after which re-watching fails.
    for i in 0..3 {
        api.patch(
            &format!("s{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
        )
        .await
        .unwrap();
        expected.insert(format!("s{i}"), "2".to_string());
    }
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    faults.fail_next_verb("services", Verb::Watch, u32::MAX, Failure::ServerError);
    faults.close_watches();

    // Round 3: changes nobody watches, forgotten by the watch cache; the next watch gets 410.
    api.patch(
        "s0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "3"}}})),
    )
    .await
    .unwrap();
    expected.insert("s0".into(), "3".into());
    api.delete("s1", &DeleteParams::default()).await.unwrap();
    expected.remove("s1");
    api.create(&PostParams::default(), &svc("s3", json!({"v": "3"})))
        .await
        .unwrap();
    expected.insert("s3".into(), "3".into());
    faults.expire_watch_cache();
    faults.clear();
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    assert_eq!(seen, expected);
    task.abort();

    let log = c.server().unwrap().request_log();
    let mine: Vec<_> = log
        .iter()
        .filter(|r| r.namespace.as_deref() == Some(ns.as_str()))
        .collect();
    let count = |v: Verb, status: u16| {
        mine.iter()
            .filter(|r| r.verb == Some(v) && r.status == status)
            .count()
    };
    assert_eq!(
        count(Verb::List, 200),
        2,
        "the 410 made the watcher list again"
    );
    assert!(
        count(Verb::Watch, 500) >= 1,
        "re-watching failed while the fault was set"
    );
    assert!(
        count(Verb::Watch, 200) >= 3,
        "the watcher re-watched after each close"
    );
}

#[tokio::test]
async fn kube_runtime_streaming_list_watcher_sees_initial_objects_then_changes() {
    let mut c = support::cluster().await;
    let ns = c.namespace("stream").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &svc("a", json!({"v": "1"})))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream =
        watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let task = tokio::spawn(async move {
        while let Some(e) = stream.next().await {
            if let Ok(e) = e
                && tx.send(e).is_err()
            {
                return;
            }
        }
    });
    let (mut seen, mut buffer) = (BTreeMap::new(), BTreeMap::new());
    let mut expected = BTreeMap::from([("a".to_string(), "1".to_string())]);
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    api.create(&PostParams::default(), &svc("b", json!({"v": "2"})))
        .await
        .unwrap();
    expected.insert("b".into(), "2".into());
    settle(&mut rx, &mut seen, &mut buffer, &expected).await;
    task.abort();
    if let Some(server) = c.server() {
        let lists = server
            .request_log()
            .iter()
            .filter(|r| r.verb == Some(Verb::List) && r.namespace.as_deref() == Some(ns.as_str()))
            .count();
        assert_eq!(lists, 0, "a streaming-list watcher never lists");
    }
}

#[tokio::test]
async fn metadata_watcher_receives_partial_object_metadata() {
    let mut c = support::cluster().await;
    let ns = c.namespace("meta").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &svc("a", json!({"v": "1"})))
        .await
        .unwrap();
    let list = api.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["v"], "1");
    let r = c
        .raw(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services"),
            "",
            None,
            &[(
                "Accept",
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            )],
        )
        .await;
    assert_eq!(r.body["kind"], "PartialObjectMetadataList");
    assert!(r.body["items"][0].get("spec").is_none());
    let mut stream = watcher::watcher(
        Api::<kube::core::PartialObjectMeta<Service>>::namespaced(c.client(), &ns),
        watcher::Config::default(),
    )
    .boxed();
    let mut names = Vec::new();
    while let Some(Ok(e)) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("events arrive")
    {
        match e {
            Event::InitApply(m) => names.push(m.metadata.name.unwrap()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, vec!["a"]);
}

#[tokio::test]
async fn kube_runtime_watcher_sees_each_intermediate_change_made_while_it_reconnects() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("replay").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &svc("s", json!({"v": "0"})))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let task = tokio::spawn(async move {
        while let Some(e) = stream.next().await {
            if let Ok(e) = e
                && tx.send(e).is_err()
            {
                return;
            }
        }
    });
    let (mut seen, mut buffer) = (BTreeMap::new(), BTreeMap::new());
    settle(
        &mut rx,
        &mut seen,
        &mut buffer,
        &BTreeMap::from([("s".to_string(), "0".to_string())]),
    )
    .await;
    watches_served(&c, &ns, 1).await;
    // The re-watch fails once, so every change below is made while no watch is open.
    faults.fail_next_verb("services", Verb::Watch, 1, Failure::ServerError);
    faults.close_watches();
    for v in 1..=5 {
        api.patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"v": v.to_string()}}})),
        )
        .await
        .unwrap();
    }
    let mut versions = Vec::new();
    while versions.last().map(String::as_str) != Some("5") {
        let e = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("caught up in time")
            .unwrap();
        if let Event::Apply(s) = e {
            versions.push(s.metadata.labels.unwrap()["v"].clone());
        }
    }
    task.abort();
    assert_eq!(
        versions,
        vec!["1", "2", "3", "4", "5"],
        "replayed from the watch cache, one event per change"
    );
}
