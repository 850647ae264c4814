//! The manifests in `examples/`, loaded as typed objects and checked the way the API server and
//! FerroLB would check them.
//!
//! # Layout
//! - `manifests/`: configurations a user copies into a real cluster, each with a comment saying
//!   what it does.
//! - `invalid/`: configurations FerroLB refuses, each starting with `# expect: <message>`.

use std::path::{Path, PathBuf};

use ferrolb_api::v1beta1::{
    BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement, all_crds,
};
use ferrolb_api::validate::{
    PoolVerdict, check_bgp_advertisement, check_l2_advertisement, check_pools,
};
use k8s_openapi::api::core::v1::Service;
use kube::core::cel::Validator;
use serde::Deserialize;

/// One object of a manifest file.
#[derive(Debug, Clone)]
pub enum Manifest {
    /// An `IPAddressPool`.
    Pool(Box<IPAddressPool>),
    /// An `L2Advertisement`.
    L2(Box<L2Advertisement>),
    /// A `BGPAdvertisement`.
    BgpAdvertisement(Box<BGPAdvertisement>),
    /// A `BGPPeer`.
    Peer(Box<BGPPeer>),
    /// A `Community`.
    Community(Box<Community>),
    /// A core `Service`.
    Service(Box<Service>),
}

/// A problem with a manifest file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A document is not valid YAML or does not match its kind's type.
    #[error("{path}: document {index}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Zero-based document index.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// The directory holding the examples crate.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Loads every object of a multi-document YAML file.
pub fn load(path: &Path) -> Result<Vec<Manifest>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.into(),
        source,
    })?;
    let mut out = Vec::new();
    for (index, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
        let parse_err = |message: String| Error::Parse {
            path: path.into(),
            index,
            message,
        };
        let value = serde_json::Value::deserialize(doc).map_err(|e| parse_err(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let typed = |v: serde_json::Value| -> Result<Manifest, Error> {
            let m = match kind.as_str() {
                "IPAddressPool" => {
                    Manifest::Pool(serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?)
                }
                "L2Advertisement" => {
                    Manifest::L2(serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?)
                }
                "BGPAdvertisement" => Manifest::BgpAdvertisement(
                    serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?,
                ),
                "BGPPeer" => {
                    Manifest::Peer(serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?)
                }
                "Community" => Manifest::Community(
                    serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?,
                ),
                "Service" => Manifest::Service(
                    serde_json::from_value(v).map_err(|e| parse_err(e.to_string()))?,
                ),
                other => return Err(parse_err(format!("unexpected kind `{other}`"))),
            };
            Ok(m)
        };
        out.push(typed(value)?);
    }
    Ok(out)
}

/// Checks one file the way a cluster running FerroLB would: each FerroLB object against its
/// CRD's schema rules (CEL, as the API server evaluates them), then the rules across objects.
/// Returns every message a user would see; empty when the file is valid.
pub fn check(path: &Path) -> Result<Vec<String>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.into(),
        source,
    })?;
    let mut messages = Vec::new();
    let crds = all_crds();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let Ok(value) = serde_json::Value::deserialize(doc) else {
            continue; // reported by `load`
        };
        let kind = value["kind"].as_str().unwrap_or_default();
        let Some(crd) = crds.iter().find(|c| c.spec.names.kind == kind) else {
            continue;
        };
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("generated CRDs carry a schema"),
        )
        .expect("schemas serialize");
        if let Err(errors) = Validator::new().validate(&schema, &value, None) {
            messages.extend(errors.into_vec().into_iter().map(|e| e.message));
        }
    }
    let objects = load(path)?;
    let pools: Vec<IPAddressPool> = pick(&objects, |m| match m {
        Manifest::Pool(p) => Some(*p.clone()),
        _ => None,
    });
    let peers: Vec<BGPPeer> = pick(&objects, |m| match m {
        Manifest::Peer(p) => Some(*p.clone()),
        _ => None,
    });
    let communities: Vec<Community> = pick(&objects, |m| match m {
        Manifest::Community(c) => Some(*c.clone()),
        _ => None,
    });
    for verdict in check_pools(&pools).into_values() {
        if let PoolVerdict::NotReady(e) = verdict {
            messages.push(e.to_string());
        }
    }
    for m in &objects {
        let errors = match m {
            // A single file is checked on its own; only references inside it can resolve.
            Manifest::L2(a) if !pools.is_empty() || !a.spec.ip_address_pools.is_empty() => {
                check_l2_advertisement(a, &pools)
            }
            Manifest::BgpAdvertisement(a) => {
                check_bgp_advertisement(a, &pools, &peers, &communities)
            }
            _ => vec![],
        };
        messages.extend(errors.iter().map(ToString::to_string));
    }
    Ok(messages)
}

fn pick<T>(objects: &[Manifest], f: impl Fn(&Manifest) -> Option<T>) -> Vec<T> {
    objects.iter().filter_map(f).collect()
}

/// The message an invalid fixture declares on its first line (`# expect: ...`).
pub fn expected_message(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .next()?
        .strip_prefix("# expect: ")
        .map(str::to_string)
}

/// Every `.yaml` file of a subdirectory of `examples/`, sorted.
pub fn yaml_files(subdir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir().join(subdir))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
}
