//! Shared harness of the controller's integration tests: an API server with FerroLB's CRDs (the
//! test double, or a real kube-apiserver of its own with `FERROLB_APISERVER=real`), and the real
//! `ferrolb-controller` binary pointed at it.

#![allow(dead_code)] // each test file uses a different part of the harness

pub mod history;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{BFDProfile, BGPPeer, IPAddressPool, IPAddressPoolSpec, IpMode};
use ferrolb_controller::reconcile::HasConditions;
use ferrolb_tests::apiserver::ApiServerConfig;
use ferrolb_tests::backend::Backend;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ObjectMeta, PostParams};

/// The install namespace used by the tests.
pub const NS: &str = "ferrolb-system";

/// An API server with FerroLB's CRDs and the namespaces the tests use.
pub struct Cluster {
    /// The server.
    pub server: Backend,
    /// Kubeconfig file for the binaries.
    pub kubeconfig: PathBuf,
    /// One client for the whole test: a new client per call parses the certificates and opens
    /// a TLS connection each time (measured: a quarter of the test process's CPU in the churn
    /// test, debug build).
    client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the server and creates the `ferrolb-system` and `default` namespaces.
    pub async fn start() -> Self {
        Self::start_with(ApiServerConfig::default()).await
    }

    /// Like [`Cluster::start`], on a dual-stack cluster (IPv4 and IPv6 Services).
    pub async fn start_dual_stack() -> Self {
        let mut config = ApiServerConfig::default();
        config.cluster.service_cidr_v6 = Some("fd00:10:96::".parse().unwrap());
        Self::start_with(config).await
    }

    async fn start_with(config: ApiServerConfig) -> Self {
        let crds = ferrolb_api::crd::chart_crd_dir();
        // The real server is always dual-stack (10.96.0.0/16 and fd00:10:96::/108) and needs no
        // controller-manager here: nothing is deleted with its namespace.
        let server = Backend::start(
            &[crds],
            |c| ApiServerConfig {
                cluster: config.cluster,
                ..c
            },
            |r| ferrolb_tests::realkube::RealKubeConfig {
                controller_manager: false,
                ..r
            },
        )
        .await
        .expect("the API server starts");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let c = Self {
            server,
            kubeconfig,
            client,
            _dir: dir,
        };
        for ns in [NS, "default", "team-a"] {
            c.create_namespace(ns, BTreeMap::new()).await;
        }
        c
    }

    /// A client of the server.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Creates a namespace with labels.
    pub async fn create_namespace(&self, name: &str, labels: BTreeMap<String, String>) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await;
    }

    /// Creates a pool in the install namespace.
    pub async fn create_pool(&self, name: &str, addresses: &[&str], ip_mode: Option<IpMode>) {
        let pool = IPAddressPool {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            spec: IPAddressPoolSpec {
                addresses: addresses.iter().map(|s| s.to_string()).collect(),
                auto_assign: true,
                avoid_buggy_ips: false,
                service_allocation: None,
                ip_mode,
            },
            status: None,
        };
        Api::<IPAddressPool>::namespaced(self.client(), NS)
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool is created");
    }

    /// Creates a BGPPeer in the install namespace: AS 64512 to AS 64513 at 10.0.0.1, with the
    /// fields of `spec` (a JSON object) on top.
    pub async fn create_bgp_peer(&self, name: &str, spec: serde_json::Value) {
        let mut full =
            serde_json::json!({"myASN": 64512, "peerASN": 64513, "peerAddress": "10.0.0.1"});
        full.as_object_mut()
            .expect("an object")
            .extend(spec.as_object().expect("spec is a JSON object").clone());
        let peer: BGPPeer = serde_json::from_value(serde_json::json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "BGPPeer",
            "metadata": {"name": name, "namespace": NS}, "spec": full,
        }))
        .expect("a BGPPeer");
        Api::<BGPPeer>::namespaced(self.client(), NS)
            .create(&PostParams::default(), &peer)
            .await
            .expect("peer is created");
    }

    /// Creates a BFDProfile with MetalLB's defaults in the install namespace.
    pub async fn create_bfd_profile(&self, name: &str) {
        let profile: BFDProfile = serde_json::from_value(serde_json::json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "BFDProfile",
            "metadata": {"name": name, "namespace": NS}, "spec": {},
        }))
        .expect("a BFDProfile");
        Api::<BFDProfile>::namespaced(self.client(), NS)
            .create(&PostParams::default(), &profile)
            .await
            .expect("profile is created");
    }

    /// Creates a Secret holding a BGP password (under `password`) in the install namespace.
    pub async fn create_password_secret(&self, name: &str) {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": NS},
            "stringData": {"password": "s3cret"},
        }))
        .expect("a Secret");
        Api::<Secret>::namespaced(self.client(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .expect("Secret is created");
    }

    /// Waits until object `name` of kind `K` in the install namespace has a `Ready` condition
    /// with `status` (`True` or `False`), and returns it.
    pub async fn wait_for_ready<K>(&self, name: &str, status: &str) -> Condition
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + HasConditions
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = Api::<K>::namespaced(self.client(), NS);
        eventually(
            Duration::from_secs(20),
            &format!("{} {name} to be Ready={status}", K::kind(&())),
            || {
                let api = api.clone();
                async move {
                    let object = api.get(name).await.ok()?;
                    object
                        .conditions()
                        .into_iter()
                        .find(|c| c.type_ == "Ready" && c.status == status)
                }
            },
        )
        .await
    }

    /// Creates a LoadBalancer Service in `default` with one TCP port.
    pub async fn create_service(&self, name: &str, annotations: &[(&str, &str)]) -> Service {
        self.create_service_with(name, annotations, |_| {}).await
    }

    /// Creates a LoadBalancer Service in `default`, letting the caller adjust the spec.
    pub async fn create_service_with(
        &self,
        name: &str,
        annotations: &[(&str, &str)],
        adjust: impl FnOnce(&mut ServiceSpec),
    ) -> Service {
        let mut spec = ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some([("app".to_string(), name.to_string())].into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        };
        adjust(&mut spec);
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        };
        let api = Api::<Service>::namespaced(self.client(), "default");
        let pp = PostParams::default();
        retry(|| api.create(&pp, &svc)).await
    }

    /// Starts the real controller binary with fast election timings.
    pub fn spawn_controller(&self, identity: &str) -> ControllerProcess {
        self.spawn_controller_with(identity, "127.0.0.1:0", &[])
    }

    /// [`Cluster::spawn_controller`], serving its metrics on `metrics_addr`, with `extra`
    /// arguments.
    pub fn spawn_controller_with(
        &self,
        identity: &str,
        metrics_addr: &str,
        extra: &[&str],
    ) -> ControllerProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_ferrolb-controller"))
            .args(["--kubeconfig", self.kubeconfig.to_str().unwrap()])
            .args([
                "--namespace",
                NS,
                "--metrics-addr",
                metrics_addr,
                "--identity",
                identity,
            ])
            .args(extra)
            .args([
                "--lease-duration",
                "3s",
                "--renew-deadline",
                "2s",
                "--retry-period",
                "500ms",
            ])
            // FERROLB_TEST_LOG=info shows what the controller did when a test fails.
            .args([
                "--log-level",
                &std::env::var("FERROLB_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the controller binary starts");
        ControllerProcess { child }
    }
}

/// A running controller; killed (SIGKILL) when dropped.
pub struct ControllerProcess {
    child: Child,
}

impl ControllerProcess {
    /// Kills the process at once, as a node failure would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `(ip, ipMode)` pairs of a Service's status.
pub fn ingress(svc: &Service) -> Vec<(String, String)> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i.ip.clone().unwrap_or_default(),
                i.ip_mode.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Polls `f` every 50 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the Service has an address and returns its ingress.
pub async fn wait_for_ingress(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let api = Api::<Service>::namespaced(client.clone(), "default");
    eventually(
        Duration::from_secs(20),
        &format!("an address for {name}"),
        || {
            let api = api.clone();
            async move {
                let svc = api.get(name).await.ok()?;
                let ing = ingress(&svc);
                (!ing.is_empty()).then_some(ing)
            }
        },
    )
    .await
}

/// Runs an API call until it does not fail with a server error (the fault tests inject them
/// for every client, the tests' own included). A 409 AlreadyExists after a retried create
/// means the first attempt went through; the caller then reads the object.
pub async fn retry<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    for _ in 0..50 {
        match call().await {
            Ok(v) => return v,
            Err(kube::Error::Api(e)) if e.code >= 500 || e.code == 429 => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("API call failed: {e}"),
        }
    }
    panic!("API call kept failing with server errors")
}

/// A loopback address with a port free now, for a process to serve on.
pub fn free_local_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").to_string()
}

/// The value of the counter or gauge `name` (no labels) on the `/metrics` page at `addr`, or
/// `None` while nothing serves there yet.
pub fn metric(addr: &str, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(conn, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut page = String::new();
    conn.read_to_string(&mut page).ok()?;
    page.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}
