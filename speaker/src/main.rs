//! `ferrolb-speaker`: runs on every node (host network) and attracts traffic for Service
//! addresses: ARP/NDP answers from one owner per address, BGP announcements from every
//! eligible node.
//!
//! ```text
//!  main ─┬─ watchers (Services, EndpointSlices, Nodes, speaker Pods, ferrolb.io kinds, Secrets)
//!        │      └─► changed ─┐
//!        ├─ gossip (UDP, HMAC) ─► live set ─┤
//!        ├─ telemetry::serve (/metrics /healthz /readyz)
//!        └─ loop: on change (debounced) or every 5 s ─► Speaker::sync
//! ```

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Parser};
use ferrolb_api::names;
use ferrolb_api::v1beta1::{BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement};
use ferrolb_speaker::membership::{Gossip, GossipKey, MembershipConfig};
use ferrolb_speaker::shell::metrics::Metrics;
use ferrolb_speaker::shell::snapshot::{ClusterView, live_from_kubernetes, secret_bytes};
use ferrolb_speaker::shell::{Settings, Speaker};
use ferrolb_telemetry::{LogFormat, Readiness};
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource};
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

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
}

/// The watch caches the speaker reads.
struct Caches {
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    pools: Store<IPAddressPool>,
    l2: Store<L2Advertisement>,
    bgp: Store<BGPAdvertisement>,
    peers: Store<BGPPeer>,
    communities: Store<Community>,
    secrets: Store<Secret>,
}

impl Caches {
    fn view(&self) -> ClusterView {
        fn all<K: Clone + Resource<DynamicType = ()> + 'static>(s: &Store<K>) -> Vec<K>
        where
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            s.state().iter().map(|o| (**o).clone()).collect()
        }
        ClusterView {
            services: all(&self.services),
            slices: all(&self.slices),
            nodes: all(&self.nodes),
            speaker_pods: all(&self.pods),
            pools: all(&self.pools),
            l2: all(&self.l2),
            bgp: all(&self.bgp),
            peers: all(&self.peers),
            communities: all(&self.communities),
            secrets: all(&self.secrets),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
    let ready = Readiness::default();
    ferrolb_telemetry::serve(
        args.metrics_addr,
        Arc::new(registry),
        ready.clone(),
        shutdown_rx,
    )
    .await?;

    let changed = Arc::new(Notify::new());
    let ns = args.namespace.clone();
    let speaker_pods = watcher::Config::default().labels(&format!(
        "{}={}",
        names::SPEAKER_POD_LABEL,
        names::SPEAKER_POD_LABEL_VALUE
    ));
    let caches = Caches {
        services: spawn_store(
            Api::all(client.clone()),
            watcher::Config::default(),
            &changed,
        ),
        slices: spawn_store(
            Api::all(client.clone()),
            watcher::Config::default(),
            &changed,
        ),
        nodes: spawn_store(
            Api::all(client.clone()),
            watcher::Config::default(),
            &changed,
        ),
        pods: spawn_store(Api::namespaced(client.clone(), &ns), speaker_pods, &changed),
        pools: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
        l2: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
        bgp: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
        peers: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
        communities: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
        secrets: spawn_store(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            &changed,
        ),
    };
    caches.services.wait_until_ready().await?;
    caches.nodes.wait_until_ready().await?;
    caches.pools.wait_until_ready().await?;
    caches.pods.wait_until_ready().await?;
    caches.secrets.wait_until_ready().await?;

    let settings = Settings {
        node: args.node_name.clone(),
        namespace: args.namespace.clone(),
        class: args.load_balancer_class.clone(),
        enable_l2: args.enable_l2,
        enable_bgp: args.enable_bgp,
    };
    let reporter = Reporter {
        controller: "ferrolb-speaker".into(),
        instance: Some(args.node_name.clone()),
    };
    let mut speaker = Speaker::new(
        client.clone(),
        settings,
        metrics.clone(),
        Recorder::new(client.clone(), reporter),
    );
    ready.set(true);

    let mut gossip: Option<Gossip> = None;
    let mut gossip_live: Option<watch::Receiver<BTreeSet<String>>> = None;
    let run = async {
        loop {
            let view = caches.view();
            if gossip.is_none() {
                gossip = start_gossip(&args, &view).await;
                gossip_live = gossip.as_ref().map(Gossip::live);
            }
            if let Some(g) = &gossip {
                g.set_seeds(seeds(&view, &args));
                let c = g.counters();
                ferrolb_speaker::shell::metrics::advance(
                    &metrics.gossip_auth_failures,
                    c.auth_failures_total(),
                );
            }
            let live = match &gossip_live {
                Some(rx) => {
                    let live = rx.borrow().clone();
                    metrics.gossip_members.set(live.len() as i64);
                    live
                }
                None => live_from_kubernetes(&view, &args.node_name),
            };
            speaker.sync(&view, live).await;
            let gossip_changed = async {
                match gossip_live.as_mut() {
                    Some(rx) => {
                        let _ = rx.changed().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(Duration::from_millis(10)).await,
                _ = gossip_changed => {}
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    };
    tokio::select! {
        _ = run => {}
        _ = ferrolb_telemetry::shutdown_signal() => info!("shutting down: withdrawing announcements"),
    }
    speaker.shutdown().await;
    let _ = shutdown_tx.send(true);
    Ok(())
}

/// Starts gossip once the key Secret and this node's speaker Pod address are known; until then
/// (or if it cannot start) liveness comes from the Kubernetes view.
async fn start_gossip(args: &Args, view: &ClusterView) -> Option<Gossip> {
    let key = secret_bytes(&view.secrets, &args.gossip_secret, "secretkey")?;
    let key = GossipKey::new(key)?;
    let my_ip = own_pod_ip(view, &args.node_name)?;
    let bind = SocketAddr::new(my_ip, args.gossip_port);
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

fn own_pod_ip(view: &ClusterView, node: &str) -> Option<IpAddr> {
    view.speaker_pods
        .iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .and_then(|p| p.status.as_ref()?.pod_ip.as_deref()?.parse().ok())
}

fn seeds(view: &ClusterView, args: &Args) -> Vec<(String, SocketAddr)> {
    view.speaker_pods
        .iter()
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            let ip: IpAddr = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            (node != args.node_name).then_some((node, SocketAddr::new(ip, args.gossip_port)))
        })
        .collect()
}

/// Starts a watcher feeding a reflector store; every change wakes the sync loop.
fn spawn_store<K>(api: Api<K>, config: watcher::Config, changed: &Arc<Notify>) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let changed = changed.clone();
    ferrolb_telemetry::watch_store(api, config, move |_| changed.notify_one())
}
