//! `TestCluster`: what tests talk to. The in-process API server by default, or a real cluster when
//! `FERROLB_TEST_KUBECONFIG` names a kubeconfig, so the same tests keep the double honest.

use std::path::PathBuf;

use axum::http::{Method, Request};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{ApiServer, ApiServerConfig, ApiServerHandle, Faults};

/// Label on every namespace the suite creates, so `kubectl delete ns -l ferrolb.io/test-suite`
/// cleans up after an interrupted run on a real cluster.
pub const TEST_LABEL: &str = "ferrolb.io/test-suite";

/// The environment variable that points the suite at a real cluster.
pub const REAL_CLUSTER_ENV: &str = "FERROLB_TEST_KUBECONFIG";

/// A raw HTTP answer.
#[derive(Debug)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Headers (lower-case names; repeated headers joined in order).
    pub headers: Vec<(String, String)>,
    /// Body parsed as JSON, or a JSON string holding the text when it is not JSON.
    pub body: Value,
    /// The body text.
    pub text: String,
}

impl RawResponse {
    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every JSON line of a watch stream.
    pub fn lines(&self) -> Vec<Value> {
        self.text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A cluster for tests: the double, or a real one.
pub struct TestCluster {
    server: Option<ApiServerHandle>,
    client: kube::Client,
    namespaces: Vec<String>,
}

impl TestCluster {
    /// The double with `config`, or the real cluster named by [`REAL_CLUSTER_ENV`].
    pub async fn start(config: ApiServerConfig) -> Self {
        if let Ok(path) = std::env::var(REAL_CLUSTER_ENV) {
            let kc = kube::config::Kubeconfig::read_from(PathBuf::from(path))
                .expect("readable kubeconfig");
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .expect("usable kubeconfig");
            let client = kube::Client::try_from(cfg).expect("client");
            return Self {
                server: None,
                client,
                namespaces: Vec::new(),
            };
        }
        let server = ApiServer::start(config)
            .await
            .expect("test API server starts");
        let client = server.client();
        Self {
            server: Some(server),
            client,
            namespaces: Vec::new(),
        }
    }

    /// Whether this is the in-process double (faults and the request log exist only there).
    pub fn is_double(&self) -> bool {
        self.server.is_some()
    }

    /// The double's handle.
    pub fn server(&self) -> Option<&ApiServerHandle> {
        self.server.as_ref()
    }

    /// The double's faults, or `None` (with a printed reason) on a real cluster.
    pub fn faults(&self) -> Option<Faults> {
        if self.server.is_none() {
            crate::skip::skip_double_only_part(
                "fault injection is not available on a real cluster",
            );
        }
        self.server.as_ref().map(ApiServerHandle::faults)
    }

    /// A kubeconfig for tools outside the process (kubectl): the one [`REAL_CLUSTER_ENV`] names
    /// on a real cluster, else the double's, written into `dir`.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::io::Result<PathBuf> {
        match &self.server {
            None => Ok(std::env::var(REAL_CLUSTER_ENV)
                .map(PathBuf::from)
                .unwrap_or_default()),
            Some(server) => {
                let path = dir.join("kubeconfig");
                server.write_kubeconfig(&path)?;
                Ok(path)
            }
        }
    }

    /// A kube client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Creates a namespace with a unique name starting with `prefix`; it is deleted on drop.
    pub async fn namespace(&mut self, prefix: &str) -> String {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"generateName": format!("{prefix}-"), "labels": {TEST_LABEL: "apiserver"}}}))
                .expect("namespace");
        let created = api
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        let name = created.metadata.name.expect("generated name");
        self.namespaces.push(name.clone());
        name
    }

    /// A raw request; `content_type` is used when `body` is given.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&str>,
        extra_headers: &[(&str, &str)],
    ) -> RawResponse {
        let mut b = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(path);
        if body.is_some() {
            b = b.header("Content-Type", content_type);
        }
        if !extra_headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("accept"))
        {
            b = b.header("Accept", "application/json");
        }
        for (k, v) in extra_headers {
            b = b.header(*k, *v);
        }
        let req = b
            .body(kube::client::Body::from(
                body.unwrap_or("").as_bytes().to_vec(),
            ))
            .expect("request");
        let resp = self.client.send(req).await.expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let bytes = resp.into_body().collect_bytes().await.expect("body read");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        RawResponse {
            status,
            headers,
            body,
            text,
        }
    }

    /// A raw JSON request.
    pub async fn json(&self, method: &str, path: &str, body: Option<Value>) -> RawResponse {
        let text = body.map(|b| b.to_string());
        self.raw(method, path, "application/json", text.as_deref(), &[])
            .await
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.server.is_some() || self.namespaces.is_empty() {
            return;
        }
        // On a real cluster, delete what the test created, without blocking the runtime thread.
        let client = self.client.clone();
        let names = std::mem::take(&mut self.namespaces);
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let api: Api<Namespace> = Api::all(client);
                for n in names {
                    let _ = api.delete(&n, &DeleteParams::default()).await;
                }
            });
        }
    }
}
