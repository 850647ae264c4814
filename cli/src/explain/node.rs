//! `ferrolb explain node`: whether a node may announce at all, its speaker, its sessions and
//! what it announces.

use ferrolb_speaker::cluster;
use ferrolb_speaker::planner::{self, eligibility::node_may_announce};
use kube::ResourceExt;
use serde::Serialize;

use super::words;
use super::{Objects, Reason, Settings};

/// Everything `ferrolb explain node` says about one node.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The node.
    pub name: String,
    /// Whether the Node object exists.
    pub found: bool,
    /// Whether its Ready condition is True.
    pub ready: bool,
    /// Why it may announce nothing at all (exclusion label, NetworkUnavailable, no speaker).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_eligible: Vec<Reason>,
    /// Whether a ready speaker Pod runs on it.
    pub speaker_ready: bool,
    /// Its speaker's configuration check (`Valid`, `Invalid: ...`, or absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    /// The `L2Advertisement`s whose nodeSelectors leave it out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub l2_not_selected_by: Vec<String>,
    /// The `BGPPeer`s that select it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Its sessions: `peer (address): state`, with BFD and the last error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<String>,
    /// The Services it answers for over layer 2 (`namespace/name`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layer2: Vec<String>,
    /// The Services it announces over BGP (as its planner decides), with their peers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bgp: Vec<String>,
}

/// Explains node `name` from `objects`.
pub fn explain_node(objects: &Objects, settings: &Settings, name: &str) -> NodeExplanation {
    let node = objects.nodes.iter().find(|n| n.name_any() == name);
    let info = node.map(cluster::convert::node_info);
    let live = objects.live_speakers();
    let mut not_eligible = Vec::new();
    if let Some(Err(why)) = info.as_ref().map(node_may_announce) {
        not_eligible.push(words::not_eligible(
            why,
            None,
            None,
            name,
            "any advertisement",
        ));
    }
    if !live.contains(name) {
        not_eligible.push(words::not_eligible(
            planner::NotEligible::SpeakerNotLive,
            None,
            None,
            name,
            "any advertisement",
        ));
    }
    let labels = info.as_ref().map(|i| i.labels.clone()).unwrap_or_default();
    let l2_not_selected_by = objects
        .l2_advertisements
        .iter()
        .filter(|a| !ferrolb_api::selector::any_matches(&a.spec.node_selectors, &labels))
        .map(|a| a.name_any())
        .collect();
    let peers = objects
        .peers
        .iter()
        .filter(|p| ferrolb_api::selector::any_matches(&p.spec.node_selectors, &labels))
        .map(|p| p.name_any())
        .collect();
    let sessions = objects
        .sessions_of(name)
        .into_iter()
        .filter_map(|(peer, s)| {
            let st = s.status.as_ref()?;
            let mut line = peer.clone();
            if !st.peer_address.is_empty() {
                line.push_str(&format!(" ({})", st.peer_address));
            }
            line.push_str(&format!(": {}", st.bgp_state));
            if let Some(bfd) = &st.bfd_state {
                line.push_str(&format!(", BFD {bfd}"));
            }
            if st.bgp_state != "Established"
                && let Some(e) = &st.last_error
            {
                line.push_str(&format!("; last error: {e}"));
            }
            Some(line)
        })
        .collect();
    let layer2 = objects
        .l2_statuses
        .iter()
        .filter_map(|s| s.status.as_ref())
        .filter(|s| s.node == name)
        .map(|s| format!("{}/{}", s.service_namespace, s.service_name))
        .collect();
    // What the node's speaker announces, as its planner decides it (a `Cluster` Service's
    // nodes write no ServiceBGPStatus): only while a ready speaker runs there.
    let bgp = if live.contains(name) {
        let plan = planner::bgp::plan_bgp(
            &objects.snapshot(settings, name),
            &cluster::convert::bgp_advertisements(
                &objects.bgp_advertisements,
                &objects.communities,
            ),
            &cluster::convert::bgp_peer_infos(&objects.peers),
        );
        plan.per_service
            .iter()
            .map(|(key, peers)| {
                format!(
                    "{key} to {}",
                    peers.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let configuration = objects.speaker_config(name).and_then(|c| {
        let st = c.status.as_ref()?;
        Some(if st.error_summary.is_empty() {
            format!("{:?}", st.result)
        } else {
            format!("{:?}: {}", st.result, st.error_summary)
        })
    });
    NodeExplanation {
        name: name.into(),
        found: node.is_some(),
        ready: info.as_ref().is_some_and(|i| i.ready),
        not_eligible,
        speaker_ready: live.contains(name),
        configuration,
        l2_not_selected_by,
        peers,
        sessions,
        layer2,
        bgp,
    }
}
