//! Field ownership (`metadata.managedFields`, FieldsV1) and server-side apply: field sets, conflicts
//! between managers, `force`, and merging an apply configuration into the live object. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::state::{Ctx, now_seconds};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pe {
    /// A struct or map field.
    F(String),
    /// An associative list item, by its key fields (canonical JSON object).
    K(String),
    /// A set list item, by value (JSON).
    V(String),
}

type Path = Vec<Pe>;
type FieldSet = BTreeSet<Path>;

#[derive(Clone, Debug, PartialEq)]
enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// Where in the object we are, to know list and map strategies.
#[derive(Clone)]
struct Shape<'a> {
    names: Vec<String>,
    schema: Option<&'a Value>,
    custom: bool,
}

impl<'a> Shape<'a> {
    fn root(ctx: &'a Ctx) -> Self {
        Self {
            names: vec![],
            schema: ctx.res.schema().map(|s| &s.schema),
            custom: ctx.res.is_custom(),
        }
    }

    fn field(&self, k: &str) -> Shape<'a> {
        let mut names = self.names.clone();
        names.push(k.to_string());
        let schema = self.schema.and_then(|s| {
            s.pointer(&format!("/properties/{k}"))
                .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        });
        Shape {
            names,
            schema,
            custom: self.custom,
        }
    }

    fn item(&self) -> Shape<'a> {
        Shape {
            names: self.names.clone(),
            schema: self.schema.and_then(|s| s.get("items")),
            custom: self.custom,
        }
    }

    fn in_metadata(&self) -> bool {
        self.names.first().map(String::as_str) == Some("metadata")
    }

    fn list_kind(&self) -> ListKind {
        let n: Vec<&str> = self.names.iter().map(String::as_str).collect();
        if self.custom && !self.in_metadata() {
            let s = self.schema;
            return match s
                .and_then(|s| s.get("x-kubernetes-list-type"))
                .and_then(Value::as_str)
            {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map(
                    s.and_then(|s| s.get("x-kubernetes-list-map-keys"))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect(),
                ),
                _ => ListKind::Atomic,
            };
        }
        let keys = |k: &[&str]| ListKind::Map(k.iter().map(|s| s.to_string()).collect());
        let last = n.last().copied().unwrap_or("");
        let parent = if n.len() >= 2 { n[n.len() - 2] } else { "" };
        match (n.as_slice(), parent, last) {
            (["metadata", "finalizers"], _, _) | (["spec", "podCIDRs"], _, _) => ListKind::Set,
            (["metadata", "ownerReferences"], _, _) => keys(&["uid"]),
            (["spec", "ports"], _, _) => keys(&["port", "protocol"]),
            (["status", "conditions"], _, _) | (["status", "addresses"], _, _) => keys(&["type"]),
            (_, _, "containers" | "initContainers" | "volumes") => keys(&["name"]),
            (_, "containers" | "initContainers", "env") => keys(&["name"]),
            (_, "containers" | "initContainers", "ports") => keys(&["containerPort", "protocol"]),
            (_, _, "volumeMounts") => keys(&["mountPath"]),
            _ => ListKind::Atomic,
        }
    }

    fn atomic_map(&self) -> bool {
        if self.custom && !self.in_metadata() {
            return self
                .schema
                .and_then(|s| s.get("x-kubernetes-map-type"))
                .and_then(Value::as_str)
                == Some("atomic");
        }
        matches!(
            self.names
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice(),
            ["spec", "selector"] | ["involvedObject"] | ["regarding"] | ["related"]
        )
    }

    fn key_default(&self, key: &str) -> Option<Value> {
        if self.custom {
            return self
                .schema
                .and_then(|s| s.pointer(&format!("/items/properties/{key}/default")))
                .cloned();
        }
        (key == "protocol").then(|| json!("TCP"))
    }
}

fn item_key(shape: &Shape, keys: &[String], item: &Value) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k).cloned().or_else(|| shape.key_default(k)) {
            m.insert(k.clone(), v);
        }
    }
    Value::Object(m).to_string()
}

/// Metadata fields that nobody owns.
const UNOWNED_META: [&str; 9] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Whether an object at `shape` is a map (which a manager creates, so Update sets list it with a
/// "." member) rather than a Go struct of a built-in kind (which always exists).
fn is_map(shape: &Shape) -> bool {
    let n: Vec<&str> = shape.names.iter().map(String::as_str).collect();
    if shape.in_metadata() || !shape.custom {
        return matches!(
            n.as_slice(),
            ["metadata", "labels" | "annotations"] | ["data" | "binaryData" | "stringData"]
        ) || matches!(
            n.last(),
            Some(&("nodeSelector" | "capacity" | "allocatable" | "series" | "conversion"))
        );
    }
    !n.is_empty()
}

/// The members of `v` (leaves, list items and, with `dots`, the maps and lists that contain them).
fn collect(v: &Value, shape: &Shape, path: &mut Path, out: &mut FieldSet, dots: bool) {
    match v {
        // An empty Go struct has no fields to own.
        Value::Object(o) if o.is_empty() && !is_map(shape) => {}
        Value::Object(o) if !shape.atomic_map() && !o.is_empty() => {
            if dots && !path.is_empty() && is_map(shape) {
                out.insert(path.clone());
            }
            for (k, child) in o {
                if path.is_empty() && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                if path.len() == 1
                    && path[0] == Pe::F("metadata".into())
                    && UNOWNED_META.contains(&k.as_str())
                {
                    continue;
                }
                path.push(Pe::F(k.clone()));
                collect(child, &shape.field(k), path, out, dots);
                path.pop();
            }
        }
        Value::Array(a) => match shape.list_kind() {
            ListKind::Atomic => {
                out.insert(path.clone());
            }
            ListKind::Set => {
                if dots && !a.is_empty() {
                    out.insert(path.clone());
                }
                for item in a {
                    path.push(Pe::V(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Map(keys) => {
                let item_shape = shape.item();
                if dots && !a.is_empty() {
                    out.insert(path.clone());
                }
                for item in a {
                    path.push(Pe::K(item_key(shape, &keys, item)));
                    out.insert(path.clone());
                    collect(item, &item_shape, path, out, false);
                    path.pop();
                }
            }
        },
        // A null is an unset pointer: nothing to own.
        Value::Null => {}
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn field_set(v: &Value, ctx: &Ctx, dots: bool) -> FieldSet {
    let mut out = FieldSet::new();
    collect(v, &Shape::root(ctx), &mut Vec::new(), &mut out, dots);
    // A map member whose children are all listed is implied; keep only what the shape produced.
    out
}

fn lookup<'v>(v: &'v Value, path: &[Pe], shape: &Shape) -> Option<&'v Value> {
    let Some((first, rest)) = path.split_first() else {
        return Some(v);
    };
    match first {
        Pe::F(k) => lookup(v.get(k)?, rest, &shape.field(k)),
        Pe::K(key) => {
            let ListKind::Map(keys) = shape.list_kind() else {
                return None;
            };
            let item = v
                .as_array()?
                .iter()
                .find(|i| item_key(shape, &keys, i) == *key)?;
            lookup(item, rest, &shape.item())
        }
        Pe::V(val) => v.as_array()?.iter().find(|i| i.to_string() == *val),
    }
}

fn remove_path(v: &mut Value, path: &[Pe], shape: &Shape) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    match (first, rest.is_empty()) {
        (Pe::F(k), true) => {
            if let Some(o) = v.as_object_mut() {
                o.remove(k);
            }
        }
        (Pe::F(k), false) => {
            let sub = shape.field(k);
            if let Some(child) = v.get_mut(k) {
                remove_path(child, rest, &sub);
            }
        }
        (Pe::K(key), last) => {
            let ListKind::Map(keys) = shape.list_kind() else {
                return;
            };
            let item_shape = shape.item();
            if let Some(a) = v.as_array_mut() {
                if last {
                    a.retain(|i| item_key(shape, &keys, i) != *key);
                } else if let Some(item) = a.iter_mut().find(|i| item_key(shape, &keys, i) == *key)
                {
                    remove_path(item, rest, &item_shape);
                }
            }
        }
        (Pe::V(val), _) => {
            if let Some(a) = v.as_array_mut() {
                a.retain(|i| serde_json::from_str::<Value>(val).ok().as_ref() != Some(i));
            }
        }
    }
}

fn overlay(target: &mut Value, cfg: &Value, shape: &Shape) {
    match (target.is_object(), cfg) {
        (true, Value::Object(c)) if !shape.atomic_map() => {
            for (k, v) in c {
                let sub = shape.field(k);
                match target.get_mut(k) {
                    Some(t) if !v.is_null() => overlay(t, v, &sub),
                    _ => target[k] = v.clone(),
                }
            }
        }
        _ => match (target.as_array_mut(), cfg.as_array(), shape.list_kind()) {
            (Some(t), Some(c), ListKind::Set) => {
                for item in c {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
            }
            (Some(t), Some(c), ListKind::Map(keys)) => {
                let item_shape = shape.item();
                for item in c {
                    let key = item_key(shape, &keys, item);
                    match t.iter_mut().find(|i| item_key(shape, &keys, i) == key) {
                        Some(existing) => overlay(existing, item, &item_shape),
                        None => t.push(item.clone()),
                    }
                }
            }
            _ => *target = cfg.clone(),
        },
    }
}

fn path_string(path: &[Pe]) -> String {
    let mut s = String::new();
    for p in path {
        match p {
            Pe::F(k) => {
                s.push('.');
                s.push_str(k);
            }
            Pe::K(key) => {
                let m: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            Pe::V(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

fn encode(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn key(p: &Pe) -> String {
        match p {
            Pe::F(k) => format!("f:{k}"),
            Pe::K(k) => format!("k:{k}"),
            Pe::V(v) => format!("v:{v}"),
        }
    }
    fn render(n: &Node) -> Value {
        let mut m = Map::new();
        if n.member && !n.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, c) in &n.children {
            m.insert(k.clone(), render(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut n = &mut root;
        for p in path {
            n = n.children.entry(key(p)).or_default();
        }
        n.member = true;
    }
    render(&root)
}

fn decode(v: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(o) = v.as_object() else { return };
        if (o.is_empty() || o.contains_key(".")) && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, child) in o {
            let pe = if let Some(f) = k.strip_prefix("f:") {
                Pe::F(f.to_string())
            } else if let Some(kk) = k.strip_prefix("k:") {
                Pe::K(
                    serde_json::from_str::<Value>(kk)
                        .map(|v| v.to_string())
                        .unwrap_or_else(|_| kk.to_string()),
                )
            } else if let Some(vv) = k.strip_prefix("v:") {
                Pe::V(vv.to_string())
            } else {
                continue;
            };
            path.push(pe);
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// One managedFields entry, decoded.
struct Entry {
    manager: String,
    operation: String,
    subresource: String,
    api_version: String,
    time: String,
    fields: FieldSet,
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or("").into(),
            operation: e["operation"].as_str().unwrap_or("").into(),
            subresource: e["subresource"].as_str().unwrap_or("").into(),
            api_version: e["apiVersion"].as_str().unwrap_or("").into(),
            time: e["time"].as_str().unwrap_or("").into(),
            fields: decode(&e["fieldsV1"]),
        })
        .collect()
}

fn write_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (a.time.as_str(), a.operation.as_str(), a.manager.as_str()).cmp(&(
            b.time.as_str(),
            b.operation.as_str(),
            b.manager.as_str(),
        ))
    });
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
    } else {
        obj["metadata"]["managedFields"] = Value::Array(list);
    }
}

fn default_manager(ctx: &Ctx) -> String {
    ctx.q("fieldManager")
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| ctx.manager.clone())
}

fn scope_to_subresource(set: &mut FieldSet, ctx: &Ctx) {
    if !ctx.res.status_subresource {
        return;
    }
    let status = Pe::F("status".into());
    if ctx.is_status() {
        set.retain(|p| p.first() == Some(&status));
    } else {
        set.retain(|p| p.first() != Some(&status));
    }
}

/// Fields kube-apiserver allocates for a Service: nobody owns them unless the client sent them.
fn allocated_by_server(ctx: &Ctx, p: &[Pe]) -> bool {
    use super::resources::Builtin;
    let f = |s: &str| Pe::F(s.to_string());
    match ctx.res.builtin() {
        Some(Builtin::Service) => {}
        // Defaulted finalizers and admission's not-ready taint.
        Some(Builtin::Namespace) => return p.first() == Some(&f("spec")),
        Some(Builtin::Node) => return p.len() >= 2 && p[0] == f("spec") && p[1] == f("taints"),
        _ => return false,
    }
    match p {
        [a, b] if *a == f("spec") => [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "healthCheckNodePort",
        ]
        .iter()
        .any(|k| *b == f(k)),
        [a, b, Pe::K(_), c] => *a == f("spec") && *b == f("ports") && *c == f("nodePort"),
        [a, ..] => *a == f("status") && !ctx.is_status(),
        _ => false,
    }
}

/// Records a non-apply write (create when `old` is `None`): the manager takes the fields it changed.
/// `sent` is the object as the client wrote it, before the server's defaults and allocations.
pub fn record_update(old: Option<&Value>, new: &mut Value, ctx: &Ctx, sent: &Value) {
    let shape = Shape::root(ctx);
    let after = field_set(new, ctx, true);
    let mut changed: FieldSet = match old {
        None => after.clone(),
        Some(o) => after
            .iter()
            .filter(|p| {
                if is_container(new, p, &shape) {
                    lookup(o, p, &shape).is_none()
                } else {
                    lookup(o, p, &shape) != lookup(new, p, &shape)
                }
            })
            .cloned()
            .collect(),
    };
    scope_to_subresource(&mut changed, ctx);
    changed.retain(|p| !allocated_by_server(ctx, p) || lookup(sent, p, &shape).is_some());
    let mut entries = match old {
        Some(o) => read_entries(o),
        None => Vec::new(),
    };
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| after.contains(p) && !changed.contains(p));
    }
    let manager = default_manager(ctx);
    let sub = if ctx.is_status() { "status" } else { "" };
    let now = now_seconds();
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub)
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = now;
        }
        None => entries.push(Entry {
            manager,
            operation: "Update".into(),
            subresource: sub.into(),
            api_version: ctx.res.api_version(),
            time: now,
            fields: changed,
        }),
    }
    write_entries(new, entries);
}

/// Whether the member at `p` is a container (map, associative or set list, list item) rather than a
/// leaf: a container is "changed" by a write only when the write creates it.
fn is_container(v: &Value, p: &[Pe], shape: &Shape) -> bool {
    let at = shape_at(shape, p);
    match lookup(v, p, shape) {
        Some(Value::Object(o)) => !o.is_empty() && !at.atomic_map(),
        Some(Value::Array(_)) => {
            at.list_kind() != ListKind::Atomic && !matches!(p.last(), Some(Pe::V(_)))
        }
        _ => false,
    }
}

fn shape_at<'a>(shape: &Shape<'a>, path: &[Pe]) -> Shape<'a> {
    let mut s = shape.clone();
    for p in path {
        s = match p {
            Pe::F(k) => s.field(k),
            _ => s.item(),
        };
    }
    s
}

fn applied_set(applied: &Value, ctx: &Ctx) -> FieldSet {
    let mut set = field_set(applied, ctx, false);
    scope_to_subresource(&mut set, ctx);
    set
}

/// On an apply that creates the object: the applier owns exactly what it sent.
pub fn set_apply_owner(obj: &mut Value, applied: &Value, ctx: &Ctx) {
    let entry = Entry {
        manager: default_manager(ctx),
        operation: "Apply".into(),
        subresource: if ctx.is_status() {
            "status".into()
        } else {
            String::new()
        },
        api_version: ctx.res.api_version(),
        time: now_seconds(),
        fields: applied_set(applied, ctx),
    };
    write_entries(obj, vec![entry]);
}

/// Server-side apply of `applied` onto `live`: conflicts (unless `force`), ownership, merge.
pub fn apply(live: &Value, applied: &Value, ctx: &Ctx, force: bool) -> ApiResult<Value> {
    let shape = Shape::root(ctx);
    let manager = default_manager(ctx);
    let sub = if ctx.is_status() { "status" } else { "" };
    let set = applied_set(applied, ctx);
    let mut entries = read_entries(live);
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for e in &entries {
        if e.manager == manager && e.operation == "Apply" && e.subresource == sub {
            continue;
        }
        for p in e.fields.intersection(&set) {
            let (cur, want) = (lookup(live, p, &shape), lookup(applied, p, &shape));
            let leaf = !matches!(p.last(), Some(Pe::K(_)))
                && !want.is_some_and(|w| w.is_object() && !shape_is_atomic_at(&shape, p));
            if leaf && cur != want {
                let who = if e.operation == "Update" {
                    format!("{:?} using {}", e.manager, e.api_version)
                } else {
                    format!("{:?}", e.manager)
                };
                conflicts.push((who, path_string(p)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    let mut merged = live.clone();
    let previous: FieldSet = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource == sub)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&set) {
        let owned_by_other = entries.iter().any(|e| {
            !(e.manager == manager && e.operation == "Apply" && e.subresource == sub)
                && e.fields.contains(p)
        });
        if !owned_by_other {
            remove_path(&mut merged, p, &shape);
        }
    }
    let mut cfg = applied.clone();
    if let Some(o) = cfg.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in UNOWNED_META {
                m.remove(k);
            }
        }
    }
    overlay(&mut merged, &cfg, &shape);
    if force {
        for e in entries.iter_mut() {
            if !(e.manager == manager && e.operation == "Apply" && e.subresource == sub) {
                for p in &set {
                    let cur = lookup(live, p, &shape);
                    if !is_container(applied, p, &shape) && cur != lookup(applied, p, &shape) {
                        e.fields.remove(p);
                    }
                }
            }
        }
    }
    let now = now_seconds();
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource == sub)
    {
        Some(e) => {
            e.fields = set;
            e.time = now;
        }
        None => entries.push(Entry {
            manager,
            operation: "Apply".into(),
            subresource: sub.into(),
            api_version: ctx.res.api_version(),
            time: now,
            fields: set,
        }),
    }
    write_entries(&mut merged, entries);
    Ok(merged)
}

fn shape_is_atomic_at(shape: &Shape, path: &[Pe]) -> bool {
    shape_at(shape, path).atomic_map()
}

fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|(who, path)| {
            Cause::new(
                "FieldManagerConflict",
                format!("conflict with {who}"),
                Some(path.clone()),
            )
        })
        .collect();
    let message = if conflicts.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            conflicts[0].0, conflicts[0].1
        )
    } else {
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (who, path) in conflicts {
            by.entry(who).or_default().push(path);
        }
        let lines: Vec<String> = by
            .iter()
            .flat_map(|(who, paths)| {
                std::iter::once(format!("conflicts with {who}:"))
                    .chain(paths.iter().map(|p| format!("- {p}")))
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApiError::ApplyConflict { message, causes }
}
