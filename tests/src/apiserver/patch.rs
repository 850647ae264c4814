//! JSON merge patch (RFC 7386), JSON patch (RFC 6902, with kube-apiserver's quirks) and strategic merge
//! patch for the core types. Pure.

use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};

/// The four PATCH content types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// From a Content-Type header.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// RFC 7386: objects merge, `null` deletes, everything else (lists included) replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match target {
                Value::Object(t) => t.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else {
                    let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), v);
                    out.insert(k.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn rejected() -> ApiError {
    ApiError::UnprocessableOpaque(
        "the server rejected our request due to an error in our request".into(),
    )
}

fn pointer_tokens(path: &str) -> ApiResult<Vec<String>> {
    if path.is_empty() {
        return Ok(vec![]);
    }
    let rest = path.strip_prefix('/').ok_or_else(rejected)?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> ApiResult<&'a mut Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t).ok_or_else(rejected)?,
            Value::Array(a) => {
                let i: usize = t.parse().map_err(|_| rejected())?;
                a.get_mut(i).ok_or_else(rejected)?
            }
            _ => return Err(rejected()),
        };
    }
    Ok(cur)
}

fn get_at<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn add_at(doc: &mut Value, tokens: &[String], value: Value) -> ApiResult<()> {
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last.parse().map_err(|_| rejected())?;
                if i > a.len() {
                    return Err(rejected());
                }
                a.insert(i, value);
            }
        }
        _ => return Err(rejected()),
    }
    Ok(())
}

fn remove_at(doc: &mut Value, tokens: &[String]) -> ApiResult<Value> {
    let (last, parents) = tokens.split_last().ok_or_else(rejected)?;
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.remove(last).ok_or_else(rejected),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| rejected())?;
            if i >= a.len() {
                return Err(rejected());
            }
            Ok(a.remove(i))
        }
        _ => Err(rejected()),
    }
}

/// RFC 6902. Any failing operation rejects the whole patch with kube-apiserver's opaque 422; a `test`
/// for `null` passes on a missing path (kube-runtime's finalizer helper relies on it).
pub fn json_patch(target: &Value, ops: &Value) -> ApiResult<Value> {
    let ops = ops.as_array().ok_or_else(|| {
        ApiError::BadRequest("error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp".into())
    })?;
    let mut doc = target.clone();
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).ok_or_else(rejected)?;
        let path = pointer_tokens(
            op.get("path")
                .and_then(Value::as_str)
                .ok_or_else(rejected)?,
        )?;
        let value = || op.get("value").cloned().ok_or_else(rejected);
        match name {
            "add" => add_at(&mut doc, &path, value()?)?,
            "remove" => {
                remove_at(&mut doc, &path)?;
            }
            "replace" => {
                remove_at(&mut doc, &path)?;
                add_at(&mut doc, &path, value()?)?;
            }
            "test" => {
                let want = op.get("value").cloned().unwrap_or(Value::Null);
                let have = get_at(&doc, &path).cloned().unwrap_or(Value::Null);
                if want != have {
                    return Err(rejected());
                }
            }
            "move" | "copy" => {
                let from = pointer_tokens(
                    op.get("from")
                        .and_then(Value::as_str)
                        .ok_or_else(rejected)?,
                )?;
                let v = if name == "move" {
                    remove_at(&mut doc, &from)?
                } else {
                    get_at(&doc, &from).cloned().ok_or_else(rejected)?
                };
                add_at(&mut doc, &path, v)?;
            }
            _ => return Err(rejected()),
        }
    }
    Ok(doc)
}

/// How a list merges under strategic merge patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListMerge {
    /// Replaced whole.
    Replace,
    /// Merged by the named key field.
    ByKey(&'static str),
    /// A set of scalars: union.
    Primitives,
}

/// The patch strategies of the core types' lists, by field path (list items add no path element).
fn list_strategy(path: &[String]) -> ListMerge {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let tail = |n: usize| &p[p.len().saturating_sub(n)..];
    match p.as_slice() {
        ["metadata", "finalizers"] => ListMerge::Primitives,
        ["metadata", "ownerReferences"] => ListMerge::ByKey("uid"),
        ["spec", "ports"] => ListMerge::ByKey("port"),
        ["status", "conditions"] | ["status", "addresses"] => ListMerge::ByKey("type"),
        ["status", "podIPs"] | ["status", "hostIPs"] => ListMerge::ByKey("ip"),
        _ if tail(1) == ["containers"]
            || tail(1) == ["initContainers"]
            || tail(1) == ["volumes"] =>
        {
            ListMerge::ByKey("name")
        }
        _ if tail(2) == ["containers", "env"] || tail(2) == ["initContainers", "env"] => {
            ListMerge::ByKey("name")
        }
        _ if tail(2) == ["containers", "ports"] => ListMerge::ByKey("containerPort"),
        _ if tail(2) == ["containers", "volumeMounts"] => ListMerge::ByKey("mountPath"),
        _ => ListMerge::Replace,
    }
}

/// Strategic merge patch for the built-in kinds: merge by `patchMergeKey`, patched items first,
/// `$patch: delete|replace` and `$deleteFromPrimitiveList` directives.
pub fn strategic_merge(target: &Value, patch: &Value) -> ApiResult<Value> {
    Ok(smp_value(target, patch, &mut Vec::new()).unwrap_or(Value::Null))
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// `None` means "delete this value".
fn smp_value(orig: &Value, patch: &Value, path: &mut Vec<String>) -> Option<Value> {
    let Value::Object(p) = patch else {
        return Some(patch.clone());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => return None,
        Some("replace") => return Some(strip_directives(patch)),
        _ => {}
    }
    let mut out = match orig {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (out.get_mut(field), v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        path.push(k.clone());
        let merged = match (out.get(k), v) {
            (Some(Value::Array(o)), Value::Array(pl)) => {
                Some(Value::Array(merge_list(o, pl, path)))
            }
            (_, Value::Array(pl)) => Some(Value::Array(merge_list(&[], pl, path))),
            (Some(o), Value::Object(_)) => smp_value(o, v, path),
            (None, Value::Object(_)) => smp_value(&Value::Null, v, path),
            _ => Some(v.clone()),
        };
        path.pop();
        match merged {
            Some(m) => {
                out.insert(k.clone(), m);
            }
            None => {
                out.remove(k);
            }
        }
    }
    Some(Value::Object(out))
}

fn merge_list(orig: &[Value], patch: &[Value], path: &mut Vec<String>) -> Vec<Value> {
    match list_strategy(path) {
        ListMerge::Replace => patch.iter().map(strip_directives).collect(),
        ListMerge::Primitives => {
            let mut out = orig.to_vec();
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            out
        }
        ListMerge::ByKey(key) => {
            let mut out = Vec::new();
            let mut used = vec![false; orig.len()];
            for item in patch {
                let k = item.get(key);
                let pos = k.and_then(|k| orig.iter().position(|o| o.get(key) == Some(k)));
                if let Some(i) = pos {
                    used[i] = true;
                }
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    continue;
                }
                let base = pos.map(|i| orig[i].clone()).unwrap_or(Value::Null);
                if let Some(m) = smp_value(&base, item, path) {
                    out.push(m);
                }
            }
            out.extend(
                orig.iter()
                    .zip(used)
                    .filter(|(_, u)| !u)
                    .map(|(o, _)| o.clone()),
            );
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_replaces_lists_and_null_deletes() {
        let t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        let r = merge_patch(&t, &json!({"a": {"b": null}, "l": [3]}));
        assert_eq!(r, json!({"a": {"c": 2}, "l": [3]}));
    }

    #[test]
    fn json_patch_test_for_null_on_a_missing_path_passes() {
        let t = json!({"metadata": {}});
        let ops = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                         {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]);
        assert_eq!(
            json_patch(&t, &ops).unwrap(),
            json!({"metadata": {"finalizers": ["x"]}})
        );
    }

    #[test]
    fn json_patch_replace_of_a_missing_path_is_rejected() {
        let ops = json!([{"op": "replace", "path": "/metadata/annotations/nope", "value": "y"}]);
        assert_eq!(
            json_patch(&json!({"metadata": {}}), &ops)
                .unwrap_err()
                .code(),
            422
        );
    }

    #[test]
    fn strategic_merge_merges_ports_by_port_with_patched_items_first() {
        let t = json!({"spec": {"ports": [{"port": 80, "name": "http", "nodePort": 31000}, {"port": 443, "name": "https"}]}});
        let p = json!({"spec": {"ports": [{"port": 80, "targetPort": 9000}, {"port": 8443, "name": "alt"}]}});
        let r = strategic_merge(&t, &p).unwrap();
        let ports: Vec<i64> = r["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_i64().unwrap())
            .collect();
        assert_eq!(ports, vec![80, 8443, 443]);
        assert_eq!(r["spec"]["ports"][0]["nodePort"], 31000);
        assert_eq!(r["spec"]["ports"][0]["targetPort"], 9000);
    }

    #[test]
    fn strategic_merge_delete_directive_removes_the_keyed_item() {
        let t = json!({"spec": {"ports": [{"port": 80}, {"port": 8443}]}});
        let r = strategic_merge(
            &t,
            &json!({"spec": {"ports": [{"port": 8443, "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(r["spec"]["ports"], json!([{"port": 80}]));
    }
}
