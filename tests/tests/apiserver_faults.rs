//! Conformance of the double's own fault injection and request log (double only).

mod support;

use std::time::{Duration, Instant};

use ferrolb_tests::apiserver::{Failure, Verb};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

fn svc(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}))
        .unwrap()
}

#[tokio::test]
async fn injected_429_carries_retry_after_and_counts_down() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("faults").await;
    faults.fail_next(
        "services",
        2,
        Failure::TooManyRequests {
            retry_after_secs: 3,
        },
    );
    let addr = c.server().unwrap().addr();
    let path = format!("/api/v1/namespaces/{ns}/services");
    // A bare HTTP/1.1 client: kube's client retries 429s by itself.
    for _ in 0..2 {
        let answer = bare_get(addr, &path).await;
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("\r\nretry-after: 3\r\n"),
            "{answer}"
        );
        assert!(
            answer.contains("\"reason\":\"TooManyRequests\""),
            "{answer}"
        );
    }
    assert!(bare_get(addr, &path).await.starts_with("HTTP/1.1 200"));
}

async fn bare_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn kube_client_rides_over_injected_429s() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("faults").await;
    faults.fail_next(
        "services",
        1,
        Failure::TooManyRequests {
            retry_after_secs: 1,
        },
    );
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let statuses: Vec<u16> = c
        .server()
        .unwrap()
        .request_log()
        .iter()
        .filter(|r| r.resource.as_deref() == Some("services"))
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![429, 200]);
}

#[tokio::test]
async fn injected_500_fails_only_the_named_resource() {
    let mut c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let ns = c.namespace("faults").await;
    faults.fail_next("services", 1, Failure::ServerError);
    assert_eq!(
        c.json("GET", &format!("/api/v1/namespaces/{ns}/configmaps"), None)
            .await
            .status,
        200
    );
    assert_eq!(
        c.json("GET", &format!("/api/v1/namespaces/{ns}/services"), None)
            .await
            .status,
        500
    );
}

#[tokio::test]
async fn close_watches_ends_an_open_watch() {
    let c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    let started = Instant::now();
    let watch = c.json(
        "GET",
        "/api/v1/namespaces/default/services?watch=true&timeoutSeconds=30",
        None,
    );
    let close = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        faults.close_watches();
    };
    let (r, ()) = tokio::join!(watch, close);
    assert_eq!(r.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the watch ended long before its 30 s timeout"
    );
}

#[tokio::test]
async fn latency_delays_every_answer() {
    let c = support::cluster().await;
    let Some(faults) = c.faults() else { return };
    faults.set_latency(Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(c.json("GET", "/api/v1/namespaces", None).await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn restart_keeps_stored_objects_and_clients_reconnect() {
    let mut c = support::cluster().await;
    if !c.is_double() {
        return;
    }
    let ns = c.namespace("faults").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let created = api
        .create(&PostParams::default(), &svc("kept"))
        .await
        .unwrap();
    c.server().unwrap().restart().await;
    let mut got = None;
    for _ in 0..20 {
        if let Ok(s) = api.get("kept").await {
            got = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = got.expect("the object survives the restart");
    assert_eq!(got.metadata.uid, created.metadata.uid);
}

#[tokio::test]
async fn request_log_lists_verb_resource_subresource_and_user_agent() {
    let mut c = support::cluster().await;
    let Some(server) = c.server() else { return };
    server.clear_request_log();
    let ns = c.namespace("faults").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &svc("s")).await.unwrap();
    api.get_status("s").await.unwrap();
    api.list(&Default::default()).await.unwrap();
    let log = c.server().unwrap().request_log();
    let seen: Vec<(Option<Verb>, Option<String>, Option<String>)> = log
        .iter()
        .map(|r| (r.verb, r.resource.clone(), r.subresource.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some(Verb::Create), Some("namespaces".into()), None),
            (Some(Verb::Create), Some("services".into()), None),
            (
                Some(Verb::Get),
                Some("services".into()),
                Some("status".into())
            ),
            (Some(Verb::List), Some("services".into()), None),
        ]
    );
    c.server().unwrap().clear_request_log();
    c.raw(
        "GET",
        "/api/v1/nodes",
        "",
        None,
        &[("User-Agent", "ferrolb-speaker/0.1")],
    )
    .await;
    let log = c.server().unwrap().request_log();
    assert_eq!(log[0].user_agent, "ferrolb-speaker/0.1");
    assert_eq!(
        (
            log[0].verb,
            log[0].group.as_str(),
            log[0].namespace.as_deref()
        ),
        (Some(Verb::List), "", None)
    );
}
