//! The command line itself, shared by the `ferrolb` and `kubectl-ferrolb` binaries: flags,
//! and each command's wiring of its shell and core. `ferrolb migrate` turns a MetalLB
//! configuration into FerroLB's; `ferrolb explain` and `ferrolb status` say, read-only, why a
//! Service or node is as it is.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::explain::{self, Settings, text};
use crate::migrate::report::{self, EXIT_ERROR, Entry, Finding, Summary};
use crate::migrate::{self, Options};
use crate::snapshot::{self, Scope};
use crate::{cluster, input};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use ferrolb_controller::allocator::IpMode;

#[derive(Parser)]
#[command(name = "ferrolb", version, about = "FerroLB's command line")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a MetalLB configuration into FerroLB objects (Services need no change and are
    /// not touched).
    #[command(long_about = MIGRATE_ABOUT, after_long_help = MIGRATE_AFTER)]
    Migrate(MigrateArgs),
    /// Say why a Service has (or has no) address and who announces it, or what a node does:
    /// `explain [-n NAMESPACE] NAME`, `explain service NAME`, `explain node NAME`. Read-only.
    #[command(after_long_help = EXPLAIN_AFTER)]
    Explain(ExplainArgs),
    /// One screen: pools used and free, Services without an address and why, BGP sessions
    /// not Established, configuration problems. Read-only.
    Status(StatusArgs),
}

const EXPLAIN_AFTER: &str = "\
Everything comes from the cluster: the Service, its Events and EndpointSlices, the pools,
advertisements, peers, Nodes, speaker Pods, and the objects speakers write (ServiceL2Status,
ServiceBGPStatus, BGPSessionState, ConfigurationState). The controller's allocator and the
speakers' planner are run on them, so each reason is the one FerroLB acts on. A node's speaker
counts as live when its Pod is Ready and the node is Ready (gossip may know sooner).

Exit status: 0 when the Service (or node) exists; 1 when it does not, or on an error.

Installed as kubectl-ferrolb, it is also `kubectl ferrolb explain ...`.";

/// What FerroLB was installed with, and how to print.
#[derive(Args)]
struct Common {
    /// FerroLB's namespace: its configuration, speaker Pods and status objects.
    #[arg(long, default_value = "ferrolb-system", env = "FERROLB_NAMESPACE")]
    ferrolb_namespace: String,
    /// The loadBalancerClass FerroLB was installed to handle.
    #[arg(long, default_value = ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS)]
    load_balancer_class: String,
    /// FerroLB was installed with --ignore-unclassed (Services without a class are not its).
    #[arg(long)]
    ignore_unclassed: bool,
    /// The controller's --default-ip-mode (VIP or Proxy).
    #[arg(long, default_value = "VIP", value_parser = parse_ip_mode)]
    default_ip_mode: IpMode,
    /// Output format: text or json.
    #[arg(long, short, default_value = "text", value_parser = ["text", "json"])]
    output: String,
}

impl Common {
    fn settings(&self) -> Settings {
        Settings {
            class: self.load_balancer_class.clone(),
            ignore_unclassed: self.ignore_unclassed,
            default_ip_mode: self.default_ip_mode,
            namespace: self.ferrolb_namespace.clone(),
        }
    }
}

fn parse_ip_mode(s: &str) -> Result<IpMode, String> {
    match s {
        "VIP" => Ok(IpMode::Vip),
        "Proxy" => Ok(IpMode::Proxy),
        other => Err(format!("{other}: expected VIP or Proxy")),
    }
}

#[derive(Args)]
struct ExplainArgs {
    /// The Service's namespace.
    #[arg(long, short, default_value = "default")]
    namespace: String,
    /// `NAME` (a Service), `service NAME` (also `svc`), or `node NAME`.
    #[arg(required = true, num_args = 1..=2, value_name = "[KIND] NAME")]
    target: Vec<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    common: Common,
}

const MIGRATE_ABOUT: &str = "\
Reads MetalLB's configuration objects (group metallb.io: IPAddressPool, L2Advertisement,
BGPAdvertisement, BGPPeer v1beta1 and v1beta2, Community, BFDProfile) and writes the FerroLB
objects of the same kind and name (group ferrolb.io) as multi-document YAML.

A report on stderr lists, per object and field, every MetalLB field FerroLB has no equivalent
for, every field the converter does not know, and what needs doing (such as copying a peer's
password Secret into FerroLB's namespace). Objects that would not be valid FerroLB objects are
reported and not written.

Services need no change, and this command does not touch them: FerroLB reads MetalLB's Service
annotations (the metallb.io/ and metallb.universe.tf/ spellings) and adopts the addresses
already in status.loadBalancer.ingress.";

const MIGRATE_AFTER: &str = "\
Exit status: 0 when every object was converted (fields without an equivalent are reported, not
errors); 1 on an error (unreadable input, an object not written, an apply refused, a Secret
not copied); 3 with --strict when the report lists any field without an equivalent; 2 on a
usage error.

With --apply, stdout gets one line per applied object (ipaddresspool.ferrolb.io/NAME applied)
and the YAML goes only to --output when given.";

#[derive(Args)]
struct MigrateArgs {
    /// MetalLB objects to read: a YAML (multi-document) or JSON file, `kind: List` included,
    /// or a directory (each *.yaml, *.yml, *.json in it, sorted by name). Repeatable.
    #[arg(
        long,
        value_name = "FILE_OR_DIR",
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    from: Vec<PathBuf>,
    /// Read MetalLB's objects from the cluster the kubeconfig names, in --namespace.
    #[arg(long)]
    from_cluster: bool,
    /// MetalLB's namespace: where --from-cluster reads, and where MetalLB read peers'
    /// password Secrets for objects that name no namespace.
    #[arg(long, default_value = "metallb-system")]
    namespace: String,
    /// FerroLB's namespace: where the FerroLB objects go.
    #[arg(long, default_value = "ferrolb-system")]
    to_namespace: String,
    /// Write the YAML to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
    /// Apply the FerroLB objects with server-side apply (field manager ferrolb-migrate, not
    /// forced). With --from-cluster, also copy each peer's password Secret into
    /// --to-namespace unless one of that name is there.
    #[arg(long)]
    apply: bool,
    /// Exit 3 when any MetalLB field was not converted.
    #[arg(long)]
    strict: bool,
}

/// Parses the command line and runs the command.
pub async fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Migrate(args) => migrate_command(args).await,
        Command::Explain(args) => explain_command(args).await,
        Command::Status(args) => status_command(args).await,
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn client() -> anyhow::Result<kube::Client> {
    kube::Client::try_default()
        .await
        .context("cannot connect to the cluster the kubeconfig names")
}

/// Prints `value` as JSON, or `text` as it is.
fn print<T: serde::Serialize>(output: &str, value: &T, text: impl FnOnce(&T) -> String) {
    if output == "json" {
        println!(
            "{}",
            serde_json::to_string_pretty(value).expect("reports serialize")
        );
    } else {
        print!("{}", text(value));
    }
}

async fn explain_command(args: ExplainArgs) -> anyhow::Result<u8> {
    let settings = args.common.settings();
    let (kind, name) = match args.target.as_slice() {
        [name] => ("service", name.as_str()),
        [kind, name] => (kind.as_str(), name.as_str()),
        _ => unreachable!("clap takes one or two values"),
    };
    let client = client().await?;
    match kind {
        "service" | "services" | "svc" => {
            let scope = Scope {
                service: Some((args.namespace.clone(), name.to_owned())),
                all_endpoints: false,
            };
            let objects = snapshot::read(&client, &settings, &scope).await?;
            let e = explain::explain_service(&objects, &settings, &args.namespace, name);
            print(&args.common.output, &e, text::service);
            Ok(if e.found { 0 } else { EXIT_ERROR })
        }
        "node" | "nodes" | "no" => {
            let scope = Scope {
                service: None,
                all_endpoints: true,
            };
            let objects = snapshot::read(&client, &settings, &scope).await?;
            let e = explain::explain_node(&objects, &settings, name);
            print(&args.common.output, &e, text::node);
            Ok(if e.found { 0 } else { EXIT_ERROR })
        }
        other => anyhow::bail!("cannot explain `{other}`: name a service or a node"),
    }
}

async fn status_command(args: StatusArgs) -> anyhow::Result<u8> {
    let settings = args.common.settings();
    let client = client().await?;
    let objects = snapshot::read(&client, &settings, &Scope::default()).await?;
    let s = explain::cluster_status(&objects, &settings);
    print(&args.common.output, &s, text::status);
    Ok(0)
}

async fn migrate_command(args: MigrateArgs) -> anyhow::Result<u8> {
    let needs_cluster = args.from_cluster || args.apply;
    let client = if needs_cluster {
        Some(
            kube::Client::try_default()
                .await
                .context("cannot connect to the cluster the kubeconfig names")?,
        )
    } else {
        None
    };

    let mut entries: Vec<Entry> = Vec::new();
    let documents = match &client {
        Some(client) if args.from_cluster => {
            let (docs, read_report) = cluster::read_metallb(client, &args.namespace).await?;
            entries.extend(read_report);
            docs
        }
        _ => input::read_paths(&args.from)?,
    };

    let options = Options {
        to_namespace: args.to_namespace.clone(),
        metallb_namespace: args.namespace.clone(),
    };
    let conversion = migrate::convert(documents, &options);
    entries.extend(conversion.report.iter().cloned());

    let yaml = conversion.to_yaml();
    match (&args.output, args.apply) {
        (Some(path), _) => std::fs::write(path, &yaml)
            .with_context(|| format!("cannot write {}", path.display()))?,
        (None, false) => std::io::stdout()
            .write_all(yaml.as_bytes())
            .context("cannot write the YAML to stdout")?,
        (None, true) => {}
    }

    if let Some(client) = &client
        && args.apply
    {
        if args.from_cluster {
            entries.extend(cluster::copy_password_secrets(client, &conversion).await);
            report::drop_done_actions(&mut entries);
        }
        for entry in cluster::apply(client, &conversion).await {
            if let Finding::Applied { .. } = entry.finding {
                println!("{}", entry.finding);
            }
            entries.push(entry);
        }
    }

    let summary = Summary::of(conversion.objects.len(), &entries);
    let status = report::exit_status(&entries, args.strict);
    let mut stderr = std::io::stderr().lock();
    for entry in entries
        .iter()
        .filter(|e| !matches!(e.finding, Finding::Applied { .. }))
    {
        writeln!(stderr, "{entry}")?;
    }
    writeln!(stderr, "{summary}")?;
    if let Some(path) = &args.report_json {
        let json = report::to_json(&entries, summary, status);
        let text = serde_json::to_string_pretty(&json).expect("JSON values serialize");
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(status)
}
