//! The API server a suite starts for itself: the in-process double (default) or a real
//! kube-apiserver ([`crate::realkube`]), chosen by `FERROLB_APISERVER=double|real`, behind one
//! type so that a suite runs unchanged against both.
//!
//! What only the double can do (fault injection, restart) is [`Backend::faults`] and
//! [`Backend::double`]; a test that needs it says so by taking the `Option`. The request log
//! exists on both: the double records every request, the real server writes its audit log.

use std::path::{Path, PathBuf};

use crate::apiserver::{ApiServer, ApiServerConfig, ApiServerHandle, Faults, RequestRecord};
use crate::realkube::{self, RealKube, RealKubeConfig};

/// The environment variable that picks the backend: `double` (default) or `real`.
pub const BACKEND_ENV: &str = "FERROLB_APISERVER";

/// Which kind of API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The in-process test API server.
    Double,
    /// A real etcd + kube-apiserver.
    Real,
}

impl BackendKind {
    /// From [`BACKEND_ENV`]; anything but `real` is the double.
    pub fn from_env() -> Self {
        match std::env::var(BACKEND_ENV).as_deref() {
            Ok("real") => Self::Real,
            _ => Self::Double,
        }
    }

    /// `double` or `real`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Double => "double",
            Self::Real => "real",
        }
    }
}

/// A running API server of either kind, stopped when dropped.
pub enum Backend {
    /// The double.
    Double(ApiServerHandle),
    /// A real control plane.
    Real(Box<RealKube>),
}

impl Backend {
    /// Starts the backend of [`BackendKind::from_env`] serving the CRDs in `crd_dirs`. `double`
    /// and `real` adjust each configuration (listen address, Service CIDRs, namespace).
    pub async fn start(
        crd_dirs: &[PathBuf],
        double: impl FnOnce(ApiServerConfig) -> ApiServerConfig,
        real: impl FnOnce(RealKubeConfig) -> RealKubeConfig,
    ) -> Result<Self, String> {
        Self::start_kind(BackendKind::from_env(), crd_dirs, double, real).await
    }

    /// Like [`Backend::start`], of the given kind.
    pub async fn start_kind(
        kind: BackendKind,
        crd_dirs: &[PathBuf],
        double: impl FnOnce(ApiServerConfig) -> ApiServerConfig,
        real: impl FnOnce(RealKubeConfig) -> RealKubeConfig,
    ) -> Result<Self, String> {
        match kind {
            BackendKind::Double => {
                let mut config = ApiServerConfig::default();
                for d in crd_dirs {
                    config = config.with_crd_dir(d);
                }
                let server = ApiServer::start(double(config))
                    .await
                    .map_err(|e| format!("the test API server did not start: {e}"))?;
                Ok(Self::Double(server))
            }
            BackendKind::Real => {
                let kube = RealKube::start(real(RealKubeConfig::default()))
                    .await
                    .map_err(|e| e.to_string())?;
                let client = kube.client().map_err(|e| e.to_string())?;
                realkube::install_crds(&client, crd_dirs)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Self::Real(Box::new(kube)))
            }
        }
    }

    /// Which kind this is.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Double(_) => BackendKind::Double,
            Self::Real(_) => BackendKind::Real,
        }
    }

    /// An admin client. Call it inside the tokio runtime the client will be used on.
    pub fn client(&self) -> kube::Client {
        match self {
            Self::Double(s) => s.client(),
            Self::Real(k) => k.client().expect("a client of the real API server"),
        }
    }

    /// Writes an admin kubeconfig for a binary under test.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        match self {
            Self::Double(s) => s.write_kubeconfig(path),
            Self::Real(k) => std::fs::copy(k.kubeconfig(), path).map(|_| ()),
        }
    }

    /// Every request served so far, in order (the double's log, or the real server's audit log).
    pub fn request_log(&self) -> Vec<RequestRecord> {
        match self {
            Self::Double(s) => s.request_log(),
            Self::Real(k) => k.request_log().into_iter().map(|r| r.request).collect(),
        }
    }

    /// Restarts the API server, its stored objects kept: the double drops every connection
    /// and watch and listens again; the real kube-apiserver is stopped (SIGTERM, or SIGKILL
    /// with `kill`) and started again. Returns how long it did not serve (the double: about
    /// nothing).
    pub async fn restart(&mut self, kill: bool) -> Result<std::time::Duration, String> {
        match self {
            Self::Double(s) => {
                let at = std::time::Instant::now();
                s.restart().await;
                Ok(at.elapsed())
            }
            Self::Real(k) => k.restart_apiserver(kill).await.map_err(|e| e.to_string()),
        }
    }

    /// The double's fault handle; `None` on a real server.
    pub fn faults(&self) -> Option<Faults> {
        self.double().map(ApiServerHandle::faults)
    }

    /// The double; `None` on a real server.
    pub fn double(&self) -> Option<&ApiServerHandle> {
        match self {
            Self::Double(s) => Some(s),
            Self::Real(_) => None,
        }
    }

    /// The real control plane, to restart its parts; `None` for the double.
    pub fn real_mut(&mut self) -> Option<&mut RealKube> {
        match self {
            Self::Real(k) => Some(k),
            Self::Double(_) => None,
        }
    }

    /// The real control plane; `None` for the double.
    pub fn real(&self) -> Option<&RealKube> {
        match self {
            Self::Real(k) => Some(k),
            Self::Double(_) => None,
        }
    }
}
