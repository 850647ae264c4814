//! From Kubernetes and FerroLB objects to the planner's plain structs. Pure: no I/O, no clock.

use super::input::{
    EndpointInfo, L2AdvertisementInfo, NodeInfo, PoolInfo, ServiceInfo, ServiceKey,
};
use ferrolb_api::names::SERVICE_NAME_LABEL;
use ferrolb_api::v1beta1::{IPAddressPool, L2Advertisement};
use ferrolb_api::validate::{PoolVerdict, check_pools};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The Service's key.
pub fn service_key(svc: &Service) -> ServiceKey {
    ServiceKey::of(svc)
}

/// A Service as the planner sees it, or `None` when FerroLB does not announce it: not of type
/// `LoadBalancer`, another `loadBalancerClass` than `handled_class`, or no ingress address.
/// `slices` may hold every EndpointSlice of the cluster; those labelled
/// `kubernetes.io/service-name` with this Service's name in its namespace are merged.
pub fn service_info(
    svc: &Service,
    slices: &[EndpointSlice],
    handled_class: &str,
) -> Option<ServiceInfo> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    if spec
        .load_balancer_class
        .as_deref()
        .is_some_and(|c| c != handled_class)
    {
        return None;
    }
    let mut ingress: Vec<IpAddr> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    ingress.sort();
    ingress.dedup();
    if ingress.is_empty() {
        return None;
    }
    let key = service_key(svc);
    Some(ServiceInfo {
        endpoints: endpoints_of(&key, slices),
        local_traffic_policy: spec.external_traffic_policy.as_deref() == Some("Local"),
        key,
        ingress,
    })
}

/// Every endpoint of `key`'s Service, merged from all its EndpointSlices.
pub fn endpoints_of(key: &ServiceKey, slices: &[EndpointSlice]) -> Vec<EndpointInfo> {
    slices
        .iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(key.namespace.as_str())
                && s.labels().get(SERVICE_NAME_LABEL) == Some(&key.name)
        })
        .flat_map(|s| s.endpoints.iter())
        .map(|e| {
            let c = e.conditions.as_ref();
            EndpointInfo {
                node_name: e.node_name.clone(),
                ready: c.and_then(|c| c.ready),
                serving: c.and_then(|c| c.serving),
                terminating: c.and_then(|c| c.terminating),
            }
        })
        .collect()
}

/// A Node as the planner sees it.
pub fn node_info(node: &Node) -> NodeInfo {
    let network_unavailable = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "NetworkUnavailable" && c.status == "True");
    NodeInfo {
        name: node.name_any(),
        labels: node.labels().clone(),
        network_unavailable,
    }
}

/// The ready pools (valid, overlapping no older pool) with their parsed ranges.
pub fn pool_infos(pools: &[IPAddressPool]) -> Vec<PoolInfo> {
    let labels: BTreeMap<String, &BTreeMap<String, String>> =
        pools.iter().map(|p| (p.name_any(), p.labels())).collect();
    check_pools(pools)
        .into_iter()
        .filter_map(|(name, verdict)| match verdict {
            PoolVerdict::Ready(ranges) => Some(PoolInfo {
                labels: labels.get(&name).map(|l| (*l).clone()).unwrap_or_default(),
                name,
                ranges,
            }),
            PoolVerdict::NotReady(_) => None,
        })
        .collect()
}

/// An `L2Advertisement` as the planner sees it.
pub fn l2_advertisement_info(adv: &L2Advertisement) -> L2AdvertisementInfo {
    L2AdvertisementInfo {
        name: adv.name_any(),
        pools: adv.spec.ip_address_pools.clone(),
        pool_selectors: adv.spec.ip_address_pool_selectors.clone(),
        node_selectors: adv.spec.node_selectors.clone(),
        interfaces: adv.spec.interfaces.clone(),
    }
}
