//! What both FerroLB binaries share: log setup (text or JSON), the HTTP endpoints `/metrics`
//! (Prometheus text format), `/healthz` (the process serves) and `/readyz` (the binary says it is
//! ready), the Kubernetes client they build, how they notice they must stop, and how they
//! classify and retry a failed call to the API server ([`apicall`]).

pub mod apicall;
pub mod events;
pub mod memory;
mod runtime;

pub use runtime::register_runtime_metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format `{other}` is not `text` or `json`")),
        }
    }
}

/// Installs the global log subscriber. `level` is an `EnvFilter` directive (`info`,
/// `ferrolb_controller=debug,kube=warn`); `RUST_LOG` overrides it when set.
pub fn init_logging(level: &str, format: LogFormat) -> Result<(), Error> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .map_err(|e| Error::LogLevel(e.to_string()))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| Error::LogLevel(e.to_string()))
}

/// A Kubernetes client from `kubeconfig`, or the in-cluster configuration when `None`, that
/// names itself `user_agent` (audit logs and the test API server's request log tell replicas
/// apart by it).
pub async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    user_agent: &str,
) -> Result<kube::Client, Error> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| Error::Kubeconfig(e.to_string()))?
        }
        None => kube::Config::incluster().map_err(|e| {
            Error::Kubeconfig(format!(
                "no in-cluster configuration and no --kubeconfig: {e}"
            ))
        })?,
    };
    let agent = http::HeaderValue::from_str(user_agent).map_err(|_| {
        Error::Kubeconfig(format!("user agent `{user_agent}` is not printable ASCII"))
    })?;
    config.headers.push((http::header::USER_AGENT, agent));
    kube::Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// What a watched kind must be: a Kubernetes object the watcher can decode and move across tasks.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Starts a watcher that keeps a reflector store current, calling `on_change` with every object
/// it applies or deletes; watch errors are logged and retried with back-off. The store answers
/// `wait_until_ready` once the first list is in.
///
/// After a re-list (the watch could not resume: 410 Expired after an API server restart, or a
/// long disconnect), `on_change` is called once the store holds the new list: for every listed
/// object, and for every object the store held before that the list no longer has (deleted
/// while the watch was down). Called per listed object as it arrived, the caller would read the
/// store before it had the object: a Service created while the watch was down looked deleted
/// and waited for the next full pass (30 s) for its address.
pub fn watch_store<K>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    on_change: impl Fn(&K) + Send + 'static,
) -> kube::runtime::reflector::Store<K>
where
    K: Watched,
{
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::watcher::Event;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (store, writer) = reflector::store();
    // managedFields are never read, and are often the largest part of an object: dropped
    // before the store keeps it.
    let stream = watcher(api, config.any_semantic())
        .backoff(WatchBackoff::default())
        .modify(|obj| obj.managed_fields_mut().clear())
        .reflect(writer);
    let reader = store.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // While a list is read: what the store held before, and what the list brought.
        type Relisting<K> = (Vec<Arc<K>>, std::collections::HashSet<ObjectRef<K>>);
        let mut relisting: Option<Relisting<K>> = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(Event::Apply(obj) | Event::Delete(obj)) => on_change(&obj),
                Ok(Event::Init) => relisting = Some((reader.state(), Default::default())),
                Ok(Event::InitApply(obj)) => match relisting.as_mut() {
                    Some((_, listed)) => {
                        listed.insert(ObjectRef::from_obj(&obj));
                    }
                    None => on_change(&obj),
                },
                Ok(Event::InitDone) => {
                    let Some((before, listed)) = relisting.take() else {
                        continue;
                    };
                    for r in &listed {
                        if let Some(obj) = reader.get(r) {
                            on_change(&obj);
                        }
                    }
                    for obj in before {
                        if !listed.contains(&ObjectRef::from_obj(&*obj)) {
                            on_change(&obj);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, kind = %K::kind(&()), "watch error; retrying with back-off")
                }
            }
        }
    });
    store
}

/// The retry delays of [`watch_store`]'s watches after an error: 250 ms doubling to at most
/// 4 s, each with up to a quarter taken off at random, back to 250 ms after any event.
///
/// kube-runtime's default (client-go's: 0.8 s doubling to 30 s) suits many replicas of a
/// client; the controller is one writer (and a standby or two), and after the API server
/// restarts its watches should not wait up to 30 s more before they list again (an API server
/// restart under load once left Services without an address for more than 40 s).
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
    seed: u64,
}

/// The first delay of a [`WatchBackoff`].
const WATCH_BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The longest delay of a [`WatchBackoff`].
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(4);

impl Default for WatchBackoff {
    fn default() -> Self {
        use std::hash::{BuildHasher, RandomState};
        Self {
            next: WATCH_BACKOFF_FIRST,
            seed: RandomState::new().hash_one(std::time::SystemTime::now()) | 1,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // xorshift64: enough randomness to spread replicas apart.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let this = self.next;
        self.next = (self.next * 2).min(WATCH_BACKOFF_MAX);
        let cut = this.as_millis() as u64 * (self.seed % 1024) / 4096;
        Some(this - Duration::from_millis(cut))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_FIRST;
    }
}

/// Resolves on SIGTERM (what the kubelet sends) or Ctrl-C.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable Kubernetes configuration.
    #[error("kubernetes configuration: {0}")]
    Kubeconfig(String),
    /// The log level directive could not be parsed.
    #[error("invalid log level: {0}")]
    LogLevel(String),
    /// The metrics address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Readiness flag a binary flips when it can do its job (for example: the initial snapshot is
/// loaded).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready or not.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// Whether the process said it is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    ready: Readiness,
}

/// A binary's endpoints: its metrics (`register` adds them) under the `ferrolb_` prefix beside
/// the runtime's, served with `/healthz` and `/readyz` on `addr` until the returned sender says
/// stop; readiness starts false.
pub async fn serve_process(
    addr: SocketAddr,
    register: impl FnOnce(&mut Registry),
) -> Result<(watch::Sender<bool>, Readiness), Error> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut registry = Registry::with_prefix("ferrolb");
    register(&mut registry);
    register_runtime_metrics(&mut registry);
    let ready = Readiness::default();
    serve(addr, Arc::new(registry), ready.clone(), shutdown_rx).await?;
    Ok((shutdown_tx, ready))
}

/// Binds `addr` and serves `/metrics`, `/healthz` and `/readyz` until `shutdown` fires.
/// Returns the bound address (useful with port 0) and the serving task.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    ready: Readiness,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { registry, ready });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .await;
    });
    Ok((bound, task))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "encoding failed".to_string(),
        ),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.ready.get() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
