//! A Kubernetes API server for tests and for the lab, faithful to kube-apiserver 1.35 for the resources
//! FerroLB uses. Start it in-process with [`ApiServer::start`] (it binds `127.0.0.1:0` by default) and
//! talk to it with an unmodified `kube::Client`.
//!
//! # Layout
//!
//! - [`store`]: global revision counter, per-resource tables, bounded watch cache.
//! - [`ops`], [`lists`], [`watch`]: the verbs; [`kinds`], [`services`], [`builtin`], [`schema`]: per-kind
//!   rules; [`patch`], [`ssa`]: patch types and server-side apply; [`discovery`], [`table`]: documents.
//! - [`http`]: routing, the request handler, `/_fault/...` endpoints; [`faults`]: fault handle and
//!   request log.
//!
//! # Use
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig, Failure, Verb};
//!
//! let server = ApiServer::start(ApiServerConfig::default().with_crd_dir("charts/ferrolb/crds")).await?;
//! let client = server.client(); // or server.write_kubeconfig(path) for a binary under test
//! server.faults().fail_next("services", 2, Failure::TooManyRequests { retry_after_secs: 1 });
//! server.faults().fail_next_verb("leases", Verb::Update, 1, Failure::ServerError);
//! server.faults().close_watches();
//! server.faults().expire_watch_cache();
//! server.restart().await;
//! for r in server.request_log() {
//!     println!("{} {:?} {:?}/{:?} by {}", r.method, r.verb, r.resource, r.subresource, r.user_agent);
//! }
//! # drop(client);
//! # Ok(())
//! # }
//! ```
//!
//! ```text
//!  kube::Client ──HTTP/1.1──► http::server::handle ──► Mutex<State> { Store, Registry }
//!                                  │                          │ broadcast per table
//!                   Faults ────────┘                          └──► watch tasks ──► chunked bodies
//! ```

pub mod builtin;
pub mod cluster;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod http;
pub mod kinds;
pub mod lists;
pub mod openapi;
pub mod ops;
pub mod patch;
pub mod protobuf;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod services;
pub mod ssa;
pub mod state;
pub mod store;
pub mod table;
pub mod typed;
pub mod watch;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use cluster::{RawResponse, TestCluster};
pub use faults::{Failure, Faults, RequestRecord, Verb};
use faults::{RestartReceiver, Shared};
use http::server::{KillableListener, handle};
pub use state::ClusterConfig;
use state::{Registry, State};
pub use store::Snapshot;

/// Errors starting or driving the server.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A CRD could not be read or understood.
    #[error(transparent)]
    Crd(#[from] resources::CrdError),
    /// The kube client could not be built.
    #[error("cannot build a kube client: {0}")]
    Client(String),
    /// A state file could not be read or written.
    #[error("state file {path}: {message}")]
    State {
        /// File.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// How to start the server.
#[derive(Clone, Debug)]
pub struct ApiServerConfig {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Directories whose `*.yaml` CRDs are served.
    pub crd_dirs: Vec<PathBuf>,
    /// CRD documents served in addition (parsed YAML/JSON).
    pub crds: Vec<Value>,
    /// Events kept per resource for watch replay; older watches get 410 Expired.
    pub watch_cache_size: usize,
    /// Service CIDR and NodePort range.
    pub cluster: ClusterConfig,
    /// Objects to start with (a saved [`Snapshot`]).
    pub initial: Option<Snapshot>,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            crd_dirs: Vec::new(),
            crds: Vec::new(),
            watch_cache_size: 1000,
            cluster: ClusterConfig::default(),
            initial: None,
        }
    }
}

impl ApiServerConfig {
    /// Serves the CRDs found in `dir`.
    pub fn with_crd_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// Serves the CRDs in a YAML text (several documents allowed).
    pub fn with_crd_yaml(mut self, yaml: &str) -> Result<Self, ApiServerError> {
        let docs =
            resources::parse_crd_documents(yaml).map_err(|message| resources::CrdError::Yaml {
                path: "<inline>".into(),
                message,
            })?;
        self.crds.extend(docs);
        Ok(self)
    }
}

/// The server type; see [`ApiServer::start`].
pub struct ApiServer;

impl ApiServer {
    /// Starts serving; the handle stops the server when dropped.
    pub async fn start(config: ApiServerConfig) -> Result<ApiServerHandle, ApiServerError> {
        let mut registry = Registry::with_builtins();
        let mut crds = config.crds.clone();
        for dir in &config.crd_dirs {
            crds.extend(resources::read_crd_dir(dir)?);
        }
        for crd in &crds {
            registry.add_crd(crd)?;
        }
        let mut st = State::new(registry, config.cluster.clone(), config.watch_cache_size);
        if let Some(snap) = config.initial.clone() {
            st.store = store::Store::restore(snap, config.watch_cache_size);
        }
        // CRD objects are readable through apiextensions too.
        let crd_table = resources::StorageKey {
            group: "apiextensions.k8s.io".into(),
            plural: "customresourcedefinitions".into(),
        };
        for crd in crds {
            let name = crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if st
                .store
                .get(&crd_table, &store::ObjKey::new("", &name))
                .is_none()
            {
                let mut obj = crd.clone();
                obj["metadata"]["uid"] = Value::String(state::new_uid());
                obj["metadata"]["creationTimestamp"] = Value::String(state::now_seconds());
                obj["metadata"]["generation"] = Value::from(1);
                obj["status"] = serde_json::json!({"conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}], "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(Value::Null)});
                st.store.put(&crd_table, store::ObjKey::new("", &name), obj);
            }
        }
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ApiServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ApiServerError::Bind {
                addr: config.listen,
                source,
            })?;
        let (shared, restart_rx) = Shared::new(st);
        let shared = Arc::new(shared);
        let supervisor = tokio::spawn(supervise(shared.clone(), listener, addr, restart_rx));
        Ok(ApiServerHandle {
            shared,
            addr,
            supervisor,
        })
    }
}

async fn supervise(
    shared: Arc<Shared>,
    first: TcpListener,
    addr: SocketAddr,
    mut restart_rx: RestartReceiver,
) {
    let router = Router::new().fallback(handle).with_state(shared.clone());
    let mut listener = Some(first);
    loop {
        let Some(l) = listener.take() else { return };
        let kill = shared.kill_connections.subscribe();
        let serve = axum::serve(KillableListener { inner: l, kill }, router.clone()).into_future();
        // Dropping the serve future closes the listener.
        let done = tokio::select! {
            _ = serve => return,
            r = restart_rx.recv() => match r {
                Some(done) => done,
                None => return,
            },
        };
        shared.close_watches.send_modify(|n| *n += 1);
        shared.kill_connections.send_modify(|n| *n += 1);
        // A restarted kube-apiserver rebuilds its watch cache: older watches get 410.
        shared
            .state
            .lock()
            .expect("state lock")
            .store
            .expire_history();
        for _ in 0..200 {
            match TcpListener::bind(addr).await {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
        let _ = done.send(());
    }
}

/// A running server. Dropping it stops the server and cuts its connections.
pub struct ApiServerHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    supervisor: JoinHandle<()>,
}

impl ApiServerHandle {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig document pointing at this server (context `ferrolb-test`, namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    /// The kubeconfig as kube's type.
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .expect("the generated kubeconfig parses")
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse().expect("valid url");
        let mut cfg = kube::Config::new(url);
        cfg.default_namespace = "default".into();
        kube::Client::try_from(cfg).expect("a plain-HTTP client builds")
    }

    /// The fault-injection handle.
    pub fn faults(&self) -> Faults {
        http::server::faults(&self.shared)
    }

    /// Every request served so far, in order.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.log.lock().expect("log lock").clone()
    }

    /// Empties the request log.
    pub fn clear_request_log(&self) {
        self.shared.log.lock().expect("log lock").clear();
    }

    /// Drops every connection and watch, then listens again on the same address with the same
    /// stored objects (the watch cache starts empty, as after a real restart).
    pub async fn restart(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.shared.restart.send(done).is_ok() {
            let _ = wait.await;
        }
    }

    /// The stored objects, for saving.
    pub fn snapshot(&self) -> Snapshot {
        self.shared
            .state
            .lock()
            .expect("state lock")
            .store
            .snapshot()
    }

    /// The current global resourceVersion.
    pub fn revision(&self) -> u64 {
        self.shared
            .state
            .lock()
            .expect("state lock")
            .store
            .revision()
    }

    /// Saves the stored objects to `path` as JSON.
    pub fn save_state(&self, path: &Path) -> Result<(), ApiServerError> {
        let text = serde_json::to_string(&self.snapshot()).map_err(|e| ApiServerError::State {
            path: path.into(),
            message: e.to_string(),
        })?;
        std::fs::write(path, text).map_err(|e| ApiServerError::State {
            path: path.into(),
            message: e.to_string(),
        })
    }
}

/// Reads a state file written by [`ApiServerHandle::save_state`].
pub fn load_state(path: &Path) -> Result<Snapshot, ApiServerError> {
    let text = std::fs::read_to_string(path).map_err(|e| ApiServerError::State {
        path: path.into(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ApiServerError::State {
        path: path.into(),
        message: e.to_string(),
    })
}

impl Drop for ApiServerHandle {
    fn drop(&mut self) {
        self.supervisor.abort();
        self.shared.close_watches.send_modify(|n| *n += 1);
        self.shared.kill_connections.send_modify(|n| *n += 1);
    }
}

/// A kubeconfig whose only cluster is `server`.
pub fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ferrolb-test\n  cluster:\n    server: {server}\nusers:\n- name: ferrolb-test\n  user: {{}}\ncontexts:\n- name: ferrolb-test\n  context:\n    cluster: ferrolb-test\n    user: ferrolb-test\n    namespace: default\ncurrent-context: ferrolb-test\n"
    )
}
