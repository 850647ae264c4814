//! Checks an example object against the OpenAPI schema of a CRD in `charts/ferrolb/crds/`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::render::chart_dir;

/// The places where `instance` does not fit the OpenAPI `schema` of a CRD: unknown fields, missing
/// required ones, wrong types. (Formats and CEL rules are the API server's business.)
pub(crate) fn schema_mismatches(
    schema: &Value,
    instance: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let type_ok = match schema["type"].as_str() {
        Some("object") => instance.is_object(),
        Some("array") => instance.is_array(),
        Some("string") => instance.is_string(),
        Some("integer") => instance.is_i64() || instance.is_u64(),
        Some("number") => instance.is_number(),
        Some("boolean") => instance.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!(
            "{path}: {instance} is not of type {}",
            schema["type"]
        ));
        return;
    }
    if let (Some(properties), Some(fields)) =
        (schema["properties"].as_object(), instance.as_object())
    {
        for (key, value) in fields {
            match properties.get(key) {
                Some(inner) => schema_mismatches(inner, value, &format!("{path}.{key}"), out),
                None => out.push(format!("{path}.{key} is not in the CRD")),
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let required = required.as_str().unwrap_or_default();
            if !fields.contains_key(required) {
                out.push(format!("{path}.{required} is required"));
            }
        }
    }
    if let (Some(items), Some(elements)) = (schema.get("items"), instance.as_array()) {
        for (i, element) in elements.iter().enumerate() {
            schema_mismatches(items, element, &format!("{path}[{i}]"), out);
        }
    }
}

/// The CRDs in `charts/ferrolb/crds/`, by kind: `(apiVersion, spec schema)`.
pub(crate) fn crd_schemas() -> BTreeMap<String, (String, Value)> {
    let mut schemas = BTreeMap::new();
    for entry in std::fs::read_dir(chart_dir().join("crds")).expect("charts/ferrolb/crds") {
        let text = std::fs::read_to_string(entry.expect("dir entry").path()).expect("a CRD file");
        let crd: Value = serde_norway::from_str(&text).expect("a CRD parses");
        let spec = &crd["spec"];
        for version in spec["versions"].as_array().expect("versions") {
            if version["served"] == true {
                let api_version = format!(
                    "{}/{}",
                    spec["group"].as_str().unwrap(),
                    version["name"].as_str().unwrap()
                );
                let schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
                schemas.insert(
                    spec["names"]["kind"].as_str().unwrap().to_owned(),
                    (api_version, schema),
                );
            }
        }
    }
    schemas
}
