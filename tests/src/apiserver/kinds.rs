//! Per-kind rules applied on create and update (defaults, validation, admission), and how stored
//! objects are presented through each API. No I/O.

use serde_json::{Map, Value, json};

use super::builtin;
use super::error::ApiResult;
use super::ops::invalid;
use super::resources::{Builtin, StorageKey};
use super::schema;
use super::services::{self, Taken};
use super::state::{Ctx, State};
use super::store::ObjKey;

fn fail_if(ctx: &Ctx, causes: Vec<super::error::Cause>) -> ApiResult<()> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(ctx, "", causes))
    }
}

/// What other Services hold, from the store's index: no scan of every Service per write.
fn taken_except<'a>(st: &'a State, ctx: &Ctx) -> Taken<'a> {
    let me = st.store.get(&ctx.res.storage, &ctx.key());
    Taken::except(st.store.service_index(), me)
}

/// Defaults and validation for a new object. Returns `Warning` headers.
pub fn on_create(st: &State, ctx: &Ctx, obj: &mut Value) -> ApiResult<Vec<String>> {
    match ctx.res.builtin() {
        Some(Builtin::Service) => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
            let mut taken = taken_except(st, ctx);
            fail_if(ctx, services::prepare(obj, None, &mut taken, &st.cluster))?;
            Ok(vec![])
        }
        Some(Builtin::Event) => {
            let mut core = event_to_core(obj);
            fail_if(ctx, builtin::validate_event_v1(obj))?;
            builtin::check_micro_times(&core)?;
            core["kind"] = json!("Event");
            *obj = core;
            Ok(vec![])
        }
        Some(b) => {
            builtin::prepare(ctx, b, obj, None)?;
            Ok(vec![])
        }
        None => {
            let schema = ctx.res.schema().expect("custom resources have a schema");
            if ctx.res.status_subresource
                && let Some(o) = obj.as_object_mut()
            {
                o.remove("status");
            }
            schema::admit(schema, ctx, obj, None)
        }
    }
}

/// Defaults and validation for an update of `old` into `new`. Returns `Warning` headers.
pub fn on_update(st: &State, ctx: &Ctx, old: &Value, new: &mut Value) -> ApiResult<Vec<String>> {
    match ctx.res.builtin() {
        Some(Builtin::Service) => {
            let mut taken = taken_except(st, ctx);
            fail_if(
                ctx,
                services::prepare(new, Some(old), &mut taken, &st.cluster),
            )?;
            Ok(vec![])
        }
        Some(Builtin::Event) => {
            fail_if(ctx, builtin::validate_event_v1(new))?;
            let core = event_to_core(new);
            builtin::check_micro_times(&core)?;
            *new = core;
            Ok(vec![])
        }
        Some(b) => {
            builtin::prepare(ctx, b, new, Some(old))?;
            Ok(vec![])
        }
        None => {
            let schema = ctx.res.schema().expect("custom resources have a schema");
            schema::admit(schema, ctx, new, Some(old))
        }
    }
}

/// The stored object as the resource's API shows it.
pub fn present(res: &super::resources::ResourceDef, mut obj: Value) -> Value {
    if res.builtin() == Some(Builtin::Event) {
        obj = event_from_core(&obj);
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("kind".into(), json!(res.kind));
        o.insert("apiVersion".into(), json!(res.api_version()));
    }
    obj
}

/// The object as the `ops` layer reads it before patching (the API's own shape).
pub fn view(res: &super::resources::ResourceDef, obj: &Value) -> Value {
    present(res, obj.clone())
}

/// Follow-up after a commit: CRDs become served resources.
pub fn after_commit(st: &mut State, ctx: &Ctx, stored: &Value) {
    if ctx.res.builtin() == Some(Builtin::Crd) && st.registry.add_crd(stored).is_ok() {
        let mut established = stored.clone();
        let now = super::state::now_seconds();
        established["status"]["conditions"] = json!([
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]);
        established["status"]["acceptedNames"] =
            stored.pointer("/spec/names").cloned().unwrap_or(json!({}));
        if stored
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_none_or(|c| c.len() < 2)
        {
            st.store.put(&ctx.res.storage, ctx.key(), established);
        }
    }
}

/// Follow-up after a delete: namespaces take their contents with them, CRDs stop being served.
pub fn after_delete(st: &mut State, ctx: &Ctx, removed: &Value) {
    match ctx.res.builtin() {
        Some(Builtin::Namespace) => {
            let ns = ctx.name.clone().unwrap_or_default();
            let tables: Vec<StorageKey> = st
                .registry
                .all()
                .iter()
                .filter(|d| d.namespaced)
                .map(|d| d.storage.clone())
                .collect();
            for t in tables {
                let keys: Vec<ObjKey> = st
                    .store
                    .objects(&t)
                    .filter(|(k, _)| k.namespace == ns)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in keys {
                    st.store.remove(&t, &k);
                }
            }
        }
        Some(Builtin::Crd) => {
            let group = removed
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = removed
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            st.registry.remove_crd(group, plural);
            // The custom resources go with their definition.
            let table = StorageKey {
                group: group.to_string(),
                plural: plural.to_string(),
            };
            let keys: Vec<ObjKey> = st.store.objects(&table).map(|(k, _)| k.clone()).collect();
            for k in keys {
                st.store.remove(&table, &k);
            }
        }
        _ => {}
    }
    if let Some(uid) = removed.pointer("/metadata/uid").and_then(Value::as_str) {
        collect_garbage(st, uid);
    }
}

/// What kube-controller-manager's garbage collector does (background propagation): objects whose
/// owners are all gone are deleted, or marked for deletion when they carry finalizers.
fn collect_garbage(st: &mut State, first_uid: &str) {
    let mut tables: Vec<StorageKey> = st
        .registry
        .all()
        .iter()
        .map(|d| d.storage.clone())
        .collect();
    tables.sort();
    tables.dedup();
    let mut gone = vec![first_uid.to_string()];
    while let Some(uid) = gone.pop() {
        let live: std::collections::HashSet<String> = tables
            .iter()
            .flat_map(|t| {
                st.store.objects(t).filter_map(|(_, v)| {
                    v.pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
            })
            .collect();
        let mut orphans = Vec::new();
        for t in &tables {
            for (k, v) in st.store.objects(t) {
                let owners: Vec<&str> = v
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.get("uid").and_then(Value::as_str))
                    .collect();
                if owners.contains(&uid.as_str()) && owners.iter().all(|o| !live.contains(*o)) {
                    orphans.push((t.clone(), k.clone(), v.clone()));
                }
            }
        }
        for (t, k, v) in orphans {
            let has_finalizers = v
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            if has_finalizers {
                if v.pointer("/metadata/deletionTimestamp").is_none() {
                    let mut marked = v.clone();
                    marked["metadata"]["deletionTimestamp"] = json!(super::state::now_seconds());
                    marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                    st.store.put(&t, k, marked);
                }
            } else if let Some(removed) = st.store.remove(&t, &k)
                && let Some(u) = removed.pointer("/metadata/uid").and_then(Value::as_str)
            {
                gone.push(u.to_string());
            }
        }
    }
}

const EVENT_RENAMES: [(&str, &str); 6] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
];

/// events.k8s.io/v1 shape to the stored (core/v1) shape.
fn event_to_core(v1: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in v1.as_object().into_iter().flatten() {
        let name = EVENT_RENAMES
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, b)| *b)
            .unwrap_or(match k.as_str() {
                "deprecatedCount" => "count",
                other => other,
            });
        out.insert(name.to_string(), v.clone());
    }
    out.insert("apiVersion".into(), json!("v1"));
    Value::Object(out)
}

/// Stored (core/v1) shape to events.k8s.io/v1.
fn event_from_core(core: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in core.as_object().into_iter().flatten() {
        let name = EVENT_RENAMES
            .iter()
            .find(|(_, b)| b == k)
            .map(|(a, _)| *a)
            .unwrap_or(match k.as_str() {
                "count" => "deprecatedCount",
                other => other,
            });
        out.insert(name.to_string(), v.clone());
    }
    out.entry("deprecatedSource").or_insert(json!({}));
    for k in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "eventTime",
    ] {
        out.entry(k).or_insert(Value::Null);
    }
    Value::Object(out)
}
