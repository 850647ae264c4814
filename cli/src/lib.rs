//! FerroLB's command line, `ferrolb`.
//!
//! # Layout
//! - [`migrate`]: the pure core of `ferrolb migrate`: MetalLB objects (as JSON) in, typed FerroLB
//!   objects and a report out. No I/O.
//! - [`input`]: the shell that reads files and directories into documents.
//! - [`cluster`]: the shell that reads MetalLB objects from a cluster, copies password Secrets
//!   and applies the FerroLB objects.
//! - [`explain`]: the pure core of `ferrolb explain` and `ferrolb status`: the cluster's
//!   objects in, explanations out, decided by the controller's allocator and the speakers'
//!   planner themselves.
//! - [`snapshot`]: the shell that lists those objects, read-only.
//! - [`app`]: the flags and each command's wiring, shared by the `ferrolb` and
//!   `kubectl-ferrolb` binaries.
//!
//! ```text
//!  --from FILE/DIR ─▶ input ─┐                               ┌─▶ YAML (stdout / --output)
//!                            ├─▶ migrate::convert (pure) ───┼─▶ report (stderr, --report-json)
//!  --from-cluster ─▶ cluster ┘                               └─▶ cluster::apply (--apply)
//!
//!  explain / status ─▶ snapshot::read ─▶ explain (pure) ─▶ text, or JSON with -o json
//! ```

pub mod app;
pub mod cluster;
pub mod explain;
pub mod input;
pub mod migrate;
pub mod snapshot;

/// The field manager of everything `ferrolb migrate --apply` writes.
pub const FIELD_MANAGER: &str = "ferrolb-migrate";

/// An error that stops the command: nothing is written after it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input file or directory could not be read.
    #[error("cannot read {path}: {source}; check the path given to --from")]
    Read {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An input file is not YAML or JSON.
    #[error("{source_name} is not valid {format}: {message}; fix it or leave it out of --from")]
    Parse {
        /// The file and document.
        source_name: String,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message.
        message: String,
    },
    /// The cluster could not be reached or refused to list MetalLB's objects.
    #[error("cannot {action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
