//! From the kept `BGPPeer`, `BFDProfile` and Secret objects to the BGP sessions'
//! configuration ([`crate::bgp::PeerConfig`]), with why a peer cannot be configured. Pure: no
//! I/O, no clock.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ferrolb_api::v1beta1::{BFDProfile, BGPPeer, BgpRole};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::bgp::config::{BfdSettings, PeerConfig, Role};

use ferrolb_api::duration::parse_duration;

/// Why a `BGPPeer` cannot be configured on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerConfigError {
    /// An address field does not parse (the schema normally refuses this).
    #[error("BGPPeer `{peer}`: {field} `{value}` is not an IP address")]
    BadAddress {
        /// The peer.
        peer: String,
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// A duration field does not parse.
    #[error("BGPPeer `{peer}`: {field} `{value}` is not a duration such as 90s")]
    BadDuration {
        /// The peer.
        peer: String,
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// The password Secret or its `password` key is missing.
    #[error(
        "BGPPeer `{peer}`: Secret `{secret}` with key `password` not found in the install namespace"
    )]
    MissingSecret {
        /// The peer.
        peer: String,
        /// The Secret.
        secret: String,
    },
    /// `vrf` is not a Linux device name (the schema normally refuses this).
    #[error("BGPPeer `{peer}`: vrf {source}")]
    BadVrf {
        /// The peer.
        peer: String,
        /// What is wrong with the name.
        source: crate::netdev::BadDeviceName,
    },
    /// Neither `peerASN` nor `dynamicASN` is set (the schema normally refuses this).
    #[error("BGPPeer `{peer}`: set peerASN or dynamicASN")]
    NoPeerAsn {
        /// The peer.
        peer: String,
    },
    /// `bfdProfile` names no `BFDProfile`: the session runs without BFD.
    #[error(
        "BGPPeer `{peer}`: BFDProfile `{profile}` not found in the install namespace; the session runs without BFD"
    )]
    MissingBfdProfile {
        /// The peer.
        peer: String,
        /// The profile.
        profile: String,
    },
}

impl PeerConfigError {
    /// The `BGPPeer` concerned.
    pub fn peer(&self) -> &str {
        match self {
            PeerConfigError::BadAddress { peer, .. }
            | PeerConfigError::BadDuration { peer, .. }
            | PeerConfigError::MissingSecret { peer, .. }
            | PeerConfigError::BadVrf { peer, .. }
            | PeerConfigError::NoPeerAsn { peer }
            | PeerConfigError::MissingBfdProfile { peer, .. } => peer,
        }
    }

    /// Whether the peer is still configured (only part of its configuration is left out).
    pub fn keeps_the_peer(&self) -> bool {
        matches!(self, PeerConfigError::MissingBfdProfile { .. })
    }
}

/// The BFD settings of a `BFDProfile` (MetalLB's defaults where a field is unset).
pub fn bfd_settings(profile: &BFDProfile) -> BfdSettings {
    let d = BfdSettings::default();
    let ms =
        |v: Option<u32>, default: Duration| v.map_or(default, |v| Duration::from_millis(v.into()));
    let small =
        |v: Option<u32>, default: u8| v.map_or(default, |v| u8::try_from(v).unwrap_or(u8::MAX));
    let s = &profile.spec;
    BfdSettings {
        receive_interval: ms(s.receive_interval, d.receive_interval),
        transmit_interval: ms(s.transmit_interval, d.transmit_interval),
        detect_multiplier: small(s.detect_multiplier, d.detect_multiplier),
        passive: s.passive_mode,
        minimum_ttl: small(s.minimum_ttl, d.minimum_ttl),
    }
}

/// The sessions this node opens: every peer whose `nodeSelectors` select this node (`labels`).
pub fn peer_configs(
    peers: &[BGPPeer],
    labels: &BTreeMap<String, String>,
    secrets: &[Secret],
    bfd_profiles: &[BFDProfile],
) -> (Vec<PeerConfig>, Vec<PeerConfigError>) {
    let mut configs = Vec::new();
    let mut errors = Vec::new();
    for peer in peers {
        if !ferrolb_api::selector::any_matches(&peer.spec.node_selectors, labels) {
            continue;
        }
        match peer_config(peer, secrets) {
            Ok(mut c) => {
                if let Some(name) = &peer.spec.bfd_profile {
                    match bfd_profiles.iter().find(|p| p.name_any() == *name) {
                        Some(profile) => c.bfd = Some(bfd_settings(profile)),
                        None => errors.push(PeerConfigError::MissingBfdProfile {
                            peer: peer.name_any(),
                            profile: name.clone(),
                        }),
                    }
                }
                configs.push(c)
            }
            Err(e) => errors.push(e),
        }
    }
    configs.sort_by(|a, b| a.id.cmp(&b.id));
    (configs, errors)
}

fn peer_config(peer: &BGPPeer, secrets: &[Secret]) -> Result<PeerConfig, PeerConfigError> {
    let name = peer.name_any();
    let spec = &peer.spec;
    let addr = |field: &'static str, value: &str| -> Result<IpAddr, PeerConfigError> {
        value.parse().map_err(|_| PeerConfigError::BadAddress {
            peer: name.clone(),
            field,
            value: value.into(),
        })
    };
    let dur = |field: &'static str, value: &str| -> Result<Duration, PeerConfigError> {
        parse_duration(value).ok_or_else(|| PeerConfigError::BadDuration {
            peer: name.clone(),
            field,
            value: value.into(),
        })
    };
    use ferrolb_api::v1beta1::DynamicAsn;
    // The schema allows exactly one of the two; a peer AS given wins. `internal` is the AS
    // the session presents (`localASN` when set).
    let peer_asn = match (spec.peer_asn, spec.dynamic_asn) {
        (Some(asn), _) => asn,
        (None, Some(DynamicAsn::Internal | DynamicAsn::External)) => spec.local_as(),
        (None, None) => return Err(PeerConfigError::NoPeerAsn { peer: name }),
    };
    // The schema allows exactly one of peerAddress and interface; an interface given wins.
    let peer_address = match &spec.interface {
        Some(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        None => addr("peerAddress", &spec.peer_address)?,
    };
    let mut c = PeerConfig::new(&name, spec.my_asn, peer_asn, peer_address);
    c.interface = spec.interface.clone();
    c.peer_asn_external = spec.peer_asn.is_none() && spec.dynamic_asn == Some(DynamicAsn::External);
    c.local_asn = spec.local_asn.filter(|a| *a != spec.my_asn);
    c.dual_stack = spec.dual_stack();
    c.peer_port = spec.peer_port;
    c.source_address = spec
        .source_address
        .as_deref()
        .map(|s| addr("sourceAddress", s))
        .transpose()?;
    c.router_id = match spec
        .router_id
        .as_deref()
        .map(|s| addr("routerID", s))
        .transpose()?
    {
        Some(IpAddr::V4(v4)) => Some(v4),
        Some(IpAddr::V6(_)) => {
            return Err(PeerConfigError::BadAddress {
                peer: name,
                field: "routerID",
                value: spec.router_id.clone().unwrap_or_default(),
            });
        }
        None => None,
    };
    c.vrf = spec
        .vrf
        .as_deref()
        .map(crate::netdev::DeviceName::new)
        .transpose()
        .map_err(|source| PeerConfigError::BadVrf {
            peer: name.clone(),
            source,
        })?;
    c.hold_time = dur("holdTime", &spec.hold_time)?;
    c.keepalive_time = spec
        .keepalive_time
        .as_deref()
        .map(|s| dur("keepaliveTime", s))
        .transpose()?;
    if let Some(connect) = spec.connect_time.as_deref() {
        c.connect_retry = dur("connectTime", connect)?;
    }
    c.ebgp_multihop = spec.ebgp_multi_hop;
    c.graceful_restart = spec.enable_graceful_restart;
    c.role = spec.role.map(|r| match r {
        BgpRole::Provider => Role::Provider,
        BgpRole::Customer => Role::Customer,
        BgpRole::Peer => Role::Peer,
        BgpRole::RsServer => Role::RsServer,
        BgpRole::RsClient => Role::RsClient,
    });
    c.strict_role = spec.strict_role;
    c.add_path = spec.announce_all_nodes;
    c.password = match (&spec.password, &spec.password_secret) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(secret)) => Some(secret_value(secrets, &secret.name, "password").ok_or_else(
            || PeerConfigError::MissingSecret {
                peer: name.clone(),
                secret: secret.name.clone(),
            },
        )?),
        (None, None) => None,
    };
    Ok(c)
}

/// The UTF-8 value of `key` in Secret `name` (from `data`, or `stringData` if a client left it).
pub fn secret_value(secrets: &[Secret], name: &str, key: &str) -> Option<String> {
    String::from_utf8(secret_bytes(secrets, name, key)?).ok()
}

/// The raw bytes of `key` in Secret `name` (from `data`, or `stringData` if a client left it).
/// Keys are bytes: the chart generates the gossip key with 32 random bytes, rarely valid UTF-8.
pub fn secret_bytes(secrets: &[Secret], name: &str, key: &str) -> Option<Vec<u8>> {
    let secret = secrets.iter().find(|s| s.name_any() == name)?;
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.0.clone());
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.clone().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(bfd_profile: Option<&str>) -> BGPPeer {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tor", "namespace": "ferrolb-system"},
            "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "10.0.0.1",
                     "bfdProfile": bfd_profile},
        }))
        .unwrap()
    }

    #[test]
    fn a_peer_naming_a_bfd_profile_runs_bfd_with_its_values_and_metallbs_defaults() {
        let profile: BFDProfile = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "fast", "namespace": "ferrolb-system"},
            "spec": {"receiveInterval": 100, "detectMultiplier": 5, "passiveMode": true},
        }))
        .unwrap();
        let (configs, errors) =
            peer_configs(&[peer(Some("fast"))], &BTreeMap::new(), &[], &[profile]);
        assert!(errors.is_empty(), "{errors:?}");
        let bfd = configs[0].bfd.expect("BFD configured");
        assert_eq!(bfd.receive_interval, Duration::from_millis(100));
        assert_eq!(bfd.transmit_interval, Duration::from_millis(300));
        assert_eq!(bfd.detect_multiplier, 5);
        assert!(bfd.passive);
        assert_eq!(bfd.minimum_ttl, 254);
        let (configs, _) = peer_configs(&[peer(None)], &BTreeMap::new(), &[], &[]);
        assert_eq!(configs[0].bfd, None);
    }

    fn peer_with(spec: serde_json::Value) -> BGPPeer {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tor", "namespace": "ferrolb-system"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn dynamic_asn_internal_is_our_own_as_and_external_any_other() {
        let labels = BTreeMap::new();
        let internal = peer_with(serde_json::json!({"myASN": 64512, "dynamicASN": "internal",
                                                    "peerAddress": "10.0.0.1"}));
        let (c, errors) = peer_configs(&[internal], &labels, &[], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((c[0].peer_asn, c[0].peer_asn_external), (64512, false));
        assert!(c[0].is_ibgp());
        let external = peer_with(serde_json::json!({"myASN": 64512, "dynamicASN": "external",
                                                    "peerAddress": "10.0.0.1"}));
        let (c, _) = peer_configs(&[external], &labels, &[], &[]);
        assert!(c[0].peer_asn_external && !c[0].is_ibgp());
    }

    #[test]
    fn a_peer_vrf_becomes_the_device_its_sockets_are_bound_to() {
        let labels = BTreeMap::new();
        let red = peer_with(serde_json::json!({"myASN": 64512, "peerASN": 64513,
                                               "peerAddress": "10.0.0.1", "vrf": "red"}));
        let (c, errors) = peer_configs(&[red], &labels, &[], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c[0].vrf.map(|d| d.to_string()).as_deref(), Some("red"));
        let (c, _) = peer_configs(&[peer(None)], &labels, &[], &[]);
        assert_eq!(c[0].vrf, None, "the default VRF");
        let bad = peer_with(serde_json::json!({"myASN": 64512, "peerASN": 64513,
                                               "peerAddress": "10.0.0.1", "vrf": "a/b"}));
        let (c, errors) = peer_configs(&[bad], &labels, &[], &[]);
        assert!(c.is_empty());
        assert!(
            matches!(&errors[..], [PeerConfigError::BadVrf { .. }]),
            "{errors:?}"
        );
        assert!(!errors[0].keeps_the_peer());
    }

    #[test]
    fn a_peer_given_by_interface_is_an_unnumbered_peer_on_that_interface() {
        let unnumbered = peer_with(serde_json::json!({"myASN": 64512, "dynamicASN": "external",
                                                      "interface": "eth1"}));
        let (c, errors) = peer_configs(&[unnumbered], &BTreeMap::new(), &[], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c[0].interface.as_deref(), Some("eth1"));
        assert_eq!(c[0], {
            let mut want = PeerConfig::unnumbered("tor", 64512, 64512, "eth1");
            want.peer_asn_external = true;
            want
        });
    }

    #[test]
    fn a_local_asn_is_the_as_presented_and_dynamic_internal_means_that_as() {
        let labels = BTreeMap::new();
        let fixed = peer_with(serde_json::json!({"myASN": 64512, "localASN": 64600,
                                                 "peerASN": 64513, "peerAddress": "10.0.0.1"}));
        let (c, errors) = peer_configs(&[fixed], &labels, &[], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((c[0].my_asn, c[0].local_asn), (64512, Some(64600)));
        assert_eq!(c[0].local_as(), 64600);
        let internal = peer_with(serde_json::json!({"myASN": 64512, "localASN": 64600,
                                                    "dynamicASN": "internal",
                                                    "peerAddress": "10.0.0.1"}));
        let (c, _) = peer_configs(&[internal], &labels, &[], &[]);
        assert_eq!((c[0].peer_asn, c[0].peer_asn_external), (64600, false));
        assert!(c[0].is_ibgp());
        let same = peer_with(serde_json::json!({"myASN": 64512, "localASN": 64512,
                                                "peerASN": 64513, "peerAddress": "10.0.0.1"}));
        let (c, _) = peer_configs(&[same], &labels, &[], &[]);
        assert_eq!(
            c[0].local_asn, None,
            "localASN equal to myASN changes nothing"
        );
    }

    #[test]
    fn families_follow_dual_stack_address_family_then_disable_mp_and_default_to_both() {
        let labels = BTreeMap::new();
        for (extra, dual) in [
            (serde_json::json!({}), true),
            (serde_json::json!({"dualStackAddressFamily": true}), true),
            (serde_json::json!({"dualStackAddressFamily": false}), false),
            (serde_json::json!({"disableMP": true}), false),
            (serde_json::json!({"disableMP": false}), true),
            (
                serde_json::json!({"disableMP": false, "dualStackAddressFamily": false}),
                false,
            ),
            (
                serde_json::json!({"disableMP": true, "dualStackAddressFamily": false}),
                false,
            ),
        ] {
            let mut spec = serde_json::json!({"myASN": 64512, "peerASN": 64513,
                                               "peerAddress": "10.0.0.1"});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let (c, _) = peer_configs(&[peer_with(spec)], &labels, &[], &[]);
            assert_eq!(c[0].dual_stack, dual, "{extra}");
        }
    }

    #[test]
    fn a_peer_with_neither_peer_asn_nor_dynamic_asn_is_not_configured() {
        let none = peer_with(serde_json::json!({"myASN": 64512, "peerAddress": "10.0.0.1"}));
        let (c, errors) = peer_configs(&[none], &BTreeMap::new(), &[], &[]);
        assert!(c.is_empty());
        assert_eq!(errors, [PeerConfigError::NoPeerAsn { peer: "tor".into() }]);
    }

    #[test]
    fn a_missing_bfd_profile_is_reported_and_the_session_runs_without_bfd() {
        let (configs, errors) = peer_configs(&[peer(Some("gone"))], &BTreeMap::new(), &[], &[]);
        assert_eq!(configs.len(), 1, "the session is kept");
        assert_eq!(configs[0].bfd, None);
        assert_eq!(
            errors,
            vec![PeerConfigError::MissingBfdProfile {
                peer: "tor".into(),
                profile: "gone".into()
            }]
        );
        assert!(errors[0].keeps_the_peer());
        assert!(errors[0].to_string().contains("without BFD"));
    }

    #[test]
    fn a_binary_secret_key_is_read_as_bytes() {
        let key: Vec<u8> = (0u8..32).map(|b| 0xf8 | (b & 7)).collect(); // never UTF-8
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ferrolb-memberlist"},
            "data": {"secretkey": k8s_openapi::ByteString(key.clone())},
        }))
        .unwrap();
        let secrets = [secret];
        assert_eq!(
            secret_bytes(&secrets, "ferrolb-memberlist", "secretkey"),
            Some(key)
        );
        assert_eq!(
            secret_value(&secrets, "ferrolb-memberlist", "secretkey"),
            None
        );
    }
}
