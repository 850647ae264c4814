//! The controller per Service: one API write per assignment, a Service whose writes keep failing
//! backs off alone, a status another writer changed is restored with an Event, and a Service
//! that moves to another implementation is released without touching that implementation's
//! status. Runs against the test double or, with `FERROLB_APISERVER=real`, a real server (the
//! failing-writes test injects faults and runs against the double only).

mod support;

use std::time::{Duration, Instant};

use ferrolb_api::names;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::*;

/// The Event `reason` recorded for Service `name`, once one exists.
async fn event_for(cluster: &Cluster, name: &str, reason: &str, timeout: Duration) -> Event {
    let events = Api::<Event>::namespaced(cluster.client(), "default");
    eventually(timeout, &format!("a {reason} Event for {name}"), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        }
    })
    .await
}

fn annotated(svc: &Service) -> bool {
    svc.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(names::IP_ALLOCATED_FROM_POOL))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_assignment_is_one_status_write_and_no_write_to_the_service_itself() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.40.0/26"], None).await;
    let _controller = cluster.spawn_controller("one-write");
    for i in 0..20 {
        cluster.create_service(&format!("w{i}"), &[]).await;
    }
    for i in 0..20 {
        let name = format!("w{i}");
        wait_for_ingress(&cluster.client(), &name).await;
        let svc = Api::<Service>::namespaced(cluster.client(), "default")
            .get(&name)
            .await
            .unwrap();
        assert!(annotated(&svc), "{name} carries the pool annotation");
    }
    // Every Service shows its annotation, which came with its status write: had a second
    // write been needed, it would be in the log by now.
    let writes: Vec<_> = cluster
        .server
        .request_log()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("ferrolb-controller/"))
        .filter(|r| r.resource.as_deref() == Some("services"))
        .filter(|r| r.method != "GET")
        .collect();
    let status: Vec<_> = writes
        .iter()
        .filter(|r| r.subresource.as_deref() == Some("status"))
        .collect();
    assert_eq!(
        status.len(),
        20,
        "one status write per Service: {:?}",
        status.iter().map(|r| &r.name).collect::<Vec<_>>()
    );
    assert_eq!(
        writes.len(),
        20,
        "no write to the Service object itself: {:?}",
        writes
            .iter()
            .map(|r| (&r.method, &r.name, &r.subresource))
            .collect::<Vec<_>>()
    );
}

/// A burst of assignments (here a cold start with 40 Services waiting, more than the 16
/// status writes in flight at once) writes every address before it publishes an Event, so
/// Events do not take the API server's time from the addresses; then every Service gets its
/// `IPAllocated` Event. Fails with Events published while the burst's writes go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_assignments_writes_every_address_before_its_events() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.41.0/26"], None).await;
    for i in 0..40 {
        cluster.create_service(&format!("b{i}"), &[]).await;
    }
    let _controller = cluster.spawn_controller("burst");
    for i in 0..40 {
        wait_for_ingress(&cluster.client(), &format!("b{i}")).await;
    }
    for i in 0..40 {
        event_for(
            &cluster,
            &format!("b{i}"),
            "IPAllocated",
            Duration::from_secs(30),
        )
        .await;
    }
    let log: Vec<_> = cluster
        .server
        .request_log()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("ferrolb-controller/"))
        .collect();
    let last_status = log
        .iter()
        .rposition(|r| {
            r.resource.as_deref() == Some("services") && r.subresource.as_deref() == Some("status")
        })
        .expect("status writes");
    let first_event = log
        .iter()
        .position(|r| r.resource.as_deref() == Some("events") && r.method == "POST")
        .expect("Events");
    assert!(
        first_event > last_status,
        "an Event went out at request {first_event}, before the last status write at {last_status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_writes_always_fail_does_not_slow_the_others_and_gets_an_event() {
    use ferrolb_tests::apiserver::Failure;
    let cluster = Cluster::start().await;
    let Some(faults) = cluster.server.faults() else {
        panic!("this test injects faults: run it against the test API server");
    };
    cluster.create_pool("blue", &["10.99.41.0/26"], None).await;
    cluster.create_service("stuck", &[]).await;
    faults.fail_writes_to("services", Some("default"), "stuck", Failure::ServerError);
    let _controller = cluster.spawn_controller("backoff");
    // The stuck Service's status write has failed a few times by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    for i in 0..20 {
        cluster.create_service(&format!("ok{i}"), &[]).await;
    }
    for i in 0..20 {
        wait_for_ingress(&cluster.client(), &format!("ok{i}")).await;
    }
    let others = started.elapsed();
    assert!(
        others < Duration::from_secs(3),
        "20 other Services took {others:?} while one kept failing"
    );
    let event = event_for(
        &cluster,
        "stuck",
        "StatusWriteFailed",
        Duration::from_secs(20),
    )
    .await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("5 times"),
        "{:?}",
        event.note
    );
    let stuck = Api::<Service>::namespaced(cluster.client(), "default")
        .get("stuck")
        .await
        .unwrap();
    assert!(ingress(&stuck).is_empty(), "its writes never went through");
    // Writes to it fail with 500 and back off: a handful of attempts, not a hot loop.
    let status_writes = || {
        cluster
            .server
            .request_log()
            .into_iter()
            .filter(|r| {
                r.user_agent.starts_with("ferrolb-controller/")
                    && r.name.as_deref() == Some("stuck")
                    && r.subresource.as_deref() == Some("status")
            })
            .count()
    };
    let attempts = status_writes();
    assert!(
        (5..=12).contains(&attempts),
        "{attempts} write attempts for the failing Service"
    );
    // Once writes succeed again, it gets its address on the next retry: within the back-off
    // its failures have reached by now (a slow machine lets more of them happen first), and a
    // few seconds more.
    faults.clear();
    let failed = status_writes();
    let next_retry = ferrolb_controller::apicall::backoff(failed as u32);
    let api = Api::<Service>::namespaced(cluster.client(), "default");
    let ingress = eventually(
        next_retry + Duration::from_secs(5),
        &format!("an address for stuck at its next retry ({failed} failures, {next_retry:?})"),
        || {
            let api = api.clone();
            async move {
                let ing = ingress(&api.get("stuck").await.ok()?);
                (!ing.is_empty()).then_some(ing)
            }
        },
    )
    .await;
    assert_eq!(ingress.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_changed_by_another_writer_is_restored_with_an_event() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.42.0/28"], None).await;
    let _controller = cluster.spawn_controller("restore");
    cluster.create_service("web", &[]).await;
    let ours = wait_for_ingress(&cluster.client(), "web").await;
    let api = Api::<Service>::namespaced(cluster.client(), "default");
    let theirs =
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.77", "ipMode": "VIP"}]}}});
    api.patch_status("web", &PatchParams::default(), &Patch::Merge(theirs))
        .await
        .unwrap();
    let restored = eventually(Duration::from_secs(5), "the address restored", || {
        let api = api.clone();
        async move {
            let svc = api.get("web").await.ok()?;
            let now = ingress(&svc);
            (now.first().map(|i| i.0.as_str()) != Some("192.0.2.77")).then_some(now)
        }
    })
    .await;
    assert_eq!(restored, ours, "the same address as before");
    let event = event_for(&cluster, "web", "StatusRestored", Duration::from_secs(5)).await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("192.0.2.77"),
        "{:?}",
        event.note
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_moved_to_another_class_is_released_without_touching_the_new_owners_status() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.43.0/28"], None).await;
    let _controller = cluster.spawn_controller("release");
    cluster.create_service("web", &[]).await;
    wait_for_ingress(&cluster.client(), "web").await;
    let api = Api::<Service>::namespaced(cluster.client(), "default");
    let pp = PatchParams::default();
    // `loadBalancerClass` is immutable on a LoadBalancer Service: moving to another
    // implementation goes through ClusterIP. Both steps and the new owner's status write come
    // at once, before FerroLB has looked.
    let to_cluster_ip = json!({"spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "nodePort": null}]}});
    api.patch("web", &pp, &Patch::Merge(to_cluster_ip))
        .await
        .unwrap();
    let to_other =
        json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": "other.example/lb"}});
    api.patch("web", &pp, &Patch::Merge(to_other))
        .await
        .unwrap();
    let theirs =
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.50", "ipMode": "VIP"}]}}});
    api.patch_status("web", &pp, &Patch::Merge(theirs))
        .await
        .unwrap();
    let svc = eventually(Duration::from_secs(10), "the pool annotation to go", || {
        let api = api.clone();
        async move {
            let svc = api.get("web").await.ok()?;
            (!annotated(&svc)).then_some(svc)
        }
    })
    .await;
    assert_eq!(
        ingress(&svc),
        vec![("192.0.2.50".to_string(), "VIP".to_string())],
        "the new owner's address stays"
    );
}
