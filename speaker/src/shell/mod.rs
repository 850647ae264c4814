//! The speaker's Kubernetes shell: asks the node planner ([`crate::planner::node`]) what to do,
//! and does it: drives the ARP/NDP responder and the BGP sessions, hands status and Events to
//! their own tasks, exports the metrics.
//!
//! ```text
//!  Cluster (watch events) ─┐
//!  gossip live set, unable ┼─► NodePlanner::sync ─► Effects ─┬─► Responder (ARP/NDP)
//!  host read, taken over ──┘                                 ├─► BgpSpeaker (peers, paths)
//!                                                            ├─► StatusQueue (status task)
//!                                                            └─► EventQueue (Event task), metrics
//! ```
//!
//! `sync` never waits on the API server: the planner reads the in-memory model, and status and
//! Events go onto bounded, coalescing queues that other tasks drain. Its work is proportional
//! to what changed since the previous call.

pub mod checks;
#[cfg(test)]
mod golden;
pub mod metrics;
pub mod names;
pub mod pace;
pub mod sessions;
pub mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_telemetry::events::{EventQueue, Pushed};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;
use tracing::{info, warn};

use crate::bgp::config::PeerId;
use crate::bgp::{BgpSpeaker, State};
use crate::cluster::Cluster;
use crate::l2::host::HostRead;
use crate::l2::responder::Responder;
pub use crate::membership::MemberState;
use crate::planner::ServiceKey;
use crate::planner::incremental::Unable;
use crate::planner::node::{Announced, Effects, Inputs, L2Command, NodePlanner, ServiceEvent};
pub use crate::planner::node::{HANDOVER_POLL, Settings, Synced};
use crate::watch::send_if_changed;
use metrics::{
    AnnouncedLabels, MalformedLabels, Metrics, NotificationLabels, PeerLabels, ReasonLabels,
    advance,
};
use status::{Desired, StatusQueue};

/// A Service's `announced` metric series, as (address, protocol).
type Series = Box<[(IpAddr, &'static str)]>;

/// The speaker's state between syncs: the node planner's decisions, and what applying them
/// needs.
pub struct Speaker {
    planner: NodePlanner,
    metrics: Metrics,
    responder: Option<Responder>,
    bgp: Option<BgpSpeaker>,
    cannot_answer_labels: BTreeSet<&'static str>,
    /// Peers whose session metrics were exported: a peer no longer configured has its series
    /// removed (else `ferrolb_bgp_session_up == 0` would alert forever for a peer removed while
    /// down).
    exported_peers: BTreeMap<String, crate::bgp::PeerStatus>,
    interface_faults: BTreeMap<String, String>,
    open_interfaces: BTreeMap<String, crate::l2::OpenInterface>,
    /// The `l2_kernel_arp` metric's reasons exported so far (kept at 0 once gone).
    kernel_arp_labels: BTreeSet<&'static str>,
    /// The `announced` metric's series per Service, as (address, protocol): the label sets
    /// themselves live in the metric family only, and share this key.
    announced: HashMap<Arc<ServiceKey>, Series>,
    status: Arc<StatusQueue>,
    events: Arc<EventQueue>,
    session_states: sessions::SessionStates,
    session_report: tokio::sync::watch::Sender<Option<Arc<sessions::Report>>>,
    checks: checks::NodeChecks,
    config_report: tokio::sync::watch::Sender<Option<Arc<status::ConfigReport>>>,
}

impl Speaker {
    /// A speaker that announces nothing yet. Opening the responder needs raw-socket rights
    /// (`NET_RAW`), which a speaker without `--enable-l2` does not ask for.
    pub fn new(
        settings: Settings,
        metrics: Metrics,
        status: Arc<StatusQueue>,
        events: Arc<EventQueue>,
    ) -> Self {
        let responder = settings.enable_l2.then(Responder::new);
        let bgp = settings.enable_bgp.then(BgpSpeaker::new);
        Self {
            planner: NodePlanner::new(settings),
            metrics,
            responder,
            bgp,
            cannot_answer_labels: BTreeSet::new(),
            exported_peers: BTreeMap::new(),
            interface_faults: BTreeMap::new(),
            open_interfaces: BTreeMap::new(),
            kernel_arp_labels: BTreeSet::new(),
            announced: HashMap::new(),
            status,
            events,
            session_states: sessions::SessionStates::default(),
            session_report: tokio::sync::watch::Sender::new(None),
            checks: checks::NodeChecks::default(),
            config_report: tokio::sync::watch::Sender::new(None),
        }
    }

    /// What this node's `BGPSessionState` objects should say, for
    /// [`sessions::SessionStateWriter`]; refreshed by every [`Speaker::tick`] (`None` until
    /// the first).
    pub fn session_report(&self) -> tokio::sync::watch::Receiver<Option<Arc<sessions::Report>>> {
        self.session_report.subscribe()
    }

    /// What this node's `ConfigurationState` should say, for [`status::ConfigStateWriter`];
    /// refreshed by every [`Speaker::tick`] (`None` until the first).
    pub fn config_report(&self) -> tokio::sync::watch::Receiver<Option<Arc<status::ConfigReport>>> {
        self.config_report.subscribe()
    }

    /// Announces this node's layer-2 addresses again, from the start of the schedule: call it
    /// when the others had declared this node dead and it rejoined (it stood still, or was cut
    /// off). They moved its addresses meanwhile and now give them back, but here ownership never
    /// changed, so nothing else would tell the neighbours to come back.
    pub fn announce_again(&self) {
        if let Some(r) = self
            .responder
            .as_ref()
            .filter(|_| !self.planner.answering().is_empty())
        {
            r.announce_again();
        }
    }

    /// After this node rejoined (the others had declared it dead): the status task lists this
    /// node's objects again, and every Service this node announces is queued again, so that
    /// the objects a successor deleted meanwhile are created again.
    pub fn rewrite_statuses(&mut self, cluster: &Cluster) {
        self.status.reload();
        let keys: Vec<ServiceKey> = self.announced.keys().map(|k| (**k).clone()).collect();
        self.announce(cluster, keys);
    }

    /// Puts this node on standby or takes it off ([`NodePlanner::set_standby`]).
    pub fn set_standby(&mut self, standby: bool, left_fence: bool) {
        self.planner.set_standby(standby, left_fence);
    }

    /// The addresses this node was elected for but cannot answer for (to publish over gossip).
    pub fn unable_here(&self) -> &BTreeSet<IpAddr> {
        self.planner.unable_here()
    }

    /// Brings announcements in line with `cluster`, the live speakers and what other nodes
    /// reported they cannot answer for. `host` is the host's interfaces and ARP sysctls when
    /// the caller read them again (on a change the kernel notified, and every
    /// [`crate::l2::hostwatch::SAFETY_INTERVAL`]), `None` otherwise. The planner decides
    /// ([`NodePlanner::sync`]); this applies what it decided.
    pub fn sync(
        &mut self,
        cluster: &mut Cluster,
        live: &BTreeSet<String>,
        unable_elsewhere: &Unable,
        host: Option<HostRead>,
    ) -> Synced {
        if let (Some(r), Some(h)) = (&self.responder, &host) {
            // Reopens interfaces re-created (new index or MAC) or whose reader failed.
            r.refresh(&h.interfaces);
            self.report_interfaces();
        }
        let input = Inputs {
            live,
            unable_elsewhere,
            host: host.filter(|_| self.responder.is_some()),
            // Asked of the responder only while something is handed over.
            taken_over: self
                .responder
                .as_ref()
                .filter(|_| !self.planner.handing_over().is_empty())
                .map(Responder::taken_over)
                .unwrap_or_default(),
            now: std::time::Instant::now(),
            wall: std::time::SystemTime::now(),
        };
        let mut fx = Effects::default();
        let out = self.planner.sync(cluster, input, &mut fx);
        let touched = std::mem::take(&mut fx.touched);
        self.apply(fx);
        self.announce(cluster, touched);
        out
    }

    /// Queues the status objects of `keys` as the planner says they are now, one Service at a
    /// time.
    fn announce(&mut self, cluster: &Cluster, keys: impl IntoIterator<Item = ServiceKey>) {
        for key in keys {
            let (announced, event) = self.planner.announce(cluster, &key);
            if let Some(e) = event {
                self.event(e);
            }
            self.queue_status(announced);
        }
    }

    /// Does what the planner decided, in its order.
    fn apply(&mut self, fx: Effects) {
        if let Some(r) = &self.responder {
            for command in &fx.l2 {
                match command {
                    L2Command::ChangeOwned(changes) => {
                        if let Err(e) = r.change_owned(changes) {
                            warn!(error = %e, "some interfaces could not be opened");
                        }
                    }
                    L2Command::HandOver(ips) => r.hand_over(ips.iter().copied()),
                    L2Command::AnnounceAgain => r.announce_again(),
                }
            }
        }
        if fx.kernel_arp_changed {
            self.export_kernel_arp();
        }
        if self.responder.is_some() {
            self.export_l2();
        }
        if let Some(bgp) = &self.bgp {
            if fx.peer_config_errors > 0 {
                self.metrics
                    .config_errors
                    .get_or_create(&ReasonLabels {
                        reason: "BGPPeer".into(),
                    })
                    .inc_by(fx.peer_config_errors);
            }
            if let Some(peers) = fx.peers {
                bgp.set_peers(peers);
            }
            for (peer, ads) in fx.advertisements {
                bgp.set_advertisements(&peer, ads);
            }
            self.export_sessions();
        }
        for e in fx.events {
            self.event(e);
        }
    }

    /// Whether no status object and no Event waits or is being written (a burst's writes are
    /// over).
    pub fn writes_drained(&self) -> bool {
        self.status.is_idle() && self.events.is_empty()
    }

    /// When [`Speaker::sync`] should run again at the latest (a handover or a preference
    /// hold-down ends), if ever ([`NodePlanner::next_deadline`]).
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.planner.next_deadline(std::time::Instant::now())
    }

    /// Logs interfaces that started or stopped failing and interfaces reopened, and exports
    /// the failing ones as a metric.
    fn report_interfaces(&mut self) {
        let Some(r) = &self.responder else { return };
        let faults: BTreeMap<String, String> = r
            .interface_errors()
            .into_iter()
            .map(|(name, f)| (name, f.to_string()))
            .collect();
        for (name, fault) in &faults {
            if self.interface_faults.get(name) != Some(fault) {
                warn!(interface = %name, error = %fault, "cannot answer on this interface");
            }
        }
        for name in self
            .interface_faults
            .keys()
            .filter(|n| !faults.contains_key(*n))
        {
            info!(interface = %name, "answering on this interface again");
        }
        let open = r.open_interfaces();
        for (name, now) in &open {
            if let Some(before) = self.open_interfaces.get(name)
                && before != now
            {
                info!(interface = %name, index = now.index, "interface re-created or changed its MAC: reopened and announced again");
            }
        }
        self.metrics.l2_interface_faults.set(faults.len() as i64);
        self.interface_faults = faults;
        self.open_interfaces = open;
    }
    /// Exports the `l2_kernel_arp` metric: the layer-2 Service addresses this node's kernel
    /// answers ARP for, by reason.
    fn export_kernel_arp(&mut self) {
        let mut by_reason: BTreeMap<&'static str, i64> = BTreeMap::new();
        for f in self.planner.kernel_arp().values() {
            *by_reason.entry(f.cause.exposure.label()).or_default() += 1;
        }
        for reason in self.kernel_arp_labels.iter().chain(by_reason.keys()) {
            self.metrics
                .l2_kernel_arp
                .get_or_create(&ReasonLabels {
                    reason: (*reason).into(),
                })
                .set(by_reason.get(reason).copied().unwrap_or(0));
        }
        self.kernel_arp_labels.extend(by_reason.keys());
    }

    fn export_l2(&mut self) {
        let Some(responder) = &self.responder else {
            return;
        };
        let c = responder.counters();
        advance(&self.metrics.l2_requests, c.requests());
        advance(&self.metrics.l2_responses, c.responses());
        advance(
            &self.metrics.l2_gratuitous,
            c.gratuitous_arp + c.unsolicited_na,
        );
        advance(&self.metrics.l2_malformed, c.malformed());
        // Addresses being handed over are still answered.
        self.metrics
            .l2_announced
            .set((self.planner.answering().len() + self.planner.handing_over().len()) as i64);
        let mut by_reason: BTreeMap<&'static str, i64> = BTreeMap::new();
        for reason in self.planner.unable_reasons().values() {
            *by_reason.entry(reason).or_default() += 1;
        }
        for reason in self.cannot_answer_labels.iter().chain(by_reason.keys()) {
            self.metrics
                .l2_cannot_answer
                .get_or_create(&ReasonLabels {
                    reason: (*reason).into(),
                })
                .set(by_reason.get(reason).copied().unwrap_or(0));
        }
        self.cannot_answer_labels.extend(by_reason.keys());
    }
    /// Queues a Service's status objects and updates its `announced` metric.
    fn queue_status(&mut self, a: Announced) {
        let Announced {
            key,
            l2,
            bgp_peers,
            series,
        } = a;
        let node = &self.planner.settings().node;
        let desired = Desired {
            l2: l2.map(|(ips, ifs)| status::l2_payload(&key, node, &ips, &ifs)),
            bgp: bgp_peers.map(|peers| status::bgp_payload(&key, node, &peers)),
        };
        // One copy of the key for the Service's record and all its series.
        let (shared, old) = match self.announced.remove_entry(&key) {
            Some(found) => found,
            None => (Arc::new(key), Box::default()),
        };
        let label_set = |&(ip, protocol): &(IpAddr, &'static str)| AnnouncedLabels {
            service: shared.clone(),
            ip,
            protocol,
        };
        for gone in old.iter().filter(|l| !series.contains(l)) {
            self.metrics.announced.remove(&label_set(gone));
        }
        for l in series.iter().filter(|l| !old.contains(l)) {
            self.metrics.announced.get_or_create(&label_set(l)).set(1);
        }
        self.status.set(shared.clone(), desired);
        if !series.is_empty() {
            self.announced.insert(shared, series.into_boxed_slice());
        }
        self.metrics.status_pending.set(self.status.len() as i64);
    }

    /// Hands an Event about a Service to the Event task.
    fn event(&self, e: ServiceEvent) {
        let target = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(e.key.namespace),
            name: Some(e.key.name),
            uid: e.uid,
            ..Default::default()
        };
        let event = Event {
            type_: e.type_,
            reason: e.reason.into(),
            note: Some(e.note),
            action: "Announce".into(),
            secondary: None,
        };
        if self.events.push(target, event) == Pushed::DroppedOldest {
            self.metrics.events_dropped.inc();
        }
    }

    fn export_sessions(&mut self) {
        let Some(bgp) = &self.bgp else { return };
        let states = bgp.session_states();
        let report = sessions::Report {
            node_uid: self.planner.node_uid().map(str::to_owned),
            states: self.session_states.desired(
                std::time::SystemTime::now(),
                &self.planner.settings().node,
                self.planner.peers(),
                &states,
                self.planner.peer_errors(),
            ),
        };
        send_if_changed(&self.session_report, Some(Arc::new(report)));
        // Every series of a peer no longer configured goes, with the label sets its last
        // status had.
        for (gone, last) in &self.exported_peers {
            if states.contains_key(&PeerId(gone.clone())) {
                continue;
            }
            let labels = PeerLabels { peer: gone.clone() };
            self.metrics.bgp_session_up.remove(&labels);
            self.metrics.bgp_announced_prefixes.remove(&labels);
            self.metrics.bfd_session_up.remove(&labels);
            self.metrics.bfd_downs.remove(&labels);
            self.metrics.bgp_updates.remove(&labels);
            for (l, _) in notification_series(gone, last) {
                self.metrics.bgp_notifications.remove(&l);
            }
            for (l, _) in malformed_series(gone, last) {
                self.metrics.bgp_malformed_updates.remove(&l);
            }
        }
        for (reason, n) in bgp.bfd_drops() {
            let labels = ReasonLabels {
                reason: reason.into(),
            };
            advance(&self.metrics.bfd_dropped_packets.get_or_create(&labels), n);
        }
        for (PeerId(peer), st) in &states {
            let labels = PeerLabels { peer: peer.clone() };
            self.metrics
                .bgp_session_up
                .get_or_create(&labels)
                .set(i64::from(st.state == State::Established));
            match st.bfd {
                Some(bfd) => {
                    self.metrics
                        .bfd_session_up
                        .get_or_create(&labels)
                        .set(i64::from(bfd == crate::bfd::State::Up));
                    advance(&self.metrics.bfd_downs.get_or_create(&labels), st.bfd_downs);
                }
                None => {
                    self.metrics.bfd_session_up.remove(&labels);
                }
            }
            advance(
                &self.metrics.bgp_updates.get_or_create(&labels),
                st.updates_sent,
            );
            self.metrics
                .bgp_announced_prefixes
                .get_or_create(&labels)
                .set(st.announced_prefixes as i64);
            for (l, n) in notification_series(peer, st) {
                advance(&self.metrics.bgp_notifications.get_or_create(&l), n);
            }
            for (l, n) in malformed_series(peer, st) {
                advance(&self.metrics.bgp_malformed_updates.get_or_create(&l), n);
            }
        }
        self.exported_peers = states.into_iter().map(|(PeerId(p), st)| (p, st)).collect();
    }

    /// Refreshes session metrics (call it every few seconds: session state changes on its own).
    pub fn tick(&mut self) {
        self.export_sessions();
        self.export_l2();
        self.export_config_state(std::time::Instant::now());
    }

    /// Hands this node's checks at `now` to the `ConfigurationState` task (when they changed).
    fn export_config_state(&mut self, now: std::time::Instant) {
        let inputs = checks::Inputs {
            peer_errors: self.planner.peer_errors(),
            peers: self.planner.peers(),
            sessions: &self.exported_peers,
            interface_faults: &self.interface_faults,
            unable: self.planner.unable_reasons(),
            kernel_arp: self.planner.kernel_arp(),
        };
        let report = status::ConfigReport {
            node_uid: self.planner.node_uid().map(str::to_owned),
            problems: self
                .checks
                .problems(now, &self.planner.settings().node, &inputs),
        };
        send_if_changed(&self.config_report, Some(Arc::new(report)));
    }

    /// Withdraws everything. At once, BGP routes are announced again with GRACEFUL_SHUTDOWN
    /// (RFC 8326) and kept for `drain` (when it is not zero), and ARP/NDP answers go on for
    /// `handover` (while the other speakers, told this one is leaving, take its addresses over
    /// and announce them); then answers stop, and last the sessions close with Cease.
    pub async fn shutdown(&mut self, drain: std::time::Duration, handover: std::time::Duration) {
        let started = std::time::Instant::now();
        let l2 = async {
            if let Some(r) = &self.responder {
                let owned: BTreeSet<IpAddr> = self
                    .planner
                    .answering()
                    .keys()
                    .chain(self.planner.handing_over().keys())
                    .copied()
                    .collect();
                r.hand_over(owned.iter().copied());
                let until = started + handover;
                // Until every address is announced by its new owner, or the time is up.
                while r.taken_over().len() < owned.len() {
                    let left = until.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    tokio::time::sleep(left.min(HANDOVER_POLL)).await;
                }
                let _ = r.set_owned(&BTreeMap::new());
            }
        };
        let bgp = async {
            if let Some(b) = &self.bgp
                && !drain.is_zero()
            {
                b.drain(drain).await;
                tokio::time::sleep(drain.saturating_sub(started.elapsed())).await;
            }
        };
        futures::join!(l2, bgp);
        if let Some(b) = &self.bgp {
            b.shutdown().await;
        }
    }
}
/// The `ferrolb_bgp_notifications_total` series of `peer` and their values.
fn notification_series(peer: &str, st: &crate::bgp::PeerStatus) -> Vec<(NotificationLabels, u64)> {
    let sent = st
        .notifications_sent
        .iter()
        .map(|(code, n)| ("sent", code.to_string(), *n));
    let received = st
        .notifications_received
        .iter()
        .map(|(code, n)| ("received", code.clone(), *n));
    sent.chain(received)
        .map(|(direction, code, n)| {
            let l = NotificationLabels {
                peer: peer.into(),
                direction: direction.into(),
                code,
            };
            (l, n)
        })
        .collect()
}

/// The `ferrolb_bgp_malformed_updates_total` series of `peer` and their values.
fn malformed_series(peer: &str, st: &crate::bgp::PeerStatus) -> Vec<(MalformedLabels, u64)> {
    st.malformed_updates
        .iter()
        .map(|(handling, n)| {
            let l = MalformedLabels {
                peer: peer.into(),
                handling: (*handling).into(),
            };
            (l, *n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_peer_this_node_cannot_configure_reaches_its_configuration_state_report() {
        use crate::cluster::fixtures;
        use crate::cluster::{Scope, Update};
        let settings = Settings {
            node: "node-a".into(),
            namespace: "ferrolb-system".into(),
            enable_l2: false,
            enable_bgp: true,
            l2_handover: std::time::Duration::ZERO,
            l2_preference_hold_down: std::time::Duration::ZERO,
        };
        let mut speaker = Speaker::new(
            settings,
            Metrics::default(),
            StatusQueue::new(),
            Arc::new(EventQueue::new(16)),
        );
        let reports = speaker.config_report();
        let mut cluster = Cluster::new(Scope {
            this_node: "node-a".into(),
            class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
            ignore_unclassed: false,
        });
        let mut node = fixtures::node("node-a", &[]);
        node.metadata.uid = Some("uid-a".into());
        cluster.node(Update::Apply(node));
        let mut peer = fixtures::peer("tor", "192.0.2.1");
        peer.spec.password_secret = Some(ferrolb_api::v1beta1::SecretRef { name: "md5".into() });
        cluster.peer(Update::Apply(peer));
        speaker.sync(&mut cluster, &BTreeSet::new(), &Unable::new(), None);
        assert!(reports.borrow().is_none(), "nothing before the first tick");
        speaker.tick();
        let report = reports.borrow().clone().expect("a report after the tick");
        assert_eq!(report.node_uid.as_deref(), Some("uid-a"));
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let p = &report.problems[0];
        assert_eq!((p.kind, p.name.as_str()), ("BGPPeer", "tor"));
        assert!(p.message.contains("`md5`"), "{}", p.message);
        // Nothing changed: the report is not sent again.
        let mut rx = reports.clone();
        rx.mark_unchanged();
        speaker.tick();
        assert!(!rx.has_changed().unwrap());
    }
}
