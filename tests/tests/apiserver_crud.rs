//! Conformance: create/get/update/patch/delete rules, driven through kube-rs and raw HTTP.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use serde_json::{Value, json};

fn lb_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn create_fills_service_defaults_and_allocates_cluster_ip_and_node_port() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let svc = api
        .create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let spec = svc.spec.unwrap();
    let ip: std::net::Ipv4Addr = spec.cluster_ip.as_deref().unwrap().parse().unwrap();
    if c.is_double() {
        assert!(
            ip.octets()[..3] == [10, 0, 0],
            "cluster IP {ip} comes from the double's 10.0.0.0/24"
        );
    }
    assert_eq!(spec.cluster_ips.unwrap(), vec![ip.to_string()]);
    assert_eq!(spec.ip_families.unwrap(), vec!["IPv4"]);
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.allocate_load_balancer_node_ports, Some(true));
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert!((30000..=32767).contains(&port.node_port.unwrap()));
    assert!(
        svc.metadata.generation.is_none(),
        "Services carry no generation"
    );
    assert!(
        svc.status.unwrap().load_balancer.is_some(),
        "status.loadBalancer is always present"
    );
}

#[tokio::test]
async fn update_with_stale_resource_version_is_409() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let created = api
        .create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let mut newer = created.clone();
    newer
        .metadata
        .labels
        .get_or_insert_default()
        .insert("step".into(), "1".into());
    api.replace("lb1", &PostParams::default(), &newer)
        .await
        .unwrap();
    let mut stale = created;
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("step".into(), "2".into());
    let status = api_error(
        api.replace("lb1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(status.details.unwrap().kind, "services");
}

#[tokio::test]
async fn get_of_a_missing_object_is_404_with_a_status_body() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/{ns}/services/nope"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["kind"], "Status");
    assert_eq!(r.body["reason"], "NotFound");
    assert_eq!(r.body["message"], "services \"nope\" not found");
    assert_eq!(
        r.body["details"],
        json!({"name": "nope", "kind": "services"})
    );
}

#[tokio::test]
async fn create_of_an_existing_name_is_409_already_exists() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let status = api_error(
        api.create(&PostParams::default(), &lb_service("lb1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_404_naming_the_namespace() {
    let c = support::cluster().await;
    let r = c
        .json(
            "POST",
            "/api/v1/namespaces/does-not-exist/services",
            Some(serde_json::to_value(lb_service("x")).unwrap()),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body["details"],
        json!({"name": "does-not-exist", "kind": "namespaces"})
    );
}

#[tokio::test]
async fn service_status_writes_keep_spec_but_apply_labels_and_main_writes_keep_status() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    // kube-apiserver's Service status strategy resets only `spec`: metadata in a status write
    // is applied (custom resources differ: see the Gadget test below).
    let status_patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10", "ipMode": "VIP"}]}},
        "metadata": {"labels": {"applied": "yes"}, "annotations": {"note": "kept"}},
        "spec": {"ports": [{"port": 81, "protocol": "TCP"}]}});
    let after = api
        .patch_status("lb1", &PatchParams::default(), &Patch::Merge(&status_patch))
        .await
        .unwrap();
    assert_eq!(after.metadata.labels.unwrap()["applied"], "yes");
    assert_eq!(after.metadata.annotations.unwrap()["note"], "kept");
    let ports = after.spec.unwrap().ports.unwrap();
    assert_eq!(ports[0].port, 80, "a status write does not change spec");
    let main_patch = json!({"metadata": {"labels": {"x": "1"}}, "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}}});
    let after = api
        .patch("lb1", &PatchParams::default(), &Patch::Merge(&main_patch))
        .await
        .unwrap();
    let ingress = after
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(
        ingress[0].ip.as_deref(),
        Some("192.0.2.10"),
        "a main-resource write leaves status as it was"
    );
    assert_eq!(after.metadata.labels.unwrap()["x"], "1");
}

#[tokio::test]
async fn ip_mode_without_ip_is_forbidden() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let p = json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example", "ipMode": "VIP"}]}}});
    let status = api_error(
        api.patch_status("lb1", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let cause = &status.details.unwrap().causes[0];
    assert_eq!(cause.field, "status.loadBalancer.ingress[0].ipMode");
    assert_eq!(cause.reason, "FieldValueForbidden");
}

#[tokio::test]
async fn load_balancer_class_may_not_change_once_set() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let p = json!({"spec": {"loadBalancerClass": "ferrolb.io/lb"}});
    let status = api_error(
        api.patch("lb1", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.ends_with(
            "spec.loadBalancerClass: Invalid value: \"ferrolb.io/lb\": may not change once set"
        ),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn type_change_to_cluster_ip_drops_node_ports_and_back_allocates_new_ones() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let to_cip = json!({"spec": {"type": "ClusterIP"}});
    let cip = api
        .patch("lb1", &PatchParams::default(), &Patch::Merge(&to_cip))
        .await
        .unwrap();
    let spec = cip.spec.unwrap();
    assert!(spec.ports.unwrap()[0].node_port.is_none());
    assert!(
        spec.external_traffic_policy.is_none() && spec.allocate_load_balancer_node_ports.is_none()
    );
    let back = json!({"spec": {"type": "LoadBalancer"}});
    let lb = api
        .patch("lb1", &PatchParams::default(), &Patch::Merge(&back))
        .await
        .unwrap();
    assert!(lb.spec.unwrap().ports.unwrap()[0].node_port.is_some());
}

#[tokio::test]
async fn lease_update_without_resource_version_is_422() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Lease> = Api::namespaced(c.client(), &ns);
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap();
    let mut created = api.create(&PostParams::default(), &lease).await.unwrap();
    created.metadata.resource_version = None;
    let status = api_error(
        api.replace("leader", &PostParams::default(), &created)
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.details.unwrap().causes[0].field,
        "metadata.resourceVersion"
    );
}

#[tokio::test]
async fn lease_micro_time_without_six_fractional_digits_is_400() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"renewTime": "2026-01-01T00:00:00Z"}});
    let r = c
        .json(
            "POST",
            &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            Some(body),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["reason"], "BadRequest");
}

#[tokio::test]
async fn delete_with_a_finalizer_marks_the_object_and_removing_it_deletes() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let mut svc = lb_service("lb1");
    svc.metadata.finalizers = Some(vec!["ferrolb.io/cleanup".into()]);
    api.create(&PostParams::default(), &svc).await.unwrap();
    let first = api
        .delete("lb1", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(first.metadata.deletion_timestamp.is_some());
    let again = api
        .delete("lb1", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.metadata.resource_version, first.metadata.resource_version,
        "a repeated delete writes nothing"
    );
    let add = json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "other.example/x"}]);
    let status = api_error(
        api.patch(
            "lb1",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(add).unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status.code, 422, "no new finalizers during deletion");
    let remove = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "ferrolb.io/cleanup"}, {"op": "remove", "path": "/metadata/finalizers/0"}]);
    api.patch(
        "lb1",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
    )
    .await
    .unwrap();
    assert!(api.get_opt("lb1").await.unwrap().is_none());
}

#[tokio::test]
async fn strategic_merge_patch_merges_service_ports_by_port() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let mut svc = lb_service("lb1");
    svc.spec.as_mut().unwrap().ports = Some(
        serde_json::from_value(
            json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
        )
        .unwrap(),
    );
    let before = api.create(&PostParams::default(), &svc).await.unwrap();
    let node_port_80 = before.spec.unwrap().ports.unwrap()[0].node_port;
    let p = json!({"spec": {"ports": [{"port": 80, "targetPort": 9000}, {"name": "alt", "port": 8443}]}});
    let after = api
        .patch("lb1", &PatchParams::default(), &Patch::Strategic(&p))
        .await
        .unwrap();
    let ports = after.spec.unwrap().ports.unwrap();
    let order: Vec<i32> = ports.iter().map(|p| p.port).collect();
    assert_eq!(order, vec![80, 8443, 443]);
    assert_eq!(
        ports[0].node_port, node_port_80,
        "the merged item keeps its nodePort"
    );
    assert_eq!(ports[0].name.as_deref(), Some("http"));
}

#[tokio::test]
async fn merge_patch_with_a_stale_resource_version_is_409() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let p = json!({"metadata": {"resourceVersion": "1", "labels": {"x": "1"}}});
    let status = api_error(
        api.patch("lb1", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn node_is_cluster_scoped_and_a_namespaced_path_is_404() {
    let c = support::cluster().await;
    let nodes: Api<Node> = Api::all(c.client());
    let name = format!("node-{}", rand_suffix());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    let taints = created.spec.unwrap().taints.unwrap();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/not-ready"),
        "admission adds the not-ready taint"
    );
    let r = c
        .json(
            "GET",
            &format!("/api/v1/namespaces/default/nodes/{name}"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    let deleted = c
        .json("DELETE", &format!("/api/v1/nodes/{name}"), None)
        .await;
    assert_eq!(
        (
            deleted.body["kind"].as_str(),
            deleted.body["status"].as_str()
        ),
        (Some("Status"), Some("Success"))
    );
}

fn rand_suffix() -> String {
    format!(
        "{:08x}",
        std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
    )
}

#[tokio::test]
async fn kube_discovery_finds_core_and_custom_resources() {
    let c = support::cluster().await;
    let discovery = Discovery::new(c.client()).run().await.unwrap();
    let (svc, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Service"))
        .expect("services are discovered");
    assert_eq!(svc.plural, "services");
    assert_eq!(caps.scope, Scope::Namespaced);
    let (gadget, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("test.ferrolb.io", "v1", "Gadget"))
        .expect("CRDs are discovered");
    let api: Api<DynamicObject> = Api::default_namespaced_with(c.client(), &gadget);
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn unknown_group_is_plain_text_404_and_unknown_resource_is_status_404() {
    let c = support::cluster().await;
    let r = c
        .json(
            "GET",
            "/apis/nonexistent.example.io/v1/namespaces/default/things",
            None,
        )
        .await;
    assert_eq!((r.status, r.text.as_str()), (404, "404 page not found\n"));
    let r = c
        .json("GET", "/api/v1/namespaces/default/bogus", None)
        .await;
    assert_eq!(
        (r.status, &r.body["reason"]),
        (404, &Value::from("NotFound"))
    );
    let r = c
        .json(
            "POST",
            "/api/v1/namespaces/default/services/x",
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn objects_whose_owner_is_deleted_are_garbage_collected() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let owner = api
        .create(&PostParams::default(), &lb_service("owner"))
        .await
        .unwrap();
    let mut child = lb_service("child");
    child.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    api.create(&PostParams::default(), &child).await.unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if api.get_opt("child").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "the owned Service was collected");
}

#[tokio::test]
async fn deleting_a_namespace_deletes_what_it_contains() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.create(&PostParams::default(), &lb_service("lb1"))
        .await
        .unwrap();
    let r = c
        .json("DELETE", &format!("/api/v1/namespaces/{ns}"), None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"]["phase"], "Terminating");
    let mut gone = false;
    for _ in 0..300 {
        let got = c
            .json("GET", &format!("/api/v1/namespaces/{ns}"), None)
            .await;
        if got.status == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "the namespace goes away");
    assert!(api.get_opt("lb1").await.unwrap().is_none());
}

#[tokio::test]
async fn a_crd_created_through_the_api_is_served_until_it_is_deleted() {
    let c = support::cluster().await;
    // A group of its own, so reruns against one real cluster do not meet a CRD left behind.
    let group = format!("dyn{}.ferrolb.io", std::process::id());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("things.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    });
    let r = c
        .json(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some(crd),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.body["status"]["conditions"],
        Value::Null,
        "Established comes later"
    );
    let thing = json!({"apiVersion": format!("{group}/v1"), "kind": "Thing", "metadata": {"name": "t1"}, "spec": {"a": 1}});
    // kube-apiserver serves the new resource a moment after the CRD is created (404 until then),
    // as `kubectl wait --for condition=established` expects: retry until it is served.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    let r = loop {
        let r = c
            .json(
                "POST",
                &format!("/apis/{group}/v1/namespaces/default/things"),
                Some(thing.clone()),
            )
            .await;
        if r.status != 404 || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(r.status, 201, "{}", r.text);
    let crd = c
        .json(
            "GET",
            &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.{group}"),
            None,
        )
        .await;
    let established = crd.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established);
    let r = c
        .json(
            "DELETE",
            &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.{group}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    // The CRD's cleanup finalizer deletes the instances first; then the resource is gone.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = c
            .json(
                "GET",
                &format!("/apis/{group}/v1/namespaces/default/things/t1"),
                None,
            )
            .await;
        if r.status == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still served 30 s after the CRD was deleted: {}",
            r.text
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn unknown_service_fields_are_dropped_with_a_warning_and_refused_when_strict() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crud").await;
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "typo"},
                      "spec": {"type": "LoadBalancer", "loadBalancerIp": "192.0.2.1", "ports": [{"port": 80}]}});
    let path = format!("/api/v1/namespaces/{ns}/services");
    let r = c
        .json(
            "POST",
            &format!("{path}?fieldValidation=Strict"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (400, Some("BadRequest"))
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.loadBalancerIp\""),
        "{}",
        r.text
    );
    let r = c.json("POST", &path, Some(body)).await;
    assert_eq!(r.status, 201);
    assert!(
        r.body["spec"].get("loadBalancerIp").is_none(),
        "the unknown field is not stored"
    );
    assert!(
        r.header("warning")
            .is_some_and(|w| w.contains("spec.loadBalancerIp")),
        "{:?}",
        r.headers
    );
}
