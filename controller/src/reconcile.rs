//! The controller's Kubernetes shell: reads Services, pools and namespaces from watch caches,
//! asks the allocator, writes `status.loadBalancer` and pool status, emits Events.
//!
//! ```text
//!  watchers (Services, Namespaces, pools, advertisements, peers, communities, BFD profiles,
//!            Secrets' names)
//!      │ reflector stores                         every change ─► trigger ─┐
//!      ▼                                                                   ▼
//!  Controller::pass ── allocator.assign (pure) ──► plan: status writes, Events, pool status
//!      │                                                                   │
//!      └──── only while Leadership::is_leader() ◄── leader::lease::run     ▼
//!                                                            API writes (bounded concurrency)
//! ```
//!
//! A pass looks at the Services the work queue names (every Service at start, on pool or
//! namespace changes and every 30 s), so a dropped watch, a failed write or a restart only
//! delays convergence. On becoming leader, the allocator is rebuilt from a fresh LIST of pools
//! and Services (never from a cache that might lag the previous leader's writes).
//!
//! One API write per assignment: the status patch carries the pool annotation too (a Service's
//! status strategy resets only `spec`, so kube-apiserver applies `metadata.annotations` from a
//! `/status` merge patch). A Service whose write fails backs off on its own (200 ms doubling to
//! 30 s), with a `StatusWriteFailed` Event after five failures in a row; the others go on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use ferrolb_api::names;
use ferrolb_api::summary::{Checked, Problem};
use ferrolb_api::v1beta1::{
    BFDProfile, BGPAdvertisement, BGPPeer, CONDITION_READY, Community, IPAddressPool,
    IPAddressPoolStatus, L2Advertisement,
};
use ferrolb_api::validate::{self, ConfigError, PoolVerdict};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Namespace, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{Instrument, debug, debug_span, info, warn};

use crate::allocator::{Allocator, IpFamily, IpMode, Outcome, Pool, ServiceKey};
use crate::apicall::{self, ApiCallError};
use crate::configstate::ConfigStateWriter;
use crate::convert::{
    ClassFilter, allocator_pools, current_ingress, desired_ingress, request_from_service,
    service_key,
};
use crate::events::{EventQueue, Pushed};
use crate::leader::lease::Leadership;
use crate::metrics::{AssignedLabels, Metrics, PoolLabels, ReasonLabels};

/// Read-only views of the cluster, kept current by watchers.
#[derive(Clone)]
pub struct Stores {
    /// Every Service.
    pub services: Store<Service>,
    /// Every Namespace (for `namespaceSelectors`).
    pub namespaces: Store<Namespace>,
    /// Pools in the install namespace.
    pub pools: Store<IPAddressPool>,
    /// L2 advertisements in the install namespace.
    pub l2: Store<L2Advertisement>,
    /// BGP advertisements in the install namespace.
    pub bgp: Store<BGPAdvertisement>,
    /// BGP peers in the install namespace.
    pub peers: Store<BGPPeer>,
    /// Community aliases in the install namespace.
    pub communities: Store<Community>,
    /// BFD profiles in the install namespace (for BGP peers' `bfdProfile`).
    pub bfd_profiles: Store<BFDProfile>,
    /// Secrets in the install namespace, metadata only (for BGP peers' `passwordSecret`: the
    /// controller needs their names, never their data).
    pub secrets: Store<PartialObjectMeta<Secret>>,
}

impl Stores {
    /// Whether every configuration kind has been listed once (before that, a missing pool,
    /// peer or Secret may only not have been seen yet).
    pub fn config_listed(&self) -> bool {
        use futures::FutureExt;
        fn listed<K: Resource<DynamicType = ()> + Clone>(s: &Store<K>) -> bool
        where
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            s.wait_until_ready()
                .now_or_never()
                .is_some_and(|r| r.is_ok())
        }
        listed(&self.pools)
            && listed(&self.l2)
            && listed(&self.bgp)
            && listed(&self.peers)
            && listed(&self.communities)
            && listed(&self.bfd_profiles)
            && listed(&self.secrets)
    }
}

/// What the controller remembers about one Service between passes.
#[derive(Debug, Default, Clone)]
struct Memo {
    /// The resourceVersion our last status write was based on: while the cache still shows
    /// it, our write is not visible yet and must not be repeated.
    written_over: Option<String>,
    /// The reason of the last failure reported as an Event (Events only on transitions).
    last_failure: Option<String>,
    /// Status writes that failed in a row, and when the next may be tried.
    write_failures: u32,
    retry_at: Option<Instant>,
    /// Whether the cache has shown the status we want since we last wrote it: a difference
    /// after that is another writer's change, restored with an Event.
    confirmed: bool,
    /// The addresses a Service that stopped being ours held, until its status no longer
    /// shows them (they are released from the allocator at once).
    releasing: Vec<String>,
    /// The resourceVersion at which the Service was last found in order: its address held,
    /// its status showing it, nothing refused, nothing to write. The periodic pass
    /// ([`Scope::Resync`]) skips it while the cache still shows that version.
    settled: Option<String>,
}

/// Status writes in flight at once.
pub const WRITES_AT_ONCE: usize = 16;

/// Of the safety net's looks, one in this many is over every cached Service even when the
/// cache has not changed since the last such look (with the default 30 s period, every 5
/// minutes): a defence against a change to the controller's own records that no pass
/// accounted for. The others cost what changed.
pub const FULL_LOOK_EVERY: u32 = 10;

/// What the safety net ([`Scope::Resync`]) knows from its last look over every cached
/// Service. Between two looks the cache changes only through the watch (counted), and the
/// controller's own records (`memo`, the allocator) only for the Services a pass looks at
/// (recorded here) or in a pass over every Service (which forgets the look). So when the
/// watch delivered nothing since that look, a Service it found in order and no pass has
/// looked at since is still in order, and the next look need only go over the others.
#[derive(Debug, Default)]
struct SafetyNet {
    /// The watch's Service event count at the last look over every cached Service, and the
    /// narrowed looks since; `None` until the first, and after a pass over every Service.
    full: Option<(u64, u32)>,
    /// What the last look found not in order, and every Service looked at since.
    since: BTreeSet<ServiceKey>,
}

impl SafetyNet {
    /// Whether the look at `cache_changes` may be narrowed to [`SafetyNet::since`]; records
    /// the look either way.
    fn narrow(&mut self, cache_changes: u64) -> bool {
        match &mut self.full {
            Some((seen, looks)) if *seen == cache_changes && *looks + 1 < FULL_LOOK_EVERY => {
                *looks += 1;
                true
            }
            _ => {
                self.full = Some((cache_changes, 0));
                false
            }
        }
    }

    /// A pass looked at `keys` (their records may have changed).
    fn looked_at(&mut self, keys: impl Iterator<Item = ServiceKey>) {
        if self.full.is_some() {
            self.since.extend(keys);
        }
    }

    /// A pass over every Service: records of any Service may have changed.
    fn forget(&mut self) {
        *self = Self::default();
    }
}

/// Failed status writes in a row after which a `StatusWriteFailed` Event is emitted.
pub const EVENT_AFTER_FAILURES: u32 = 5;

/// One write a pass decided on.
/// A status write: the Service, the resourceVersion it was planned from, its ingress and pool.
type StatusWrite = (
    ServiceKey,
    Option<String>,
    Vec<LoadBalancerIngress>,
    Option<String>,
);

enum Write {
    Status {
        key: ServiceKey,
        rv: Option<String>,
        ingress: Vec<LoadBalancerIngress>,
        pool: Option<String>,
        /// The status drops an address the Service holds now: written before the writes that
        /// may give that address to another Service.
        releases: bool,
    },
    Event {
        svc: Arc<Service>,
        event: Event,
    },
}

/// What the operator configured.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The install namespace, where pools and advertisements live.
    pub namespace: String,
    /// Which Services are ours.
    pub filter: ClassFilter,
    /// `ipMode` for pools that do not set one.
    pub default_ip_mode: IpMode,
}

/// Which Services a pass looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every Service (start, pool or namespace changes).
    All,
    /// The periodic safety net: every Service but those found in order at the version the
    /// cache still shows ([`Memo`]'s `settled`), and those known here that the cache no longer
    /// has. Pools, namespaces and configuration did not change (those make [`Scope::All`]),
    /// so a Service whose object did not change either has nothing new to look at; one
    /// refused, backing off or being released is never settled.
    ///
    /// `cache_changes` is how many Service events the watch has delivered so far (counted
    /// where they arrive, before anything can drop them; read before the pass reads the
    /// cache). When it is what it was at the last look over every cached Service, the cache
    /// is as that look saw it, and the look is narrowed to what that look found and what
    /// passes have looked at since ([`SafetyNet`]): its cost is what changed, not a lookup per
    /// Service. Every [`FULL_LOOK_EVERY`]th look is over every Service whatever the count says.
    Resync {
        /// Service events delivered by the watch so far.
        cache_changes: u64,
    },
    /// Only these (their object changed, or a write for them failed).
    Services(BTreeSet<ServiceKey>),
    /// Configuration objects changed, and these Services: pools are checked again (a new,
    /// removed or changed pool makes it a full pass) and configuration status is written.
    Config(BTreeSet<ServiceKey>),
}

/// How one write went.
struct WriteResult {
    /// For a status write: the Service and the resourceVersion the write was based on.
    status_of: Option<(ServiceKey, Option<String>)>,
    result: Result<(), ApiCallError>,
    operation: &'static str,
}

/// The controller's state while it leads.
pub struct Controller {
    client: Client,
    settings: Settings,
    leadership: Leadership,
    metrics: Metrics,
    events: Arc<EventQueue>,
    allocator: Allocator,
    pools_in: Vec<Pool>,
    /// The pools (name, generation) `pools_in` was computed from.
    pools_seen: Vec<(String, Option<i64>)>,
    memo: HashMap<ServiceKey, Memo>,
    /// What the safety net may skip.
    safety_net: SafetyNet,
    /// Addresses exported in `ferrolb_service_address_assigned`, per Service.
    exported: HashMap<ServiceKey, Vec<String>>,
    /// Services backing off after failed writes, by when they may be tried again.
    backoff: BTreeSet<(Instant, ServiceKey)>,
    /// Of those, the ones whose last write found the server unreachable or unavailable: the
    /// next write that succeeds says it is back, and their back-off ends then (a back-off grown
    /// to 30 s during an outage would otherwise outlast the outage by up to 30 s).
    waiting_for_server: BTreeSet<ServiceKey>,
    /// The controller's `ConfigurationState`.
    config_state: ConfigStateWriter,
}

/// Result of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Writes attempted.
    pub writes: usize,
    /// Writes that failed.
    pub failed: usize,
    /// Services to look at again in the next pass (their object changed under a write).
    pub retry: BTreeSet<ServiceKey>,
    /// When the first Service backing off may be tried again.
    pub next_retry: Option<Instant>,
    /// When the pass had looked at every Service in its scope and began to write.
    pub planned_at: Option<Instant>,
}

impl Controller {
    /// Builds the allocator from a complete view of pools and Services read while this replica
    /// leads: nothing is assigned from a partial view, and a restart changes no address. That
    /// view is a fresh LIST, or, with `caches_fresh`, the caches themselves: the caller says so
    /// only when their first LIST began after this replica became leader and it has led ever
    /// since (a process that wins the election before starting its watches), which makes them
    /// as fresh as a LIST made now, and saves reading every Service twice at a cold start.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        client: Client,
        settings: Settings,
        leadership: Leadership,
        metrics: Metrics,
        events: Arc<EventQueue>,
        stores: &Stores,
        caches_fresh: bool,
    ) -> Result<Self, kube::Error> {
        let namespaces = &stores.namespaces;
        let (pools, services): (Vec<IPAddressPool>, Vec<Arc<Service>>) = if caches_fresh {
            let pools = stores.pools.state().iter().map(|p| (**p).clone()).collect();
            (pools, stores.services.state())
        } else {
            let pools = Api::namespaced(client.clone(), &settings.namespace)
                .list(&ListParams::default())
                .await?
                .items;
            let services = Api::<Service>::all(client.clone())
                .list(&ListParams::default())
                .await?;
            (pools, services.items.into_iter().map(Arc::new).collect())
        };
        let pools_in = allocator_pools(&pools, settings.default_ip_mode);
        let requests = services
            .iter()
            .filter(|s| settings.filter.is_ours(s))
            .filter_map(|s| request_from_service(s, &namespace_labels(namespaces, s)).ok())
            .collect();
        let allocator = Allocator::from_snapshot(pools_in.clone(), requests);
        info!(
            pools = pools.len(),
            services = services.len(),
            from = if caches_fresh { "caches" } else { "list" },
            "allocator loaded from the cluster"
        );
        Ok(Self {
            config_state: ConfigStateWriter::new(client.clone(), &settings.namespace),
            client,
            settings,
            leadership,
            metrics,
            events,
            allocator,
            pools_in,
            pools_seen: Vec::new(),
            memo: HashMap::new(),
            safety_net: SafetyNet::default(),
            exported: HashMap::new(),
            backoff: BTreeSet::new(),
            waiting_for_server: BTreeSet::new(),
        })
    }

    /// The Services whose back-off ended by `now`: the caller adds them to the next scope.
    pub fn due(&mut self, now: Instant) -> BTreeSet<ServiceKey> {
        let mut due = BTreeSet::new();
        while let Some((at, _)) = self.backoff.first()
            && *at <= now
        {
            let (_, key) = self.backoff.pop_first().expect("checked above");
            due.insert(key);
        }
        due
    }

    /// Looks at the Services in `scope` (every Service and pool when pools changed) and applies
    /// what changed. Services that an address freed during the pass lets retry are looked at in
    /// the same pass; Services backing off until after `now` are left for later.
    pub async fn pass(&mut self, stores: &Stores, scope: Scope, now: Instant) -> PassReport {
        let pools = stores.pools.state();
        let config = matches!(scope, Scope::All | Scope::Resync { .. } | Scope::Config(_));
        let mut scope = match scope {
            Scope::Config(keys) => Scope::Services(keys),
            other => other,
        };
        // Pools are checked again only when one was added, removed or its spec changed: the
        // status the controller itself writes (counts, conditions) bumps resourceVersion, not
        // generation, and must not turn every pass into a full one.
        let seen: Vec<(String, Option<i64>)> = pools
            .iter()
            .map(|p| (p.name_any(), p.metadata.generation))
            .collect();
        if config && (seen != self.pools_seen || matches!(scope, Scope::All)) {
            let pool_objs: Vec<IPAddressPool> = pools.iter().map(|p| (**p).clone()).collect();
            let pools_in = allocator_pools(&pool_objs, self.settings.default_ip_mode);
            self.pools_seen = seen;
            if pools_in != self.pools_in {
                let changed = self.allocator.set_pools(pools_in.clone());
                debug!(invalidated = changed.invalidated.len(), "pools changed");
                self.pools_in = pools_in;
                scope = Scope::All;
            }
        }
        let full = matches!(scope, Scope::All | Scope::Resync { .. });
        let mut queue = self.keys_in(stores, scope);
        let mut visits: HashMap<ServiceKey, u8> = HashMap::new();
        let mut writes = Vec::new();
        while let Some(key) = queue.pop_first() {
            let n = visits.entry(key.clone()).or_default();
            *n += 1;
            if *n > 3 {
                continue; // a Service freed and refused in a loop: the next pass looks again
            }
            if self
                .memo
                .get(&key)
                .and_then(|m| m.retry_at)
                .is_some_and(|at| at > now)
            {
                continue; // backing off; `due` brings it back
            }
            self.metrics.services_reconciled.inc();
            let span = debug_span!("service", service = %key);
            let _entered = span.enter();
            let object = stores
                .services
                .get(&ObjectRef::new(&key.name).within(&key.namespace));
            let freed = match object {
                None => {
                    self.memo.remove(&key);
                    self.waiting_for_server.remove(&key);
                    self.allocator.release(&key)
                }
                Some(svc) if !self.settings.filter.is_ours(&svc) => {
                    self.plan_clear(&svc, &mut writes);
                    self.allocator.release(&key)
                }
                Some(svc) => self.plan_service(&svc, &stores.namespaces, &mut writes),
            };
            queue.extend(freed);
        }
        for key in visits.keys() {
            self.export_assignment(key);
        }
        let visited = !visits.is_empty();
        self.safety_net.looked_at(visits.into_keys());
        let planned_at = Instant::now();
        let mut report = self.apply(writes, now).await;
        report.planned_at = Some(planned_at);
        report.next_retry = self.backoff.first().map(|(at, _)| *at);
        if full || config {
            let pool_objs: Vec<IPAddressPool> = pools.iter().map(|p| (**p).clone()).collect();
            self.write_config_status(stores, &pool_objs).await;
            self.update_metrics(&pool_objs);
        } else if visited {
            // Addresses taken or given back show in the pools' use at once, not at the next
            // periodic pass: the metrics (in memory), and the status of each pool whose counts
            // changed (a write per pool that changed, not per Service).
            let pool_objs: Vec<IPAddressPool> = pools.iter().map(|p| (**p).clone()).collect();
            self.update_metrics(&pool_objs);
            if self.leadership.is_leader() {
                let verdicts = validate::check_pools(&pool_objs);
                self.write_pool_statuses(&pool_objs, &verdicts).await;
            }
        }
        report
    }

    /// The Services a pass of `scope` looks at: the given ones; with [`Scope::Resync`], those
    /// whose version the cache shows is not the one settled here, and those gone from the
    /// cache; with [`Scope::All`], every one known anywhere.
    fn keys_in(&mut self, stores: &Stores, scope: Scope) -> BTreeSet<ServiceKey> {
        match scope {
            Scope::Services(keys) | Scope::Config(keys) => keys,
            Scope::Resync { cache_changes } => {
                self.metrics.periodic_passes.inc();
                let cache = |k: &ServiceKey| {
                    stores
                        .services
                        .get(&ObjectRef::new(&k.name).within(&k.namespace))
                };
                let narrowed = self.safety_net.narrow(cache_changes);
                let keys = if narrowed {
                    let among = std::mem::take(&mut self.safety_net.since);
                    self.metrics.periodic_lookups.inc_by(among.len() as u64);
                    unsettled_among(among, &self.memo, |k| self.allocator.has_record(k), cache)
                } else {
                    let services = stores.services.state();
                    self.metrics.periodic_lookups.inc_by(services.len() as u64);
                    let cached = |k: &ServiceKey| cache(k).is_some();
                    unsettled(&services, &self.memo, self.allocator.services(), cached)
                };
                debug!(narrowed, unsettled = keys.len(), "periodic pass");
                self.safety_net.since.clone_from(&keys);
                keys
            }
            Scope::All => {
                self.safety_net.forget();
                let mut keys: BTreeSet<ServiceKey> = stores
                    .services
                    .state()
                    .iter()
                    .map(|s| service_key(s))
                    .collect();
                keys.extend(self.memo.keys().cloned());
                keys.extend(self.allocator.assignments().into_iter().map(|(k, _)| k));
                keys
            }
        }
    }

    /// Keeps `ferrolb_service_address_assigned` in line with the allocator for one Service.
    fn export_assignment(&mut self, key: &ServiceKey) {
        let now: Vec<String> = self
            .allocator
            .assignment(key)
            .map(|a| a.ips.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let before = self.exported.remove(key).unwrap_or_default();
        let labels = |ip: &String| AssignedLabels {
            namespace: key.namespace.clone(),
            service: key.name.clone(),
            ip: ip.clone(),
        };
        for ip in before.iter().filter(|ip| !now.contains(ip)) {
            self.metrics.assigned.remove(&labels(ip));
        }
        for ip in &now {
            self.metrics.assigned.get_or_create(&labels(ip)).set(1);
        }
        if !now.is_empty() {
            self.exported.insert(key.clone(), now);
        }
    }

    /// A Service that stopped being ours (type or class changed) loses what we wrote on it:
    /// our pool annotation, and those ingress entries that hold our addresses. Entries another
    /// implementation wrote meanwhile stay, so the release never races the new owner.
    fn plan_clear(&mut self, svc: &Arc<Service>, writes: &mut Vec<Write>) {
        let key = service_key(svc);
        let held: Vec<String> = self
            .allocator
            .assignment(&key)
            .map(|a| a.ips.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let memo = self.memo.entry(key.clone()).or_default();
        memo.settled = None;
        if !held.is_empty() {
            memo.releasing = held;
        }
        let annotated = svc
            .annotations()
            .contains_key(names::IP_ALLOCATED_FROM_POOL);
        let current = current_ingress(svc);
        let kept: Vec<LoadBalancerIngress> = current
            .iter()
            .filter(|i| !i.ip.as_ref().is_some_and(|ip| memo.releasing.contains(ip)))
            .cloned()
            .collect();
        if !annotated && kept.len() == current.len() {
            memo.releasing.clear();
            memo.settled = svc.resource_version();
            return;
        }
        if memo.written_over.is_some() && memo.written_over == svc.resource_version() {
            return;
        }
        writes.push(Write::Status {
            key,
            rv: svc.resource_version(),
            releases: kept.len() < current.len(),
            ingress: kept,
            pool: None,
        });
        if annotated {
            writes.push(event(
                svc,
                EventType::Normal,
                "ClearAssignment",
                "Service is no longer handled by FerroLB; its address was released".into(),
            ));
        }
    }

    /// Plans one Service; returns the Services that may retry because this one freed addresses.
    fn plan_service(
        &mut self,
        svc: &Arc<Service>,
        namespaces: &Store<Namespace>,
        writes: &mut Vec<Write>,
    ) -> Vec<ServiceKey> {
        let key = service_key(svc);
        let memo = self.memo.entry(key.clone()).or_default();
        memo.settled = None;
        if memo.written_over.is_some() && memo.written_over == svc.resource_version() {
            return vec![]; // our last write is not in the cache yet
        }
        if memo.written_over.take().is_some() {
            // Our write was conditional on `written_over`, so any later version in the cache
            // is our write or a change made after it: what we wrote was in place. (The work
            // queue coalesces, so the version our write produced may never be reconciled
            // itself; without this, another writer's change made right after our write would
            // be restored without an Event.)
            memo.confirmed = true;
        }
        let outcome = match request_from_service(svc, &namespace_labels(namespaces, svc)) {
            Ok(req) => self.allocator.assign(&req),
            Err(error) => {
                // Contradictory annotations: an error on the Service, its status untouched.
                let note = error.to_string();
                self.failure(svc, error.reason(), note, writes);
                return vec![];
            }
        };
        let note = match &outcome {
            Outcome::Assigned(a) => Some((
                EventType::Normal,
                "IPAllocated",
                format!("Assigned {} from pool `{}`", join(&a.ips), a.pool),
            )),
            Outcome::Changed { old, new, reason } => Some((
                EventType::Normal,
                "IPChanged",
                format!(
                    "Address changed from {} to {}: {reason}",
                    join(old),
                    join(&new.ips)
                ),
            )),
            Outcome::Revoked { old, reason, .. } => Some((
                EventType::Warning,
                "IPChanged",
                format!("Address {} released: {reason}", join(old)),
            )),
            Outcome::Failed(_) | Outcome::Unchanged(_) => None,
        };
        if let Some((type_, reason, note)) = note {
            writes.push(event(svc, type_, reason, note));
        }
        match outcome.error() {
            Some(error) => self.failure(svc, error.reason(), error.to_string(), writes),
            None => self.memo.entry(key.clone()).or_default().last_failure = None,
        }
        let desired = desired_ingress(svc, outcome.assignment());
        let current = current_ingress(svc);
        let memo = self.memo.entry(key.clone()).or_default();
        if desired == current {
            memo.confirmed = true;
        } else if memo.confirmed && matches!(outcome, Outcome::Unchanged(_)) {
            // We had seen our status in place, the allocator's decision did not change, and
            // the status did: another writer (a controller, a user) changed it.
            memo.confirmed = false;
            let shown: Vec<String> = current.iter().filter_map(|i| i.ip.clone()).collect();
            writes.push(event(
                svc,
                EventType::Warning,
                "StatusRestored",
                format!(
                    "status.loadBalancer.ingress was changed by another writer to [{}]; \
                     restored the address FerroLB holds for this Service",
                    shown.join(", ")
                ),
            ));
        }
        let pool = outcome.assignment().map(|a| a.pool.clone());
        let annotated = svc
            .annotations()
            .get(names::IP_ALLOCATED_FROM_POOL)
            .cloned();
        if desired != current || annotated != pool {
            let releases = current
                .iter()
                .any(|c| !desired.iter().any(|d| d.ip == c.ip));
            writes.push(Write::Status {
                key,
                rv: svc.resource_version(),
                ingress: desired,
                pool,
                releases,
            });
        } else if matches!(outcome, Outcome::Unchanged(_)) {
            let memo = self.memo.entry(key).or_default();
            if memo.retry_at.is_none() && memo.releasing.is_empty() {
                memo.settled = svc.resource_version();
            }
        }
        if outcome.frees_addresses() {
            self.allocator.waiting()
        } else {
            vec![]
        }
    }

    /// Reports a refusal: counted every time, an Event only when the reason changes.
    fn failure(&mut self, svc: &Arc<Service>, reason: &str, note: String, writes: &mut Vec<Write>) {
        self.metrics
            .allocation_failures
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
        let memo = self.memo.entry(service_key(svc)).or_default();
        if memo.last_failure.as_deref() != Some(reason) {
            memo.last_failure = Some(reason.to_string());
            writes.push(event(svc, EventType::Warning, "AllocationFailed", note));
        }
    }

    async fn apply(&mut self, writes: Vec<Write>, now: Instant) -> PassReport {
        let client = self.client.clone();
        let leadership = self.leadership.clone();
        // Events go to their own task: they never hold up a status write.
        // Two batches: the statuses that drop an address first, then the rest, so that no
        // moment shows an address in two Services' status (a Service moved to another pool
        // and one given its old address in the same pass; the soak saw it once in an hour,
        // in the first pass after a controller restart).
        // A burst (more writes than go out at once: a cold start, a pool change) holds its
        // Events until its writes are done, so they do not take the API server's time from the
        // addresses; a pass of a few writes leaves them flowing. Held before they are queued.
        let statuses = writes
            .iter()
            .filter(|w| matches!(w, Write::Status { .. }))
            .count();
        let hold = (statuses > WRITES_AT_ONCE).then(|| self.events.hold());
        let (mut releasing, mut others) = (Vec::new(), Vec::new());
        for w in writes {
            match w {
                Write::Event { svc, event } => self.publish(svc.object_ref(&()), event),
                Write::Status {
                    key,
                    rv,
                    ingress,
                    pool,
                    releases,
                } => {
                    let batch = if releases {
                        &mut releasing
                    } else {
                        &mut others
                    };
                    batch.push((key, rv, ingress, pool));
                }
            }
        }
        let total = releasing.len() + others.len();
        let mut results = self.write_statuses(&client, &leadership, releasing).await;
        results.extend(self.write_statuses(&client, &leadership, others).await);
        drop(hold);
        let mut report = PassReport {
            writes: total,
            ..Default::default()
        };
        self.record_results(results, now, &mut report);
        report
    }

    /// Writes `statuses`, [`WRITES_AT_ONCE`] at a time.
    async fn write_statuses(
        &self,
        client: &Client,
        leadership: &Leadership,
        statuses: Vec<StatusWrite>,
    ) -> Vec<WriteResult> {
        futures::stream::iter(statuses)
            .map(|(key, rv, ingress, pool)| {
                let client = client.clone();
                let leadership = leadership.clone();
                let span = debug_span!("write", service = %key);
                async move {
                    // Checked before every write, not once per pass: a pass can outlast the
                    // renew deadline, and a replica that lost the Lease must not write.
                    if !leadership.is_leader() {
                        return WriteResult {
                            status_of: None,
                            result: Err(ApiCallError::NotLeader),
                            operation: "not_leader",
                        };
                    }
                    let result =
                        write_status(&client, &key, rv.as_deref(), &ingress, pool.as_deref()).await;
                    WriteResult {
                        status_of: Some((key, rv)),
                        result,
                        operation: "status_write",
                    }
                }
                .instrument(span)
            })
            .buffer_unordered(WRITES_AT_ONCE)
            .collect()
            .await
    }

    /// Takes the outcome of a pass's writes: back-off for failures, `report`'s counts.
    fn record_results(&mut self, results: Vec<WriteResult>, now: Instant, report: &mut PassReport) {
        let mut repeated_failures = Vec::new();
        let mut server_answered = false;
        let mut failed_for_server = Vec::new();
        for result in results {
            let Err(error) = result.result else {
                if let Some((key, rv)) = result.status_of {
                    self.metrics.status_writes.inc();
                    server_answered = true;
                    self.waiting_for_server.remove(&key);
                    let m = self.memo.entry(key).or_default();
                    m.written_over = rv;
                    m.write_failures = 0;
                    m.retry_at = None;
                }
                continue;
            };
            report.failed += 1;
            self.metrics.api_error(result.operation, &error);
            let Some((key, _)) = result.status_of else {
                continue;
            };
            if error.is_benign() {
                // The Service changed or went away under the write: read it again next pass.
                debug!(service = %key, %error, "status write not applied; re-reading");
                report.retry.insert(key);
                continue;
            }
            if matches!(
                error,
                ApiCallError::Transport(_) | ApiCallError::Unavailable { .. }
            ) {
                failed_for_server.push(key.clone());
            } else {
                self.waiting_for_server.remove(&key);
            }
            let m = self.memo.entry(key.clone()).or_default();
            m.write_failures += 1;
            let at = now + apicall::backoff(m.write_failures);
            if let Some(old) = m.retry_at.replace(at) {
                self.backoff.remove(&(old, key.clone()));
            }
            self.backoff.insert((at, key.clone()));
            warn!(service = %key, failures = m.write_failures, %error, "status write failed; backing off");
            if m.write_failures == EVENT_AFTER_FAILURES {
                repeated_failures.push((key, error));
            }
        }
        if server_answered {
            // The server is back: what waited for it is due now. (Not what failed in this very
            // pass: a server answering some writes and failing others keeps its back-off.)
            for key in std::mem::take(&mut self.waiting_for_server) {
                let Some(m) = self.memo.get_mut(&key) else {
                    continue;
                };
                if let Some(old) = m.retry_at.replace(now) {
                    self.backoff.remove(&(old, key.clone()));
                }
                self.backoff.insert((now, key));
            }
        }
        self.waiting_for_server.extend(failed_for_server);
        for (key, error) in repeated_failures {
            let event = Event {
                type_: EventType::Warning,
                reason: "StatusWriteFailed".into(),
                note: Some(format!(
                    "writing the Service's status failed {EVENT_AFTER_FAILURES} times in a row \
                     ({error}); retrying with back-off"
                )),
                action: "Allocate".into(),
                secondary: None,
            };
            self.publish(service_ref(&key), event);
        }
    }

    /// Hands an Event to the publishing task.
    fn publish(&self, target: k8s_openapi::api::core::v1::ObjectReference, event: Event) {
        if self.events.push(target, event) == Pushed::DroppedOldest {
            self.metrics.events_dropped.inc();
        }
    }

    /// Checks every configuration object; writes the controller's `ConfigurationState`
    /// summing the errors up, then each object's `Ready` condition (and pool counts).
    async fn write_config_status(&mut self, stores: &Stores, pools: &[IPAddressPool]) {
        let verdicts = validate::check_pools(pools);
        let peers: Vec<BGPPeer> = stores.peers.state().iter().map(|p| (**p).clone()).collect();
        let communities: Vec<Community> = stores
            .communities
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect();
        let l2: Vec<_> = stores
            .l2
            .state()
            .into_iter()
            .map(|adv| {
                let errors = validate::check_l2_advertisement(&adv, pools);
                (adv, errors)
            })
            .collect();
        let bgp: Vec<_> = stores
            .bgp
            .state()
            .into_iter()
            .map(|adv| {
                let errors = validate::check_bgp_advertisement(&adv, pools, &peers, &communities);
                (adv, errors)
            })
            .collect();
        let alias_errors: Vec<ConfigError> = validate::community_aliases(&communities)
            .err()
            .into_iter()
            .collect();
        let secrets: BTreeSet<String> = stores
            .secrets
            .state()
            .iter()
            .map(|s| s.name_any())
            .collect();
        let bfd_profiles: BTreeSet<String> = stores
            .bfd_profiles
            .state()
            .iter()
            .map(|p| p.name_any())
            .collect();
        let peer_errors: Vec<Vec<ConfigError>> = peers
            .iter()
            .map(|peer| validate::check_bgp_peer(peer, &secrets, &bfd_profiles))
            .collect();

        let mut problems: Vec<Problem> = Vec::new();
        for (name, verdict) in &verdicts {
            if let PoolVerdict::NotReady(e) = verdict {
                problems.push(Problem::new("IPAddressPool", name, e.to_string()));
            }
        }
        for (adv, errors) in &l2 {
            problems.extend(object_problems("L2Advertisement", &adv.name_any(), errors));
        }
        for (adv, errors) in &bgp {
            problems.extend(object_problems("BGPAdvertisement", &adv.name_any(), errors));
        }
        for c in &communities {
            // Named: the Community objects that define the alias in conflict.
            for e in &alias_errors {
                let defines = match e {
                    ConfigError::DuplicateCommunityAlias { alias, .. } => {
                        c.spec.communities.iter().any(|a| a.name == *alias)
                    }
                    _ => true,
                };
                if defines {
                    problems.push(Problem::new("Community", c.name_any(), e.to_string()));
                }
            }
        }
        for (peer, errors) in peers.iter().zip(&peer_errors) {
            problems.extend(object_problems("BGPPeer", &peer.name_any(), errors));
        }
        let checked = if stores.config_listed() {
            Checked::Complete
        } else {
            Checked::NotYet
        };
        if self.leadership.is_leader()
            && let Err(e) = self.config_state.write(checked, problems).await
        {
            warn!(error = %e, "writing the controller's ConfigurationState failed; retried on the next configuration pass");
            self.metrics.api_error("configuration_state", &e);
        }

        self.write_pool_statuses(pools, &verdicts).await;
        for (adv, errors) in &l2 {
            self.write_ready::<L2Advertisement>(adv, errors).await;
        }
        for (adv, errors) in &bgp {
            self.write_ready::<BGPAdvertisement>(adv, errors).await;
        }
        for c in stores.communities.state() {
            self.write_ready::<Community>(&c, &alias_errors).await;
        }
        for (peer, errors) in peers.iter().zip(&peer_errors) {
            self.write_ready::<BGPPeer>(peer, errors).await;
        }
    }

    async fn write_ready<K>(&self, obj: &K, errors: &[ConfigError])
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + HasConditions
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let (ok, reason, message) = match errors.first() {
            Some(e) => (
                false,
                e.reason(),
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            None => (true, "Valid", "the configuration is in use".to_string()),
        };
        let old = obj.conditions();
        let new = vec![ready_condition(
            &old,
            obj.meta().generation,
            ok,
            reason,
            &message,
        )];
        if old == new {
            return;
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let name = obj.meta().name.clone().unwrap_or_default();
        if let Err(e) = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": new}})),
            )
            .await
        {
            warn!(object = %name, error = %e, "writing condition failed");
            self.metrics
                .api_error("config_status", &ApiCallError::from(e));
        }
    }

    /// Writes each pool's status (use and Ready) where it differs from what the pool shows.
    async fn write_pool_statuses(
        &self,
        pools: &[IPAddressPool],
        verdicts: &BTreeMap<String, PoolVerdict>,
    ) {
        for pool in pools {
            let name = pool.name_any();
            let mut status = IPAddressPoolStatus::default();
            if let Some(stats) = self.allocator.pool_stats(&name) {
                status.assigned_ipv4 = clamp(stats.v4.assigned);
                status.available_ipv4 = clamp(stats.v4.available);
                status.assigned_ipv6 = clamp(stats.v6.assigned);
                status.available_ipv6 = clamp(stats.v6.available);
            }
            let (ok, reason, message) = match verdicts.get(&name) {
                Some(PoolVerdict::NotReady(e)) => (false, e.reason(), e.to_string()),
                _ => (true, "Valid", "the pool is in use".to_string()),
            };
            let old = pool.status.clone().unwrap_or_default();
            status.conditions = vec![ready_condition(
                &old.conditions,
                pool.metadata.generation,
                ok,
                reason,
                &message,
            )];
            if old != status {
                let api: Api<IPAddressPool> =
                    Api::namespaced(self.client.clone(), &self.settings.namespace);
                if let Err(e) = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await
                {
                    warn!(pool = %name, error = %e, "writing pool status failed");
                    self.metrics
                        .api_error("pool_status", &ApiCallError::from(e));
                }
            }
        }
    }

    fn update_metrics(&self, pools: &[IPAddressPool]) {
        for pool in pools {
            let name = pool.name_any();
            let Some(stats) = self.allocator.pool_stats(&name) else {
                continue;
            };
            for (family, s) in [(IpFamily::V4, stats.v4), (IpFamily::V6, stats.v6)] {
                let labels = PoolLabels {
                    pool: name.clone(),
                    family: family_label(family).into(),
                };
                self.metrics
                    .pool_addresses_total
                    .get_or_create(&labels)
                    .set((s.assigned + s.available) as f64);
                self.metrics
                    .pool_addresses_in_use
                    .get_or_create(&labels)
                    .set(s.assigned as f64);
            }
        }
        self.metrics
            .services_allocated
            .set(self.allocator.assigned_services() as i64);
    }
}

/// The Services a periodic pass looks at: those in the cache (`services`) not settled at the
/// version it shows, those remembered in `memo` that the cache no longer has, and those the
/// allocator holds (`held`) that are neither remembered nor `cached` (deleted: their release is
/// due). Each cached Service is looked up in `memo` as itself
/// ([`ferrolb_api::service::KeyRef`]: no key is built for one in order); the remembered ones
/// the cache still has are counted, so a pass in which none was deleted does not look each
/// remembered one up in the cache again.
fn unsettled<'a>(
    services: &[Arc<Service>],
    memo: &HashMap<ServiceKey, Memo>,
    held: impl Iterator<Item = &'a ServiceKey>,
    cached: impl Fn(&ServiceKey) -> bool,
) -> BTreeSet<ServiceKey> {
    let mut keys = BTreeSet::new();
    let mut remembered = 0;
    for svc in services {
        let found = memo.get(&**svc as &dyn ferrolb_api::service::KeyRef);
        remembered += usize::from(found.is_some());
        if !settled(found, svc) {
            keys.insert(service_key(svc));
        }
    }
    if remembered < memo.len() {
        keys.extend(memo.keys().filter(|k| !cached(k)).cloned());
    }
    keys.extend(
        held.filter(|k| !memo.contains_key(*k) && !cached(k))
            .cloned(),
    );
    keys
}

/// Of `among`, the Services [`unsettled`] would find: a cached one not settled at the version
/// the cache (`cache`) shows, and one no longer cached that `memo` remembers or the allocator
/// holds (`held`).
fn unsettled_among(
    among: BTreeSet<ServiceKey>,
    memo: &HashMap<ServiceKey, Memo>,
    held: impl Fn(&ServiceKey) -> bool,
    cache: impl Fn(&ServiceKey) -> Option<Arc<Service>>,
) -> BTreeSet<ServiceKey> {
    among
        .into_iter()
        .filter(|key| match cache(key) {
            Some(svc) => !settled(memo.get(key), &svc),
            None => memo.contains_key(key) || held(key),
        })
        .collect()
}

/// Whether `svc` was found in order at the version it shows now.
fn settled(memo: Option<&Memo>, svc: &Service) -> bool {
    memo.and_then(|m| m.settled.as_ref())
        .is_some_and(|rv| svc.metadata.resource_version.as_ref() == Some(rv))
}

/// The summary entries of one configuration object's errors.
fn object_problems<'a>(
    kind: &'static str,
    name: &'a str,
    errors: &'a [ConfigError],
) -> impl Iterator<Item = Problem> + 'a {
    errors
        .iter()
        .map(move |e| Problem::new(kind, name, e.to_string()))
}

/// An object reference to the Service `key`, for an Event about it.
fn service_ref(key: &ServiceKey) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(key.namespace.clone()),
        name: Some(key.name.clone()),
        ..Default::default()
    }
}

/// Objects whose status carries conditions.
pub trait HasConditions {
    /// The current conditions.
    fn conditions(&self) -> Vec<Condition>;
}

macro_rules! has_conditions {
    ($($t:ty),*) => {$(
        impl HasConditions for $t {
            fn conditions(&self) -> Vec<Condition> {
                self.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default()
            }
        }
    )*};
}
has_conditions!(
    IPAddressPool,
    L2Advertisement,
    BGPAdvertisement,
    Community,
    BGPPeer
);

fn join(ips: &[std::net::IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn family_label(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "ipv4",
        IpFamily::V6 => "ipv6",
    }
}

fn clamp(n: u128) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `Ready` condition; keeps the old transition time when the status did not change.
fn ready_condition(
    old: &[Condition],
    generation: Option<i64>,
    ok: bool,
    reason: &str,
    message: &str,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let previous = old.iter().find(|c| c.type_ == CONDITION_READY);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    Condition {
        type_: CONDITION_READY.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time,
    }
}

fn event(svc: &Arc<Service>, type_: EventType, reason: &str, note: String) -> Write {
    Write::Event {
        svc: svc.clone(),
        event: Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Allocate".into(),
            secondary: None,
        },
    }
}

fn namespace_labels(namespaces: &Store<Namespace>, svc: &Service) -> BTreeMap<String, String> {
    let ns = svc.namespace().unwrap_or_default();
    namespaces
        .get(&kube::runtime::reflector::ObjectRef::new(&ns))
        .map(|n| n.labels().clone())
        .unwrap_or_default()
}

/// Writes `status.loadBalancer.ingress` (the whole list) and the pool annotation in one merge
/// patch to `/status`, under the resourceVersion the decision was based on, so a Service changed
/// meanwhile is re-read rather than overwritten. (kube-apiserver's Service status strategy
/// resets only `spec`, so the annotation in the same patch is applied; checked against the real
/// server in CI.)
async fn write_status(
    client: &Client,
    key: &ServiceKey,
    rv: Option<&str>,
    ingress: &[LoadBalancerIngress],
    pool: Option<&str>,
) -> Result<(), ApiCallError> {
    let ingress_value = if ingress.is_empty() {
        serde_json::Value::Null
    } else {
        json!(ingress)
    };
    let patch = json!({
        "metadata": {
            "resourceVersion": rv,
            "annotations": {names::IP_ALLOCATED_FROM_POOL: pool},
        },
        "status": {"loadBalancer": {"ingress": ingress_value}},
    });
    // The answer (the whole Service, managedFields included) is not decoded: nothing reads
    // it, and its watch event brings the same object to the cache anyway. Errors come back
    // as from `Api::patch_status` (a `Status` body becomes `kube::Error::Api`).
    let mut request = kube::core::Request::new(Service::url_path(&(), Some(&key.namespace)))
        .patch_subresource(
            "status",
            &key.name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .map_err(|e| ApiCallError::from(kube::Error::BuildRequest(e)))?;
    request.extensions_mut().insert("patch_status");
    client
        .request_text(request)
        .await
        .map(drop)
        .map_err(ApiCallError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn cached(ns: &str, name: &str, rv: &str) -> Arc<Service> {
        Arc::new(Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn settled_at(rv: &str) -> Memo {
        Memo {
            settled: Some(rv.into()),
            ..Default::default()
        }
    }

    /// Cached Services and what a pass remembers of them: one in order at the cached version,
    /// one changed since, one refused, one new, and one remembered that the cache lost.
    fn one_of_each() -> (Vec<Arc<Service>>, HashMap<ServiceKey, Memo>) {
        let services = vec![
            cached("default", "same", "10"),
            cached("default", "changed", "12"),
            cached("default", "refused", "7"),
            cached("default", "new", "3"),
        ];
        let memo = [
            (ServiceKey::new("default", "same"), settled_at("10")),
            (ServiceKey::new("default", "changed"), settled_at("11")),
            (ServiceKey::new("default", "refused"), Memo::default()),
            (ServiceKey::new("default", "deleted"), settled_at("5")),
        ]
        .into();
        (services, memo)
    }

    #[test]
    fn a_periodic_pass_looks_at_what_changed_and_what_was_deleted_but_not_at_what_is_in_order() {
        let (services, memo) = one_of_each();
        let held = [
            ServiceKey::new("default", "same"),
            ServiceKey::new("default", "deleted"),
            ServiceKey::new("other", "held-only"),
        ];
        let in_cache = |k: &ServiceKey| services.iter().any(|s| service_key(s) == *k);
        let keys = unsettled(&services, &memo, held.iter(), in_cache);
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "default/changed",
                "default/deleted",
                "default/new",
                "default/refused",
                "other/held-only"
            ]
        );
    }

    #[test]
    fn a_narrowed_look_finds_among_the_services_it_is_given_what_a_full_look_finds() {
        let (services, memo) = one_of_each();
        let held = [
            ServiceKey::new("default", "same"),
            ServiceKey::new("default", "deleted"),
            ServiceKey::new("other", "held-only"),
            ServiceKey::new("other", "cached-and-held"),
        ];
        let cache = |k: &ServiceKey| services.iter().find(|s| service_key(s) == *k).cloned();
        let full = unsettled(&services, &memo, held.iter(), |k| cache(k).is_some());
        let every: BTreeSet<ServiceKey> = (services.iter().map(|s| service_key(s)))
            .chain(memo.keys().cloned())
            .chain(held.iter().cloned())
            .chain([ServiceKey::new("other", "never-known")])
            .collect();
        let among = unsettled_among(every, &memo, |k| held.contains(k), cache);
        assert_eq!(among, full);
        let some: BTreeSet<ServiceKey> = [
            ServiceKey::new("default", "same"),
            ServiceKey::new("default", "refused"),
        ]
        .into();
        let among = unsettled_among(some, &memo, |k| held.contains(k), cache);
        assert_eq!(among, [ServiceKey::new("default", "refused")].into());
    }

    #[test]
    fn the_safety_net_narrows_a_look_only_while_the_watch_has_delivered_nothing_since_the_last_full_one()
     {
        let mut net = SafetyNet::default();
        assert!(!net.narrow(5), "the first look is over every Service");
        net.since = [ServiceKey::new("a", "refused")].into();
        net.looked_at([ServiceKey::new("a", "touched")].into_iter());
        assert!(net.narrow(5));
        let since: Vec<String> = net.since.iter().map(ToString::to_string).collect();
        assert_eq!(since, ["a/refused", "a/touched"]);
        assert!(!net.narrow(6), "a Service event since: every Service again");
        assert!(net.narrow(6));
        net.forget();
        assert!(
            !net.narrow(6),
            "a pass over every Service: the next look is full"
        );
    }

    #[test]
    fn one_look_in_ten_is_over_every_service_even_when_nothing_changed() {
        let mut net = SafetyNet::default();
        let full: Vec<bool> = (0..3 * FULL_LOOK_EVERY).map(|_| !net.narrow(1)).collect();
        let at: Vec<usize> = (full.iter().enumerate())
            .filter_map(|(i, f)| f.then_some(i))
            .collect();
        let every = FULL_LOOK_EVERY as usize;
        assert_eq!(at, [0, every, 2 * every]);
    }

    #[test]
    fn a_pass_records_what_it_looked_at_only_once_a_full_look_was_made() {
        let mut net = SafetyNet::default();
        net.looked_at([ServiceKey::new("a", "x")].into_iter());
        assert!(net.since.is_empty(), "nothing to narrow from yet");
    }

    #[test]
    fn a_periodic_pass_with_nothing_deleted_does_not_look_the_remembered_services_up_again() {
        let services = vec![cached("a", "x", "1"), cached("b", "y", "2")];
        let memo: HashMap<ServiceKey, Memo> = [
            (ServiceKey::new("a", "x"), settled_at("1")),
            (ServiceKey::new("b", "y"), settled_at("2")),
        ]
        .into();
        let held = [ServiceKey::new("a", "x")];
        let lookups = std::cell::Cell::new(0);
        let counting = |_: &ServiceKey| {
            lookups.set(lookups.get() + 1);
            true
        };
        let keys = unsettled(&services, &memo, held.iter(), counting);
        assert!(keys.is_empty(), "{keys:?}");
        assert_eq!(lookups.get(), 0);
    }
}
