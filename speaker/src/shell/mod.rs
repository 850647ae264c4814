//! The speaker's Kubernetes shell: reads the cluster, asks the planners, drives the ARP/NDP
//! responder and the BGP sessions, and reports who announces what.
//!
//! ```text
//!  watch caches ─► ClusterView ─┬─► plan_l2 ─► Responder::set_owned ─► ARP/NDP on the wire
//!  gossip live set ─────────────┤
//!                               └─► plan_bgp ─► BgpSpeaker::set_peers / set_advertisements
//!                 Speaker::sync ──► ServiceL2Status / ServiceBGPStatus, Events, metrics
//! ```
//!
//! `sync` is level-triggered and idempotent: the caller runs it on every change and every few
//! seconds; it only touches the responder, the sessions and the API when something differs.

pub mod metrics;
pub mod snapshot;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_api::v1beta1::{ServiceBGPStatus, ServiceL2Status};
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::{info, warn};

use crate::bgp::config::{Advertisement, PeerConfig, PeerId};
use crate::bgp::{BgpSpeaker, State};
use crate::l2::iface;
use crate::l2::responder::Responder;
use crate::planner::bgp::plan_bgp;
use crate::planner::{ServiceKey, plan_l2};
use metrics::{AnnouncedLabels, Metrics, NotificationLabels, PeerLabels, ReasonLabels, advance};
use snapshot::ClusterView;

/// What the operator configured.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The node this speaker runs on.
    pub node: String,
    /// The install namespace.
    pub namespace: String,
    /// The `loadBalancerClass` handled.
    pub class: String,
    /// Answer ARP/NDP.
    pub enable_l2: bool,
    /// Run BGP sessions.
    pub enable_bgp: bool,
}

/// The speaker's state between syncs.
pub struct Speaker {
    client: Client,
    settings: Settings,
    metrics: Metrics,
    recorder: Recorder,
    responder: Option<Responder>,
    bgp: Option<BgpSpeaker>,
    owned: BTreeMap<IpAddr, Vec<String>>,
    peers: Vec<PeerConfig>,
    advertised: BTreeMap<String, Vec<Advertisement>>,
    l2_status: BTreeMap<ServiceKey, ferrolb_api::v1beta1::ServiceL2StatusStatus>,
    bgp_status: BTreeMap<ServiceKey, ferrolb_api::v1beta1::ServiceBGPStatusStatus>,
    status_dirty: bool,
    announced: BTreeSet<AnnouncedLabels>,
    live: BTreeSet<String>,
}

impl Speaker {
    /// A speaker that announces nothing yet. Opening the responder needs raw-socket rights
    /// (`NET_RAW`), which a speaker without `--enable-l2` does not ask for.
    pub fn new(client: Client, settings: Settings, metrics: Metrics, recorder: Recorder) -> Self {
        let responder = settings.enable_l2.then(Responder::new);
        let bgp = settings.enable_bgp.then(BgpSpeaker::new);
        Self {
            client,
            settings,
            metrics,
            recorder,
            responder,
            bgp,
            owned: BTreeMap::new(),
            peers: Vec::new(),
            advertised: BTreeMap::new(),
            l2_status: BTreeMap::new(),
            bgp_status: BTreeMap::new(),
            status_dirty: true,
            announced: BTreeSet::new(),
            live: BTreeSet::new(),
        }
    }

    /// Brings announcements, sessions and status in line with `view` and the live speakers.
    pub async fn sync(&mut self, view: &ClusterView, live: BTreeSet<String>) {
        let live_changed = live != self.live;
        self.live = live.clone();
        let s = &self.settings;
        let snap = snapshot::snapshot(view, &s.node, &s.class, live);
        let mut l2_status = BTreeMap::new();
        let mut announced = BTreeSet::new();
        if let Some(responder) = &self.responder {
            let plan = plan_l2(&snap);
            let host = iface::system_interfaces();
            let owned: BTreeMap<IpAddr, Vec<String>> = plan
                .owned
                .iter()
                .map(|(ip, wanted)| (*ip, iface::choose(*ip, wanted, &host)))
                .filter(|(_, ifs)| !ifs.is_empty())
                .collect();
            if owned != self.owned {
                if let Err(e) = responder.set_owned(&owned) {
                    warn!(error = %e, "some interfaces could not be opened");
                }
                info!(addresses = owned.len(), "layer-2 ownership changed");
                self.owned = owned;
            } else if live_changed && !self.owned.is_empty() {
                // A healed partition: the other side may have answered for our addresses.
                responder.announce_again();
            }
            let mut by_service: BTreeMap<ServiceKey, (Vec<String>, BTreeSet<String>)> =
                BTreeMap::new();
            for (ip, ifs) in &self.owned {
                for key in plan
                    .addresses
                    .get(ip)
                    .map(|p| p.services.clone())
                    .unwrap_or_default()
                {
                    let entry = by_service.entry(key.clone()).or_default();
                    entry.0.push(ip.to_string());
                    entry.1.extend(ifs.iter().cloned());
                    announced.insert(AnnouncedLabels {
                        namespace: key.namespace.clone(),
                        service: key.name.clone(),
                        ip: ip.to_string(),
                        protocol: "layer2".into(),
                    });
                }
            }
            for (key, (ips, ifs)) in by_service {
                let ifs: Vec<String> = ifs.into_iter().collect();
                l2_status.insert(key.clone(), status::l2_payload(&key, &s.node, &ips, &ifs));
            }
            let c = responder.counters();
            advance(&self.metrics.l2_requests, c.requests());
            advance(&self.metrics.l2_responses, c.responses());
            advance(
                &self.metrics.l2_gratuitous,
                c.gratuitous_arp + c.unsolicited_na,
            );
            advance(&self.metrics.l2_malformed, c.malformed());
            self.metrics.l2_announced.set(self.owned.len() as i64);
        }
        let mut bgp_status = BTreeMap::new();
        if let Some(bgp) = &self.bgp {
            let (peers, errors) = snapshot::peer_configs(view, &s.node);
            for e in &errors {
                warn!(error = %e, "BGP peer not configured");
                self.metrics
                    .config_errors
                    .get_or_create(&ReasonLabels {
                        reason: "BGPPeer".into(),
                    })
                    .inc();
            }
            if peers != self.peers {
                info!(peers = peers.len(), "BGP peers changed");
                bgp.set_peers(peers.clone());
                self.peers = peers;
            }
            let plan = plan_bgp(
                &snap,
                &snapshot::bgp_advertisements(view),
                &snapshot::bgp_peer_infos(view),
            );
            let configured: BTreeSet<&str> = self.peers.iter().map(|p| p.id.0.as_str()).collect();
            for peer in &self.peers {
                let ads = plan.per_peer.get(&peer.id.0).cloned().unwrap_or_default();
                if self.advertised.get(&peer.id.0) != Some(&ads) {
                    bgp.set_advertisements(&peer.id, ads.clone());
                    self.advertised.insert(peer.id.0.clone(), ads);
                }
            }
            self.advertised
                .retain(|p, _| configured.contains(p.as_str()));
            for (key, peers) in &plan.per_service {
                let peers: Vec<String> = peers.iter().cloned().collect();
                bgp_status.insert(key.clone(), status::bgp_payload(key, &s.node, &peers));
                for svc in snap.services.iter().filter(|x| &x.key == key) {
                    for ip in &svc.ingress {
                        announced.insert(AnnouncedLabels {
                            namespace: key.namespace.clone(),
                            service: key.name.clone(),
                            ip: ip.to_string(),
                            protocol: "bgp".into(),
                        });
                    }
                }
            }
            self.export_sessions(bgp);
        }
        for gone in self.announced.difference(&announced) {
            self.metrics.announced.remove(gone);
        }
        for a in &announced {
            self.metrics.announced.get_or_create(a).set(1);
        }
        self.announced = announced;
        self.write_status(view, l2_status, bgp_status, live_changed)
            .await;
    }

    fn export_sessions(&self, bgp: &BgpSpeaker) {
        for (PeerId(peer), st) in bgp.session_states() {
            let labels = PeerLabels { peer: peer.clone() };
            self.metrics
                .bgp_session_up
                .get_or_create(&labels)
                .set(i64::from(st.state == State::Established));
            advance(
                &self.metrics.bgp_updates.get_or_create(&labels),
                st.updates_sent,
            );
            self.metrics
                .bgp_announced_prefixes
                .get_or_create(&labels)
                .set(st.announced_prefixes as i64);
            for (direction, counts) in [
                (
                    "sent",
                    st.notifications_sent
                        .iter()
                        .map(|(k, v)| (k.to_string(), *v))
                        .collect::<Vec<_>>(),
                ),
                (
                    "received",
                    st.notifications_received
                        .iter()
                        .map(|(k, v)| (k.clone(), *v))
                        .collect(),
                ),
            ] {
                for (code, n) in counts {
                    let l = NotificationLabels {
                        peer: peer.clone(),
                        direction: direction.into(),
                        code,
                    };
                    advance(&self.metrics.bgp_notifications.get_or_create(&l), n);
                }
            }
        }
    }

    async fn write_status(
        &mut self,
        view: &ClusterView,
        l2: BTreeMap<ServiceKey, ferrolb_api::v1beta1::ServiceL2StatusStatus>,
        bgp: BTreeMap<ServiceKey, ferrolb_api::v1beta1::ServiceBGPStatusStatus>,
        live_changed: bool,
    ) {
        if l2 == self.l2_status && bgp == self.bgp_status && !self.status_dirty && !live_changed {
            return;
        }
        let (ns, node) = (self.settings.namespace.clone(), self.settings.node.clone());
        // `nodeAssigned` when this node starts answering for a Service over layer 2.
        for key in l2.keys().filter(|k| !self.l2_status.contains_key(*k)) {
            if let Some(svc) = find_service(view, key) {
                let event = Event {
                    type_: EventType::Normal,
                    reason: "nodeAssigned".into(),
                    note: Some(format!(
                        "announcing from node \"{node}\" with protocol \"layer2\""
                    )),
                    action: "Announce".into(),
                    secondary: None,
                };
                if let Err(e) = self.recorder.publish(&event, &svc.object_ref(&())).await {
                    warn!(error = %e, "event not recorded");
                }
            }
        }
        let mut failures = 0;
        if self.settings.enable_l2 {
            failures += status::reconcile::<ServiceL2Status>(&self.client, &ns, &node, &l2).await;
            let ours: BTreeSet<ServiceKey> = l2.keys().cloned().collect();
            failures += status::remove_stale_l2(&self.client, &ns, &node, &ours, &self.live).await;
        }
        if self.settings.enable_bgp {
            failures += status::reconcile::<ServiceBGPStatus>(&self.client, &ns, &node, &bgp).await;
        }
        self.status_dirty = failures > 0;
        self.l2_status = l2;
        self.bgp_status = bgp;
    }

    /// Withdraws everything: answers stop, sessions close with Cease.
    pub async fn shutdown(&mut self) {
        if let Some(r) = &self.responder {
            let _ = r.set_owned(&BTreeMap::new());
        }
        if let Some(b) = &self.bgp {
            b.shutdown().await;
        }
    }
}

fn find_service<'a>(view: &'a ClusterView, key: &ServiceKey) -> Option<&'a Service> {
    view.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(key.namespace.as_str())
            && s.metadata.name.as_deref() == Some(key.name.as_str())
    })
}
