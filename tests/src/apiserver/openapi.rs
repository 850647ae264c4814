//! OpenAPI v3 documents, as much of them as `kubectl apply` needs: the index of group-versions, one
//! document per group-version whose write operations carry `x-kubernetes-group-version-kind` and the
//! `fieldValidation` parameter (so kubectl leaves validation to the server), and CRD schemas. Pure.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::discovery::etag;
use super::resources::ResourceDef;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the group-versions and where their documents are.
pub fn index(defs: &[ResourceDef]) -> Value {
    let gvs: BTreeSet<(String, String)> = defs
        .iter()
        .map(|d| (d.group.clone(), d.version.clone()))
        .collect();
    let mut paths = Map::new();
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        let hash = etag(&document(defs, &g, &v)).trim_matches('"').to_string();
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

fn params(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}})).collect()
}

fn op(def: &ResourceDef, action: &str, extra: &[&str]) -> Value {
    let mut names = vec!["pretty"];
    names.extend_from_slice(extra);
    json!({
        "operationId": format!("{action}{}", def.kind),
        "parameters": params(&names),
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    })
}

fn schema_name(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        format!("io.k8s.api.core.{}.{}", def.version, def.kind)
    } else {
        let reversed: Vec<&str> = def.group.split('.').rev().collect();
        format!("{}.{}.{}", reversed.join("."), def.version, def.kind)
    }
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/GROUP/VERSION`.
pub fn document(defs: &[ResourceDef], group: &str, version: &str) -> Value {
    let writes = ["dryRun", "fieldManager", "fieldValidation"];
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for d in defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let base = format!("/{}", gv_path(group, version));
        let coll = if d.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", d.plural)
        } else {
            format!("{base}/{}", d.plural)
        };
        let item = format!("{coll}/{{name}}");
        paths.insert(coll, json!({"get": op(d, "list", &["labelSelector", "fieldSelector", "limit", "continue", "watch"]), "post": op(d, "post", &writes)}));
        paths.insert(item.clone(), json!({"get": op(d, "get", &[]), "put": op(d, "put", &writes), "patch": op(d, "patch", &[&writes[..], &["force"]].concat()), "delete": op(d, "delete", &["dryRun"])}));
        if d.status_subresource {
            paths.insert(format!("{item}/status"), json!({"get": op(d, "get", &[]), "put": op(d, "put", &writes), "patch": op(d, "patch", &[&writes[..], &["force"]].concat())}));
        }
        if let Some(s) = d.schema() {
            let mut schema = s.schema.clone();
            if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert("apiVersion".into(), json!({"type": "string"}));
                props.insert("kind".into(), json!({"type": "string"}));
                props.insert(
                    "metadata".into(),
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            }
            schema["x-kubernetes-group-version-kind"] =
                json!([{"group": d.group, "version": d.version, "kind": d.kind}]);
            schemas.insert(schema_name(d), schema);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.6"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
