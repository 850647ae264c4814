//! `ferrolb-speaker`: runs on every node (host network) and attracts traffic for Service
//! addresses: ARP/NDP answers from one owner per address, BGP announcements from every
//! eligible node.
//!
//! ```text
//!  main ─┬─ one watch task per kind (LoadBalancer Services, EndpointSlices, Nodes, speaker Pods,
//!        │   ferrolb.io kinds, Secrets) ─► Cluster (stripped, indexed) ─► changed ─┐
//!        ├─ refetch task: the slices of a Service that became ours, listed ───────┤
//!        ├─ gossip (UDP, HMAC) ─► live set, unable addresses, leaving members ─────┤
//!        ├─ status task (StatusQueue) and Event task (EventQueue): API writes      │
//!        ├─ BGPSessionState task (latest session states, at most once a second)    │
//!        ├─ ConfigurationState task (this node's checks, when they change)         │
//!        ├─ telemetry::serve (/metrics /healthz /readyz)                           ▼
//!        └─ sync loop: once every kind has listed; on change (at once; a burst paced by
//!           shell::pace), or every 5 s for interfaces and session metrics
//!           ─► Speaker::sync (no API call)
//! ```
//!
//! On SIGTERM: the gossip state says "leaving" (the others take the layer-2 addresses over),
//! ARP/NDP answers go on for `--l2-handover-time` while BGP routes drain for
//! `--bgp-drain-time`, then everything is withdrawn.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use ferrolb_api::names;
use ferrolb_speaker::cluster::{Cluster, Scope, Update};
use ferrolb_speaker::membership::liveness::REJOIN_SETTLE;
use ferrolb_speaker::membership::partition::{Arbiter, Standing, Written};
use ferrolb_speaker::membership::view_lease::ViewLease;
use ferrolb_speaker::membership::{
    Gossip, GossipKey, KeyRing, Liveness, MemberState, MembershipConfig,
};
use ferrolb_speaker::shell::metrics::Metrics;
use ferrolb_speaker::shell::sessions::SessionStateWriter;
use ferrolb_speaker::shell::snapshot::secret_bytes;
use ferrolb_speaker::shell::status::{ConfigStateWriter, StatusQueue, StatusWriter};
use ferrolb_speaker::shell::{Settings, Speaker};
use ferrolb_telemetry::events::{self, EventQueue};
use ferrolb_telemetry::{LogFormat, Readiness};
use futures::StreamExt;
use kube::Api;
use kube::runtime::events::Reporter;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

/// Services changed since the last trim of free memory that make the next one worthwhile.
const TRIM_AFTER_CHANGES: usize = 1000;

/// Command-line flags; each can also come from the environment variable shown.
#[derive(Parser, Debug)]
#[command(name = "ferrolb-speaker", version, about)]
struct Args {
    /// Kubeconfig to use (in-cluster configuration when unset).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The node this speaker runs on.
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The install namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "ferrolb-system")]
    namespace: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "FERROLB_METRICS_ADDR", default_value = "0.0.0.0:7473")]
    metrics_addr: SocketAddr,
    /// Log level (an EnvFilter directive; RUST_LOG overrides).
    #[arg(long, env = "FERROLB_LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "FERROLB_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Answer ARP/NDP for addresses this node owns.
    #[arg(long, env = "FERROLB_ENABLE_L2", default_value_t = true, action = ArgAction::Set)]
    enable_l2: bool,
    /// Announce addresses over BGP.
    #[arg(long, env = "FERROLB_ENABLE_BGP", default_value_t = true, action = ArgAction::Set)]
    enable_bgp: bool,
    /// UDP port of the membership gossip.
    #[arg(long, env = "FERROLB_GOSSIP_PORT", default_value_t = 7946)]
    gossip_port: u16,
    /// Secret (in the install namespace) holding the gossip key under `secretkey`.
    #[arg(
        long,
        env = "FERROLB_GOSSIP_SECRET",
        default_value = "ferrolb-memberlist"
    )]
    gossip_secret: String,
    /// The `spec.loadBalancerClass` handled.
    #[arg(long, env = "FERROLB_LOAD_BALANCER_CLASS", default_value = names::DEFAULT_LOAD_BALANCER_CLASS)]
    load_balancer_class: String,
    /// Leave Services without a `loadBalancerClass` to another implementation (the controller's
    /// flag of the same name: both binaries must agree on what FerroLB handles).
    #[arg(long, env = "FERROLB_IGNORE_UNCLASSED")]
    ignore_unclassed: bool,
    /// On SIGTERM, how long BGP routes stay announced with the GRACEFUL_SHUTDOWN community
    /// (RFC 8326) before the sessions close, so routers move traffic to other nodes first; 0s
    /// withdraws at once. Keep it below the Pod's terminationGracePeriodSeconds.
    #[arg(long, env = "FERROLB_BGP_DRAIN_TIME", default_value = "5s", value_parser = drain_time)]
    bgp_drain_time: Duration,
    /// On SIGTERM, how long this speaker goes on answering ARP/NDP after telling the others
    /// (over gossip) that it is leaving, so the new owners announce themselves first (the BGP
    /// drain time counts towards it); 0s hands nothing over: the others take the addresses
    /// once they see this speaker gone.
    #[arg(long, env = "FERROLB_L2_HANDOVER_TIME", default_value = "1s", value_parser = drain_time)]
    l2_handover_time: Duration,
    /// How long a node that (re)joins must stay live before it takes back the layer-2
    /// addresses `preferredNodeSelectors` prefer it for (a flapping node moves nothing); 0s
    /// takes them back at once. Every speaker should use the same value.
    #[arg(long, env = "FERROLB_L2_PREFERENCE_HOLD_DOWN", default_value = "30s", value_parser = drain_time)]
    l2_preference_hold_down: Duration,
}

fn drain_time(s: &str) -> Result<Duration, String> {
    ferrolb_speaker::shell::snapshot::parse_duration(s)
        .ok_or_else(|| format!("`{s}` is not a duration such as 5s"))
}

fn main() -> anyhow::Result<()> {
    // Before any thread exists: glibc gives each new thread an arena of its own otherwise.
    ferrolb_telemetry::memory::limit_arenas();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(speaker_main())
}

async fn speaker_main() -> anyhow::Result<()> {
    let args = Args::parse();
    ferrolb_telemetry::init_logging(&args.log_level, args.log_format)?;
    let agent = format!(
        "ferrolb-speaker/{} ({})",
        env!("CARGO_PKG_VERSION"),
        args.node_name
    );
    let client = ferrolb_telemetry::kube_client(args.kubeconfig.as_deref(), &agent).await?;
    info!(node = %args.node_name, l2 = args.enable_l2, bgp = args.enable_bgp, "starting");

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("ferrolb");
    metrics.register(&mut registry);
    ferrolb_telemetry::register_runtime_metrics(&mut registry);
    let ready = Readiness::default();
    ferrolb_telemetry::serve(
        args.metrics_addr,
        Arc::new(registry),
        ready.clone(),
        shutdown_rx,
    )
    .await?;

    let cluster = Arc::new(Mutex::new(Cluster::new(Scope {
        this_node: args.node_name.clone(),
        class: args.load_balancer_class.clone(),
        ignore_unclassed: args.ignore_unclassed,
    })));
    let changed = Arc::new(Notify::new());
    spawn_watches(&client, &args.namespace, &cluster, &changed);
    let refetch = Arc::new(Notify::new());
    tokio::spawn(refetch_slices(
        client.clone(),
        cluster.clone(),
        changed.clone(),
        refetch.clone(),
    ));

    let (live_tx, live_rx) = watch::channel(BTreeSet::from([args.node_name.clone()]));
    let status = StatusQueue::new();
    tokio::spawn(
        StatusWriter {
            client: client.clone(),
            namespace: args.namespace.clone(),
            node: args.node_name.clone(),
            l2: args.enable_l2,
            bgp: args.enable_bgp,
            live: live_rx,
            metrics: metrics.clone(),
        }
        .run(status.clone()),
    );
    let events = Arc::new(EventQueue::new(events::CAPACITY));
    let reporter = Reporter {
        controller: "ferrolb-speaker".into(),
        instance: Some(args.node_name.clone()),
    };
    tokio::spawn(events.clone().run(client.clone(), reporter, |event, e| {
        debug!(reason = %event.reason, error = %e, "publishing an Event failed");
    }));

    // No answer, no announcement before every kind has listed: a partial view would elect
    // this node for addresses whose endpoints it has not seen yet.
    let started = Instant::now();
    loop {
        let unsynced = cluster.lock().expect("cluster lock").unsynced();
        if unsynced.is_empty() {
            break;
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(5)) => {
                info!(waiting_for = ?unsynced, after = ?started.elapsed(), "waiting for the first list of every kind");
            }
        }
    }
    info!(after = ?started.elapsed(), "every watch has listed");
    // The first lists were the largest burst this process sees.
    ferrolb_telemetry::memory::release_free_memory();

    let settings = Settings {
        node: args.node_name.clone(),
        namespace: args.namespace.clone(),
        enable_l2: args.enable_l2,
        enable_bgp: args.enable_bgp,
        l2_handover: args.l2_handover_time,
        l2_preference_hold_down: args.l2_preference_hold_down,
    };
    let mut speaker = Speaker::new(settings, metrics.clone(), status, events);
    tokio::spawn(
        ConfigStateWriter {
            client: client.clone(),
            namespace: args.namespace.clone(),
            node: args.node_name.clone(),
            metrics: metrics.clone(),
        }
        .run(speaker.config_report()),
    );
    if args.enable_bgp {
        tokio::spawn(
            SessionStateWriter {
                client: client.clone(),
                namespace: args.namespace.clone(),
                node: args.node_name.clone(),
                metrics: metrics.clone(),
            }
            .run(speaker.session_report()),
        );
    }

    let mut gossip: Option<Gossip> = None;
    let mut gossip_live: Option<watch::Receiver<BTreeSet<String>>> = None;
    let mut gossip_states: Option<watch::Receiver<BTreeMap<String, Vec<u8>>>> = None;
    let mut gossip_rejoined: Option<watch::Receiver<u64>> = None;
    let mut last_host_read: Option<Instant> = None;
    // The host's interfaces are read again when the kernel says they changed (and every
    // SAFETY_INTERVAL); without the notifications, every REFRESH_INTERVAL as before.
    let mut host_changes = if args.enable_l2 {
        match ferrolb_speaker::l2::hostwatch::HostWatch::start() {
            Ok(w) => Some(w.changes()),
            Err(e) => {
                warn!(error = %e, every = ?ferrolb_speaker::l2::REFRESH_INTERVAL, "no netlink notifications of interface changes: the interfaces are read again periodically");
                None
            }
        }
    } else {
        None
    };
    let mut host_seen = 0u64;
    // A read put off by MIN_SPACING: when it is due.
    let mut host_due: Option<Instant> = None;
    let mut published_unable = BTreeSet::new();
    let mut last_trim = Instant::now();
    // Who is live for layer 2: joining, leaving members, the rejoin settle (membership::liveness).
    let mut liveness = Liveness::new(&args.node_name);
    // A gossip partition's tie is broken on the API server (membership::partition): the view
    // Lease, and where this speaker stands.
    let mut arbiter = Arbiter::new(args.node_name.clone());
    let mut view_lease: Option<ViewLease> = None;
    let mut written_seen = 0u64;
    let mut standing = Standing::Agreed;
    let mut standby = false;
    let mut arbiter_next: Option<Instant> = None;
    let mut changed_since_trim = 0usize;
    let mut states_changed = true;
    let mut secrets_seen = 0u64;
    let mut pace = ferrolb_speaker::shell::pace::Pace::new();
    let run = async {
        loop {
            if let Some(g) = &gossip {
                // A changed gossip Secret (a key rotation) reaches the running member.
                let model = cluster.lock().expect("cluster lock");
                if model.secrets_version() != secrets_seen {
                    secrets_seen = model.secrets_version();
                    match gossip_keys(&args, &model) {
                        Some(keys) => g.set_keys(keys),
                        None => {
                            warn!(secret = %args.gossip_secret, "the gossip Secret has no usable `secretkey` now; gossip goes on with the keys it has")
                        }
                    }
                }
            } else {
                let inputs = gossip_inputs(&args, &cluster.lock().expect("cluster lock"));
                if let Some((key, bind)) = inputs {
                    secrets_seen = cluster.lock().expect("cluster lock").secrets_version();
                    gossip = start_gossip(&args, key, bind).await;
                    if gossip.is_some() {
                        liveness.gossip_started(Instant::now());
                    }
                    gossip_live = gossip.as_ref().map(Gossip::live);
                    gossip_states = gossip.as_ref().map(Gossip::states);
                    gossip_rejoined = gossip.as_ref().map(Gossip::rejoined);
                    if gossip.is_some() && args.enable_l2 {
                        view_lease = Some(ViewLease::start(
                            client.clone(),
                            &args.namespace,
                            &args.node_name,
                        ));
                    }
                    states_changed = true;
                    cluster
                        .lock()
                        .expect("cluster lock")
                        .mark_speakers_changed();
                }
            }
            let t = Instant::now();
            pace.pass(t);
            let (live, synced) = {
                let mut model = cluster.lock().expect("cluster lock");
                // Seeds and the fallback live set change only with speaker Pods and Nodes.
                if model.speakers_changed() {
                    let known = kubernetes_live(&model, &args.node_name);
                    let alone = match &gossip {
                        Some(g) => {
                            let seeds = seeds(&model, &args);
                            let alone = seeds.is_empty();
                            g.set_seeds(seeds);
                            alone
                        }
                        None => false,
                    };
                    liveness.kubernetes(known, alone);
                }
                // Decoded again only when a member's state changed: it is one entry per node.
                if std::mem::take(&mut states_changed)
                    && let Some(rx) = &gossip_states
                {
                    let states = rx.borrow();
                    liveness.member_states(
                        states
                            .iter()
                            .map(|(node, s)| (node.as_str(), MemberState::decode(s))),
                    );
                }
                let gossip_view = gossip_live.as_ref().map(|rx| rx.borrow().clone());
                let rejoined = gossip.as_ref().map_or(0, |g| g.counters().rejoined);
                let noticed = liveness.observe(Instant::now(), gossip_view.as_ref(), rejoined);
                metrics.gossip_members.set(
                    gossip_view
                        .as_ref()
                        .map_or(liveness.live().len(), BTreeSet::len) as i64,
                );
                if noticed.rejoined {
                    info!(settle = ?REJOIN_SETTLE,
                        "the other speakers had declared this one dead (it stood still or was cut off) and it has rejoined: its layer-2 addresses are announced again once what happened meanwhile has arrived"
                    );
                }
                if let Some(members) = noticed.joined {
                    info!(members, "joined the other speakers");
                }
                let live = liveness.live().clone();
                let nobody = BTreeSet::new();
                let arbitrated;
                let l2_live = match &view_lease {
                    _ if !liveness.joined() => &nobody,
                    None => &live,
                    Some(lease) => {
                        let now = Instant::now();
                        arbiter.observe(now, lease.view.borrow().clone());
                        let (sequence, outcome) = lease.written.borrow().clone();
                        if sequence > written_seen {
                            written_seen = sequence;
                            if let Some(outcome) = outcome {
                                arbiter.written(now, outcome);
                            }
                        }
                        let known = liveness.known();
                        let d = arbiter.decide(now, std::time::SystemTime::now(), &live, &known);
                        if let Some(w) = d.write
                            && !lease.write(w)
                        {
                            arbiter.written(now, Written::Unreachable);
                        }
                        // Standby can end without a change of standing (a lifted fence's
                        // wait for the rest of the other side ending).
                        if d.standing != standing || d.standby != standby {
                            let left_fence = matches!(standing, Standing::Fenced { .. })
                                && !matches!(d.standing, Standing::Fenced { .. });
                            if d.standing != standing {
                                note_standing(&standing, &d.standing, &live, &known);
                            }
                            if d.standing == standing && standby && !d.standby {
                                info!(standing = ?d.standing, "the fence lifted a while ago and gossip still misses speakers: this side takes their layer-2 addresses over");
                            }
                            speaker.set_standby(d.standby, left_fence);
                            metrics
                                .l2_fenced
                                .set(i64::from(matches!(d.standing, Standing::Fenced { .. })));
                            standing = d.standing;
                            standby = d.standby;
                        }
                        arbiter_next = d.next;
                        arbitrated = d.l2_live;
                        &arbitrated
                    }
                };
                let (changes, every) = match &host_changes {
                    Some(rx) => (
                        *rx.borrow(),
                        ferrolb_speaker::l2::hostwatch::SAFETY_INTERVAL,
                    ),
                    None => (host_seen, ferrolb_speaker::l2::REFRESH_INTERVAL),
                };
                let host = match last_host_read {
                    Some(t) if changes == host_seen && t.elapsed() < every => None,
                    Some(t) if t.elapsed() < ferrolb_speaker::l2::hostwatch::MIN_SPACING => {
                        host_due = Some(t + ferrolb_speaker::l2::hostwatch::MIN_SPACING);
                        None
                    }
                    _ => {
                        // The count is taken before the read: a change during it reads again.
                        host_due = None;
                        host_seen = changes;
                        last_host_read = Some(Instant::now());
                        Some(ferrolb_speaker::l2::host::HostRead::read())
                    }
                };
                let synced = speaker.sync(&mut model, l2_live, liveness.unable(), host);
                if model.refetch_pending() {
                    refetch.notify_one();
                }
                (live, synced)
            };
            if synced.decided > 0 || synced.services > 0 {
                debug!(decided = synced.decided, services = synced.services, took = ?t.elapsed(), "synced");
            }
            if let Some(g) = &gossip {
                if *speaker.unable_here() != published_unable {
                    published_unable = speaker.unable_here().clone();
                    let state = MemberState {
                        unable: published_unable.clone(),
                        leaving: false,
                    };
                    if let Err(e) = g.set_local_state(state.encode()) {
                        warn!(error = %e, "cannot publish the addresses this node cannot answer for");
                    }
                }
                ferrolb_speaker::shell::metrics::advance(
                    &metrics.gossip_auth_failures,
                    g.counters().auth_failures_total(),
                );
            }
            if liveness.take_reannounce(Instant::now()) {
                info!("announcing this node's layer-2 addresses again after rejoining");
                speaker.announce_again();
                speaker.rewrite_statuses(&cluster.lock().expect("cluster lock"));
            }
            speaker.tick();
            ready.set(true);
            // After a burst only (a trim walks the heap: not worth it while idle).
            changed_since_trim += synced.services;
            if changed_since_trim >= TRIM_AFTER_CHANGES
                && last_trim.elapsed() > Duration::from_secs(60)
            {
                ferrolb_telemetry::memory::release_free_memory();
                last_trim = Instant::now();
                changed_since_trim = 0;
            }
            let _ = live_tx.send_if_modified(|v| {
                let changed = *v != live;
                if changed {
                    // Who came and went, not the whole set: it is one entry per node.
                    let came: Vec<&String> = live.difference(v).take(8).collect();
                    let went: Vec<&String> = v.difference(&live).take(8).collect();
                    info!(live = live.len(), ?came, ?went, "live speakers changed");
                }
                *v = live.clone();
                changed
            });
            let lease_changed = async {
                match view_lease.as_mut() {
                    Some(lease) => {
                        tokio::select! {
                            _ = lease.view.changed() => {}
                            _ = lease.written.changed() => {}
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            let gossip_changed = async {
                match (
                    gossip_live.as_mut(),
                    gossip_states.as_mut(),
                    gossip_rejoined.as_mut(),
                ) {
                    (Some(live), Some(states), Some(rejoined)) => {
                        tokio::select! {
                            _ = live.changed() => false,
                            _ = states.changed() => true,
                            _ = rejoined.changed() => false,
                        }
                    }
                    _ => std::future::pending().await,
                }
            };
            // A layer-2 handover ending (this node excluded) or a preference hold-down ending is
            // the next deadline, when sooner.
            let refresh = tokio::time::Instant::now() + ferrolb_speaker::l2::REFRESH_INTERVAL;
            let host_changed = async {
                match host_changes.as_mut() {
                    Some(rx) => rx.changed().await.is_err(),
                    None => std::future::pending().await,
                }
            };
            let mut host_watch_ended = false;
            let wake = speaker
                .next_deadline()
                .into_iter()
                .chain(liveness.next_deadline())
                .chain(arbiter_next)
                .chain(host_due)
                .map(tokio::time::Instant::from_std)
                .fold(refresh, tokio::time::Instant::min);
            tokio::select! {
                // At once after a quiet spell; a burst's later changes go in one pass a window
                // after the last.
                _ = changed.notified() => if let Some(at) = pace.changed(Instant::now()) {
                    tokio::time::sleep_until(at.into()).await;
                },
                states = gossip_changed => states_changed |= states,
                _ = lease_changed => {}
                ended = host_changed => host_watch_ended = ended,
                _ = tokio::time::sleep_until(wake) => {}
            }
            if host_watch_ended {
                host_changes = None;
            }
        }
    };
    tokio::select! {
        _ = run => {}
        _ = ferrolb_telemetry::shutdown_signal() => info!(drain = ?args.bgp_drain_time, handover = ?args.l2_handover_time, "shutting down: handing layer-2 addresses over and draining BGP routes, then withdrawing announcements"),
    }
    if let Some(g) = gossip.as_ref().filter(|_| !args.l2_handover_time.is_zero()) {
        let state = MemberState {
            unable: published_unable.clone(),
            leaving: true,
        };
        if let Err(e) = g.set_local_state(state.encode()) {
            warn!(error = %e, "cannot tell the other speakers this one is leaving");
        }
    }
    speaker
        .shutdown(args.bgp_drain_time, args.l2_handover_time)
        .await;
    let _ = shutdown_tx.send(true);
    Ok(())
}

/// One watch task per kind, each feeding the model and waking the sync loop.
fn spawn_watches(
    client: &kube::Client,
    ns: &str,
    cluster: &Arc<Mutex<Cluster>>,
    changed: &Arc<Notify>,
) {
    // Only LoadBalancer Services: the API server filters the rest (most of a cluster) out.
    // The large kinds are listed in pages of 500 from etcd: a list served from the watch cache
    // (`resourceVersion=0`) ignores the page size and would hold tens of thousands of
    // EndpointSlices in one response, leaving the allocator at that peak. (A streaming list,
    // `sendInitialEvents`, would be better still, but Kubernetes 1.33 refuses it by default.)
    let lb = watcher::Config::default().fields("spec.type=LoadBalancer");
    let paged = watcher::Config::default;
    // The install namespace's kinds are few: served from the watch cache.
    let all = || watcher::Config::default().any_semantic();
    let speaker_pods = all().labels(&format!(
        "{}={}",
        names::SPEAKER_POD_LABEL,
        names::SPEAKER_POD_LABEL_VALUE
    ));
    let c = client.clone();
    // EndpointSlices are listed once the LoadBalancer Services have been: the endpoints of a
    // slice are kept only when its Service is known to be ours, and a slice seen before its
    // Service costs a list of that Service's slices later.
    let (services_listed_tx, services_listed) = watch::channel(false);
    spawn_watch_then(
        Api::all(c.clone()),
        lb,
        cluster,
        changed,
        Cluster::service,
        None,
        Some(services_listed_tx),
    );
    spawn_watch_then(
        Api::all(c.clone()),
        paged(),
        cluster,
        changed,
        Cluster::slice,
        Some(services_listed),
        None,
    );
    spawn_watch(
        Api::all(c.clone()),
        paged(),
        cluster,
        changed,
        Cluster::node,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        speaker_pods,
        cluster,
        changed,
        Cluster::speaker_pod,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::pool,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::l2_advertisement,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::bgp_advertisement,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::peer,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::community,
    );
    spawn_watch(
        Api::namespaced(c.clone(), ns),
        all(),
        cluster,
        changed,
        Cluster::bfd_profile,
    );
    spawn_watch(
        Api::namespaced(c, ns),
        all(),
        cluster,
        changed,
        Cluster::secret,
    );
}

/// Watches one kind: every event goes to the model (converted and stripped there, so the full
/// object is dropped at once) and wakes the sync loop.
fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    cluster: &Arc<Mutex<Cluster>>,
    changed: &Arc<Notify>,
    apply: fn(&mut Cluster, Update<K>),
) where
    K: ferrolb_telemetry::Watched,
{
    spawn_watch_then(api, config, cluster, changed, apply, None, None);
}

/// [`spawn_watch`], starting once `after` says `true` and saying `true` on `listed` once the
/// first list is complete.
fn spawn_watch_then<K>(
    api: Api<K>,
    config: watcher::Config,
    cluster: &Arc<Mutex<Cluster>>,
    changed: &Arc<Notify>,
    apply: fn(&mut Cluster, Update<K>),
    after: Option<watch::Receiver<bool>>,
    listed: Option<watch::Sender<bool>>,
) where
    K: ferrolb_telemetry::Watched,
{
    let (cluster, changed) = (cluster.clone(), changed.clone());
    tokio::spawn(async move {
        if let Some(mut after) = after {
            let _ = after.wait_for(|done| *done).await;
        }
        let stream = watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let update = match item {
                Ok(watcher::Event::Init) => Update::Restart,
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => Update::Apply(o),
                Ok(watcher::Event::Delete(o)) => Update::Delete(o),
                Ok(watcher::Event::InitDone) => Update::Synced,
                Err(e) => {
                    warn!(error = %e, kind = %K::kind(&()), "watch error; retrying with back-off");
                    continue;
                }
            };
            let first_list_done = matches!(update, Update::Synced);
            apply(&mut cluster.lock().expect("cluster lock"), update);
            changed.notify_one();
            if first_list_done && let Some(listed) = &listed {
                listed.send_replace(true);
            }
        }
    });
}

/// Lists the slices of Services the model asks for ([`Cluster::take_refetch`]): a Service that
/// became ours after slices of it were seen. A few lists at a time; a failed one is asked for
/// again after a pause.
async fn refetch_slices(
    client: kube::Client,
    cluster: Arc<Mutex<Cluster>>,
    changed: Arc<Notify>,
    wake: Arc<Notify>,
) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    loop {
        wake.notified().await;
        let keys = cluster.lock().expect("cluster lock").take_refetch();
        let failed: Vec<_> = futures::stream::iter(keys)
            .map(|key| {
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &key.namespace);
                let lp = kube::api::ListParams::default()
                    .labels(&format!("{}={}", names::SERVICE_NAME_LABEL, key.name));
                async move { (api.list(&lp).await, key) }
            })
            .buffer_unordered(4)
            .filter_map(|(result, key)| {
                let out = match result {
                    Ok(list) => {
                        let mut model = cluster.lock().expect("cluster lock");
                        model.refetched(&key, list.items);
                        changed.notify_one();
                        None
                    }
                    Err(e) => {
                        warn!(service = %key, error = %e, "listing a Service's EndpointSlices failed; retrying");
                        Some(key)
                    }
                };
                std::future::ready(out)
            })
            .collect()
            .await;
        if !failed.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut model = cluster.lock().expect("cluster lock");
            for key in failed {
                model.request_refetch(key);
            }
            wake.notify_one();
        }
    }
}

/// The gossip keys and address, once the key Secret and this node's speaker Pod address are
/// known.
fn gossip_inputs(args: &Args, cluster: &Cluster) -> Option<(KeyRing, SocketAddr)> {
    let keys = gossip_keys(args, cluster)?;
    let my_ip = cluster
        .speaker_pods()
        .find(|p| p.node == args.node_name)
        .and_then(|p| p.ip)?;
    Some((keys, SocketAddr::new(my_ip, args.gossip_port)))
}

/// The gossip Secret's keys: `secretkey` to send with, and `previouskey` (optional) also
/// accepted, for a rotation.
fn gossip_keys(args: &Args, cluster: &Cluster) -> Option<KeyRing> {
    let secrets = cluster.secret_objects();
    let key = |name| secret_bytes(&secrets, &args.gossip_secret, name).and_then(GossipKey::new);
    Some(KeyRing::new(key("secretkey")?, key("previouskey")))
}

/// Starts gossip; until it runs (or if it cannot) liveness comes from the Kubernetes view.
async fn start_gossip(args: &Args, key: KeyRing, bind: SocketAddr) -> Option<Gossip> {
    match Gossip::start(
        args.node_name.clone(),
        bind,
        bind,
        key,
        MembershipConfig::default(),
    )
    .await
    {
        Ok(g) => {
            info!(%bind, "gossip started");
            Some(g)
        }
        Err(e) => {
            warn!(error = %e, "gossip cannot run; using the Kubernetes view of live speakers");
            None
        }
    }
}

fn seeds(cluster: &Cluster, args: &Args) -> Vec<(String, SocketAddr)> {
    let pods: Vec<_> = cluster
        .speaker_pods()
        .filter(|p| p.node != args.node_name)
        .cloned()
        .collect();
    ferrolb_speaker::membership::seeds::seeds(&pods, args.gossip_port)
}

/// Logs where this speaker now stands in a gossip partition (membership::partition).
fn note_standing(
    before: &Standing,
    now: &Standing,
    live: &BTreeSet<String>,
    known: &BTreeSet<String>,
) {
    let missing: Vec<&String> = known.difference(live).take(8).collect();
    match now {
        Standing::Agreed => info!(
            ?before,
            "gossip sees every speaker Kubernetes counts as up again"
        ),
        Standing::Majority => info!(
            ?missing,
            "gossip misses speakers Kubernetes counts as up; this side is the majority and takes their layer-2 addresses over"
        ),
        Standing::Waiting => info!(
            ?missing,
            "gossip misses speakers Kubernetes counts as up and this side is a minority: it stands by (answers only what the other side cannot) and takes nothing over until the API server has its view"
        ),
        Standing::Confirmed => info!(
            ?missing,
            "this minority's view is on record at the API server: the missing speakers are gone, their layer-2 addresses are taken over"
        ),
        Standing::Unarbitrated => warn!(
            ?missing,
            "gossip misses speakers and the API server cannot be reached to break the tie: acting on gossip alone (both sides of a partition may answer)"
        ),
        Standing::Fenced { by } => {
            warn!(%by, ?missing, "another side of a gossip partition holds the layer-2 addresses (its view on the API server leaves this speaker out): keeping only those it cannot hold until gossip heals")
        }
    }
}

/// The live speakers as Kubernetes sees them (when gossip cannot run); this node always counts.
fn kubernetes_live(cluster: &Cluster, this_node: &str) -> BTreeSet<String> {
    let mut live = ferrolb_speaker::membership::seeds::kubernetes_live(
        cluster.speaker_pods(),
        &cluster.ready_nodes(),
    );
    live.insert(this_node.to_string());
    live
}
