//! The speaker's Kubernetes shell: asks the planners what changed, drives the ARP/NDP responder
//! and the BGP sessions, and hands status and Events to their own tasks.
//!
//! ```text
//!  Cluster (watch events) ─► take_changes ─┬─► L2Tracker ─► Responder::set_owned ─► ARP/NDP
//!  gossip live set, unable addresses ──────┤
//!  Arrivals (live since: hold-down) ───────┤
//!                                          └─► BgpTracker ─► BgpSpeaker::set_advertisements
//!                  Speaker::sync ──► StatusQueue (status task), EventQueue (Event task), metrics
//! ```
//!
//! `sync` never waits on the API server: it reads the in-memory model and pushes status and
//! Events onto bounded, coalescing queues that other tasks drain. Its work is proportional to
//! what changed since the previous call.

pub mod checks;
#[cfg(test)]
mod golden;
pub mod metrics;
pub mod names;
pub mod pace;
pub mod sessions;
pub mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ferrolb_telemetry::events::{EventQueue, Pushed};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tracing::{debug, info, warn};

use crate::bgp::config::{Advertisement, PeerConfig, PeerId};
use crate::bgp::{BgpSpeaker, State};
use crate::cluster::peers::PeerConfigError;
use crate::cluster::{Changes, Cluster};
use crate::l2::arrivals::Arrivals;
use crate::l2::host::HostRead;
use crate::l2::iface::{self, InterfaceInfo};
use crate::l2::kernel_arp::{Cause, KernelArp, KernelView, sysctl_name};
use crate::l2::responder::Responder;
pub use crate::membership::MemberState;
use crate::planner::incremental::{BgpTracker, L2Tracker, Unable};
use crate::planner::{Interfaces, ServiceKey};
use crate::watch::send_if_changed;
use metrics::{
    AnnouncedLabels, MalformedLabels, Metrics, NotificationLabels, PeerLabels, ReasonLabels,
    advance,
};
use status::{Desired, StatusQueue};

/// What the operator configured.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The node this speaker runs on.
    pub node: String,
    /// The install namespace.
    pub namespace: String,
    /// Answer ARP/NDP.
    pub enable_l2: bool,
    /// Run BGP sessions.
    pub enable_bgp: bool,
    /// How long ARP/NDP answers go on for the addresses this node gives up when it leaves:
    /// on SIGTERM ([`Speaker::shutdown`]) and when its Node gets the exclusion label.
    pub l2_handover: std::time::Duration,
    /// How long a node that joins the live set must stay live before its
    /// `preferredNodeSelectors` count ([`crate::l2::arrivals::DEFAULT_HOLD_DOWN`]).
    pub l2_preference_hold_down: std::time::Duration,
}

/// What one [`Speaker::sync`] did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Addresses decided again.
    pub decided: usize,
    /// Services whose status was queued.
    pub services: usize,
    /// This node's owned addresses changed.
    pub owned_changed: bool,
    /// This node's set of addresses it cannot answer for changed (publish it over gossip).
    pub unable_changed: bool,
}

/// The speaker's state between syncs.
pub struct Speaker {
    settings: Settings,
    metrics: Metrics,
    responder: Option<Responder>,
    bgp: Option<BgpSpeaker>,
    l2: L2Tracker,
    routes: BgpTracker,
    host: Vec<InterfaceInfo>,
    answering: BTreeMap<IpAddr, Vec<String>>,
    unable_here: BTreeSet<IpAddr>,
    unable_reasons: BTreeMap<IpAddr, &'static str>,
    cannot_answer_labels: BTreeSet<&'static str>,
    /// Peers whose session metrics were exported: a peer no longer configured has its series
    /// removed (else `ferrolb_bgp_session_up == 0` would alert forever for a peer removed while
    /// down).
    exported_peers: BTreeMap<String, crate::bgp::PeerStatus>,
    interface_faults: BTreeMap<String, String>,
    open_interfaces: BTreeMap<String, crate::l2::OpenInterface>,
    /// The host as last read, for checking whether its kernel answers ARP for Service
    /// addresses; `None` when the ARP sysctls could not be read.
    kernel_view: Option<KernelView>,
    /// Why the ARP sysctls could not be read, when they could not (told once per change).
    arp_read_error: Option<String>,
    /// Layer-2 Service addresses this node's kernel answers ARP for too.
    kernel_arp: BTreeMap<Ipv4Addr, KernelArp>,
    /// Their causes, each with how many addresses it covers (logged when the set changes).
    kernel_arp_causes: BTreeMap<Cause, usize>,
    /// The `l2_kernel_arp` metric's reasons exported so far (kept at 0 once gone).
    kernel_arp_labels: BTreeSet<&'static str>,
    peers: Vec<PeerConfig>,
    advertised: BTreeMap<String, Vec<Advertisement>>,
    l2_announcing: BTreeSet<ServiceKey>,
    /// Owned addresses announced for Services sharing them with a Service no advertisement
    /// selects, with that Service (told once, when it starts).
    unselected_sharing: BTreeSet<(ServiceKey, IpAddr)>,
    /// The `announced` metric's series per Service, as (address, protocol): the label sets
    /// themselves live in the metric family only.
    announced: HashMap<ServiceKey, Box<[(IpAddr, &'static str)]>>,
    live: BTreeSet<String>,
    status: Arc<StatusQueue>,
    events: Arc<EventQueue>,
    /// The `BGPPeer`s selecting this node that are configured in part or not at all.
    peer_errors: Vec<PeerConfigError>,
    node_uid: Option<String>,
    session_states: sessions::SessionStates,
    session_report: tokio::sync::watch::Sender<Option<Arc<sessions::Report>>>,
    checks: checks::NodeChecks,
    config_report: tokio::sync::watch::Sender<Option<Arc<status::ConfigReport>>>,
    /// Since when this node carries the exclusion label, as this speaker saw it.
    excluded_since: Option<std::time::Instant>,
    /// Addresses given up because this node was excluded, still answered until the instant
    /// (the others take them over and announce them meanwhile, as on SIGTERM).
    handing_over: BTreeMap<IpAddr, std::time::Instant>,
    /// When live speakers joined, for the preference hold-down.
    arrivals: Arrivals,
    /// This node while it is on standby ([`Speaker::set_standby`]), else empty.
    standby: BTreeSet<String>,
    /// When speaker Pods became ready (Kubernetes' dates as instants), and the
    /// [`Cluster::speakers_version`] they were read at.
    ready_since: (u64, BTreeMap<String, std::time::Instant>),
    /// When the next preference hold-down ends.
    hold_down_ends: Option<std::time::Instant>,
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
        let arrivals = Arrivals::new(settings.node.clone(), settings.l2_preference_hold_down);
        let bgp = settings.enable_bgp.then(BgpSpeaker::new);
        Self {
            settings,
            metrics,
            responder,
            bgp,
            l2: L2Tracker::new(),
            routes: BgpTracker::new(),
            host: Vec::new(),
            answering: BTreeMap::new(),
            unable_here: BTreeSet::new(),
            unable_reasons: BTreeMap::new(),
            cannot_answer_labels: BTreeSet::new(),
            exported_peers: BTreeMap::new(),
            interface_faults: BTreeMap::new(),
            open_interfaces: BTreeMap::new(),
            kernel_view: None,
            arp_read_error: None,
            kernel_arp: BTreeMap::new(),
            kernel_arp_causes: BTreeMap::new(),
            kernel_arp_labels: BTreeSet::new(),
            peers: Vec::new(),
            advertised: BTreeMap::new(),
            l2_announcing: BTreeSet::new(),
            unselected_sharing: BTreeSet::new(),
            announced: HashMap::new(),
            live: BTreeSet::new(),
            status,
            events,
            peer_errors: Vec::new(),
            node_uid: None,
            session_states: sessions::SessionStates::default(),
            session_report: tokio::sync::watch::Sender::new(None),
            checks: checks::NodeChecks::default(),
            config_report: tokio::sync::watch::Sender::new(None),
            excluded_since: None,
            handing_over: BTreeMap::new(),
            arrivals,
            standby: BTreeSet::new(),
            ready_since: (u64::MAX, BTreeMap::new()),
            hold_down_ends: None,
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
            .filter(|_| !self.answering.is_empty())
        {
            r.announce_again();
        }
    }

    /// After this node rejoined (the others had declared it dead): the status task lists this
    /// node's objects again, and every Service this node announces is queued again, so that
    /// the objects a successor deleted meanwhile are created again.
    pub fn rewrite_statuses(&mut self, cluster: &Cluster) {
        self.status.reload();
        let keys: Vec<ServiceKey> = self.announced.keys().cloned().collect();
        for key in &keys {
            self.queue_status(cluster, key);
        }
    }

    /// Puts this node on standby (a minority in a gossip partition: it owns an address only
    /// when no node of the other side can) or takes it off. On leaving a fence (`left_fence`:
    /// the other side went on without it), it arrives, as the others see it then
    /// ([`Arrivals::rejoin`]); a minority that only waited for the API server's word left
    /// nobody's live set by standing by.
    pub fn set_standby(&mut self, standby: bool, left_fence: bool) {
        if standby {
            self.standby = BTreeSet::from([self.settings.node.clone()]);
        } else {
            self.standby.clear();
        }
        if left_fence {
            self.arrivals.rejoin();
        }
    }

    /// The addresses this node was elected for but cannot answer for (to publish over gossip).
    pub fn unable_here(&self) -> &BTreeSet<IpAddr> {
        &self.unable_here
    }

    /// Brings announcements in line with `cluster`, the live speakers and what other nodes
    /// reported they cannot answer for. `host` is the host's interfaces and ARP sysctls when
    /// the caller read them again (on a change the kernel notified, and every
    /// [`crate::l2::hostwatch::SAFETY_INTERVAL`]), `None` otherwise.
    pub fn sync(
        &mut self,
        cluster: &mut Cluster,
        live: &BTreeSet<String>,
        unable_elsewhere: &Unable,
        host: Option<HostRead>,
    ) -> Synced {
        let changes = cluster.take_changes();
        let live_changed = *live != self.live;
        self.live = live.clone();
        let mut out = Synced::default();
        let mut touched: BTreeSet<ServiceKey> = changes.services.clone();
        if changes.config {
            self.node_uid = cluster.this_node_uid().map(str::to_owned);
        }
        if self.responder.is_some() {
            if changes.config {
                self.note_exclusion(cluster);
            }
            let now = std::time::Instant::now();
            self.end_handovers(now);
            self.arrivals.observe(now, live);
            if self.ready_since.0 != cluster.speakers_version() {
                self.ready_since = (
                    cluster.speakers_version(),
                    pods_ready_since(cluster, now, std::time::SystemTime::now()),
                );
            }
            let mut hold_down = self.arrivals.hold_down(now, &self.ready_since.1);
            hold_down.standby = self.standby.clone();
            self.hold_down_ends = hold_down.next_expiry();
            let host_read = host.is_some();
            let config_changed = changes.config;
            let host_changed = host.as_ref().is_some_and(|h| h.interfaces != self.host);
            if let Some(h) = host {
                if let Some(r) = &self.responder {
                    // Reopens interfaces re-created (new index or MAC) or whose reader failed.
                    r.refresh(&h.interfaces);
                }
                self.host = h.interfaces;
                self.report_interfaces();
                self.read_kernel_view(h.arp);
            }
            if host_changed && !self.unable_here.is_empty() {
                // Interfaces changed: addresses given up may be answerable now.
                info!(
                    "interfaces changed; checking again the addresses this node could not answer for"
                );
                self.unable_here.clear();
                self.unable_reasons.clear();
                out.unable_changed = true;
            }
            // Electing may name this node for an address it then finds it cannot answer for;
            // it gives the address up (and says so over gossip) and elects again.
            let mut changes = changes.clone();
            for _ in 0..4 {
                let mut unable = unable_elsewhere.clone();
                if !self.unable_here.is_empty() {
                    unable.insert(self.settings.node.clone(), self.unable_here.clone());
                }
                let u = self.l2.update(cluster, &changes, live, &unable, &hold_down);
                out.decided += u.decided;
                out.owned_changed |= u.owned_changed;
                touched.extend(u.services);
                if !(u.owned_changed || host_changed) {
                    break;
                }
                // Everything again when the interfaces changed; else only what moved.
                let only = (!host_changed && !self.answering.is_empty()).then_some(&u.owned_delta);
                let stranded = self.resolve_interfaces(cluster, only, &mut touched);
                if stranded.is_empty() {
                    break;
                }
                self.unable_here.extend(stranded);
                out.unable_changed = true;
                changes = Changes::default();
            }
            if !out.owned_changed && !host_changed && live_changed && !self.answering.is_empty() {
                // A healed partition: the other side may have answered for our addresses.
                if let Some(r) = &self.responder {
                    r.announce_again();
                }
            }
            // Every address again when the host or the configuration changed; else those of
            // the Services that changed.
            let only = (!host_read && !config_changed).then_some(&touched);
            self.check_kernel_arp(cluster, only);
            self.unable_here
                .retain(|ip| cluster.services_at(*ip).next().is_some());
            let here = &self.unable_here;
            self.unable_reasons.retain(|ip, _| here.contains(ip));
            self.note_unselected_sharing(cluster, &touched);
            self.export_l2();
        }
        if self.bgp.is_some() {
            touched.extend(self.sync_bgp(cluster, &changes));
        }
        out.services = touched.len();
        for key in touched {
            self.queue_status(cluster, &key);
        }
        out
    }

    /// Resolves the owned addresses (all, or `only` those) to host interfaces and hands them to
    /// the responder; returns the owned addresses that have none (reported, and given up by the
    /// caller).
    fn resolve_interfaces(
        &mut self,
        cluster: &Cluster,
        only: Option<&BTreeSet<IpAddr>>,
        touched: &mut BTreeSet<ServiceKey>,
    ) -> Vec<IpAddr> {
        let mut changes: BTreeMap<IpAddr, Option<Vec<String>>> = BTreeMap::new();
        let mut problems = Vec::new();
        match only {
            Some(ips) => {
                for ip in ips {
                    let names = match self.l2.owned().get(ip) {
                        Some(wanted) => match iface::diagnose(*ip, wanted, &self.host) {
                            Ok(names) => Some(names),
                            Err(problem) => {
                                problems.push(problem);
                                None
                            }
                        },
                        None => None,
                    };
                    if self.answering.get(ip) != names.as_ref() {
                        changes.insert(*ip, names);
                    }
                }
            }
            None => {
                let (answering, stranded) = iface::resolve_owned(self.l2.owned(), &self.host);
                for ip in self
                    .answering
                    .keys()
                    .filter(|ip| !answering.contains_key(*ip))
                {
                    changes.insert(*ip, None);
                }
                for (ip, names) in answering {
                    if self.answering.get(&ip) != Some(&names) {
                        changes.insert(ip, Some(names));
                    }
                }
                problems = stranded;
            }
        }
        for problem in &problems {
            let ip = problem.ip();
            warn!(%ip, reason = problem.label(), error = %problem, "elected to answer for this address but cannot; another node takes it over");
            self.unable_reasons.insert(ip, problem.label());
            for key in cluster.services_at(ip) {
                self.event(
                    cluster,
                    key,
                    EventType::Warning,
                    "CannotAnswer",
                    format!(
                        "node \"{}\": {problem}; another node answers instead",
                        self.settings.node
                    ),
                );
            }
        }
        if !changes.is_empty() {
            let to_responder = self.hold_for_handover(&changes);
            if let Some(r) = &self.responder
                && let Err(e) = r.change_owned(&to_responder)
            {
                warn!(error = %e, "some interfaces could not be opened");
            }
            for (ip, names) in &changes {
                touched.extend(cluster.services_at(*ip).cloned());
                match names {
                    Some(names) => {
                        self.answering.insert(*ip, names.clone());
                    }
                    None => {
                        self.answering.remove(ip);
                    }
                }
            }
            debug!(
                changed = changes.len(),
                addresses = self.answering.len(),
                "layer-2 ownership changed"
            );
        }
        problems.iter().map(|p| p.ip()).collect()
    }

    /// Tells, once per (address, Service), when this node answers for an address that a
    /// Service shares with others although no advertisement selects it (`serviceSelectors`):
    /// its traffic arrives too, since an address has one owner. A warning and an Event on that
    /// Service; only the owner says it. Costs work for the `keys` that changed only.
    fn note_unselected_sharing(&mut self, cluster: &Cluster, keys: &BTreeSet<ServiceKey>) {
        for key in keys {
            let now: BTreeSet<IpAddr> = cluster
                .service_rec(key)
                .into_iter()
                .flat_map(|r| r.ingress.iter().copied())
                .filter(|ip| self.l2.owned().contains_key(ip))
                .filter(|ip| self.l2.not_selected(*ip).contains(key))
                .collect();
            let before: Vec<IpAddr> = self
                .unselected_sharing
                .range(
                    (key.clone(), IpAddr::from([0u8; 4]))
                        ..=(key.clone(), IpAddr::from([0xffu8; 16])),
                )
                .map(|(_, ip)| *ip)
                .collect();
            for ip in before.iter().filter(|ip| !now.contains(ip)) {
                self.unselected_sharing.remove(&(key.clone(), *ip));
            }
            for ip in now.iter().filter(|ip| !before.contains(ip)) {
                warn!(%ip, service = %key, "answering for an address this Service shares with selected Services, though no L2Advertisement selects it: its traffic arrives too");
                self.event(
                    cluster,
                    key,
                    EventType::Warning,
                    "SharedAddressNotSelected",
                    format!(
                        "node \"{}\" answers for {ip}, shared with Services an L2Advertisement selects; none selects this Service (serviceSelectors), but its traffic to {ip} arrives too",
                        self.settings.node
                    ),
                );
                self.unselected_sharing.insert((key.clone(), *ip));
            }
        }
    }

    /// Notes when this node gets or loses the exclusion label (a node drain): for
    /// `l2_handover` after it got it, the addresses it gives up are still answered.
    fn note_exclusion(&mut self, cluster: &Cluster) {
        let excluded = cluster.nodes().get(&self.settings.node).is_some_and(|n| {
            n.labels
                .contains_key(ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB)
        });
        match (excluded, self.excluded_since) {
            (true, None) => {
                info!(handover = ?self.settings.l2_handover, "this node is excluded from external load balancers: its layer-2 addresses are answered while the other nodes take them over");
                self.excluded_since = Some(std::time::Instant::now());
            }
            (false, Some(_)) => {
                info!("this node is no longer excluded from external load balancers");
                self.excluded_since = None;
            }
            _ => {}
        }
    }

    /// The ownership changes the responder should apply now: an address given up within
    /// `l2_handover` of this node's exclusion is handed over ([`Responder::hand_over`]: answered
    /// until the new owner announces it or that time has passed; kept in `handing_over`); one
    /// owned again stops being handed over.
    fn hold_for_handover(
        &mut self,
        changes: &BTreeMap<IpAddr, Option<Vec<String>>>,
    ) -> BTreeMap<IpAddr, Option<Vec<String>>> {
        let until = self
            .excluded_since
            .map(|t| t + self.settings.l2_handover)
            .filter(|until| *until > std::time::Instant::now());
        let mut now = BTreeMap::new();
        let mut handed = Vec::new();
        for (ip, names) in changes {
            match (names, until) {
                (None, Some(until)) if self.answering.contains_key(ip) => {
                    self.handing_over.insert(*ip, until);
                    handed.push(*ip);
                }
                _ => {
                    if names.is_some() {
                        self.handing_over.remove(ip);
                    }
                    now.insert(*ip, names.clone());
                }
            }
        }
        if let Some(r) = self.responder.as_ref().filter(|_| !handed.is_empty()) {
            r.hand_over(handed);
        }
        now
    }

    /// Ends the handovers that are over at `now`: the new owner announced the address (the
    /// responder stopped answering for it then), or the handover time has passed.
    fn end_handovers(&mut self, now: std::time::Instant) {
        if self.handing_over.is_empty() {
            return;
        }
        let taken = self
            .responder
            .as_ref()
            .map(Responder::taken_over)
            .unwrap_or_default();
        let done: BTreeMap<IpAddr, Option<Vec<String>>> = self
            .handing_over
            .iter()
            .filter(|(ip, until)| **until <= now || taken.contains(ip))
            .map(|(ip, _)| (*ip, None))
            .collect();
        if done.is_empty() {
            return;
        }
        self.handing_over
            .retain(|ip, until| *until > now && !taken.contains(ip));
        let announced = done.keys().filter(|ip| taken.contains(ip)).count();
        info!(
            addresses = done.len(),
            announced_by_new_owner = announced,
            timed_out = done.len() - announced,
            "handed over: no longer answering for these layer-2 addresses"
        );
        if let Some(r) = &self.responder
            && let Err(e) = r.change_owned(&done)
        {
            warn!(error = %e, "some interfaces could not be changed");
        }
    }

    /// When [`Speaker::sync`] should run again at the latest (a handover or a preference
    /// hold-down ends), if ever. While addresses are handed over, every [`HANDOVER_POLL`], to
    /// see which the new owners have announced.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        let hold_down = self.responder.as_ref().and(self.hold_down_ends);
        let poll =
            (!self.handing_over.is_empty()).then(|| std::time::Instant::now() + HANDOVER_POLL);
        self.handing_over
            .values()
            .copied()
            .chain(hold_down)
            .chain(poll)
            .min()
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

    /// Takes the ARP sysctls just read with the interfaces: the view [`Self::check_kernel_arp`]
    /// uses, or none (said once) when they could not be read.
    fn read_kernel_view(&mut self, arp: std::io::Result<crate::l2::kernel_arp::ArpSysctls>) {
        match arp {
            Ok(sysctls) => {
                if self.arp_read_error.take().is_some() {
                    info!("the ARP sysctls can be read again");
                }
                self.kernel_view = Some(KernelView::new(&self.host, sysctls));
            }
            Err(e) => {
                let e = e.to_string();
                if self.arp_read_error.as_ref() != Some(&e) {
                    warn!(error = %e, "cannot read net.ipv4.conf.*.arp_ignore and arp_announce; whether this node's kernel answers ARP for Service addresses is not checked");
                }
                self.arp_read_error = Some(e);
                self.kernel_view = None;
            }
        }
    }

    /// Checks whether this node's kernel answers ARP for layer-2 Service addresses
    /// ([`crate::l2::kernel_arp`]): every address this node holds, or (`only`) those of these
    /// Services. Every node checks every layer-2 address, elected here or not: every node's
    /// kernel answers. An address that no Service holds any more keeps its fault until the
    /// host is read again (kube-proxy taking it off `kube-ipvs0` is a change that reads it).
    fn check_kernel_arp(&mut self, cluster: &Cluster, only: Option<&BTreeSet<ServiceKey>>) {
        let Some(view) = &self.kernel_view else {
            if !self.kernel_arp.is_empty() {
                self.kernel_arp.clear();
                self.note_kernel_arp();
            }
            return;
        };
        let l2 = &self.l2;
        let check = |ip: Ipv4Addr| -> Option<KernelArp> {
            let d = l2.decision(ip.into())?;
            if d.owner
                .as_ref()
                .err()
                .is_some_and(|why| !why.layer2_applies())
            {
                return None;
            }
            let wanted = l2
                .owned()
                .get(&IpAddr::V4(ip))
                .unwrap_or(&Interfaces::BySubnet);
            view.check(ip.into(), wanted)
        };
        let changed = match only {
            None => {
                let now: BTreeMap<Ipv4Addr, KernelArp> =
                    view.held().filter_map(check).map(|f| (f.ip, f)).collect();
                let changed = now != self.kernel_arp;
                self.kernel_arp = now;
                changed
            }
            Some(keys) => {
                let found: Vec<(Ipv4Addr, Option<KernelArp>)> = keys
                    .iter()
                    .filter_map(|key| cluster.service_rec(key))
                    .flat_map(|rec| rec.ingress.iter())
                    .filter_map(|ip| match ip {
                        IpAddr::V4(v4) => Some((*v4, check(*v4))),
                        IpAddr::V6(_) => None,
                    })
                    .collect();
                let mut changed = false;
                for (ip, fault) in found {
                    changed |= match fault {
                        Some(f) => self.kernel_arp.insert(ip, f.clone()) != Some(f),
                        None => self.kernel_arp.remove(&ip).is_some(),
                    };
                }
                changed
            }
        };
        if changed {
            self.note_kernel_arp();
        }
    }

    /// Logs the causes of the kernel's ARP answers that appeared or went (once per cause, not
    /// per address: kube-proxy adds addresses one by one), and exports the metric.
    fn note_kernel_arp(&mut self) {
        let mut causes: BTreeMap<Cause, usize> = BTreeMap::new();
        let mut by_reason: BTreeMap<&'static str, i64> = BTreeMap::new();
        for f in self.kernel_arp.values() {
            *causes.entry(f.cause.clone()).or_default() += 1;
            *by_reason.entry(f.cause.exposure.label()).or_default() += 1;
        }
        for (cause, n) in causes
            .iter()
            .filter(|(c, _)| !self.kernel_arp_causes.contains_key(*c))
        {
            let example = self.kernel_arp.values().find(|f| f.cause == *cause);
            let interfaces: Vec<&str> = cause.on.iter().map(|(n, _)| n.as_str()).collect();
            let values: Vec<String> = cause
                .on
                .iter()
                .map(|(name, v)| format!("{}={v}", sysctl_name(name, cause.exposure.sysctl())))
                .collect();
            warn!(
                reason = cause.exposure.label(),
                interfaces = interfaces.join(","),
                all = format!("{}={}", sysctl_name("all", cause.exposure.sysctl()), cause.all),
                each = values.join(","),
                addresses = n,
                example = ?example.map(|f| f.ip),
                held_on = ?example.map(|f| &f.held_on),
                "this node's kernel answers ARP for layer-2 Service addresses too (or may send ARP requests from them): every such node does, not only the elected one; set strictARP: true in kube-proxy's configuration (arp_ignore=1, arp_announce=2)"
            );
        }
        for cause in self
            .kernel_arp_causes
            .keys()
            .filter(|c| !causes.contains_key(*c))
        {
            let interfaces: Vec<&str> = cause.on.iter().map(|(n, _)| n.as_str()).collect();
            info!(
                reason = cause.exposure.label(),
                interfaces = interfaces.join(","),
                "this node's kernel no longer answers ARP for layer-2 Service addresses for this reason"
            );
        }
        self.kernel_arp_causes = causes;
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
            .set((self.answering.len() + self.handing_over.len()) as i64);
        let mut by_reason: BTreeMap<&'static str, i64> = BTreeMap::new();
        for reason in self.unable_reasons.values() {
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

    fn sync_bgp(&mut self, cluster: &Cluster, changes: &Changes) -> BTreeSet<ServiceKey> {
        let Some(bgp) = &self.bgp else {
            return BTreeSet::new();
        };
        if changes.config {
            let (peers, errors) = cluster.peer_configs();
            for e in &errors {
                if e.keeps_the_peer() {
                    warn!(error = %e, "BGP peer configured in part");
                } else {
                    warn!(error = %e, "BGP peer not configured");
                }
                self.metrics
                    .config_errors
                    .get_or_create(&ReasonLabels {
                        reason: "BGPPeer".into(),
                    })
                    .inc();
            }
            self.peer_errors = errors;
            if peers != self.peers {
                info!(peers = peers.len(), "BGP peers changed");
                bgp.set_peers(peers.clone());
                self.peers = peers;
            }
        }
        let u = self.routes.update(cluster, changes);
        let configured: BTreeSet<&str> = self.peers.iter().map(|p| p.id.0.as_str()).collect();
        for peer in &self.peers {
            if !(changes.config || u.peers.contains(&peer.id.0)) {
                continue;
            }
            let ads = self.routes.advertisements(&peer.id.0);
            if self.advertised.get(&peer.id.0) != Some(&ads) {
                bgp.set_advertisements(&peer.id, ads.clone());
                self.advertised.insert(peer.id.0.clone(), ads);
            }
        }
        self.advertised
            .retain(|p, _| configured.contains(p.as_str()));
        self.export_sessions();
        u.services
    }

    /// Queues `key`'s status objects and updates its `announced` metric; emits `nodeAssigned`
    /// when this node starts answering for it over layer 2.
    fn queue_status(&mut self, cluster: &Cluster, key: &ServiceKey) {
        let node = self.settings.node.clone();
        let rec = cluster.service_rec(key);
        let mut labels: Vec<(IpAddr, &'static str)> = Vec::new();
        let mut desired = Desired::default();
        if let Some(rec) = rec {
            let mut ips = Vec::new();
            let mut ifs = BTreeSet::new();
            for ip in &rec.ingress {
                if let Some(names) = self.answering.get(ip) {
                    ips.push(ip.to_string());
                    ifs.extend(names.iter().cloned());
                    labels.push((*ip, "layer2"));
                }
            }
            if !ips.is_empty() {
                let ifs: Vec<String> = ifs.into_iter().collect();
                desired.l2 = Some(status::l2_payload(key, &node, &ips, &ifs));
            }
            if let Some(Ok(peers)) = self.routes.service(key) {
                // One object per (Service, node) only where the announcing nodes are few: with
                // `externalTrafficPolicy: Local`, the nodes with an endpoint. With `Cluster`,
                // every eligible node announces every address, and objects per pair would be
                // Services × nodes (10 million for 10,000 Services on 1,000 nodes).
                if rec.local_traffic_policy {
                    let peers: Vec<String> = peers.iter().cloned().collect();
                    desired.bgp = Some(status::bgp_payload(key, &node, &peers));
                }
                for ip in &rec.ingress {
                    labels.push((*ip, "bgp"));
                }
            }
        }
        let newly_announcing = desired.l2.is_some() && !self.l2_announcing.contains(key);
        if desired.l2.is_some() {
            self.l2_announcing.insert(key.clone());
        } else {
            self.l2_announcing.remove(key);
        }
        if newly_announcing {
            self.event(
                cluster,
                key,
                EventType::Normal,
                "nodeAssigned",
                format!("announcing from node \"{node}\" with protocol \"layer2\""),
            );
        }
        labels.sort();
        labels.dedup();
        let old = self.announced.remove(key).unwrap_or_default();
        let label_set = |(ip, protocol): &(IpAddr, &'static str)| AnnouncedLabels {
            namespace: key.namespace.clone(),
            service: key.name.clone(),
            ip: ip.to_string(),
            protocol: (*protocol).into(),
        };
        for gone in old.iter().filter(|l| !labels.contains(l)) {
            self.metrics.announced.remove(&label_set(gone));
        }
        for l in labels.iter().filter(|l| !old.contains(l)) {
            self.metrics.announced.get_or_create(&label_set(l)).set(1);
        }
        if !labels.is_empty() {
            self.announced
                .insert(key.clone(), labels.into_boxed_slice());
        }
        self.status.set(key.clone(), desired);
        self.metrics.status_pending.set(self.status.len() as i64);
    }

    fn event(
        &self,
        cluster: &Cluster,
        key: &ServiceKey,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let target = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            uid: cluster.service_rec(key).and_then(|r| r.uid.clone()),
            ..Default::default()
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
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
            node_uid: self.node_uid.clone(),
            states: self.session_states.desired(
                std::time::SystemTime::now(),
                &self.settings.node,
                &self.peers,
                &states,
                &self.peer_errors,
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
            peer_errors: &self.peer_errors,
            peers: &self.peers,
            sessions: &self.exported_peers,
            interface_faults: &self.interface_faults,
            unable: &self.unable_reasons,
            kernel_arp: &self.kernel_arp,
        };
        let report = status::ConfigReport {
            node_uid: self.node_uid.clone(),
            problems: self.checks.problems(now, &self.settings.node, &inputs),
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
                    .answering
                    .keys()
                    .chain(self.handing_over.keys())
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

/// When each node's speaker Pod became ready, as instants of this process's clock (`now` and
/// `wall` are the same moment); a date in the future (clock skew) counts as `now`, one older
/// than this host's clock can express is left out (it holds nothing).
fn pods_ready_since(
    cluster: &Cluster,
    now: std::time::Instant,
    wall: std::time::SystemTime,
) -> BTreeMap<String, std::time::Instant> {
    let wall_secs = wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    cluster
        .speaker_pods()
        .filter(|p| p.ready)
        .filter_map(|p| {
            let ago = u64::try_from(wall_secs - p.ready_since?).unwrap_or(0);
            // Before this host's clock can say: long ago, holds nothing.
            let at = now.checked_sub(std::time::Duration::from_secs(ago))?;
            Some((p.node.clone(), at))
        })
        .collect()
}

/// How often a speaker handing addresses over (excluded, or stopping) looks whether their new
/// owners have announced them. The responder stops answering for an address at the new
/// owner's announcement itself; this bounds how late the speaker's metrics, logs and shutdown
/// learn of it.
pub const HANDOVER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

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

    #[test]
    fn speaker_pods_ready_dates_become_instants_and_unready_pods_count_for_nothing() {
        let mut cluster = Cluster::new(crate::cluster::Scope {
            this_node: "node-a".into(),
            class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
            ignore_unclassed: false,
        });
        let pod = |name: &str, node: &str, status: &str, at: &str| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ferrolb-system"},
                "spec": {"nodeName": node, "containers": []},
                "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": at}]}
            }))
            .unwrap()
        };
        cluster.speaker_pod(crate::cluster::Update::Apply(pod(
            "s-a",
            "node-a",
            "True",
            "2026-01-01T00:00:00Z",
        )));
        cluster.speaker_pod(crate::cluster::Update::Apply(pod(
            "s-b",
            "node-b",
            "False",
            "2026-01-01T00:00:00Z",
        )));
        let now = std::time::Instant::now();
        let wall = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_610);
        let ready = pods_ready_since(&cluster, now, wall);
        assert_eq!(
            ready.get("node-a").map(|t| now - *t),
            Some(std::time::Duration::from_secs(10))
        );
        assert!(!ready.contains_key("node-b"));
        // A date ahead of this host's clock counts as now.
        let early = wall - std::time::Duration::from_secs(60);
        assert_eq!(
            pods_ready_since(&cluster, now, early).get("node-a"),
            Some(&now)
        );
    }
}
