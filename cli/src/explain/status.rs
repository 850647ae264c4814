//! `ferrolb status`: one screen of what needs looking at: pools used and free, Services without
//! an address (and why), BGP sessions not Established, configuration problems.

use ferrolb_api::service::{ServiceKey, handled, ingress_ips};
use ferrolb_api::v1beta1::{CONDITION_READY, ConfigurationResult};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use serde::Serialize;

use super::service::explain_service;
use super::{Objects, Reason, Settings};

/// The cluster at a glance.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Every pool.
    pub pools: Vec<PoolUse>,
    /// Services FerroLB handles that have no address, with why.
    pub without_address: Vec<Pending>,
    /// Sessions not Established (or whose BFD is not Up).
    pub sessions_down: Vec<SessionDown>,
    /// Every configuration object or component that reports a problem.
    pub problems: Vec<String>,
    /// LoadBalancer Services FerroLB handles.
    pub services: usize,
    /// Nodes with a ready speaker Pod, of all nodes.
    pub speakers_ready: usize,
    /// All nodes.
    pub nodes: usize,
}

/// One pool's use.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolUse {
    /// The pool.
    pub name: String,
    /// Whether it is Ready (in use).
    pub ready: bool,
    /// IPv4 addresses assigned and free.
    pub ipv4: (u128, u128),
    /// IPv6 addresses assigned and free (free saturates).
    pub ipv6: (u128, u128),
}

/// A Service without an address.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// `namespace/name`.
    pub service: String,
    /// Why.
    pub reason: Reason,
}

/// A session not Established.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDown {
    /// The node.
    pub node: String,
    /// The `BGPPeer`.
    pub peer: String,
    /// The BGP state.
    pub state: String,
    /// The BFD state, when the peer has a profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bfd: Option<String>,
    /// The last error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The cluster at a glance, from `objects`.
pub fn cluster_status(objects: &Objects, settings: &Settings) -> ClusterStatus {
    let allocator = objects.allocator(settings, None);
    let pools = objects
        .pools
        .iter()
        .map(|p| {
            let stats = allocator.pool_stats(&p.name_any()).unwrap_or_default();
            PoolUse {
                name: p.name_any(),
                ready: ready(p.status.as_ref().map(|s| s.conditions.as_slice())),
                ipv4: (stats.v4.assigned, stats.v4.available),
                ipv6: (stats.v6.assigned, stats.v6.available),
            }
        })
        .collect();
    let ours: Vec<_> = objects
        .services
        .iter()
        .filter(|s| handled(s, &settings.class, settings.ignore_unclassed))
        .collect();
    let without_address = ours
        .iter()
        .filter(|s| ingress_ips(s).is_empty())
        .map(|s| {
            let key = ServiceKey::of(s);
            let e = explain_service(objects, settings, &key.namespace, &key.name);
            Pending {
                service: key.to_string(),
                reason: e.no_address.unwrap_or_else(|| {
                    Reason::new("Unknown", "no reason found: see the Service's Events")
                }),
            }
        })
        .collect();
    let sessions_down = objects
        .sessions
        .iter()
        .filter_map(|s| s.status.as_ref())
        .filter(|s| {
            s.bgp_state != "Established" || s.bfd_state.as_deref().is_some_and(|b| b != "Up")
        })
        .map(|s| SessionDown {
            node: s.node.clone(),
            peer: s.peer.clone(),
            state: s.bgp_state.clone(),
            bfd: s.bfd_state.clone(),
            last_error: s.last_error.clone(),
        })
        .collect();
    let mut problems = Vec::new();
    for c in &objects.config_states {
        let Some(st) = &c.status else { continue };
        if st.result == ConfigurationResult::Invalid {
            let who = match &st.node {
                Some(n) => format!("speaker on {n}"),
                None => "controller".into(),
            };
            problems.push(format!("{who}: {}", st.error_summary));
        }
    }
    let not_ready = |kind: &str, name: String, conditions: Option<&[Condition]>| {
        let c = conditions?
            .iter()
            .find(|c| c.type_ == CONDITION_READY && c.status == "False")?;
        Some(format!("{kind} {name}: {} ({})", c.message, c.reason))
    };
    for p in &objects.pools {
        problems.extend(not_ready(
            "IPAddressPool",
            p.name_any(),
            p.status.as_ref().map(|s| s.conditions.as_slice()),
        ));
    }
    for a in &objects.l2_advertisements {
        problems.extend(not_ready(
            "L2Advertisement",
            a.name_any(),
            a.status.as_ref().map(|s| s.conditions.as_slice()),
        ));
    }
    for a in &objects.bgp_advertisements {
        problems.extend(not_ready(
            "BGPAdvertisement",
            a.name_any(),
            a.status.as_ref().map(|s| s.conditions.as_slice()),
        ));
    }
    for p in &objects.peers {
        problems.extend(not_ready(
            "BGPPeer",
            p.name_any(),
            p.status.as_ref().map(|s| s.conditions.as_slice()),
        ));
    }
    let live = objects.live_speakers();
    ClusterStatus {
        pools,
        without_address,
        sessions_down,
        problems,
        services: ours.len(),
        speakers_ready: objects
            .nodes
            .iter()
            .filter(|n| live.contains(&n.name_any()))
            .count(),
        nodes: objects.nodes.len(),
    }
}

/// Whether the `Ready` condition is `True`.
fn ready(conditions: Option<&[Condition]>) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == CONDITION_READY && c.status == "True")
}
