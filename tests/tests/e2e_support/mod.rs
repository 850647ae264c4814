//! Shared by the `e2e_*` tests: finds the workspace binaries and starts a lab, or says why the
//! test is skipped (not root, or no speaker binary built).
#![allow(dead_code)] // each test file uses a different part

use std::path::PathBuf;

use ferrolb_tests::lab::{Binaries, Lab, LabConfig, RouterKind};
use ferrolb_tests::netns::{self, NetnsError};
use ferrolb_tests::skip::skip;

/// `target/debug` (or whichever profile built this test).
pub fn bin_dir() -> PathBuf {
    ferrolb_tests::test_bin_dir()
}

/// Whether the test can run: root, and the tools the lab needs. Prints why not.
pub fn can_run(router: RouterKind) -> bool {
    match netns::require_root()
        .and_then(|()| netns::require_tools(&ferrolb_tests::lab::required_tools(router)))
    {
        Ok(()) => true,
        Err(e @ NetnsError::NotRoot) => skip::<()>(e).is_some(),
        Err(e) => panic!("{e}"),
    }
}

/// The binaries, or `None` (with the reason printed) when the speaker is not built.
pub fn binaries() -> Option<Binaries> {
    let dir = bin_dir();
    let speaker = dir.join("ferrolb-speaker");
    if !speaker.is_file() {
        return skip(format!(
            "{} is not built (cargo build -p ferrolb-speaker, or run cargo test --workspace)",
            speaker.display()
        ));
    }
    let controller = dir.join("ferrolb-controller");
    assert!(
        controller.is_file(),
        "{} is not built (cargo build -p ferrolb-controller)",
        controller.display()
    );
    Some(Binaries {
        controller,
        speaker: Some(speaker),
        lab: PathBuf::from(env!("CARGO_BIN_EXE_ferrolb-lab")),
    })
}

/// A lab with a unique prefix for this test, or `None` when it must be skipped.
pub fn lab(router: RouterKind) -> Option<Lab> {
    lab_with(router, |_| {})
}

/// [`lab`] with the configuration changed by `configure` first.
pub fn lab_with(router: RouterKind, configure: impl FnOnce(&mut LabConfig)) -> Option<Lab> {
    if !can_run(router) {
        return None;
    }
    let binaries = binaries()?;
    let prefix = netns::unique_prefix("fe2e");
    let dir = std::env::temp_dir().join(&prefix);
    let mut config = LabConfig::new(&prefix, router, binaries, dir);
    // Extra speaker flags, to measure against another setting (the README's baselines:
    // FERROLB_LAB_SPEAKER_ARGS="--bgp-drain-time=0s --l2-handover-time=0s").
    if let Ok(extra) = std::env::var("FERROLB_LAB_SPEAKER_ARGS") {
        config
            .speaker_args
            .extend(extra.split_whitespace().map(str::to_owned));
    }
    configure(&mut config);
    let lab = Lab::start(config).unwrap_or_else(|e| panic!("the lab did not start: {e}"));
    Some(lab)
}

/// Runs the workspace's `ferrolb` binary with `args` against the lab's cluster, in the namespace
/// the lab's API server listens in; panics when it cannot start.
pub fn ferrolb(lab: &Lab, args: &[&str]) -> std::process::Output {
    let binary = bin_dir().join("ferrolb");
    let kubeconfig = format!("KUBECONFIG={}", lab.kubeconfig().display());
    let mut full: Vec<&std::ffi::OsStr> =
        vec!["env".as_ref(), kubeconfig.as_ref(), binary.as_ref()];
    full.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    lab.topo
        .switch
        .exec(&full)
        .expect("target/<profile>/ferrolb runs (cargo build -p ferrolb-cli)")
}
