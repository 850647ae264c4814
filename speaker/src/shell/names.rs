//! The names, labels and owners of the per-node objects the speaker writes. Pure.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ferrolb_api::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

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

/// The metadata of an object about this node (`BGPSessionState`, `ConfigurationState`): its
/// name, namespace and labels, owned by the node's `Node` once its uid is known, so that the
/// object goes when the Node does.
pub fn node_owned(
    name: &str,
    namespace: &str,
    node: &str,
    node_uid: Option<&str>,
    labels: &[(&str, &str)],
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        owner_references: node_uid.map(|uid| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.to_owned(),
                uid: uid.to_owned(),
                ..Default::default()
            }]
        }),
        ..Default::default()
    }
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
