//! Kubernetes objects for the model's and the trackers' tests, built as a user would write them.

use ferrolb_api::v1beta1::{BGPAdvertisement, BGPPeer, IPAddressPool, L2Advertisement};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

/// A LoadBalancer Service holding `ips`.
pub fn service(ns: &str, name: &str, ips: &[&str], local: bool) -> Service {
    labelled_service(ns, name, ips, local, &[])
}

/// A LoadBalancer Service holding `ips`, with `labels`.
pub fn labelled_service(
    ns: &str,
    name: &str,
    ips: &[&str],
    local: bool,
    labels: &[(&str, &str)],
) -> Service {
    let ingress: Vec<_> = ips.iter().map(|ip| json!({ "ip": ip })).collect();
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
        },
        "status": {"loadBalancer": {"ingress": ingress}},
    }))
    .unwrap()
}

/// A ClusterIP Service.
pub fn cluster_ip_service(ns: &str, name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"type": "ClusterIP"},
    }))
    .unwrap()
}

/// An `IPv4` EndpointSlice of Service `service` with one endpoint per (node, ready).
pub fn slice(ns: &str, name: &str, service: &str, endpoints: &[(&str, bool)]) -> EndpointSlice {
    slice_of("IPv4", ns, name, service, endpoints)
}

/// An EndpointSlice of `address_type` (`IPv4`, `IPv6`, `FQDN`) of Service `service` with one
/// endpoint per (node, ready).
pub fn slice_of(
    address_type: &str,
    ns: &str,
    name: &str,
    service: &str,
    endpoints: &[(&str, bool)],
) -> EndpointSlice {
    let endpoints: Vec<_> = endpoints
        .iter()
        .enumerate()
        .map(|(i, (node, ready))| {
            let address = match address_type {
                "IPv6" => format!("fd00:244::{:x}", i + 1),
                "FQDN" => format!("backend-{}.example.com", i + 1),
                _ => format!("10.244.0.{}", i + 1),
            };
            json!({
                "addresses": [address],
                "nodeName": node,
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": address_type,
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// A Ready Node with `labels`, and InternalIP addresses of both families made from its name
/// (`10.250.0.N`, `fd00:250::N`).
pub fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    let n = name.bytes().map(u32::from).sum::<u32>() % 250 + 1;
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [
                {"type": "InternalIP", "address": format!("10.250.0.{n}")},
                {"type": "InternalIP", "address": format!("fd00:250::{n:x}")},
                {"type": "Hostname", "address": name},
            ],
        },
    }))
    .unwrap()
}

/// A pool of `addresses`.
pub fn pool(name: &str, addresses: &[&str]) -> IPAddressPool {
    serde_json::from_value(json!({
        "metadata": {"namespace": "ferrolb-system", "name": name,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"addresses": addresses},
    }))
    .unwrap()
}

/// An L2Advertisement for `pools` (all when empty), on nodes labelled `node_label` when set.
pub fn l2_advertisement(
    name: &str,
    pools: &[&str],
    node_label: Option<(&str, &str)>,
) -> L2Advertisement {
    let selectors: Vec<_> = node_label
        .map(|(k, v)| json!({"matchLabels": {k: v}}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "ferrolb-system", "name": name},
        "spec": {"ipAddressPools": pools, "nodeSelectors": selectors},
    }))
    .unwrap()
}

/// An L2Advertisement for every pool, announcing the Services labelled with one of
/// `service_labels` (every Service when empty).
pub fn selective_l2_advertisement(name: &str, service_labels: &[(&str, &str)]) -> L2Advertisement {
    serde_json::from_value(json!({
        "metadata": {"namespace": "ferrolb-system", "name": name},
        "spec": {"serviceSelectors": match_labels(service_labels)},
    }))
    .unwrap()
}

/// An L2Advertisement for every pool, on nodes labelled `node_label` when set, for the
/// Services labelled with one of `service_labels` (all when empty), on `interfaces`.
pub fn l2_advertisement_for(
    name: &str,
    node_label: Option<(&str, &str)>,
    service_labels: &[(&str, &str)],
    interfaces: &[&str],
) -> L2Advertisement {
    let mut adv = selective_l2_advertisement(name, service_labels);
    adv.spec.node_selectors = l2_advertisement(name, &[], node_label).spec.node_selectors;
    adv.spec.interfaces = interfaces.iter().map(|i| i.to_string()).collect();
    adv
}

fn match_labels(pairs: &[(&str, &str)]) -> Vec<serde_json::Value> {
    pairs
        .iter()
        .map(|(k, v)| json!({"matchLabels": {*k: v}}))
        .collect()
}

/// A BGPAdvertisement for every pool.
pub fn bgp_advertisement(name: &str, aggregation_length: Option<i32>) -> BGPAdvertisement {
    selective_bgp_advertisement(name, aggregation_length, &[])
}

/// A BGPAdvertisement for every pool, announcing the Services labelled with one of
/// `service_labels` (every Service when empty).
pub fn selective_bgp_advertisement(
    name: &str,
    aggregation_length: Option<i32>,
    service_labels: &[(&str, &str)],
) -> BGPAdvertisement {
    let mut spec = json!({"serviceSelectors": match_labels(service_labels)});
    if let Some(len) = aggregation_length {
        spec["aggregationLength"] = json!(len);
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": "ferrolb-system", "name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// A BGPPeer for every node.
pub fn peer(name: &str, address: &str) -> BGPPeer {
    serde_json::from_value(json!({
        "metadata": {"namespace": "ferrolb-system", "name": name},
        "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": address},
    }))
    .unwrap()
}

/// A BGPPeer at `address` that carries every node's paths (`announceAllNodes`).
pub fn peer_for_all_nodes(name: &str, address: &str) -> BGPPeer {
    let mut p = peer(name, address);
    p.spec.announce_all_nodes = true;
    p
}
