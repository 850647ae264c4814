//! A day in an hour: `ferrolb_tests::lab::soak` for `FERROLB_SOAK_MINUTES` (60) on the lab,
//! with the release binaries, on the real kube-apiserver unless `FERROLB_APISERVER` says
//! otherwise. Prints the sample table (RSS, file descriptors and tasks of every process, every
//! minute), the faults, the address checks and the trends, and exits 1 on a violation.
//!
//! ```text
//! cargo build --release -p ferrolb-controller -p ferrolb-speaker -p ferrolb-tests
//! cargo bench -p ferrolb-tests --bench soak            # an hour
//! FERROLB_SOAK_MINUTES=10 cargo bench -p ferrolb-tests --bench soak
//! ```

use std::path::PathBuf;
use std::time::Duration;

use ferrolb_tests::backend::BackendKind;
use ferrolb_tests::lab::soak::{self, Growth, SoakPlan};
use ferrolb_tests::lab::{Binaries, Lab, LabConfig, RouterKind};

fn main() {
    ferrolb_tests::provenance::print();
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let minutes: u64 = std::env::var("FERROLB_SOAK_MINUTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    // target/release/deps/soak-HASH
    let dir: PathBuf = std::env::current_exe()
        .expect("bench executable path")
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps")
        .to_path_buf();
    let binaries = Binaries {
        controller: dir.join("ferrolb-controller"),
        speaker: Some(dir.join("ferrolb-speaker")),
        lab: dir.join("ferrolb-lab"),
    };
    for p in [
        &binaries.controller,
        binaries.speaker.as_ref().unwrap(),
        &binaries.lab,
    ] {
        if !p.is_file() {
            eprintln!(
                "soak: {} is missing (cargo build --release -p ferrolb-controller -p ferrolb-speaker -p ferrolb-tests)",
                p.display()
            );
            std::process::exit(1);
        }
    }
    let prefix = ferrolb_tests::netns::unique_prefix("fsk");
    let mut config = LabConfig::new(
        &prefix,
        RouterKind::Bird,
        binaries,
        std::env::temp_dir().join(&prefix),
    );
    // The real kube-apiserver unless FERROLB_APISERVER names the double.
    if std::env::var_os("FERROLB_APISERVER").is_none() {
        config.apiserver = BackendKind::Real;
    }
    let server = config.apiserver.as_str();
    let mut lab = Lab::start(config).unwrap_or_else(|e| panic!("the lab did not start: {e}"));
    lab.wait_for_addresses(Duration::from_secs(60))
        .expect("the lab's own Services have addresses");
    let plan = SoakPlan::over(Duration::from_secs(minutes * 60));
    println!(
        "soak: {minutes} min on {}; a kill every {:?}, a node cut off every {:?} for {:?}, an operation every {:?}",
        server, plan.kill_every, plan.cut_every, plan.cut_for, plan.churn_every
    );
    let report = soak::run(&mut lab, &plan, Growth::default())
        .unwrap_or_else(|e| panic!("the soak could not run: {e}"));
    println!("{}", report.render());
    let violations = report.violations();
    if violations.is_empty() {
        println!("soak: no violation");
    } else {
        println!("soak: {} violations:", violations.len());
        for v in &violations {
            println!("  {v}");
        }
        lab.keep_dir();
        println!("logs kept in {}", lab.dir().display());
        std::process::exit(1);
    }
}
