//! Decoding of built-in objects as kube-apiserver's Go types decode them: a value of the wrong type is
//! a 400, and fields the type does not have are dropped (with a `Warning`) or, under
//! `fieldValidation=Strict`, refused. The Go types are stood in for by k8s-openapi's. Pure.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::resources::Builtin;

fn roundtrip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// The object as its typed form keeps it (unknown fields gone), or why it does not decode.
fn known(kind: Builtin, v: &Value) -> Result<Value, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Event as CoreEvent, Namespace, Node, Pod, Secret, Service,
    };
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    match kind {
        Builtin::Service => roundtrip::<Service>(v),
        Builtin::Node => roundtrip::<Node>(v),
        Builtin::Pod => roundtrip::<Pod>(v),
        Builtin::Namespace => roundtrip::<Namespace>(v),
        Builtin::Secret => {
            // `data` is a map of base64 strings, whose errors the Secret rules report themselves.
            let mut without = v.clone();
            let data = without.as_object_mut().and_then(|o| o.remove("data"));
            let mut kept = roundtrip::<Secret>(&without)?;
            if let Some(d) = data {
                kept["data"] = d;
            }
            Ok(kept)
        }
        Builtin::ConfigMap => roundtrip::<ConfigMap>(v),
        Builtin::CoreEvent => roundtrip::<CoreEvent>(v),
        Builtin::Event => roundtrip::<Event>(v),
        Builtin::EndpointSlice => roundtrip::<EndpointSlice>(v),
        Builtin::Lease => roundtrip::<Lease>(v),
        Builtin::Crd => roundtrip::<CustomResourceDefinition>(v),
    }
}

/// Paths present in `sent` but not in `kept`, removed from `sent` as they are found.
fn drop_unknown(sent: &mut Value, kept: &Value, path: &str, unknown: &mut Vec<String>) {
    match (sent, kept) {
        (Value::Object(s), Value::Object(k)) => {
            let keys: Vec<String> = s.keys().cloned().collect();
            for key in keys {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(&key) {
                    Some(kv) => drop_unknown(s.get_mut(&key).expect("key exists"), kv, &p, unknown),
                    // A null is an unset field, known or not.
                    None if s[&key].is_null() => {}
                    None => {
                        s.remove(&key);
                        unknown.push(p);
                    }
                }
            }
        }
        (Value::Array(s), Value::Array(k)) => {
            for (i, (sv, kv)) in s.iter_mut().zip(k).enumerate() {
                drop_unknown(sv, kv, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Decodes `obj` as kind `kind` would be: returns the `Warning`s for dropped fields.
pub fn decode(
    kind: Builtin,
    kind_name: &str,
    field_validation: Option<&str>,
    obj: &mut Value,
) -> ApiResult<Vec<String>> {
    let cannot = |why: String| {
        ApiError::BadRequest(format!(
            "{kind_name} in version \"v1\" cannot be handled as a {kind_name}: {why}"
        ))
    };
    let kept = known(kind, obj).map_err(cannot)?;
    let mut unknown = Vec::new();
    drop_unknown(obj, &kept, "", &mut unknown);
    match field_validation {
        Some("Strict") if !unknown.is_empty() => {
            let list = unknown
                .iter()
                .map(|u| format!("unknown field \"{u}\""))
                .collect::<Vec<_>>()
                .join(", ");
            Err(cannot(format!("strict decoding error: {list}")))
        }
        Some("Ignore") => Ok(vec![]),
        _ => Ok(unknown
            .iter()
            .map(|u| format!("299 - \"unknown field \\\"{u}\\\"\""))
            .collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_service_fields_are_dropped_with_a_warning() {
        let mut svc = json!({"metadata": {"name": "a"}, "spec": {"type": "LoadBalancer", "loadBalancerIp": "1.2.3.4", "ports": [{"port": 80, "bogus": 1}]}});
        let warnings = decode(Builtin::Service, "Service", None, &mut svc).unwrap();
        assert_eq!(warnings.len(), 2);
        assert!(svc["spec"].get("loadBalancerIp").is_none());
        assert!(svc["spec"]["ports"][0].get("bogus").is_none());
        assert_eq!(svc["spec"]["type"], "LoadBalancer");
    }

    #[test]
    fn strict_validation_refuses_unknown_fields() {
        let mut svc = json!({"metadata": {"name": "a"}, "spec": {"typo": 1}});
        let e = decode(Builtin::Service, "Service", Some("Strict"), &mut svc).unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(
            e.message()
                .ends_with("strict decoding error: unknown field \"spec.typo\""),
            "{}",
            e.message()
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_400() {
        let mut svc = json!({"metadata": {"name": "a"}, "spec": {"ports": [{"port": "eighty"}]}});
        assert_eq!(
            decode(Builtin::Service, "Service", None, &mut svc)
                .unwrap_err()
                .code(),
            400
        );
    }
}
