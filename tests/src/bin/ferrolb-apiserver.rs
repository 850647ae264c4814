//! `ferrolb-apiserver`: the test Kubernetes API server as a process, for the lab and end-to-end suites.
//!
//! Serves plain HTTP on `--listen`, writes a kubeconfig whose server is `http://ADDR`, serves the CRDs
//! found in `--crds`, and with `--state FILE` loads objects at start and saves them every second and
//! on SIGINT/SIGTERM. Faults are driven over HTTP under `/_fault/...` (see `apiserver::http::control`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig, load_state};

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "ferrolb-apiserver",
    about = "Kubernetes API server for FerroLB tests and the lab"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Directory of CRD YAML files to serve.
    #[arg(long)]
    crds: Vec<PathBuf>,
    /// File to load objects from at start and save them to.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Events kept per resource for watch replay.
    #[arg(long, default_value_t = 1000)]
    watch_cache_size: usize,
    /// Base of an IPv6 Service CIDR (a /112), making the cluster dual-stack; IPv4-only without it.
    #[arg(long)]
    service_cidr_v6: Option<std::net::Ipv6Addr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = ApiServerConfig {
        listen: args.listen,
        watch_cache_size: args.watch_cache_size,
        ..Default::default()
    };
    config.cluster.service_cidr_v6 = args.service_cidr_v6;
    for dir in &args.crds {
        config = config.with_crd_dir(dir);
    }
    if let Some(path) = &args.state
        && path.exists()
    {
        config.initial =
            Some(load_state(path).with_context(|| format!("loading {}", path.display()))?);
    }
    let server = ApiServer::start(config)
        .await
        .context("starting the API server")?;
    server
        .write_kubeconfig(&args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    println!(
        "serving on {} (kubeconfig {})",
        server.url(),
        args.kubeconfig.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    let mut saved = server.revision();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if let Some(path) = &args.state && server.revision() != saved {
                    server.save_state(path)?;
                    saved = server.revision();
                }
            }
        }
    }
    if let Some(path) = &args.state {
        server.save_state(path)?;
    }
    Ok(())
}
