//! When two Services may hold the same address. Pure: no I/O, no clock.
//!
//! Two Services may share an address when they carry the same `allow-shared-ip` key, no
//! (port, protocol) pair appears in both, and their `externalTrafficPolicy` is compatible:
//! both `Cluster`, or both `Local` with the same pod selector (with `Local`, the nodes that
//! attract the address are those with endpoints, so both Services must have the same ones).

use std::net::IpAddr;

use super::outcome::AllocationError;
use super::request::{ServiceRequest, TrafficPolicy};

/// Why `a` may not join `b` on an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// No key, or different keys.
    NotShareable,
    /// Both use this port and protocol.
    Port(u16, super::request::Protocol),
    /// Incompatible traffic policies or pod selectors.
    Policy,
}

/// Whether `a` may share an address with `b`.
pub(crate) fn may_share(a: &ServiceRequest, b: &ServiceRequest) -> Result<(), Conflict> {
    match (&a.sharing_key, &b.sharing_key) {
        (Some(x), Some(y)) if x == y => {}
        _ => return Err(Conflict::NotShareable),
    }
    if let Some(&(port, proto)) = a.ports.iter().find(|p| b.ports.contains(p)) {
        return Err(Conflict::Port(port, proto));
    }
    let compatible = match (a.traffic_policy, b.traffic_policy) {
        (TrafficPolicy::Cluster, TrafficPolicy::Cluster) => true,
        (TrafficPolicy::Local, TrafficPolicy::Local) => a.pod_selector == b.pod_selector,
        _ => false,
    };
    if compatible {
        Ok(())
    } else {
        Err(Conflict::Policy)
    }
}

impl Conflict {
    /// The refusal to report when `a` asked for `ip`, held by `holder`.
    pub(crate) fn into_error(self, ip: IpAddr, holder: &ServiceRequest) -> AllocationError {
        let with = holder.key.clone();
        match self {
            Conflict::NotShareable => AllocationError::RequestedIpInUse { ip, by: with },
            Conflict::Port(port, protocol) => AllocationError::SharingPortConflict {
                ip,
                with,
                port,
                protocol,
            },
            Conflict::Policy => AllocationError::SharingPolicyConflict { ip, with },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::request::Protocol;
    use super::*;

    fn svc(name: &str, key: Option<&str>, ports: &[(u16, Protocol)]) -> ServiceRequest {
        ServiceRequest {
            sharing_key: key.map(str::to_owned),
            ports: ports.to_vec(),
            ..ServiceRequest::new("ns", name)
        }
    }

    #[test]
    fn the_same_key_and_distinct_ports_may_share() {
        let a = svc("a", Some("k"), &[(80, Protocol::Tcp)]);
        let b = svc("b", Some("k"), &[(80, Protocol::Udp), (443, Protocol::Tcp)]);
        assert_eq!(may_share(&a, &b), Ok(()));
    }

    #[test]
    fn a_missing_or_different_key_forbids_sharing() {
        let a = svc("a", Some("k"), &[(80, Protocol::Tcp)]);
        let b = svc("b", Some("other"), &[(81, Protocol::Tcp)]);
        let c = svc("c", None, &[(82, Protocol::Tcp)]);
        assert_eq!(may_share(&a, &b), Err(Conflict::NotShareable));
        assert_eq!(may_share(&c, &c), Err(Conflict::NotShareable));
    }

    #[test]
    fn the_same_port_and_protocol_forbids_sharing() {
        let a = svc("a", Some("k"), &[(53, Protocol::Udp)]);
        let b = svc("b", Some("k"), &[(53, Protocol::Udp)]);
        assert_eq!(may_share(&a, &b), Err(Conflict::Port(53, Protocol::Udp)));
    }

    #[test]
    fn local_services_share_only_with_the_same_pod_selector() {
        let mut a = svc("a", Some("k"), &[(80, Protocol::Tcp)]);
        let mut b = svc("b", Some("k"), &[(81, Protocol::Tcp)]);
        a.traffic_policy = TrafficPolicy::Local;
        assert_eq!(may_share(&a, &b), Err(Conflict::Policy));
        b.traffic_policy = TrafficPolicy::Local;
        a.pod_selector.insert("app".into(), "x".into());
        assert_eq!(may_share(&a, &b), Err(Conflict::Policy));
        b.pod_selector.insert("app".into(), "x".into());
        assert_eq!(may_share(&a, &b), Ok(()));
    }
}
