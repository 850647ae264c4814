//! From Kubernetes and FerroLB objects to the planner's plain structs. Pure: no I/O, no clock.

use std::net::IpAddr;

use super::input::{
    AddressType, BgpAdvertisementInfo, BgpPeerInfo, EndpointInfo, L2AdvertisementInfo, NodeInfo,
    PoolInfo, ServiceInfo, ServiceKey,
};
use super::records::ServiceRec;
use ferrolb_api::names::SERVICE_NAME_LABEL;
use ferrolb_api::service::handled;
use ferrolb_api::v1beta1::{BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement};
use ferrolb_api::validate::{PoolVerdict, check_pools};
use ferrolb_api::validate::{community_aliases, resolve_communities};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// The Service's key.
pub fn service_key(svc: &Service) -> ServiceKey {
    ServiceKey::of(svc)
}

/// A Service as the speaker keeps it, or `None` when FerroLB does not announce it: not handled
/// ([`ferrolb_api::service::handled`]: type, class, `ignore_unclassed`, being deleted; the same
/// rule as the controller's) or no ingress address.
pub fn service_rec(svc: &Service, class: &str, ignore_unclassed: bool) -> Option<ServiceRec> {
    if !handled(svc, class, ignore_unclassed) {
        return None;
    }
    let mut ingress = ferrolb_api::service::ingress_ips(svc);
    ingress.sort();
    ingress.dedup();
    if ingress.is_empty() {
        return None;
    }
    Some(ServiceRec {
        key: service_key(svc),
        ingress: ingress.into(),
        local_traffic_policy: svc
            .spec
            .as_ref()
            .and_then(|s| s.external_traffic_policy.as_deref())
            == Some("Local"),
        uid: svc.metadata.uid.clone(),
        labels: svc.labels().into(),
    })
}

/// A Service as the planner sees it (see [`service_rec`]), with the endpoints of those of
/// `slices` labelled `kubernetes.io/service-name` with its name in its namespace.
pub fn service_info(
    svc: &Service,
    slices: &[EndpointSlice],
    class: &str,
    ignore_unclassed: bool,
) -> Option<ServiceInfo> {
    let rec = service_rec(svc, class, ignore_unclassed)?;
    let endpoints = slices
        .iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(rec.key.namespace.as_str())
                && s.labels().get(SERVICE_NAME_LABEL) == Some(&rec.key.name)
        })
        .flat_map(|s| endpoints(s, &mut |n| n.into()))
        .collect();
    Some(ServiceInfo {
        key: rec.key,
        ingress: rec.ingress.into(),
        local_traffic_policy: rec.local_traffic_policy,
        endpoints,
        labels: rec.labels,
    })
}

/// The endpoints of one EndpointSlice, each with the slice's `addressType`; `intern` gives the
/// shared copy of a node name.
pub fn endpoints(
    slice: &EndpointSlice,
    intern: &mut dyn FnMut(&str) -> std::sync::Arc<str>,
) -> Vec<EndpointInfo> {
    let address_type = AddressType::of(&slice.address_type);
    slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.as_ref();
            EndpointInfo {
                node_name: e.node_name.as_deref().map(&mut *intern),
                ready: c.and_then(|c| c.ready),
                serving: c.and_then(|c| c.serving),
                terminating: c.and_then(|c| c.terminating),
                address_type,
            }
        })
        .collect()
}

/// A Node as the planner sees it.
pub fn node_info(node: &Node) -> NodeInfo {
    let status = node.status.as_ref();
    let conditions = || {
        status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
    };
    let network_unavailable =
        conditions().any(|c| c.type_ == "NetworkUnavailable" && c.status == "True");
    let ready = conditions().any(|c| c.type_ == "Ready" && c.status == "True");
    let mut addresses: Vec<IpAddr> = status
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    // The first of each family is the one a router reaches the node by (the kubelet lists
    // its primary address first).
    let mut seen = (false, false);
    addresses.retain(|a| {
        let first = if a.is_ipv4() {
            &mut seen.0
        } else {
            &mut seen.1
        };
        !std::mem::replace(first, true)
    });
    NodeInfo {
        name: node.name_any(),
        labels: node.labels().clone(),
        network_unavailable,
        ready,
        addresses,
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
        // The schema keeps weights within 1..=100; anything else (an object written before
        // the schema had the rule) counts as the nearest bound.
        preferred: adv
            .spec
            .preferred_node_selectors
            .iter()
            .map(|p| (p.weight.clamp(1, 100) as u32, p.preference.clone()))
            .collect(),
        service_selectors: adv.spec.service_selectors.clone(),
    }
}

/// The BGP advertisements with their community aliases resolved.
pub fn bgp_advertisements(
    advertisements: &[BGPAdvertisement],
    communities: &[Community],
) -> Vec<BgpAdvertisementInfo> {
    let aliases = community_aliases(communities).unwrap_or_default();
    advertisements
        .iter()
        .map(|a| BgpAdvertisementInfo {
            name: a.name_any(),
            pools: a.spec.ip_address_pools.clone(),
            pool_selectors: a.spec.ip_address_pool_selectors.clone(),
            node_selectors: a.spec.node_selectors.clone(),
            peers: a.spec.peers.clone(),
            aggregation_length: a.spec.aggregation_length.unwrap_or(32).clamp(0, 32) as u8,
            aggregation_length_v6: a.spec.aggregation_length_v6.unwrap_or(128).clamp(0, 128) as u8,
            local_pref: a.spec.local_pref,
            communities: resolve_communities(&a.spec.communities, &aliases),
            service_selectors: a.spec.service_selectors.clone(),
        })
        .collect()
}

/// The peers as the planner sees them.
pub fn bgp_peer_infos(peers: &[BGPPeer]) -> Vec<BgpPeerInfo> {
    peers
        .iter()
        .map(|p| BgpPeerInfo {
            name: p.name_any(),
            node_selectors: p.spec.node_selectors.clone(),
            announce_all_nodes: p.spec.announce_all_nodes,
        })
        .collect()
}
