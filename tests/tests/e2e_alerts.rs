//! The chart's alerts on a real Prometheus: Debian's `prometheus` scrapes the lab's controller
//! and speakers (as the chart's ServiceMonitor would) and evaluates the chart's PrometheusRule,
//! rendered by real Helm with every `for:` at 5 s. Each alert is made to fire by the fault it
//! describes, and must fire within its `for:` plus two scrape intervals (plus one evaluation,
//! and the time the fault takes to show in a metric, both measured and printed), then resolve
//! once the fault is repaired.

mod e2e_support;

use std::time::{Duration, Instant};

use ferrolb_tests::lab::prometheus::{Prometheus, RulesError, chart_rules};
use ferrolb_tests::lab::{INSTALL_NS, Lab, RouterKind, manifests};
use serde_json::{Value, json};

/// Scrape and evaluation interval.
const SCRAPE: Duration = Duration::from_secs(1);
/// Every alert's `for:`.
const FOR: Duration = Duration::from_secs(5);
/// How long to wait for anything.
const LIMIT: Duration = Duration::from_secs(60);

/// The chart's rules with every `for:` at [`FOR`]; `None` (after saying why) when Helm's Python
/// package is missing.
fn rules() -> Option<Value> {
    match chart_rules(&format!("{}s", FOR.as_secs())) {
        Ok(rules) => Some(rules),
        Err(RulesError::NoHelm(why)) => ferrolb_tests::skip::skip(why),
        Err(RulesError::Refused(why)) => panic!("helm: {why}"),
    }
}

/// Waits until alert `name` (with `labels` among its labels) is firing (`firing`), or until no
/// such alert is pending or firing (`!firing`); returns how long that took from `since`.
fn alert(
    p: &Prometheus,
    name: &str,
    labels: &[(&str, &str)],
    firing: bool,
    since: Instant,
) -> Duration {
    let deadline = Instant::now() + LIMIT;
    loop {
        let alerts = p.alerts().unwrap_or_default();
        let matching = |a: &&ferrolb_tests::lab::prometheus::ActiveAlert| {
            a.name == name
                && labels
                    .iter()
                    .all(|(k, v)| a.labels.get(*k) == Some(&json!(v)))
        };
        let done = if firing {
            alerts.iter().filter(matching).any(|a| a.state == "firing")
        } else {
            !alerts.iter().any(|a| matching(&a))
        };
        if done {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{name} {labels:?}: not {} within {LIMIT:?}; active: {alerts:#?}\n{}",
            if firing { "firing" } else { "resolved" },
            p.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn firing(p: &Prometheus, name: &str, labels: &[(&str, &str)], since: Instant) -> Duration {
    alert(p, name, labels, true, since)
}

fn resolved(p: &Prometheus, name: &str, labels: &[(&str, &str)], since: Instant) -> Duration {
    alert(p, name, labels, false, since)
}

/// Waits until `query` (an instant PromQL query) returns `value`; returns when.
fn until(p: &Prometheus, query: &str, value: f64) -> Instant {
    let deadline = Instant::now() + LIMIT;
    while p.query(query) != Some(value) {
        assert!(
            Instant::now() < deadline,
            "{query} never became {value}: {:?}",
            p.query(query)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Instant::now()
}

/// `ferrolb explain` against the lab, for a failure's message.
fn explain(lab: &Lab, args: &[&str]) -> String {
    let out = e2e_support::ferrolb(lab, args);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn apply(lab: &Lab, docs: Vec<Value>) {
    let client = lab.client();
    lab.block(async move { manifests::server_side_apply(&client, &docs, "e2e-alerts").await })
        .expect("applied");
}

fn delete(lab: &Lab, api_version: &str, kind: &str, plural: &str, ns: &str, names: Vec<String>) {
    let client = lab.client();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        plural,
    );
    let ns = ns.to_owned();
    lab.block(async move {
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::namespaced_with(client, &ns, &ar);
        for name in names {
            api.delete(&name, &Default::default()).await?;
        }
        Ok::<(), kube::Error>(())
    })
    .expect("deleted");
}

/// One line of the timing table: what, when it fired (from the fault), the bound, when the
/// metric showed the fault, and when it resolved after the repair.
fn report(what: &str, fired: Duration, shown: Duration, resolved: Duration) {
    let bound = FOR + 2 * SCRAPE + SCRAPE + shown;
    eprintln!(
        "ALERT {what}: firing {:.1} s after the fault (the metric showed it at {:.1} s; bound: for {} s + 2 scrapes + 1 evaluation + that = {:.1} s); resolved {:.1} s after the repair",
        fired.as_secs_f64(),
        shown.as_secs_f64(),
        FOR.as_secs(),
        bound.as_secs_f64(),
        resolved.as_secs_f64()
    );
    assert!(
        fired <= bound,
        "{what}: fired after {fired:?}, over the bound {bound:?}"
    );
    assert!(fired >= FOR, "{what}: fired before its for: ({fired:?})");
}

#[test]
fn every_alert_of_the_chart_fires_on_its_fault_within_its_for_and_resolves_after_the_repair() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let Some(rules) = rules() else { return };
    let p = Prometheus::start(&lab, SCRAPE, &rules, &lab.dir().join("prometheus"))
        .unwrap_or_else(|e| panic!("{e}"));
    lab.wait_for_addresses(LIMIT).expect("addresses");
    // Everything in order first: every target up, every session up, nothing active.
    until(&p, "sum(up)", 4.0);
    until(&p, "sum(ferrolb_bgp_session_up)", 3.0);
    // Addresses are announced a few seconds after the speakers start (they join first).
    let settled = Instant::now();
    while !p.alerts().unwrap_or_default().is_empty() {
        assert!(
            settled.elapsed() < LIMIT,
            "alerts still active {LIMIT:?} after start: {:#?}",
            p.alerts()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let quiet = Instant::now();
    while quiet.elapsed() < FOR + 2 * SCRAPE {
        let alerts = p.alerts().unwrap_or_default();
        assert!(alerts.is_empty(), "alerts with nothing wrong: {alerts:#?}");
        std::thread::sleep(SCRAPE);
    }

    // 3. An address nobody announces: a Service in a pool no advertisement covers.
    let t = Instant::now();
    apply(
        &lab,
        vec![
            json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
                   "metadata": {"name": "unadvertised", "namespace": INSTALL_NS},
                   "spec": {"addresses": ["10.99.9.0/30"]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "dark", "namespace": "default",
                                "annotations": {"ferrolb.io/address-pool": "unadvertised"}},
                   "spec": {"type": "LoadBalancer", "ipFamilies": ["IPv4"],
                            "ipFamilyPolicy": "SingleStack",
                            "ports": [{"port": 80, "protocol": "TCP"}]}}),
        ],
    );
    let assigned = lab.wait(LIMIT, "an address for Service dark", || {
        lab.services()
            .ok()?
            .into_iter()
            .find(|s| s.name == "dark" && !s.ingress.is_empty())
    });
    if let Err(e) = assigned {
        panic!(
            "{e}:\n{}",
            explain(&lab, &["explain", "-n", "default", "dark"])
        );
    }
    let shown = until(
        &p,
        "count(ferrolb_service_address_assigned{service=\"dark\"})",
        1.0,
    ) - t;
    let fired = firing(&p, "FerroLBAddressNotAnnounced", &[("service", "dark")], t);
    let t = Instant::now();
    delete(
        &lab,
        "v1",
        "Service",
        "services",
        "default",
        vec!["dark".into()],
    );
    let back = resolved(&p, "FerroLBAddressNotAnnounced", &[("service", "dark")], t);
    report(
        "FerroLBAddressNotAnnounced (Service dark)",
        fired,
        shown,
        back,
    );

    // 1. node-a's BGP session cut: BGP and BFD dropped between it and the router.
    let cut = |on: bool| {
        let op = if on { "-I" } else { "-D" };
        for (proto, port) in [("tcp", "179"), ("udp", "3784")] {
            for dir in ["--dport", "--sport"] {
                lab.topo
                    .node(0)
                    .exec_ok(&[
                        "iptables", op, "OUTPUT", "-p", proto, dir, port, "-j", "DROP",
                    ])
                    .expect("iptables");
            }
        }
    };
    let t = Instant::now();
    cut(true);
    let shown = until(&p, "ferrolb_bgp_session_up{node=\"node-a\"}", 0.0) - t;
    let fired = firing(&p, "FerroLBBGPSessionDown", &[("node", "node-a")], t);
    let t = Instant::now();
    cut(false);
    let back = resolved(&p, "FerroLBBGPSessionDown", &[("node", "node-a")], t);
    report(
        "FerroLBBGPSessionDown (node-a's session cut)",
        fired,
        shown,
        back,
    );

    // 2. Pool lab-l2 exhausted: its IPv4 addresses all taken by new Services.
    let fill: Vec<String> = (0..7).map(|i| format!("fill-{i}")).collect();
    let t = Instant::now();
    apply(
        &lab,
        fill.iter()
            .map(|name| {
                json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": name, "namespace": "default",
                                    "annotations": {"ferrolb.io/address-pool": "lab-l2"}},
                       "spec": {"type": "LoadBalancer", "ipFamilies": ["IPv4"],
                                "ipFamilyPolicy": "SingleStack",
                                "ports": [{"port": 80, "protocol": "TCP"}]}})
            })
            .collect(),
    );
    let full = "ferrolb_address_pool_addresses_in_use{pool=\"lab-l2\",family=\"ipv4\"} \
                / ferrolb_address_pool_addresses_total{pool=\"lab-l2\",family=\"ipv4\"}";
    let shown = until(&p, full, 1.0) - t;
    let mut fired = Duration::ZERO;
    for severity in ["info", "warning", "critical"] {
        fired = fired.max(firing(
            &p,
            "FerroLBAddressPoolUsageHigh",
            &[("pool", "lab-l2"), ("severity", severity)],
            t,
        ));
    }
    let t = Instant::now();
    delete(&lab, "v1", "Service", "services", "default", fill);
    let back = resolved(&p, "FerroLBAddressPoolUsageHigh", &[("pool", "lab-l2")], t);
    report(
        "FerroLBAddressPoolUsageHigh info, warning and critical (lab-l2 full)",
        fired,
        shown,
        back,
    );

    // 4. node-c's speaker killed.
    let t = Instant::now();
    lab.kill_speaker(2);
    let shown = until(&p, "up{node=\"node-c\"}", 0.0) - t;
    let fired = firing(&p, "FerroLBSpeakerDown", &[("node", "node-c")], t);
    let t = Instant::now();
    lab.start_speaker(2).expect("node-c's speaker starts again");
    let back = resolved(&p, "FerroLBSpeakerDown", &[("node", "node-c")], t);
    report(
        "FerroLBSpeakerDown (node-c's speaker killed)",
        fired,
        shown,
        back,
    );

    // Every alert of the chart fired in one of the faults above.
    let names: std::collections::BTreeSet<&str> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "FerroLBAddressNotAnnounced",
            "FerroLBAddressPoolUsageHigh",
            "FerroLBBGPSessionDown",
            "FerroLBSpeakerDown"
        ]
        .into(),
        "an alert of the chart is not exercised here"
    );
}
