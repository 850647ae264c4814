//! Kubernetes objects to the allocator's plain data and back. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use ferrolb_api::names;
use ferrolb_api::v1beta1::{IPAddressPool, IpMode as ApiIpMode};
use ferrolb_api::validate::PoolVerdict;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::ResourceExt;

use crate::allocator::{
    AddressRange, AllocationError, Assignment, FamilyPolicy, IpFamily, IpMode, Pool, Protocol,
    ServiceKey, ServiceRequest, TrafficPolicy, requested_from_annotations,
};

/// Which Services this controller handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassFilter {
    /// The `spec.loadBalancerClass` handled (default `ferrolb.io/ferrolb`).
    pub class: String,
    /// Leave Services without a `loadBalancerClass` alone (another implementation owns them).
    pub ignore_unclassed: bool,
}

impl ClassFilter {
    /// Whether `svc` is a LoadBalancer Service this controller must give addresses to.
    pub fn is_ours(&self, svc: &Service) -> bool {
        ferrolb_api::service::handled(svc, &self.class, self.ignore_unclassed)
    }
}

/// The key of a Service.
pub fn service_key(svc: &Service) -> ServiceKey {
    ServiceKey::of(svc)
}

/// The allocator's view of a pool, given the cross-object verdict on it.
pub fn pool_from_api(
    pool: &IPAddressPool,
    verdict: Option<&PoolVerdict>,
    default_mode: IpMode,
) -> Pool {
    let alloc = pool.spec.service_allocation.clone().unwrap_or_default();
    let (ready, addresses) = match verdict {
        Some(PoolVerdict::Ready(ranges)) => (true, ranges.clone()),
        _ => (
            false,
            // A pool that is not ready still contains the addresses it can parse, so Services
            // holding them keep them until the user fixes the conflict.
            pool.spec
                .addresses
                .iter()
                .filter_map(|e| ferrolb_api::validate::AddressRange::parse(e).ok())
                .collect(),
        ),
    };
    Pool {
        name: pool.name_any(),
        created: pool
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
        addresses: addresses
            .into_iter()
            .filter_map(|r| AddressRange::new(r.start, r.end).ok())
            .collect(),
        auto_assign: pool.spec.auto_assign,
        avoid_buggy_ips: pool.spec.avoid_buggy_ips,
        priority: alloc.priority,
        namespaces: alloc.namespaces,
        namespace_selectors: alloc.namespace_selectors,
        service_selectors: alloc.service_selectors,
        ip_mode: match pool.spec.ip_mode {
            Some(ApiIpMode::Vip) => IpMode::Vip,
            Some(ApiIpMode::Proxy) => IpMode::Proxy,
            None => default_mode,
        },
        ready,
    }
}

/// The allocator's view of every pool, sorted by name, each with the cross-object verdict on it
/// ([`ferrolb_api::validate::check_pools`]).
pub fn allocator_pools(pools: &[IPAddressPool], default_mode: IpMode) -> Vec<Pool> {
    let verdicts = ferrolb_api::validate::check_pools(pools);
    let mut out: Vec<Pool> = pools
        .iter()
        .map(|p| pool_from_api(p, verdicts.get(&p.name_any()), default_mode))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The allocator's view of a Service. Fails when its annotations are contradictory (an error
/// on the Service, not a guess).
pub fn request_from_service(
    svc: &Service,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<ServiceRequest, AllocationError> {
    let spec = svc.spec.clone().unwrap_or_default();
    let requested =
        requested_from_annotations(svc.annotations(), spec.load_balancer_ip.as_deref())?;
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                _ => Protocol::Tcp,
            };
            (p.port as u16, protocol)
        })
        .collect();
    let families = spec
        .ip_families
        .iter()
        .flatten()
        .filter_map(|f| match f.as_str() {
            "IPv4" => Some(IpFamily::V4),
            "IPv6" => Some(IpFamily::V6),
            _ => None,
        })
        .collect();
    Ok(ServiceRequest {
        key: service_key(svc),
        labels: svc.labels().clone(),
        namespace_labels: namespace_labels.clone(),
        requested_pool: requested.pool,
        requested_ips: requested.ips,
        sharing_key: requested.sharing_key,
        ports,
        traffic_policy: match spec.external_traffic_policy.as_deref() {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        },
        pod_selector: spec.selector.unwrap_or_default(),
        families,
        family_policy: match spec.ip_family_policy.as_deref() {
            Some("PreferDualStack") => FamilyPolicy::PreferDualStack,
            Some("RequireDualStack") => FamilyPolicy::RequireDualStack,
            _ => FamilyPolicy::SingleStack,
        },
        current_ips: ferrolb_api::service::ingress_ips(svc),
    })
}

/// The `ipMode` for a Service: its `ferrolb.io/ip-mode` annotation, else the pool's.
pub fn effective_ip_mode(svc: &Service, pool_mode: IpMode) -> IpMode {
    match svc.annotations().get(names::IP_MODE).map(|s| s.trim()) {
        Some("Proxy") => IpMode::Proxy,
        Some("VIP") => IpMode::Vip,
        _ => pool_mode,
    }
}

/// The `status.loadBalancer.ingress` list for an assignment (one entry per address, in the
/// Service's family order).
pub fn desired_ingress(svc: &Service, assignment: Option<&Assignment>) -> Vec<LoadBalancerIngress> {
    let Some(a) = assignment else { return vec![] };
    let mode = effective_ip_mode(svc, a.ip_mode);
    a.ips
        .iter()
        .map(|ip| LoadBalancerIngress {
            ip: Some(ip.to_string()),
            ip_mode: Some(
                match mode {
                    IpMode::Vip => "VIP",
                    IpMode::Proxy => "Proxy",
                }
                .into(),
            ),
            ..Default::default()
        })
        .collect()
}

/// The ingress list a Service shows now, reduced to what we write (ip and ipMode).
pub fn current_ingress(svc: &Service) -> Vec<LoadBalancerIngress> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|i| LoadBalancerIngress {
            ip: i.ip,
            ip_mode: i.ip_mode,
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    fn svc(class: Option<&str>, type_: &str) -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(Into::into),
                ports: Some(vec![ServicePort {
                    port: 53,
                    protocol: Some("UDP".into()),
                    ..Default::default()
                }]),
                ip_families: Some(vec!["IPv6".into(), "IPv4".into()]),
                ip_family_policy: Some("PreferDualStack".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn filter(ignore_unclassed: bool) -> ClassFilter {
        ClassFilter {
            class: names::DEFAULT_LOAD_BALANCER_CLASS.into(),
            ignore_unclassed,
        }
    }

    #[test]
    fn only_load_balancer_services_of_our_class_or_unclassed_are_ours() {
        assert!(filter(false).is_ours(&svc(None, "LoadBalancer")));
        assert!(filter(false).is_ours(&svc(Some("ferrolb.io/ferrolb"), "LoadBalancer")));
        assert!(!filter(false).is_ours(&svc(Some("other.io/lb"), "LoadBalancer")));
        assert!(!filter(false).is_ours(&svc(None, "ClusterIP")));
        assert!(!filter(true).is_ours(&svc(None, "LoadBalancer")));
    }

    #[test]
    fn a_service_request_carries_ports_families_and_policy() {
        let req = request_from_service(&svc(None, "LoadBalancer"), &BTreeMap::new()).unwrap();
        assert_eq!(req.ports, vec![(53, Protocol::Udp)]);
        assert_eq!(req.families, vec![IpFamily::V6, IpFamily::V4]);
        assert_eq!(req.family_policy, FamilyPolicy::PreferDualStack);
    }

    #[test]
    fn the_ip_mode_annotation_overrides_the_pool() {
        let mut s = svc(None, "LoadBalancer");
        s.metadata.annotations = Some([(names::IP_MODE.to_string(), "Proxy".to_string())].into());
        let a = Assignment {
            ips: vec!["10.0.0.1".parse().unwrap()],
            pool: "p".into(),
            ip_mode: IpMode::Vip,
        };
        let ingress = desired_ingress(&s, Some(&a));
        assert_eq!(ingress[0].ip_mode.as_deref(), Some("Proxy"));
        assert_eq!(ingress[0].ip.as_deref(), Some("10.0.0.1"));
    }
}
