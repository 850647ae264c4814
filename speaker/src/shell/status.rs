//! The objects that say who announces what, written on their own task so that announcing never
//! waits on the API server: one `ServiceL2Status` per Service this node answers for over layer 2
//! (only the owner writes one, so there are about as many as Services), and one
//! `ServiceBGPStatus` per (Service, node) announcing it over BGP for Services with
//! `externalTrafficPolicy: Local` (the nodes with an endpoint: as many as endpoints at most).
//! Cluster-policy Services, announced by every eligible node, get none: that would be one
//! object per Service and node.
//!
//! ```text
//!  Speaker::sync ── set(key, Desired) ──► StatusQueue { latest Desired per Service }
//!                                              │ coalesced: a Service changing 100 times while
//!                                              │ the API is slow is written once, as it is now
//!                                              ▼ run(): WRITERS at a time
//!                    create / patch status / delete  (what differs from what was written)
//!                    failure ─► back into the queue after a back-off (unless superseded)
//! ```
//!
//! # Guarantees
//! - The queue holds at most one entry per Service: it is bounded by the Services FerroLB
//!   handles, whatever the API server does.
//! - The task starts from what exists (one list of this node's objects per kind), then writes
//!   only differences; it never lists per sync.
//! - A Service this node takes over over layer 2 has the object that a dead owner left deleted
//!   (one list by the Service's labels, at the takeover only).
//! - After [`StatusQueue::reload`] (the speaker rejoined after the others had declared it dead,
//!   and may have had its objects deleted meanwhile by a successor), the task lists this node's
//!   objects again before its next write, once the writes in flight have ended; the speaker
//!   then sets every Service it announces again, so that what a successor deleted is created
//!   again. (The soak found an address answered with no `ServiceL2Status` after a cut-off
//!   node came back: its task still believed its object existed.)
//!
//! # Caveats
//! - An object deleted by another node while this one is not declared dead (a successor whose
//!   own view lagged) is created again only at this node's next change for that Service.
//!
//! This node's `ConfigurationState` has a task of its own ([`ConfigStateWriter`]): the latest
//! report through a `watch`, written at most once a second and only when it changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_api::names;
use ferrolb_api::patch::StatusSchema;
use ferrolb_api::summary::{self, Checked, Problem};
use ferrolb_api::v1beta1::{
    BGPSessionState, BGPSessionStateSpec, BGPSessionStateStatus, InterfaceInfo, ServiceBGPStatus,
    ServiceBGPStatusSpec, ServiceBGPStatusStatus, ServiceL2Status, ServiceL2StatusSpec,
    ServiceL2StatusStatus,
};
use ferrolb_api::v1beta1::{
    Component, ConfigurationState, ConfigurationStateSpec, ConfigurationStateStatus,
    speaker_object_name,
};
use ferrolb_telemetry::apicall::{self, ApiCallError};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use super::metrics::Metrics;
use super::names::{node_owned, status_labels, status_object_name};
use crate::cluster::{Digest, digest};
use crate::planner::ServiceKey;

/// Status writes in flight at once.
pub const WRITERS: usize = 4;

/// Runs `op` until it succeeds, waiting [`apicall::backoff`] of the failures so far after each
/// failure; every failure is logged as `what` failing. For the writers' first list of this
/// node's objects, which nothing can proceed without.
pub(crate) async fn until_listed<T, E, F, Fut>(what: &str, mut op: F) -> T
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut failures = 0u32;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                warn!(error = %e, "{what} failed; retrying");
                failures += 1;
                tokio::time::sleep(apicall::backoff(failures)).await;
            }
        }
    }
}
/// Objects per page when listing this node's objects at start.
const LOAD_PAGE: u32 = 500;
/// Objects written in a burst after which free memory is given back once the queue empties.
const TRIM_AFTER_WRITES: usize = 1000;

/// A status object kind the speaker maintains.
pub trait StatusKind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The status payload.
    type Payload: Serialize + PartialEq + Clone + Debug + Send + Sync;
    /// How the task remembers one of its objects ([`ObjectId`]).
    type Id: ObjectId;
    /// A new object with no status.
    fn empty(meta: ObjectMeta) -> Self;
    /// The current status.
    fn payload(&self) -> Option<&Self::Payload>;
    /// The merge patch that makes the status exactly `payload` (what it leaves out is removed).
    fn status_patch(payload: &Self::Payload) -> serde_json::Value;
}

/// What the status task keys its objects by: their name, or a digest of it.
pub trait ObjectId: std::hash::Hash + Eq + Clone + Send + Sync + 'static {
    /// The id of the object named `name`.
    fn of(name: &str) -> Self;
}

/// Kinds whose objects must be listed by name again ([`Written::names`]).
impl ObjectId for String {
    fn of(name: &str) -> Self {
        name.to_owned()
    }
}

/// Kinds with an object per Service: a node announcing 10,000 Services has as many, and their
/// names, one small allocation each made among a write's temporary ones, held on to pages that
/// were otherwise free. A digest is as unlikely to be shared by two names as a random 128-bit
/// collision (the cluster model names slices and Services the same way).
impl ObjectId for Digest {
    fn of(name: &str) -> Self {
        digest("", name)
    }
}

/// Implements [`StatusKind`] for a kind whose spec is empty, whose status is `$payload` and
/// whose objects the task keys by `$id`.
macro_rules! status_kind {
    ($($kind:ident($spec:ident, $payload:ident, $id:ty)),* $(,)?) => {$(
        impl StatusKind for $kind {
            type Payload = $payload;
            type Id = $id;
            fn empty(metadata: ObjectMeta) -> Self {
                $kind {
                    metadata,
                    spec: $spec {},
                    status: None,
                }
            }
            fn payload(&self) -> Option<&Self::Payload> {
                self.status.as_ref()
            }
            fn status_patch(payload: &Self::Payload) -> serde_json::Value {
                static SCHEMA: StatusSchema = StatusSchema::of::<$payload>();
                SCHEMA.replacing(payload)
            }
        }
    )*};
}

status_kind!(
    ServiceL2Status(ServiceL2StatusSpec, ServiceL2StatusStatus, Digest),
    ServiceBGPStatus(ServiceBGPStatusSpec, ServiceBGPStatusStatus, Digest),
    BGPSessionState(BGPSessionStateSpec, BGPSessionStateStatus, String),
);

/// The L2 status payload of a Service announced by `node`.
pub fn l2_payload(
    key: &ServiceKey,
    node: &str,
    addresses: &[String],
    interfaces: &[String],
) -> ServiceL2StatusStatus {
    ServiceL2StatusStatus {
        node: node.into(),
        service_name: key.name.clone(),
        service_namespace: key.namespace.clone(),
        addresses: addresses.to_vec(),
        interfaces: interfaces
            .iter()
            .map(|name| InterfaceInfo { name: name.clone() })
            .collect(),
    }
}

/// The BGP status payload of a Service announced by `node` to `peers`.
pub fn bgp_payload(key: &ServiceKey, node: &str, peers: &[String]) -> ServiceBGPStatusStatus {
    ServiceBGPStatusStatus {
        node: node.into(),
        service_name: key.name.clone(),
        service_namespace: key.namespace.clone(),
        peers: peers.to_vec(),
    }
}

/// What this node's objects for one Service should say; `None` means no object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// The layer-2 status, when this node answers for one of the Service's addresses.
    pub l2: Option<ServiceL2StatusStatus>,
    /// The BGP status, when this node announces the Service to at least one peer.
    pub bgp: Option<ServiceBGPStatusStatus>,
}

#[derive(Default)]
struct Inner {
    /// The waiting Services, in the order they are written, each with where its [`Desired`]
    /// is in `packed`. The key is the one the speaker shares with its record of the Service's
    /// metric series, so waiting costs no copy of it.
    pending: BTreeMap<Arc<ServiceKey>, Range<usize>>,
    in_flight: BTreeSet<Arc<ServiceKey>>,
    /// Every waiting [`Desired`], packed one after the other (JSON).
    ///
    /// Why packed: the first pass queues one status per Service (10,000 on a large cluster)
    /// and the task writes them over a minute or more. Kept as they are, each waiting
    /// `Desired` held seven small allocations (node, names, addresses, interfaces) made in the
    /// same pass as the planner's and the metrics' long-lived records; once written, their
    /// places were holes between those records that the allocator could not give back (about
    /// 7 MiB of the settled RSS at 10,000 Services). Here they are in one buffer, given back
    /// whole once the queue is empty.
    packed: Vec<u8>,
    /// Bytes of `packed` that no waiting Service refers to any more (taken or replaced).
    stale: usize,
    /// List this node's objects again before the next write.
    reload: bool,
}

/// `packed` is rewritten without what is stale once it is at least this large and mostly
/// stale (a queue that never empties, a Service set again and again).
const PACKED_COMPACT_AT: usize = 64 * 1024;

impl Inner {
    /// Appends `desired` to `packed`; returns where it is.
    fn pack(&mut self, desired: &Desired) -> Range<usize> {
        let start = self.packed.len();
        serde_json::to_writer(&mut self.packed, &(&desired.l2, &desired.bgp))
            .expect("a status payload serializes");
        start..self.packed.len()
    }

    /// The `Desired` at `at`, which no waiting Service refers to any more.
    fn unpack(&mut self, at: Range<usize>) -> Desired {
        let (l2, bgp) =
            serde_json::from_slice(&self.packed[at.clone()]).expect("a packed status payload");
        self.forget(at);
        Desired { l2, bgp }
    }

    /// Marks `at` stale; gives the buffer back when nothing waits, rewrites it when it is
    /// mostly stale.
    fn forget(&mut self, at: Range<usize>) {
        self.stale += at.len();
        if self.pending.is_empty() {
            self.packed = Vec::new();
            self.stale = 0;
        } else if self.packed.len() >= PACKED_COMPACT_AT && self.stale * 2 > self.packed.len() {
            let mut packed = Vec::with_capacity(self.packed.len() - self.stale);
            for at in self.pending.values_mut() {
                let start = packed.len();
                packed.extend_from_slice(&self.packed[at.clone()]);
                *at = start..packed.len();
            }
            self.packed = packed;
            self.stale = 0;
        }
    }
}

/// The queue between the sync loop and the status task.
#[derive(Default)]
pub struct StatusQueue {
    inner: Mutex<Inner>,
    notify: Notify,
}

impl StatusQueue {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Asks for `key`'s objects to say `desired`; replaces what was waiting for `key`.
    pub fn set(&self, key: impl Into<Arc<ServiceKey>>, desired: Desired) {
        let mut inner = self.inner.lock().expect("status queue lock");
        let at = inner.pack(&desired);
        if let Some(old) = inner.pending.insert(key.into(), at) {
            inner.forget(old);
        }
        drop(inner);
        self.notify.notify_one();
    }

    /// Asks the task to list this node's objects again before its next write (what it
    /// believes exists may have been deleted by another node).
    pub fn reload(&self) {
        self.inner.lock().expect("status queue lock").reload = true;
        self.notify.notify_one();
    }

    fn take_reload(&self) -> bool {
        std::mem::take(&mut self.inner.lock().expect("status queue lock").reload)
    }

    /// How many Services wait to be written.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("status queue lock").pending.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether none waits and none is being written.
    pub fn is_idle(&self) -> bool {
        let inner = self.inner.lock().expect("status queue lock");
        inner.pending.is_empty() && inner.in_flight.is_empty()
    }

    /// Takes the first waiting Service that is not being written already.
    pub(crate) fn pop(&self) -> Option<(ServiceKey, Desired)> {
        let mut inner = self.inner.lock().expect("status queue lock");
        let key = inner
            .pending
            .keys()
            .find(|k| !inner.in_flight.contains(*k))
            .cloned()?;
        let at = inner.pending.remove(&key)?;
        let desired = inner.unpack(at);
        let owned = ServiceKey::clone(&key);
        inner.in_flight.insert(key);
        Some((owned, desired))
    }

    pub(crate) fn done(&self, key: &ServiceKey) {
        let mut inner = self.inner.lock().expect("status queue lock");
        inner.in_flight.remove(key);
        if inner.pending.contains_key(key) {
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Puts `desired` back for a retry, unless something newer was set meanwhile.
    fn retry(&self, key: ServiceKey, desired: Desired) {
        let mut inner = self.inner.lock().expect("status queue lock");
        if !inner.pending.contains_key(&key) {
            let at = inner.pack(&desired);
            inner.pending.insert(Arc::new(key), at);
        }
    }
}

/// What the task believes exists, by object ([`StatusKind::Id`]): a fingerprint of each
/// object's status (`None`: no status yet), not the status itself (one per Service this node
/// announces).
pub(crate) struct Written<K: StatusKind> {
    api: Api<K>,
    objects: Mutex<HashMap<K::Id, Option<u64>>>,
}

/// A fingerprint of a status payload: equal payloads have equal fingerprints.
fn fingerprint<P: Serialize>(payload: &P) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(payload).unwrap_or_default().hash(&mut h);
    h.finish()
}

impl<K: StatusKind> Written<K> {
    /// Lists this node's objects (by [`names::STATUS_NODE_LABEL`]).
    pub(crate) async fn load(api: Api<K>, node: &str) -> Result<Self, kube::Error> {
        let selector = format!("{}={node}", names::STATUS_NODE_LABEL);
        // In pages: a node announcing 10,000 Services has as many objects.
        let mut params = ListParams::default().labels(&selector).limit(LOAD_PAGE);
        let mut objects = HashMap::new();
        loop {
            let page = api.list(&params).await?;
            objects.extend(
                page.items
                    .into_iter()
                    .map(|o| (K::Id::of(&o.name_any()), o.payload().map(fingerprint))),
            );
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok(Self {
            api,
            objects: Mutex::new(objects),
        })
    }

    fn current(&self, name: &str) -> Option<Option<u64>> {
        self.objects
            .lock()
            .expect("written lock")
            .get(&K::Id::of(name))
            .cloned()
    }

    /// Lists this node's objects again and believes that instead.
    async fn reload(&self, node: &str) -> Result<(), kube::Error> {
        let fresh = Self::load(self.api.clone(), node).await?;
        let objects = fresh.objects.into_inner().expect("written lock");
        *self.objects.lock().expect("written lock") = objects;
        Ok(())
    }

    fn record(&self, name: &str, payload: Option<Option<u64>>) {
        let mut objects = self.objects.lock().expect("written lock");
        match payload {
            Some(p) => objects.insert(K::Id::of(name), p),
            None => objects.remove(&K::Id::of(name)),
        };
    }

    /// Makes object `name` say `desired` (`None`: absent); `meta` is the metadata of the
    /// object when it must be created.
    pub(crate) async fn write(
        &self,
        meta: impl FnOnce() -> ObjectMeta,
        name: &str,
        desired: Option<&K::Payload>,
    ) -> Result<(), kube::Error> {
        let current = self.current(name);
        match (current, desired) {
            (None, None) => Ok(()),
            (Some(_), None) => match self.api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {
                    self.record(name, None);
                    Ok(())
                }
                Err(e) if matches!(ApiCallError::from(&e), ApiCallError::NotFound) => {
                    self.record(name, None);
                    Ok(())
                }
                Err(e) => Err(e),
            },
            (Some(Some(now)), Some(want)) if now == fingerprint(want) => Ok(()),
            (current, Some(want)) => {
                if current.is_none() {
                    match self
                        .api
                        .create(&PostParams::default(), &K::empty(meta()))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if matches!(ApiCallError::from(&e), ApiCallError::Conflict) => {}
                        Err(e) => return Err(e),
                    }
                    self.record(name, Some(None));
                }
                let patch = Patch::Merge(K::status_patch(want));
                match self
                    .api
                    .patch_status(name, &PatchParams::default(), &patch)
                    .await
                {
                    Ok(_) => {
                        self.record(name, Some(Some(fingerprint(want))));
                        Ok(())
                    }
                    Err(e) => {
                        if matches!(ApiCallError::from(&e), ApiCallError::NotFound) {
                            // Deleted behind our back: create it again on the retry.
                            self.record(name, None);
                        }
                        Err(e)
                    }
                }
            }
        }
    }
}

impl<K: StatusKind<Id = String>> Written<K> {
    /// The names of the objects believed to exist.
    pub(crate) fn names(&self) -> Vec<String> {
        let objects = self.objects.lock().expect("written lock");
        objects.keys().cloned().collect()
    }
}

/// The status task's fixed inputs.
pub struct StatusWriter {
    /// The client.
    pub client: Client,
    /// The install namespace.
    pub namespace: String,
    /// This node.
    pub node: String,
    /// Write `ServiceL2Status` objects.
    pub l2: bool,
    /// Write `ServiceBGPStatus` objects.
    pub bgp: bool,
    /// The live speakers (a dead owner's layer-2 object is removed by its successor).
    pub live: watch::Receiver<BTreeSet<String>>,
    /// Metrics.
    pub metrics: Metrics,
}

impl StatusWriter {
    /// Writes what `queue` asks for, forever.
    pub async fn run(self, queue: Arc<StatusQueue>) {
        let l2 = self.load::<ServiceL2Status>().await;
        let bgp = self.load::<ServiceBGPStatus>().await;
        let this = Arc::new(self);
        // Writes hold it shared; a reload holds it alone, so that no write in flight records
        // into the map the reload replaces.
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        let state = (
            queue.clone(),
            this.clone(),
            l2.clone(),
            bgp.clone(),
            gate.clone(),
        );
        let next = futures::stream::unfold(state, |state| async move {
            let (q, this, l2, bgp, gate) = &state;
            loop {
                if q.take_reload() {
                    let _alone = gate.write().await;
                    for (kind, result) in [
                        ("ServiceL2Status", l2.reload(&this.node).await),
                        ("ServiceBGPStatus", bgp.reload(&this.node).await),
                    ] {
                        if let Err(e) = result {
                            // Believed as before: what a successor deleted comes back at
                            // this node's next change for that Service.
                            warn!(kind, error = %e, "listing this node's status objects again failed");
                        }
                    }
                }
                if let Some(item) = q.pop() {
                    let shared = gate.clone().read_owned().await;
                    return Some(((item, shared), state));
                }
                q.notify.notified().await;
            }
        });
        let failures: Arc<Mutex<HashMap<ServiceKey, u32>>> = Arc::default();
        let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        next.for_each_concurrent(WRITERS, |((key, desired), shared)| {
            let (this, l2, bgp, queue, failures, written) = (
                this.clone(),
                l2.clone(),
                bgp.clone(),
                queue.clone(),
                failures.clone(),
                written.clone(),
            );
            async move {
                let result = this.write(&l2, &bgp, &key, &desired).await;
                // A reload may go ahead now (not after a failed write's back-off).
                drop(shared);
                this.metrics.status_pending.set(queue.len() as i64);
                match result {
                    Ok(()) => {
                        failures.lock().expect("failures lock").remove(&key);
                        queue.done(&key);
                        // A burst of writes (the first sync, a failover of many Services)
                        // leaves freed memory behind: give it back once it is over.
                        use std::sync::atomic::Ordering::Relaxed;
                        if written.fetch_add(1, Relaxed) + 1 >= TRIM_AFTER_WRITES
                            && queue.is_empty()
                        {
                            written.store(0, Relaxed);
                            ferrolb_telemetry::memory::release_free_memory();
                        }
                    }
                    Err(e) => {
                        let n = {
                            let mut f = failures.lock().expect("failures lock");
                            let n = f.entry(key.clone()).or_default();
                            *n += 1;
                            *n
                        };
                        this.metrics.status_write_failed(&e);
                        warn!(service = %key, error = %e, attempt = n, "writing a status object failed; retrying");
                        tokio::time::sleep(apicall::backoff(n)).await;
                        queue.retry(key.clone(), desired);
                        queue.done(&key);
                    }
                }
            }
        })
        .await;
    }

    async fn load<K: StatusKind>(&self) -> Arc<Written<K>> {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let what = format!("listing this node's {} objects", K::kind(&()));
        Arc::new(until_listed(&what, || Written::load(api.clone(), &self.node)).await)
    }

    async fn write(
        &self,
        l2: &Written<ServiceL2Status>,
        bgp: &Written<ServiceBGPStatus>,
        key: &ServiceKey,
        desired: &Desired,
    ) -> Result<(), kube::Error> {
        let name = status_object_name(&key.namespace, &key.name, &self.node);
        let meta = || ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(self.namespace.clone()),
            labels: Some(status_labels(&key.namespace, &key.name, &self.node)),
            ..Default::default()
        };
        if self.l2 {
            let takeover = l2.current(&name).is_none() && desired.l2.is_some();
            l2.write(meta, &name, desired.l2.as_ref()).await?;
            if takeover {
                self.remove_dead_owners(key).await?;
            }
        }
        if self.bgp {
            bgp.write(meta, &name, desired.bgp.as_ref()).await?;
        }
        Ok(())
    }

    /// Deletes the `ServiceL2Status` objects that other, no longer live, nodes left for `key`:
    /// a killed speaker cannot remove its own.
    async fn remove_dead_owners(&self, key: &ServiceKey) -> Result<(), kube::Error> {
        let api: Api<ServiceL2Status> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!(
            "{}={},{}={}",
            names::STATUS_SERVICE_NAME_LABEL,
            key.name,
            names::STATUS_SERVICE_NAMESPACE_LABEL,
            key.namespace
        );
        let live = self.live.borrow().clone();
        for obj in api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            let owner = obj.labels().get(names::STATUS_NODE_LABEL);
            if owner.is_some_and(|o| *o != self.node && !live.contains(o)) {
                match api.delete(&obj.name_any(), &DeleteParams::default()).await {
                    Ok(_) => {
                        debug!(service = %key, object = %obj.name_any(), "removed a dead owner's status")
                    }
                    Err(e) if matches!(ApiCallError::from(&e), ApiCallError::NotFound) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// What this node's `ConfigurationState` should say: the problems found by
/// [`super::checks::NodeChecks`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigReport {
    /// This node's UID (the object's owner), once known.
    pub node_uid: Option<String>,
    /// The problems, in any order (the summary sorts them).
    pub problems: Vec<Problem>,
}

/// Shortest time between two writes of the node's `ConfigurationState` (its latest state
/// always lands).
pub const CONFIG_STATE_INTERVAL: Duration = Duration::from_secs(1);

/// The task that writes this node's `ConfigurationState` (`speaker-<node>`, owned by the
/// Node, so it goes with it).
///
/// # Guarantees
/// - One list (by node label) at start to learn what the object says; after that, a write
///   only when the status it should have differs from what was written: problems that stay
///   the same cost nothing, on any number of nodes.
/// - The sync loop never waits on it: it hands the latest report to a `watch`.
pub struct ConfigStateWriter {
    /// The client.
    pub client: Client,
    /// The install namespace.
    pub namespace: String,
    /// This node.
    pub node: String,
    /// Metrics (write failures).
    pub metrics: Metrics,
}

impl ConfigStateWriter {
    /// Makes the object say what `reports` holds, forever. Nothing is written before the
    /// first report (the speaker has listed every kind by then).
    pub async fn run(self, mut reports: watch::Receiver<Option<Arc<ConfigReport>>>) {
        let api: Api<ConfigurationState> = Api::namespaced(self.client.clone(), &self.namespace);
        let name = speaker_object_name(&self.node);
        // `None`: the object does not exist; `Some(None)`: it has no status yet.
        let mut written: Option<Option<ConfigurationStateStatus>> =
            until_listed("listing this node's ConfigurationState", || {
                self.load(&api, &name)
            })
            .await;
        let mut failures = 0u32;
        loop {
            let Some(report) = reports.borrow_and_update().clone() else {
                if reports.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let old = written.clone().flatten();
            let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            );
            let desired = summary::status(
                Component::Speaker,
                Some(&self.node),
                Checked::Complete,
                report.problems.iter().cloned(),
                old.as_ref(),
                now,
            );
            if old.as_ref() != Some(&desired) {
                match self
                    .write(&api, &name, &report, &desired, written.is_some())
                    .await
                {
                    Ok(()) => {
                        failures = 0;
                        written = Some(Some(desired));
                    }
                    Err(e) => {
                        failures += 1;
                        self.metrics.status_write_failed(&e);
                        warn!(error = %e, attempt = failures, "writing this node's ConfigurationState failed; retrying");
                        if matches!(ApiCallError::from(e), ApiCallError::NotFound) {
                            written = None; // deleted behind our back: create it again
                        }
                        tokio::time::sleep(apicall::backoff(failures)).await;
                        continue;
                    }
                }
            }
            tokio::time::sleep(CONFIG_STATE_INTERVAL).await;
            if reports.changed().await.is_err() {
                return;
            }
        }
    }

    /// What the object says now, found with one list by this node's labels.
    async fn load(
        &self,
        api: &Api<ConfigurationState>,
        name: &str,
    ) -> Result<Option<Option<ConfigurationStateStatus>>, kube::Error> {
        let selector = format!(
            "{}={},{}={}",
            names::COMPONENT_TYPE_LABEL,
            Component::Speaker.label(),
            names::STATUS_NODE_LABEL,
            self.node
        );
        let list = api.list(&ListParams::default().labels(&selector)).await?;
        Ok(list
            .items
            .into_iter()
            .find(|o| o.name_any() == name)
            .map(|o| o.status))
    }

    async fn write(
        &self,
        api: &Api<ConfigurationState>,
        name: &str,
        report: &ConfigReport,
        desired: &ConfigurationStateStatus,
        exists: bool,
    ) -> Result<(), kube::Error> {
        if !exists {
            let object = ConfigurationState {
                metadata: node_owned(
                    name,
                    &self.namespace,
                    &self.node,
                    report.node_uid.as_deref(),
                    &[
                        (names::COMPONENT_TYPE_LABEL, Component::Speaker.label()),
                        (names::STATUS_NODE_LABEL, self.node.as_str()),
                    ],
                ),
                spec: ConfigurationStateSpec {},
                status: None,
            };
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(e) if matches!(ApiCallError::from(&e), ApiCallError::Conflict) => {}
                Err(e) => return Err(e),
            }
        }
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(summary::status_patch(desired)),
        )
        .await?;
        debug!(result = ?desired.result, "wrote this node's ConfigurationState");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_set_many_times_waits_once_with_its_latest_state() {
        let q = StatusQueue::new();
        let key = ServiceKey::new("default", "web");
        for n in 0..100 {
            q.set(
                key.clone(),
                Desired {
                    l2: Some(l2_payload(&key, "node-a", &[format!("10.0.0.{n}")], &[])),
                    bgp: None,
                },
            );
        }
        assert_eq!(q.len(), 1);
        let (_, desired) = q.pop().unwrap();
        assert_eq!(desired.l2.unwrap().addresses, ["10.0.0.99"]);
    }

    #[test]
    fn a_waiting_state_comes_back_exactly_as_it_was_set() {
        let q = StatusQueue::new();
        let key = ServiceKey::new("default", "web");
        let desired = Desired {
            l2: Some(l2_payload(
                &key,
                "node-a",
                &["10.0.0.1".into(), "2001:db8::1".into()],
                &["eth0".into(), "eth1".into()],
            )),
            bgp: Some(bgp_payload(
                &key,
                "node-a",
                &["tor-a".into(), "tor-b".into()],
            )),
        };
        q.set(key.clone(), desired.clone());
        q.set(ServiceKey::new("default", "none"), Desired::default());
        assert_eq!(
            q.pop(),
            Some((ServiceKey::new("default", "none"), Desired::default()))
        );
        assert_eq!(q.pop(), Some((key, desired)));
    }

    #[test]
    fn the_queue_gives_its_buffer_back_once_empty_and_keeps_it_bounded_while_not() {
        let q = StatusQueue::new();
        let held = ServiceKey::new("default", "held");
        q.set(held.clone(), Desired::default());
        let key = ServiceKey::new("default", "web");
        for n in 0..10_000 {
            let address = format!("10.0.{}.{}", n / 250, n % 250);
            let desired = Desired {
                l2: Some(l2_payload(&key, "node-a", &[address], &["eth0".into()])),
                bgp: None,
            };
            q.set(key.clone(), desired);
        }
        let packed = q.inner.lock().unwrap().packed.len();
        assert!(
            packed < 2 * PACKED_COMPACT_AT,
            "{packed} bytes for two waiting Services"
        );
        assert_eq!(q.pop().unwrap().0, held);
        let (k, desired) = q.pop().unwrap();
        assert_eq!(k, key);
        assert_eq!(desired.l2.unwrap().addresses, ["10.0.39.249"]);
        assert!(q.is_empty());
        assert_eq!(q.inner.lock().unwrap().packed.capacity(), 0);
    }

    #[test]
    fn a_failed_write_does_not_overwrite_a_newer_state() {
        let q = StatusQueue::new();
        let key = ServiceKey::new("default", "web");
        q.set(key.clone(), Desired::default());
        let (k, old) = q.pop().unwrap();
        let newer = Desired {
            l2: Some(l2_payload(&key, "node-a", &["10.0.0.1".into()], &[])),
            bgp: None,
        };
        q.set(key.clone(), newer.clone());
        assert!(q.pop().is_none(), "one write per Service at a time");
        q.retry(k.clone(), old);
        assert!(!q.is_idle());
        q.done(&k);
        assert_eq!(q.pop().unwrap().1, newer);
    }
}
