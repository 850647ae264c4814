//! The controller's `ConfigurationState` as a user reads it: `Invalid` with a summary of what
//! cannot take effect, `Valid` once it is fixed, and no write while nothing changes.

mod support;

use std::time::Duration;

use ferrolb_api::names;
use ferrolb_api::v1beta1::{
    CONTROLLER_OBJECT, ConfigurationResult, ConfigurationState, IPAddressPool, L2Advertisement,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use support::*;

/// Waits until the controller's object says `result`, and returns it.
async fn wait_for_result(cluster: &Cluster, result: ConfigurationResult) -> ConfigurationState {
    let api = Api::<ConfigurationState>::namespaced(cluster.client(), NS);
    eventually(
        Duration::from_secs(20),
        &format!("the controller's ConfigurationState to be {result:?}"),
        || {
            let api = api.clone();
            async move {
                let o = api.get(CONTROLLER_OBJECT).await.ok()?;
                (o.status.as_ref()?.result == result).then_some(o)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_pool_makes_the_configuration_invalid_until_the_overlap_is_removed() {
    let cluster = Cluster::start().await;
    cluster.create_pool("older", &["10.99.30.0/28"], None).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creationTimestamp has 1 s resolution
    cluster.create_pool("newer", &["10.99.30.0/24"], None).await;
    let _controller = cluster.spawn_controller("c1");

    let state = wait_for_result(&cluster, ConfigurationResult::Invalid).await;
    let status = state.status.unwrap();
    assert!(
        status
            .error_summary
            .starts_with("IPAddressPool newer: pool `newer` overlaps pool `older`"),
        "{}",
        status.error_summary
    );
    assert_eq!(
        state
            .metadata
            .labels
            .unwrap_or_default()
            .get(names::COMPONENT_TYPE_LABEL)
            .map(String::as_str),
        Some("controller")
    );
    let c = &status.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Valid", "False", "ConfigurationError")
    );

    Api::<IPAddressPool>::namespaced(cluster.client(), NS)
        .patch(
            "newer",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"addresses": ["10.99.31.0/24"]}})),
        )
        .await
        .unwrap();
    let state = wait_for_result(&cluster, ConfigurationResult::Valid).await;
    let status = state.status.unwrap();
    assert_eq!(status.error_summary, "", "the old summary is gone");
    assert_eq!(status.conditions[0].status, "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_several_objects_are_summed_up_sorted_by_kind_and_name() {
    let cluster = Cluster::start().await;
    cluster
        .create_bgp_peer(
            "tor",
            serde_json::json!({"passwordSecret": {"name": "md5"}}),
        )
        .await;
    let l2: L2Advertisement = serde_json::from_value(serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": {"name": "lan", "namespace": NS},
        "spec": {"ipAddressPools": ["missing"]},
    }))
    .unwrap();
    Api::<L2Advertisement>::namespaced(cluster.client(), NS)
        .create(&PostParams::default(), &l2)
        .await
        .unwrap();
    let _controller = cluster.spawn_controller("c1");

    let state = wait_for_result(&cluster, ConfigurationResult::Invalid).await;
    let summary = state.status.unwrap().error_summary;
    let entries: Vec<&str> = summary.split("; ").collect();
    assert!(
        entries[0].starts_with("BGPPeer tor: BGPPeer `tor` refers to Secret `md5`"),
        "{summary}"
    );
    assert!(
        entries
            .iter()
            .any(|e| e
                .starts_with("L2Advertisement lan: L2Advertisement `lan` names pool `missing`")),
        "{summary}"
    );
    let bgp = summary.find("BGPPeer tor").unwrap();
    let lan = summary.find("L2Advertisement lan").unwrap();
    assert!(bgp < lan, "{summary}");
}

/// Writes (`PATCH`, create) of the controller's `ConfigurationState` the server has logged.
fn state_writes(cluster: &Cluster) -> usize {
    cluster
        .server
        .request_log()
        .iter()
        .filter(|r| {
            r.resource.as_deref() == Some("configurationstates")
                && matches!(r.method.as_str(), "PATCH" | "POST" | "PUT")
        })
        .count()
}

/// Whether the server has logged the write of pool `name`'s status.
fn pool_status_written(cluster: &Cluster, name: &str) -> bool {
    cluster.server.request_log().iter().any(|r| {
        r.resource.as_deref() == Some("ipaddresspools")
            && r.subresource.as_deref() == Some("status")
            && r.name.as_deref() == Some(name)
            && r.method == "PATCH"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_change_that_keeps_it_valid_writes_nothing() {
    let cluster = Cluster::start().await;
    cluster.create_pool("blue", &["10.99.32.0/28"], None).await;
    let _controller = cluster.spawn_controller("c1");
    wait_for_result(&cluster, ConfigurationResult::Valid).await;
    eventually(
        Duration::from_secs(20),
        "blue's status write in the log",
        || {
            let written = pool_status_written(&cluster, "blue");
            async move { written.then_some(()) }
        },
    )
    .await;
    let before = state_writes(&cluster);
    assert!(before >= 1, "the first pass wrote the object");

    cluster.create_pool("green", &["10.99.33.0/28"], None).await;
    // The green pool's condition is written after the summary, in the same pass: once its
    // write is in the log, a write of the summary by that pass would be too.
    eventually(
        Duration::from_secs(20),
        "green's status write in the log",
        || {
            let written = pool_status_written(&cluster, "green");
            async move { written.then_some(()) }
        },
    )
    .await;
    assert_eq!(
        state_writes(&cluster),
        before,
        "the ConfigurationState was written again with nothing changed"
    );
}
