//! Fault injection for reliability tests (close watches, fail requests, add latency, expire the watch
//! cache) and the request log. Shared between the handle and the HTTP layer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::ApiError;
use super::state::State;

/// How injected failures answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// 500 InternalError.
    ServerError,
    /// 429 TooManyRequests with `Retry-After` seconds.
    TooManyRequests {
        /// Seconds the client is told to wait.
        retry_after_secs: u32,
    },
}

impl Failure {
    pub(crate) fn to_error(self, resource: &str) -> ApiError {
        match self {
            Failure::ServerError => ApiError::Injected {
                code: 500,
                retry_after: None,
                message: format!("injected failure for {resource}"),
            },
            Failure::TooManyRequests { retry_after_secs } => ApiError::Injected {
                code: 429,
                retry_after: Some(retry_after_secs),
                message: "Too many requests, please try again later.".into(),
            },
        }
    }
}

/// The Kubernetes verb of a request, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object (or of a non-resource URL).
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// From the RBAC spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Verb::Get,
            Verb::List,
            Verb::Watch,
            Verb::Create,
            Verb::Update,
            Verb::Patch,
            Verb::Delete,
            Verb::DeleteCollection,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }

    /// The RBAC spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// One served request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// The Kubernetes verb; `None` for paths that are not API resources or not understood.
    pub verb: Option<Verb>,
    /// API group of the resource (empty for core).
    pub group: String,
    /// Resource (plural), for resource requests.
    pub resource: Option<String>,
    /// Subresource (`status`).
    pub subresource: Option<String>,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// `User-Agent` header.
    pub user_agent: String,
    /// HTTP status answered (200 for watches that started streaming).
    pub status: u16,
}

#[derive(Debug, Default)]
pub(crate) struct FaultState {
    pub(crate) failures: HashMap<(String, Option<Verb>), (u32, Failure)>,
    /// Writes to one object (resource, namespace, name) that fail until cleared.
    pub(crate) object_failures: HashMap<(String, Option<String>, String), Failure>,
    pub(crate) latency: Duration,
    /// Latency added to requests whose path names a resource (plural), on top of `latency`.
    pub(crate) resource_latency: HashMap<String, Duration>,
}

impl FaultState {
    /// The delay before answering a request for `path`.
    pub(crate) fn latency_of(&self, path: &str) -> Duration {
        let named = path
            .split('/')
            .filter_map(|segment| self.resource_latency.get(segment))
            .max()
            .copied()
            .unwrap_or_default();
        self.latency + named
    }
}

/// Everything the HTTP layer and the handles share.
#[derive(Debug)]
pub struct Shared {
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) log: Mutex<Vec<RequestRecord>>,
    pub(crate) close_watches: tokio::sync::watch::Sender<u64>,
    pub(crate) kill_connections: tokio::sync::watch::Sender<u64>,
    pub(crate) restart: RestartSender,
}

/// Asks the server's supervisor to restart; the reply says it is listening again.
pub(crate) type RestartSender =
    tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>;
/// The supervisor's end of [`RestartSender`].
pub(crate) type RestartReceiver =
    tokio::sync::mpsc::UnboundedReceiver<tokio::sync::oneshot::Sender<()>>;

impl Shared {
    pub(crate) fn new(state: State) -> (Self, RestartReceiver) {
        let (restart, rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Self {
            state: Arc::new(Mutex::new(state)),
            faults: Mutex::new(FaultState::default()),
            log: Mutex::new(Vec::new()),
            close_watches: tokio::sync::watch::channel(0).0,
            kill_connections: tokio::sync::watch::channel(0).0,
            restart,
        };
        (shared, rx)
    }

    /// The failure injected for writes to one object, if any.
    pub(crate) fn object_failure(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        verb: Verb,
    ) -> Option<Failure> {
        let name = name?;
        if !matches!(
            verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        ) {
            return None;
        }
        let f = self.faults.lock().expect("faults lock");
        f.object_failures
            .get(&(
                resource.to_string(),
                namespace.map(str::to_string),
                name.to_string(),
            ))
            .copied()
    }

    /// Takes one injected failure for a `verb` request on `resource`, if any is pending.
    pub(crate) fn take_failure(&self, resource: &str, verb: Verb) -> Option<Failure> {
        let mut f = self.faults.lock().expect("faults lock");
        for key in [
            (resource.to_string(), Some(verb)),
            (resource.to_string(), None),
        ] {
            if let Some(entry) = f.failures.get_mut(&key)
                && entry.0 > 0
            {
                entry.0 -= 1;
                return Some(entry.1);
            }
        }
        None
    }
}

/// The fault-injection handle.
#[derive(Clone, Debug)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl Faults {
    /// Ends every open watch now (clients see the stream end and re-watch).
    pub fn close_watches(&self) {
        self.shared.close_watches.send_modify(|n| *n += 1);
    }

    /// Fails the next `count` requests for `resource` (plural, e.g. `services`) with `failure`.
    pub fn fail_next(&self, resource: &str, count: u32, failure: Failure) {
        self.insert_failure(resource, None, count, failure);
    }

    /// Fails the next `count` requests with `verb` on `resource` (e.g. only watches).
    pub fn fail_next_verb(&self, resource: &str, verb: Verb, count: u32, failure: Failure) {
        self.insert_failure(resource, Some(verb), count, failure);
    }

    fn insert_failure(&self, resource: &str, verb: Option<Verb>, count: u32, failure: Failure) {
        let mut f = self.shared.faults.lock().expect("faults lock");
        f.failures
            .insert((resource.to_string(), verb), (count, failure));
    }

    /// Fails every write (create, update, patch, delete; any subresource) to the object
    /// `namespace/name` of `resource` with `failure`, until [`Faults::clear`]. Reads succeed.
    pub fn fail_writes_to(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        failure: Failure,
    ) {
        let mut f = self.shared.faults.lock().expect("faults lock");
        f.object_failures.insert(
            (
                resource.to_string(),
                namespace.map(str::to_string),
                name.to_string(),
            ),
            failure,
        );
    }

    /// Adds `latency` before every answer (zero to remove).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.faults.lock().expect("faults lock").latency = latency;
    }

    /// Adds `latency` before every answer to a request whose path names `resource` (plural,
    /// e.g. `endpointslices`: its lists and the start of its watches), zero to remove. The
    /// other resources answer as before.
    pub fn set_resource_latency(&self, resource: &str, latency: Duration) {
        let mut f = self.shared.faults.lock().expect("faults lock");
        if latency.is_zero() {
            f.resource_latency.remove(resource);
        } else {
            f.resource_latency.insert(resource.to_string(), latency);
        }
    }

    /// Forgets the watch cache: a watch from any earlier resourceVersion gets 410 Expired.
    pub fn expire_watch_cache(&self) {
        self.shared
            .state
            .lock()
            .expect("state lock")
            .store
            .expire_history();
    }

    /// Removes every pending failure and the latency.
    pub fn clear(&self) {
        *self.shared.faults.lock().expect("faults lock") = FaultState::default();
    }
}
