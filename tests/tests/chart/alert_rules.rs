//! The rendered PrometheusRule run by Prometheus itself: `promtool check rules` parses every
//! expression and template, and `promtool test rules` evaluates each alert's expression over
//! series made for it. promtool comes from Debian's `prometheus` package; without it the test
//! prints why and checks nothing.

use std::process::Command;

use serde_json::{Value, json};

use super::render::variant;

/// Series of a leader controller (`c1`), a standby that still exports stale figures (`c2`) and two
/// speakers, over 15 minutes.
fn input_series() -> Value {
    let series = |name: &str, labels: &str, values: &str| json!({"series": format!("{name}{{{labels}}}"), "values": values});
    json!([
        series(
            "ferrolb_controller_leader",
            r#"job="ferrolb",instance="c1""#,
            "1x15"
        ),
        series(
            "ferrolb_controller_leader",
            r#"job="ferrolb",instance="c2""#,
            "0x15"
        ),
        // Pool blue is 80 % used; the standby's stale 99 % must not count.
        series(
            "ferrolb_address_pool_addresses_total",
            r#"job="ferrolb",instance="c1",pool="blue",family="ipv4""#,
            "100x15"
        ),
        series(
            "ferrolb_address_pool_addresses_in_use",
            r#"job="ferrolb",instance="c1",pool="blue",family="ipv4""#,
            "80x15"
        ),
        series(
            "ferrolb_address_pool_addresses_total",
            r#"job="ferrolb",instance="c2",pool="blue",family="ipv4""#,
            "100x15"
        ),
        series(
            "ferrolb_address_pool_addresses_in_use",
            r#"job="ferrolb",instance="c2",pool="blue",family="ipv4""#,
            "99x15"
        ),
        // Pool red is 96 % used; pool empty has no addresses at all.
        series(
            "ferrolb_address_pool_addresses_total",
            r#"job="ferrolb",instance="c1",pool="red",family="ipv6""#,
            "100x15"
        ),
        series(
            "ferrolb_address_pool_addresses_in_use",
            r#"job="ferrolb",instance="c1",pool="red",family="ipv6""#,
            "96x15"
        ),
        series(
            "ferrolb_address_pool_addresses_total",
            r#"job="ferrolb",instance="c1",pool="empty",family="ipv4""#,
            "0x15"
        ),
        series(
            "ferrolb_address_pool_addresses_in_use",
            r#"job="ferrolb",instance="c1",pool="empty",family="ipv4""#,
            "0x15"
        ),
        // One session down on n1, one up on n2.
        series(
            "ferrolb_bgp_session_up",
            r#"job="speakers",instance="n1",node="n1",peer="router""#,
            "0x15"
        ),
        series(
            "ferrolb_bgp_session_up",
            r#"job="speakers",instance="n2",node="n2",peer="router""#,
            "1x15"
        ),
        // n1's speaker does not answer its scrape; n2's does.
        series(
            "up",
            r#"job="ferrolb-speaker-metrics",instance="n1",node="n1""#,
            "0x15"
        ),
        series(
            "up",
            r#"job="ferrolb-speaker-metrics",instance="n2",node="n2""#,
            "1x15"
        ),
        // web's address is announced by nobody, api's by n2.
        series(
            "ferrolb_service_address_assigned",
            r#"job="ferrolb",instance="c1",namespace="default",service="web",ip="10.99.0.1""#,
            "1x15"
        ),
        series(
            "ferrolb_service_address_assigned",
            r#"job="ferrolb",instance="c1",namespace="default",service="api",ip="10.99.0.2""#,
            "1x15"
        ),
        series(
            "ferrolb_service_address_announced",
            r#"job="speakers",instance="n2",node="n2",namespace="default",service="api",ip="10.99.0.2",protocol="layer2""#,
            "1x15"
        ),
    ])
}

/// What each alert's expression must return at 10 minutes, keyed by the alert's threshold.
fn expected(alert: &str, threshold: Option<u32>) -> Value {
    let blue = json!({"labels": r#"{family="ipv4", instance="c1", job="ferrolb", pool="blue"}"#, "value": 80});
    let red = json!({"labels": r#"{family="ipv6", instance="c1", job="ferrolb", pool="red"}"#, "value": 96});
    match (alert, threshold) {
        ("FerroLBAddressPoolUsageHigh", Some(75)) => json!([blue, red]),
        ("FerroLBAddressPoolUsageHigh", Some(85 | 95)) => json!([red]),
        ("FerroLBBGPSessionDown", None) => json!([{
            "labels": r#"ferrolb_bgp_session_up{instance="n1", job="speakers", node="n1", peer="router"}"#,
            "value": 0
        }]),
        ("FerroLBAddressNotAnnounced", None) => json!([{
            "labels": r#"{ip="10.99.0.1", namespace="default", service="web"}"#,
            "value": 1
        }]),
        ("FerroLBSpeakerDown", None) => json!([{
            "labels": r#"up{instance="n1", job="ferrolb-speaker-metrics", node="n1"}"#,
            "value": 0
        }]),
        other => panic!("no expectation for alert {other:?}"),
    }
}

#[test]
fn alert_expressions_fire_on_exactly_the_series_they_describe() {
    let Some(objects) = variant("monitoring") else {
        return;
    };
    let rule = objects
        .monitoring
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a rule");
    let dir = std::env::temp_dir().join(format!("ferrolb-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let rules = dir.join("rules.json");
    std::fs::write(&rules, rule["spec"].to_string()).expect("rules written");

    let mut tests = Vec::new();
    for alert in rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        let name = alert["alert"].as_str().expect("an alert name");
        let expr = alert["expr"].as_str().expect("an expression");
        let threshold = expr
            .trim()
            .rsplit_once("> ")
            .and_then(|(_, t)| t.trim().parse().ok());
        tests.push(
            json!({"expr": expr, "eval_time": "10m", "exp_samples": expected(name, threshold)}),
        );
    }
    let suite = json!({
        "rule_files": ["rules.json"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series(), "promql_expr_test": tests}],
    });
    let suite_file = dir.join("tests.json");
    std::fs::write(&suite_file, suite.to_string()).expect("tests written");

    let run = |args: &[&str]| {
        Command::new("promtool")
            .current_dir(&dir)
            .args(args)
            .output()
    };
    let check = match run(&["check", "rules", "rules.json"]) {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let _ = std::fs::remove_dir_all(&dir);
            return ferrolb_tests::skip::skip(
                "promtool is not installed (apt-get install -y prometheus)",
            )
            .unwrap_or_default();
        }
        Err(err) => panic!("cannot run promtool: {err}"),
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        check.status.success(),
        "promtool check rules:\n{}",
        text(&check)
    );
    let test = run(&["test", "rules", "tests.json"]).expect("promtool runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        test.status.success(),
        "promtool test rules:\n{}",
        text(&test)
    );
}
