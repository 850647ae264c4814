//! What FerroLB reads from a core `Service`, shared by the controller and the speaker. Pure.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

/// A Service's identity, the key every FerroLB decision is made under.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ServiceKey {
    /// The key of Service `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a Service object.
    pub fn of(svc: &Service) -> Self {
        Self::new(svc.namespace().unwrap_or_default(), svc.name_any())
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The addresses in `status.loadBalancer.ingress`, in order; entries without a parseable `ip`
/// (hostname-only ingress written by another implementation) are skipped.
pub fn ingress_ips(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

/// Whether FerroLB handles `svc`: `type: LoadBalancer`, not being deleted, and
/// `spec.loadBalancerClass` equal to `class`, or unset unless `ignore_unclassed`.
pub fn handled(svc: &Service, class: &str, ignore_unclassed: bool) -> bool {
    let Some(spec) = &svc.spec else { return false };
    if spec.type_.as_deref() != Some("LoadBalancer") || svc.metadata.deletion_timestamp.is_some() {
        return false;
    }
    match spec.load_balancer_class.as_deref() {
        None => !ignore_unclassed,
        Some(c) => c == class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus,
    };

    fn svc(type_: &str, class: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn load_balancers_of_our_class_or_without_class_are_handled() {
        assert!(handled(
            &svc("LoadBalancer", None),
            "ferrolb.io/ferrolb",
            false
        ));
        assert!(handled(
            &svc("LoadBalancer", Some("ferrolb.io/ferrolb")),
            "ferrolb.io/ferrolb",
            false
        ));
        assert!(!handled(
            &svc("LoadBalancer", Some("other")),
            "ferrolb.io/ferrolb",
            false
        ));
        assert!(!handled(
            &svc("LoadBalancer", None),
            "ferrolb.io/ferrolb",
            true
        ));
        assert!(!handled(
            &svc("NodePort", None),
            "ferrolb.io/ferrolb",
            false
        ));
    }

    #[test]
    fn hostname_only_ingress_entries_are_skipped() {
        let mut s = svc("LoadBalancer", None);
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        hostname: Some("lb.example".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("10.0.0.1".into()),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        });
        assert_eq!(ingress_ips(&s), vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
    }
}
