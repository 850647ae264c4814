//! What this node does next, decided in one place: from the cluster model, the live speakers,
//! what other nodes cannot answer for and the host, the layer-2 answers, the BGP peers and
//! paths, the Services whose status objects to write and the Events to emit.
//!
//! Pure: no I/O and no clock. Time comes in with [`Inputs`]; the decisions go out as
//! [`Effects`], which the speaker's shell ([`crate::shell::Speaker`]) applies to the ARP/NDP
//! responder, the BGP sessions, the status and Event queues and the metrics, in order.
//!
//! ```text
//!  Cluster ─► take_changes ─┬─► L2Tracker ─► interfaces ─► Effects::l2 (owned, handed over)
//!  Inputs (live, unable, ───┤                              Effects::touched, ::events
//!   host, now, taken over) ─┴─► BgpTracker ──────────────► Effects::peers, ::advertisements
//! ```
//!
//! [`NodePlanner::sync`] reads the model once per call and costs work proportional to what
//! changed since the previous call.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant, SystemTime};

use kube::runtime::events::EventType;
use tracing::{debug, info, warn};

use super::incremental::{BgpTracker, L2Tracker, Unable};
use super::{Interfaces, ServiceKey};
use crate::bgp::config::{Advertisement, PeerConfig, PeerId};
use crate::cluster::peers::PeerConfigError;
use crate::cluster::{Changes, Cluster};
use crate::l2::arrivals::Arrivals;
use crate::l2::host::HostRead;
use crate::l2::iface::{self, InterfaceInfo};
use crate::l2::kernel_arp::{ArpSysctls, Cause, KernelArp, KernelView, sysctl_name};

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
    /// on SIGTERM ([`crate::shell::Speaker::shutdown`]) and when its Node gets the exclusion
    /// label.
    pub l2_handover: Duration,
    /// How long a node that joins the live set must stay live before its
    /// `preferredNodeSelectors` count ([`crate::l2::arrivals::DEFAULT_HOLD_DOWN`]).
    pub l2_preference_hold_down: Duration,
}

/// What one [`NodePlanner::sync`] did, for logs and tests.
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

/// What one [`NodePlanner::sync`] is given besides the cluster model.
pub struct Inputs<'a> {
    /// The live speakers (gossip, or the speaker Pods' readiness).
    pub live: &'a BTreeSet<String>,
    /// The addresses other nodes reported they cannot answer for.
    pub unable_elsewhere: &'a Unable,
    /// The host's interfaces and ARP sysctls when the caller read them again, else `None`.
    pub host: Option<HostRead>,
    /// The handed-over addresses whose new owner has announced them (the responder's
    /// `taken_over`).
    pub taken_over: BTreeSet<IpAddr>,
    /// This instant, on the monotonic clock.
    pub now: Instant,
    /// The same instant on the wall clock (Kubernetes' dates are wall-clock dates).
    pub wall: SystemTime,
}

/// One command for the ARP/NDP responder, in the order it must be applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L2Command {
    /// Set (`Some(interfaces)`) or stop (`None`) answering for these addresses.
    ChangeOwned(BTreeMap<IpAddr, Option<Vec<String>>>),
    /// Keep answering for these addresses until their new owner announces them.
    HandOver(Vec<IpAddr>),
    /// Announce every owned address again, from the start of the schedule.
    AnnounceAgain,
}

/// What this node announces for one Service: its status objects and its `announced` metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    /// The Service.
    pub key: ServiceKey,
    /// The addresses answered over layer 2 here and the interfaces they are answered on, when
    /// there are any.
    pub l2: Option<(Vec<String>, Vec<String>)>,
    /// The peers its addresses are announced to, when this node writes a `ServiceBGPStatus`
    /// for it (`externalTrafficPolicy: Local` only; see [`NodePlanner::announce`]).
    pub bgp_peers: Option<Vec<String>>,
    /// (address, protocol) pairs announced from here, sorted.
    pub series: Vec<(IpAddr, &'static str)>,
}

/// An Event about a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEvent {
    /// The Service.
    pub key: ServiceKey,
    /// Its UID, when the model has it.
    pub uid: Option<String>,
    /// Normal or Warning.
    pub type_: EventType,
    /// The Event's reason.
    pub reason: &'static str,
    /// The Event's note.
    pub note: String,
}

/// What the shell must do after a [`NodePlanner::sync`], in this order per field.
#[derive(Debug, Default)]
pub struct Effects {
    /// For the ARP/NDP responder, in order.
    pub l2: Vec<L2Command>,
    /// The BGP peers, when they changed.
    pub peers: Option<Vec<PeerConfig>>,
    /// The paths for each peer whose paths changed.
    pub advertisements: Vec<(PeerId, Vec<Advertisement>)>,
    /// The Services whose status objects to write again: ask [`NodePlanner::announce`] for
    /// each once the rest is applied (one at a time, so that a burst of 10,000 holds one
    /// Service's announcement at a time, not all of them beside the status queue).
    pub touched: BTreeSet<ServiceKey>,
    /// Events to emit.
    pub events: Vec<ServiceEvent>,
    /// `BGPPeer`s found configured in part or not at all (the configuration-error counter).
    pub peer_config_errors: u64,
    /// The kernel's ARP answers for Service addresses changed ([`NodePlanner::kernel_arp`]).
    pub kernel_arp_changed: bool,
}

/// The decisions of one node's speaker, kept between syncs.
pub struct NodePlanner {
    settings: Settings,
    l2: L2Tracker,
    routes: BgpTracker,
    host: Vec<InterfaceInfo>,
    answering: BTreeMap<IpAddr, Vec<String>>,
    unable_here: BTreeSet<IpAddr>,
    unable_reasons: BTreeMap<IpAddr, &'static str>,
    /// The host as last read, for checking whether its kernel answers ARP for Service
    /// addresses; `None` when the ARP sysctls could not be read.
    kernel_view: Option<KernelView>,
    /// Why the ARP sysctls could not be read, when they could not (told once per change).
    arp_read_error: Option<String>,
    /// Layer-2 Service addresses this node's kernel answers ARP for too.
    kernel_arp: BTreeMap<Ipv4Addr, KernelArp>,
    /// Their causes, each with how many addresses it covers (logged when the set changes).
    kernel_arp_causes: BTreeMap<Cause, usize>,
    peers: Vec<PeerConfig>,
    advertised: BTreeMap<String, Vec<Advertisement>>,
    l2_announcing: BTreeSet<ServiceKey>,
    /// Owned addresses announced for Services sharing them with a Service no advertisement
    /// selects, with that Service (told once, when it starts).
    unselected_sharing: BTreeSet<(ServiceKey, IpAddr)>,
    live: BTreeSet<String>,
    /// The `BGPPeer`s selecting this node that are configured in part or not at all.
    peer_errors: Vec<PeerConfigError>,
    node_uid: Option<String>,
    /// Since when this node carries the exclusion label, as this speaker saw it.
    excluded_since: Option<Instant>,
    /// Addresses given up because this node was excluded, still answered until the instant
    /// (the others take them over and announce them meanwhile, as on SIGTERM).
    handing_over: BTreeMap<IpAddr, Instant>,
    /// When live speakers joined, for the preference hold-down.
    arrivals: Arrivals,
    /// This node while it is on standby ([`NodePlanner::set_standby`]), else empty.
    standby: BTreeSet<String>,
    /// When speaker Pods became ready (Kubernetes' dates as instants), and the
    /// [`Cluster::speakers_version`] they were read at.
    ready_since: (u64, BTreeMap<String, Instant>),
    /// When the next preference hold-down ends.
    hold_down_ends: Option<Instant>,
}

/// How often a speaker handing addresses over (excluded, or stopping) looks whether their new
/// owners have announced them. The responder stops answering for an address at the new
/// owner's announcement itself; this bounds how late the speaker's metrics, logs and shutdown
/// learn of it.
pub const HANDOVER_POLL: Duration = Duration::from_millis(50);

impl NodePlanner {
    /// A planner that has decided nothing yet.
    pub fn new(settings: Settings) -> Self {
        let arrivals = Arrivals::new(settings.node.clone(), settings.l2_preference_hold_down);
        Self {
            settings,
            l2: L2Tracker::new(),
            routes: BgpTracker::new(),
            host: Vec::new(),
            answering: BTreeMap::new(),
            unable_here: BTreeSet::new(),
            unable_reasons: BTreeMap::new(),
            kernel_view: None,
            arp_read_error: None,
            kernel_arp: BTreeMap::new(),
            kernel_arp_causes: BTreeMap::new(),
            peers: Vec::new(),
            advertised: BTreeMap::new(),
            l2_announcing: BTreeSet::new(),
            unselected_sharing: BTreeSet::new(),
            live: BTreeSet::new(),
            peer_errors: Vec::new(),
            node_uid: None,
            excluded_since: None,
            handing_over: BTreeMap::new(),
            arrivals,
            standby: BTreeSet::new(),
            ready_since: (u64::MAX, BTreeMap::new()),
            hold_down_ends: None,
        }
    }

    /// What the operator configured.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The addresses this node answers for over layer 2, with their interfaces.
    pub fn answering(&self) -> &BTreeMap<IpAddr, Vec<String>> {
        &self.answering
    }

    /// The addresses this node gave up but still answers for until their new owner announces
    /// them, with when it stops at the latest.
    pub fn handing_over(&self) -> &BTreeMap<IpAddr, Instant> {
        &self.handing_over
    }

    /// The addresses this node was elected for but cannot answer for (to publish over gossip).
    pub fn unable_here(&self) -> &BTreeSet<IpAddr> {
        &self.unable_here
    }

    /// Why this node cannot answer for each of [`Self::unable_here`].
    pub fn unable_reasons(&self) -> &BTreeMap<IpAddr, &'static str> {
        &self.unable_reasons
    }

    /// Layer-2 Service addresses this node's kernel answers ARP for too.
    pub fn kernel_arp(&self) -> &BTreeMap<Ipv4Addr, KernelArp> {
        &self.kernel_arp
    }

    /// The BGP sessions' configuration on this node.
    pub fn peers(&self) -> &[PeerConfig] {
        &self.peers
    }

    /// The `BGPPeer`s selecting this node that are configured in part or not at all.
    pub fn peer_errors(&self) -> &[PeerConfigError] {
        &self.peer_errors
    }

    /// The paths given to each peer.
    pub fn advertised(&self) -> &BTreeMap<String, Vec<Advertisement>> {
        &self.advertised
    }

    /// This node's UID, for the owner references of its objects.
    pub fn node_uid(&self) -> Option<&str> {
        self.node_uid.as_deref()
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

    /// When [`NodePlanner::sync`] should run again at the latest (a handover or a preference
    /// hold-down ends), if ever. While addresses are handed over, every [`HANDOVER_POLL`]
    /// after `now`, to see which the new owners have announced.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let hold_down = self.hold_down_ends.filter(|_| self.settings.enable_l2);
        let poll = (!self.handing_over.is_empty()).then(|| now + HANDOVER_POLL);
        self.handing_over
            .values()
            .copied()
            .chain(hold_down)
            .chain(poll)
            .min()
    }

    /// Brings this node's decisions in line with `cluster` (what changed since the previous
    /// call), the live speakers, what other nodes cannot answer for and the host; what the
    /// shell must do goes into `fx`.
    pub fn sync(&mut self, cluster: &mut Cluster, input: Inputs<'_>, fx: &mut Effects) -> Synced {
        let changes = cluster.take_changes();
        let cluster = &*cluster;
        let live_changed = *input.live != self.live;
        self.live = input.live.clone();
        let mut out = Synced::default();
        let mut touched: BTreeSet<ServiceKey> = changes.services.clone();
        if changes.config {
            self.node_uid = cluster.this_node_uid().map(str::to_owned);
        }
        if self.settings.enable_l2 {
            self.sync_l2(
                cluster,
                &changes,
                live_changed,
                input,
                &mut touched,
                &mut out,
                fx,
            );
        }
        if self.settings.enable_bgp {
            touched.extend(self.sync_bgp(cluster, &changes, fx));
        }
        out.services = touched.len();
        fx.touched = touched;
        out
    }

    /// The layer-2 part of [`Self::sync`]: the handovers, the hold-down, the host, the election
    /// (again for addresses this node finds it cannot answer for) and the kernel's answers.
    #[allow(clippy::too_many_arguments)]
    fn sync_l2(
        &mut self,
        cluster: &Cluster,
        changes: &Changes,
        live_changed: bool,
        input: Inputs<'_>,
        touched: &mut BTreeSet<ServiceKey>,
        out: &mut Synced,
        fx: &mut Effects,
    ) {
        let now = input.now;
        if changes.config {
            self.note_exclusion(cluster, now);
        }
        self.end_handovers(now, &input.taken_over, fx);
        self.arrivals.observe(now, input.live);
        if self.ready_since.0 != cluster.speakers_version() {
            self.ready_since = (
                cluster.speakers_version(),
                cluster.speakers_ready_since(now, input.wall),
            );
        }
        let mut hold_down = self.arrivals.hold_down(now, &self.ready_since.1);
        hold_down.standby = self.standby.clone();
        self.hold_down_ends = hold_down.next_expiry();
        let host_read = input.host.is_some();
        let host_changed = input
            .host
            .as_ref()
            .is_some_and(|h| h.interfaces != self.host);
        if let Some(h) = input.host {
            self.host = h.interfaces;
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
        let mut pass = changes.clone();
        for _ in 0..4 {
            let mut unable = input.unable_elsewhere.clone();
            if !self.unable_here.is_empty() {
                unable.insert(self.settings.node.clone(), self.unable_here.clone());
            }
            let u = self
                .l2
                .update(cluster, &pass, input.live, &unable, &hold_down);
            out.decided += u.decided;
            out.owned_changed |= u.owned_changed;
            touched.extend(u.services);
            if !(u.owned_changed || host_changed) {
                break;
            }
            // Everything again when the interfaces changed; else only what moved.
            let only = (!host_changed && !self.answering.is_empty()).then_some(&u.owned_delta);
            let stranded = self.resolve_interfaces(cluster, only, now, touched, fx);
            if stranded.is_empty() {
                break;
            }
            self.unable_here.extend(stranded);
            out.unable_changed = true;
            pass = Changes::default();
        }
        if !out.owned_changed && !host_changed && live_changed && !self.answering.is_empty() {
            // A healed partition: the other side may have answered for our addresses.
            fx.l2.push(L2Command::AnnounceAgain);
        }
        // Every address again when the host or the configuration changed; else those of
        // the Services that changed.
        let only = (!host_read && !changes.config).then_some(&*touched);
        fx.kernel_arp_changed |= self.check_kernel_arp(cluster, only);
        self.unable_here
            .retain(|ip| cluster.services_at(*ip).next().is_some());
        let here = &self.unable_here;
        self.unable_reasons.retain(|ip, _| here.contains(ip));
        self.note_unselected_sharing(cluster, touched, fx);
    }

    /// Resolves the owned addresses (all, or `only` those) to host interfaces and tells the
    /// responder; returns the owned addresses that have none (reported, and given up by the
    /// caller).
    fn resolve_interfaces(
        &mut self,
        cluster: &Cluster,
        only: Option<&BTreeSet<IpAddr>>,
        now: Instant,
        touched: &mut BTreeSet<ServiceKey>,
        fx: &mut Effects,
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
                fx.events.push(ServiceEvent {
                    key: key.clone(),
                    uid: uid_of(cluster, key),
                    type_: EventType::Warning,
                    reason: "CannotAnswer",
                    note: format!(
                        "node \"{}\": {problem}; another node answers instead",
                        self.settings.node
                    ),
                });
            }
        }
        if !changes.is_empty() {
            let to_responder = self.hold_for_handover(&changes, now, fx);
            if !to_responder.is_empty() {
                fx.l2.push(L2Command::ChangeOwned(to_responder));
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
    fn note_unselected_sharing(
        &mut self,
        cluster: &Cluster,
        keys: &BTreeSet<ServiceKey>,
        fx: &mut Effects,
    ) {
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
                fx.events.push(ServiceEvent {
                    key: key.clone(),
                    uid: uid_of(cluster, key),
                    type_: EventType::Warning,
                    reason: "SharedAddressNotSelected",
                    note: format!(
                        "node \"{}\" answers for {ip}, shared with Services an L2Advertisement selects; none selects this Service (serviceSelectors), but its traffic to {ip} arrives too",
                        self.settings.node
                    ),
                });
                self.unselected_sharing.insert((key.clone(), *ip));
            }
        }
    }

    /// Notes when this node gets or loses the exclusion label (a node drain): for
    /// `l2_handover` after it got it, the addresses it gives up are still answered.
    fn note_exclusion(&mut self, cluster: &Cluster, now: Instant) {
        match (cluster.this_node_excluded(), self.excluded_since) {
            (true, None) => {
                info!(handover = ?self.settings.l2_handover, "this node is excluded from external load balancers: its layer-2 addresses are answered while the other nodes take them over");
                self.excluded_since = Some(now);
            }
            (false, Some(_)) => {
                info!("this node is no longer excluded from external load balancers");
                self.excluded_since = None;
            }
            _ => {}
        }
    }

    /// The ownership changes the responder should apply now: an address given up within
    /// `l2_handover` of this node's exclusion is handed over ([`L2Command::HandOver`]: answered
    /// until the new owner announces it or that time has passed; kept in `handing_over`); one
    /// owned again stops being handed over.
    fn hold_for_handover(
        &mut self,
        changes: &BTreeMap<IpAddr, Option<Vec<String>>>,
        now: Instant,
        fx: &mut Effects,
    ) -> BTreeMap<IpAddr, Option<Vec<String>>> {
        let until = self
            .excluded_since
            .map(|t| t + self.settings.l2_handover)
            .filter(|until| *until > now);
        let mut apply = BTreeMap::new();
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
                    apply.insert(*ip, names.clone());
                }
            }
        }
        if !handed.is_empty() {
            fx.l2.push(L2Command::HandOver(handed));
        }
        apply
    }

    /// Ends the handovers that are over at `now`: the new owner announced the address
    /// (`taken`: the responder stopped answering for it then), or the handover time has passed.
    fn end_handovers(&mut self, now: Instant, taken: &BTreeSet<IpAddr>, fx: &mut Effects) {
        if self.handing_over.is_empty() {
            return;
        }
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
        fx.l2.push(L2Command::ChangeOwned(done));
    }

    /// Takes the ARP sysctls just read with the interfaces: the view [`Self::check_kernel_arp`]
    /// uses, or none (said once) when they could not be read.
    fn read_kernel_view(&mut self, arp: std::io::Result<ArpSysctls>) {
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
    /// Services; returns whether the set changed. Every node checks every layer-2 address,
    /// elected here or not: every node's kernel answers. An address that no Service holds any
    /// more keeps its fault until the host is read again (kube-proxy taking it off
    /// `kube-ipvs0` is a change that reads it).
    fn check_kernel_arp(&mut self, cluster: &Cluster, only: Option<&BTreeSet<ServiceKey>>) -> bool {
        let Some(view) = &self.kernel_view else {
            if self.kernel_arp.is_empty() {
                return false;
            }
            self.kernel_arp.clear();
            self.note_kernel_arp();
            return true;
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
        changed
    }

    /// Logs the causes of the kernel's ARP answers that appeared or went (once per cause, not
    /// per address: kube-proxy adds addresses one by one).
    fn note_kernel_arp(&mut self) {
        let mut causes: BTreeMap<Cause, usize> = BTreeMap::new();
        for f in self.kernel_arp.values() {
            *causes.entry(f.cause.clone()).or_default() += 1;
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
    }

    /// The BGP part of [`Self::sync`]: the peers (on a configuration change) and the paths of
    /// each peer whose paths changed; returns the Services whose BGP state changed.
    fn sync_bgp(
        &mut self,
        cluster: &Cluster,
        changes: &Changes,
        fx: &mut Effects,
    ) -> BTreeSet<ServiceKey> {
        if changes.config {
            let (peers, errors) = cluster.peer_configs();
            for e in &errors {
                if e.keeps_the_peer() {
                    warn!(error = %e, "BGP peer configured in part");
                } else {
                    warn!(error = %e, "BGP peer not configured");
                }
            }
            fx.peer_config_errors += errors.len() as u64;
            self.peer_errors = errors;
            if peers != self.peers {
                info!(peers = peers.len(), "BGP peers changed");
                fx.peers = Some(peers.clone());
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
                fx.advertisements.push((peer.id.clone(), ads.clone()));
                self.advertised.insert(peer.id.0.clone(), ads);
            }
        }
        self.advertised
            .retain(|p, _| configured.contains(p.as_str()));
        u.services
    }

    /// What this node announces for `key` now, with a `nodeAssigned` Event when it starts
    /// answering for it over layer 2.
    pub fn announce(
        &mut self,
        cluster: &Cluster,
        key: &ServiceKey,
    ) -> (Announced, Option<ServiceEvent>) {
        let mut series: Vec<(IpAddr, &'static str)> = Vec::new();
        let mut l2 = None;
        let mut bgp_peers = None;
        if let Some(rec) = cluster.service_rec(key) {
            let mut ips = Vec::new();
            let mut ifs = BTreeSet::new();
            for ip in &rec.ingress {
                if let Some(names) = self.answering.get(ip) {
                    ips.push(ip.to_string());
                    ifs.extend(names.iter().cloned());
                    series.push((*ip, "layer2"));
                }
            }
            if !ips.is_empty() {
                l2 = Some((ips, ifs.into_iter().collect()));
            }
            if let Some(Ok(peers)) = self.routes.service(key) {
                // One object per (Service, node) only where the announcing nodes are few: with
                // `externalTrafficPolicy: Local`, the nodes with an endpoint. With `Cluster`,
                // every eligible node announces every address, and objects per pair would be
                // Services × nodes (10 million for 10,000 Services on 1,000 nodes).
                if rec.local_traffic_policy {
                    bgp_peers = Some(peers.iter().cloned().collect());
                }
                for ip in &rec.ingress {
                    series.push((*ip, "bgp"));
                }
            }
        }
        let newly_announcing = l2.is_some() && !self.l2_announcing.contains(key);
        if l2.is_some() {
            self.l2_announcing.insert(key.clone());
        } else {
            self.l2_announcing.remove(key);
        }
        let event = newly_announcing.then(|| ServiceEvent {
            key: key.clone(),
            uid: uid_of(cluster, key),
            type_: EventType::Normal,
            reason: "nodeAssigned",
            note: format!(
                "announcing from node \"{}\" with protocol \"layer2\"",
                self.settings.node
            ),
        });
        series.sort();
        series.dedup();
        let announced = Announced {
            key: key.clone(),
            l2,
            bgp_peers,
            series,
        };
        (announced, event)
    }
}

/// The UID of Service `key`, when the model has it (an Event's target).
fn uid_of(cluster: &Cluster, key: &ServiceKey) -> Option<String> {
    cluster.service_rec(key).and_then(|r| r.uid.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Scope, Update, fixtures};
    use crate::l2::frame::MacAddr;

    const WEB: &str = "10.99.0.100";
    const BOTH: &[&str] = &["node-a", "node-b"];

    /// node-a's planner and model: nodes a and b, one pool and L2Advertisement, Service `web`
    /// at [`WEB`] with endpoints on both; handovers last 10 s.
    struct NodeA {
        planner: NodePlanner,
        cluster: Cluster,
    }

    impl NodeA {
        fn new() -> Self {
            let planner = NodePlanner::new(Settings {
                node: "node-a".into(),
                namespace: "ferrolb-system".into(),
                enable_l2: true,
                enable_bgp: false,
                l2_handover: Duration::from_secs(10),
                l2_preference_hold_down: Duration::ZERO,
            });
            let mut cluster = Cluster::new(Scope {
                this_node: "node-a".into(),
                class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
                ignore_unclassed: false,
            });
            cluster.node(Update::Apply(fixtures::node("node-a", &[])));
            cluster.node(Update::Apply(fixtures::node("node-b", &[])));
            cluster.pool(Update::Apply(fixtures::pool("lan", &["10.99.0.100/30"])));
            cluster.l2_advertisement(Update::Apply(fixtures::l2_advertisement("all", &[], None)));
            cluster.service(Update::Apply(fixtures::service(
                "default",
                "web",
                &[WEB],
                false,
            )));
            cluster.slice(Update::Apply(fixtures::slice(
                "default",
                "web-1",
                "web",
                &[("node-a", true), ("node-b", true)],
            )));
            Self { planner, cluster }
        }

        /// One sync at `now` with these live nodes, the host read or not, and these handed-over
        /// addresses taken over by their new owner.
        fn sync(
            &mut self,
            now: Instant,
            live: &[&str],
            host: Option<HostRead>,
            taken_over: &[&str],
        ) -> Effects {
            let live: BTreeSet<String> = live.iter().map(|n| n.to_string()).collect();
            let mut fx = Effects::default();
            self.planner.sync(
                &mut self.cluster,
                Inputs {
                    live: &live,
                    unable_elsewhere: &Unable::new(),
                    host,
                    taken_over: taken_over.iter().map(|ip| ip.parse().unwrap()).collect(),
                    now,
                    wall: SystemTime::now(),
                },
                &mut fx,
            );
            fx
        }

        /// node-a alone is live and answers for [`WEB`]; then node-a is drained (the exclusion
        /// label), node-b is live, and a sync at `drained_at` hands the address over.
        fn answer_then_drain(&mut self, t0: Instant, drained_at: Instant) -> (Effects, Effects) {
            let first = self.sync(t0, &["node-a"], Some(lan()), &[]);
            self.cluster.node(Update::Apply(fixtures::node(
                "node-a",
                &[(ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB, "true")],
            )));
            (first, self.sync(drained_at, BOTH, None, &[]))
        }
    }

    /// One interface, in the pool's subnet.
    fn lan() -> HostRead {
        HostRead {
            interfaces: vec![InterfaceInfo {
                name: "lan0".into(),
                index: 7,
                mac: Some(MacAddr([0x02, 0, 0, 0, 0, 0x0a])),
                up: true,
                loopback: false,
                noarp: false,
                networks: vec!["10.99.0.10/24".parse().unwrap()],
            }],
            arp: Ok(ArpSysctls::default()),
        }
    }

    fn gone(ip: IpAddr) -> Vec<L2Command> {
        vec![L2Command::ChangeOwned(BTreeMap::from([(ip, None)]))]
    }

    #[test]
    fn an_excluded_node_hands_its_address_over_until_the_new_owner_announces_it() {
        let mut node = NodeA::new();
        let ip: IpAddr = WEB.parse().unwrap();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let (first, drained) = node.answer_then_drain(t0, t1);
        // Alone, node-a answers on the interface of the address's subnet.
        assert_eq!(
            first.l2,
            vec![L2Command::ChangeOwned(BTreeMap::from([(
                ip,
                Some(vec!["lan0".to_string()])
            )]))]
        );
        let web = ServiceKey {
            namespace: "default".into(),
            name: "web".into(),
        };
        assert_eq!(first.touched, BTreeSet::from([web.clone()]));
        // Drained, node-b takes the address over and node-a answers until node-b announces it.
        assert_eq!(drained.l2, vec![L2Command::HandOver(vec![ip])]);
        assert!(node.planner.answering().is_empty());
        assert_eq!(
            node.planner.handing_over().get(&ip),
            Some(&(t1 + Duration::from_secs(10))),
            "answered for the handover time from when the label was seen"
        );
        assert_eq!(node.planner.next_deadline(t1), Some(t1 + HANDOVER_POLL));
        // node-b announced it: node-a stops answering.
        let t2 = t1 + HANDOVER_POLL;
        assert_eq!(node.sync(t2, BOTH, None, &[WEB]).l2, gone(ip));
        assert!(node.planner.handing_over().is_empty());
        assert_eq!(node.planner.next_deadline(t2), None);
    }

    #[test]
    fn a_service_is_told_once_that_this_node_announces_it() {
        let mut node = NodeA::new();
        let ip: IpAddr = WEB.parse().unwrap();
        let fx = node.sync(Instant::now(), &["node-a"], Some(lan()), &[]);
        let web = fx.touched.first().expect("web was touched").clone();
        let (announced, event) = node.planner.announce(&node.cluster, &web);
        assert_eq!(announced.series, vec![(ip, "layer2")]);
        assert_eq!(
            announced.l2,
            Some((vec![WEB.to_string()], vec!["lan0".to_string()]))
        );
        assert_eq!(event.map(|e| e.reason), Some("nodeAssigned"));
        assert_eq!(node.planner.announce(&node.cluster, &web).1, None);
    }

    #[test]
    fn a_handover_nobody_takes_ends_when_its_time_is_up() {
        let mut node = NodeA::new();
        let ip: IpAddr = WEB.parse().unwrap();
        let t0 = Instant::now();
        let (_, drained) = node.answer_then_drain(t0, t0);
        assert_eq!(drained.l2, vec![L2Command::HandOver(vec![ip])]);
        let before = t0 + Duration::from_secs(9);
        assert_eq!(node.sync(before, BOTH, None, &[]).l2, vec![]);
        let after = t0 + Duration::from_secs(10);
        assert_eq!(node.sync(after, BOTH, None, &[]).l2, gone(ip));
    }
}
