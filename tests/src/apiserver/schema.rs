//! Custom resource admission: pruning of unknown fields, schema defaults, structural OpenAPI checks
//! (type, format, enum, bounds, lengths, pattern, required, list types) and CEL rules through
//! kube-cel, reported as kube-apiserver reports them. Pure.

use std::net::{Ipv4Addr, Ipv6Addr};

use kube::core::cel::{RootContext, Validator, apply_defaults};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::ops::invalid;
use super::state::Ctx;

/// A served version's schema and identity.
#[derive(Debug)]
pub struct CrdSchema {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// `openAPIV3Schema`.
    pub schema: Value,
    /// `additionalPrinterColumns`.
    pub printer_columns: Value,
}

impl CrdSchema {
    /// A schema for `group/version` `kind`.
    pub fn new(
        group: &str,
        version: &str,
        kind: &str,
        schema: Value,
        printer_columns: Value,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            schema,
            printer_columns,
        }
    }
}

/// Admits `obj` (create when `old` is `None`): prune, default, validate. Returns `Warning`s.
pub fn admit(
    s: &CrdSchema,
    ctx: &Ctx,
    obj: &mut Value,
    old: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let mut unknown = Vec::new();
    prune_root(&s.schema, obj, &mut unknown);
    if !unknown.is_empty() && ctx.q("fieldValidation") == Some("Strict") {
        let list = unknown
            .iter()
            .map(|u| format!("unknown field \"{u}\""))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {list}",
            s.kind, s.version, s.kind
        )));
    }
    let warnings = if ctx.q("fieldValidation") == Some("Ignore") {
        vec![]
    } else {
        unknown
            .iter()
            .map(|u| format!("299 - \"unknown field \\\"{u}\\\"\""))
            .collect()
    };
    let meta = obj.get("metadata").cloned();
    *obj = apply_defaults(&s.schema, obj);
    if let Some(m) = meta {
        obj["metadata"] = m;
    }
    let mut errs = Vec::new();
    for (k, sub) in props(&s.schema) {
        if k == "metadata" || k == "apiVersion" || k == "kind" {
            continue;
        }
        if let Some(v) = obj.get(k) {
            validate(sub, v, k, &mut errs);
            required(sub, v, k, &mut errs);
        }
    }
    required(&s.schema, obj, "", &mut errs);
    let mut list_errs = Vec::new();
    list_types(&s.schema, obj, "", &mut list_errs, true);
    errs.extend(list_errs);
    let blocking = errs.iter().any(|c| {
        matches!(
            c.reason.as_str(),
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        )
    });
    if blocking {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            None,
        ));
    } else {
        let root = RootContext {
            api_version: format!("{}/{}", s.group, s.version),
            api_group: s.group.clone(),
            kind: s.kind.clone(),
        };
        let mut cel_schema = s.schema.clone();
        // metadata rules are not the CRD author's; only validate the rest.
        if let Some(p) = cel_schema
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        {
            p.remove("metadata");
        }
        // The real server's CEL sees a field set to null as absent (`has()` is false).
        let (seen, seen_old) = (without_nulls(obj), old.map(without_nulls));
        if let Err(cel_errs) = Validator::new().validate_with_context(
            &cel_schema,
            &seen,
            seen_old.as_ref(),
            Some(&root),
        ) {
            for e in cel_errs.into_vec() {
                let reason = e
                    .reason
                    .clone()
                    .unwrap_or_else(|| "FieldValueInvalid".into());
                let value = pointer_of(&e.field_path).and_then(|p| obj.pointer(&p).cloned());
                let message = match reason.as_str() {
                    "FieldValueForbidden" => format!("Forbidden: {}", e.message),
                    "FieldValueRequired" => format!("Required value: {}", e.message),
                    "FieldValueDuplicate" => format!("Duplicate value: {}", e.message),
                    _ => match value {
                        Some(v) if !v.is_object() && !v.is_array() => {
                            format!("Invalid value: {}: {}", go_value(&v), e.message)
                        }
                        _ => format!("Invalid value: {}", e.message),
                    },
                };
                let field = if e.field_path.is_empty() {
                    None
                } else {
                    Some(e.field_path.trim_start_matches('.').to_string())
                };
                errs.push(Cause::new(&reason, message, field));
            }
        }
    }
    if errs.is_empty() {
        Ok(warnings)
    } else {
        Err(invalid(ctx, "", errs))
    }
}

fn pointer_of(path: &str) -> Option<String> {
    if path.contains('[') {
        return None;
    }
    Some(
        path.trim_start_matches('.')
            .split('.')
            .map(|s| format!("/{s}"))
            .collect(),
    )
}

fn go_value(v: &Value) -> String {
    v.to_string()
}

fn props(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

fn preserves(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
}

fn prune_root(schema: &Value, obj: &mut Value, unknown: &mut Vec<String>) {
    let Some(o) = obj.as_object_mut() else { return };
    let keys: Vec<String> = o.keys().cloned().collect();
    for k in keys {
        if k == "apiVersion" || k == "kind" || k == "metadata" {
            continue;
        }
        match schema.pointer(&format!("/properties/{k}")) {
            Some(sub) => prune(sub, o.get_mut(&k).expect("key exists"), &k, unknown),
            None if preserves(schema) => {}
            None => {
                o.remove(&k);
                unknown.push(k);
            }
        }
    }
}

fn prune(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if preserves(schema) && schema.get("properties").is_none() {
        return;
    }
    match v {
        Value::Object(o) => {
            if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, val) in o.iter_mut() {
                    prune(ap, val, &format!("{path}.{k}"), unknown);
                }
                return;
            }
            if schema.get("x-kubernetes-embedded-resource") == Some(&json!(true)) {
                return;
            }
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                match schema.pointer(&format!(
                    "/properties/{}",
                    k.replace('~', "~0").replace('/', "~1")
                )) {
                    Some(sub) => prune(
                        sub,
                        o.get_mut(&k).expect("key exists"),
                        &format!("{path}.{k}"),
                        unknown,
                    ),
                    None if preserves(schema) => {}
                    None => {
                        o.remove(&k);
                        unknown.push(format!("{path}.{k}"));
                    }
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, val) in a.iter_mut().enumerate() {
                    prune(items, val, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => type_name(v) == other,
    }
}

fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => s.parse::<ipnet::IpNet>().is_ok(),
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => s.len() == 36 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
        _ => true,
    }
}

fn num(v: &Value) -> String {
    v.to_string()
}

/// The OpenAPI checks of one value against its schema (not `required`, done separately).
fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<Cause>) {
    let field = || Some(path.to_string());
    if v.is_null() {
        if schema.get("nullable") != Some(&json!(true)) && schema.get("type").is_some() {
            let t = schema["type"].as_str().unwrap_or("");
            errs.push(Cause::new(
                "FieldValueTypeInvalid",
                format!("Invalid value: \"null\": {path} in body must be of type {t}: \"null\""),
                field(),
            ));
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&json!(true));
    if int_or_string {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errs.push(Cause::new(
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: {:?}: {path} in body must be of type integer,string: {:?}",
                    type_name(v),
                    type_name(v)
                ),
                field(),
            ));
            return;
        }
    } else if let Some(t) = schema.get("type").and_then(Value::as_str)
        && !type_ok(t, v)
    {
        errs.push(Cause::new(
            "FieldValueTypeInvalid",
            format!(
                "Invalid value: {:?}: {path} in body must be of type {t}: {:?}",
                type_name(v),
                type_name(v)
            ),
            field(),
        ));
        return;
    }
    if let (Some(f), Some(s)) = (schema.get("format").and_then(Value::as_str), v.as_str())
        && !format_ok(f, s)
    {
        errs.push(Cause::new(
            "FieldValueTypeInvalid",
            format!("Invalid value: {s:?}: {path} in body must be of type {f}: {s:?}"),
            field(),
        ));
    }
    if let Some(s) = v.as_str() {
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && s.chars().count() as u64 > max
        {
            errs.push(Cause::new(
                "FieldValueTooLong",
                format!("Too long: may not be more than {max} bytes"),
                field(),
            ));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && (s.chars().count() as u64) < min
        {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {s:?}: {path} in body should be at least {min} chars long"),
                field(),
            ));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && regex::Regex::new(p).is_ok_and(|re| !re.is_match(s))
        {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {s:?}: {path} in body should match '{p}'"),
                field(),
            ));
        }
    }
    if let Some(x) = v.as_f64() {
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let excl = schema.get("exclusiveMaximum") == Some(&json!(true));
            if x > max || (excl && x == max) {
                let op = if excl {
                    "less than"
                } else {
                    "less than or equal to"
                };
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {path} in body should be {op} {}",
                        num(v),
                        num(&schema["maximum"])
                    ),
                    field(),
                ));
            }
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let excl = schema.get("exclusiveMinimum") == Some(&json!(true));
            if x < min || (excl && x == min) {
                let op = if excl {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {path} in body should be {op} {}",
                        num(v),
                        num(&schema["minimum"])
                    ),
                    field(),
                ));
            }
        }
    }
    if let Some(a) = v.as_array() {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && a.len() as u64 > max
        {
            errs.push(Cause::new(
                "FieldValueTooMany",
                format!("Too many: {}: must have at most {max} items", a.len()),
                field(),
            ));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (a.len() as u64) < min
        {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!(
                    "Invalid value: {}: {path} in body should have at least {min} items",
                    a.len()
                ),
                field(),
            ));
        }
        if let Some(items) = schema.get("items") {
            for (i, item) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                validate(items, item, &p, errs);
                required(items, item, &p, errs);
            }
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed = e
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        errs.push(Cause::new(
            "FieldValueNotSupported",
            format!("Unsupported value: {v}: supported values: {allowed}"),
            field(),
        ));
    }
    if let Some(o) = v.as_object() {
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
            && o.len() as u64 > max
        {
            errs.push(Cause::new(
                "FieldValueTooMany",
                format!("Too many: {}: must have at most {max} items", o.len()),
                field(),
            ));
        }
        let mut names: Vec<&String> = o.keys().collect();
        names.sort();
        for k in names {
            let sub = schema
                .pointer(&format!("/properties/{k}"))
                .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
            if let Some(sub) = sub {
                validate(sub, &o[k], &format!("{path}.{k}"), errs);
            }
        }
        for k in o.keys() {
            if let Some(sub) = schema.pointer(&format!("/properties/{k}")) {
                required(sub, &o[k], &format!("{path}.{k}"), errs);
            }
        }
    }
}

/// `required` of an object schema, reported after the properties' own errors.
fn required(schema: &Value, v: &Value, path: &str, errs: &mut Vec<Cause>) {
    let Some(o) = v.as_object() else { return };
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !o.contains_key(r) {
            let p = if path.is_empty() {
                r.to_string()
            } else {
                format!("{path}.{r}")
            };
            errs.push(Cause::new("FieldValueRequired", "Required value", Some(p)));
        }
    }
}

/// Duplicate items in `set` lists and duplicate keys in `map` lists.
fn list_types(schema: &Value, v: &Value, path: &str, errs: &mut Vec<Cause>, root: bool) {
    match v {
        Value::Object(o) => {
            for (k, val) in o {
                if root && k == "metadata" {
                    continue;
                }
                let sub = schema
                    .pointer(&format!("/properties/{k}"))
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(sub) = sub {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    list_types(sub, val, &p, errs, false);
                }
            }
        }
        Value::Array(a) => {
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => {
                    for (i, item) in a.iter().enumerate() {
                        if a[..i].contains(item) {
                            errs.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("Duplicate value: {item}"),
                                Some(format!("{path}[{i}]")),
                            ));
                        }
                    }
                }
                Some("map") => {
                    let keys: Vec<&str> = schema
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let key_of = |item: &Value| -> Value {
                        let mut m = Map::new();
                        for k in &keys {
                            let val = item.get(*k).cloned().or_else(|| {
                                schema
                                    .pointer(&format!("/items/properties/{k}/default"))
                                    .cloned()
                            });
                            if let Some(val) = val {
                                m.insert(k.to_string(), val);
                            }
                        }
                        Value::Object(m)
                    };
                    for (i, item) in a.iter().enumerate() {
                        let k = key_of(item);
                        if a[..i].iter().any(|prev| key_of(prev) == k) {
                            errs.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("Duplicate value: {k}"),
                                Some(format!("{path}[{i}]")),
                            ));
                        }
                    }
                }
                _ => {}
            }
            if let Some(items) = schema.get("items") {
                for (i, item) in a.iter().enumerate() {
                    list_types(items, item, &format!("{path}[{i}]"), errs, false);
                }
            }
        }
        _ => {}
    }
}

/// `v` with every object member whose value is null left out, at any depth: what CEL rules see.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}
