//! End-to-end: the Grafana dashboard (`charts/ferrolb/dashboards/ferrolb.json`) against the real
//! binaries. In the lab (real controller, real speakers, BIRD), once the Services have addresses
//! and every node's BGP session is Established, every metric name the dashboard reads must be on
//! the `/metrics` page of the controller or of a speaker, and every `ferrolb_` name on those
//! pages must be one the code declares (the list the chart suite checks the dashboard against).
//!
//! Three of the dashboard's series exist only after their event: an allocation failure (the
//! test creates a Service asking for a pool that does not exist, as a user's typo would), a
//! failed Service status write of the controller (the test API server fails the next PATCH of a
//! Service with a 500, then the controller's retry succeeds) and a failed status object write
//! of a speaker (the test adds a `BGPPeer` whose password Secret does not exist, so every
//! speaker's `ConfigurationState` changes, and the test API server fails the next writes of
//! `ConfigurationState` objects with a 500; the writers' retries succeed). On a real kube-apiserver (`FERROLB_APISERVER=real`) there
//! is no fault injection, and the status-write series are not required; that is said on the
//! output.
//!
//! Skipped with a printed reason only when not root or when `ferrolb-speaker` is not built.

mod dashboard_support;
mod e2e_support;

use std::collections::BTreeSet;
use std::time::Duration;

use ferrolb_tests::backend::BackendKind;
use ferrolb_tests::lab::{Lab, RouterKind};
use ferrolb_tests::netns::topology::NODE_NAMES;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

const CONVERGE: Duration = Duration::from_secs(30);

/// A Service the test adds, whose first status write the test API server fails.
const PROBE: &str = "dashboard-probe";
/// A Service asking for a pool that does not exist: an allocation failure.
const NO_POOL: &str = "dashboard-no-pool";
/// The series only an injected fault makes appear.
const FAULT_ONLY: &[&str] = &[
    "ferrolb_api_errors_total",
    "ferrolb_status_write_failures_total",
];

/// The `/metrics` pages of the controller and of every node's speaker, with what they are; a
/// process that does not answer gives no page.
fn scrapes(lab: &Lab) -> Vec<(String, String)> {
    let mut pages = Vec::new();
    if let Some(page) = lab.controller_metrics() {
        pages.push(("controller".to_owned(), page));
    }
    for (i, node) in NODE_NAMES.iter().enumerate() {
        if let Some(page) = lab.speaker_metrics(i) {
            pages.push((format!("speaker {node}"), page));
        }
    }
    pages
}

/// Every sample name on `pages`.
fn names_on(pages: &[(String, String)]) -> BTreeSet<String> {
    pages
        .iter()
        .flat_map(|(_, page)| dashboard_support::exposition_names(page))
        .collect()
}

/// A LoadBalancer Service of the lab's `default` namespace in `pool`, IPv4 only.
fn service(name: &str, pool: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"ferrolb.io/address-pool": pool},
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    }))
    .expect("a Service")
}

fn create(lab: &Lab, svc: Service) {
    let client = lab.client();
    lab.block(async move {
        Api::<Service>::namespaced(client, "default")
            .create(&PostParams::default(), &svc)
            .await
    })
    .unwrap_or_else(|e| panic!("creating a Service: {e}"));
}

/// Makes the test API server fail the next `count` `verb` requests on `resource` (plural)
/// with a 500.
fn fail_next(lab: &Lab, resource: &str, verb: &str, count: u32) {
    let client = lab.client();
    let request = axum::http::Request::post(format!(
        "/_fault/fail?resource={resource}&verb={verb}&count={count}"
    ))
    .body(Vec::new())
    .expect("a request");
    lab.block(async move { client.request_text(request).await })
        .unwrap_or_else(|e| panic!("the test API server refused the fault: {e}"));
}

/// Adds a `BGPPeer` whose password Secret does not exist: a problem every speaker and the
/// controller report in their `ConfigurationState`.
fn add_unconfigurable_peer(lab: &Lab) {
    let peer: ferrolb_api::v1beta1::BGPPeer = serde_json::from_value(json!({
        "metadata": {"name": "dashboard-no-secret", "namespace": ferrolb_tests::lab::INSTALL_NS},
        "spec": {"myASN": 64512, "peerASN": 64514, "peerAddress": "10.99.0.251",
                 "passwordSecret": {"name": "no-such-secret"}},
    }))
    .expect("a BGPPeer");
    let client = lab.client();
    lab.block(async move {
        Api::<ferrolb_api::v1beta1::BGPPeer>::namespaced(client, ferrolb_tests::lab::INSTALL_NS)
            .create(&PostParams::default(), &peer)
            .await
    })
    .unwrap_or_else(|e| panic!("creating a BGPPeer: {e}"));
}

#[test]
fn every_metric_the_dashboard_reads_is_on_the_metrics_pages_of_the_running_lab() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let dashboard = dashboard_support::read_dashboard();
    let mut wanted = dashboard_support::dashboard_metric_names(&dashboard);
    assert!(!wanted.is_empty(), "the dashboard reads FerroLB's metrics");

    lab.wait_for_addresses(CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("controller.log", 30)));
    lab.wait(CONVERGE, "every node's BGP session Established", || {
        let sessions = lab.bgp_sessions().ok()?;
        (sessions.len() == NODE_NAMES.len()
            && sessions.iter().all(|(_, st)| st.bgp_state == "Established"))
        .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", lab.bgp_sessions()));

    // The events behind the series that do not exist until they happen.
    let faults = BackendKind::from_env() == BackendKind::Double;
    if faults {
        fail_next(&lab, "services", "patch", 1);
        // The controller writes a ConfigurationState too: enough failures that the speakers
        // get some whichever writes first.
        fail_next(&lab, "configurationstates", "patch", 4);
        add_unconfigurable_peer(&lab);
    } else {
        ferrolb_tests::skip::skip_double_only_part(format!(
            "failing the status writes (no fault injection on a real API server): \
             {FAULT_ONLY:?} not required"
        ));
        wanted.retain(|name| !FAULT_ONLY.contains(&name.as_str()));
    }
    create(&lab, service(PROBE, "lab-l2"));
    // The write that failed is retried: the Service gets its address all the same.
    lab.wait(CONVERGE, "an address on the probe Service", || {
        let services = lab.services().ok()?;
        services
            .iter()
            .any(|s| s.name == PROBE && !s.ingress.is_empty())
            .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("controller.log", 30)));
    create(&lab, service(NO_POOL, "no-such-pool"));

    // Speakers refresh some series on their next tick: poll until every name is there.
    let waited = lab.wait(
        CONVERGE,
        "every metric of the dashboard on a /metrics page",
        || {
            let pages = scrapes(&lab);
            let names = names_on(&pages);
            wanted.is_subset(&names).then_some(pages)
        },
    );
    let pages = waited.unwrap_or_else(|_| scrapes(&lab));
    let names = names_on(&pages);
    let found: Vec<&String> = wanted.intersection(&names).collect();
    let missing: Vec<&String> = wanted.difference(&names).collect();
    println!(
        "metrics the dashboard reads, found on /metrics ({}): {found:?}",
        found.len()
    );
    if !missing.is_empty() {
        println!("metrics the dashboard reads, on no /metrics page: {missing:?}");
    }
    let answered: Vec<&String> = pages.iter().map(|(what, _)| what).collect();
    assert!(
        missing.is_empty(),
        "the dashboard reads metrics that no running binary exports: {missing:?} \
         (pages scraped: {answered:?})"
    );
    assert_eq!(
        answered.len(),
        NODE_NAMES.len() + 1,
        "the controller and every speaker answered: {answered:?}"
    );
    if faults {
        let controller = &pages
            .iter()
            .find(|(what, _)| what == "controller")
            .expect("the controller's page")
            .1;
        assert!(
            controller.lines().any(|l| {
                l.starts_with("ferrolb_api_errors_total{")
                    && l.contains(r#"operation="status_write""#)
            }),
            "the failed status write is counted as one:\n{controller}"
        );
        assert!(
            pages.iter().any(|(what, page)| {
                what.starts_with("speaker ")
                    && page.lines().any(|l| {
                        l.starts_with("ferrolb_status_write_failures_total{")
                            && l.contains(r#"reason="unavailable""#)
                    })
            }),
            "a failed ConfigurationState write is counted under its reason on a speaker's page"
        );
    }

    // The other way round: every FerroLB name a binary exports is in the list built from the
    // code, which the chart suite checks the dashboard against.
    let declared = dashboard_support::declared_metric_names();
    let undeclared: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("ferrolb_") && !declared.contains_key(*n))
        .collect();
    assert!(
        undeclared.is_empty(),
        "names on /metrics that declared_metric_names() does not list: {undeclared:?}"
    );
}
