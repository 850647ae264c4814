//! Gossip seeds and the fallback view of live speakers, from the speaker Pods and the Nodes.
//! Pure: no I/O, no clock.

use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

/// A speaker Pod as membership needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeakerPod {
    /// `spec.nodeName`.
    pub node: String,
    /// `status.podIP` (the node's address: speakers run on the host network).
    pub ip: Option<IpAddr>,
    /// The `Ready` condition is `True` and the Pod is not being deleted.
    pub ready: bool,
    /// When the `Ready` condition last became `True` (while it is), in seconds since the Unix
    /// epoch: every speaker reads the same value, so it dates a speaker's (re)start for the
    /// preference hold-down ([`crate::l2::arrivals`]).
    pub ready_since: Option<i64>,
}

/// Reads a speaker Pod; `None` when it is not scheduled yet.
pub fn speaker_pod(pod: &Pod) -> Option<SpeakerPod> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let status = pod.status.as_ref();
    let ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok());
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "True");
    let ready = pod.metadata.deletion_timestamp.is_none() && ready_condition.is_some();
    let ready_since = ready_condition
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second());
    Some(SpeakerPod {
        node,
        ip,
        ready,
        ready_since,
    })
}

/// Gossip seeds: every speaker Pod with an address, at the gossip `port`.
pub fn seeds(pods: &[SpeakerPod], port: u16) -> Vec<(String, SocketAddr)> {
    let mut out: Vec<(String, SocketAddr)> = pods
        .iter()
        .filter_map(|p| Some((p.node.clone(), SocketAddr::new(p.ip?, port))))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The live speakers as Kubernetes sees them, for when gossip cannot run: the nodes whose
/// speaker Pod is ready and whose `Ready` condition is `True`. Slower than gossip to notice a
/// death (the node lifecycle controller takes tens of seconds), but never empty by mistake.
pub fn kubernetes_live<'a>(
    pods: impl IntoIterator<Item = &'a SpeakerPod>,
    ready_nodes: &BTreeSet<String>,
) -> BTreeSet<String> {
    pods.into_iter()
        .filter(|p| p.ready && ready_nodes.contains(&p.node))
        .map(|p| p.node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, ip: &str, ready: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("speaker-{node}"), "namespace": "ferrolb"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    fn node(name: &str, ready: &str) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    #[test]
    fn seeds_are_the_speaker_pods_with_an_address() {
        let pods: Vec<SpeakerPod> = [
            pod("b", "10.99.0.12", "True"),
            pod("a", "10.99.0.11", "False"),
        ]
        .iter()
        .filter_map(speaker_pod)
        .collect();
        let mut unscheduled = pod("c", "", "False");
        unscheduled.spec.as_mut().unwrap().node_name = None;
        assert_eq!(speaker_pod(&unscheduled), None);
        assert_eq!(
            seeds(&pods, 7946),
            vec![
                ("a".to_string(), "10.99.0.11:7946".parse().unwrap()),
                ("b".to_string(), "10.99.0.12:7946".parse().unwrap())
            ]
        );
    }

    #[test]
    fn the_kubernetes_view_needs_a_ready_pod_on_a_ready_node() {
        let pods: Vec<SpeakerPod> = [
            pod("a", "10.99.0.11", "True"),
            pod("b", "10.99.0.12", "False"),
            pod("c", "10.99.0.13", "True"),
        ]
        .iter()
        .filter_map(speaker_pod)
        .collect();
        let ready: BTreeSet<String> = [node("a", "True"), node("b", "True"), node("c", "Unknown")]
            .iter()
            .filter(|n| {
                let conditions = n.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert_eq!(
            kubernetes_live(&pods, &ready),
            BTreeSet::from(["a".to_string()])
        );
    }
}
