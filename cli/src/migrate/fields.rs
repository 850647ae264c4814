//! Reading a MetalLB object field by field: every field the converter takes is known, every
//! field left over is reported as unknown, and a value of the wrong type is a [`Problem`] with
//! its path. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::{Map, Value};

use super::kinds::Kind;
use super::report::{Finding, Note, Problem};
use super::unsupported::UNSUPPORTED;

/// What reading one object found: findings for the report, and problems that keep the object
/// from being written.
#[derive(Debug, Default)]
pub struct Collected {
    /// Findings (unsupported and unknown fields, notes, actions).
    pub findings: Vec<Finding>,
    /// Reasons the object cannot be written.
    pub problems: Vec<Problem>,
}

/// The fields of one JSON object at `path`, taken one by one.
pub struct Fields<'c> {
    path: String,
    map: Map<String, Value>,
    out: &'c mut Collected,
}

impl<'c> Fields<'c> {
    /// The fields of `value` at `path`; `None`, with a problem, when it is not an object.
    pub fn new(path: impl Into<String>, value: Value, out: &'c mut Collected) -> Option<Self> {
        let path = path.into();
        match value {
            Value::Object(map) => Some(Fields { path, map, out }),
            _ => {
                out.problems.push(Problem::WrongType {
                    path,
                    expected: "an object",
                });
                None
            }
        }
    }

    /// The path of a field of this object.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Records a reason the object cannot be written.
    pub fn problem(&mut self, problem: Problem) {
        self.out.problems.push(problem);
    }

    /// Records a finding.
    pub fn finding(&mut self, finding: Finding) {
        self.out.findings.push(finding);
    }

    /// Records a decision about the field `key`.
    pub fn note(&mut self, key: &str, note: Note) {
        let path = self.path_of(key);
        self.out.findings.push(Finding::Note { path, note });
    }

    /// Takes a field; `None` when it is absent or `null` (Kubernetes' "unset").
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn wrong_type(&mut self, key: &str, expected: &'static str) {
        let path = self.path_of(key);
        self.problem(Problem::WrongType { path, expected });
    }

    /// Takes a string field.
    pub fn string(&mut self, key: &str) -> Option<String> {
        match self.take(key)? {
            Value::String(s) => Some(s),
            _ => {
                self.wrong_type(key, "a string");
                None
            }
        }
    }

    /// Takes a string field that Go omits when empty: `""` is unset.
    pub fn non_empty_string(&mut self, key: &str) -> Option<String> {
        self.string(key).filter(|s| !s.is_empty())
    }

    /// Takes a boolean field.
    pub fn bool(&mut self, key: &str) -> Option<bool> {
        match self.take(key)? {
            Value::Bool(b) => Some(b),
            _ => {
                self.wrong_type(key, "true or false");
                None
            }
        }
    }

    /// Takes an integer field (a float without a fraction, as YAML may write it, counts).
    pub fn int(&mut self, key: &str) -> Option<i128> {
        let v = self.take(key)?;
        let n = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e30)
                    .map(|f| f as i128)
            });
        if n.is_none() {
            self.wrong_type(key, "an integer");
        }
        n
    }

    /// Takes an integer field that must fit `T` (MetalLB's own type for it); a value that does
    /// not is a problem, never wrapped.
    pub fn int_as<T: TryFrom<i128>>(&mut self, key: &str, type_name: &'static str) -> Option<T> {
        let n = self.int(key)?;
        match T::try_from(n) {
            Ok(v) => Some(v),
            Err(_) => {
                let path = self.path_of(key);
                self.problem(Problem::Refused {
                    path,
                    value: n.to_string(),
                    message: format!("does not fit MetalLB's {type_name}, so MetalLB refused it"),
                });
                None
            }
        }
    }

    /// Takes a list of strings.
    pub fn strings(&mut self, key: &str) -> Vec<String> {
        let Some(v) = self.take(key) else {
            return Vec::new();
        };
        let Value::Array(items) = v else {
            self.wrong_type(key, "a list of strings");
            return Vec::new();
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Value::String(s) => out.push(s),
                _ => {
                    let path = format!("{}[{i}]", self.path_of(key));
                    self.problem(Problem::WrongType {
                        path,
                        expected: "a string",
                    });
                }
            }
        }
        out
    }

    /// Takes a map of strings to strings (`matchLabels`).
    pub fn string_map(&mut self, key: &str) -> Option<BTreeMap<String, String>> {
        let v = self.take(key)?;
        let Value::Object(map) = v else {
            self.wrong_type(key, "a map of strings");
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    out.insert(k, s);
                }
                _ => {
                    let path = format!("{}.{k}", self.path_of(key));
                    self.problem(Problem::WrongType {
                        path,
                        expected: "a string",
                    });
                }
            }
        }
        Some(out)
    }

    /// Reads the object field `key` with `read`, then reports what `read` left in it.
    pub fn object<T>(&mut self, key: &str, read: impl FnOnce(&mut Fields<'_>) -> T) -> Option<T> {
        let value = self.take(key)?;
        let path = self.path_of(key);
        let mut child = Fields::new(path, value, &mut *self.out)?;
        let result = read(&mut child);
        child.finish();
        Some(result)
    }

    /// Like [`Fields::object`], reading an absent field as an empty object (a MetalLB object
    /// without `spec` has every field unset); `None` only when it is not an object.
    pub fn object_or_empty<T>(
        &mut self,
        key: &str,
        read: impl FnOnce(&mut Fields<'_>) -> T,
    ) -> Option<T> {
        let value = self.take(key).unwrap_or_else(|| Value::Object(Map::new()));
        let path = self.path_of(key);
        let mut child = Fields::new(path, value, &mut *self.out)?;
        let result = read(&mut child);
        child.finish();
        Some(result)
    }

    /// Reads each object of the list field `key` with `read`, reporting what each leaves.
    pub fn objects<T>(&mut self, key: &str, mut read: impl FnMut(&mut Fields<'_>) -> T) -> Vec<T> {
        let Some(value) = self.take(key) else {
            return Vec::new();
        };
        let Value::Array(items) = value else {
            self.wrong_type(key, "a list of objects");
            return Vec::new();
        };
        let base = self.path_of(key);
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            if let Some(mut child) = Fields::new(format!("{base}[{i}]"), item, &mut *self.out) {
                out.push(read(&mut child));
                child.finish();
            }
        }
        out
    }

    /// Takes a list of Kubernetes label selectors (MetalLB v1beta1's `NodeSelector` has the
    /// same two fields).
    pub fn label_selectors(&mut self, key: &str) -> Vec<LabelSelector> {
        self.objects(key, |sel| sel.read_label_selector())
    }

    /// Reads this object as a Kubernetes label selector.
    pub fn read_label_selector(&mut self) -> LabelSelector {
        LabelSelector {
            match_labels: self.string_map("matchLabels"),
            match_expressions: {
                let exprs = self.objects("matchExpressions", |req| LabelSelectorRequirement {
                    key: req.string("key").unwrap_or_default(),
                    operator: req.string("operator").unwrap_or_default(),
                    values: {
                        let values = req.strings("values");
                        (!values.is_empty()).then_some(values)
                    },
                });
                (!exprs.is_empty()).then_some(exprs)
            },
        }
    }

    /// Takes every field of this object that [`UNSUPPORTED`] lists for `kind`, reporting
    /// those set to something other than their default (the zero value).
    pub fn unsupported(&mut self, kind: Kind) {
        for row in UNSUPPORTED.iter().filter(|row| row.kind == kind) {
            let Some((parent, key)) = row.path.rsplit_once('.') else {
                continue;
            };
            if parent != self.path {
                continue;
            }
            if let Some(value) = self.take(key)
                && !is_zero(&value)
            {
                self.out.findings.push(Finding::UnsupportedField {
                    path: row.path.to_string(),
                    reason: row.reason,
                });
            }
        }
    }

    /// Drops the field `key`, which is known and deliberately not carried over.
    pub fn drop_known(&mut self, key: &str) {
        self.map.remove(key);
    }

    /// Reports every field not taken as unknown.
    pub fn finish(self) {
        for (key, value) in self.map {
            if value.is_null() {
                continue;
            }
            let path = if self.path.is_empty() {
                key
            } else {
                format!("{}.{key}", self.path)
            };
            self.out.findings.push(Finding::UnknownField { path });
        }
    }
}

/// Whether `value` is Go's zero value for its type (`false`, `0`, `""`, empty list or map):
/// what MetalLB omits, and what a field set to its default holds.
pub fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_left_over_are_reported_with_their_path() {
        let mut out = Collected::default();
        let mut f =
            Fields::new("spec", json!({"a": "x", "b": {"c": 1, "d": 2}}), &mut out).unwrap();
        assert_eq!(f.string("a").as_deref(), Some("x"));
        f.object("b", |b| b.int("c"));
        f.finish();
        assert_eq!(
            out.findings,
            vec![Finding::UnknownField {
                path: "spec.b.d".into()
            }]
        );
        assert!(out.problems.is_empty());
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_problem_naming_the_field() {
        let mut out = Collected::default();
        let mut f = Fields::new("spec", json!({"peerASN": "65000"}), &mut out).unwrap();
        assert_eq!(f.int("peerASN"), None);
        f.finish();
        assert_eq!(
            out.problems,
            vec![Problem::WrongType {
                path: "spec.peerASN".into(),
                expected: "an integer"
            }]
        );
    }

    #[test]
    fn null_is_unset_and_zero_values_are_defaults() {
        let mut out = Collected::default();
        let mut f = Fields::new("spec", json!({"x": null}), &mut out).unwrap();
        assert_eq!(f.take("x"), None);
        f.finish();
        assert!(out.findings.is_empty());
        assert!(is_zero(&json!(false)) && is_zero(&json!("")) && is_zero(&json!(0)));
        assert!(is_zero(&json!([])) && is_zero(&json!({"a": []})));
        assert!(!is_zero(&json!(true)) && !is_zero(&json!("red")) && !is_zero(&json!([{}])));
    }
}
