//! The resources the server serves: built-in kinds and CRDs read from YAML. Pure apart from file reads.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::schema::CrdSchema;

/// Kind-specific behaviour of a built-in resource (defaults, validation, storage shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// core/v1 Service.
    Service,
    /// core/v1 Node.
    Node,
    /// core/v1 Pod.
    Pod,
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Event (stored as events.k8s.io/v1).
    CoreEvent,
    /// events.k8s.io/v1 Event.
    Event,
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition.
    Crd,
}

/// What governs a resource's objects.
#[derive(Clone, Debug)]
pub enum Flavor {
    /// A built-in kind.
    Builtin(Builtin),
    /// A custom resource with its schema.
    Custom(Arc<CrdSchema>),
}

/// One served resource (`GROUP/VERSION/PLURAL`).
#[derive(Clone, Debug)]
pub struct ResourceDef {
    /// API group, empty for core.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural name used in paths.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for discovery.
    pub short_names: Vec<String>,
    /// Categories for discovery.
    pub categories: Vec<String>,
    /// Whether `/status` exists.
    pub status_subresource: bool,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// Behaviour.
    pub flavor: Flavor,
    /// Where the objects are stored (events are stored once for two APIs).
    pub storage: StorageKey,
}

/// Identifies a store table: `(group, plural)` of the storage resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageKey {
    /// Group.
    pub group: String,
    /// Plural.
    pub plural: String,
}

impl ResourceDef {
    /// `apiVersion` of objects of this resource.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `Kind.group` as error messages print it (`Service`, `Widget.fx.example.io`).
    pub fn kind_group(&self) -> String {
        // events.k8s.io validation reports the internal (core) kind.
        if self.group.is_empty() || self.builtin() == Some(Builtin::Event) {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        matches!(self.flavor, Flavor::Custom(_))
    }

    /// The built-in kind, if any.
    pub fn builtin(&self) -> Option<Builtin> {
        match self.flavor {
            Flavor::Builtin(b) => Some(b),
            Flavor::Custom(_) => None,
        }
    }

    /// The CRD schema, for custom resources.
    pub fn schema(&self) -> Option<&Arc<CrdSchema>> {
        match &self.flavor {
            Flavor::Custom(s) => Some(s),
            Flavor::Builtin(_) => None,
        }
    }

    /// Whether a write without resourceVersion is refused (Leases and CRs).
    pub fn requires_rv_on_update(&self) -> bool {
        self.is_custom() || matches!(self.builtin(), Some(Builtin::Lease))
    }

    /// Whether DELETE answers with the object (rather than a Status Success).
    pub fn delete_returns_object(&self) -> bool {
        self.is_custom()
            || matches!(
                self.builtin(),
                Some(Builtin::Service | Builtin::Pod | Builtin::Namespace)
            )
    }
}

struct BuiltinRow {
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    generation: bool,
    builtin: Builtin,
}

const BUILTINS: &[BuiltinRow] = &[
    BuiltinRow {
        group: "",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short: &["cm"],
        status: false,
        generation: false,
        builtin: Builtin::ConfigMap,
    },
    BuiltinRow {
        group: "",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short: &["ev"],
        status: false,
        generation: false,
        builtin: Builtin::CoreEvent,
    },
    BuiltinRow {
        group: "",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short: &["ns"],
        status: true,
        generation: false,
        builtin: Builtin::Namespace,
    },
    BuiltinRow {
        group: "",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short: &["no"],
        status: true,
        generation: false,
        builtin: Builtin::Node,
    },
    BuiltinRow {
        group: "",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short: &["po"],
        status: true,
        generation: false,
        builtin: Builtin::Pod,
    },
    BuiltinRow {
        group: "",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short: &[],
        status: false,
        generation: false,
        builtin: Builtin::Secret,
    },
    BuiltinRow {
        group: "",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short: &["svc"],
        status: true,
        generation: false,
        builtin: Builtin::Service,
    },
    BuiltinRow {
        group: "coordination.k8s.io",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short: &[],
        status: false,
        generation: false,
        builtin: Builtin::Lease,
    },
    BuiltinRow {
        group: "discovery.k8s.io",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        short: &[],
        status: false,
        generation: true,
        builtin: Builtin::EndpointSlice,
    },
    BuiltinRow {
        group: "events.k8s.io",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short: &["ev"],
        status: false,
        generation: false,
        builtin: Builtin::Event,
    },
    BuiltinRow {
        group: "apiextensions.k8s.io",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short: &["crd", "crds"],
        status: true,
        generation: true,
        builtin: Builtin::Crd,
    },
];

/// The built-in resources.
pub fn builtins() -> Vec<ResourceDef> {
    BUILTINS
        .iter()
        .map(|r| {
            let storage = if r.builtin == Builtin::CoreEvent {
                StorageKey {
                    group: "events.k8s.io".into(),
                    plural: "events".into(),
                }
            } else {
                StorageKey {
                    group: r.group.into(),
                    plural: r.plural.into(),
                }
            };
            ResourceDef {
                group: r.group.into(),
                version: "v1".into(),
                plural: r.plural.into(),
                singular: r.singular.into(),
                kind: r.kind.into(),
                namespaced: r.namespaced,
                short_names: r.short.iter().map(|s| s.to_string()).collect(),
                categories: if matches!(r.builtin, Builtin::Service | Builtin::Pod) {
                    vec!["all".into()]
                } else {
                    vec![]
                },
                status_subresource: r.status,
                generation: r.generation,
                flavor: Flavor::Builtin(r.builtin),
                storage,
            }
        })
        .collect()
}

/// Errors reading CRDs.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The directory or a file could not be read.
    #[error("cannot read CRDs from {path}: {source}")]
    Io {
        /// File or directory.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML.
    #[error("{path} is not valid YAML: {message}")]
    Yaml {
        /// File.
        path: String,
        /// Parser message.
        message: String,
    },
    /// A CRD lacks a required field.
    #[error("CRD {name} is missing {field}")]
    Missing {
        /// CRD name.
        name: String,
        /// The missing field.
        field: &'static str,
    },
}

/// Reads every `*.yaml`/`*.yml`/`*.json` file in `dir` and returns the CRDs they hold.
pub fn read_crd_dir(dir: &Path) -> Result<Vec<Value>, CrdError> {
    let io = |source| CrdError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(&p).map_err(|source| CrdError::Io {
            path: p.display().to_string(),
            source,
        })?;
        out.extend(
            parse_crd_documents(&text).map_err(|message| CrdError::Yaml {
                path: p.display().to_string(),
                message,
            })?,
        );
    }
    Ok(out)
}

/// Parses a multi-document YAML (or JSON) text and keeps the CustomResourceDefinitions.
pub fn parse_crd_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            out.push(v);
        } else if let Some(body) = v.pointer("/request/body")
            && body.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
        {
            // A recorded exchange whose request body is a CRD.
            out.push(body.clone());
        }
    }
    Ok(out)
}

/// The served resources a CRD defines (one per served version).
pub fn crd_resources(crd: &Value) -> Result<Vec<ResourceDef>, CrdError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let s = |p: &str, field: &'static str| -> Result<String, CrdError> {
        crd.pointer(p)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(CrdError::Missing {
                name: name.clone(),
                field,
            })
    };
    let group = s("/spec/group", "spec.group")?;
    let plural = s("/spec/names/plural", "spec.names.plural")?;
    let kind = s("/spec/names/kind", "spec.names.kind")?;
    let singular = crd
        .pointer("/spec/names/singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = crd.pointer("/spec/scope").and_then(Value::as_str) != Some("Cluster");
    let strings = |p: &str| -> Vec<String> {
        crd.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings("/spec/names/shortNames");
    let categories = strings("/spec/names/categories");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .ok_or(CrdError::Missing {
            name: name.clone(),
            field: "spec.versions",
        })?;
    let mut out = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("v1")
            .to_string();
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(Value::Null);
        let status_subresource = v.pointer("/subresources/status").is_some();
        let printer_columns = v
            .get("additionalPrinterColumns")
            .cloned()
            .unwrap_or(Value::Null);
        let crd_schema = CrdSchema::new(&group, &version, &kind, schema, printer_columns);
        out.push(ResourceDef {
            group: group.clone(),
            version,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            status_subresource,
            generation: true,
            flavor: Flavor::Custom(Arc::new(crd_schema)),
            storage: StorageKey {
                group: group.clone(),
                plural: plural.clone(),
            },
        });
    }
    Ok(out)
}
