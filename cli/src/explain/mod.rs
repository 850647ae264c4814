//! The pure core of `ferrolb explain` and `ferrolb status`: the cluster's objects in, an
//! explanation out. No I/O, no clock.
//!
//! The decisions are not guessed again here: the controller's allocator
//! ([`ferrolb_controller::allocator`]) is rebuilt from the Services' current addresses and asked
//! for the Service in question, and the speakers' planner ([`ferrolb_speaker::planner`]) is run
//! for every node, so that a reason printed is the reason the binaries act on. What only a
//! running speaker knows (its gossip view) is taken from Kubernetes as the speakers' own
//! fallback does: a node's speaker counts as live when its Pod is Ready and the node is Ready.
//! What speakers did (`ServiceL2Status`, `ServiceBGPStatus`, `BGPSessionState`,
//! `ConfigurationState`) is read from their objects.
//!
//! # Layout
//! - this module: the input ([`Objects`], [`Settings`]) and the reports, as serializable
//!   structs (`-o json` prints them as they are);
//! - [`service`]: one Service, per address and per node;
//! - [`node`]: one node;
//! - [`status`]: the one-screen summary;
//! - [`words`]: every reason in words;
//! - [`text`]: the reports as text.

pub mod node;
pub mod service;
pub mod status;
pub mod text;
pub mod words;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_api::names;
use ferrolb_api::v1beta1::{
    BGPAdvertisement, BGPPeer, BGPSessionState, Community, ConfigurationState, IPAddressPool,
    L2Advertisement, ServiceBGPStatus, ServiceL2Status,
};
use ferrolb_controller::allocator::{Allocator, IpMode, ServiceRequest};
use ferrolb_controller::convert::{allocator_pools, request_from_service};
use ferrolb_speaker::cluster;
use ferrolb_speaker::membership::seeds;
use ferrolb_speaker::planner::{HoldDown, Snapshot};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use serde::Serialize;

pub use node::explain_node;
pub use service::explain_service;
pub use status::cluster_status;

/// How FerroLB is installed: what its controller and speakers were started with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `loadBalancerClass` FerroLB handles (`--load-balancer-class`).
    pub class: String,
    /// Whether Services without a class are left alone (`--ignore-unclassed`).
    pub ignore_unclassed: bool,
    /// The controller's `--default-ip-mode`.
    pub default_ip_mode: IpMode,
    /// The install namespace: speaker Pods and the status objects.
    pub namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            class: names::DEFAULT_LOAD_BALANCER_CLASS.into(),
            ignore_unclassed: false,
            default_ip_mode: IpMode::Vip,
            namespace: "ferrolb-system".into(),
        }
    }
}

/// The objects an explanation is made from, as listed from the cluster.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// Every Service (the allocator needs all of them: addresses in use, sharing).
    pub services: Vec<Service>,
    /// Every namespace (pools select Services by their namespace's labels).
    pub namespaces: Vec<Namespace>,
    /// Events about the Service explained (core `v1`, any reporter).
    pub events: Vec<Event>,
    /// `IPAddressPool`s.
    pub pools: Vec<IPAddressPool>,
    /// `L2Advertisement`s.
    pub l2_advertisements: Vec<L2Advertisement>,
    /// `BGPAdvertisement`s.
    pub bgp_advertisements: Vec<BGPAdvertisement>,
    /// `BGPPeer`s.
    pub peers: Vec<BGPPeer>,
    /// `Community` aliases.
    pub communities: Vec<Community>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// EndpointSlices of the Services explained (all of them for `status`).
    pub slices: Vec<EndpointSlice>,
    /// The speaker Pods in the install namespace.
    pub speaker_pods: Vec<Pod>,
    /// `ServiceL2Status` objects.
    pub l2_statuses: Vec<ServiceL2Status>,
    /// `ServiceBGPStatus` objects.
    pub bgp_statuses: Vec<ServiceBGPStatus>,
    /// `BGPSessionState` objects.
    pub sessions: Vec<BGPSessionState>,
    /// `ConfigurationState` objects.
    pub config_states: Vec<ConfigurationState>,
}

/// A reason: a stable code for scripts and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// CamelCase, stable (the allocator's and planner's own labels where they have one).
    pub code: String,
    /// What it means here, in words.
    pub message: String,
}

impl Reason {
    /// A reason with this code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Reason {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl Objects {
    /// The labels of each namespace.
    fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .iter()
            .find(|n| n.name_any() == namespace)
            .map(|n| n.labels().clone())
            .unwrap_or_default()
    }

    /// The allocator's request of every Service FerroLB handles (those whose annotations
    /// contradict each other are left out: they hold nothing).
    fn requests(&self, settings: &Settings) -> Vec<ServiceRequest> {
        self.services
            .iter()
            .filter(|s| {
                ferrolb_api::service::handled(s, &settings.class, settings.ignore_unclassed)
            })
            .filter_map(|s| {
                request_from_service(
                    s,
                    &self.namespace_labels(&s.namespace().unwrap_or_default()),
                )
                .ok()
            })
            .collect()
    }

    /// The allocator as the controller rebuilds it at start: every Service's current addresses
    /// kept where still valid, `except` left out.
    fn allocator(&self, settings: &Settings, except: Option<&ServiceRequest>) -> Allocator {
        let requests = self
            .requests(settings)
            .into_iter()
            .filter(|r| except.is_none_or(|e| e.key != r.key))
            .collect();
        Allocator::from_snapshot(
            allocator_pools(&self.pools, settings.default_ip_mode),
            requests,
        )
    }

    /// The live speakers as Kubernetes sees them (the speakers' own fallback view when gossip
    /// cannot run): nodes whose speaker Pod is Ready and whose `Ready` condition is `True`.
    fn live_speakers(&self) -> BTreeSet<String> {
        let pods: Vec<_> = self
            .speaker_pods
            .iter()
            .filter_map(seeds::speaker_pod)
            .collect();
        let ready: BTreeSet<String> = self
            .nodes
            .iter()
            .map(cluster::convert::node_info)
            .filter(|n| n.ready)
            .map(|n| n.name)
            .collect();
        seeds::kubernetes_live(&pods, &ready)
    }

    /// The planner's snapshot of the cluster as `this_node` sees it.
    fn snapshot(&self, settings: &Settings, this_node: &str) -> Snapshot {
        Snapshot {
            services: self
                .services
                .iter()
                .filter_map(|s| {
                    cluster::convert::service_info(
                        s,
                        &self.slices,
                        &settings.class,
                        settings.ignore_unclassed,
                    )
                })
                .collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| (n.name_any(), cluster::convert::node_info(n)))
                .collect(),
            pools: cluster::convert::pool_infos(&self.pools),
            l2_advertisements: self
                .l2_advertisements
                .iter()
                .map(cluster::convert::l2_advertisement_info)
                .collect(),
            live_speakers: self.live_speakers(),
            this_node: this_node.to_owned(),
            unable: self.unable(),
            hold_down: HoldDown::default(),
        }
    }

    /// The addresses each node's speaker reported it cannot answer for over layer 2 (no
    /// usable interface): the `Address` problems of its `ConfigurationState`. Speakers tell
    /// each other over gossip; their objects say the same to the API server.
    fn unable(&self) -> BTreeMap<String, BTreeSet<IpAddr>> {
        let mut out: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
        for c in &self.config_states {
            let Some(st) = &c.status else { continue };
            let Some(node) = &st.node else { continue };
            for part in st.error_summary.split("Address ").skip(1) {
                if let Some(ip) = part
                    .split_once(": elected to answer")
                    .and_then(|(ip, _)| ip.parse().ok())
                {
                    out.entry(node.clone()).or_default().insert(ip);
                }
            }
        }
        out
    }

    /// The speaker's `ConfigurationState` of `node`, when it has one.
    fn speaker_config(&self, node: &str) -> Option<&ConfigurationState> {
        self.config_states.iter().find(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node.as_deref())
                .is_some_and(|n| n == node)
        })
    }

    /// The sessions of `node`, by peer.
    fn sessions_of(&self, node: &str) -> BTreeMap<String, &BGPSessionState> {
        self.sessions
            .iter()
            .filter_map(|s| {
                let st = s.status.as_ref()?;
                (st.node == node).then(|| (st.peer.clone(), s))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
