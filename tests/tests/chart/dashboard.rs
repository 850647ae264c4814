//! The Grafana dashboard: shipped in a ConfigMap for Grafana's sidecar only when enabled, every
//! panel described and backed by PromQL that Prometheus parses (`promtool check rules`), and
//! every metric it reads one that the binaries' code declares.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use regex::Regex;
use serde_json::{Value, json};

use super::NAMESPACE;
use super::dashboard_support::{
    Kind, dashboard_metric_names, declared_metric_names, panels, queries, read_dashboard, rows,
};
use super::render::{HelmRun, parse_objects, render_or_skip, run_render, skip, variants};

/// The sidecar's default label.
const LABEL: (&str, &str) = ("grafana_dashboard", "1");

/// The ConfigMaps of `config_maps` that carry the label `key: value`.
fn labelled<'a>(config_maps: &'a [ConfigMap], key: &str, value: &str) -> Vec<&'a ConfigMap> {
    config_maps
        .iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .is_some_and(|v| v == value)
        })
        .collect()
}

/// The dashboard a ConfigMap carries under `ferrolb.json`.
fn carried_dashboard(config_map: &ConfigMap) -> Value {
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get("ferrolb.json"))
        .expect("the ConfigMap has data key ferrolb.json");
    serde_json::from_str(text).expect("ferrolb.json in the ConfigMap is JSON")
}

#[test]
fn dashboard_configmap_is_rendered_only_by_the_variant_that_enables_it() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        let dashboards = labelled(&objects.config_maps, LABEL.0, LABEL.1);
        if name == "dashboard" {
            assert_eq!(dashboards.len(), 1, "{name}: one dashboard ConfigMap");
            assert_eq!(objects.config_maps.len(), 1, "{name}: no other ConfigMap");
        } else {
            assert!(
                objects.config_maps.is_empty(),
                "{name} (the dashboard is off by default) renders ConfigMaps: {:?}",
                objects
                    .config_maps
                    .iter()
                    .map(|c| &c.metadata.name)
                    .collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn enabled_dashboard_is_one_labelled_configmap_whose_json_has_described_panels_with_queries() {
    let Some(all) = variants() else { return };
    let objects = &all
        .iter()
        .find(|(n, _)| n == "dashboard")
        .expect("a dashboard variant")
        .1;
    let found = labelled(&objects.config_maps, LABEL.0, LABEL.1);
    assert_eq!(found.len(), 1, "exactly one ConfigMap labelled {LABEL:?}");
    let config_map = found[0];
    assert_eq!(
        config_map.metadata.name.as_deref(),
        Some("ferrolb-dashboard")
    );
    assert_eq!(config_map.metadata.namespace.as_deref(), Some(NAMESPACE));
    let labels = config_map.metadata.labels.as_ref().expect("labels");
    assert_eq!(
        labels.get("app.kubernetes.io/part-of").map(String::as_str),
        Some("ferrolb"),
        "the chart's common labels too: {labels:?}"
    );

    let dashboard = carried_dashboard(config_map);
    assert_eq!(
        dashboard,
        read_dashboard(),
        "the ConfigMap carries charts/ferrolb/dashboards/ferrolb.json whole"
    );
    assert_eq!(dashboard["uid"], "ferrolb");
    assert_eq!(dashboard["title"], "FerroLB");
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "a schemaVersion of Grafana 9 or later: {}",
        dashboard["schemaVersion"]
    );
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a `datasource` variable of Prometheus data sources: {variables:?}"
    );

    let shown = panels(&dashboard);
    assert!(shown.len() >= 10, "{} panels", shown.len());
    let mut ids = BTreeSet::new();
    for panel in &shown {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.trim().is_empty(), "a panel without a title: {panel}");
        assert!(ids.insert(panel["id"].as_u64()), "{title}: its id is taken");
        assert!(
            ["timeseries", "stat"].contains(&panel["type"].as_str().unwrap_or_default()),
            "{title}: a timeseries or stat panel, not {}",
            panel["type"]
        );
        let description = panel["description"].as_str().unwrap_or_default();
        assert!(
            description.split_whitespace().count() >= 10,
            "{title}: a description of what it shows and what to do: {description:?}"
        );
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: the panel reads the chosen data source"
        );
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{title}: a target without expr");
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{title}: the target reads the chosen data source"
            );
        }
    }
    for row in rows(&dashboard) {
        assert!(row["title"].as_str().is_some_and(|t| !t.is_empty()));
    }
}

#[test]
fn dashboard_label_and_annotations_follow_the_values_and_a_bad_label_is_refused() {
    let Some(yaml) = render_or_skip(&[
        "--set-json",
        r#"metrics={"dashboard":{"enabled":true,"labelKey":"example.com/dashboard","labelValue":"ferrolb","annotations":{"grafana_folder":"Load balancing"}}}"#,
    ]) else {
        return;
    };
    let objects = parse_objects(&yaml);
    assert!(labelled(&objects.config_maps, LABEL.0, LABEL.1).is_empty());
    let found = labelled(&objects.config_maps, "example.com/dashboard", "ferrolb");
    assert_eq!(found.len(), 1);
    let annotations = found[0].metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations.get("grafana_folder").map(String::as_str),
        Some("Load balancing")
    );
    match run_render(&[
        "--set-json",
        r#"metrics={"dashboard":{"enabled":true,"labelValue":"not a label"}}"#,
    ]) {
        HelmRun::Refused(why) => assert!(why.contains("schema"), "{why}"),
        HelmRun::Rendered(_) => panic!("a label value with spaces was accepted"),
        HelmRun::Unavailable(why) => {
            skip::<()>(&why);
        }
    }
}

/// `expr` with Grafana's variables replaced by values Prometheus parses: the range macros by a
/// duration, the dashboard's own variables (used inside label matchers) by a regex.
fn without_grafana_variables(expr: &str, variables: &[String]) -> String {
    let macros = Regex::new(r"\$\{?__(rate_interval|interval|range)\}?").expect("a valid regex");
    let mut expr = macros.replace_all(expr, "5m").into_owned();
    for name in variables {
        let variable =
            Regex::new(&format!(r"\$(\{{{name}(:[a-z]+)?\}}|{name}\b)")).expect("a valid regex");
        expr = variable.replace_all(&expr, ".*").into_owned();
    }
    expr
}

#[test]
fn every_dashboard_query_parses_as_promql_in_promtool() {
    let dashboard = read_dashboard();
    let variables: Vec<String> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let all = queries(&dashboard);
    assert!(!all.is_empty(), "the dashboard has queries");
    let rules: Vec<Value> = all
        .iter()
        .map(|q| {
            json!({
                "record": format!("ferrolb:dashboard:panel_{}_{}", q.panel_id, q.ref_id),
                "expr": without_grafana_variables(&q.expr, &variables),
            })
        })
        .collect();
    for rule in &rules {
        assert!(
            !rule["expr"].as_str().unwrap_or_default().contains('$'),
            "a Grafana variable this test does not know: {rule}"
        );
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("dashboard-rules.json");
    let groups = json!({"groups": [{"name": "ferrolb-dashboard", "rules": rules}]});
    std::fs::write(&file, groups.to_string()).expect("rules written");
    let output = match Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
    {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return ferrolb_tests::skip::skip(
                "promtool is not installed (apt-get install -y prometheus)",
            )
            .unwrap_or_default();
        }
        Err(err) => panic!("cannot run promtool: {err}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let titles: BTreeMap<String, &str> = all
        .iter()
        .map(|q| {
            (
                format!("panel_{}_{}", q.panel_id, q.ref_id),
                q.panel.as_str(),
            )
        })
        .collect();
    assert!(
        output.status.success(),
        "promtool refused a dashboard query:\n{text}\n(rules named after panels: {titles:?})"
    );
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "promtool checked every query: {text}"
    );
}

#[test]
fn declared_metric_names_carry_the_exposition_suffix_of_their_kind() {
    let declared = declared_metric_names();
    for (name, kind) in [
        // A counter of the controller, a gauge family of the speaker, a counter family of the
        // speaker, a gauge whose registered name ends in `_total`, a collector's gauge.
        ("ferrolb_allocation_failures_total", Kind::Counter),
        ("ferrolb_bgp_session_up", Kind::Gauge),
        ("ferrolb_bfd_downs_total", Kind::Counter),
        ("ferrolb_bgp_announced_prefixes_total", Kind::Gauge),
        ("ferrolb_runtime_tasks", Kind::Gauge),
        ("ferrolb_address_pool_addresses_total", Kind::Gauge),
    ] {
        assert_eq!(
            declared.get(name).map(|d| d.kind),
            Some(kind),
            "{name} as its kind is exposed"
        );
    }
    for not_exposed in [
        "ferrolb_allocation_failures",
        "ferrolb_bgp_session_up_total",
        "ferrolb_bgp_announced_prefixes_total_total",
    ] {
        assert!(
            !declared.contains_key(not_exposed),
            "{not_exposed} is not a name on /metrics"
        );
    }
    let both = &declared["ferrolb_events_dropped_total"].sources;
    assert!(
        both.iter().any(|s| s.starts_with("controller/"))
            && both.iter().any(|s| s.starts_with("speaker/")),
        "both binaries export events_dropped: {both:?}"
    );
}

#[test]
fn every_metric_the_dashboard_reads_is_one_the_binaries_declare() {
    let dashboard = read_dashboard();
    let used = dashboard_metric_names(&dashboard);
    assert!(!used.is_empty(), "the dashboard reads FerroLB's metrics");
    let declared = declared_metric_names();
    let unknown: BTreeMap<&String, Vec<String>> = used
        .iter()
        .filter(|name| !declared.contains_key(*name))
        .map(|name| {
            let panels = queries(&dashboard)
                .into_iter()
                .filter(|q| q.expr.contains(name.as_str()))
                .map(|q| q.panel)
                .collect();
            (name, panels)
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "the dashboard reads metrics no binary exports (name: panels): {unknown:?}\n\
         declared: {:?}",
        declared.keys().collect::<Vec<_>>()
    );
}

#[test]
fn dashboard_covers_what_an_operator_looks_at_first() {
    let dashboard = read_dashboard();
    let exprs: Vec<String> = queries(&dashboard).into_iter().map(|q| q.expr).collect();
    let reads = |needle: &str| exprs.iter().any(|e| e.contains(needle));
    for (what, needle) in [
        (
            "pool addresses in use",
            "ferrolb_address_pool_addresses_in_use",
        ),
        (
            "pool addresses in total",
            "ferrolb_address_pool_addresses_total",
        ),
        ("the leading controller", "ferrolb_controller_leader"),
        ("allocation failures", "ferrolb_allocation_failures_total"),
        ("layer-2 handovers", "ferrolb_layer2_gratuitous_sent_total"),
        ("announced addresses", "ferrolb_service_address_announced"),
        ("BGP sessions", "ferrolb_bgp_session_up"),
        ("BFD sessions", "ferrolb_bfd_session_up"),
        (
            "the controller's status write errors",
            r#"ferrolb_api_errors_total{operation="status_write"}"#,
        ),
        (
            "the speakers' status write errors",
            "ferrolb_status_write_failures_total",
        ),
        ("gossip members", "ferrolb_gossip_members"),
    ] {
        assert!(reads(needle), "no panel shows {what} ({needle})");
    }
    // The pool figures of a standby replica are stale: every query of them keeps the leader's.
    for expr in exprs.iter().filter(|e| e.contains("ferrolb_address_pool_")) {
        assert!(
            expr.contains("ferrolb_controller_leader == 1"),
            "pool figures of the leader only: {expr}"
        );
    }
}
