//! The server's shared state (store, served resources, cluster settings) and request context. No I/O.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::resources::{ResourceDef, StorageKey, builtins, crd_resources};
use super::store::{ObjKey, Store};

/// Cluster-wide settings that shape defaults.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Service CIDR base (a /24 of IPv4 addresses is used, `.1` is reserved for `kubernetes`).
    pub service_cidr_base: Ipv4Addr,
    /// NodePort range, inclusive.
    pub node_port_range: (u16, u16),
    /// IPv6 Service CIDR base (a /112 is used). `None`, the default, is an IPv4-only cluster
    /// like the one the recorded fixtures come from; `Some` makes the cluster dual-stack
    /// (IPv4 first), so IPv6 and dual-stack Services are accepted.
    pub service_cidr_v6: Option<std::net::Ipv6Addr>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            service_cidr_base: Ipv4Addr::new(10, 0, 0, 0),
            node_port_range: (30000, 32767),
            service_cidr_v6: None,
        }
    }
}

/// The served resources.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    defs: Vec<ResourceDef>,
}

impl Registry {
    /// Built-ins only.
    pub fn with_builtins() -> Self {
        Self { defs: builtins() }
    }

    /// Adds (or replaces) the resources a CRD defines.
    pub fn add_crd(&mut self, crd: &Value) -> Result<(), super::resources::CrdError> {
        for def in crd_resources(crd)? {
            self.defs.retain(|d| {
                !(d.group == def.group && d.version == def.version && d.plural == def.plural)
            });
            self.defs.push(def);
        }
        Ok(())
    }

    /// Removes the resources of a CRD.
    pub fn remove_crd(&mut self, group: &str, plural: &str) {
        self.defs
            .retain(|d| !(d.group == group && d.plural == plural));
    }

    /// The resource at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
    }

    /// Whether the group/version is served at all.
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.version == version)
    }

    /// Whether the group is served.
    pub fn serves_group(&self, group: &str) -> bool {
        self.defs.iter().any(|d| d.group == group)
    }

    /// All resources.
    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }
}

/// Everything behind the server's lock.
#[derive(Debug)]
pub struct State {
    /// Objects.
    pub store: Store,
    /// Served resources.
    pub registry: Registry,
    /// Cluster settings.
    pub cluster: ClusterConfig,
}

/// Namespaces that exist in every cluster.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

impl State {
    /// A fresh cluster with the system namespaces.
    pub fn new(registry: Registry, cluster: ClusterConfig, history_capacity: usize) -> Self {
        let mut st = Self {
            store: Store::new(history_capacity),
            registry,
            cluster,
        };
        let key = StorageKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        for ns in SYSTEM_NAMESPACES {
            let obj = json!({
                "kind": "Namespace", "apiVersion": "v1",
                "metadata": {"name": ns, "uid": new_uid(), "creationTimestamp": now_seconds(),
                             "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            st.store.put(&key, ObjKey::new("", ns), obj);
        }
        st
    }

    /// Whether namespace `ns` exists.
    pub fn namespace_exists(&self, ns: &str) -> bool {
        let key = StorageKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        self.store.get(&key, &ObjKey::new("", ns)).is_some()
    }
}

/// What a request is about, once its path is understood.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The resource.
    pub res: ResourceDef,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Subresource (`status`).
    pub subresource: Option<String>,
    /// Query parameters.
    pub query: HashMap<String, String>,
    /// Field manager for writes.
    pub manager: String,
}

impl Ctx {
    /// A query parameter.
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    /// Whether the request targets `/status`.
    pub fn is_status(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    /// Whether `dryRun=All` was asked.
    pub fn dry_run(&self) -> bool {
        self.q("dryRun") == Some("All")
    }

    /// The store key of the named object.
    pub fn key(&self) -> ObjKey {
        ObjKey::new(
            self.namespace.as_deref().unwrap_or(""),
            self.name.as_deref().unwrap_or(""),
        )
    }

    /// The 404 for the named object.
    pub fn not_found(&self) -> ApiError {
        ApiError::NotFound {
            group: self.res.group.clone(),
            resource: self.res.plural.clone(),
            name: self.name.clone().unwrap_or_default(),
        }
    }
}

/// A random RFC 4122 version-4 UUID.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let variant = (b[8] & 0x3f) | 0x80;
    format!(
        "{}-{}-4{}-{:02x}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        variant,
        &hex[18..20],
        &hex[20..32]
    )
}

/// Now as a `metav1.Time` (RFC 3339, seconds).
pub fn now_seconds() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Now as a `metav1.MicroTime` (RFC 3339, six fractional digits).
pub fn now_micros() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The five random characters kube-apiserver appends to `generateName`.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Parses a resourceVersion string.
pub fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse::<u64>()
        .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s}")))
}
