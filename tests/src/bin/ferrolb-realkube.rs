//! `ferrolb-realkube`: a real etcd + kube-apiserver (+ kube-controller-manager) for the suites
//! and the lab, as one process that stops them all on SIGINT/SIGTERM.
//!
//! ```sh
//! scripts/realkube                                   # build the binaries once
//! ferrolb-realkube --dir /tmp/rk --crds charts/ferrolb/crds &
//! FERROLB_TEST_KUBECONFIG=/tmp/rk/kubeconfig cargo test -p ferrolb-tests --test crd_schema_rules
//! ```
//!
//! It prints `ready <kubeconfig> <version>` on one line once the server is ready and the CRDs are
//! established, and writes the same to `<dir>/ready`.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use ferrolb_tests::realkube::{self, RealKube, RealKubeConfig};

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "ferrolb-realkube",
    about = "A real kube-apiserver with etcd for FerroLB's tests"
)]
struct Args {
    /// Directory for certificates, etcd data, logs and the kubeconfig (emptied first).
    #[arg(long)]
    dir: PathBuf,
    /// Directories of CRD YAML files to install and wait for.
    #[arg(long)]
    crds: Vec<PathBuf>,
    /// Address kube-apiserver listens on.
    #[arg(long, default_value = "127.0.0.1")]
    address: IpAddr,
    /// kube-apiserver's port (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Run every process inside this network namespace.
    #[arg(long)]
    netns: Option<String>,
    /// Do not run kube-controller-manager.
    #[arg(long)]
    no_controller_manager: bool,
    /// `--service-cluster-ip-range`.
    #[arg(long, default_value = "10.96.0.0/16,fd00:10:96::/108")]
    service_cidrs: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = std::fs::remove_dir_all(&args.dir);
    // The runtime's threads live in the namespace, so the harness's own connections start there.
    let rt = match &args.netns {
        Some(ns) => ferrolb_tests::netns::runtime_in(ns)?,
        None => tokio::runtime::Runtime::new()?,
    };
    let config = RealKubeConfig {
        address: args.address,
        port: args.port,
        netns: args.netns.clone(),
        controller_manager: !args.no_controller_manager,
        service_cidrs: args.service_cidrs.clone(),
        dir: Some(args.dir.clone()),
        ..Default::default()
    };
    let crds = args.crds.clone();
    let dir = args.dir.clone();
    // Spawned, not polled by block_on: the runtime's worker threads (in the namespace, when one is
    // given) make the connections and start the processes, and live as long as this process.
    let kube = rt.block_on(rt.spawn(async move {
        let kube = RealKube::start(config)
            .await
            .context("starting the control plane")?;
        let client = kube.client()?;
        realkube::install_crds(&client, &crds)
            .await
            .context("installing CRDs")?;
        let version = kube.version().await?;
        let line = format!("ready {} {version}", kube.kubeconfig().display());
        std::fs::write(dir.join("ready"), format!("{line}\n"))?;
        println!("{line}");
        anyhow::Ok(kube)
    }))??;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    drop(kube);
    Ok(())
}
