//! `meta.k8s.io/v1` Table answers for `kubectl get` (Services, Nodes, Pods, CR printer columns). Pure.

use serde_json::{Value, json};

use super::resources::{Builtin, ResourceDef};

fn age(obj: &Value) -> String {
    since(obj.pointer("/metadata/creationTimestamp"))
}

/// How long ago a timestamp was, as kubectl prints it.
fn since(ts: Option<&Value>) -> String {
    let Some(ts) = ts.and_then(Value::as_str) else {
        return "<unknown>".into();
    };
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Null) | None => "<none>".into(),
        Some(other) => other.to_string().trim_matches('"').to_string(),
    }
}

fn columns(res: &ResourceDef) -> Vec<(&'static str, String)> {
    match res.builtin() {
        Some(Builtin::Service) => vec![
            ("Name", "".into()),
            ("Type", "".into()),
            ("Cluster-IP", "".into()),
            ("External-IP", "".into()),
            ("Port(s)", "".into()),
            ("Age", "".into()),
            ("Selector", "".into()),
        ],
        Some(Builtin::Node) => vec![
            ("Name", "".into()),
            ("Status", "".into()),
            ("Age", "".into()),
        ],
        Some(Builtin::CoreEvent | Builtin::Event) => vec![
            ("Last Seen", "".into()),
            ("Type", "".into()),
            ("Reason", "".into()),
            ("Object", "".into()),
            ("Message", "".into()),
        ],
        Some(Builtin::Pod) => vec![
            ("Name", "".into()),
            ("Status", "".into()),
            ("Node", "".into()),
            ("Age", "".into()),
        ],
        _ => {
            let mut c = vec![("Name", String::new())];
            let mut has_age = false;
            if let Some(schema) = res.schema() {
                for col in schema.printer_columns.as_array().into_iter().flatten() {
                    let path = col["jsonPath"].as_str().unwrap_or("").to_string();
                    has_age |= path == ".metadata.creationTimestamp";
                    c.push(("custom", path));
                }
            }
            if !has_age {
                c.push(("Age", String::new()));
            }
            c
        }
    }
}

fn column_names(res: &ResourceDef) -> Vec<String> {
    let custom: Vec<String> = res
        .schema()
        .map(|s| {
            s.printer_columns
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    let mut i = 0;
    columns(res)
        .iter()
        .map(|(n, _)| {
            if *n == "custom" {
                i += 1;
                custom[i - 1].clone()
            } else {
                n.to_string()
            }
        })
        .collect()
}

fn cells(res: &ResourceDef, o: &Value) -> Vec<Value> {
    columns(res)
        .iter()
        .map(|(name, path)| {
            let text = match *name {
                "Name" => s(o.pointer("/metadata/name")),
                "Age" => age(o),
                "Type" => s(o.pointer("/spec/type").or(o.get("type"))),
                "Cluster-IP" => s(o.pointer("/spec/clusterIP")),
                "External-IP" => {
                    let ips: Vec<String> = o
                        .pointer("/status/loadBalancer/ingress")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|i| {
                            i.get("ip")
                                .or(i.get("hostname"))
                                .and_then(Value::as_str)
                                .map(str::to_string)
                        })
                        .collect();
                    if ips.is_empty() {
                        if o.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer") {
                            "<pending>".into()
                        } else {
                            "<none>".into()
                        }
                    } else {
                        ips.join(",")
                    }
                }
                "Port(s)" => {
                    let ports: Vec<String> = o
                        .pointer("/spec/ports")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|p| match p.get("nodePort") {
                            Some(n) => format!("{}:{}/{}", p["port"], n, s(p.get("protocol"))),
                            None => format!("{}/{}", p["port"], s(p.get("protocol"))),
                        })
                        .collect();
                    if ports.is_empty() {
                        "<none>".into()
                    } else {
                        ports.join(",")
                    }
                }
                "Selector" => match o.pointer("/spec/selector").and_then(Value::as_object) {
                    Some(m) if !m.is_empty() => m
                        .iter()
                        .map(|(k, v)| format!("{k}={}", s(Some(v))))
                        .collect::<Vec<_>>()
                        .join(","),
                    _ => "<none>".into(),
                },
                "Status" if res.builtin() == Some(Builtin::Pod) => s(o.pointer("/status/phase")),
                "Status" => {
                    let ready = o
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c["type"] == "Ready")
                        .map(|c| c["status"] == "True");
                    match ready {
                        Some(true) => "Ready".into(),
                        _ => "NotReady".into(),
                    }
                }
                "Node" => s(o.pointer("/spec/nodeName")),
                "Last Seen" => {
                    let at = [
                        "/series/lastObservedTime",
                        "/lastTimestamp",
                        "/deprecatedLastTimestamp",
                        "/eventTime",
                    ]
                    .iter()
                    .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
                    since(at.or(o.pointer("/metadata/creationTimestamp")))
                }
                "Reason" => s(o.get("reason")),
                "Object" => {
                    let r = o
                        .get("involvedObject")
                        .or(o.get("regarding"))
                        .cloned()
                        .unwrap_or_default();
                    format!("{}/{}", s(r.get("kind")).to_lowercase(), s(r.get("name")))
                }
                "Message" => s(o.get("message").or(o.get("note"))),
                _ if path == ".metadata.creationTimestamp" => age(o),
                _ => {
                    let p = format!("/{}", path.trim_start_matches('.').replace('.', "/"));
                    return o.pointer(&p).cloned().unwrap_or(Value::Null);
                }
            };
            json!(text)
        })
        .collect()
}

/// A Table of `items` for `res`.
pub fn table(res: &ResourceDef, items: &[Value], list_meta: Value) -> Value {
    let defs: Vec<Value> = column_names(res)
        .iter()
        .map(|n| json!({"name": n, "type": "string", "format": if n == "Name" { "name" } else { "" }, "description": "", "priority": 0}))
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| json!({"cells": cells(res, o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}}))
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}
