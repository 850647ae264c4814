//! The speaker's model of the cluster: what the planners read, stripped to what they need,
//! indexed by key and updated one watch event at a time. Pure: no I/O, no clock.
//!
//! ```text
//!  watch streams ─ Update<K> ─► Cluster::{service, slice, node, ...}
//!                                 │ convert (one step, [`convert`])
//!                                 ▼
//!                  tables + indexes (slices by Service, Services by address)
//!                                 │ what changed since the last take_changes()
//!                                 ▼
//!                  Changes { services, config } ─► planner::incremental
//! ```
//!
//! # Guarantees
//! - An event costs work proportional to its object: a Service or an EndpointSlice marks only
//!   its Service changed, and only when what the planners read of it differs (a status-only
//!   write to a pool, a Node heartbeat or an EndpointSlice of a Service FerroLB does not handle
//!   changes nothing).
//! - Objects keep only what the planners read: no `managedFields`, annotations or status that is
//!   not used; Services FerroLB does not handle are not kept at all. A kept Service's labels
//!   (read by `serviceSelectors`) are one packed string ([`input::ServiceLabels`]); a label change
//!   marks only that Service changed, so only its addresses are decided again.
//! - An EndpointSlice of a Service FerroLB does not handle (most of a cluster) is kept as two
//!   digests, without its endpoints. When such a Service becomes one FerroLB handles (its type
//!   changed to LoadBalancer, or its slice was seen before it), the model asks for its slices
//!   to be listed again ([`Cluster::take_refetch`], [`Cluster::refetched`]): one list of one
//!   Service's slices, and only when slices of it were seen while it was not handled.
//! - A re-list (after a dropped watch or a 410) removes exactly the objects that are gone.

pub mod convert;
pub mod input;
pub mod peers;
mod records;
mod table;

pub use records::{Digest, Few, ServiceRec, SliceRec, digest};
pub use table::{Table, Update, key_of};

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::v1beta1::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement,
};
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::bgp::config::PeerConfig;
use crate::membership::seeds::{SpeakerPod, speaker_pod};
use input::{
    BgpAdvertisementInfo, BgpPeerInfo, L2AdvertisementInfo, NodeInfo, PoolInfo, ServiceInfo,
    ServiceKey, Snapshot,
};
use peers::PeerConfigError;

/// What the speaker handles, from its flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The node this speaker runs on.
    pub this_node: String,
    /// The `loadBalancerClass` handled.
    pub class: String,
    /// Leave Services without a `loadBalancerClass` to another implementation.
    pub ignore_unclassed: bool,
}

/// What changed since the last [`Cluster::take_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services whose record or endpoints changed (including added and removed ones).
    pub services: BTreeSet<ServiceKey>,
    /// Pools, advertisements, peers, communities, Secrets or Nodes changed: every plan must be
    /// made again.
    pub config: bool,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && !self.config
    }
}

/// The configuration kinds, derived once per change.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Ready pools.
    pub pools: Vec<PoolInfo>,
    /// Layer-2 advertisements.
    pub l2: Vec<L2AdvertisementInfo>,
    /// BGP advertisements, communities resolved.
    pub bgp: Vec<BgpAdvertisementInfo>,
    /// BGP peers as the planner sees them.
    pub peers: Vec<BgpPeerInfo>,
}

/// The model.
#[derive(Debug)]
pub struct Cluster {
    scope: Scope,
    services: Table<ServiceRec, Digest>,
    slices: Table<SliceRec, Digest>,
    /// Node names, for the re-list protocol; what is kept of each Node is in `node_infos`.
    nodes: Table<(), String>,
    pods: Table<SpeakerPod>,
    pools: Table<Kept<IPAddressPool>>,
    l2: Table<Kept<L2Advertisement>>,
    bgp: Table<Kept<BGPAdvertisement>>,
    peers: Table<Kept<BGPPeer>>,
    communities: Table<Kept<Community>>,
    bfd_profiles: Table<Kept<BFDProfile>>,
    secrets: Table<Kept<Secret>>,
    /// Slices by their Service.
    slices_by_service: HashMap<Digest, Few<Digest>>,
    /// Every Service FerroLB handles, with or without an address yet, by [`digest`]: the
    /// slices of these keep their endpoints.
    handled: Table<(), Digest>,
    /// Slices of Services FerroLB does not handle: slice digest to Service digest, no
    /// endpoints.
    unclaimed: Table<Digest, Digest>,
    /// How many of `unclaimed` each Service has.
    unclaimed_by_service: HashMap<Digest, u32>,
    /// Services whose slices must be listed again: they were seen (and their endpoints not
    /// kept) while the Service was not handled.
    refetch: BTreeSet<ServiceKey>,
    /// Services by address, as digests sorted by their keys (almost every address has one
    /// Service).
    services_by_ip: HashMap<IpAddr, Few<Digest>>,
    /// One copy of each node name seen in endpoints.
    node_names: HashSet<Arc<str>>,
    /// Each Node as the planners read it (its `ready` is also the Kubernetes view of live
    /// speakers): the one copy kept, updated one Node at a time.
    node_infos: BTreeMap<String, NodeInfo>,
    /// This node's UID (the owner of the objects that must go with the Node).
    this_node_uid: Option<String>,
    secrets_version: u64,
    speakers_version: u64,
    config: Config,
    changes: Changes,
    speakers_dirty: bool,
}

impl Cluster {
    /// An empty model.
    pub fn new(scope: Scope) -> Self {
        Self {
            scope,
            services: Table::default(),
            slices: Table::default(),
            nodes: Table::default(),
            pods: Table::default(),
            pools: Table::default(),
            l2: Table::default(),
            bgp: Table::default(),
            peers: Table::default(),
            communities: Table::default(),
            bfd_profiles: Table::default(),
            secrets: Table::default(),
            slices_by_service: HashMap::new(),
            handled: Table::default(),
            unclaimed: Table::default(),
            unclaimed_by_service: HashMap::new(),
            refetch: BTreeSet::new(),
            services_by_ip: HashMap::new(),
            node_names: HashSet::new(),
            node_infos: BTreeMap::new(),
            this_node_uid: None,
            secrets_version: 0,
            speakers_version: 0,
            config: Config::default(),
            changes: Changes {
                config: true,
                ..Changes::default()
            },
            speakers_dirty: true,
        }
    }

    /// What the speaker handles.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Takes what changed since the last call (the first call reports the configuration as
    /// changed).
    pub fn take_changes(&mut self) -> Changes {
        let changes = std::mem::take(&mut self.changes);
        if changes.config {
            self.derive_config();
        }
        changes
    }

    /// Whether every kind has completed its first list: before that the planners would see a
    /// partial cluster (a Service without its endpoints, a pool without its advertisement).
    pub fn synced(&self) -> bool {
        self.unsynced().is_empty()
    }

    /// The kinds that have not completed their first list, for logs.
    pub fn unsynced(&self) -> Vec<&'static str> {
        [
            ("services", self.services.is_synced()),
            ("endpointslices", self.slices.is_synced()),
            ("nodes", self.nodes.is_synced()),
            ("speaker pods", self.pods.is_synced()),
            ("ipaddresspools", self.pools.is_synced()),
            ("l2advertisements", self.l2.is_synced()),
            ("bgpadvertisements", self.bgp.is_synced()),
            ("bgppeers", self.peers.is_synced()),
            ("communities", self.communities.is_synced()),
            ("bfdprofiles", self.bfd_profiles.is_synced()),
            ("secrets", self.secrets.is_synced()),
        ]
        .into_iter()
        .filter(|(_, s)| !s)
        .map(|(k, _)| k)
        .collect()
    }

    // ---- watch input ----

    /// A Service event.
    pub fn service(&mut self, update: Update<Service>) {
        match update {
            Update::Restart => {
                self.services.restart();
                self.handled.restart();
            }
            Update::Synced => {
                for (d, gone) in self.services.synced() {
                    self.unindex_service(d, &gone);
                    self.changes.services.insert(gone.key);
                }
                for (gone, ()) in self.handled.synced() {
                    self.unclaim(gone);
                }
            }
            Update::Apply(svc) => {
                let d = digest(
                    svc.metadata.namespace.as_deref().unwrap_or(""),
                    svc.metadata.name.as_deref().unwrap_or(""),
                );
                if ferrolb_api::service::handled(
                    &svc,
                    &self.scope.class,
                    self.scope.ignore_unclassed,
                ) {
                    if self.handled.upsert(d, ()) == Some(None)
                        && self.unclaimed_by_service.contains_key(&d)
                    {
                        self.refetch.insert(convert::service_key(&svc));
                    }
                } else if self.handled.remove(&d).is_some() {
                    self.unclaim(d);
                }
                match self.rec_of(&svc) {
                    Some(rec) => {
                        if let Some(old) = self.services.upsert(d, rec.clone()) {
                            if let Some(old) = old {
                                self.unindex_service(d, &old);
                            }
                            self.index_service(d, &rec);
                            self.changes.services.insert(rec.key);
                        }
                    }
                    None => self.remove_service(d),
                }
            }
            Update::Delete(svc) => {
                let (ns, name) = (
                    svc.metadata.namespace.as_deref().unwrap_or(""),
                    svc.metadata.name.as_deref().unwrap_or(""),
                );
                let d = digest(ns, name);
                if self.handled.remove(&d).is_some() {
                    self.unclaim(d);
                }
                self.remove_service(d);
            }
        }
    }

    /// Service `d` is no longer handled: its slices drop their endpoints.
    fn unclaim(&mut self, d: Digest) {
        for id in Vec::from(self.slices_by_service.remove(&d).unwrap_or_default()) {
            if self.slices.remove(&id).is_some() {
                self.add_unclaimed(id, d);
            }
        }
        self.service_endpoints_changed(d);
    }

    fn add_unclaimed(&mut self, id: Digest, service: Digest) {
        match self.unclaimed.upsert(id, service) {
            Some(None) => *self.unclaimed_by_service.entry(service).or_default() += 1,
            Some(Some(old)) => {
                self.forget_unclaimed(old);
                *self.unclaimed_by_service.entry(service).or_default() += 1;
            }
            None => {}
        }
    }

    fn remove_unclaimed(&mut self, id: Digest) {
        if let Some(service) = self.unclaimed.remove(&id) {
            self.forget_unclaimed(service);
        }
    }

    fn forget_unclaimed(&mut self, service: Digest) {
        if let Some(n) = self.unclaimed_by_service.get_mut(&service) {
            *n -= 1;
            if *n == 0 {
                self.unclaimed_by_service.remove(&service);
            }
        }
    }

    /// Takes the Services whose slices must be listed again (labelled
    /// `kubernetes.io/service-name` with the Service's name, in its namespace) and handed to
    /// [`Cluster::refetched`].
    pub fn take_refetch(&mut self) -> BTreeSet<ServiceKey> {
        std::mem::take(&mut self.refetch)
    }

    /// Asks again for the slices of `key` (a list failed).
    pub fn request_refetch(&mut self, key: ServiceKey) {
        self.refetch.insert(key);
    }

    /// Whether some Service's slices wait to be listed again.
    pub fn refetch_pending(&self) -> bool {
        !self.refetch.is_empty()
    }

    /// The slices of Service `key`, listed after [`Cluster::take_refetch`] asked. Only slices
    /// still kept without endpoints are taken: one the watch has delivered since is newer than
    /// the list, and one the list has but the watch has not yet is left to the watch.
    pub fn refetched(&mut self, key: &ServiceKey, slices: Vec<EndpointSlice>) {
        let d = digest(&key.namespace, &key.name);
        if self.handled.get(&d).is_none() {
            return;
        }
        for slice in slices {
            if self.unclaimed.get(&slice_digest(&slice)) == Some(&d) {
                self.slice(Update::Apply(slice));
            }
        }
    }

    fn rec_of(&self, svc: &Service) -> Option<ServiceRec> {
        convert::service_rec(svc, &self.scope.class, self.scope.ignore_unclassed)
    }

    fn remove_service(&mut self, d: Digest) {
        if let Some(old) = self.services.remove(&d) {
            self.unindex_service(d, &old);
            self.changes.services.insert(old.key);
        }
    }

    /// Indexes the kept Service `d` (already in `services`) by its addresses.
    fn index_service(&mut self, d: Digest, rec: &ServiceRec) {
        for ip in &rec.ingress {
            let services = &self.services;
            let by_key = |other: &Digest| services.get(other).map(|o| &o.key).cmp(&Some(&rec.key));
            match self.services_by_ip.entry(*ip) {
                Entry::Vacant(e) => {
                    e.insert(Few::One(d));
                }
                Entry::Occupied(mut e) => {
                    if let Err(at) = e.get().binary_search_by(by_key) {
                        e.get_mut().edit(|list| list.insert(at, d));
                    }
                }
            }
        }
    }

    fn unindex_service(&mut self, d: Digest, rec: &ServiceRec) {
        for ip in &rec.ingress {
            if let Some(list) = self.services_by_ip.get_mut(ip) {
                if list.contains(&d) {
                    list.edit(|list| list.retain(|k| *k != d));
                }
                if list.is_empty() {
                    self.services_by_ip.remove(ip);
                }
            }
        }
    }

    /// An EndpointSlice event.
    pub fn slice(&mut self, update: Update<EndpointSlice>) {
        match update {
            Update::Restart => {
                self.slices.restart();
                self.unclaimed.restart();
            }
            Update::Synced => {
                for (id, gone) in self.slices.synced() {
                    self.unindex_slice(id, &gone);
                }
                for (_, service) in self.unclaimed.synced() {
                    self.forget_unclaimed(service);
                }
            }
            Update::Apply(slice) => {
                let id = slice_digest(&slice);
                let Some(service) = slice_service(&slice) else {
                    self.remove_slice(id);
                    self.remove_unclaimed(id);
                    return;
                };
                if self.handled.get(&service).is_none() {
                    self.remove_slice(id);
                    self.add_unclaimed(id, service);
                    return;
                }
                self.remove_unclaimed(id);
                let rec = self.slice_rec(&slice, service);
                if let Some(old) = self.slices.upsert(id, rec.clone()) {
                    // A new slice without endpoints (kube-controller-manager's own, for a
                    // Service whose endpoints another slice carries) changes none of them.
                    let adds_nothing = old.is_none() && rec.endpoints.is_empty();
                    if let Some(old) = old {
                        self.unindex_slice(id, &old);
                    }
                    match self.slices_by_service.entry(rec.service) {
                        Entry::Vacant(e) => {
                            e.insert(Few::One(id));
                        }
                        Entry::Occupied(mut e) => {
                            if !e.get().contains(&id) {
                                e.get_mut().edit(|ids| ids.push(id));
                            }
                        }
                    }
                    if !adds_nothing {
                        self.service_endpoints_changed(rec.service);
                    }
                }
            }
            Update::Delete(slice) => {
                let id = slice_digest(&slice);
                self.remove_slice(id);
                self.remove_unclaimed(id);
            }
        }
    }

    fn slice_rec(&mut self, slice: &EndpointSlice, service: Digest) -> SliceRec {
        let names = &mut self.node_names;
        let mut intern = |n: &str| -> Arc<str> {
            if let Some(shared) = names.get(n) {
                return shared.clone();
            }
            let shared: Arc<str> = n.into();
            names.insert(shared.clone());
            shared
        };
        SliceRec {
            service,
            endpoints: convert::endpoints(slice, &mut intern).into_boxed_slice(),
        }
    }

    fn remove_slice(&mut self, id: Digest) {
        if let Some(old) = self.slices.remove(&id) {
            self.unindex_slice(id, &old);
        }
    }

    fn unindex_slice(&mut self, id: Digest, rec: &SliceRec) {
        if let Some(ids) = self.slices_by_service.get_mut(&rec.service) {
            if ids.contains(&id) {
                ids.edit(|ids| ids.retain(|i| *i != id));
            }
            if ids.is_empty() {
                self.slices_by_service.remove(&rec.service);
            }
        }
        self.service_endpoints_changed(rec.service);
    }

    /// Endpoints only matter for Services FerroLB keeps.
    fn service_endpoints_changed(&mut self, service: Digest) {
        if let Some(rec) = self.services.get(&service) {
            self.changes.services.insert(rec.key.clone());
        }
    }

    /// A Node event.
    pub fn node(&mut self, update: Update<Node>) {
        let changed = match update {
            Update::Restart => {
                self.nodes.restart();
                false
            }
            Update::Synced => {
                let gone = self.nodes.synced();
                for (name, ()) in &gone {
                    self.node_infos.remove(name);
                }
                !gone.is_empty()
            }
            Update::Apply(node) => {
                let name = node.name_any();
                if name == self.scope.this_node {
                    self.this_node_uid = node.metadata.uid.clone();
                }
                let info = convert::node_info(&node);
                self.nodes.upsert(name.clone(), ());
                match self.node_infos.get_mut(&name) {
                    Some(old) if *old == info => false,
                    Some(old) => {
                        *old = info;
                        true
                    }
                    None => {
                        self.node_infos.insert(name, info);
                        true
                    }
                }
            }
            Update::Delete(node) => {
                let name = node.name_any();
                self.nodes.remove(&name);
                self.node_infos.remove(&name).is_some()
            }
        };
        if changed {
            self.changes.config = true;
            self.speakers_dirty = true;
        }
    }

    /// This node's UID, once its Node object was seen.
    pub fn this_node_uid(&self) -> Option<&str> {
        self.this_node_uid.as_deref()
    }

    /// Whether this node carries the exclusion label (a drain:
    /// `node.kubernetes.io/exclude-from-external-load-balancers`).
    pub fn this_node_excluded(&self) -> bool {
        self.nodes().get(&self.scope.this_node).is_some_and(|n| {
            n.labels
                .contains_key(ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB)
        })
    }

    /// When each node's speaker Pod became ready, as instants of the caller's clock (`now` and
    /// `wall` are the same moment); a date in the future (clock skew) counts as `now`, one
    /// older than the clock can express is left out (it holds nothing). Unready Pods count for
    /// nothing.
    pub fn speakers_ready_since(
        &self,
        now: std::time::Instant,
        wall: std::time::SystemTime,
    ) -> BTreeMap<String, std::time::Instant> {
        let wall_secs = wall
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.speaker_pods()
            .filter(|p| p.ready)
            .filter_map(|p| {
                let ago = u64::try_from(wall_secs - p.ready_since?).unwrap_or(0);
                // Before this host's clock can say: long ago, holds nothing.
                let at = now.checked_sub(std::time::Duration::from_secs(ago))?;
                Some((p.node.clone(), at))
            })
            .collect()
    }

    /// A speaker Pod event.
    pub fn speaker_pod(&mut self, update: Update<Pod>) {
        let changed = match update {
            Update::Restart => {
                self.pods.restart();
                false
            }
            Update::Synced => !self.pods.synced().is_empty(),
            Update::Apply(pod) => {
                let key = key_of(&pod.metadata);
                match speaker_pod(&pod) {
                    Some(p) => self.pods.upsert(key, p).is_some(),
                    None => self.pods.remove(&key).is_some(),
                }
            }
            Update::Delete(pod) => self.pods.remove(&key_of(&pod.metadata)).is_some(),
        };
        self.speakers_dirty |= changed;
        self.speakers_version += u64::from(changed);
    }

    /// Grows whenever a speaker Pod changes (for readers that must not consume
    /// [`Cluster::speakers_changed`]).
    pub fn speakers_version(&self) -> u64 {
        self.speakers_version
    }

    /// Whether speaker Pods or Nodes changed since the last call (gossip seeds and the
    /// Kubernetes view of live speakers; independent of [`Cluster::take_changes`]).
    pub fn speakers_changed(&mut self) -> bool {
        std::mem::take(&mut self.speakers_dirty)
    }

    /// Makes the next [`Cluster::speakers_changed`] say yes.
    pub fn mark_speakers_changed(&mut self) {
        self.speakers_dirty = true;
    }

    /// An `IPAddressPool` event.
    pub fn pool(&mut self, update: Update<IPAddressPool>) {
        let changed = apply_config(&mut self.pools, update, |mut p| {
            p.status = None;
            p.metadata = config_meta(p.metadata);
            p
        });
        self.changes.config |= changed;
    }

    /// An `L2Advertisement` event.
    pub fn l2_advertisement(&mut self, update: Update<L2Advertisement>) {
        let changed = apply_config(&mut self.l2, update, |mut a| {
            a.status = None;
            a.metadata = config_meta(a.metadata);
            a
        });
        self.changes.config |= changed;
    }

    /// A `BGPAdvertisement` event.
    pub fn bgp_advertisement(&mut self, update: Update<BGPAdvertisement>) {
        let changed = apply_config(&mut self.bgp, update, |mut a| {
            a.status = None;
            a.metadata = config_meta(a.metadata);
            a
        });
        self.changes.config |= changed;
    }

    /// A `BGPPeer` event.
    pub fn peer(&mut self, update: Update<BGPPeer>) {
        let changed = apply_config(&mut self.peers, update, |mut p| {
            p.status = None;
            p.metadata = config_meta(p.metadata);
            p
        });
        self.changes.config |= changed;
    }

    /// A `Community` event.
    pub fn community(&mut self, update: Update<Community>) {
        let changed = apply_config(&mut self.communities, update, |mut c| {
            c.status = None;
            c.metadata = config_meta(c.metadata);
            c
        });
        self.changes.config |= changed;
    }

    /// A `BFDProfile` event.
    pub fn bfd_profile(&mut self, update: Update<BFDProfile>) {
        let changed = apply_config(&mut self.bfd_profiles, update, |mut p| {
            p.status = None;
            p.metadata = config_meta(p.metadata);
            p
        });
        self.changes.config |= changed;
    }

    /// A Secret event (install namespace: TCP-MD5 passwords, the gossip key).
    pub fn secret(&mut self, update: Update<Secret>) {
        let changed = apply_config(&mut self.secrets, update, |mut s| {
            s.metadata = config_meta(s.metadata);
            s
        });
        self.changes.config |= changed;
        self.secrets_version += u64::from(changed);
    }

    /// A number that changes whenever a Secret does (to re-read the gossip keys only then).
    pub fn secrets_version(&self) -> u64 {
        self.secrets_version
    }

    fn derive_config(&mut self) {
        let pools: Vec<IPAddressPool> = sorted(&self.pools);
        let l2: Vec<L2Advertisement> = sorted(&self.l2);
        let bgp: Vec<BGPAdvertisement> = sorted(&self.bgp);
        let peers: Vec<BGPPeer> = sorted(&self.peers);
        let communities: Vec<Community> = sorted(&self.communities);
        self.config = Config {
            pools: convert::pool_infos(&pools),
            l2: l2.iter().map(convert::l2_advertisement_info).collect(),
            bgp: convert::bgp_advertisements(&bgp, &communities),
            peers: convert::bgp_peer_infos(&peers),
        };
    }

    // ---- planner input ----

    /// The configuration kinds as the planners read them (as of the last
    /// [`Cluster::take_changes`]).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Nodes by name.
    pub fn nodes(&self) -> &BTreeMap<String, NodeInfo> {
        &self.node_infos
    }

    /// The Service `key` with its endpoints merged from all its slices, when FerroLB handles it.
    pub fn service_info(&self, key: &ServiceKey) -> Option<ServiceInfo> {
        let rec = self.services.get(&digest(&key.namespace, &key.name))?;
        Some(self.info_of(rec))
    }

    fn info_of(&self, rec: &ServiceRec) -> ServiceInfo {
        let endpoints = self
            .slices_by_service
            .get(&digest(&rec.key.namespace, &rec.key.name))
            .into_iter()
            .flatten()
            .filter_map(|id| self.slices.get(id))
            .flat_map(|s| s.endpoints.iter().cloned())
            .collect();
        ServiceInfo {
            key: rec.key.clone(),
            ingress: rec.ingress.to_vec(),
            local_traffic_policy: rec.local_traffic_policy,
            endpoints,
            labels: rec.labels.clone(),
        }
    }

    /// The Services holding `ip`, sorted.
    pub fn services_at(&self, ip: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        self.services_by_ip
            .get(&ip)
            .into_iter()
            .flatten()
            .filter_map(|d| self.services.get(d))
            .map(|r| &r.key)
    }

    /// Every Service address.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.services_by_ip.keys().copied()
    }

    /// Every Service FerroLB handles.
    pub fn service_keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.services.values().map(|r| &r.key)
    }

    /// The kept record of Service `key`.
    pub fn service_rec(&self, key: &ServiceKey) -> Option<&ServiceRec> {
        self.services.get(&digest(&key.namespace, &key.name))
    }

    /// How many Services FerroLB handles.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// The speaker Pods.
    pub fn speaker_pods(&self) -> impl Iterator<Item = &SpeakerPod> {
        self.pods.values()
    }

    /// The Nodes whose `Ready` condition is `True`.
    pub fn ready_nodes(&self) -> BTreeSet<String> {
        self.node_infos
            .values()
            .filter(|n| n.ready)
            .map(|n| n.name.clone())
            .collect()
    }

    /// The `BGPPeer` objects, sorted by name.
    pub fn peer_objects(&self) -> Vec<BGPPeer> {
        sorted(&self.peers)
    }

    /// The `BFDProfile` objects, sorted by name.
    pub fn bfd_profile_objects(&self) -> Vec<BFDProfile> {
        sorted(&self.bfd_profiles)
    }

    /// The Secrets of the install namespace.
    pub fn secret_objects(&self) -> Vec<Secret> {
        sorted(&self.secrets)
    }

    /// The BGP sessions' configuration on this node (the peers whose `nodeSelectors` select
    /// it), and why any peer cannot be configured.
    pub fn peer_configs(&self) -> (Vec<PeerConfig>, Vec<PeerConfigError>) {
        let labels = self
            .nodes()
            .get(&self.scope.this_node)
            .map(|n| n.labels.clone())
            .unwrap_or_default();
        peers::peer_configs(
            &self.peer_objects(),
            &labels,
            &self.secret_objects(),
            &self.bfd_profile_objects(),
        )
    }

    /// The whole model as the reference planners' snapshot (tests and diagnostics: this costs
    /// work proportional to the cluster).
    pub fn snapshot(
        &self,
        live: BTreeSet<String>,
        unable: BTreeMap<String, BTreeSet<IpAddr>>,
    ) -> Snapshot {
        let mut services: Vec<ServiceInfo> =
            self.services.values().map(|r| self.info_of(r)).collect();
        services.sort_by(|a, b| a.key.cmp(&b.key));
        Snapshot {
            services,
            nodes: self.node_infos.clone(),
            pools: self.config.pools.clone(),
            l2_advertisements: self.config.l2.clone(),
            live_speakers: live,
            this_node: self.scope.this_node.clone(),
            unable,
            hold_down: Default::default(),
        }
    }
}

/// The [`digest`] of the Service a slice belongs to (`kubernetes.io/service-name`).
fn slice_service(slice: &EndpointSlice) -> Option<Digest> {
    let service = slice.labels().get(ferrolb_api::names::SERVICE_NAME_LABEL)?;
    Some(digest(
        slice.metadata.namespace.as_deref().unwrap_or(""),
        service,
    ))
}

fn slice_digest(slice: &EndpointSlice) -> Digest {
    digest(
        slice.metadata.namespace.as_deref().unwrap_or(""),
        slice.metadata.name.as_deref().unwrap_or(""),
    )
}

/// What configuration objects keep of their metadata: identity, labels (selectors) and the
/// creation time (older pools win overlaps).
fn config_meta(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        labels: meta.labels,
        creation_timestamp: meta.creation_timestamp,
        uid: meta.uid,
        ..ObjectMeta::default()
    }
}

/// A configuration object as kept, compared on what the speaker reads (metadata as kept and
/// spec), so a status write by the controller is not a change.
#[derive(Clone, Debug)]
pub struct Kept<K>(pub K);

macro_rules! kept_eq {
    ($($kind:ty),*) => {$(
        impl PartialEq for Kept<$kind> {
            fn eq(&self, other: &Self) -> bool {
                self.0.metadata == other.0.metadata && self.0.spec == other.0.spec
            }
        }
    )*};
}
kept_eq!(
    IPAddressPool,
    L2Advertisement,
    BGPAdvertisement,
    BGPPeer,
    Community,
    BFDProfile
);

impl PartialEq for Kept<Secret> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

fn apply_config<K: kube::Resource>(
    table: &mut Table<Kept<K>>,
    update: Update<K>,
    strip: impl Fn(K) -> K,
) -> bool
where
    Kept<K>: PartialEq,
{
    match update {
        Update::Restart => {
            table.restart();
            false
        }
        Update::Synced => !table.synced().is_empty(),
        Update::Apply(obj) => {
            let key = key_of(obj.meta());
            table.upsert(key, Kept(strip(obj))).is_some()
        }
        Update::Delete(obj) => table.remove(&key_of(obj.meta())).is_some(),
    }
}

fn sorted<K: Clone>(table: &Table<Kept<K>>) -> Vec<K> {
    let mut rows: Vec<(&String, &Kept<K>)> = table.iter().collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    rows.into_iter().map(|(_, v)| v.0.clone()).collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod fixtures;
