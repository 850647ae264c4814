//! JSON merge patches (RFC 7386) of `/status` that replace the status instead of merging into
//! it. A merge patch keeps every field it does not mention, so a field a type leaves out when
//! it is empty (`None`, an empty list or string) would keep what an earlier write put there: a
//! session that went down would go on showing the hold time it had agreed. These patches name
//! every such field, as `null`.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

/// The JSON schema of one status type, made once (`schemars`' output, as JSON).
pub struct StatusSchema {
    schema: OnceLock<Value>,
    make: fn() -> Value,
}

impl StatusSchema {
    /// The schema of `T`, made on first use.
    pub const fn of<T: JsonSchema>() -> Self {
        Self {
            schema: OnceLock::new(),
            make: || serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default(),
        }
    }

    /// The body of a JSON merge patch of `/status` that makes an object's status exactly
    /// `status`: every property of the schema that `status` leaves out is sent as `null`, at
    /// every depth where `status` has an object (a map's own keys excepted: maps merge).
    pub fn replacing(&self, status: &impl Serialize) -> Value {
        let schema = self.schema.get_or_init(self.make);
        let mut body = serde_json::to_value(status).unwrap_or_default();
        fill(&mut body, schema, schema);
        serde_json::json!({ "status": body })
    }
}

/// The properties an object of `schema` may have, through `$ref`, `anyOf`, `oneOf`, `allOf`.
fn properties<'a>(schema: &'a Value, root: &'a Value) -> Option<&'a Map<String, Value>> {
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        return Some(p);
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return properties(root.pointer(r.strip_prefix('#')?)?, root);
    }
    ["anyOf", "oneOf", "allOf"].iter().find_map(|k| {
        schema
            .get(*k)
            .and_then(Value::as_array)?
            .iter()
            .find_map(|s| properties(s, root))
    })
}

fn fill(value: &mut Value, schema: &Value, root: &Value) {
    let (Some(fields), Some(props)) = (value.as_object_mut(), properties(schema, root)) else {
        return;
    };
    for (key, sub) in props {
        match fields.get_mut(key) {
            Some(v) => fill(v, sub, root),
            None => {
                fields.insert(key.clone(), Value::Null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1beta1::{BGPNotificationInfo, BGPSessionStateStatus};

    static SESSION: StatusSchema = StatusSchema::of::<BGPSessionStateStatus>();

    #[test]
    fn a_session_that_went_down_sends_null_for_everything_it_no_longer_has() {
        let down = BGPSessionStateStatus {
            node: "node-a".into(),
            peer: "tor".into(),
            bgp_state: "Active".into(),
            ..Default::default()
        };
        let body = SESSION.replacing(&down);
        let status = body["status"].as_object().unwrap();
        assert_eq!(status["bgpState"], "Active");
        for gone in [
            "establishedTime",
            "holdTime",
            "keepaliveTime",
            "capabilities",
            "bfdState",
            "bfdDetectionTime",
            "lastError",
            "lastNotificationReceived",
            "conditions",
            "localASN",
        ] {
            assert!(status[gone].is_null(), "{gone}: {:?}", status.get(gone));
            assert!(status.contains_key(gone), "{gone} is not named");
        }
    }

    #[test]
    fn a_nested_object_present_names_its_own_missing_fields() {
        let st = BGPSessionStateStatus {
            last_notification_sent: Some(BGPNotificationInfo {
                code: 6,
                subcode: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = SESSION.replacing(&st);
        let sent = &body["status"]["lastNotificationSent"];
        assert_eq!(sent["code"], 6);
        assert!(sent.as_object().unwrap().contains_key("message"));
        assert!(sent["message"].is_null() && sent["time"].is_null());
    }

    #[test]
    fn every_field_a_full_status_has_is_named_by_an_empty_one() {
        let full = serde_json::json!({
            "node": "n", "peer": "p", "peerAddress": "192.0.2.1:179", "bgpState": "Established",
            "bfdState": "Up", "establishedTime": "2026-01-01T00:00:00Z", "establishedCount": 1,
            "ipv4Prefixes": 1, "ipv6Prefixes": 1, "localASN": 1, "peerASN": 2,
            "holdTime": "90s", "keepaliveTime": "30s", "capabilities": ["4-octet-as"],
            "bfdDetectionTime": "900ms", "lastError": "e",
            "lastErrorTime": "2026-01-01T00:00:00Z",
            "lastNotificationReceived": {"code": 6, "subcode": 2},
            "lastNotificationSent": {"code": 6, "subcode": 2},
            "conditions": [],
        });
        let full: BGPSessionStateStatus = serde_json::from_value(full).unwrap();
        let named = SESSION.replacing(&BGPSessionStateStatus::default());
        let named = named["status"].as_object().unwrap();
        for key in serde_json::to_value(&full)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(named.contains_key(key), "{key} is not named");
        }
    }
}
