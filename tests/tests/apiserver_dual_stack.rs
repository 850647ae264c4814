//! A dual-stack cluster (an IPv6 Service CIDR configured): IP families are defaulted and
//! validated as kube-apiserver does, and each family gets a cluster IP. The recorded fixtures
//! come from an IPv4-only cluster, so these rules are checked here.

use ferrolb_tests::apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};

async fn create(spec: Value) -> (u16, Value) {
    let mut config = ApiServerConfig::default();
    config.cluster.service_cidr_v6 = Some("fd00:10:96::".parse().unwrap());
    let server = ApiServer::start(config).await.unwrap();
    let body =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec});
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        server.client(),
        "default",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    );
    let obj: kube::api::DynamicObject = serde_json::from_value(body).unwrap();
    match api.create(&Default::default(), &obj).await {
        Ok(created) => (201, serde_json::to_value(created).unwrap()),
        Err(kube::Error::Api(e)) => (e.code, json!({"message": e.message})),
        Err(e) => panic!("{e}"),
    }
}

fn ports() -> Value {
    json!([{"port": 80}])
}

#[tokio::test]
async fn prefer_dual_stack_gets_both_families_and_a_cluster_ip_for_each() {
    let (code, svc) = create(json!({"ipFamilyPolicy": "PreferDualStack", "ports": ports()})).await;
    assert_eq!(code, 201);
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let ips = svc["spec"]["clusterIPs"].as_array().unwrap();
    assert_eq!(ips.len(), 2);
    assert!(
        ips[1].as_str().unwrap().starts_with("fd00:10:96::"),
        "{ips:?}"
    );
}

#[tokio::test]
async fn an_ipv6_single_stack_service_is_accepted() {
    let (code, svc) = create(json!({"ipFamilies": ["IPv6"], "ports": ports()})).await;
    assert_eq!(code, 201);
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv6"]));
    assert_eq!(svc["spec"]["ipFamilyPolicy"], json!("SingleStack"));
}

#[tokio::test]
async fn two_families_need_a_dual_stack_policy() {
    let (code, body) = create(json!({"ipFamilies": ["IPv4", "IPv6"], "ports": ports()})).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("spec.ipFamilyPolicy"),
        "{body}"
    );
}
