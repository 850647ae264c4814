//! Decoding of the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) for the
//! objects `kubectl create ...` sends: Namespace, ConfigMap, Secret and Service. Answers are always
//! JSON, which kubectl also accepts. Pure.
//!
//! The envelope is `k8s\0` followed by a `runtime.Unknown` (1: typeMeta {1: apiVersion, 2: kind},
//! 2: raw object bytes). Field numbers below are those kubectl writes, checked against its requests.
//! Go's generated code writes every optional scalar, so empty strings, zeros and empty messages are
//! read as "unset", as the JSON encoding omits them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// How one field decodes.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Msg(&'static [Field]),
    RepStr,
    RepMsg(&'static [Field]),
    MapStr,
    MapBytes,
    IntOrString,
}

type Field = (u64, &'static str, Kind);

const META: &[Field] = &[
    (1, "name", Kind::Str),
    (2, "generateName", Kind::Str),
    (3, "namespace", Kind::Str),
    (11, "labels", Kind::MapStr),
    (12, "annotations", Kind::MapStr),
];
const NAMESPACE_SPEC: &[Field] = &[(1, "finalizers", Kind::RepStr)];
const NAMESPACE: &[Field] = &[
    (1, "metadata", Kind::Msg(META)),
    (2, "spec", Kind::Msg(NAMESPACE_SPEC)),
];
const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Kind::Msg(META)),
    (2, "data", Kind::MapStr),
    (3, "binaryData", Kind::MapBytes),
];
const SECRET: &[Field] = &[
    (1, "metadata", Kind::Msg(META)),
    (2, "data", Kind::MapBytes),
    (3, "type", Kind::Str),
];
const SERVICE_PORT: &[Field] = &[
    (1, "name", Kind::Str),
    (2, "protocol", Kind::Str),
    (3, "port", Kind::Int),
    (4, "targetPort", Kind::IntOrString),
    (5, "nodePort", Kind::Int),
];
const SERVICE_SPEC: &[Field] = &[
    (1, "ports", Kind::RepMsg(SERVICE_PORT)),
    (2, "selector", Kind::MapStr),
    (3, "clusterIP", Kind::Str),
    (4, "type", Kind::Str),
    (5, "externalIPs", Kind::RepStr),
    (7, "sessionAffinity", Kind::Str),
    (8, "loadBalancerIP", Kind::Str),
    (9, "loadBalancerSourceRanges", Kind::RepStr),
    (10, "externalName", Kind::Str),
    (11, "externalTrafficPolicy", Kind::Str),
    (12, "healthCheckNodePort", Kind::Int),
    (13, "publishNotReadyAddresses", Kind::Bool),
];
const SERVICE: &[Field] = &[
    (1, "metadata", Kind::Msg(META)),
    (2, "spec", Kind::Msg(SERVICE_SPEC)),
];

/// Why a protobuf body could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// Not the `k8s\0` envelope, or truncated.
    #[error("invalid protobuf envelope")]
    Malformed,
    /// A kind this server does not read in protobuf.
    #[error("protobuf is not supported for kind {0}")]
    UnsupportedKind(String),
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, ProtobufError> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let c = *b.get(*i).ok_or(ProtobufError::Malformed)?;
        *i += 1;
        v |= u64::from(c & 0x7f) << shift;
        if c < 0x80 {
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(ProtobufError::Malformed);
        }
    }
}

/// Splits a message into (field number, wire value) pairs.
fn fields(b: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, ProtobufError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let value = match key & 7 {
            0 => Wire::Varint(varint(b, &mut i)?),
            2 => {
                let n =
                    usize::try_from(varint(b, &mut i)?).map_err(|_| ProtobufError::Malformed)?;
                let end = i
                    .checked_add(n)
                    .filter(|e| *e <= b.len())
                    .ok_or(ProtobufError::Malformed)?;
                let v = &b[i..end];
                i = end;
                Wire::Bytes(v)
            }
            1 => {
                i += 8;
                Wire::Varint(0)
            }
            5 => {
                i += 4;
                Wire::Varint(0)
            }
            _ => return Err(ProtobufError::Malformed),
        };
        out.push((key >> 3, value));
    }
    if i > b.len() {
        return Err(ProtobufError::Malformed);
    }
    Ok(out)
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn map_entry(b: &[u8]) -> Result<(String, &[u8]), ProtobufError> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for (n, w) in fields(b)? {
        match (n, w) {
            (1, Wire::Bytes(k)) => key = text(k),
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

fn message(b: &[u8], schema: &[Field]) -> Result<Value, ProtobufError> {
    let mut out = Map::new();
    for (n, w) in fields(b)? {
        let Some((_, name, kind)) = schema.iter().find(|(f, _, _)| *f == n) else {
            continue;
        };
        let name = name.to_string();
        match (kind, w) {
            (Kind::Str, Wire::Bytes(v)) if !v.is_empty() => {
                out.insert(name, json!(text(v)));
            }
            (Kind::Int, Wire::Varint(v)) if v != 0 => {
                out.insert(name, json!(v as i64));
            }
            (Kind::Bool, Wire::Varint(v)) if v != 0 => {
                out.insert(name, json!(true));
            }
            (Kind::Msg(s), Wire::Bytes(v)) => {
                let m = message(v, s)?;
                if m.as_object().is_some_and(|o| !o.is_empty()) {
                    out.insert(name, m);
                }
            }
            (Kind::RepStr, Wire::Bytes(v)) => push(&mut out, name, json!(text(v))),
            (Kind::RepMsg(s), Wire::Bytes(v)) => push(&mut out, name, message(v, s)?),
            (Kind::MapStr, Wire::Bytes(v)) => {
                let (k, val) = map_entry(v)?;
                insert(&mut out, name, k, json!(text(val)));
            }
            (Kind::MapBytes, Wire::Bytes(v)) => {
                let (k, val) = map_entry(v)?;
                insert(&mut out, name, k, json!(STANDARD.encode(val)));
            }
            (Kind::IntOrString, Wire::Bytes(v)) => {
                let (mut ty, mut int, mut s) = (0, 0i64, String::new());
                for (n, w) in fields(v)? {
                    match (n, w) {
                        (1, Wire::Varint(t)) => ty = t,
                        (2, Wire::Varint(i)) => int = i as i64,
                        (3, Wire::Bytes(b)) => s = text(b),
                        _ => {}
                    }
                }
                let value = if ty == 1 { json!(s) } else { json!(int) };
                if value != json!(0) && value != json!("") {
                    out.insert(name, value);
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) {
    if let Value::Array(a) = out.entry(name).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

fn insert(out: &mut Map<String, Value>, name: String, k: String, v: Value) {
    if let Value::Object(m) = out.entry(name).or_insert_with(|| json!({})) {
        m.insert(k, v);
    }
}

/// Decodes a protobuf request body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or(ProtobufError::Malformed)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, w) in fields(rest)? {
        match (n, w) {
            (1, Wire::Bytes(tm)) => {
                for (n, w) in fields(tm)? {
                    match (n, w) {
                        (1, Wire::Bytes(v)) => api_version = text(v),
                        (2, Wire::Bytes(k)) => kind = text(k),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Service") => SERVICE,
        _ => return Err(ProtobufError::UnsupportedKind(kind)),
    };
    let mut obj = message(raw, schema)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kubectl create ns pbtest`, as kubectl 1.32 sent it.
    const CREATE_NAMESPACE: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x1e\x0a\x16\x0a\x06pbtest\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x00\x1a\x02\x0a\x00\x1a\x00\x22\x00";

    #[test]
    fn kubectl_namespace_create_decodes_to_its_json_form() {
        let v = decode(CREATE_NAMESPACE).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pbtest"}})
        );
    }

    #[test]
    fn truncated_bodies_are_malformed() {
        assert_eq!(
            decode(&CREATE_NAMESPACE[..20]),
            Err(ProtobufError::Malformed)
        );
        assert_eq!(decode(b"nope"), Err(ProtobufError::Malformed));
    }
}
