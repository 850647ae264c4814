//! The prometheus-operator objects: present only when enabled, and alerting on what the issue
//! asks for (pool usage, BGP sessions, addresses nobody announces).

use std::collections::BTreeMap;

use serde_json::Value;

use super::render::{variant, variants};

#[test]
fn monitoring_objects_appear_only_when_enabled() {
    let Some(all) = variants() else { return };
    for (name, objects) in all {
        let kinds: Vec<_> = objects
            .monitoring
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect();
        if name == "monitoring" {
            assert_eq!(kinds, ["PrometheusRule", "ServiceMonitor"], "{name}");
        } else {
            assert!(kinds.is_empty(), "{name} renders {kinds:?}");
        }
    }
}

#[test]
fn alerts_cover_pool_usage_bgp_sessions_and_unannounced_addresses() {
    let Some(objects) = variant("monitoring") else {
        return;
    };
    let rule = objects
        .monitoring
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a rule");
    let alerts: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect();
    let pool: BTreeMap<&str, &str> = alerts
        .iter()
        .filter(|a| a["alert"] == "FerroLBAddressPoolUsageHigh")
        .map(|a| {
            (
                a["labels"]["severity"].as_str().unwrap(),
                a["expr"].as_str().unwrap(),
            )
        })
        .collect();
    for (severity, threshold) in [("info", "75"), ("warning", "85"), ("critical", "95")] {
        let expr = pool
            .get(severity)
            .unwrap_or_else(|| panic!("a {severity} pool alert"));
        assert!(
            expr.contains("ferrolb_address_pool_addresses_in_use"),
            "{expr}"
        );
        assert!(
            expr.contains("ferrolb_address_pool_addresses_total"),
            "{expr}"
        );
        assert!(expr.trim().ends_with(&format!("> {threshold}")), "{expr}");
    }
    let expr = |name: &str| {
        alerts
            .iter()
            .find(|a| a["alert"] == name)
            .and_then(|a| a["expr"].as_str())
            .unwrap_or_else(|| panic!("{name}"))
    };
    assert_eq!(expr("FerroLBBGPSessionDown"), "ferrolb_bgp_session_up == 0");
    let unannounced = expr("FerroLBAddressNotAnnounced");
    assert!(
        unannounced.contains("ferrolb_service_address_assigned") && unannounced.contains("unless")
    );
    for alert in &alerts {
        assert!(alert["annotations"]["summary"].is_string(), "{alert}");
        assert!(
            alert["annotations"]["summary"]
                .as_str()
                .unwrap()
                .contains("{{ $labels."),
            "{alert}"
        );
    }
    let monitor = objects
        .monitoring
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .expect("a monitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
}
