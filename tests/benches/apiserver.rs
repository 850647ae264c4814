//! Throughput of the test API server through kube-rs, printed as figures:
//! `cargo bench -p ferrolb-tests --bench apiserver`.

use std::time::{Duration, Instant};

use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const N: usize = 500;

fn rate(what: &str, n: usize, took: Duration) {
    println!(
        "{what:<40} {n:>5} in {:>7.3} s  = {:>8.0} /s",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    ferrolb_tests::provenance::print();
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crds");
    let server = ApiServer::start(ApiServerConfig::default().with_crd_dir(crds))
        .await
        .unwrap();
    let client = server.client();
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");

    let t = Instant::now();
    for i in 0..N {
        let s: Service = serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})).unwrap();
        svcs.create(&PostParams::default(), &s).await.unwrap();
    }
    rate("Service create (LoadBalancer)", N, t.elapsed());

    let t = Instant::now();
    for i in 0..N {
        let st = json!({"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {"ingress": [{"ip": format!("192.0.2.{}", i % 250), "ipMode": "VIP"}]}}});
        svcs.patch_status(
            &format!("s{i}"),
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&st),
        )
        .await
        .unwrap();
    }
    rate("Service status server-side apply", N, t.elapsed());

    let t = Instant::now();
    let list = svcs.list(&Default::default()).await.unwrap();
    rate(
        "Service list (objects listed)",
        list.items.len(),
        t.elapsed(),
    );

    let gvk = GroupVersionKind::gvk("test.ferrolb.io", "v1", "Gadget");
    let gadgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    let t = Instant::now();
    for i in 0..N {
        let g: DynamicObject = serde_json::from_value(json!({"apiVersion": "test.ferrolb.io/v1", "kind": "Gadget", "metadata": {"name": format!("g{i}")}, "spec": {"pool": "p", "low": 1, "high": 2}})).unwrap();
        gadgets.create(&PostParams::default(), &g).await.unwrap();
    }
    rate("Custom resource create (schema + CEL)", N, t.elapsed());

    // Latency from a write's answer to its watch event.
    let rv = svcs
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = svcs
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut lat = Vec::new();
    for i in 0..200 {
        let p = json!({"metadata": {"labels": {"n": i.to_string()}}});
        let t = Instant::now();
        svcs.patch("s0", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap();
        loop {
            if let Some(Ok(WatchEvent::Modified(_))) = stream.next().await {
                break;
            }
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "{:<40} p50 {:?}  p99 {:?}",
        "patch round trip + watch event",
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100]
    );
}
