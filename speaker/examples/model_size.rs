#![allow(unsafe_code)] // a counting global allocator forwards to the system one
//! How many bytes the speaker's model of a large cluster holds (a counting allocator).
//!
//! `cargo run --release -p ferrolb-speaker --example model_size`
//!
//! Each LoadBalancer Service carries three labels (as a chart would set them);
//! `FERROLB_MODEL_LABELS=0` leaves them out.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use ferrolb_speaker::cluster::{Cluster, Scope, Update};
use ferrolb_speaker::planner::incremental::{BgpTracker, L2Tracker};
use serde_json::json;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn mib() -> f64 {
    LIVE.load(Ordering::Relaxed) as f64 / 1048576.0
}

fn main() {
    let (n, others, nodes) = (10_000usize, 50_000usize, 1000usize);
    let base = mib();
    let mut c = Cluster::new(Scope {
        this_node: "node-0000".into(),
        class: "ferrolb.io/ferrolb".into(),
        ignore_unclassed: false,
    });
    for i in 0..nodes {
        c.node(Update::Apply(serde_json::from_value(json!({"metadata": {"name": format!("node-{i:04}"), "labels": {"kubernetes.io/hostname": format!("node-{i:04}")}}})).unwrap()));
    }
    c.pool(Update::Apply(serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ferrolb-system"}, "spec": {"addresses": ["10.128.0.0/16"]}})).unwrap()));
    c.l2_advertisement(Update::Apply(
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ferrolb-system"}, "spec": {}}),
        )
        .unwrap(),
    ));
    let after_nodes = mib();
    let labelled = std::env::var("FERROLB_MODEL_LABELS").as_deref() != Ok("0");
    for i in 0..n {
        let labels = if labelled {
            json!({"app.kubernetes.io/name": format!("lb-{i:05}"), "app.kubernetes.io/managed-by": "Helm", "tier": "public"})
        } else {
            json!({})
        };
        c.service(Update::Apply(serde_json::from_value(json!({
            "metadata": {"name": format!("lb-{i:05}"), "namespace": "bench", "uid": "0b6e3f0e-5d4c-4b8a-9a53-2f7c1e9d8a01", "labels": labels},
            "spec": {"type": "LoadBalancer"},
            "status": {"loadBalancer": {"ingress": [{"ip": format!("10.128.{}.{}", i / 250, i % 250 + 1)}]}}
        })).unwrap()));
    }
    let after_services = mib();
    let slice = |svc: String, node: usize| -> k8s_openapi::api::discovery::v1::EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{svc}-1"), "namespace": "bench", "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.0.1"], "nodeName": format!("node-{node:04}"), "conditions": {"ready": true}}],
        })).unwrap()
    };
    for i in 0..n {
        c.slice(Update::Apply(slice(format!("lb-{i:05}"), i % nodes)));
    }
    let after_lb_slices = mib();
    for i in 0..others {
        c.slice(Update::Apply(slice(format!("other-{i:05}"), i % nodes)));
    }
    let after_other_slices = mib();
    let changes = c.take_changes();
    let live = std::collections::BTreeSet::from(["node-0000".to_string()]);
    let mut l2 = L2Tracker::new();
    l2.update(
        &c,
        &changes,
        &live,
        &Default::default(),
        &Default::default(),
    );
    let after_l2 = mib();
    let mut bgp = BgpTracker::new();
    bgp.update(&c, &changes);
    let after_bgp = mib();
    println!("nodes {:.1} MiB", after_nodes - base);
    println!("{n} services {:.1} MiB", after_services - after_nodes);
    println!("{n} LB slices {:.1} MiB", after_lb_slices - after_services);
    println!(
        "{others} other slices {:.1} MiB",
        after_other_slices - after_lb_slices
    );
    println!("l2 plan {:.1} MiB", after_l2 - after_other_slices);
    println!("bgp plan {:.1} MiB", after_bgp - after_l2);
    println!("total {:.1} MiB", mib() - base);
}
