//! FerroLB's test harness.
//!
//! # Layout
//!
//! - [`apiserver`]: a Kubernetes API server for tests and for the lab, faithful to kube-apiserver for
//!   the resources FerroLB uses.
//! - [`backend`]: the double or a real kube-apiserver behind one type (`FERROLB_APISERVER`).
//! - [`netns`]: network namespaces as hosts, and the lab's topology.
//! - [`realkube`]: a real etcd and kube-apiserver (built from Go modules) for the suites that must
//!   agree with real Kubernetes.
//! - [`lab`]: the lab (topology, API server, controller, speakers, router), shared by `ferrolb-lab` and
//!   the `e2e_*` tests.
//! - [`process`]: memory and CPU time of a process, from `/proc`.
//! - [`metallb`]: MetalLB's controller and speaker as processes, for the migration test and the
//!   side-by-side bench.
//! - [`frrk8s`]: frr-k8s and FRR per lab node, for MetalLB's frr-k8s mode in the side-by-side
//!   bench.
//! - [`provenance`]: the commit, build and machine a bench's figures come from.
//! - [`skip`]: the one skip every suite uses, a failure under `FERROLB_REQUIRE_BINARIES=1`.
//! - [`tools`]: what the tool binaries (`bgp-probe`, `bfd-probe`, ...) share; [`tool`] finds
//!   one for a suite.

pub mod apiserver;
pub mod backend;
pub mod frrk8s;
pub mod lab;
pub mod metallb;
pub mod netns;
pub mod process;
pub mod provenance;
pub mod realkube;
pub mod skip;
pub mod tools;

use std::path::{Path, PathBuf};

/// `target/<profile>`, where the workspace's binaries are, found from the running test
/// executable (`target/<profile>/deps/NAME-HASH`).
pub fn test_bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// A tool binary of this crate for the suites and benches of other crates (`l2-probe`,
/// `l2-watch`, `l2-flood`, `bgp-probe`, `bfd-probe`): the speaker's own code in small binaries,
/// kept out of the speaker's crate. It is taken from the target directory and profile of the
/// running test or bench, where `cargo test --workspace` (or `cargo build -p ferrolb-tests
/// --bins`, with `--release` for a bench) puts it.
pub fn tool(name: &str) -> String {
    let path = test_bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p ferrolb-tests --bins` (with --release for a bench), \
         or the whole workspace's tests",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// Where a script of this repository puts what it builds for the tests: `$ENV_VAR` when set,
/// else the workspace's `target/NAME` (`scripts/realkube`, `scripts/metallb`,
/// `scripts/guest-kernel`).
pub fn built_dir(env_var: &str, name: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(env_var) {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("target")
        .join(name)
}

/// The first of `parts` (paths below `dir`) that a build script has not made yet, if any: what
/// a suite or bench names when it cannot run (`scripts/metallb`, `scripts/frrk8s`).
pub fn first_missing(dir: &Path, parts: &[&str]) -> Option<PathBuf> {
    parts.iter().map(|p| dir.join(p)).find(|p| !p.exists())
}

/// The version a build script wrote into `dir/VERSION`, or `unknown`.
pub fn built_version(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("VERSION"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
