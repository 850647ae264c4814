//! `ferrolb-controller`: assigns addresses to Services of `type: LoadBalancer` from
//! `IPAddressPool`s and writes them to `status.loadBalancer.ingress` with their `ipMode`.
//!
//! ```text
//!  main ─┬─ leader::lease::run ── Lease (resourceVersion-guarded) ──► Leadership
//!        ├─ watchers ─► reflector stores ─► WorkQueue (deduplicated Service keys, or
//!        │                                  "everything"; records nothing while standby)
//!        ├─ telemetry::serve  (/metrics /healthz /readyz)
//!        ├─ events::EventQueue::run  (Events, 2 at a time, coalesced by Service and reason)
//!        └─ loop: wait for leadership ─► Controller::start (fresh LIST, or the caches when
//!                 they were first listed while leading) ─► pass(All), then
//!                 pass(changed Services) per batch of changes; pass(Resync) every 30 s (what
//!                 is not in order at its cached version; with no Service event since the
//!                 last look over all, only what it found and passes touched), pass(All) when a
//!                 namespace or a pool's spec changes; every write re-checks leadership
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ferrolb_api::names;
use ferrolb_api::v1beta1::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement,
};
use ferrolb_controller::allocator::IpMode;
use ferrolb_controller::convert::ClassFilter;
use ferrolb_controller::convert::service_key;
use ferrolb_controller::events::{self, EventQueue};
use ferrolb_controller::leader::lease::{self, Leadership};
use ferrolb_controller::leader::{Elector, Timing};
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::queue::WorkQueue;
use ferrolb_controller::reconcile::{Controller, Scope, Settings, Stores};
use ferrolb_telemetry::LogFormat;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Api;
use kube::api::PartialObjectMeta;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::watch;
use tracing::{info, warn};

/// Command-line flags; each can also come from the environment variable shown.
#[derive(Parser, Debug)]
#[command(name = "ferrolb-controller", version, about)]
struct Args {
    /// Kubeconfig to use (in-cluster configuration when unset).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The install namespace (pools, advertisements, the Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = "ferrolb-system")]
    namespace: String,
    /// The `spec.loadBalancerClass` handled.
    #[arg(long, env = "FERROLB_LOAD_BALANCER_CLASS", default_value = names::DEFAULT_LOAD_BALANCER_CLASS)]
    load_balancer_class: String,
    /// Leave Services without a `loadBalancerClass` alone.
    #[arg(long, env = "FERROLB_IGNORE_UNCLASSED")]
    ignore_unclassed: bool,
    /// `ipMode` for pools that do not set one: VIP or Proxy.
    #[arg(long, env = "FERROLB_DEFAULT_IP_MODE", default_value = "VIP", value_parser = parse_ip_mode)]
    default_ip_mode: IpMode,
    /// Log level (an EnvFilter directive; RUST_LOG overrides).
    #[arg(long, env = "FERROLB_LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "FERROLB_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "FERROLB_METRICS_ADDR", default_value = "0.0.0.0:7472")]
    metrics_addr: SocketAddr,
    /// Name of the Lease used for leader election.
    #[arg(long, env = "FERROLB_LEASE_NAME", default_value = "ferrolb-controller")]
    lease_name: String,
    /// This replica's identity in the Lease (the Pod name in a cluster).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long a Lease is valid after its last renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops assigning.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    renew_deadline: Duration,
    /// Pause between election attempts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    retry_period: Duration,
    /// How often the safety-net pass looks again at every Service not found in order at the
    /// version the cache shows (those in order cost a lookup each).
    #[arg(long, env = "FERROLB_RESYNC_PERIOD", default_value = "30s", value_parser = parse_duration)]
    resync_period: Duration,
}

fn parse_ip_mode(s: &str) -> Result<IpMode, String> {
    match s {
        "VIP" => Ok(IpMode::Vip),
        "Proxy" => Ok(IpMode::Proxy),
        other => Err(format!("`{other}` is not VIP or Proxy")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    ferrolb_api::duration::parse_duration(s)
        .ok_or_else(|| format!("`{s}` is not a duration such as 15s"))
}

/// One thread: the controller waits on the API server, whose status-patch pace (about 1,500
/// a second here) is a tenth of what one thread can plan and send, and a second worker only
/// added the hand-offs between the two (the throughput bench's cold start at 10,000 Services:
/// 0.11-0.12 ms of CPU per Service on one thread, 0.14-0.18 ms on two). The longest stretch
/// without an await is a full pass's planning (tens of milliseconds at 10,000 Services),
/// far inside the Lease's renew deadline.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ferrolb_telemetry::init_logging(&args.log_level, args.log_format)?;
    if args.renew_deadline >= args.lease_duration {
        anyhow::bail!(
            "--renew-deadline must be shorter than --lease-duration, or two replicas could both lead"
        );
    }
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    // Audit logs (and the test API server's request log) tell replicas apart by this.
    let agent = format!(
        "ferrolb-controller/{} ({identity})",
        env!("CARGO_PKG_VERSION")
    );
    let client = ferrolb_telemetry::kube_client(args.kubeconfig.as_deref(), &agent).await?;
    info!(%identity, namespace = %args.namespace, class = %args.load_balancer_class, "starting");

    let metrics = Metrics::default();
    let (shutdown_tx, ready) =
        ferrolb_telemetry::serve_process(args.metrics_addr, |r| metrics.register(r)).await?;

    let timing = Timing {
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    let (until_tx, until_rx) = watch::channel(None::<Instant>);
    let leases = Api::namespaced(client.clone(), &args.namespace);
    let election = tokio::spawn(lease::run(
        leases,
        args.lease_name.clone(),
        Elector::new(identity.clone(), timing),
        until_tx,
        shutdown_tx.subscribe(),
    ));
    let leadership = Leadership::new(until_rx);

    // A replica that wins the election before it starts its watches builds its first term's
    // allocator from its caches, whose first LIST then begins while it leads, instead of
    // reading every Service again (a cold start's one LIST fewer). A standby's watches start
    // at most one election attempt later.
    let mut first = leadership.clone();
    let first_term = tokio::time::timeout(args.retry_period, first.wait_until_leader())
        .await
        .ok()
        .and_then(|()| first.leading_until());
    let queue = Arc::new(WorkQueue::new());
    let stores = spawn_stores(&client, &args.namespace, &queue);
    wait_until_listed(&stores).await?;
    ready.set(true);

    let events = spawn_events(&client, &identity, &metrics);
    let assigner = Assigner {
        client,
        settings: Settings {
            namespace: args.namespace.clone(),
            filter: ClassFilter {
                class: args.load_balancer_class.clone(),
                ignore_unclassed: args.ignore_unclassed,
            },
            default_ip_mode: args.default_ip_mode,
        },
        leadership,
        metrics,
        events,
        queue,
        stores,
        resync_period: args.resync_period,
        first_term,
    };
    tokio::select! {
        _ = assigner.run() => {}
        _ = ferrolb_telemetry::shutdown_signal() => info!("shutting down"),
    }
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
    Ok(())
}

/// One watch and cache per kind, each recording what it changes in `queue`.
fn spawn_stores(client: &kube::Client, ns: &str, queue: &Arc<WorkQueue>) -> Stores {
    Stores {
        services: spawn_store(Api::all(client.clone()), queue, |q, s: &Service| {
            q.add(service_key(s))
        }),
        namespaces: spawn_store(Api::all(client.clone()), queue, |q, _: &Namespace| {
            q.add_everything()
        }),
        pools: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &IPAddressPool| q.add_config(),
        ),
        l2: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &L2Advertisement| q.add_config(),
        ),
        bgp: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &BGPAdvertisement| q.add_config(),
        ),
        peers: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &BGPPeer| q.add_config(),
        ),
        communities: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &Community| q.add_config(),
        ),
        bfd_profiles: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &BFDProfile| q.add_config(),
        ),
        // Metadata-only LIST and WATCH: peers' password Secrets are checked by name, and the
        // controller never holds Secret data.
        secrets: spawn_store(
            Api::namespaced(client.clone(), ns),
            queue,
            |q, _: &PartialObjectMeta<Secret>| q.add_config(),
        ),
    }
}

/// Returns once every kind has been listed.
async fn wait_until_listed(stores: &Stores) -> anyhow::Result<()> {
    stores.services.wait_until_ready().await?;
    stores.namespaces.wait_until_ready().await?;
    stores.pools.wait_until_ready().await?;
    // A peer is checked against these: before their first list, every password Secret and BFD
    // profile would look missing, and a first pass would flip Ready to False and back.
    stores.secrets.wait_until_ready().await?;
    stores.bfd_profiles.wait_until_ready().await?;
    // The ConfigurationState sums up every configuration kind: it says `Valid` or `Invalid`
    // only once each has been listed.
    stores.l2.wait_until_ready().await?;
    stores.bgp.wait_until_ready().await?;
    stores.peers.wait_until_ready().await?;
    stores.communities.wait_until_ready().await?;
    Ok(())
}

/// The task that publishes the controller's Events; returns its queue.
fn spawn_events(client: &kube::Client, identity: &str, metrics: &Metrics) -> Arc<EventQueue> {
    let reporter = Reporter {
        controller: "ferrolb-controller".into(),
        instance: Some(identity.to_owned()),
    };
    let events = Arc::new(EventQueue::new(events::CAPACITY));
    let metrics = metrics.clone();
    tokio::spawn(
        events
            .clone()
            .run(client.clone(), reporter, move |event, e| {
                let e = ferrolb_controller::apicall::ApiCallError::from(e);
                tracing::debug!(reason = %event.reason, error = %e, "publishing an Event failed");
                metrics.api_error("event", &e);
            }),
    );
    events
}

/// Assigns addresses while this replica leads: a full pass when it starts leading, then a pass
/// over what changed (a change and what follows it within 20 ms), retries when due, and the
/// safety net every `resync_period`.
struct Assigner {
    client: kube::Client,
    settings: Settings,
    leadership: Leadership,
    metrics: Metrics,
    events: Arc<EventQueue>,
    queue: Arc<WorkQueue>,
    stores: Stores,
    resync_period: Duration,
    /// When this replica led before its watches started: until when it leads for certain
    /// (without a renewal). A first term that starts before then builds from the caches.
    first_term: Option<Instant>,
}

impl Assigner {
    /// Leads, assigns, and waits to lead again, until the process stops.
    async fn run(mut self) {
        loop {
            self.metrics.leader.set(0);
            self.queue.set_accepting(false);
            self.leadership.wait_until_leader().await;
            self.metrics.leader.set(1);
            // Recording starts before the LIST, so no change between the LIST and the first
            // (full) pass is lost.
            self.queue.set_accepting(true);
            let caches_fresh = self.first_term.take().is_some_and(|u| Instant::now() < u);
            let controller = match Controller::start(
                self.client.clone(),
                self.settings.clone(),
                self.leadership.clone(),
                self.metrics.clone(),
                self.events.clone(),
                &self.stores,
                caches_fresh,
            )
            .await
            {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "could not load the cluster state; retrying");
                    self.metrics.api_error("list", &e.into());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            self.lead(controller).await;
            info!("lost leadership; stopped assigning");
        }
    }

    /// Passes while this replica leads.
    async fn lead(&self, mut controller: Controller) {
        let mut scope = Scope::All;
        let mut last_full = Instant::now();
        let mut first = true;
        while self.leadership.is_leader() {
            let started = Instant::now();
            let report = controller.pass(&self.stores, scope, started).await;
            if std::mem::take(&mut first) {
                info!(
                    writes = report.writes,
                    failed = report.failed,
                    planned_ms = report
                        .planned_at
                        .map_or(0, |at| (at - started).as_millis() as u64),
                    took_ms = started.elapsed().as_millis() as u64,
                    "first pass over every Service done"
                );
            }
            let mut wake = last_full + self.resync_period;
            if let Some(at) = report.next_retry {
                wake = wake.min(at);
            }
            if !report.retry.is_empty() {
                // Re-read soon, once the cache has the Service's new version.
                wake = wake.min(Instant::now() + Duration::from_millis(20));
            }
            tokio::select! {
                _ = self.queue.changed() => {
                    // Collect what else changes in the next few milliseconds into one pass.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
            // Counted before the cache is read (the watch counts an event after the cache
            // holds it): a look that misses an event sees the count move.
            let cache_changes = self.queue.changes();
            let batch = self.queue.take();
            let mut keys = report.retry;
            keys.extend(batch.services);
            keys.extend(controller.due(Instant::now()));
            scope = if batch.everything {
                last_full = Instant::now();
                Scope::All
            } else if last_full.elapsed() >= self.resync_period {
                // The safety net: what is not in order at the version the cache shows
                // (the batch's Services among them: their versions changed).
                last_full = Instant::now();
                Scope::Resync { cache_changes }
            } else if batch.config {
                Scope::Config(keys)
            } else {
                Scope::Services(keys)
            };
        }
    }
}

fn spawn_store<K>(api: Api<K>, queue: &Arc<WorkQueue>, record: fn(&WorkQueue, &K)) -> Store<K>
where
    K: ferrolb_telemetry::Watched,
{
    let queue = queue.clone();
    ferrolb_telemetry::watch_store(api, watcher::Config::default(), move |obj| {
        record(&queue, obj)
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "ferrolb".into())
}
