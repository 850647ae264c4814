use super::fixtures::*;
use super::*;

fn cluster() -> Cluster {
    let mut c = Cluster::new(Scope {
        this_node: "node-a".into(),
        class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
        ignore_unclassed: false,
    });
    c.take_changes();
    c
}

#[test]
fn an_endpointslice_of_a_service_we_do_not_handle_changes_nothing() {
    let mut c = cluster();
    c.service(Update::Apply(cluster_ip_service("default", "internal")));
    c.slice(Update::Apply(slice(
        "default",
        "internal-1",
        "internal",
        &[("node-a", true)],
    )));
    assert!(c.take_changes().is_empty());
    assert_eq!(c.service_count(), 0);
}

#[test]
fn an_endpointslice_change_marks_only_its_service() {
    let mut c = cluster();
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.service(Update::Apply(service(
        "default",
        "api",
        &["10.0.0.2"],
        false,
    )));
    c.take_changes();
    c.slice(Update::Apply(slice(
        "default",
        "web-1",
        "web",
        &[("node-a", true)],
    )));
    let changes = c.take_changes();
    assert_eq!(
        changes.services,
        BTreeSet::from([ServiceKey::new("default", "web")])
    );
    assert!(!changes.config);
    let web = c.service_info(&ServiceKey::new("default", "web")).unwrap();
    assert_eq!(web.endpoints.len(), 1);
}

#[test]
fn a_new_endpointslice_without_endpoints_marks_no_service_but_emptying_one_does() {
    let mut c = cluster();
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.slice(Update::Apply(slice(
        "default",
        "web-lab",
        "web",
        &[("node-a", true)],
    )));
    c.take_changes();
    // kube-controller-manager's own slice for the Service's selector, which selects no Pod.
    c.slice(Update::Apply(slice("default", "web-x7k2p", "web", &[])));
    assert!(c.take_changes().is_empty());
    let web = ServiceKey::new("default", "web");
    assert_eq!(c.service_info(&web).unwrap().endpoints.len(), 1);
    // A slice that loses its endpoints is a change.
    c.slice(Update::Apply(slice("default", "web-lab", "web", &[])));
    assert_eq!(c.take_changes().services, BTreeSet::from([web.clone()]));
    assert!(c.service_info(&web).unwrap().endpoints.is_empty());
}

#[test]
fn a_slice_seen_before_its_service_is_listed_again_when_the_service_arrives() {
    let mut c = cluster();
    let early = slice("default", "web-1", "web", &[("node-b", true)]);
    c.slice(Update::Apply(early.clone()));
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    let web = ServiceKey::new("default", "web");
    // Its endpoints were not kept while nothing said the Service was ours.
    assert!(c.service_info(&web).unwrap().endpoints.is_empty());
    assert_eq!(c.take_refetch(), BTreeSet::from([web.clone()]));
    c.take_changes();
    c.refetched(&web, vec![early]);
    assert_eq!(c.take_changes().services, BTreeSet::from([web.clone()]));
    let info = c.service_info(&web).unwrap();
    assert_eq!(info.endpoints[0].node_name.as_deref(), Some("node-b"));
    assert!(c.take_refetch().is_empty());
}

#[test]
fn a_slice_of_a_service_already_handled_needs_no_list() {
    let mut c = cluster();
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.slice(Update::Apply(slice(
        "default",
        "web-1",
        "web",
        &[("node-b", true)],
    )));
    assert!(c.take_refetch().is_empty());
    let web = c.service_info(&ServiceKey::new("default", "web")).unwrap();
    assert_eq!(web.endpoints.len(), 1);
}

#[test]
fn a_service_that_stops_being_a_load_balancer_drops_its_endpoints_and_is_listed_when_it_comes_back()
{
    let mut c = cluster();
    let web = ServiceKey::new("default", "web");
    let s = slice("default", "web-1", "web", &[("node-b", true)]);
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.slice(Update::Apply(s.clone()));
    c.service(Update::Apply(cluster_ip_service("default", "web")));
    assert!(c.service_info(&web).is_none());
    assert!(c.take_refetch().is_empty());
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    assert_eq!(c.take_refetch(), BTreeSet::from([web.clone()]));
    c.refetched(&web, vec![s]);
    assert_eq!(c.service_info(&web).unwrap().endpoints.len(), 1);
}

#[test]
fn a_listed_slice_older_than_what_the_watch_delivered_or_deleted_since_is_ignored() {
    let mut c = cluster();
    let web = ServiceKey::new("default", "web");
    let old = slice("default", "web-1", "web", &[("node-b", true)]);
    let gone = slice("default", "web-2", "web", &[("node-c", true)]);
    c.slice(Update::Apply(old.clone()));
    c.slice(Update::Apply(gone.clone()));
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    assert_eq!(c.take_refetch(), BTreeSet::from([web.clone()]));
    // Before the list answers, the watch brings a newer web-1 and deletes web-2.
    c.slice(Update::Apply(slice(
        "default",
        "web-1",
        "web",
        &[("node-a", true)],
    )));
    c.slice(Update::Delete(gone.clone()));
    c.refetched(&web, vec![old, gone]);
    let nodes: Vec<_> = c
        .service_info(&web)
        .unwrap()
        .endpoints
        .iter()
        .map(|e| e.node_name.as_deref().unwrap_or_default().to_string())
        .collect();
    assert_eq!(nodes, vec!["node-a".to_string()]);
}

#[test]
fn a_slice_relist_forgets_the_slices_that_are_gone_so_no_list_is_asked_for() {
    let mut c = cluster();
    c.slice(Update::Apply(slice(
        "default",
        "web-1",
        "web",
        &[("node-b", true)],
    )));
    c.slice(Update::Restart);
    c.slice(Update::Synced);
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    assert!(c.take_refetch().is_empty());
}

#[test]
fn a_node_heartbeat_that_changes_nothing_the_planners_read_is_not_a_change() {
    let mut c = cluster();
    c.node(Update::Apply(node("node-a", &[("rack", "1")])));
    assert!(c.take_changes().config);
    let mut again = node("node-a", &[("rack", "1")]);
    again.metadata.resource_version = Some("99".into());
    c.node(Update::Apply(again));
    assert!(c.take_changes().is_empty());
    c.node(Update::Apply(node("node-a", &[("rack", "2")])));
    assert!(c.take_changes().config);
}

#[test]
fn a_pool_status_write_is_not_a_configuration_change() {
    let mut c = cluster();
    c.pool(Update::Apply(pool("public", &["10.0.0.0/24"])));
    assert!(c.take_changes().config);
    let mut with_status = pool("public", &["10.0.0.0/24"]);
    with_status.status = Some(Default::default());
    with_status.metadata.generation = Some(3);
    c.pool(Update::Apply(with_status));
    assert!(c.take_changes().is_empty());
}

#[test]
fn a_relist_removes_the_services_deleted_while_the_watch_was_down() {
    let mut c = cluster();
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.service(Update::Apply(service(
        "default",
        "gone",
        &["10.0.0.2"],
        false,
    )));
    c.take_changes();
    c.service(Update::Restart);
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.service(Update::Synced);
    let changes = c.take_changes();
    assert_eq!(
        changes.services,
        BTreeSet::from([ServiceKey::new("default", "gone")])
    );
    assert_eq!(c.services_at("10.0.0.2".parse().unwrap()).count(), 0);
    assert_eq!(c.services_at("10.0.0.1".parse().unwrap()).count(), 1);
}

#[test]
fn a_service_turned_into_a_cluster_ip_is_forgotten() {
    let mut c = cluster();
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    c.take_changes();
    c.service(Update::Apply(cluster_ip_service("default", "web")));
    assert_eq!(c.take_changes().services.len(), 1);
    assert_eq!(c.service_count(), 0);
    assert_eq!(c.addresses().count(), 0);
}

#[test]
fn with_ignore_unclassed_a_service_without_class_is_not_kept() {
    let mut c = Cluster::new(Scope {
        this_node: "node-a".into(),
        class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
        ignore_unclassed: true,
    });
    c.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.1"],
        false,
    )));
    assert_eq!(c.service_count(), 0);
}

#[test]
fn the_model_is_synced_only_when_every_kind_has_listed() {
    let mut c = cluster();
    c.service(Update::Synced);
    c.slice(Update::Synced);
    c.node(Update::Synced);
    c.speaker_pod(Update::Synced);
    c.pool(Update::Synced);
    c.l2_advertisement(Update::Synced);
    c.bgp_advertisement(Update::Synced);
    c.peer(Update::Synced);
    c.community(Update::Synced);
    c.bfd_profile(Update::Synced);
    assert!(!c.synced());
    assert_eq!(c.unsynced(), ["secrets"]);
    c.secret(Update::Synced);
    assert!(c.synced());
}

#[test]
fn a_label_change_marks_only_its_service_and_the_same_labels_nothing() {
    let mut c = cluster();
    let web =
        |tier: &str| labelled_service("default", "web", &["10.0.0.1"], false, &[("tier", tier)]);
    c.service(Update::Apply(web("public")));
    c.service(Update::Apply(service(
        "default",
        "api",
        &["10.0.0.2"],
        false,
    )));
    c.take_changes();
    c.service(Update::Apply(web("public")));
    assert!(c.take_changes().is_empty());
    c.service(Update::Apply(web("internal")));
    let changes = c.take_changes();
    assert_eq!(
        changes.services,
        BTreeSet::from([ServiceKey::new("default", "web")])
    );
    let rec = c.service_rec(&ServiceKey::new("default", "web")).unwrap();
    assert_eq!(rec.labels.get("tier"), Some("internal"));
}

#[test]
fn a_service_selector_change_is_a_configuration_change() {
    let mut c = cluster();
    c.l2_advertisement(Update::Apply(selective_l2_advertisement("a", &[])));
    c.take_changes();
    c.l2_advertisement(Update::Apply(selective_l2_advertisement(
        "a",
        &[("tier", "public")],
    )));
    assert!(c.take_changes().config);
    assert_eq!(c.config().l2[0].service_selectors.len(), 1);
}

#[test]
fn speaker_pods_ready_dates_become_instants_and_unready_pods_count_for_nothing() {
    let mut cluster = Cluster::new(crate::cluster::Scope {
        this_node: "node-a".into(),
        class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
        ignore_unclassed: false,
    });
    let pod = |name: &str, node: &str, status: &str, at: &str| {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ferrolb-system"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": at}]}
        }))
        .unwrap()
    };
    cluster.speaker_pod(crate::cluster::Update::Apply(pod(
        "s-a",
        "node-a",
        "True",
        "2026-01-01T00:00:00Z",
    )));
    cluster.speaker_pod(crate::cluster::Update::Apply(pod(
        "s-b",
        "node-b",
        "False",
        "2026-01-01T00:00:00Z",
    )));
    let now = std::time::Instant::now();
    let wall = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_610);
    let ready = cluster.speakers_ready_since(now, wall);
    assert_eq!(
        ready.get("node-a").map(|t| now - *t),
        Some(std::time::Duration::from_secs(10))
    );
    assert!(!ready.contains_key("node-b"));
    // A date ahead of this host's clock counts as now.
    let early = wall - std::time::Duration::from_secs(60);
    assert_eq!(
        cluster.speakers_ready_since(now, early).get("node-a"),
        Some(&now)
    );
}
