//! `ferrolb-lab`: FerroLB's main job on one machine, in network namespaces, with the real
//! controller and speakers (see `ferrolb_tests::lab`). Needs root.
//!
//! ```text
//! ferrolb-lab [--router bird|frr] [--keep]   build, report, fail over, clean up (or keep running)
//! ferrolb-lab --apiserver real                the same on a real kube-apiserver (scripts/realkube)
//! ferrolb-lab --kube-proxy iptables         the real kube-proxy (iptables, nftables or ipvs mode) and
//!                                             backends in Pod namespaces; implies --apiserver real
//! ferrolb-lab --cluster real               real nodes: kubelet and containerd per node, FerroLB
//!                                             installed by Helm from its images (scripts/images)
//! ferrolb-lab --system metallb               the same with MetalLB v0.16 (scripts/metallb), real API server
//! ferrolb-lab --down                          remove a lab left running or crashed
//! ferrolb-lab serve --node NAME --port P      the kube-proxy stand-in's server (run inside a node)
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ferrolb_tests::backend::BackendKind;
use ferrolb_tests::lab::report::{self, Failover, Fault};
use ferrolb_tests::lab::{
    Binaries, Cluster, KubeProxy, Lab, LabConfig, RouterKind, prometheus, standin,
};
use ferrolb_tests::netns::{self, topology};

/// The fixed prefix of the lab's namespaces, so `--down` and a rerun find a crashed lab's.
const PREFIX: &str = "ferrolb-lab";
/// Where the lab keeps its kubeconfig, configs, logs and pid file.
const STATE_DIR: &str = "/run/ferrolb-lab";

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "ferrolb-lab",
    version,
    about = "FerroLB on one machine, in network namespaces"
)]
struct Args {
    /// The BGP router's daemon.
    #[arg(long, default_value = "bird")]
    router: RouterKind,
    /// Leave the lab running after the report (until Ctrl-C) and print how to reach it.
    #[arg(long)]
    keep: bool,
    /// Remove everything a previous run left (namespaces, processes, files) and exit.
    #[arg(long)]
    down: bool,
    /// Skip the failover (the report only).
    #[arg(long)]
    no_failover: bool,
    /// Repeat each failover this many times and print the spread of the figures.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Directory holding ferrolb-controller and ferrolb-speaker (default: next to this binary).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The manifests to load (default: the source tree's examples/lab).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// The CRDs to serve (default: the source tree's charts/ferrolb/crds).
    #[arg(long)]
    crds: Option<PathBuf>,
    /// The API server: `double` (the in-process test server, fastest) or `real` (kube-apiserver
    /// and etcd built by scripts/realkube). Default: `FERROLB_APISERVER`, else `double`.
    #[arg(long)]
    apiserver: Option<BackendKind>,
    /// What carries Service traffic: `standin` (addresses on each node's `lb0`, answered by the
    /// node itself), or the real kube-proxy built by `scripts/realkube node` in `iptables`,
    /// `nftables` or `ipvs` mode, with the backends in Pod namespaces (implies `--apiserver
    /// real`). Default: `FERROLB_KUBE_PROXY`, else `standin`.
    #[arg(long)]
    kube_proxy: Option<KubeProxy>,
    /// The nodes: `lab` (FerroLB as host processes, Nodes and speaker Pods written by the lab)
    /// or `real` (a real kubelet and containerd per node, FerroLB installed with `helm install`
    /// from target/images/*.oci.tar, the backends real Pods; implies the real API server and
    /// kube-proxy). Default: `FERROLB_LAB_CLUSTER`, else `lab`.
    #[arg(long)]
    cluster: Option<Cluster>,
    /// What runs the lab: `ferrolb`, or `metallb` (MetalLB's own controller and speaker, built by
    /// scripts/metallb, always on the real kube-apiserver) to compare.
    #[arg(long, default_value = "ferrolb")]
    system: SystemArg,
    /// Also run Debian's Prometheus (`/usr/bin/prometheus`) in the switch namespace, scraping
    /// the controller and every speaker every second with the chart's alert rules (rendered by
    /// Helm, each `for:` at 5 s); the report then lists the alerts active.
    #[arg(long)]
    prometheus: bool,
    /// The subcommand (internal).
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum SystemArg {
    Ferrolb,
    Metallb,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Answer every HTTP request on PORT with NODE (the stand-in "pod"; run inside a node).
    Serve {
        /// The node name to answer with.
        #[arg(long)]
        node: String,
        /// The port.
        #[arg(long, default_value_t = standin::SERVICE_PORT)]
        port: u16,
    },
}

fn main() -> std::process::ExitCode {
    match lab_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrolb-lab: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn lab_main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Cmd::Serve { node, port }) = &args.command {
        return standin::serve(node, *port).with_context(|| format!("serving on port {port}"));
    }
    netns::require_root()?;
    if args.down {
        down();
        return Ok(());
    }
    netns::require_tools(&ferrolb_tests::lab::required_tools(args.router))?;
    let (stopped, removed) = down_quietly();
    if let Some(pid) = stopped {
        println!("stopped a lab left running (pid {pid})");
    }
    if !removed.is_empty() {
        println!("removed what a previous lab left: {}", removed.join(" "));
    }
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no directory for this binary")?
            .to_path_buf(),
    };
    let (controller, speaker) = match args.system {
        SystemArg::Ferrolb => (
            bin_dir.join("ferrolb-controller"),
            bin_dir.join("ferrolb-speaker"),
        ),
        SystemArg::Metallb => {
            let d = ferrolb_tests::metallb::dir();
            (d.join("controller"), d.join("speaker"))
        }
    };
    for b in [&controller, &speaker] {
        if !b.is_file() {
            bail!(
                "{} not found: build the workspace first (cargo build --workspace --bins) or pass --bin-dir",
                b.display()
            );
        }
    }
    let binaries = Binaries {
        controller,
        speaker: Some(speaker),
        lab: std::env::current_exe()?,
    };
    let dir = PathBuf::from(STATE_DIR);
    let mut config = LabConfig::new(PREFIX, args.router, binaries, dir.clone());
    if let Some(m) = &args.manifests {
        config.manifests = m.clone();
    }
    if let Some(c) = &args.crds {
        config.crds = c.clone();
    }
    if let Some(a) = args.apiserver {
        config.apiserver = a;
    }
    if let Some(k) = args.kube_proxy {
        config.kube_proxy = k;
    }
    if let Some(c) = args.cluster {
        config.cluster = c;
    }
    config.resolve();
    if args.system == SystemArg::Metallb {
        config.system = ferrolb_tests::lab::System::MetalLb;
        config.apiserver = BackendKind::Real;
    }
    std::fs::create_dir_all(&dir).ok();

    // Ctrl-C (and SIGTERM from --down) while building or reporting: clean up, then exit.
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    install_signal_cleanup(interrupted.clone(), args.keep)?;

    let started = Instant::now();
    println!(
        "building the lab: 3 nodes, a client, a {} router, a client behind it (namespaces {PREFIX}-*)",
        args.router,
    );
    print!("{}", components(&config));
    let mut lab = Lab::start(config)?;
    std::fs::write(dir.join("lab.pid"), std::process::id().to_string()).ok();
    let prometheus = if args.prometheus {
        let rules = match prometheus::chart_rules("5s") {
            Ok(rules) => rules,
            Err(prometheus::RulesError::NoHelm(why) | prometheus::RulesError::Refused(why)) => {
                bail!("the chart's alert rules: {why}")
            }
        };
        Some(prometheus::Prometheus::start(
            &lab,
            Duration::from_secs(1),
            &rules,
            &lab.dir().join("prometheus"),
        )?)
    } else {
        None
    };
    let result = run(&mut lab, &args, started);
    if let (Some(p), Ok(())) = (&prometheus, &result) {
        print_alerts(p);
    }
    if let Err(e) = &result {
        eprintln!("ferrolb-lab: {e:#}");
        eprintln!("logs are in {}", lab.dir().display());
        lab.keep_dir();
        drop(lab);
        std::process::exit(1);
    }
    if args.keep {
        lab.keep_dir();
        print_hints(&lab);
        if prometheus.is_some() {
            println!(
                "Prometheus (its rules are the chart's): ip netns exec {} curl -s 127.0.0.1:9090/api/v1/alerts",
                lab.topo.switch.name()
            );
        }
        while !interrupted.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("stopping the lab");
    }
    drop(lab);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        let _ = std::fs::remove_file(dir.join("lab.pid"));
    }
    Ok(())
}

/// Per component, whether the lab runs the real one or its own stand-in.
fn components(config: &LabConfig) -> String {
    let real = |yes: bool| if yes { "real" } else { "the lab's own" };
    let api = config.apiserver == BackendKind::Real;
    let proxy = config.kube_proxy;
    let mut out = String::new();
    out += &format!(
        "  API server:  {} ({})\n",
        real(api),
        if api {
            "kube-apiserver and etcd, scripts/realkube"
        } else {
            "in-process test API server"
        }
    );
    out += &format!(
        "  kube-proxy:  {} ({})\n",
        real(proxy.is_real()),
        if proxy.is_real() {
            format!("kube-proxy, {} mode, one per node", proxy.as_str())
        } else {
            "Service addresses on each node's lb0".into()
        }
    );
    if config.cluster == Cluster::Real {
        out += "  kubelet:     real (kubelet, containerd and runc per node; kube-scheduler)\n";
        out += "  backends:    real Pods of the lab's own image (examples/lab/real)\n";
        out += "  FerroLB:     real, installed by Helm from its images (scripts/images)\n";
    } else {
        out += &format!(
            "  backends:    {}\n",
            if proxy.is_real() {
                "a namespace per node holding its endpoint addresses (no kubelet, no containers)"
            } else {
                "a server on each node itself"
            }
        );
        out += "  kubelet:     none (Nodes and speaker Pods are written by the lab)\n";
        out += "  FerroLB:     real controller and speakers, as host processes\n";
    }
    out += "  router:      real BGP daemon\n";
    out
}

fn run(lab: &mut Lab, args: &Args, started: Instant) -> anyhow::Result<()> {
    let services = lab
        .wait_for_addresses(Duration::from_secs(30))
        .context("the controller gave no address to every Service (see controller.log)")?;
    let l2: Vec<_> = services
        .iter()
        .filter(|s| s.pool == "lab-l2")
        .flat_map(|s| s.ingress.iter().map(|(ip, _)| *ip))
        .collect();
    lab.wait_for_l2_owners(&l2, Duration::from_secs(30))
        .context(
            "the speakers did not elect an owner for every layer-2 address (see speaker-*.log)",
        )?;
    let router = lab.router.kind();
    lab.wait(
        Duration::from_secs(30),
        "a BGP session from every node",
        || (lab.router.established() == topology::NODE_NAMES.len()).then_some(()),
    )
    .with_context(|| format!("the {router} router did not establish BGP with every node"))?;
    // Give the router a moment to receive the UPDATEs after Established.
    std::thread::sleep(Duration::from_millis(500));
    println!("ready after {:.1} s\n", started.elapsed().as_secs_f64());
    print!("{}", report::render(lab, &services)?);
    if !args.no_failover {
        for fault in [Fault::SpeakerKilled, Fault::NodeCutOff] {
            let mut seen = Vec::new();
            for _ in 0..args.repeat.max(1) {
                println!();
                let f: Failover = report::failover(lab, "web", fault, Duration::from_secs(30))?;
                print!("{}", report::render_failover(&f));
                report::restore(lab, &f)?;
                match fault {
                    Fault::SpeakerKilled => println!("({}'s speaker restarted)", f.old_owner),
                    Fault::NodeCutOff => {
                        println!("({} plugged back in, with a fresh speaker)", f.old_owner)
                    }
                }
                seen.push(f);
            }
            if seen.len() > 1 {
                println!("\n{}", spread(fault, &seen));
            }
        }
    }
    Ok(())
}

/// Minimum, median and maximum of the layer-2 and BGP figures of repeated failovers.
fn spread(fault: Fault, seen: &[Failover]) -> String {
    fn stats(mut ms: Vec<f64>) -> String {
        if ms.is_empty() {
            return "none".into();
        }
        ms.sort_by(f64::total_cmp);
        format!(
            "min {:.0} / median {:.0} / max {:.0} ms",
            ms[0],
            ms[ms.len() / 2],
            ms[ms.len() - 1]
        )
    }
    let l2 = seen.iter().map(|f| f.elapsed.as_secs_f64() * 1e3).collect();
    let bgp = seen
        .iter()
        .filter_map(|f| f.bgp_withdrawn)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    format!(
        "== {fault:?} x{n}: layer 2 {l2}; BGP withdrawal {bgp}",
        n = seen.len(),
        l2 = stats(l2),
        bgp = stats(bgp)
    )
}

/// The alerts Prometheus holds active now, once the report and failovers are done (the
/// failovers' own faults may still be pending or firing).
fn print_alerts(p: &prometheus::Prometheus) {
    match p.alerts() {
        None => println!("\nPrometheus did not answer"),
        Some(alerts) if alerts.is_empty() => println!("\nPrometheus: no alert active"),
        Some(alerts) => {
            println!("\nPrometheus: alerts active");
            for a in alerts {
                let labels: Vec<String> = a
                    .labels
                    .iter()
                    .filter(|(k, _)| *k != "alertname")
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect();
                println!("  {} ({}): {}", a.name, a.state, labels.join(" "));
            }
        }
    }
}

fn print_hints(lab: &Lab) {
    let sw = lab.topo.switch.name();
    println!(
        "\nThe lab keeps running; Ctrl-C (or `ferrolb-lab --down` from another shell) removes it.\n\
         The API server listens on 10.99.0.254:6443 inside the switch namespace:\n  \
         ip netns exec {sw} kubectl --kubeconfig {kc} get svc,ipaddresspools,servicel2statuses -A\n\
         A shell on a host:\n  \
         ip netns exec {p}-client bash      (on the segment: curl 10.99.0.100, arping -I eth0 10.99.0.100)\n  \
         ip netns exec {p}-remote bash      (behind the router)\n  \
         ip netns exec {p}-node-a bash      (node-b, node-c likewise)\n\
         Router: {routes}\n\
         Logs: {dir}",
        kc = lab.kubeconfig().display(),
        p = PREFIX,
        routes = lab.router.show_routes_command(),
        dir = lab.dir().display(),
    );
}

/// Stops a lab left running (its pid file) and removes every namespace of the prefix.
fn down() {
    let (stopped, removed) = down_quietly();
    match (stopped, removed.is_empty()) {
        (Some(pid), _) => println!("stopped the lab (pid {pid})"),
        (None, false) => println!("removed: {}", removed.join(" ")),
        (None, true) => println!("no lab found"),
    }
    let _ = std::fs::remove_dir_all(STATE_DIR);
}

/// Stops a running lab process, if any (returns its pid), and removes leftover namespaces.
fn down_quietly() -> (Option<String>, Vec<String>) {
    let pidfile = PathBuf::from(STATE_DIR).join("lab.pid");
    let mut stopped = None;
    if let Ok(pid) = std::fs::read_to_string(&pidfile) {
        let pid = pid.trim().to_string();
        if pid != std::process::id().to_string() && is_lab_process(&pid) {
            let _ = netns::run(&["kill", "-TERM", &pid]);
            for _ in 0..50 {
                if !is_lab_process(&pid) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            stopped = Some(pid);
        }
        let _ = std::fs::remove_file(&pidfile);
    }
    (stopped, topology::remove(PREFIX))
}

/// Whether `pid` is a live (not zombie) `ferrolb-lab` process.
fn is_lab_process(pid: &str) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // stat: `PID (COMM) STATE ...`
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    comm.trim() == "ferrolb-lab" && !matches!(state, Some("Z") | Some("X") | None)
}

/// On SIGINT or SIGTERM: with `--keep`, the first signal asks `main` to stop the lab (it polls
/// `flag` while waiting); otherwise, or on a second signal, the namespaces (and every process in
/// them) are removed right here and the process exits.
fn install_signal_cleanup(
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    keep: bool,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut term = rt.block_on(async { signal(SignalKind::terminate()) })?;
    let mut int = rt.block_on(async { signal(SignalKind::interrupt()) })?;
    std::thread::spawn(move || {
        loop {
            rt.block_on(async {
                tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            });
            let again = flag.swap(true, std::sync::atomic::Ordering::SeqCst);
            if keep && !again {
                continue;
            }
            eprintln!("interrupted: removing the lab");
            topology::remove(PREFIX);
            let _ = std::fs::remove_dir_all(STATE_DIR);
            std::process::exit(130);
        }
    });
    Ok(())
}
