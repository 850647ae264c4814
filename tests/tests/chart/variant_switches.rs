//! What each documented values variant changes in the rendered binaries.

use super::render::{HelmRun, Objects, flag, only_container, run_render, skip, variant};

#[test]
fn layer2_and_bgp_switches_reach_the_speaker() {
    for (variant_name, l2, bgp) in [
        ("default", "true", "true"),
        ("l2-only", "true", "false"),
        ("bgp-only", "false", "true"),
    ] {
        let Some(objects) = variant(variant_name) else {
            return;
        };
        let speaker = only_container(objects.speaker_pod());
        assert_eq!(flag(speaker, "--enable-l2"), Some(l2), "{variant_name}");
        assert_eq!(flag(speaker, "--enable-bgp"), Some(bgp), "{variant_name}");
    }
}

#[test]
fn proxy_mode_variant_sets_ip_mode_and_logging_on_the_controller_and_the_class_on_both_binaries() {
    let Some(objects) = variant("proxy-mode") else {
        return;
    };
    let controller = only_container(objects.controller_pod());
    assert_eq!(flag(controller, "--default-ip-mode"), Some("Proxy"));
    assert_eq!(
        flag(controller, "--load-balancer-class"),
        Some("example.com/edge")
    );
    assert_eq!(flag(controller, "--ignore-unclassed"), Some(""));
    assert_eq!(flag(controller, "--log-format"), Some("json"));
    let speaker = only_container(objects.speaker_pod());
    assert_eq!(
        flag(speaker, "--load-balancer-class"),
        Some("example.com/edge")
    );
    assert_eq!(
        flag(speaker, "--ignore-unclassed"),
        Some(""),
        "the speaker must skip what the controller skips"
    );
    assert_eq!(flag(speaker, "--log-level"), Some("debug"));
    let Some(defaults) = variant("default") else {
        return;
    };
    let controller = only_container(defaults.controller_pod());
    assert_eq!(flag(controller, "--default-ip-mode"), Some("VIP"));
    assert_eq!(flag(controller, "--ignore-unclassed"), None);
    assert_eq!(
        flag(only_container(defaults.speaker_pod()), "--ignore-unclassed"),
        None
    );
}

#[test]
fn control_plane_toleration_is_added_only_when_asked() {
    let control_plane = |objects: &Objects| {
        objects.speaker_pod().tolerations.iter().flatten().any(|t| {
            t.key.as_deref() == Some("node-role.kubernetes.io/control-plane")
                && t.operator.as_deref() == Some("Exists")
        })
    };
    let Some(defaults) = variant("default") else {
        return;
    };
    assert!(!control_plane(defaults));
    let Some(tolerating) = variant("tolerations") else {
        return;
    };
    assert!(control_plane(tolerating));
    let pod = tolerating.speaker_pod();
    let keys: Vec<_> = pod
        .tolerations
        .iter()
        .flatten()
        .filter_map(|t| t.key.as_deref())
        .collect();
    assert_eq!(
        keys,
        ["node-role.kubernetes.io/control-plane", "example.com/edge"]
    );
    let selector = pod.node_selector.as_ref().expect("a node selector");
    assert_eq!(
        selector.get("example.com/edge").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
}

#[test]
fn disabling_both_layer2_and_bgp_is_refused() {
    let run = run_render(&[
        "--set-json",
        r#"l2={"enabled":false}"#,
        "--set-json",
        r#"bgp={"enabled":false}"#,
    ]);
    match run {
        HelmRun::Refused(why) => assert!(why.contains("enable at least one"), "{why}"),
        HelmRun::Rendered(_) => panic!("a speaker that announces nothing was rendered"),
        HelmRun::Unavailable(why) => {
            skip::<()>(&why);
        }
    }
}
