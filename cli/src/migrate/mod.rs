//! `ferrolb migrate`'s core: MetalLB objects (parsed JSON) in, FerroLB objects and a report
//! out. Pure: no I/O, no clock.
//!
//! ```text
//!  documents ─▶ expand Lists ─▶ classify ─┬─ not MetalLB configuration ─▶ Ignored
//!                                         ▼
//!               convert kind by kind (fields.rs: unknown fields, the unsupported table)
//!                                         ▼
//!               schema::check (FerroLB's CRD bounds and rules, api::validate) ─▶ NotWritten
//!                                         ▼
//!               duplicates ─▶ sort (referred-to kinds first) ─▶ cross-object checks ─▶ NotReady
//! ```
//!
//! Only objects FerroLB's API server would accept are written. Objects it would accept but
//! mark `Ready=False` (an overlap, a reference to something not in the input) are written with a
//! warning, as FerroLB itself keeps the rest of a configuration working around them.

mod convert;
mod duration;
mod fields;
pub mod kinds;
pub mod report;
mod schema;
pub mod unsupported;

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_api::v1beta1::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement,
};
use ferrolb_api::validate::{
    ConfigError, PoolVerdict, check_bgp_advertisement, check_bgp_peer, check_l2_advertisement,
    check_pools, community_aliases,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ApiResource;
use serde_json::Value;

use convert::PeerContext;
use fields::{Collected, Fields};
use kinds::{Kind, METALLB_GROUP, ObjectRef};
use report::{Entry, Finding, IgnoreReason, Problem, Summary};

/// The annotation `kubectl apply` keeps; it describes the MetalLB object, so it is not copied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata the API server manages, or that ties the object to its MetalLB life (owners,
/// finalizers): not carried over.
const SERVER_METADATA: [&str; 11] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "generateName",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// One parsed input document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Where it came from, for the report (`pools.yaml#2`).
    pub source: String,
    /// Its content.
    pub value: Value,
}

/// How to convert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The namespace of the FerroLB objects (FerroLB's install namespace).
    pub to_namespace: String,
    /// MetalLB's namespace, assumed for objects that name none: MetalLB reads its
    /// configuration, and peers' password Secrets, from there.
    pub metallb_namespace: String,
}

/// A FerroLB object, typed as FerroLB's CRDs are.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum FerroObject {
    /// A `Community`.
    Community(Community),
    /// A `BFDProfile`.
    BFDProfile(BFDProfile),
    /// An `IPAddressPool`.
    IPAddressPool(IPAddressPool),
    /// A `BGPPeer`.
    BGPPeer(BGPPeer),
    /// An `L2Advertisement`.
    L2Advertisement(L2Advertisement),
    /// A `BGPAdvertisement`.
    BGPAdvertisement(BGPAdvertisement),
}

impl FerroObject {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            FerroObject::Community(_) => Kind::Community,
            FerroObject::BFDProfile(_) => Kind::BFDProfile,
            FerroObject::IPAddressPool(_) => Kind::IPAddressPool,
            FerroObject::BGPPeer(_) => Kind::BGPPeer,
            FerroObject::L2Advertisement(_) => Kind::L2Advertisement,
            FerroObject::BGPAdvertisement(_) => Kind::BGPAdvertisement,
        }
    }

    /// Its metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            FerroObject::Community(o) => &o.metadata,
            FerroObject::BFDProfile(o) => &o.metadata,
            FerroObject::IPAddressPool(o) => &o.metadata,
            FerroObject::BGPPeer(o) => &o.metadata,
            FerroObject::L2Advertisement(o) => &o.metadata,
            FerroObject::BGPAdvertisement(o) => &o.metadata,
        }
    }

    /// Its name.
    pub fn name(&self) -> String {
        self.metadata().name.clone().unwrap_or_default()
    }

    /// The kube resource it is served as.
    pub fn api_resource(&self) -> ApiResource {
        match self {
            FerroObject::Community(_) => ApiResource::erase::<Community>(&()),
            FerroObject::BFDProfile(_) => ApiResource::erase::<BFDProfile>(&()),
            FerroObject::IPAddressPool(_) => ApiResource::erase::<IPAddressPool>(&()),
            FerroObject::BGPPeer(_) => ApiResource::erase::<BGPPeer>(&()),
            FerroObject::L2Advertisement(_) => ApiResource::erase::<L2Advertisement>(&()),
            FerroObject::BGPAdvertisement(_) => ApiResource::erase::<BGPAdvertisement>(&()),
        }
    }

    /// How `kubectl` names it: `ipaddresspool.ferrolb.io/NAME`.
    pub fn display_name(&self) -> String {
        format!(
            "{}.{}/{}",
            self.kind().name().to_lowercase(),
            ferrolb_api::names::GROUP,
            self.name()
        )
    }

    /// The object as one YAML document (without the `---`), fields in FerroLB's order.
    pub fn to_yaml(&self) -> String {
        let yaml = match self {
            FerroObject::Community(o) => serde_norway::to_string(o),
            FerroObject::BFDProfile(o) => serde_norway::to_string(o),
            FerroObject::IPAddressPool(o) => serde_norway::to_string(o),
            FerroObject::BGPPeer(o) => serde_norway::to_string(o),
            FerroObject::L2Advertisement(o) => serde_norway::to_string(o),
            FerroObject::BGPAdvertisement(o) => serde_norway::to_string(o),
        };
        yaml.expect("FerroLB's types serialize to YAML")
    }

    /// The object as JSON, with `apiVersion` and `kind`.
    pub fn to_json(&self) -> Value {
        let value = match self {
            FerroObject::Community(o) => serde_json::to_value(o),
            FerroObject::BFDProfile(o) => serde_json::to_value(o),
            FerroObject::IPAddressPool(o) => serde_json::to_value(o),
            FerroObject::BGPPeer(o) => serde_json::to_value(o),
            FerroObject::L2Advertisement(o) => serde_json::to_value(o),
            FerroObject::BGPAdvertisement(o) => serde_json::to_value(o),
        };
        value.expect("FerroLB's types serialize to JSON")
    }
}

/// The Secret a converted peer needs in FerroLB's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretCopy {
    /// The Secret's name (the same in both namespaces).
    pub name: String,
    /// Where MetalLB read it.
    pub from_namespace: String,
    /// Where FerroLB reads it.
    pub to_namespace: String,
}

/// One MetalLB object converted.
#[derive(Debug, Clone)]
pub struct Converted {
    /// Where the MetalLB object came from.
    pub source: String,
    /// The MetalLB object.
    pub from: ObjectRef,
    /// The FerroLB object.
    pub object: FerroObject,
    /// The password Secret to copy, for a peer with `passwordSecret`.
    pub password_secret: Option<SecretCopy>,
}

/// The result of a conversion.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The FerroLB objects to write, referred-to kinds first, then by name.
    pub objects: Vec<Converted>,
    /// Everything worth telling, in input order, then the rules across objects.
    pub report: Vec<Entry>,
}

impl Conversion {
    /// The counts of the summary line.
    pub fn summary(&self) -> Summary {
        Summary::of(self.objects.len(), &self.report)
    }

    /// The objects as multi-document YAML.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for c in &self.objects {
            out.push_str("---\n");
            out.push_str(&c.object.to_yaml());
        }
        out
    }
}

/// Converts MetalLB documents into FerroLB objects, with a report of everything that did not
/// carry over exactly.
pub fn convert(documents: Vec<Document>, options: &Options) -> Conversion {
    let mut report = Vec::new();
    let mut converted = Vec::new();
    let mut expanded = Vec::new();
    for doc in documents {
        expand(doc, &mut expanded);
    }
    for doc in expanded {
        if let Some(c) = convert_document(doc, options, &mut report) {
            converted.push(c);
        }
    }

    let mut objects: Vec<Converted> = Vec::with_capacity(converted.len());
    for c in converted {
        let first = objects
            .iter()
            .find(|k| k.object.kind() == c.object.kind() && k.object.name() == c.object.name());
        match first {
            Some(first) => report.push(Entry {
                source: c.source.clone(),
                object: Some(c.from.clone()),
                finding: Finding::Duplicate {
                    first_source: first.source.clone(),
                    same_content: first.object.to_json() == c.object.to_json(),
                },
            }),
            None => objects.push(c),
        }
    }
    objects.sort_by_key(|c| (c.object.kind(), c.object.name()));
    cross_object(&objects, &mut report);
    Conversion { objects, report }
}

/// Flattens `kind: List` and `*List` documents into their items. Items of a typed list
/// (`IPAddressPoolList`) that carry no `apiVersion`/`kind` take the list's.
fn expand(doc: Document, out: &mut Vec<Document>) {
    let kind = doc.value.get("kind").and_then(Value::as_str).unwrap_or("");
    let is_list = kind.ends_with("List") && doc.value.get("items").is_some_and(Value::is_array);
    if !is_list {
        if !doc.value.is_null() {
            out.push(doc);
        }
        return;
    }
    let item_kind = kind.strip_suffix("List").unwrap_or("").to_string();
    let api_version = doc.value.get("apiVersion").cloned();
    let Document { source, value } = doc;
    let Value::Object(mut map) = value else {
        return;
    };
    let Some(Value::Array(items)) = map.remove("items") else {
        return;
    };
    for (i, mut item) in items.into_iter().enumerate() {
        if let Value::Object(obj) = &mut item
            && !item_kind.is_empty()
        {
            if let Some(v) = &api_version {
                obj.entry("apiVersion").or_insert_with(|| v.clone());
            }
            obj.entry("kind")
                .or_insert_with(|| Value::String(item_kind.clone()));
        }
        expand(
            Document {
                source: format!("{source} items[{i}]"),
                value: item,
            },
            out,
        );
    }
}

/// Converts one document, adding its findings to `report`; `None` when nothing is written.
fn convert_document(
    doc: Document,
    options: &Options,
    report: &mut Vec<Entry>,
) -> Option<Converted> {
    let Document { source, value } = doc;
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let api_version = text("apiVersion");
    let kind_name = text("kind");
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let ignored = |reason| Entry {
        source: source.clone(),
        object: None,
        finding: Finding::Ignored {
            api_version: api_version.clone(),
            kind: kind_name.clone(),
            name: name.clone(),
            reason,
        },
    };
    if !value.is_object() {
        report.push(ignored(IgnoreReason::NotAnObject));
        return None;
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let Some(kind) = Kind::from_name(&kind_name).filter(|_| group == METALLB_GROUP) else {
        report.push(ignored(IgnoreReason::NotMetallbConfiguration));
        return None;
    };
    if !kind.versions().contains(&version) {
        report.push(ignored(IgnoreReason::UnknownVersion));
        return None;
    }
    let from = ObjectRef {
        kind,
        version: version.to_string(),
        name: name.clone().unwrap_or_default(),
    };

    let mut collected = Collected::default();
    let mut built = None;
    let mut secret = None;
    if let Some(mut root) = Fields::new("", value, &mut collected) {
        root.drop_known("apiVersion");
        root.drop_known("kind");
        // Status is MetalLB's observation of MetalLB's objects: FerroLB writes its own.
        root.drop_known("status");
        let (meta, namespace) = root
            .object("metadata", |m| metadata(m, &options.to_namespace))
            .unwrap_or_default();
        let metallb_namespace = namespace.unwrap_or_else(|| options.metallb_namespace.clone());
        let ctx = PeerContext {
            metallb_namespace: &metallb_namespace,
            to_namespace: &options.to_namespace,
        };
        built = root.object_or_empty("spec", |spec| {
            let (object, password) = ferro_object(kind, version, meta, spec, &ctx);
            secret = password;
            object
        });
        root.finish();
    }
    if name.as_deref().is_none_or(str::is_empty) {
        collected.problems.insert(0, Problem::MissingName);
    }
    if collected.problems.is_empty()
        && let Some(object) = &built
    {
        collected.problems = schema::check(object);
    }

    let written = collected.problems.is_empty();
    for finding in collected.findings {
        // For an object not written, only what is wrong with the input is worth telling.
        let keep = written
            || matches!(
                finding,
                Finding::UnsupportedField { .. } | Finding::UnknownField { .. }
            );
        if keep {
            report.push(Entry {
                source: source.clone(),
                object: Some(from.clone()),
                finding,
            });
        }
    }
    if !written {
        report.push(Entry {
            source,
            object: Some(from),
            finding: Finding::NotWritten {
                problems: collected.problems,
            },
        });
        return None;
    }
    Some(Converted {
        source,
        from,
        object: built?,
        password_secret: secret,
    })
}

/// The FerroLB object of one MetalLB `kind` (at `version`) from its converted metadata and
/// spec, with the password Secret a `BGPPeer` needs copied.
fn ferro_object(
    kind: Kind,
    version: &str,
    meta: ObjectMeta,
    spec: &mut Fields<'_>,
    ctx: &PeerContext<'_>,
) -> (FerroObject, Option<SecretCopy>) {
    let object = match (kind, version) {
        (Kind::IPAddressPool, _) => FerroObject::IPAddressPool(IPAddressPool {
            metadata: meta,
            spec: convert::ip_address_pool(spec),
            status: None,
        }),
        (Kind::L2Advertisement, _) => FerroObject::L2Advertisement(L2Advertisement {
            metadata: meta,
            spec: convert::l2_advertisement(spec),
            status: None,
        }),
        (Kind::BGPAdvertisement, _) => FerroObject::BGPAdvertisement(BGPAdvertisement {
            metadata: meta,
            spec: convert::bgp_advertisement(spec),
            status: None,
        }),
        (Kind::Community, _) => FerroObject::Community(Community {
            metadata: meta,
            spec: convert::community(spec),
            status: None,
        }),
        (Kind::BFDProfile, _) => FerroObject::BFDProfile(BFDProfile {
            metadata: meta,
            spec: convert::bfd_profile(spec),
            status: None,
        }),
        (Kind::BGPPeer, v) => {
            let peer = if v == "v1beta1" {
                convert::bgp_peer_v1beta1(spec)
            } else {
                convert::bgp_peer_v1beta2(spec, ctx)
            };
            let secret = peer.password_secret.map(|name| SecretCopy {
                name,
                from_namespace: ctx.metallb_namespace.to_owned(),
                to_namespace: ctx.to_namespace.to_owned(),
            });
            let object = FerroObject::BGPPeer(BGPPeer {
                metadata: meta,
                spec: peer.spec,
                status: None,
            });
            return (object, secret);
        }
    };
    (object, None)
}

/// FerroLB metadata from MetalLB's: the name, labels (`ipAddressPoolSelectors` select pools
/// by label) and annotations (less [`LAST_APPLIED`]), in `to_namespace`. Also returns the
/// MetalLB object's own namespace.
fn metadata(m: &mut Fields<'_>, to_namespace: &str) -> (ObjectMeta, Option<String>) {
    let name = m.non_empty_string("name");
    let namespace = m.non_empty_string("namespace");
    let labels = m.string_map("labels").filter(|l| !l.is_empty());
    let annotations = m
        .string_map("annotations")
        .map(|mut a| {
            a.remove(LAST_APPLIED);
            a
        })
        .filter(|a| !a.is_empty());
    for key in SERVER_METADATA {
        m.drop_known(key);
    }
    let meta = ObjectMeta {
        name,
        namespace: Some(to_namespace.to_string()),
        labels,
        annotations,
        ..ObjectMeta::default()
    };
    (meta, namespace)
}

/// FerroLB's rules across objects ([`ferrolb_api::validate`]) over the converted set: each
/// error is a warning on the object FerroLB would mark `Ready=False`.
fn cross_object(objects: &[Converted], report: &mut Vec<Entry>) {
    let mut pools = Vec::new();
    let mut peers = Vec::new();
    let mut communities = Vec::new();
    let mut profiles = BTreeSet::new();
    for c in objects {
        match &c.object {
            FerroObject::IPAddressPool(p) => pools.push(p.clone()),
            FerroObject::BGPPeer(p) => peers.push(p.clone()),
            FerroObject::Community(o) => communities.push(o.clone()),
            FerroObject::BFDProfile(_) => {
                profiles.insert(c.object.name());
            }
            FerroObject::L2Advertisement(_) | FerroObject::BGPAdvertisement(_) => {}
        }
    }
    let mut errors: Vec<(&Converted, ConfigError)> = Vec::new();
    let verdicts: BTreeMap<String, PoolVerdict> = check_pools(&pools);
    for c in objects {
        match &c.object {
            FerroObject::IPAddressPool(_) => {
                if let Some(PoolVerdict::NotReady(e)) = verdicts.get(&c.object.name()) {
                    errors.push((c, e.clone()));
                }
            }
            FerroObject::L2Advertisement(adv) => {
                errors.extend(
                    check_l2_advertisement(adv, &pools)
                        .into_iter()
                        .map(|e| (c, e)),
                );
            }
            FerroObject::BGPAdvertisement(adv) => errors.extend(
                check_bgp_advertisement(adv, &pools, &peers, &communities)
                    .into_iter()
                    .map(|e| (c, e)),
            ),
            FerroObject::BGPPeer(peer) => {
                // The Secret is not among the objects: the action-needed note covers it.
                let secrets: BTreeSet<String> = peer
                    .spec
                    .password_secret
                    .iter()
                    .map(|s| s.name.clone())
                    .collect();
                errors.extend(
                    check_bgp_peer(peer, &secrets, &profiles)
                        .into_iter()
                        .map(|e| (c, e)),
                );
            }
            FerroObject::Community(_) | FerroObject::BFDProfile(_) => {}
        }
    }
    if let Err(e @ ConfigError::DuplicateCommunityAlias { .. }) = community_aliases(&communities)
        && let ConfigError::DuplicateCommunityAlias { alias, second, .. } = &e
        && let Some(c) = objects.iter().find(|c| match &c.object {
            FerroObject::Community(o) => o
                .spec
                .communities
                .iter()
                .any(|a| a.name == *alias && a.value == *second),
            _ => false,
        })
    {
        errors.push((c, e.clone()));
    }
    report.extend(errors.into_iter().map(|(c, error)| Entry {
        source: c.source.clone(),
        object: Some(c.from.clone()),
        finding: Finding::NotReady { error },
    }));
}

#[cfg(test)]
mod tests;
