//! Defaults, admission and validation of the built-in kinds other than Services. Pure.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::ops::invalid;
use super::resources::Builtin;
use super::state::Ctx;

fn cannot_handle(kind: &str, why: String) -> ApiError {
    ApiError::BadRequest(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
    ))
}

/// Checks a `metav1.MicroTime`: exactly six fractional digits, as the Go decoder demands.
fn check_micro(kind: &str, s: &str) -> ApiResult<()> {
    let layout = "2006-01-02T15:04:05.000000Z07:00";
    let Some(dot) = s.find('.') else {
        let tail = s.get(19..).unwrap_or("");
        return Err(cannot_handle(
            kind,
            format!("parsing time {s:?} as {layout:?}: cannot parse {tail:?} as \".000000\""),
        ));
    };
    let frac: String = s[dot + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if frac.len() != 6 {
        let tail = &s[dot + 7.min(s.len() - dot)..];
        return Err(cannot_handle(
            kind,
            format!("parsing time {s:?} as {layout:?}: cannot parse {tail:?} as \"Z07:00\""),
        ));
    }
    Ok(())
}

/// MicroTime fields of core Events.
pub fn check_micro_times(core_event: &Value) -> ApiResult<()> {
    for p in ["/eventTime", "/series/lastObservedTime"] {
        if let Some(s) = core_event.pointer(p).and_then(Value::as_str) {
            check_micro("Event", s)?;
        }
    }
    Ok(())
}

/// Validation of events.k8s.io/v1 Events.
pub fn validate_event_v1(ev: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    if ev.get("eventTime").is_none_or(Value::is_null) {
        errs.push(Cause::new(
            "FieldValueRequired",
            "Required value",
            Some("eventTime".into()),
        ));
        return errs;
    }
    if let Some(t) = ev.get("type").and_then(Value::as_str)
        && t != "Normal"
        && t != "Warning"
    {
        errs.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: \"\": has invalid value: {t}"),
            Some("type".into()),
        ));
    }
    for f in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if ev.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            errs.push(Cause::new(
                "FieldValueRequired",
                "Required value",
                Some(f.into()),
            ));
        }
    }
    errs
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Label values must be valid on every kind.
fn check_labels(obj: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    for v in obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(_, v)| v.as_str())
    {
        if !label_value_ok(v) {
            errs.push(Cause::new("FieldValueInvalid", format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"), Some("metadata.labels".into())));
        }
    }
    errs
}

/// Defaults and validation for kind `b` on create (`old` is `None`) or update.
pub fn prepare(ctx: &Ctx, b: Builtin, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let mut errs = check_labels(obj);
    match b {
        Builtin::Node => {
            if old.is_none() {
                let taints = obj
                    .pointer("/spec/taints")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if !taints
                    .iter()
                    .any(|t| t["key"] == "node.kubernetes.io/not-ready")
                {
                    let mut t = taints;
                    t.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
                    obj["spec"]["taints"] = Value::Array(t);
                }
            }
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            let info = [
                "machineID",
                "systemUUID",
                "bootID",
                "kernelVersion",
                "osImage",
                "containerRuntimeVersion",
                "kubeletVersion",
                "kubeProxyVersion",
                "operatingSystem",
                "architecture",
            ];
            if !obj.get("status").is_some_and(Value::is_object) {
                obj["status"] = json!({});
            }
            for k in info {
                if obj.pointer(&format!("/status/nodeInfo/{k}")).is_none() {
                    obj["status"]["nodeInfo"][k] = json!("");
                }
            }
            obj["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] = obj
                .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
                .cloned()
                .unwrap_or(json!(0));
        }
        Builtin::Pod => {
            if old.is_none() {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
                for c in obj
                    .pointer_mut("/spec/containers")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if c.get("terminationMessagePath").is_none() {
                        c["terminationMessagePath"] = json!("/dev/termination-log");
                        c["terminationMessagePolicy"] = json!("File");
                    }
                    if c.get("imagePullPolicy").is_none() {
                        c["imagePullPolicy"] = json!("IfNotPresent");
                    }
                }
                for (k, v) in [
                    ("restartPolicy", json!("Always")),
                    ("terminationGracePeriodSeconds", json!(30)),
                    ("dnsPolicy", json!("ClusterFirst")),
                    ("schedulerName", json!("default-scheduler")),
                    ("securityContext", json!({})),
                    ("enableServiceLinks", json!(true)),
                    ("preemptionPolicy", json!("PreemptLowerPriority")),
                    ("priority", json!(0)),
                ] {
                    if obj.pointer(&format!("/spec/{k}")).is_none() {
                        obj["spec"][k] = v;
                    }
                }
            }
        }
        Builtin::Namespace => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            if old.is_none() {
                obj["status"] = json!({"phase": "Active"});
            }
        }
        Builtin::Secret => {
            if obj.get("type").is_none() {
                obj["type"] = json!("Opaque");
            }
            for (_, v) in obj
                .get("data")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let s = v.as_str().unwrap_or("");
                if let Err(e) = STANDARD.decode(s) {
                    let byte = match e {
                        base64::DecodeError::InvalidByte(i, _)
                        | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                        _ => s.len(),
                    };
                    return Err(cannot_handle(
                        "Secret",
                        format!("illegal base64 data at input byte {byte}"),
                    ));
                }
            }
            if let Some(string_data) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
                for (k, v) in string_data.as_object().into_iter().flatten() {
                    obj["data"][k] = json!(STANDARD.encode(v.as_str().unwrap_or("")));
                }
            }
            if obj["type"] == "kubernetes.io/basic-auth" {
                let has = |k: &str| obj.pointer(&format!("/data/{k}")).is_some();
                if !has("username") && !has("password") {
                    errs.push(Cause::new(
                        "FieldValueRequired",
                        "Required value",
                        Some("data[username]".into()),
                    ));
                    errs.push(Cause::new(
                        "FieldValueRequired",
                        "Required value",
                        Some("data[password]".into()),
                    ));
                }
            }
            if let Some(old) = old {
                if old.get("type") != obj.get("type") {
                    let t = obj["type"].as_str().unwrap_or("");
                    errs.push(Cause::new(
                        "FieldValueInvalid",
                        format!("Invalid value: {t:?}: field is immutable"),
                        Some("type".into()),
                    ));
                }
                if old.get("immutable") == Some(&json!(true)) {
                    if old.get("data") != obj.get("data") {
                        errs.push(Cause::new(
                            "FieldValueForbidden",
                            "Forbidden: field is immutable when `immutable` is set",
                            Some("data".into()),
                        ));
                    }
                    if obj.get("immutable") != Some(&json!(true)) {
                        errs.push(Cause::new(
                            "FieldValueForbidden",
                            "Forbidden: field is immutable when `immutable` is set",
                            Some("immutable".into()),
                        ));
                    }
                }
            }
        }
        Builtin::Lease => {
            for p in ["/spec/acquireTime", "/spec/renewTime"] {
                if let Some(s) = obj.pointer(p).and_then(Value::as_str) {
                    check_micro("Lease", s)?;
                }
            }
        }
        Builtin::CoreEvent => {
            check_micro_times(obj)?;
        }
        Builtin::EndpointSlice => match obj.get("addressType").and_then(Value::as_str) {
            None => errs.push(Cause::new(
                "FieldValueRequired",
                "Required value",
                Some("addressType".into()),
            )),
            Some(family) => {
                for (i, ep) in obj
                    .get("endpoints")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    for a in ep
                        .get("addresses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        let ok = match family {
                            "IPv4" => a.parse::<std::net::Ipv4Addr>().is_ok(),
                            "IPv6" => a.parse::<std::net::Ipv6Addr>().is_ok(),
                            _ => true,
                        };
                        if !ok {
                            let want = if family == "IPv4" {
                                "an IPv4"
                            } else {
                                "an IPv6"
                            };
                            errs.push(Cause::new(
                                "FieldValueInvalid",
                                format!("Invalid value: {a:?}: must be {want} address"),
                                Some(format!("endpoints[{i}].addresses")),
                            ));
                        }
                    }
                }
            }
        },
        Builtin::Crd => {
            if obj.pointer("/spec/conversion").is_none() {
                obj["spec"]["conversion"] = json!({"strategy": "None"});
            }
            if old.is_none() {
                let stored: Vec<Value> = obj
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|v| v["storage"] == true)
                    .map(|v| v["name"].clone())
                    .collect();
                // Established is set asynchronously: the create answer has no conditions yet.
                obj["status"] = json!({"conditions": null, "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": stored});
            }
        }
        Builtin::ConfigMap | Builtin::Service | Builtin::Event => {}
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(ctx, "", errs))
    }
}
