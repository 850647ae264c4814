//! One MetalLB object's fields to one FerroLB object's, kind by kind. Pure.
//!
//! Each function reads the MetalLB spec through [`Fields`], so a field it does not take is
//! reported as unknown; the decisions where MetalLB and FerroLB differ are documented on the
//! function that makes them.

use ferrolb_api::v1beta1::{
    BFDProfileSpec, BGPAdvertisementSpec, BGPPeerSpec, CommunityAlias, CommunitySpec, DynamicAsn,
    IPAddressPoolSpec, L2AdvertisementSpec, PreferredNodeSelector, SecretRef, ServiceAllocation,
};
use ferrolb_api::validate::CommunityValue;
use serde_json::json;

use super::duration::{self, DurationError};
use super::fields::Fields;
use super::kinds::Kind;
use super::report::{Action, Finding, Note, Problem};

/// What a peer's conversion needs to know about where it goes.
pub struct PeerContext<'a> {
    /// The namespace MetalLB read the peer (and so its password Secret) from.
    pub metallb_namespace: &'a str,
    /// FerroLB's namespace.
    pub to_namespace: &'a str,
}

/// `IPAddressPool` (v1beta1).
///
/// - `autoAssign` unset is `true`, as MetalLB's CRD defaults it.
/// - `serviceAllocation.priority`: MetalLB's 0 (or no value: Go omits 0) means "no priority",
///   and only values above 0 order pools; FerroLB's `Some(0)` would be the *first* pool tried,
///   so 0 becomes unset. A negative value (MetalLB: no priority as well; FerroLB: refused) becomes
///   unset with a note. A value above FerroLB's int32 is refused rather than clamped, since
///   clamping could merge two priorities.
/// - `ipMode` (FerroLB only) is left unset: the controller's `--default-ip-mode` applies.
pub fn ip_address_pool(spec: &mut Fields<'_>) -> IPAddressPoolSpec {
    IPAddressPoolSpec {
        addresses: spec.strings("addresses"),
        auto_assign: spec.bool("autoAssign").unwrap_or(true),
        avoid_buggy_ips: spec.bool("avoidBuggyIPs").unwrap_or(false),
        service_allocation: spec.object("serviceAllocation", |sa| ServiceAllocation {
            priority: priority(sa),
            namespaces: sa.strings("namespaces"),
            namespace_selectors: sa.label_selectors("namespaceSelectors"),
            service_selectors: sa.label_selectors("serviceSelectors"),
        }),
        ip_mode: None,
    }
}

fn priority(sa: &mut Fields<'_>) -> Option<i32> {
    let p = sa.int("priority")?;
    if p == 0 {
        return None;
    }
    if p < 0 {
        sa.note(
            "priority",
            Note::NegativePriorityIsUnset { priority: p as i64 },
        );
        return None;
    }
    match i32::try_from(p) {
        Ok(v) => Some(v),
        Err(_) => {
            let path = sa.path_of("priority");
            sa.problem(Problem::OutOfRange {
                path,
                value: p.to_string(),
                min: "0".into(),
                max: i32::MAX.to_string(),
            });
            None
        }
    }
}

/// `L2Advertisement` (v1beta1): every field is FerroLB's own.
/// `preferredNodeSelectors` are copied as written (MetalLB's weights are 1 to 100 too); a
/// returning preferred node waits out FerroLB's hold-down before it takes its addresses back
/// (the README says so).
pub fn l2_advertisement(spec: &mut Fields<'_>) -> L2AdvertisementSpec {
    let out = L2AdvertisementSpec {
        ip_address_pools: spec.strings("ipAddressPools"),
        ip_address_pool_selectors: spec.label_selectors("ipAddressPoolSelectors"),
        node_selectors: spec.label_selectors("nodeSelectors"),
        interfaces: spec.strings("interfaces"),
        service_selectors: spec.label_selectors("serviceSelectors"),
        preferred_node_selectors: spec.objects("preferredNodeSelectors", |p| {
            PreferredNodeSelector {
                weight: p.int_as::<i32>("weight", "int32").unwrap_or_default(),
                preference: p
                    .object_or_empty("preference", |s| s.read_label_selector())
                    .unwrap_or_default(),
            }
        }),
    };
    spec.unsupported(Kind::L2Advertisement);
    out
}

/// `BGPAdvertisement` (v1beta1).
///
/// - `aggregationLength` / `aggregationLengthV6` are kept as written (MetalLB's defaults 32 and
///   128 are FerroLB's too).
/// - `localPref`: Go omits 0, so MetalLB's 0 is "not set" (in FRR mode it sends no LOCAL_PREF
///   of its own for it): it becomes unset, and an explicit `0` in the input gets a note, since
///   FerroLB's `Some(0)` would send LOCAL_PREF 0.
pub fn bgp_advertisement(spec: &mut Fields<'_>) -> BGPAdvertisementSpec {
    let aggregation_length = spec.int_as::<i32>("aggregationLength", "int32");
    let aggregation_length_v6 = spec.int_as::<i32>("aggregationLengthV6", "int32");
    let local_pref = match spec.int_as::<u32>("localPref", "uint32") {
        Some(0) => {
            spec.note("localPref", Note::LocalPrefZeroIsUnset);
            None
        }
        other => other,
    };
    let out = BGPAdvertisementSpec {
        aggregation_length,
        aggregation_length_v6,
        local_pref,
        communities: spec.strings("communities"),
        ip_address_pools: spec.strings("ipAddressPools"),
        ip_address_pool_selectors: spec.label_selectors("ipAddressPoolSelectors"),
        node_selectors: spec.label_selectors("nodeSelectors"),
        service_selectors: spec.label_selectors("serviceSelectors"),
        peers: spec.strings("peers"),
    };
    spec.unsupported(Kind::BGPAdvertisement);
    out
}

/// `Community` (v1beta1). An alias named like a community FerroLB knows by name
/// (`no-export`, …) with another value gets a note: FerroLB reads the name as the well-known
/// community first.
pub fn community(spec: &mut Fields<'_>) -> CommunitySpec {
    let communities = spec.objects("communities", |alias| CommunityAlias {
        name: alias.string("name").unwrap_or_default(),
        value: alias.string("value").unwrap_or_default(),
    });
    for (i, alias) in communities.iter().enumerate() {
        if let Some(well_known) = CommunityValue::parse(&alias.name)
            && !alias.name.contains(':')
            && CommunityValue::parse(&alias.value) != Some(well_known)
        {
            spec.note(
                &format!("communities[{i}].name"),
                Note::AliasShadowedByWellKnown {
                    alias: alias.name.clone(),
                },
            );
        }
    }
    CommunitySpec { communities }
}

/// `BFDProfile` (v1beta1): the same fields, ranges and defaults; MetalLB's unset `echoMode` and
/// `passiveMode` are `false`, FerroLB's default.
pub fn bfd_profile(spec: &mut Fields<'_>) -> BFDProfileSpec {
    BFDProfileSpec {
        receive_interval: spec.int_as::<u32>("receiveInterval", "uint32"),
        transmit_interval: spec.int_as::<u32>("transmitInterval", "uint32"),
        detect_multiplier: spec.int_as::<u32>("detectMultiplier", "uint32"),
        echo_interval: spec.int_as::<u32>("echoInterval", "uint32"),
        echo_mode: spec.bool("echoMode").unwrap_or(false),
        passive_mode: spec.bool("passiveMode").unwrap_or(false),
        minimum_ttl: spec.int_as::<u32>("minimumTtl", "uint32"),
    }
}

/// A `BGPPeer`'s converted spec, and the Secret it needs in FerroLB's namespace.
pub struct PeerOut {
    /// The spec.
    pub spec: BGPPeerSpec,
    /// The `passwordSecret` name, when the peer has one.
    pub password_secret: Option<String>,
}

/// `BGPPeer` at `v1beta2`, MetalLB's storage version.
///
/// - `peerASN` 0 (Go omits it) is unset, which is how MetalLB writes a peer that uses
///   `dynamicASN`; `dynamicASN` `internal`/`external` maps to FerroLB's field of the same name
///   and meaning. FerroLB's rule "exactly one of the two" is MetalLB's own.
/// - `peerPort` unset or 0 is 179, MetalLB's CRD default (MetalLB caps the port at 16384,
///   FerroLB at 65535, so every MetalLB port fits).
/// - Timers: see [`timers`]. `connectTime` is carried over (rewritten if in Go-only syntax).
/// - `passwordSecret {name, namespace}`: FerroLB's `SecretRef` has only the name and reads the
///   Secret from its own namespace, so the peer gets an action-needed note to copy the Secret
///   (the shell copies it with `--apply --from-cluster`). MetalLB itself reads the Secret from
///   its own namespace and ignores `namespace`, so the Secret is taken from there, with a note
///   when `namespace` names another.
/// - `enableGracefulRestart` and `ebgpMultiHop` are FerroLB's too.
pub fn bgp_peer_v1beta2(spec: &mut Fields<'_>, ctx: &PeerContext<'_>) -> PeerOut {
    let my_asn = my_asn(spec);
    let peer_asn = spec.int_as::<u32>("peerASN", "uint32").filter(|a| *a != 0);
    let dynamic_asn = match spec.non_empty_string("dynamicASN").as_deref() {
        None => None,
        Some("internal") => Some(DynamicAsn::Internal),
        Some("external") => Some(DynamicAsn::External),
        Some(other) => {
            let path = spec.path_of("dynamicASN");
            spec.problem(Problem::Refused {
                path,
                value: other.into(),
                message: "MetalLB and FerroLB accept only `internal` or `external`".into(),
            });
            None
        }
    };
    let interface = spec.non_empty_string("interface");
    let peer_address = if interface.is_some() {
        spec.non_empty_string("peerAddress").unwrap_or_default()
    } else {
        peer_address(spec)
    };
    let peer_port = peer_port(spec);
    let (hold_time, keepalive_time) = timers(spec, false);
    let connect_time = spec
        .string("connectTime")
        .and_then(|ct| carried_duration(spec, "connectTime", &ct));
    let password_secret = spec
        .object("passwordSecret", |s| {
            (s.non_empty_string("name"), s.non_empty_string("namespace"))
        })
        .and_then(|(name, namespace)| {
            let name = name?;
            if let Some(ns) = namespace
                && ns != ctx.metallb_namespace
            {
                spec.note(
                    "passwordSecret.namespace",
                    Note::SecretNamespaceIgnored {
                        namespace: ns,
                        used: ctx.metallb_namespace.into(),
                    },
                );
            }
            spec.finding(Finding::ActionNeeded {
                action: Action::CopySecret {
                    name: name.clone(),
                    from_namespace: ctx.metallb_namespace.into(),
                    to_namespace: ctx.to_namespace.into(),
                },
            });
            Some(name)
        });
    // MetalLB's session carries only its peer address's family unless `dualStackAddressFamily`
    // is true (an unnumbered one always carries both); FerroLB's default is both, so the
    // single-family default is written out. `disableMP` is MetalLB's deprecated spelling of
    // that default and asks for nothing more.
    let dual_stack = spec.bool("dualStackAddressFamily").unwrap_or(false);
    let _ = spec.bool("disableMP");
    let dual_stack_address_family = (!dual_stack && interface.is_none()).then_some(false);
    // MetalLB's 0 is unset.
    let local_asn = spec.int_as::<u32>("localASN", "uint32").filter(|a| *a != 0);
    let out = BGPPeerSpec {
        my_asn,
        peer_asn,
        dynamic_asn,
        local_asn,
        peer_address,
        interface,
        peer_port,
        source_address: spec.non_empty_string("sourceAddress"),
        router_id: spec.non_empty_string("routerID"),
        hold_time,
        keepalive_time,
        connect_time,
        ebgp_multi_hop: spec.bool("ebgpMultiHop").unwrap_or(false),
        node_selectors: spec.label_selectors("nodeSelectors"),
        password: spec.non_empty_string("password"),
        password_secret: password_secret.clone().map(|name| SecretRef { name }),
        enable_graceful_restart: spec.bool("enableGracefulRestart").unwrap_or(false),
        role: None,
        strict_role: false,
        announce_all_nodes: false,
        bfd_profile: spec.non_empty_string("bfdProfile"),
        // MetalLB's `""` is the default VRF, which is FerroLB's unset.
        vrf: spec.non_empty_string("vrf"),
        dual_stack_address_family,
        disable_mp: None,
    };
    spec.unsupported(Kind::BGPPeer);
    PeerOut {
        spec: out,
        password_secret,
    }
}

/// `BGPPeer` at `v1beta1`, MetalLB's deprecated version. It differs from `v1beta2` in:
///
/// - `peerASN` is required (there is no `dynamicASN`);
/// - `nodeSelectors` use MetalLB's own `NodeSelector`, whose two fields (`matchLabels`,
///   `matchExpressions` of key/operator/values) are a label selector's, as MetalLB converts them;
/// - `holdTime` and `keepaliveTime` are not pointers, so `0s` cannot be told from unset (MetalLB
///   serves `0s` for a v1beta2 peer without timers): `0s` reads as unset, see [`timers`];
/// - it has none of `connectTime`, `passwordSecret`, `enableGracefulRestart`, `dynamicASN`,
///   `localASN`, `interface`, `vrf`, `disableMP`, `dualStackAddressFamily`: in a v1beta1 object
///   they are not MetalLB's fields (its API server prunes them) and are reported as unknown.
pub fn bgp_peer_v1beta1(spec: &mut Fields<'_>) -> PeerOut {
    let my_asn = my_asn(spec);
    let peer_asn = spec.int_as::<u32>("peerASN", "uint32").filter(|a| *a != 0);
    if peer_asn.is_none() {
        let path = spec.path_of("peerASN");
        spec.problem(Problem::Required {
            path,
            why: "a v1beta1 BGPPeer names the router's AS number (v1beta2 could use dynamicASN)",
        });
    }
    let peer_address = peer_address(spec);
    let peer_port = peer_port(spec);
    let (hold_time, keepalive_time) = timers(spec, true);
    let out = BGPPeerSpec {
        my_asn,
        peer_asn,
        dynamic_asn: None,
        local_asn: None,
        peer_address,
        interface: None,
        peer_port,
        source_address: spec.non_empty_string("sourceAddress"),
        router_id: spec.non_empty_string("routerID"),
        hold_time,
        keepalive_time,
        connect_time: None,
        ebgp_multi_hop: spec.bool("ebgpMultiHop").unwrap_or(false),
        node_selectors: spec.label_selectors("nodeSelectors"),
        password: spec.non_empty_string("password"),
        password_secret: None,
        enable_graceful_restart: false,
        role: None,
        strict_role: false,
        announce_all_nodes: false,
        bfd_profile: spec.non_empty_string("bfdProfile"),
        vrf: None,
        // A v1beta1 peer carries its own family only, as MetalLB's default does.
        dual_stack_address_family: Some(false),
        disable_mp: None,
    };
    PeerOut {
        spec: out,
        password_secret: None,
    }
}

fn my_asn(spec: &mut Fields<'_>) -> u32 {
    let present = spec.int_as::<u32>("myASN", "uint32");
    if present.is_none() {
        let path = spec.path_of("myASN");
        spec.problem(Problem::Required {
            path,
            why: "the speaker's AS number (MetalLB refuses a peer without it too)",
        });
    }
    // 0 stays 0 and is refused by FerroLB's range (MetalLB refuses it as "missing local ASN").
    present.unwrap_or(0)
}

fn peer_address(spec: &mut Fields<'_>) -> String {
    spec.non_empty_string("peerAddress").unwrap_or_else(|| {
        let path = spec.path_of("peerAddress");
        spec.problem(Problem::Required {
            path,
            why: "a peer needs the router's address, or an interface (BGP unnumbered)",
        });
        String::new()
    })
}

fn peer_port(spec: &mut Fields<'_>) -> u16 {
    match spec.int_as::<u16>("peerPort", "uint16") {
        None | Some(0) => 179,
        Some(port) => port,
    }
}

/// The hold and keepalive times, decided as MetalLB decides them:
///
/// - `holdTime` set: carried over (and `keepaliveTime` if set; unset, both MetalLB and FerroLB
///   use a third of the hold time).
/// - only `keepaliveTime` set: MetalLB uses three times the keepalive as hold time, so that is
///   written (FerroLB's default, 90s, could be below the keepalive, which FerroLB refuses).
/// - neither: FerroLB requires a hold time and defaults it to 90s, which is also MetalLB's in
///   native mode; it is written with a note (in FRR mode MetalLB left it to FRR's default).
/// - `v1beta1`: a `0s` timer is unset (see [`bgp_peer_v1beta1`]); in `v1beta2` `0s` is a real
///   hold time of zero (no keepalives), which FerroLB accepts, kept with a note: MetalLB's
///   conversion webhook stores a v1beta1 peer written without timers as v1beta2 `0s`, which
///   the converter cannot tell from a deliberate `0s`.
///
/// Durations in Go's syntax that FerroLB's CRD does not take (`0`, `1500us`) are rewritten to
/// the same value, with a note.
pub fn timers(spec: &mut Fields<'_>, v1beta1: bool) -> (String, Option<String>) {
    let read = |spec: &mut Fields<'_>, key: &str| -> (bool, Option<String>) {
        let Some(text) = spec.string(key) else {
            return (false, None);
        };
        let is_zero = duration::to_ferrolb(&text)
            .ok()
            .and_then(|d| duration::value(&d))
            .is_some_and(|d| d.is_zero());
        if v1beta1 && is_zero {
            spec.note(key, Note::V1beta1ZeroTimerIsUnset);
            return (false, None);
        }
        (true, carried_duration(spec, key, &text))
    };
    let (hold_given, hold) = read(spec, "holdTime");
    let (_, keepalive) = read(spec, "keepaliveTime");
    let hold = match (hold, &keepalive) {
        (Some(h), _) => {
            if duration::value(&h).is_some_and(|d| d.is_zero()) {
                spec.note("holdTime", Note::ZeroHoldTimeKept);
            }
            h
        }
        (None, _) if hold_given => ferrolb_default_hold_time(), // invalid, already a problem
        (None, Some(ka)) => match duration::value(ka) {
            Some(k) => {
                let h = duration::render_std(k * 3);
                spec.note(
                    "holdTime",
                    Note::HoldTimeFromKeepalive {
                        hold_time: h.clone(),
                    },
                );
                h
            }
            None => ferrolb_default_hold_time(),
        },
        (None, None) => {
            let h = ferrolb_default_hold_time();
            spec.note(
                "holdTime",
                Note::HoldTimeDefault {
                    hold_time: h.clone(),
                },
            );
            h
        }
    };
    (hold, keepalive)
}

/// A duration carried over in FerroLB's syntax; a problem (and `None`) when it cannot be.
fn carried_duration(spec: &mut Fields<'_>, key: &str, text: &str) -> Option<String> {
    match duration::to_ferrolb(text) {
        Ok(d) => {
            if d != text {
                spec.note(
                    key,
                    Note::DurationRewritten {
                        from: text.into(),
                        to: d.clone(),
                    },
                );
            }
            Some(d)
        }
        Err(e) => {
            let path = spec.path_of(key);
            spec.problem(duration_problem(path, text, e));
            None
        }
    }
}

fn duration_problem(path: String, text: &str, e: DurationError) -> Problem {
    Problem::Refused {
        path,
        value: text.into(),
        message: e.message().into(),
    }
}

/// FerroLB's default hold time, as its type defaults it (so the value is not restated here).
fn ferrolb_default_hold_time() -> String {
    serde_json::from_value::<BGPPeerSpec>(json!({"myASN": 1, "peerAddress": "192.0.2.1"}))
        .map(|s| s.hold_time)
        .expect("a BGPPeerSpec with its required fields deserializes")
}
