//! `ferrolb-speaker`: runs on every node (host network) and attracts traffic for Service
//! addresses: ARP/NDP answers from one owner per address, BGP announcements from every
//! eligible node.
//!
//! ```text
//!  main ─┬─ one watch task per kind (LoadBalancer Services, EndpointSlices, Nodes, speaker Pods,
//!        │   ferrolb.io kinds, Secrets) ─► Cluster (stripped, indexed) ─► changed ─┐
//!        ├─ refetch task: the slices of a Service that became ours, listed ───────┤
//!        ├─ gossip thread (UDP, HMAC) ─► live set, unable addresses, leavers ─────┤
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
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use ferrolb_api::names;
use ferrolb_speaker::cluster::peers::secret_bytes;
use ferrolb_speaker::cluster::{Cluster, Scope, Update};
use ferrolb_speaker::l2::host::HostRead;
use ferrolb_speaker::membership::liveness::REJOIN_SETTLE;
use ferrolb_speaker::membership::partition::{Arbiter, Standing, Written};
use ferrolb_speaker::membership::view_lease::ViewLease;
use ferrolb_speaker::membership::{
    Gossip, GossipKey, KeyRing, Liveness, MemberState, MembershipConfig,
};
use ferrolb_speaker::shell::metrics::Metrics;
use ferrolb_speaker::shell::pace::Pace;
use ferrolb_speaker::shell::sessions::SessionStateWriter;
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
/// While a burst's writes go on, free memory is trimmed at most this often.
const TRIM_INTERVAL: Duration = Duration::from_secs(60);

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
    ferrolb_api::duration::parse_duration(s)
        .ok_or_else(|| format!("`{s}` is not a duration such as 5s"))
}

fn main() -> anyhow::Result<()> {
    // Before any thread exists: glibc gives each new thread an arena of its own otherwise.
    ferrolb_telemetry::memory::tune_allocator();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(speaker_main())
}

async fn speaker_main() -> anyhow::Result<()> {
    // For the life of the process: the sync loop, a task of its own, borrows them.
    let args: &'static Args = Box::leak(Box::new(Args::parse()));
    ferrolb_telemetry::init_logging(&args.log_level, args.log_format)?;
    let agent = format!(
        "ferrolb-speaker/{} ({})",
        env!("CARGO_PKG_VERSION"),
        args.node_name
    );
    let client = ferrolb_telemetry::kube_client(args.kubeconfig.as_deref(), &agent).await?;
    info!(node = %args.node_name, l2 = args.enable_l2, bgp = args.enable_bgp, "starting");

    let metrics = Metrics::default();
    let (shutdown_tx, ready) =
        ferrolb_telemetry::serve_process(args.metrics_addr, |r| metrics.register(r)).await?;

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
    let (status, events) = spawn_status_and_events(args, &client, live_rx, &metrics);
    wait_for_first_lists(&cluster, &changed).await;

    let settings = Settings {
        node: args.node_name.clone(),
        namespace: args.namespace.clone(),
        enable_l2: args.enable_l2,
        enable_bgp: args.enable_bgp,
        l2_handover: args.l2_handover_time,
        l2_preference_hold_down: args.l2_preference_hold_down,
    };
    let speaker = Speaker::new(settings, metrics.clone(), status, events);
    spawn_node_reports(args, &client, &metrics, &speaker);
    let mut sync = SyncLoop {
        args,
        client,
        cluster,
        changed,
        refetch,
        metrics,
        ready,
        live_tx,
        speaker,
        gossip: None,
        host: HostReads::start(args.enable_l2),
        liveness: Liveness::new(&args.node_name),
        partition: Partition::new(args.node_name.clone()),
        published_unable: BTreeSet::new(),
        states_changed: true,
        pace: Pace::new(),
        trim: Trim::new(Instant::now()),
    };
    // A task on the runtime, not the future `block_on` polls: the watch task that wakes it
    // runs on a worker, and a task it wakes there runs next on the same thread instead of
    // waking the main thread (a futex wake and a switch, between every change and its
    // announcement).
    // A panic in it ends the process with an error, as it did when `block_on` polled it: a
    // speaker whose loop died must not stay up looking healthy.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut sync_task = tokio::spawn(async move {
        tokio::select! {
            _ = sync.run() => {}
            _ = stopped => {}
        }
        sync
    });
    let mut sync = tokio::select! {
        ended = &mut sync_task => ended?,
        _ = ferrolb_telemetry::shutdown_signal() => {
            info!(drain = ?args.bgp_drain_time, handover = ?args.l2_handover_time, "shutting down: handing layer-2 addresses over and draining BGP routes, then withdrawing announcements");
            let _ = stop.send(());
            sync_task.await?
        }
    };
    sync.leave();
    sync.speaker
        .shutdown(args.bgp_drain_time, args.l2_handover_time)
        .await;
    let _ = shutdown_tx.send(true);
    Ok(())
}

/// The tasks that write ServiceL2Status / ServiceBGPStatus and Events; returns their queues.
fn spawn_status_and_events(
    args: &Args,
    client: &kube::Client,
    live: watch::Receiver<BTreeSet<String>>,
    metrics: &Metrics,
) -> (Arc<StatusQueue>, Arc<EventQueue>) {
    let status = StatusQueue::new();
    tokio::spawn(
        StatusWriter {
            client: client.clone(),
            namespace: args.namespace.clone(),
            node: args.node_name.clone(),
            l2: args.enable_l2,
            bgp: args.enable_bgp,
            live,
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
    (status, events)
}

/// The tasks that write this node's ConfigurationState and (BGP mode) BGPSessionState objects.
fn spawn_node_reports(args: &Args, client: &kube::Client, metrics: &Metrics, speaker: &Speaker) {
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
}

/// Returns once every watched kind has listed: before that, no answer and no announcement (a
/// partial view would elect this node for addresses whose endpoints it has not seen yet).
async fn wait_for_first_lists(cluster: &Mutex<Cluster>, changed: &Notify) {
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
}

/// The sync loop: each pass keeps gossip current, decides who is live, syncs the speaker with
/// the cluster model, and publishes what changed; then it waits for the next cause (a change,
/// a gossip or view-Lease event, an interface change, or the next deadline of any part).
struct SyncLoop<'a> {
    args: &'a Args,
    client: kube::Client,
    cluster: Arc<Mutex<Cluster>>,
    /// Woken by every watch task when the model changed.
    changed: Arc<Notify>,
    /// Wakes the refetch task (a Service whose slices must be listed again).
    refetch: Arc<Notify>,
    metrics: Metrics,
    ready: Readiness,
    /// The live set, for the status task's garbage collection.
    live_tx: watch::Sender<BTreeSet<String>>,
    speaker: Speaker,
    /// Gossip, once its Secret and this node's speaker Pod address are known.
    gossip: Option<GossipLink>,
    host: HostReads,
    /// Who is live for layer 2: joining, leaving members, the rejoin settle.
    liveness: Liveness,
    partition: Partition,
    /// The addresses this node last told the others it cannot answer for.
    published_unable: BTreeSet<IpAddr>,
    /// A member's gossip state changed since the last pass.
    states_changed: bool,
    pace: Pace,
    trim: Trim,
}

/// Gossip as the sync loop reads it.
struct GossipLink {
    gossip: Gossip,
    live: watch::Receiver<BTreeSet<String>>,
    states: watch::Receiver<BTreeMap<String, Vec<u8>>>,
    rejoined: watch::Receiver<u64>,
    /// The Secrets' version its keys were last taken from.
    secrets_seen: u64,
}

impl SyncLoop<'_> {
    /// Passes until the process is told to stop.
    async fn run(&mut self) {
        loop {
            self.keep_gossip_current().await;
            self.pass();
            self.wait().await;
        }
    }

    /// Starts gossip once its inputs are known (until then, or if it cannot run, liveness comes
    /// from the Kubernetes view); hands a rotated key to the running member.
    async fn keep_gossip_current(&mut self) {
        let args = self.args;
        if let Some(link) = &mut self.gossip {
            let model = self.cluster.lock().expect("cluster lock");
            if model.secrets_version() != link.secrets_seen {
                link.secrets_seen = model.secrets_version();
                match gossip_keys(args, &model) {
                    Some(keys) => link.gossip.set_keys(keys),
                    None => {
                        warn!(secret = %args.gossip_secret, "the gossip Secret has no usable `secretkey` now; gossip goes on with the keys it has")
                    }
                }
            }
            return;
        }
        let (inputs, secrets_seen) = {
            let model = self.cluster.lock().expect("cluster lock");
            (gossip_inputs(args, &model), model.secrets_version())
        };
        let Some((key, bind)) = inputs else {
            return;
        };
        if let Some(gossip) = start_gossip(args, key, bind).await {
            self.liveness.gossip_started(Instant::now());
            if args.enable_l2 {
                self.partition.lease = Some(ViewLease::start(
                    self.client.clone(),
                    &args.namespace,
                    &args.node_name,
                ));
            }
            self.gossip = Some(GossipLink {
                live: gossip.live(),
                states: gossip.states(),
                rejoined: gossip.rejoined(),
                gossip,
                secrets_seen,
            });
        }
        self.states_changed = true;
        self.cluster
            .lock()
            .expect("cluster lock")
            .mark_speakers_changed();
    }

    /// One pass: who is live, the layer-2 live set, the host if due, `Speaker::sync`.
    fn pass(&mut self) {
        let t = Instant::now();
        self.pace.pass(t);
        let cluster = self.cluster.clone();
        let mut model = cluster.lock().expect("cluster lock");
        let live = self.observe_liveness(&mut model);
        let joined = self.liveness.joined();
        let arbitrated = if joined {
            self.partition
                .arbitrate(&live, &self.liveness, &mut self.speaker, &self.metrics)
        } else {
            None
        };
        let nobody = BTreeSet::new();
        let l2_live = match (joined, &arbitrated) {
            (false, _) => &nobody,
            (true, Some(arbitrated)) => arbitrated,
            (true, None) => &live,
        };
        let host = self.host.read_if_due();
        let synced = self
            .speaker
            .sync(&mut model, l2_live, self.liveness.unable(), host);
        if model.refetch_pending() {
            self.refetch.notify_one();
        }
        drop(model);
        if synced.decided > 0 || synced.services > 0 {
            debug!(decided = synced.decided, services = synced.services, took = ?t.elapsed(), "synced");
        }
        self.publish(live, synced.services);
    }

    /// Feeds the Kubernetes view (when speakers or Nodes changed), the members' states (when
    /// one changed) and gossip's view to the liveness core; returns the live set.
    fn observe_liveness(&mut self, model: &mut Cluster) -> BTreeSet<String> {
        // Seeds and the fallback live set change only with speaker Pods and Nodes.
        if model.speakers_changed() {
            let known = kubernetes_live(model, &self.args.node_name);
            let alone = match &self.gossip {
                Some(link) => {
                    let seeds = seeds(model, self.args);
                    let alone = seeds.is_empty();
                    link.gossip.set_seeds(seeds);
                    alone
                }
                None => false,
            };
            self.liveness.kubernetes(known, alone);
        }
        // Decoded again only when a member's state changed: it is one entry per node.
        if std::mem::take(&mut self.states_changed)
            && let Some(link) = &self.gossip
        {
            let states = link.states.borrow();
            self.liveness.member_states(
                states
                    .iter()
                    .map(|(node, s)| (node.as_str(), MemberState::decode(s))),
            );
        }
        let gossip_view = self.gossip.as_ref().map(|l| l.live.borrow().clone());
        let rejoined = self
            .gossip
            .as_ref()
            .map_or(0, |l| l.gossip.counters().rejoined);
        let noticed = self
            .liveness
            .observe(Instant::now(), gossip_view.as_ref(), rejoined);
        self.metrics.gossip_members.set(
            gossip_view
                .as_ref()
                .map_or(self.liveness.live().len(), BTreeSet::len) as i64,
        );
        if noticed.rejoined {
            info!(settle = ?REJOIN_SETTLE,
                "the other speakers had declared this one dead (it stood still or was cut off) and it has rejoined: its layer-2 addresses are announced again once what happened meanwhile has arrived"
            );
        }
        if let Some(members) = noticed.joined {
            info!(members, "joined the other speakers");
        }
        self.liveness.live().clone()
    }

    /// After a pass: this node's gossip state, the re-announcement after a rejoin, timers,
    /// readiness, a memory trim after a burst, and the live set for the status task.
    fn publish(&mut self, live: BTreeSet<String>, services: usize) {
        if let Some(link) = &self.gossip {
            if *self.speaker.unable_here() != self.published_unable {
                self.published_unable = self.speaker.unable_here().clone();
                let state = MemberState {
                    unable: self.published_unable.clone(),
                    leaving: false,
                };
                if let Err(e) = link.gossip.set_local_state(state.encode()) {
                    warn!(error = %e, "cannot publish the addresses this node cannot answer for");
                }
            }
            let counters = link.gossip.counters();
            ferrolb_speaker::shell::metrics::advance(
                &self.metrics.gossip_auth_failures,
                counters.auth_failures_total(),
            );
            ferrolb_speaker::shell::metrics::advance(
                &self.metrics.gossip_stale_suspicions,
                counters.stale_suspicions,
            );
        }
        if self.liveness.take_reannounce(Instant::now()) {
            info!("announcing this node's layer-2 addresses again after rejoining");
            self.speaker.announce_again();
            self.speaker
                .rewrite_statuses(&self.cluster.lock().expect("cluster lock"));
        }
        self.speaker.tick();
        self.ready.set(true);
        if self
            .trim
            .after(Instant::now(), services, self.speaker.writes_drained())
        {
            // glibc keeps freed memory (a burst's decoded objects, status payloads, Events) and
            // gives the pages back only when asked (`malloc_trim`; a no-op on other C libraries).
            ferrolb_telemetry::memory::release_free_memory();
        }
        let _ = self.live_tx.send_if_modified(|v| {
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
    }

    /// Waits for the next cause of a pass.
    async fn wait(&mut self) {
        let gossip_changed = async {
            match self.gossip.as_mut() {
                Some(link) => {
                    tokio::select! {
                        _ = link.live.changed() => false,
                        _ = link.states.changed() => true,
                        _ = link.rejoined.changed() => false,
                    }
                }
                None => std::future::pending().await,
            }
        };
        // A layer-2 handover ending (this node excluded), a preference hold-down ending, the
        // partition's next step or a put-off read of the host is the next deadline, when sooner.
        let refresh = tokio::time::Instant::now() + ferrolb_speaker::l2::REFRESH_INTERVAL;
        let wake = self
            .speaker
            .next_deadline()
            .into_iter()
            .chain(self.liveness.next_deadline())
            .chain(self.partition.next)
            .chain(self.host.due)
            .map(tokio::time::Instant::from_std)
            .fold(refresh, tokio::time::Instant::min);
        tokio::select! {
            // At once after a quiet spell; a burst's later changes go in one pass a window
            // after the last.
            _ = self.changed.notified() => if let Some(at) = self.pace.changed(Instant::now()) {
                tokio::time::sleep_until(at.into()).await;
            },
            states = gossip_changed => self.states_changed |= states,
            _ = self.partition.changed() => {}
            _ = self.host.changed() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
    }

    /// Tells the other speakers this one is leaving, so they take its layer-2 addresses over
    /// while it still answers (`--l2-handover-time`).
    fn leave(&self) {
        let Some(link) = &self.gossip else {
            return;
        };
        if self.args.l2_handover_time.is_zero() {
            return;
        }
        let state = MemberState {
            unable: self.published_unable.clone(),
            leaving: true,
        };
        if let Err(e) = link.gossip.set_local_state(state.encode()) {
            warn!(error = %e, "cannot tell the other speakers this one is leaving");
        }
    }
}

/// When the host's interfaces are read again: when the kernel says they changed (and every
/// SAFETY_INTERVAL), at most once per MIN_SPACING; without the kernel's notifications, every
/// REFRESH_INTERVAL.
struct HostReads {
    /// The kernel's count of interface and address changes; `None` without notifications.
    changes: Option<watch::Receiver<u64>>,
    /// The count at the last read.
    seen: u64,
    last: Option<Instant>,
    /// A read put off by MIN_SPACING: when it is due.
    due: Option<Instant>,
}

impl HostReads {
    fn start(enable_l2: bool) -> Self {
        let changes = if enable_l2 {
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
        Self {
            changes,
            seen: 0,
            last: None,
            due: None,
        }
    }

    /// The host, read now if a read is due.
    fn read_if_due(&mut self) -> Option<HostRead> {
        use ferrolb_speaker::l2::hostwatch::{MIN_SPACING, SAFETY_INTERVAL};
        let (changes, every) = match &self.changes {
            Some(rx) => (*rx.borrow(), SAFETY_INTERVAL),
            None => (self.seen, ferrolb_speaker::l2::REFRESH_INTERVAL),
        };
        match self.last {
            Some(t) if changes == self.seen && t.elapsed() < every => None,
            Some(t) if t.elapsed() < MIN_SPACING => {
                self.due = Some(t + MIN_SPACING);
                None
            }
            _ => {
                // The count is taken before the read: a change during it reads again.
                self.due = None;
                self.seen = changes;
                self.last = Some(Instant::now());
                Some(HostRead::read())
            }
        }
    }

    /// Returns when the kernel reports a change; when its notifications end, the host is read
    /// periodically from then on.
    async fn changed(&mut self) {
        match self.changes.as_mut() {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    self.changes = None;
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// A gossip partition's tie, broken on the API server (membership::partition): the view
/// Lease, and where this speaker stands.
struct Partition {
    arbiter: Arbiter,
    /// Runs once gossip runs, in layer-2 mode.
    lease: Option<ViewLease>,
    /// The sequence number of the last Lease write whose outcome the arbiter has.
    written_seen: u64,
    standing: Standing,
    standby: bool,
    /// When the arbiter wants to decide again.
    next: Option<Instant>,
}

impl Partition {
    fn new(node: String) -> Self {
        Self {
            arbiter: Arbiter::new(node),
            lease: None,
            written_seen: 0,
            standing: Standing::Agreed,
            standby: false,
            next: None,
        }
    }

    /// The live set for layer 2 as the arbiter decides it, with the standby it implies set on
    /// the speaker; `None` while no view Lease runs (gossip's live set holds).
    fn arbitrate(
        &mut self,
        live: &BTreeSet<String>,
        liveness: &Liveness,
        speaker: &mut Speaker,
        metrics: &Metrics,
    ) -> Option<BTreeSet<String>> {
        let lease = self.lease.as_ref()?;
        let now = Instant::now();
        self.arbiter.observe(now, lease.view.borrow().clone());
        let (sequence, outcome) = lease.written.borrow().clone();
        if sequence > self.written_seen {
            self.written_seen = sequence;
            if let Some(outcome) = outcome {
                self.arbiter.written(now, outcome);
            }
        }
        let known = liveness.known();
        let d = self
            .arbiter
            .decide(now, std::time::SystemTime::now(), live, &known);
        if let Some(w) = d.write
            && !lease.write(w)
        {
            self.arbiter.written(now, Written::Unreachable);
        }
        // Standby can end without a change of standing (a lifted fence's wait for the rest of
        // the other side ending).
        if d.standing != self.standing || d.standby != self.standby {
            let left_fence = matches!(self.standing, Standing::Fenced { .. })
                && !matches!(d.standing, Standing::Fenced { .. });
            if d.standing != self.standing {
                note_standing(&self.standing, &d.standing, live, &known);
            }
            if d.standing == self.standing && self.standby && !d.standby {
                info!(standing = ?d.standing, "the fence lifted a while ago and gossip still misses speakers: this side takes their layer-2 addresses over");
            }
            speaker.set_standby(d.standby, left_fence);
            metrics
                .l2_fenced
                .set(i64::from(matches!(d.standing, Standing::Fenced { .. })));
            self.standing = d.standing;
            self.standby = d.standby;
        }
        self.next = d.next;
        Some(d.l2_live)
    }

    /// Returns when the view Lease or the outcome of a write to it changed.
    async fn changed(&mut self) {
        match self.lease.as_mut() {
            Some(lease) => {
                tokio::select! {
                    _ = lease.view.changed() => {}
                    _ = lease.written.changed() => {}
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// When to give free memory back to the system: after a burst only (a trim walks the heap: not
/// worth it while idle).
///
/// A burst is [`TRIM_AFTER_CHANGES`] Services changed or more (the first pass is one). While
/// its status objects and Events are still being written, memory is trimmed at most every
/// [`TRIM_INTERVAL`]; once both queues have drained it is trimmed once more, at once, so that
/// what the last writes freed is given back too (at 10,000 Services the writes take a minute
/// or more and free several MiB as they end; a trim before they ended left that memory held).
struct Trim {
    last: Instant,
    changed_since: usize,
}

impl Trim {
    fn new(now: Instant) -> Self {
        Self {
            last: now,
            changed_since: 0,
        }
    }

    /// Counts the Services a pass changed; says whether to trim now. `drained`: no status
    /// object or Event waits or is being written.
    fn after(&mut self, now: Instant, services: usize, drained: bool) -> bool {
        self.changed_since += services;
        if self.changed_since < TRIM_AFTER_CHANGES {
            return false;
        }
        if drained {
            // The burst is over.
            self.changed_since = 0;
        } else if now.duration_since(self.last) <= TRIM_INTERVAL {
            return false;
        }
        self.last = now;
        true
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_trimmed_once_its_writes_have_drained_and_at_most_once_a_minute_before() {
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut trim = Trim::new(start);
        assert!(!trim.after(at(1), 999, true), "not a burst");
        assert!(
            !trim.after(at(2), 10_000, false),
            "writes go on, a minute has not passed"
        );
        assert!(trim.after(at(62), 0, false), "a minute into the burst");
        assert!(!trim.after(at(63), 0, false));
        assert!(trim.after(at(64), 0, true), "drained: at once");
        assert!(!trim.after(at(66), 0, true), "the burst was trimmed");
        assert!(
            trim.after(at(67), 2_000, true),
            "a new burst already written"
        );
    }
}
