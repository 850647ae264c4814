//! `ferrolb`: FerroLB's command line. `ferrolb migrate` turns a MetalLB configuration into
//! FerroLB's; see `ferrolb migrate --help`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use ferrolb_cli::migrate::report::{self, EXIT_ERROR, Entry, Finding, Summary};
use ferrolb_cli::migrate::{self, Options};
use ferrolb_cli::{cluster, input};

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

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Migrate(args) = cli.command;
    match migrate_command(args).await {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
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
