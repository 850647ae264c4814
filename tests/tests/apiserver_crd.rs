//! Conformance: custom resources (schema defaults, structural and CEL validation, status
//! subresource, generation, pruning) using the suite's Gadget CRD.

mod support;

use ferrolb_tests::apiserver::TestCluster;
use serde_json::{Value, json};

fn gadget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.ferrolb.io/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec})
}

async fn post(c: &TestCluster, ns: &str, body: Value) -> ferrolb_tests::apiserver::RawResponse {
    c.json(
        "POST",
        &format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets"),
        Some(body),
    )
    .await
}

/// A JSON merge patch (`application/merge-patch+json`) of `body` to `path`.
async fn merge_patch(
    c: &TestCluster,
    path: &str,
    body: &str,
) -> ferrolb_tests::apiserver::RawResponse {
    c.raw(
        "PATCH",
        path,
        "application/merge-patch+json",
        Some(body),
        &[],
    )
    .await
}

fn causes(r: &ferrolb_tests::apiserver::RawResponse) -> Vec<(String, String)> {
    r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn schema_defaults_are_applied_and_generation_starts_at_one() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 1, "high": 2})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["spec"]["color"], "Blue");
    assert_eq!(r.body["metadata"]["generation"], 1);
}

#[tokio::test]
async fn missing_required_field_is_422_and_cel_rules_are_not_checked() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(&c, &ns, gadget("g1", json!({"low": 5, "high": 1}))).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        causes(&r),
        vec![
            ("spec.pool".into(), "FieldValueRequired".into()),
            ("<nil>".into(), "FieldValueInvalid".into())
        ]
    );
    assert!(r.body["message"].as_str().unwrap().starts_with("Gadget.test.ferrolb.io \"g1\" is invalid: [spec.pool: Required value, <nil>: Invalid value: null: some validation rules were not checked"));
}

#[tokio::test]
async fn enum_maximum_and_format_violations_are_each_reported() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget(
            "g1",
            json!({"pool": "p", "low": 1, "high": 200, "color": "Green", "address": "999.1.1.1"}),
        ),
    )
    .await;
    assert_eq!(r.status, 422);
    let got = causes(&r);
    assert!(
        got.contains(&("spec.color".into(), "FieldValueNotSupported".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("spec.high".into(), "FieldValueInvalid".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("spec.address".into(), "FieldValueTypeInvalid".into())),
        "{got:?}"
    );
    let high = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == "spec.high")
        .unwrap();
    assert_eq!(
        high["message"],
        "Invalid value: 200: spec.high in body should be less than or equal to 100"
    );
}

#[tokio::test]
async fn cel_rule_violation_is_422_with_the_rule_message() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 9, "high": 1})),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body["message"],
        "Gadget.test.ferrolb.io \"g1\" is invalid: spec: Invalid value: low must not exceed high"
    );
}

#[tokio::test]
async fn transition_rule_rejects_changing_an_immutable_field() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    assert_eq!(
        post(
            &c,
            &ns,
            gadget("g1", json!({"pool": "p", "low": 1, "high": 2}))
        )
        .await
        .status,
        201
    );
    let path = format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets/g1");
    let r = merge_patch(&c, &path, r#"{"spec":{"pool":"other"}}"#).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body["details"]["causes"][0]["message"],
        "Invalid value: \"other\": pool is immutable"
    );
}

#[tokio::test]
async fn generation_increases_on_spec_changes_only() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 1, "high": 2})),
    )
    .await;
    let path = format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets/g1");
    let merge = |body: &'static str, p: String| {
        let c = &c;
        async move { merge_patch(c, &p, body).await }
    };
    let r = merge(r#"{"metadata":{"labels":{"a":"b"}}}"#, path.clone()).await;
    assert_eq!(
        r.body["metadata"]["generation"], 1,
        "labels do not bump generation"
    );
    let r = merge(
        r#"{"status":{"phase":"Ready"},"metadata":{"labels":{"from-status":"x"}}}"#,
        format!("{path}/status"),
    )
    .await;
    assert_eq!(
        r.body["metadata"]["generation"], 1,
        "status does not bump generation"
    );
    assert_eq!(r.body["status"]["phase"], "Ready");
    assert!(
        r.body["metadata"]["labels"].get("from-status").is_none(),
        "a custom resource's status write changes only status (unlike a Service's): {}",
        r.text
    );
    let r = merge(r#"{"spec":{"high":3}}"#, path.clone()).await;
    assert_eq!(r.body["metadata"]["generation"], 2);
    assert_eq!(
        r.body["status"]["phase"], "Ready",
        "a spec write keeps status"
    );
}

#[tokio::test]
async fn status_in_a_create_body_is_dropped_and_invalid_status_is_rejected() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let mut body = gadget("g1", json!({"pool": "p", "low": 1, "high": 2}));
    body["status"] = json!({"phase": "Ready"});
    let r = post(&c, &ns, body).await;
    assert!(r.body.get("status").is_none(), "{}", r.text);
    let path = format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets/g1/status");
    let r = merge_patch(&c, &path, r#"{"status":{"phase":"Weird"}}"#).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        causes(&r)[0],
        ("status.phase".into(), "FieldValueNotSupported".into())
    );
}

#[tokio::test]
async fn a_null_in_a_status_merge_patch_removes_that_field_and_keeps_the_others() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 1, "high": 2})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let path = format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets/g1/status");
    let r = merge_patch(
        &c,
        &path,
        r#"{"status":{"phase":"Ready","observedGeneration":1}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["status"],
        json!({"phase": "Ready", "observedGeneration": 1})
    );
    // What a status writer sends when the new status has no phase (ferrolb_api::patch).
    let r = merge_patch(
        &c,
        &path,
        r#"{"status":{"phase":null,"observedGeneration":2}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["status"],
        json!({"observedGeneration": 2}),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn unknown_fields_are_pruned_with_a_warning_and_strict_validation_refuses_them() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 1, "high": 2, "bogus": 1})),
    )
    .await;
    assert_eq!(r.status, 201);
    assert!(r.body["spec"].get("bogus").is_none());
    assert_eq!(
        r.header("warning"),
        Some("299 - \"unknown field \\\"spec.bogus\\\"\"")
    );
    let body = gadget("g2", json!({"pool": "p", "low": 1, "high": 2, "bogus": 1})).to_string();
    let r = c
        .raw(
            "POST",
            &format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets?fieldValidation=Strict"),
            "application/json",
            Some(&body),
            &[],
        )
        .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn strategic_merge_patch_on_a_custom_resource_is_415() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    post(
        &c,
        &ns,
        gadget("g1", json!({"pool": "p", "low": 1, "high": 2})),
    )
    .await;
    let path = format!("/apis/test.ferrolb.io/v1/namespaces/{ns}/gadgets/g1");
    let r = c
        .raw(
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            Some("{}"),
            &[],
        )
        .await;
    assert_eq!(r.status, 415);
}

#[tokio::test]
async fn duplicate_map_list_keys_are_reported() {
    let mut c = support::cluster().await;
    let ns = c.namespace("crd").await;
    let r = post(
        &c,
        &ns,
        gadget(
            "g1",
            json!({"pool": "p", "low": 1, "high": 2, "ports": [{"port": 80}, {"port": 80}]}),
        ),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        causes(&r)[0],
        ("spec.ports[1]".into(), "FieldValueDuplicate".into())
    );
}
