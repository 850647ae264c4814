//! Label and field selectors in their query-string syntax, parsed and matched. Pure.

use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::resources::{Builtin, ResourceDef};

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelReq {
    /// `k=v` / `k==v` / `k in (v1,v2)`.
    In(String, Vec<String>),
    /// `k!=v` / `k notin (v1,v2)`: also true when `k` is absent.
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
}

/// A parsed `labelSelector`: all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<LabelReq>);

impl LabelSelector {
    /// Parses the `labelSelector` query value.
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_label_req(part)?);
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `object`'s labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn bad(msg: String) -> ApiError {
    ApiError::BadRequest(msg)
}

fn parse_label_req(part: &str) -> ApiResult<LabelReq> {
    if let Some(k) = part.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(LabelReq::DoesNotExist(k.into()))
        } else {
            Err(bad(format!(
                "unable to parse requirement: invalid label key \"{k}\""
            )))
        };
    }
    for (op, negate) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) || !valid_value(v) {
                return Err(bad(format!(
                    "unable to parse requirement: invalid label selector \"{part}\""
                )));
            }
            return Ok(if negate {
                LabelReq::NotIn(k.into(), vec![v.into()])
            } else {
                LabelReq::In(k.into(), vec![v.into()])
            });
        }
    }
    let words: Vec<&str> = part
        .splitn(3, char::is_whitespace)
        .filter(|w| !w.is_empty())
        .collect();
    match words.as_slice() {
        [k] if valid_key(k) => Ok(LabelReq::Exists(k.to_string())),
        [k, op, rest] if *op == "in" || *op == "notin" => {
            let rest = rest.trim();
            let Some(inner) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) else {
                let found = rest
                    .split(|c: char| c.is_whitespace() || c == '(')
                    .next()
                    .unwrap_or(rest);
                return Err(bad(format!(
                    "unable to parse requirement: found '{found}' expected: '('"
                )));
            };
            let vals: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if vals.iter().any(|v| !valid_value(v)) {
                return Err(bad(format!(
                    "unable to parse requirement: invalid label selector \"{part}\""
                )));
            }
            Ok(if *op == "in" {
                LabelReq::In(k.to_string(), vals)
            } else {
                LabelReq::NotIn(k.to_string(), vals)
            })
        }
        _ => Err(bad(format!(
            "unable to parse requirement: invalid label selector \"{part}\""
        ))),
    }
}

/// A parsed `fieldSelector`: `field=value` / `field==value` / `field!=value` terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks the fields against what `res` supports.
    pub fn parse(text: &str, res: &ResourceDef) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let parsed = [("!=", false), ("==", true), ("=", true)]
                .iter()
                .find_map(|(op, eq)| {
                    part.split_once(op)
                        .map(|(k, v)| (k.trim().to_string(), *eq, v.trim().to_string()))
                });
            let Some((field, eq, value)) = parsed else {
                return Err(bad(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                )));
            };
            if field.contains(char::is_whitespace) {
                return Err(bad(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                )));
            }
            if !supported_fields(res).contains(&field.as_str()) {
                return Err(bad(format!("field label not supported: {field}")));
            }
            terms.push((field, eq, value));
        }
        Ok(Self(terms))
    }

    /// Whether the selector has no term.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `object` satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let actual = field_value(object, field);
            (actual == *value) == *eq
        })
    }

    /// The name pinned by a `metadata.name=` term, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

fn supported_fields(res: &ResourceDef) -> Vec<&'static str> {
    let mut f = vec!["metadata.name", "metadata.namespace"];
    match res.builtin() {
        Some(Builtin::Service) => f.extend(["spec.type", "spec.clusterIP"]),
        Some(Builtin::Pod) => f.extend([
            "spec.nodeName",
            "status.phase",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
        ]),
        Some(Builtin::Node) => f.push("spec.unschedulable"),
        Some(Builtin::Secret) => f.push("type"),
        Some(Builtin::Namespace) => f.push("status.phase"),
        Some(Builtin::CoreEvent) => f.extend([
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]),
        Some(Builtin::Event) => f.extend([
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ]),
        _ => {}
    }
    f
}

/// The string value of a selectable field (missing fields read as "").
fn field_value(object: &Value, field: &str) -> String {
    let pointer = format!("/{}", field.replace('.', "/"));
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Object(o)) if field == "source" => o
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn not_equal_and_notin_match_objects_without_the_label() {
        let s = LabelSelector::parse("app!=web").unwrap();
        assert!(s.matches(&obj(json!({}))));
        assert!(!s.matches(&obj(json!({"app": "web"}))));
        let s = LabelSelector::parse("app notin (web,db)").unwrap();
        assert!(s.matches(&obj(json!({"tier": "x"}))));
        assert!(!s.matches(&obj(json!({"app": "db"}))));
    }

    #[test]
    fn set_syntax_and_existence_parse() {
        let s = LabelSelector::parse("app in (web, db),tier,!legacy").unwrap();
        assert_eq!(s.0.len(), 3);
        assert!(s.matches(&obj(json!({"app": "db", "tier": "1"}))));
        assert!(!s.matches(&obj(json!({"app": "db", "tier": "1", "legacy": "y"}))));
    }

    #[test]
    fn in_without_parentheses_is_rejected_like_kube_apiserver() {
        let e = LabelSelector::parse("app in web").unwrap_err();
        assert_eq!(
            e.message(),
            "unable to parse requirement: found 'web' expected: '('"
        );
    }
}
