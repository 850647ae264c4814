//! What FerroLB reads from a core `Service`, shared by the controller and the speaker. Pure.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

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
        Self::new(KeyRef::namespace(svc), KeyRef::name(svc))
    }
}

/// A `namespace/name` pair looked up in a map keyed by [`ServiceKey`] without building one:
/// `map.get(&("ns", "name") as &dyn KeyRef)`. Hashes and compares as the key it names does.
pub trait KeyRef {
    /// `metadata.namespace`.
    fn namespace(&self) -> &str;
    /// `metadata.name`.
    fn name(&self) -> &str;
}

impl KeyRef for ServiceKey {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// A Service names the key [`ServiceKey::of`] would build for it.
impl KeyRef for Service {
    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }
    fn name(&self) -> &str {
        let meta = &self.metadata;
        meta.name
            .as_deref()
            .or(meta.generate_name.as_deref())
            .unwrap_or_default()
    }
}

impl KeyRef for (&str, &str) {
    fn namespace(&self) -> &str {
        self.0
    }
    fn name(&self) -> &str {
        self.1
    }
}

// The same hash as the derived one of `ServiceKey`: its fields in order, each as a `str`.
impl Hash for dyn KeyRef + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace().hash(state);
        self.name().hash(state);
    }
}

impl PartialEq for dyn KeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.namespace() == other.namespace() && self.name() == other.name()
    }
}

impl Eq for dyn KeyRef + '_ {}

impl<'a> Borrow<dyn KeyRef + 'a> for ServiceKey {
    fn borrow(&self) -> &(dyn KeyRef + 'a) {
        self
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
    fn a_key_is_found_in_a_map_by_its_namespace_and_name_without_building_one() {
        let mut map = std::collections::HashMap::new();
        for (ns, name) in [("a", "bc"), ("ab", "c"), ("default", "web")] {
            map.insert(ServiceKey::new(ns, name), format!("{ns}/{name}"));
        }
        let get = |ns: &str, name: &str| map.get(&(ns, name) as &dyn KeyRef).cloned();
        assert_eq!(get("default", "web").as_deref(), Some("default/web"));
        // The boundary between namespace and name counts: `a/bc` is not `ab/c`.
        assert_eq!(get("a", "bc").as_deref(), Some("a/bc"));
        assert_eq!(get("ab", "c").as_deref(), Some("ab/c"));
        assert_eq!(get("default", "we"), None);
        assert_eq!(get("", "web"), None);
        // A Service is found under the key `ServiceKey::of` builds for it.
        let svc = Service {
            metadata: kube::api::ObjectMeta {
                namespace: Some("default".into()),
                name: Some("web".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(ServiceKey::of(&svc).to_string(), "default/web");
        assert_eq!(
            map.get(&svc as &dyn KeyRef).map(String::as_str),
            Some("default/web")
        );
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
