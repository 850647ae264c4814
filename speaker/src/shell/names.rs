//! The names and labels of the per-node status objects the speaker writes. Pure.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ferrolb_api::names;

/// The name of a per-node status object for a Service: `<service>.<namespace>.<node>`,
/// shortened with a hash when it would pass the 253-character limit.
pub fn status_object_name(namespace: &str, service: &str, node: &str) -> String {
    object_name(&[service, namespace, node])
}

/// `parts` joined with dots, shortened with a hash when the name would pass the
/// 253-character limit of an object name.
pub fn object_name(parts: &[&str]) -> String {
    let full = parts.join(".");
    if full.len() <= 253 {
        return full;
    }
    let hash = crate::l2::election::score(&full, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    format!("{}.{hash:016x}", &full[..230])
}

/// Labels that tie a status object to its Service and node.
pub fn status_labels(namespace: &str, service: &str, node: &str) -> BTreeMap<String, String> {
    [
        (names::STATUS_NODE_LABEL, node),
        (names::STATUS_SERVICE_NAME_LABEL, service),
        (names::STATUS_SERVICE_NAMESPACE_LABEL, namespace),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_object_names_stay_within_the_kubernetes_limit() {
        assert_eq!(
            status_object_name("default", "web", "node-a"),
            "web.default.node-a"
        );
        let long = "n".repeat(250);
        assert!(status_object_name("default", "web", &long).len() <= 253);
    }
}
