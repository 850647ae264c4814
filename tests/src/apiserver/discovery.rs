//! Discovery documents: legacy (`/api`, `/apis`, group and group-version lists) and aggregated
//! (`apidiscovery.k8s.io/v2`, chosen through `Accept`). Pure.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use super::resources::ResourceDef;

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "35", "emulationMajor": "1", "emulationMinor": "35",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "34", "gitVersion": "v1.35.6",
        "gitCommit": "$Format:%H$", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.5", "compiler": "gc", "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn api_versions(server: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]})
}

fn verbs(def: &ResourceDef) -> Vec<&'static str> {
    let mut v = vec![
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    if def.plural == "namespaces" {
        v.retain(|x| *x != "deletecollection");
    }
    v
}

/// The groups other than core, in a stable order with their versions.
fn groups(defs: &[ResourceDef]) -> BTreeMap<String, Vec<String>> {
    let mut g: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        let versions = g.entry(d.group.clone()).or_default();
        if !versions.contains(&d.version) {
            versions.push(d.version.clone());
        }
    }
    g
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

/// `/apis`.
pub fn group_list(defs: &[ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs).iter().map(|(n, v)| group_json(n, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`.
pub fn group(defs: &[ResourceDef], name: &str) -> Option<Value> {
    let g = groups(defs);
    let versions = g.get(name)?;
    let mut v = group_json(name, versions);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// `/api/v1` or `/apis/GROUP/VERSION`.
pub fn resource_list(defs: &[ResourceDef], group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    let mut mine: Vec<&ResourceDef> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    mine.sort_by(|a, b| a.plural.cmp(&b.plural));
    for d in mine {
        let mut r = json!({"name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
                           "kind": d.kind, "verbs": verbs(d)});
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        if d.status_subresource {
            resources.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
                                  "kind": d.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// Aggregated discovery (`/api` when `core`, else `/apis`).
pub fn aggregated(defs: &[ResourceDef], core: bool) -> Value {
    let mut items = Vec::new();
    let names: Vec<String> = if core {
        vec![String::new()]
    } else {
        groups(defs).keys().cloned().collect()
    };
    for g in names {
        let versions = if core {
            vec!["v1".to_string()]
        } else {
            groups(defs)[&g].clone()
        };
        let mut vlist = Vec::new();
        for v in versions {
            let mut mine: Vec<&ResourceDef> = defs
                .iter()
                .filter(|d| d.group == g && d.version == v)
                .collect();
            mine.sort_by(|a, b| a.plural.cmp(&b.plural));
            let resources: Vec<Value> = mine
                .iter()
                .map(|d| {
                    let mut r = json!({
                        "resource": d.plural, "responseKind": {"group": "", "version": "", "kind": d.kind},
                        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": d.singular, "verbs": verbs(d),
                    });
                    if !d.short_names.is_empty() {
                        r["shortNames"] = json!(d.short_names);
                    }
                    if !d.categories.is_empty() {
                        r["categories"] = json!(d.categories);
                    }
                    if d.status_subresource {
                        r["subresources"] = json!([{"subresource": "status", "responseKind": {"group": "", "version": "", "kind": d.kind}, "verbs": ["get", "patch", "update"]}]);
                    }
                    r
                })
                .collect();
            vlist.push(json!({"version": v, "resources": resources, "freshness": "Current"}));
        }
        let mut item = json!({"metadata": {"creationTimestamp": null}, "versions": vlist});
        if !g.is_empty() {
            item["metadata"]["name"] = json!(g);
        }
        items.push(item);
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// How the client asked for discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscoveryFormat {
    /// Plain JSON documents.
    Legacy,
    /// `apidiscovery.k8s.io/v2`.
    AggregatedV2,
    /// Only formats this server does not offer (v2beta1 alone).
    Unacceptable,
}

/// Picks the discovery format from an `Accept` header.
pub fn format_from_accept(accept: &str) -> DiscoveryFormat {
    let options: Vec<&str> = accept.split(',').map(str::trim).collect();
    if options.iter().any(|o| {
        o.contains("as=APIGroupDiscoveryList") && o.contains("v=v2;")
            || o.ends_with("v=v2") && o.contains("apidiscovery")
    }) {
        return DiscoveryFormat::AggregatedV2;
    }
    let plain = options.iter().any(|o| {
        let base = o.split(';').next().unwrap_or("").trim();
        !o.contains("as=")
            && (base == "application/json"
                || base == "*/*"
                || base == "application/yaml"
                || base.is_empty())
    });
    if plain || accept.is_empty() {
        DiscoveryFormat::Legacy
    } else {
        DiscoveryFormat::Unacceptable
    }
}

/// A strong ETag of a document.
pub fn etag(doc: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("\"{:016X}\"", h.finish())
}
