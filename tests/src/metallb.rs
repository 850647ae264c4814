//! MetalLB's own controller and speaker (v0.16, built from the Go module proxy by
//! `scripts/metallb` into `target/metallb/`), run as processes against a real kube-apiserver, for
//! the migration test and the side-by-side bench. Nothing of MetalLB is committed: the binaries
//! and its CRDs come from the module cache.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// `FERROLB_METALLB_DIR` overrides where the binaries are looked for.
pub const DIR_ENV: &str = "FERROLB_METALLB_DIR";

/// The namespace MetalLB is configured in, as its own manifests install it.
pub const NAMESPACE: &str = "metallb-system";

/// The directory of the binaries: `$FERROLB_METALLB_DIR`, or the workspace's `target/metallb`.
pub fn dir() -> PathBuf {
    crate::built_dir(DIR_ENV, "metallb")
}

/// MetalLB's CRDs (`target/metallb/crds`, copied from the module by `scripts/metallb`).
pub fn crd_dir() -> PathBuf {
    dir().join("crds")
}

/// Whether `scripts/metallb` has built the controller, the speaker and copied the CRDs; the
/// missing part otherwise.
pub fn missing() -> Option<PathBuf> {
    crate::first_missing(&dir(), &["controller", "speaker", "crds"])
}

/// The MetalLB version `scripts/metallb` built (its `VERSION` file).
pub fn version() -> String {
    crate::built_version(&dir())
}

/// The name of the controller's Pod object: MetalLB's controller reads its own Pod at start (for
/// owner references) and exits without it.
pub const CONTROLLER_POD: &str = "controller";

/// Creates what MetalLB's processes read of themselves before they start: the namespace's
/// `default` ServiceAccount (kube-controller-manager would make it; the tests' control plane may
/// run without one) and a Pod object per process, named `pods[i].0` and labelled with `pods[i].1`
/// (`k=v,k2=v2`), with the status the kubelet would write (`pods[i].2`, its IP, when given).
/// Objects that already exist are left alone.
pub async fn create_pods(
    client: &kube::Client,
    pods: &[(&str, &str, Option<&str>)],
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let ignore_exists = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other,
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))
            .expect("a ServiceAccount");
    ignore_exists(
        accounts
            .create(&PostParams::default(), &account)
            .await
            .map(drop),
    )?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, labels, ip) in pods {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"hostNetwork": ip.is_some(), "automountServiceAccountToken": false,
                     "containers": [{"name": "metallb", "image": "metallb:test"}]},
        }))
        .expect("a Pod");
        ignore_exists(api.create(&PostParams::default(), &pod).await.map(drop))?;
        if let Some(ip) = ip {
            let status = serde_json::json!({"status": {
                "phase": "Running", "podIP": ip, "hostIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True"}],
            }});
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await?;
        }
    }
    Ok(())
}

/// A MetalLB process; killed (SIGKILL) when dropped.
pub struct Process {
    child: Child,
}

impl Process {
    /// Starts MetalLB's controller out of cluster: no webhook (it would need a Service and
    /// certificates the test cluster has not got), no metrics listener, its configuration in
    /// [`NAMESPACE`], its Pod object [`CONTROLLER_POD`] (see [`create_pods`]). `log_level` is
    /// MetalLB's (`none`, `error`, `warn`, `info`, `debug`); its log goes to this stdout unless
    /// `none`.
    pub fn controller(kubeconfig: &Path, log_level: &str) -> std::io::Result<Self> {
        let child = Command::new(dir().join("controller"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                &format!("--namespace={NAMESPACE}"),
                &format!("--pod-name={CONTROLLER_POD}"),
                "--webhook-mode=disabled",
                "--disable-cert-rotation",
                "--port=0",
                &format!("--health-probe-port={}", free_port()?),
                &format!("--log-level={log_level}"),
            ])
            .stdin(Stdio::null())
            // MetalLB logs JSON lines to stdout, a warning for every Service with a
            // `metallb.universe.tf/` annotation even at `warn`: shown only when asked for.
            .stdout(if log_level == "none" {
                Stdio::null()
            } else {
                Stdio::inherit()
            })
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Self { child })
    }

    /// The process id, to read its CPU time and memory from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
