//! A real Kubernetes control plane for tests: etcd and kube-apiserver (and, by default,
//! kube-controller-manager for namespace deletion, EndpointSlices and garbage collection), built
//! from the Go modules pinned in `tests/realkube` by `scripts/realkube`, started on free loopback
//! ports (or inside a network namespace) with RBAC, token authentication and ServiceAccount token
//! signing. [`RealKube`] stops every process it started when dropped. With a network namespace
//! the caller must run [`RealKube::start`] on a runtime whose threads live there
//! ([`crate::netns::runtime_in`]), so that its own connections are made from inside.
//!
//! ```text
//!   RealKube::start ──► testpki (CA, serving cert, SA key) ──► etcd ──► kube-apiserver ──► /readyz
//!                                                                   └─► kube-controller-manager
//!   kubeconfig (admin token, system:masters) ◄── RealKube::kubeconfig()
//!   RealKube::token_for(ns, sa) ── TokenRequest ──► a ServiceAccount's bearer token
//! ```
//!
//! # Guarantees
//! - Every child gets `SIGKILL` when the thread that started it ends (`PR_SET_PDEATHSIG`), and
//!   `Drop` kills and reaps them, so a panicking or interrupted test leaves no process behind.
//! - [`RealKube::start`] returns once `/readyz` answers `ok` and, when the controller-manager
//!   runs, once the `default` ServiceAccount of the `default` namespace exists.
//!
//! # Caveats
//! - Ports are found by binding port 0 and releasing it; another process could take one in
//!   between (start fails with a clear error then, and nothing is left running).

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

/// Where the harness looks for the binaries when `FERROLB_REALKUBE_DIR` is not set:
/// `target/realkube` of the workspace, where `scripts/realkube` puts them.
pub const DIR_ENV: &str = "FERROLB_REALKUBE_DIR";

/// The admin's bearer token in the token file (member of `system:masters`).
const ADMIN_TOKEN: &str = "ferrolb-test-admin-token";

/// How often etcd or kube-apiserver is started on other ports when its own were taken first.
const PORT_ATTEMPTS: u32 = 5;

/// The issuer and audience of ServiceAccount tokens, as on a kubeadm cluster.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Errors starting the control plane.
#[derive(Debug, thiserror::Error)]
pub enum RealKubeError {
    /// A binary is missing.
    #[error(
        "{0} is missing: build the real control plane with `scripts/realkube` (or set {DIR_ENV})"
    )]
    Missing(PathBuf),
    /// A file or process problem.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process exited or never became ready.
    #[error("{what} did not become ready: {detail}\n--- log tail ---\n{log}")]
    NotReady {
        /// Which process.
        what: &'static str,
        /// Why.
        detail: String,
        /// The last lines of its log.
        log: String,
    },
    /// A client call failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

type Result<T, E = RealKubeError> = std::result::Result<T, E>;

/// How to start the control plane.
#[derive(Debug, Clone)]
pub struct RealKubeConfig {
    /// Where `kube-apiserver`, `kube-controller-manager`, `etcd` and `testpki` are.
    pub bin_dir: PathBuf,
    /// The address kube-apiserver listens on (etcd and the controller-manager always use
    /// loopback of the same network namespace).
    pub address: IpAddr,
    /// kube-apiserver's port; 0 picks a free one.
    pub port: u16,
    /// A network namespace (under `/run/netns`) to run every process in.
    pub netns: Option<String>,
    /// Whether to run kube-controller-manager (namespace deletion, EndpointSlices, GC).
    pub controller_manager: bool,
    /// Whether real kubelets join: then kube-controller-manager also runs the node lifecycle
    /// controller, which takes the `node.kubernetes.io/not-ready` taint off a Node once its
    /// kubelet reports Ready (without it nothing is ever scheduled there).
    pub kubelets: bool,
    /// `--service-cluster-ip-range`.
    pub service_cidrs: String,
    /// A directory for certificates, data and logs; a temporary one when `None`.
    pub dir: Option<PathBuf>,
}

impl Default for RealKubeConfig {
    fn default() -> Self {
        Self {
            bin_dir: bin_dir(),
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            netns: None,
            controller_manager: true,
            kubelets: false,
            service_cidrs: "10.96.0.0/16,fd00:10:96::/108".into(),
            dir: None,
        }
    }
}

/// The directory of the binaries: `$FERROLB_REALKUBE_DIR`, or the workspace's `target/realkube`.
pub fn bin_dir() -> PathBuf {
    crate::built_dir(DIR_ENV, "realkube")
}

/// Whether the binaries have been built.
pub fn available() -> bool {
    let d = bin_dir();
    ["kube-apiserver", "etcd", "testpki"]
        .iter()
        .all(|b| d.join(b).is_file())
}

/// A running control plane; dropping it stops every process it started.
pub struct RealKube {
    children: Vec<(&'static str, Child)>,
    /// How it was started, and the command lines of kube-apiserver and etcd, to restart them.
    config: RealKubeConfig,
    commands: Vec<(&'static str, Vec<std::ffi::OsString>)>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    url: String,
    kubeconfig: PathBuf,
    ca_pem: Vec<u8>,
}

impl RealKube {
    /// Starts etcd, kube-apiserver and (if configured) kube-controller-manager and waits until
    /// the API server is ready.
    pub async fn start(config: RealKubeConfig) -> Result<Self> {
        for b in ["kube-apiserver", "etcd", "testpki"] {
            if !config.bin_dir.join(b).is_file() {
                return Err(RealKubeError::Missing(config.bin_dir.join(b)));
            }
        }
        let (tmp, dir) = match &config.dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("ferrolb-realkube-")
                    .tempdir()
                    .map_err(io("creating a temporary directory".into()))?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let mut kube = Self {
            children: Vec::new(),
            config: config.clone(),
            commands: Vec::new(),
            url: String::new(),
            kubeconfig: dir.join("kubeconfig"),
            ca_pem: Vec::new(),
            dir,
            _tmp: tmp,
        };
        kube.boot(&config).await?;
        Ok(kube)
    }

    async fn boot(&mut self, config: &RealKubeConfig) -> Result<()> {
        let bin = |name: &str| config.bin_dir.join(name);
        let pki = self.dir.join("pki");
        let mut pki_cmd = Command::new(bin("testpki"));
        pki_cmd.arg("--dir").arg(&pki);
        // The `kubernetes` Service's ClusterIP (the first address of each Service range) too:
        // Pods reach the API server there, through kube-proxy, and verify it by that address.
        let mut ips: Vec<String> = config
            .service_cidrs
            .split(',')
            .filter_map(|c| c.trim().parse::<ipnet::IpNet>().ok())
            .map(|net| match net {
                ipnet::IpNet::V4(n) => IpAddr::V4((u32::from(n.network()) + 1).into()),
                ipnet::IpNet::V6(n) => IpAddr::V6((u128::from(n.network()) + 1).into()),
            })
            .map(|ip| ip.to_string())
            .collect();
        if !config.address.is_loopback() {
            ips.insert(0, config.address.to_string());
        }
        if !ips.is_empty() {
            pki_cmd.arg("--ip").arg(ips.join(","));
        }
        let out = pki_cmd.output().map_err(io("running testpki".into()))?;
        if !out.status.success() {
            return Err(RealKubeError::NotReady {
                what: "testpki",
                detail: out.status.to_string(),
                log: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        self.ca_pem = std::fs::read(pki.join("ca.crt")).map_err(io("reading ca.crt".into()))?;
        std::fs::write(self.dir.join("admin.token"), ADMIN_TOKEN)
            .map_err(io("writing admin.token".into()))?;
        std::fs::write(self.dir.join("audit-policy.yaml"), AUDIT_POLICY)
            .map_err(io("writing the audit policy".into()))?;
        let tokens = self.dir.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{ADMIN_TOKEN},ferrolb-test-admin,ferrolb-test-admin,\"system:masters\"\n"),
        )
        .map_err(io("writing tokens.csv".into()))?;

        // A port found free can be taken by another lab before etcd binds it (many labs boot at
        // once in CI), so a start that fails on "address already in use" is tried again on
        // other ports, with a fresh data directory.
        let mut attempt = 0;
        let etcd_url = loop {
            attempt += 1;
            let [etcd_port, peer_port] = self.free_ports(config)?;
            let etcd_url = format!("http://127.0.0.1:{etcd_port}");
            let args: Vec<std::ffi::OsString> = vec![
                bin("etcd").into_os_string(),
                "--data-dir".into(),
                self.dir.join(format!("etcd-{attempt}")).into_os_string(),
                "--listen-client".into(),
                etcd_url.clone().into(),
                "--listen-peer".into(),
                format!("http://127.0.0.1:{peer_port}").into(),
            ];
            self.spawn(config, "etcd", &args)?;
            self.remember("etcd", args);
            match self.wait_log("etcd", "etcd: ready", Duration::from_secs(60)) {
                Ok(()) => break etcd_url,
                Err(e) if attempt < PORT_ATTEMPTS && self.lost_port_race("etcd") => {
                    tracing::warn!(attempt, error = %e, "etcd's port was taken; trying others");
                }
                Err(e) => return Err(e),
            }
        };
        let host = match config.address {
            IpAddr::V6(a) => format!("[{a}]"),
            IpAddr::V4(a) => a.to_string(),
        };
        let p = |f: &str| pki.join(f).into_os_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let api_port = match config.port {
                0 => self.free_ports::<1>(config)?[0],
                fixed => fixed,
            };
            self.url = format!("https://{host}:{api_port}");
            let mut args: Vec<std::ffi::OsString> = vec![bin("kube-apiserver").into_os_string()];
            for (flag, value) in [
                ("--etcd-servers", etcd_url.clone().into()),
                ("--bind-address", config.address.to_string().into()),
                ("--advertise-address", config.address.to_string().into()),
                ("--secure-port", api_port.to_string().into()),
                // Pods reach the API server through the `kubernetes` Service, whose endpoint
                // the reconciler writes; without kubelets nothing needs it.
                (
                    "--endpoint-reconciler-type",
                    if config.kubelets { "lease" } else { "none" }.into(),
                ),
                ("--tls-cert-file", p("server.crt")),
                ("--tls-private-key-file", p("server.key")),
                ("--client-ca-file", p("ca.crt")),
                ("--token-auth-file", tokens.clone().into_os_string()),
                ("--anonymous-auth", "false".into()),
                ("--authorization-mode", "RBAC".into()),
                ("--service-account-key-file", p("sa.pub")),
                ("--service-account-signing-key-file", p("sa.key")),
                ("--service-account-issuer", ISSUER.into()),
                ("--api-audiences", ISSUER.into()),
                (
                    "--service-cluster-ip-range",
                    config.service_cidrs.clone().into(),
                ),
                ("--service-node-port-range", "30000-32767".into()),
                ("--allow-privileged", "true".into()),
                ("--profiling", "false".into()),
                (
                    "--audit-policy-file",
                    self.dir.join("audit-policy.yaml").into_os_string(),
                ),
                (
                    "--audit-log-path",
                    self.dir.join("audit.log").into_os_string(),
                ),
                ("--audit-log-format", "json".into()),
                // Never rotated (0 means lumberjack's 100 MB): `request_log` reads this one
                // file, and a count taken across a rotation would go backwards.
                ("--audit-log-maxsize", "1000000".into()),
                ("--v", "0".into()),
            ] {
                let mut a = std::ffi::OsString::from(flag);
                a.push("=");
                a.push(value);
                args.push(a);
            }
            self.spawn(config, "kube-apiserver", &args)?;
            self.remember("kube-apiserver", args);
            std::fs::write(&self.kubeconfig, self.kubeconfig_yaml(ADMIN_TOKEN))
                .map_err(io("writing the kubeconfig".into()))?;
            match self.wait_ready().await {
                Ok(()) => break,
                Err(e)
                    if config.port == 0
                        && attempt < PORT_ATTEMPTS
                        && self.lost_port_race("kube-apiserver") =>
                {
                    tracing::warn!(attempt, error = %e, "kube-apiserver's port was taken; trying another");
                }
                Err(e) => return Err(e),
            }
        }

        if config.controller_manager && bin("kube-controller-manager").is_file() {
            let mut args: Vec<std::ffi::OsString> =
                vec![bin("kube-controller-manager").into_os_string()];
            for (flag, value) in [
                ("--kubeconfig", self.kubeconfig.clone().into_os_string()),
                (
                    "--authentication-kubeconfig",
                    self.kubeconfig.clone().into_os_string(),
                ),
                (
                    "--authorization-kubeconfig",
                    self.kubeconfig.clone().into_os_string(),
                ),
                ("--secure-port", "0".into()),
                ("--leader-elect", "false".into()),
                ("--root-ca-file", p("ca.crt")),
                ("--service-account-private-key-file", p("sa.key")),
                ("--use-service-account-credentials", "false".into()),
                (
                    "--controllers",
                    if config.kubelets {
                        "*,-nodeipam,-attachdetach,-persistentvolume-binder,\
                         -persistentvolume-expander,-csrsigning,-csrapproving,-csrcleaner,-ttl,\
                         -bootstrapsigner,-tokencleaner"
                    } else {
                        "*,-nodeipam,-nodelifecycle,-attachdetach,-persistentvolume-binder,\
                         -persistentvolume-expander,-csrsigning,-csrapproving,-csrcleaner,-ttl,\
                         -bootstrapsigner,-tokencleaner"
                    }
                    .into(),
                ),
                ("--v", "0".into()),
            ] {
                let mut a = std::ffi::OsString::from(flag);
                a.push("=");
                a.push(value);
                args.push(a);
            }
            self.spawn(config, "kube-controller-manager", &args)?;
            self.wait_default_service_account().await?;
        }
        Ok(())
    }

    fn spawn(
        &mut self,
        config: &RealKubeConfig,
        what: &'static str,
        args: &[std::ffi::OsString],
    ) -> Result<()> {
        let log_path = self.dir.join(format!("{what}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(io(format!("creating {}", log_path.display())))?;
        let err = log.try_clone().map_err(io("opening a log".into()))?;
        let mut cmd = match &config.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]);
                c.args(args);
                c
            }
            None => {
                let mut c = Command::new(&args[0]);
                c.args(&args[1..]);
                c
            }
        };
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(io(format!("starting {what}")))?;
        self.children.push((what, child));
        Ok(())
    }

    fn remember(&mut self, what: &'static str, args: Vec<std::ffi::OsString>) {
        self.commands.retain(|(w, _)| *w != what);
        self.commands.push((what, args));
    }

    /// Restarts kube-apiserver as an upgrade or a crash does: SIGTERM (it drains and exits;
    /// SIGKILL after 30 s, the kubelet's grace period), or SIGKILL at once with `kill`; then starts it again with the same command line (the same
    /// address and port, the same etcd) and waits until it is ready. Returns how long it did
    /// not serve.
    pub async fn restart_apiserver(&mut self, kill: bool) -> Result<Duration> {
        let down = self.stop_one("kube-apiserver", kill)?;
        self.start_again("kube-apiserver")?;
        self.wait_ready().await?;
        Ok(down.elapsed())
    }

    /// Restarts etcd the same way (its data directory kept); kube-apiserver stays up and
    /// answers errors meanwhile. Returns how long etcd was gone.
    pub async fn restart_etcd(&mut self, kill: bool) -> Result<Duration> {
        let down = self.stop_one("etcd", kill)?;
        self.start_again("etcd")?;
        self.wait_log("etcd", "etcd: ready", Duration::from_secs(60))?;
        self.wait_ready().await?;
        Ok(down.elapsed())
    }

    /// Stops `what` and waits until it has exited; returns when it was signalled.
    fn stop_one(&mut self, what: &'static str, kill: bool) -> Result<Instant> {
        let i = self
            .children
            .iter()
            .position(|(w, _)| *w == what)
            .ok_or_else(|| RealKubeError::NotReady {
                what,
                detail: "not running".into(),
                log: String::new(),
            })?;
        let (_, mut child) = self.children.remove(i);
        let at = Instant::now();
        if kill {
            let _ = child.kill();
        } else {
            terminate(&child);
        }
        // As the kubelet does for a static Pod: SIGKILL once the grace period (30 s) is over.
        let deadline = at + Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(at);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(at);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_again(&mut self, what: &'static str) -> Result<()> {
        let args = self
            .commands
            .iter()
            .find(|(w, _)| *w == what)
            .map(|(_, a)| a.clone())
            .ok_or_else(|| RealKubeError::NotReady {
                what,
                detail: "never started".into(),
                log: String::new(),
            })?;
        // The former run's log is kept beside the new one.
        let _ = std::fs::rename(
            self.dir.join(format!("{what}.log")),
            self.dir.join(format!("{what}.before-restart.log")),
        );
        let config = self.config.clone();
        self.spawn(&config, what, &args)
    }

    /// `N` ports free at this moment, inside the namespace the processes run in.
    fn free_ports<const N: usize>(&self, config: &RealKubeConfig) -> Result<[u16; N]> {
        let take = || -> Result<[u16; N]> {
            // Held together so that the N ports differ.
            let listeners = (0..N)
                .map(|_| TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port".into())))
                .collect::<Result<Vec<_>>>()?;
            let mut ports = [0; N];
            for (port, l) in ports.iter_mut().zip(&listeners) {
                *port = l
                    .local_addr()
                    .map_err(io("finding a free port".into()))?
                    .port();
            }
            Ok(ports)
        };
        match &config.netns {
            None => take(),
            Some(ns) => crate::netns::in_namespace(ns, take).map_err(|e| RealKubeError::Io {
                context: "entering the namespace".into(),
                source: std::io::Error::other(e.to_string()),
            })?,
        }
    }

    /// Whether `what` exited because its port had been taken meanwhile; if so it is forgotten,
    /// so that it can be started again.
    fn lost_port_race(&mut self, what: &'static str) -> bool {
        let Some(i) = self.children.iter().rposition(|(w, _)| *w == what) else {
            return false;
        };
        if !matches!(self.children[i].1.try_wait(), Ok(Some(_))) {
            return false;
        }
        let log = std::fs::read_to_string(self.dir.join(format!("{what}.log"))).unwrap_or_default();
        if !log.contains("address already in use") {
            return false;
        }
        self.children.remove(i);
        true
    }

    fn log_tail(&self, what: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{what}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn exited(&mut self, what: &'static str) -> Option<RealKubeError> {
        let (_, child) = self.children.iter_mut().find(|(w, _)| *w == what)?;
        match child.try_wait() {
            Ok(Some(status)) => Some(RealKubeError::NotReady {
                what,
                detail: format!("exited with {status}"),
                log: self.log_tail(what),
            }),
            _ => None,
        }
    }

    fn wait_log(&mut self, what: &'static str, needle: &str, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{what}.log"))).unwrap_or_default();
            if text.contains(needle) {
                return Ok(());
            }
            if let Some(e) = self.exited(what) {
                return Err(e);
            }
            if Instant::now() > deadline {
                return Err(RealKubeError::NotReady {
                    what,
                    detail: format!("no {needle:?} in its log after {limit:?}"),
                    log: self.log_tail(what),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(e) = self.exited("kube-apiserver") {
                return Err(e);
            }
            let last = match self.readyz().await {
                Ok(true) => return Ok(()),
                Ok(false) => "readyz not ok yet".to_string(),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(RealKubeError::NotReady {
                    what: "kube-apiserver",
                    detail: last,
                    log: self.log_tail("kube-apiserver"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn readyz(&self) -> Result<bool, String> {
        let client = self.client().map_err(|e| e.to_string())?;
        let req = axum::http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        match client.request_text(req).await {
            Ok(t) => Ok(t.trim() == "ok"),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn wait_default_service_account(&mut self) -> Result<()> {
        let client = self.client()?;
        let api: Api<ServiceAccount> = Api::namespaced(client, "default");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(e) = self.exited("kube-controller-manager") {
                return Err(e);
            }
            if let Ok(Some(_)) = api.get_opt("default").await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(RealKubeError::NotReady {
                    what: "kube-controller-manager",
                    detail: "no default ServiceAccount after 60 s".into(),
                    log: self.log_tail("kube-controller-manager"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The API server's URL (`https://ADDRESS:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The admin kubeconfig (token of a `system:masters` member).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory of certificates, data and the processes' logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A kubeconfig document for `token`.
    pub fn kubeconfig_yaml(&self, token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\n\
             contexts:\n- name: real\n  context:\n    cluster: real\n    user: user\n    \
             namespace: default\ncurrent-context: real\n",
            self.url
        )
    }

    /// An admin client. Call it inside a tokio runtime (the client spawns its connection task).
    pub fn client(&self) -> Result<kube::Client> {
        self.client_with_token_file(&self.dir.join("admin.token"))
    }

    /// A client authenticating with the bearer token in `token_file`.
    pub fn client_with_token_file(&self, token_file: &Path) -> Result<kube::Client> {
        let url = self.url.parse().map_err(|e| RealKubeError::Io {
            context: format!("parsing {}", self.url),
            source: std::io::Error::other(e),
        })?;
        let mut cfg = kube::Config::new(url);
        cfg.default_namespace = "default".into();
        cfg.root_cert_file = Some(self.dir.join("pki/ca.crt"));
        cfg.auth_info.token_file = Some(token_file.display().to_string());
        kube::Client::try_from(cfg).map_err(kube_err("building a client".into()))
    }

    /// Every request the server has completed so far, from its audit log, in order: a watch
    /// once (when it started streaming), every other request when it completed.
    pub fn request_log(&self) -> Vec<AuditRecord> {
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        let mut streamed = std::collections::HashSet::new();
        let mut out = Vec::new();
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let id = e["auditID"].as_str().unwrap_or_default().to_string();
            match e["stage"].as_str() {
                Some("ResponseStarted") => {
                    streamed.insert(id);
                }
                Some("ResponseComplete") if streamed.contains(&id) => continue,
                Some("ResponseComplete") | Some("Panic") => {}
                _ => continue,
            }
            out.push(AuditRecord::from_event(&e));
        }
        out
    }

    /// A bearer token of ServiceAccount `namespace/name`: see [`service_account_token`].
    pub async fn token_for(&self, namespace: &str, name: &str) -> Result<String> {
        service_account_token(self.client()?, namespace.into(), name.into()).await
    }

    /// Writes a kubeconfig for ServiceAccount `namespace/name` to `path`.
    pub async fn write_service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<()> {
        let token = self.token_for(namespace, name).await?;
        std::fs::write(path, self.kubeconfig_yaml(&token))
            .map_err(io(format!("writing {}", path.display())))
    }

    /// The server's `gitVersion`, e.g. `v1.36.3`.
    pub async fn version(&self) -> Result<String> {
        let client = self.client()?;
        let info = client
            .apiserver_version()
            .await
            .map_err(kube_err("reading /version".into()))?;
        Ok(info.git_version)
    }

    /// Stops every process (SIGTERM, then SIGKILL after 5 s) and reaps it.
    pub fn stop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            terminate(child);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, child) in self.children.iter_mut().rev() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for RealKube {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A bearer token of ServiceAccount `namespace/name` (created if missing), valid for an hour,
/// minted through `client` by the TokenRequest API as the kubelet would. Owned arguments, so it
/// can be spawned on a runtime inside a network namespace.
pub async fn service_account_token(
    client: kube::Client,
    namespace: String,
    name: String,
) -> Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client, &namespace);
    if sas
        .get_opt(&name)
        .await
        .map_err(kube_err(format!(
            "reading ServiceAccount {namespace}/{name}"
        )))?
        .is_none()
    {
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                .expect("a ServiceAccount");
        let _ = sas.create(&PostParams::default(), &sa).await;
    }
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![ISSUER.into()],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer: TokenRequest = sas
        .create_subresource("token", &name, &PostParams::default(), &req)
        .await
        .map_err(kube_err(format!("minting a token for {namespace}/{name}")))?;
    Ok(answer.status.map(|s| s.token).unwrap_or_default())
}

/// The audit policy: every request at `Metadata` level (who, what, the answer's code).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

/// One request from the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The authenticated user (`system:serviceaccount:NS:NAME` for a ServiceAccount).
    pub user: String,
    /// The request in the double's terms (verb, group, resource, subresource, namespace, name,
    /// User-Agent, status code), so suites check both backends the same way.
    pub request: crate::apiserver::RequestRecord,
}

impl AuditRecord {
    fn from_event(e: &serde_json::Value) -> Self {
        let s = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let obj = &e["objectRef"];
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let verb = e["verb"].as_str().unwrap_or_default();
        let method = match verb {
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            _ => "GET",
        };
        Self {
            user: s(&e["user"]["username"]).unwrap_or_default(),
            request: crate::apiserver::RequestRecord {
                method: method.into(),
                path: path.into(),
                query: query.into(),
                verb: crate::apiserver::Verb::parse(verb),
                group: s(&obj["apiGroup"]).unwrap_or_default(),
                resource: s(&obj["resource"]),
                subresource: s(&obj["subresource"]),
                namespace: s(&obj["namespace"]),
                name: s(&obj["name"]),
                user_agent: s(&e["userAgent"]).unwrap_or_default(),
                status: e["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
            },
        }
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> RealKubeError {
    move |source| RealKubeError::Io { context, source }
}

fn kube_err(context: String) -> impl FnOnce(kube::Error) -> RealKubeError {
    move |source| RealKubeError::Kube { context, source }
}

fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Makes the child get SIGKILL when the thread that spawned it ends, so an aborted test run
/// leaves no control plane behind.
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own process state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Creates the namespaces `names` (one that exists already is left alone).
pub async fn create_namespaces(client: &kube::Client, names: &[&str]) -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some((*name).into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(format!("creating namespace {name}"))(e)),
        }
    }
    Ok(())
}

/// Applies every CustomResourceDefinition in the `*.yaml` files of `dirs` (server-side apply,
/// field manager `ferrolb-tests`) and waits until each is `Established`, so custom resources can
/// be created right away. A CRD the server refuses (schema, CEL cost budget) is an error naming it.
pub async fn install_crds(client: &kube::Client, dirs: &[PathBuf]) -> Result<Vec<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};

    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for dir in dirs {
        let files = crate::lab::manifests::yaml_files(dir).map_err(|e| RealKubeError::Io {
            context: format!("reading {}", dir.display()),
            source: std::io::Error::other(e.to_string()),
        })?;
        for file in files {
            let docs = crate::lab::manifests::documents(&file).map_err(|e| RealKubeError::Io {
                context: format!("reading {}", file.display()),
                source: std::io::Error::other(e.to_string()),
            })?;
            for doc in docs {
                if doc.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
                    continue;
                }
                let name = doc["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                api.patch(
                    &name,
                    &PatchParams::apply("ferrolb-tests").force(),
                    &Patch::Apply(&doc),
                )
                .await
                .map_err(kube_err(format!(
                    "applying CRD {name} from {}",
                    file.display()
                )))?;
                names.push(name);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in &names {
        loop {
            let crd = api
                .get(name)
                .await
                .map_err(kube_err(format!("reading CRD {name}")))?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(RealKubeError::NotReady {
                    what: "a CustomResourceDefinition",
                    detail: format!("{name} not Established after 60 s"),
                    log: String::new(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare(dir: &Path) -> RealKube {
        RealKube {
            children: Vec::new(),
            config: RealKubeConfig::default(),
            commands: Vec::new(),
            dir: dir.to_path_buf(),
            _tmp: None,
            url: String::new(),
            kubeconfig: dir.join("kubeconfig"),
            ca_pem: Vec::new(),
        }
    }

    fn start_failing(kube: &mut RealKube, message: &str) -> RealKubeError {
        let script = format!("echo '{message}' >&2; exit 1");
        kube.spawn(
            &RealKubeConfig::default(),
            "etcd",
            &["sh".into(), "-c".into(), script.into()],
        )
        .unwrap();
        kube.wait_log("etcd", "etcd: ready", Duration::from_secs(10))
            .unwrap_err()
    }

    #[test]
    fn a_process_that_lost_its_port_to_another_is_forgotten_so_it_can_start_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut kube = bare(dir.path());
        let e = start_failing(
            &mut kube,
            "listen tcp 127.0.0.1:46033: bind: address already in use",
        );
        assert!(e.to_string().contains("exited with"), "{e}");
        assert!(kube.lost_port_race("etcd"));
        assert!(kube.children.is_empty());
    }

    #[test]
    fn a_process_that_failed_for_another_reason_is_not_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut kube = bare(dir.path());
        start_failing(&mut kube, "member has already been bootstrapped");
        assert!(!kube.lost_port_race("etcd"));
        assert_eq!(kube.children.len(), 1);
    }

    #[test]
    fn free_ports_taken_together_differ() {
        let kube = bare(Path::new("/nonexistent"));
        let [a, b, c] = kube.free_ports::<3>(&RealKubeConfig::default()).unwrap();
        assert!(a != b && b != c && a != c);
    }
}
