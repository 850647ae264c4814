//! Would FerroLB's API server accept this object? Pure: no I/O.
//!
//! Two parts:
//! - the structural bounds (ranges, lengths, item counts, enums, required fields, patterns),
//!   read from FerroLB's own CRDs ([`ferrolb_api::v1beta1::all_crds`]), so they follow the
//!   types without being restated;
//! - the CRDs' CEL rules, which no Rust crate here evaluates, restated one by one with
//!   FerroLB's own messages, plus the per-object checks [`ferrolb_api::validate`] exposes
//!   (`parse_pool`, the timers of `check_bgp_peer`). A test fails when a CRD gains a rule or a
//!   pattern that is not restated here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::OnceLock;

use ferrolb_api::v1beta1::{BGPPeerSpec, COMMUNITY_PATTERN};
use ferrolb_api::validate::{ConfigError, check_bgp_peer, parse_pool};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

use super::FerroObject;
use super::duration::{is_ferrolb_syntax, value};
use super::kinds::Kind;
use super::report::Problem;

/// FerroLB's message for an out-of-range community.
pub const MSG_COMMUNITY_RANGE: &str = "standard communities are two numbers up to 65535 (65000:100); large ones three numbers up to 4294967295 (large:64512:1:2)";
/// FerroLB's message for `peerAddress`.
pub const MSG_PEER_ADDRESS: &str = "peerAddress must be an IPv4 or IPv6 address";
/// FerroLB's message for `sourceAddress`.
pub const MSG_SOURCE_ADDRESS: &str = "sourceAddress must be an IPv4 or IPv6 address";
/// FerroLB's message for `routerID`.
pub const MSG_ROUTER_ID: &str = "routerID must be an IPv4 address";
/// FerroLB's message for `holdTime`'s syntax.
pub const MSG_HOLD_TIME_SYNTAX: &str = "holdTime is a duration such as 90s or 3m";
/// FerroLB's message for `keepaliveTime`'s syntax.
pub const MSG_KEEPALIVE_SYNTAX: &str = "keepaliveTime is a duration such as 30s";
/// FerroLB's message for `connectTime`.
pub const MSG_CONNECT_TIME: &str = "connectTime is a duration of at least 1s";
/// FerroLB's message for `holdTime`'s value.
pub const MSG_HOLD_TIME: &str =
    "holdTime must be 0s (no keepalives) or at least 3s (RFC 4271 §4.2)";
/// FerroLB's message for `keepaliveTime` against `holdTime`.
pub const MSG_KEEPALIVE: &str = "keepaliveTime must not be above holdTime";
/// FerroLB's message for `peerASN` and `dynamicASN`.
pub const MSG_ASN: &str = "set peerASN, or dynamicASN (internal or external), not both";
/// FerroLB's message for `password` and `passwordSecret`.
pub const MSG_PASSWORD: &str = "set password or passwordSecret, not both";
/// FerroLB's message for the families of `sourceAddress` and `peerAddress`.
pub const MSG_FAMILY: &str = "sourceAddress and peerAddress must be of the same IP family";

/// FerroLB's message for `vrf`.
pub const MSG_VRF: &str = "vrf is a Linux interface name: 1 to 15 characters, no '/', ':' or whitespace, and not '.' or '..'";
/// FerroLB's message for `interface`.
pub const MSG_INTERFACE: &str = "interface is a Linux interface name: 1 to 15 characters, no '/', ':' or whitespace, and not '.' or '..'";
/// FerroLB's message for `peerAddress` and `interface`.
pub const MSG_ADDRESS_OR_INTERFACE: &str =
    "set peerAddress, or interface (BGP unnumbered), exactly one of them";
/// FerroLB's message for a `BGPAdvertisement`'s `serviceSelectors` with aggregation.
pub const MSG_SERVICE_SELECTORS_HOST_ROUTES: &str = "serviceSelectors need host routes: leave aggregationLength at 32 and aggregationLengthV6 at 128 (an aggregate would attract the traffic of the Services not selected too)";
/// FerroLB's message for `disableMP` against `dualStackAddressFamily`.
pub const MSG_DUAL_STACK: &str = "disableMP: true (one family) contradicts dualStackAddressFamily: true (both families); drop disableMP, which is deprecated";
/// FerroLB's message for `strictRole` without `role`.
pub const MSG_STRICT_ROLE: &str = "strictRole needs role: the speaker can only require the router's BGP role when it has one of its own";
/// FerroLB's message for `announceAllNodes` with `interface`.
pub const MSG_ANNOUNCE_ALL_NODES: &str = "announceAllNodes cannot be set with interface: the other nodes' next hops are their InternalIP addresses, which an unnumbered link has none of";
/// FerroLB's message for `sourceAddress` with `interface`.
pub const MSG_SOURCE_WITH_INTERFACE: &str = "sourceAddress cannot be set with interface: an unnumbered session runs from the node's IPv6 link-local address on that interface";

/// Every CEL rule message of the six configuration CRDs that this module restates.
#[cfg(test)]
const RESTATED_RULES: [&str; 21] = [
    // `spec.addresses`: restated by `parse_pool`, which is stricter (IPv6 order, overlaps).
    "each address must be a CIDR such as 10.0.0.0/24 or a range such as 10.0.0.10-10.0.0.20 of one family, start not after end",
    MSG_COMMUNITY_RANGE,
    MSG_PEER_ADDRESS,
    MSG_SOURCE_ADDRESS,
    MSG_ROUTER_ID,
    MSG_HOLD_TIME_SYNTAX,
    MSG_KEEPALIVE_SYNTAX,
    MSG_CONNECT_TIME,
    MSG_HOLD_TIME,
    MSG_KEEPALIVE,
    MSG_ASN,
    MSG_PASSWORD,
    MSG_FAMILY,
    MSG_VRF,
    MSG_INTERFACE,
    MSG_ADDRESS_OR_INTERFACE,
    MSG_SOURCE_WITH_INTERFACE,
    MSG_DUAL_STACK,
    MSG_STRICT_ROLE,
    MSG_ANNOUNCE_ALL_NODES,
    MSG_SERVICE_SELECTORS_HOST_ROUTES,
];

/// The pattern of a `Community` alias's name in FerroLB's CRD.
const ALIAS_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// The pattern of a `Community` alias's value in FerroLB's CRD.
const ALIAS_VALUE_PATTERN: &str =
    r"^([0-9]{1,5}:[0-9]{1,5}|large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10})$";

/// Every problem FerroLB's API server (or its per-object validation) would find in `object`.
pub fn check(object: &FerroObject) -> Vec<Problem> {
    let json = object.to_json();
    let mut problems = Vec::new();
    if let Some(schema) = crd_schemas().get(&object.kind()) {
        walk(schema, &json, "", &mut problems);
    }
    match object {
        FerroObject::IPAddressPool(pool) => {
            if !pool.spec.addresses.is_empty()
                && let Err(e) = parse_pool(&object.name(), &pool.spec.addresses)
            {
                problems.push(Problem::Config(e));
            }
        }
        FerroObject::BGPAdvertisement(adv) => {
            let host_routes = adv.spec.aggregation_length.is_none_or(|l| l == 32)
                && adv.spec.aggregation_length_v6.is_none_or(|l| l == 128);
            if !adv.spec.service_selectors.is_empty() && !host_routes {
                problems.push(Problem::Rule {
                    message: MSG_SERVICE_SELECTORS_HOST_ROUTES.into(),
                });
            }
            for (i, c) in adv.spec.communities.iter().enumerate() {
                if !community_in_range(c) {
                    problems.push(Problem::Refused {
                        path: format!("spec.communities[{i}]"),
                        value: c.clone(),
                        message: MSG_COMMUNITY_RANGE.into(),
                    });
                }
            }
        }
        FerroObject::BGPPeer(peer) => {
            let before = problems.len();
            peer_rules(&peer.spec, &mut problems);
            if problems.len() == before {
                // Only the timers can fail here: the peer's own Secret and profile are given.
                let secrets: BTreeSet<String> = peer
                    .spec
                    .password_secret
                    .iter()
                    .map(|s| s.name.clone())
                    .collect();
                let profiles: BTreeSet<String> = peer.spec.bfd_profile.iter().cloned().collect();
                problems.extend(
                    check_bgp_peer(peer, &secrets, &profiles)
                        .into_iter()
                        .filter(|e| matches!(e, ConfigError::InvalidDuration { .. }))
                        .map(Problem::Config),
                );
            }
        }
        FerroObject::Community(_)
        | FerroObject::BFDProfile(_)
        | FerroObject::L2Advertisement(_) => {}
    }
    problems
}

/// The `v1beta1` schema of each configuration CRD, rendered once from the Rust types.
fn crd_schemas() -> &'static BTreeMap<Kind, JSONSchemaProps> {
    static SCHEMAS: OnceLock<BTreeMap<Kind, JSONSchemaProps>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        ferrolb_api::v1beta1::all_crds()
            .into_iter()
            .filter_map(|crd| {
                let kind = Kind::from_name(&crd.spec.names.kind)?;
                let schema = crd
                    .spec
                    .versions
                    .into_iter()
                    .find(|v| v.name == ferrolb_api::names::VERSION)?
                    .schema?
                    .open_api_v3_schema?;
                Some((kind, schema))
            })
            .collect()
    })
}

/// Checks `value` against the structural parts of `schema`; CEL rules are left to the
/// restated checks.
fn walk(schema: &JSONSchemaProps, value: &Value, path: &str, out: &mut Vec<Problem>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Number(n) => {
            let v = n.as_f64().unwrap_or(0.0);
            let below = schema.minimum.is_some_and(|min| v < min);
            let above = schema.maximum.is_some_and(|max| v > max);
            if below || above {
                out.push(Problem::OutOfRange {
                    path: path.into(),
                    value: n.to_string(),
                    min: bound(schema.minimum),
                    max: bound(schema.maximum),
                });
            }
        }
        Value::String(s) => {
            let len = s.chars().count();
            let short = schema.min_length.is_some_and(|min| (len as i64) < min);
            let long = schema.max_length.is_some_and(|max| (len as i64) > max);
            if short || long {
                out.push(Problem::Length {
                    path: path.into(),
                    len,
                    min: schema.min_length.unwrap_or(0).to_string(),
                    max: schema.max_length.map_or("∞".into(), |m| m.to_string()),
                });
            }
            if let Some(allowed) = &schema.enum_
                && !allowed.iter().any(|a| a.0 == *value)
            {
                out.push(Problem::Refused {
                    path: path.into(),
                    value: s.clone(),
                    message: format!(
                        "FerroLB accepts only {}",
                        allowed
                            .iter()
                            .map(|a| a.0.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            if let Some(pattern) = &schema.pattern
                && pattern_matches(pattern, s) == Some(false)
            {
                out.push(Problem::Refused {
                    path: path.into(),
                    value: s.clone(),
                    message: format!("FerroLB's CRD requires the pattern {pattern}"),
                });
            }
        }
        Value::Array(items) => {
            let n = items.len() as i64;
            let few = schema.min_items.is_some_and(|min| n < min);
            let many = schema.max_items.is_some_and(|max| n > max);
            if few || many {
                out.push(Problem::Length {
                    path: path.into(),
                    len: items.len(),
                    min: schema.min_items.unwrap_or(0).to_string(),
                    max: schema.max_items.map_or("∞".into(), |m| m.to_string()),
                });
            }
            if let Some(JSONSchemaPropsOrArray::Schema(item_schema)) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            for required in schema.required.iter().flatten() {
                if map.get(required).is_none_or(Value::is_null) {
                    out.push(Problem::Required {
                        path: join(required),
                        why: "FerroLB's CRD requires it",
                    });
                }
            }
            for (key, child) in map {
                if let Some(child_schema) = schema.properties.as_ref().and_then(|p| p.get(key)) {
                    walk(child_schema, child, &join(key), out);
                } else if let Some(JSONSchemaPropsOrBool::Schema(extra)) =
                    &schema.additional_properties
                {
                    walk(extra, child, &join(key), out);
                }
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

fn bound(b: Option<f64>) -> String {
    b.map_or("∞".into(), |v| format!("{v}"))
}

/// Whether `s` matches one of the patterns FerroLB's CRDs use; `None` for a pattern this
/// module does not know (a test keeps that from happening).
fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    if pattern == COMMUNITY_PATTERN {
        Some(is_standard_text(s) || is_large_text(s) || is_alias_name(s))
    } else if pattern == ALIAS_NAME_PATTERN {
        Some(is_alias_name(s))
    } else if pattern == ALIAS_VALUE_PATTERN {
        Some(is_standard_text(s) || is_large_text(s))
    } else {
        None
    }
}

fn digits(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
}

/// `[0-9]{1,5}:[0-9]{1,5}`.
fn is_standard_text(s: &str) -> bool {
    s.split_once(':')
        .is_some_and(|(a, b)| digits(a, 5) && digits(b, 5))
}

/// `large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}`.
fn is_large_text(s: &str) -> bool {
    s.strip_prefix("large:").is_some_and(|rest| {
        let parts: Vec<&str> = rest.split(':').collect();
        parts.len() == 3 && parts.iter().all(|p| digits(p, 10))
    })
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
pub fn is_alias_name(s: &str) -> bool {
    let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = s.as_bytes();
    !b.is_empty() && ok(b[0]) && ok(b[b.len() - 1]) && b.iter().all(|&c| ok(c) || c == b'-')
}

/// FerroLB's range rule on communities: standard halves up to 65535, large parts up to
/// 4294967295.
fn community_in_range(c: &str) -> bool {
    let fits = |p: &str, max: u64| p.parse::<u64>().is_ok_and(|v| v <= max);
    if let Some((a, b)) = c.split_once(':')
        && digits(a, usize::MAX)
        && digits(b, usize::MAX)
    {
        return fits(a, 65535) && fits(b, 65535);
    }
    if let Some(rest) = c.strip_prefix("large:") {
        return rest
            .split(':')
            .take(3)
            .all(|p| fits(p, u64::from(u32::MAX)));
    }
    true
}

/// Kubernetes CEL's `isIP`: an IPv4 or IPv6 address, without a zone and not IPv4-mapped.
fn is_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        _ => Some(ip),
    }
}

/// FerroLB's CEL rules on a `BGPPeer`'s spec.
fn peer_rules(spec: &BGPPeerSpec, out: &mut Vec<Problem>) {
    let refused = |path: &str, value: &str, message: &str| Problem::Refused {
        path: path.into(),
        value: value.into(),
        message: message.into(),
    };
    let peer_ip = is_ip(&spec.peer_address);
    if spec.peer_address.is_empty() == spec.interface.is_none() {
        out.push(Problem::Rule {
            message: MSG_ADDRESS_OR_INTERFACE.into(),
        });
    }
    if !spec.peer_address.is_empty() && peer_ip.is_none() {
        out.push(refused(
            "spec.peerAddress",
            &spec.peer_address,
            MSG_PEER_ADDRESS,
        ));
    }
    if let Some(interface) = &spec.interface {
        if !is_interface_name(interface) {
            out.push(refused("spec.interface", interface, MSG_INTERFACE));
        }
        if spec.source_address.is_some() {
            out.push(Problem::Rule {
                message: MSG_SOURCE_WITH_INTERFACE.into(),
            });
        }
    }
    if let Some(src) = &spec.source_address {
        match is_ip(src) {
            None => out.push(refused("spec.sourceAddress", src, MSG_SOURCE_ADDRESS)),
            Some(ip) if peer_ip.is_some_and(|p| p.is_ipv4() != ip.is_ipv4()) => {
                out.push(Problem::Rule {
                    message: MSG_FAMILY.into(),
                })
            }
            Some(_) => {}
        }
    }
    if let Some(id) = &spec.router_id
        && !is_ip(id).is_some_and(|ip| ip.is_ipv4())
    {
        out.push(refused("spec.routerID", id, MSG_ROUTER_ID));
    }
    let hold = if is_ferrolb_syntax(&spec.hold_time) {
        value(&spec.hold_time)
    } else {
        out.push(refused(
            "spec.holdTime",
            &spec.hold_time,
            MSG_HOLD_TIME_SYNTAX,
        ));
        None
    };
    if let Some(h) = hold
        && !h.is_zero()
        && h.as_secs_f64() < 3.0
    {
        out.push(refused("spec.holdTime", &spec.hold_time, MSG_HOLD_TIME));
    }
    if let Some(ka) = &spec.keepalive_time {
        if !is_ferrolb_syntax(ka) {
            out.push(refused("spec.keepaliveTime", ka, MSG_KEEPALIVE_SYNTAX));
        } else if let (Some(k), Some(h)) = (value(ka), hold)
            && k > h
        {
            out.push(refused("spec.keepaliveTime", ka, MSG_KEEPALIVE));
        }
    }
    if let Some(ct) = &spec.connect_time
        && !(is_ferrolb_syntax(ct) && value(ct).is_some_and(|d| d.as_secs_f64() >= 1.0))
    {
        out.push(refused("spec.connectTime", ct, MSG_CONNECT_TIME));
    }
    if spec.peer_asn.is_some() == spec.dynamic_asn.is_some() {
        out.push(Problem::Rule {
            message: MSG_ASN.into(),
        });
    }
    if spec.password.is_some() && spec.password_secret.is_some() {
        out.push(Problem::Rule {
            message: MSG_PASSWORD.into(),
        });
    }
    if spec.disable_mp == Some(true) && spec.dual_stack_address_family == Some(true) {
        out.push(Problem::Rule {
            message: MSG_DUAL_STACK.into(),
        });
    }
    if spec.strict_role && spec.role.is_none() {
        out.push(Problem::Rule {
            message: MSG_STRICT_ROLE.into(),
        });
    }
    if spec.announce_all_nodes && spec.interface.is_some() {
        out.push(Problem::Rule {
            message: MSG_ANNOUNCE_ALL_NODES.into(),
        });
    }
    if let Some(vrf) = &spec.vrf
        && !is_interface_name(vrf)
    {
        out.push(refused("spec.vrf", vrf, MSG_VRF));
    }
}

/// The CRDs' rule for a Linux interface name: 1 to 15 characters, no `/`, `:` or whitespace,
/// and not `.` or `..`.
fn is_interface_name(s: &str) -> bool {
    (1..=15).contains(&s.chars().count())
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
        && s != "."
        && s != ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_schemas() -> Vec<(Kind, JSONSchemaProps)> {
        crd_schemas().iter().map(|(k, s)| (*k, s.clone())).collect()
    }

    fn visit(schema: &JSONSchemaProps, f: &mut impl FnMut(&JSONSchemaProps)) {
        f(schema);
        for child in schema.properties.iter().flat_map(|p| p.values()) {
            visit(child, f);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
            visit(items, f);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(extra)) = &schema.additional_properties {
            visit(extra, f);
        }
    }

    #[test]
    fn every_configuration_kind_has_its_crd_schema() {
        assert_eq!(all_schemas().len(), Kind::ALL.len());
    }

    #[test]
    fn a_strict_role_without_a_role_is_refused_with_ferrolbs_message() {
        use ferrolb_api::v1beta1::{BGPPeer, BGPPeerSpec, BgpRole};
        let spec = |role| BGPPeerSpec {
            my_asn: 64512,
            peer_asn: Some(64513),
            peer_address: "10.99.0.1".into(),
            strict_role: true,
            role,
            ..BGPPeerSpec::default()
        };
        let problems = |role| check(&FerroObject::BGPPeer(BGPPeer::new("p", spec(role))));
        assert!(problems(None).contains(&Problem::Rule {
            message: MSG_STRICT_ROLE.into()
        }));
        assert!(!problems(Some(BgpRole::Customer)).contains(&Problem::Rule {
            message: MSG_STRICT_ROLE.into()
        }));
    }

    #[test]
    fn every_cel_rule_of_ferrolbs_crds_is_restated_here() {
        let mut messages = BTreeSet::new();
        for (_, schema) in all_schemas() {
            visit(&schema, &mut |s| {
                for rule in s.x_kubernetes_validations.iter().flatten() {
                    messages.insert(rule.message.clone().unwrap_or(rule.rule.clone()));
                }
            });
        }
        let restated: BTreeSet<String> = RESTATED_RULES.iter().map(|m| m.to_string()).collect();
        assert_eq!(
            messages, restated,
            "a FerroLB CRD rule changed: restate it in migrate/schema.rs"
        );
    }

    #[test]
    fn every_pattern_of_ferrolbs_crds_is_known_here() {
        for (kind, schema) in all_schemas() {
            visit(&schema, &mut |s| {
                if let Some(p) = &s.pattern {
                    assert!(
                        pattern_matches(p, "x").is_some(),
                        "{kind}: pattern {p} is not checked by migrate/schema.rs"
                    );
                }
            });
        }
    }

    #[test]
    fn community_text_follows_ferrolbs_patterns_and_ranges() {
        assert_eq!(pattern_matches(COMMUNITY_PATTERN, "65000:100"), Some(true));
        assert_eq!(
            pattern_matches(COMMUNITY_PATTERN, "large:1:2:3"),
            Some(true)
        );
        assert_eq!(pattern_matches(COMMUNITY_PATTERN, "no-export"), Some(true));
        assert_eq!(pattern_matches(COMMUNITY_PATTERN, "650000:1"), Some(false));
        assert_eq!(pattern_matches(COMMUNITY_PATTERN, "Upper"), Some(false));
        assert_eq!(
            pattern_matches(ALIAS_VALUE_PATTERN, "no-export"),
            Some(false)
        );
        assert!(community_in_range("65535:65535"));
        assert!(!community_in_range("65536:1"));
        assert!(!community_in_range("large:4294967296:1:1"));
        assert!(community_in_range("alias"));
    }

    #[test]
    fn ipv4_mapped_ipv6_is_not_an_ip_for_kubernetes() {
        assert!(is_ip("10.0.0.1").is_some());
        assert!(is_ip("fd00::1").is_some());
        assert!(is_ip("::ffff:10.0.0.1").is_none());
        assert!(is_ip("fe80::1%eth0").is_none());
    }
}
