//! Three minutes of the soak (`ferrolb_tests::lab::soak`; the hour is `cargo bench --bench
//! soak`): Services churned, the layer-2 pool edited, a speaker or the controller killed every
//! 15 s, a node cut off every 30 s, on the lab's API server (the real kube-apiserver in CI,
//! `FERROLB_APISERVER=real`).

mod e2e_support;

use std::time::Duration;

use ferrolb_tests::lab::RouterKind;
use ferrolb_tests::lab::soak::{self, Growth, SoakPlan};

#[test]
fn three_minutes_of_churn_kills_and_cut_off_nodes_move_no_address_unasked_and_grow_nothing() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    lab.wait_for_addresses(Duration::from_secs(30))
        .expect("the lab's own Services have addresses");
    let secs = std::env::var("FERROLB_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180);
    let plan = SoakPlan::over(Duration::from_secs(secs));
    let report = soak::run(&mut lab, &plan, Growth::default())
        .unwrap_or_else(|e| panic!("the soak could not run: {e}"));
    eprintln!("{}", report.render());
    let violations = report.violations();
    if !violations.is_empty() {
        lab.keep_dir();
        eprintln!("the lab's logs are kept in {}", lab.dir().display());
    }
    assert!(
        violations.is_empty(),
        "{}\n{}\n{}",
        violations.join("\n"),
        lab.log_tail("controller.log", 30),
        lab.log_tail("speaker-node-a.log", 30)
    );
    // The churn did what it says: every kind of operation ran, and the faults came.
    for kind in [
        "create",
        "delete",
        "port change",
        "traffic policy change",
        "pool move",
        "pool edit",
    ] {
        assert!(
            report.operations.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {:?}",
            report.operations
        );
    }
    assert!(report.asked_changes > 0, "no pool move changed an address");
    assert!(report.faults.len() >= 20, "{:?}", report.faults);
}
