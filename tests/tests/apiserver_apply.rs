//! Conformance: server-side apply (creation, managedFields, conflicts, force, status subresource).

mod support;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn applied(labels: serde_json::Value, affinity: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ssa1", "labels": labels},
           "spec": {"type": "LoadBalancer", "selector": {"app": "ssa"}, "sessionAffinity": affinity,
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
}

fn managers(s: &Service) -> Vec<(String, String, Option<String>)> {
    s.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap(),
                m.operation.clone().unwrap(),
                m.subresource.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_to_a_missing_object_creates_it_owned_by_the_applier() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    let s = api
        .patch(
            "ssa1",
            &PatchParams::apply("a"),
            &Patch::Apply(applied(json!({"owner": "a"}), "None")),
        )
        .await
        .unwrap();
    assert_eq!(
        managers(&s),
        vec![("a".to_string(), "Apply".to_string(), None)]
    );
    let fields =
        serde_json::to_value(&s.metadata.managed_fields.as_ref().unwrap()[0].fields_v1).unwrap();
    assert!(
        fields["f:spec"]["f:ports"]
            .get("k:{\"port\":80,\"protocol\":\"TCP\"}")
            .is_some(),
        "ports are keyed by port and protocol: {fields}"
    );
    assert!(
        fields["f:spec"].get("f:clusterIP").is_none(),
        "server-filled fields belong to nobody"
    );
}

#[tokio::test]
async fn apply_by_second_manager_conflicts_on_owned_field() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({"owner": "a"}), "ClientIP")),
    )
    .await
    .unwrap();
    let b = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ssa1", "labels": {"owner": "b"}}, "spec": {"sessionAffinity": "None"}});
    let err = api
        .patch("ssa1", &PatchParams::apply("b"), &Patch::Apply(&b))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    let fields: Vec<String> = status
        .details
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.clone())
        .collect();
    assert_eq!(
        fields,
        vec![".metadata.labels.owner", ".spec.sessionAffinity"]
    );
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .metadata.labels.owner\n- .spec.sessionAffinity"
    );
}

#[tokio::test]
async fn forced_apply_takes_ownership_from_the_previous_manager() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({"owner": "a"}), "ClientIP")),
    )
    .await
    .unwrap();
    let b = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ssa1", "labels": {"owner": "b"}}, "spec": {"sessionAffinity": "None"}});
    let s = api
        .patch("ssa1", &PatchParams::apply("b").force(), &Patch::Apply(&b))
        .await
        .unwrap();
    assert_eq!(s.metadata.labels.as_ref().unwrap()["owner"], "b");
    let a_fields =
        serde_json::to_value(&s.metadata.managed_fields.as_ref().unwrap()[0].fields_v1).unwrap();
    assert!(
        a_fields.get("f:metadata").is_none(),
        "a no longer owns the label: {a_fields}"
    );
    assert!(a_fields["f:spec"].get("f:sessionAffinity").is_none());
    // a re-applying its old config now conflicts with b.
    let err = api
        .patch(
            "ssa1",
            &PatchParams::apply("a"),
            &Patch::Apply(applied(json!({"owner": "a"}), "ClientIP")),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
}

#[tokio::test]
async fn a_field_dropped_from_the_apply_config_is_removed() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({"owner": "a", "extra": "1"}), "None")),
    )
    .await
    .unwrap();
    let s = api
        .patch(
            "ssa1",
            &PatchParams::apply("a"),
            &Patch::Apply(applied(json!({"owner": "a"}), "None")),
        )
        .await
        .unwrap();
    assert!(!s.metadata.labels.unwrap().contains_key("extra"));
}

#[tokio::test]
async fn apply_without_field_manager_is_422() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let body = applied(json!({}), "None").to_string();
    let r = c
        .raw(
            "PATCH",
            &format!("/api/v1/namespaces/{ns}/services/ssa1"),
            "application/apply-patch+yaml",
            Some(&body),
            &[],
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["details"]["kind"], "PatchOptions");
}

#[tokio::test]
async fn status_apply_is_recorded_with_the_status_subresource() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({}), "None")),
    )
    .await
    .unwrap();
    let status = json!({"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.30", "ipMode": "VIP"}]}}});
    let s = api
        .patch_status(
            "ssa1",
            &PatchParams::apply("ferrolb").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert!(managers(&s).contains(&("ferrolb".into(), "Apply".into(), Some("status".into()))));
    let ingress = s.status.unwrap().load_balancer.unwrap().ingress.unwrap();
    assert_eq!(ingress[0].ip.as_deref(), Some("192.0.2.30"));
    // Re-applying a different list replaces it whole (ingress is atomic).
    let status = json!({"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.31", "ipMode": "Proxy"}]}}});
    let s = api
        .patch_status(
            "ssa1",
            &PatchParams::apply("ferrolb").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    let ingress = s.status.unwrap().load_balancer.unwrap().ingress.unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("Proxy"));
}

#[tokio::test]
async fn non_apply_writes_are_recorded_as_update_operations() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({}), "None")),
    )
    .await
    .unwrap();
    let pp = PatchParams {
        field_manager: Some("c".into()),
        ..Default::default()
    };
    let s = api
        .patch(
            "ssa1",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"c": "1"}}})),
        )
        .await
        .unwrap();
    let entry = s
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("c"))
        .expect("c is recorded");
    assert_eq!(entry.operation.as_deref(), Some("Update"));
    let fields = serde_json::to_value(&entry.fields_v1).unwrap();
    assert_eq!(
        fields,
        json!({"f:metadata": {"f:annotations": {".": {}, "f:c": {}}}})
    );
}

#[tokio::test]
async fn apply_with_a_stale_resource_version_is_409() {
    let mut c = support::cluster().await;
    let ns = c.namespace("ssa").await;
    let api: Api<Service> = Api::namespaced(c.client(), &ns);
    api.patch(
        "ssa1",
        &PatchParams::apply("a"),
        &Patch::Apply(applied(json!({}), "None")),
    )
    .await
    .unwrap();
    let mut stale = applied(json!({"x": "1"}), "None");
    stale["metadata"]["resourceVersion"] = json!("1");
    let err = api
        .patch("ssa1", &PatchParams::apply("a"), &Patch::Apply(&stale))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"));
}
