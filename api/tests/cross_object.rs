//! Rules that span objects: each with a configuration that passes and one that fails with the
//! message a user would read in the condition or Event.

use std::collections::BTreeSet;

use ferrolb_api::v1beta1::*;
use ferrolb_api::validate::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn meta(name: &str, created_s: i64) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ferrolb-system".into()),
        creation_timestamp: Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created_s).unwrap(),
        )),
        ..Default::default()
    }
}

fn pool(name: &str, created_s: i64, addresses: &[&str]) -> IPAddressPool {
    IPAddressPool {
        metadata: meta(name, created_s),
        spec: IPAddressPoolSpec {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            service_allocation: None,
            ip_mode: None,
        },
        status: None,
    }
}

fn bgp_adv(name: &str, spec: BGPAdvertisementSpec) -> BGPAdvertisement {
    BGPAdvertisement {
        metadata: meta(name, 0),
        spec,
        status: None,
    }
}

#[test]
fn disjoint_pools_are_all_ready() {
    let v = check_pools(&[
        pool("a", 1, &["10.0.0.0/24"]),
        pool("b", 2, &["10.0.1.0/24", "fd00::/64"]),
    ]);
    assert!(
        v.values().all(|v| matches!(v, PoolVerdict::Ready(_))),
        "{v:?}"
    );
}

#[test]
fn of_two_overlapping_pools_the_older_one_wins() {
    let v = check_pools(&[
        pool("new", 20, &["10.0.0.128/25"]),
        pool("old", 10, &["10.0.0.0/24"]),
    ]);
    assert!(matches!(v["old"], PoolVerdict::Ready(_)));
    let PoolVerdict::NotReady(err) = &v["new"] else {
        panic!("{v:?}")
    };
    assert_eq!(err.reason(), "Overlap");
    assert_eq!(
        err.to_string(),
        "pool `new` overlaps pool `old` (10.0.0.128-10.0.0.255); `new` is ignored until the overlap is removed"
    );
}

#[test]
fn overlapping_pools_created_in_the_same_second_are_ordered_by_name() {
    let v = check_pools(&[
        pool("b", 5, &["10.0.0.0/24"]),
        pool("a", 5, &["10.0.0.7-10.0.0.9"]),
    ]);
    assert!(matches!(v["a"], PoolVerdict::Ready(_)));
    assert!(matches!(
        v["b"],
        PoolVerdict::NotReady(ConfigError::PoolOverlap { .. })
    ));
}

#[test]
fn a_reversed_ipv6_range_makes_the_pool_invalid() {
    let v = check_pools(&[pool("p", 1, &["fd00::9-fd00::1"])]);
    let PoolVerdict::NotReady(err) = &v["p"] else {
        panic!()
    };
    assert_eq!(err.reason(), "InvalidAddresses");
    assert!(
        err.to_string().contains("the start is after the end"),
        "{err}"
    );
}

#[test]
fn entries_of_one_pool_may_not_overlap_each_other() {
    let v = check_pools(&[pool("p", 1, &["10.0.0.0/24", "10.0.0.5-10.0.0.6"])]);
    assert!(
        matches!(
            v["p"],
            PoolVerdict::NotReady(ConfigError::SelfOverlap { .. })
        ),
        "{v:?}"
    );
}

#[test]
fn an_invalid_pool_does_not_block_a_newer_pool_with_the_same_addresses() {
    let v = check_pools(&[
        pool("bad", 1, &["10.0.0.0/24", "bogus"]),
        pool("good", 2, &["10.0.0.0/24"]),
    ]);
    assert!(matches!(v["good"], PoolVerdict::Ready(_)));
}

#[test]
fn l2_advertisement_naming_a_missing_pool_is_reported() {
    let pools = [pool("blue", 1, &["10.0.0.0/24"])];
    let ok = L2Advertisement {
        metadata: meta("l2", 0),
        spec: L2AdvertisementSpec {
            ip_address_pools: vec!["blue".into()],
            ..Default::default()
        },
        status: None,
    };
    assert!(check_l2_advertisement(&ok, &pools).is_empty());
    let bad = L2Advertisement {
        metadata: meta("l2", 0),
        spec: L2AdvertisementSpec {
            ip_address_pools: vec!["red".into()],
            ..Default::default()
        },
        status: None,
    };
    let errs = check_l2_advertisement(&bad, &pools);
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs[0].to_string(),
        "L2Advertisement `l2` names pool `red`, which does not exist; create it or fix the name in spec.ipAddressPools"
    );
}

#[test]
fn bgp_advertisement_references_to_peers_and_aliases_must_resolve() {
    let pools = [pool("blue", 1, &["10.0.0.0/24"])];
    let peers = [BGPPeer {
        metadata: meta("tor", 0),
        spec: BGPPeerSpec {
            my_asn: 64512,
            peer_asn: Some(64513),
            peer_address: "10.99.0.1".into(),
            peer_port: 179,
            hold_time: "90s".into(),
            ..Default::default()
        },
        status: None,
    }];
    let communities = [Community {
        metadata: meta("c", 0),
        spec: CommunitySpec {
            communities: vec![CommunityAlias {
                name: "no-export".into(),
                value: "65535:65281".into(),
            }],
        },
        status: None,
    }];
    let ok = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            peers: vec!["tor".into()],
            communities: vec!["no-export".into(), "65000:1".into()],
            ..Default::default()
        },
    );
    assert!(check_bgp_advertisement(&ok, &pools, &peers, &communities).is_empty());
    let bad = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            peers: vec!["spine".into()],
            communities: vec!["gold".into()],
            ..Default::default()
        },
    );
    let errs = check_bgp_advertisement(&bad, &pools, &peers, &communities);
    let reasons: Vec<_> = errs.iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, ["UnknownPeer", "UnknownCommunity"], "{errs:?}");
}

#[test]
fn aggregation_shorter_than_a_pool_prefix_is_refused_with_the_minimum() {
    let pools = [pool("blue", 1, &["10.0.0.0/24", "fd00:99::/120"])];
    let ok = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            aggregation_length: Some(24),
            aggregation_length_v6: Some(120),
            ..Default::default()
        },
    );
    assert!(check_bgp_advertisement(&ok, &pools, &[], &[]).is_empty());
    let bad = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            aggregation_length: Some(16),
            ..Default::default()
        },
    );
    let errs = check_bgp_advertisement(&bad, &pools, &[], &[]);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].to_string().contains("use /24 or longer"),
        "{}",
        errs[0]
    );
}

#[test]
fn aggregation_is_checked_against_the_cidrs_that_make_up_a_range() {
    // 10.0.0.0-10.0.0.5 is 10.0.0.0/30 + 10.0.0.4/31: /30 is the shortest allowed.
    let pools = [pool("r", 1, &["10.0.0.0-10.0.0.5"])];
    let ok = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            aggregation_length: Some(30),
            ..Default::default()
        },
    );
    assert!(check_bgp_advertisement(&ok, &pools, &[], &[]).is_empty());
    let bad = bgp_adv(
        "a",
        BGPAdvertisementSpec {
            aggregation_length: Some(29),
            ..Default::default()
        },
    );
    assert_eq!(check_bgp_advertisement(&bad, &pools, &[], &[]).len(), 1);
}

/// A peer `tor` with `spec`'s fields; `holdTime` is the schema's default (90s) when `spec`
/// leaves it empty.
fn peer(spec: BGPPeerSpec) -> BGPPeer {
    let hold_time = if spec.hold_time.is_empty() {
        "90s".into()
    } else {
        spec.hold_time.clone()
    };
    BGPPeer {
        metadata: meta("tor", 0),
        spec: BGPPeerSpec {
            my_asn: 64512,
            peer_asn: Some(64513),
            peer_address: "10.0.0.1".into(),
            hold_time,
            ..spec
        },
        status: None,
    }
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_peer_password_secret_must_exist() {
    let p = peer(BGPPeerSpec {
        password_secret: Some(SecretRef { name: "md5".into() }),
        ..Default::default()
    });
    assert!(check_bgp_peer(&p, &names(&["md5"]), &BTreeSet::new()).is_empty());
    let errs = check_bgp_peer(&p, &BTreeSet::new(), &BTreeSet::new());
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].reason(), "MissingSecret");
    assert!(errs[0].to_string().contains("`md5`"), "{}", errs[0]);
}

#[test]
fn a_peer_naming_a_missing_bfd_profile_is_not_ready_and_says_it_runs_without_bfd() {
    let p = peer(BGPPeerSpec {
        bfd_profile: Some("fast".into()),
        ..Default::default()
    });
    assert!(check_bgp_peer(&p, &BTreeSet::new(), &names(&["fast"])).is_empty());
    let errs = check_bgp_peer(&p, &BTreeSet::new(), &names(&["slow"]));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].reason(), "BFDProfileNotFound");
    let message = errs[0].to_string();
    assert!(message.contains("`fast`"), "{message}");
    assert!(message.contains("runs without BFD"), "{message}");
    assert!(message.contains("spec.bfdProfile"), "{message}");
}

#[test]
fn a_peer_without_a_bfd_profile_needs_none() {
    assert!(
        check_bgp_peer(
            &peer(BGPPeerSpec::default()),
            &BTreeSet::new(),
            &BTreeSet::new()
        )
        .is_empty()
    );
}

#[test]
fn a_peer_timer_too_long_to_represent_is_reported_not_a_panic() {
    let huge = "99999999999999999999s";
    for (field, spec) in [
        (
            "holdTime",
            BGPPeerSpec {
                hold_time: huge.into(),
                ..Default::default()
            },
        ),
        (
            "keepaliveTime",
            BGPPeerSpec {
                keepalive_time: Some(huge.into()),
                ..Default::default()
            },
        ),
        (
            "connectTime",
            BGPPeerSpec {
                connect_time: Some(huge.into()),
                ..Default::default()
            },
        ),
    ] {
        let p = peer(spec);
        let errs = check_bgp_peer(&p, &BTreeSet::new(), &BTreeSet::new());
        assert_eq!(errs.len(), 1, "{field}: {errs:?}");
        assert_eq!(errs[0].reason(), "InvalidDuration", "{field}");
        let message = errs[0].to_string();
        assert!(
            message.contains(field) && message.contains(huge),
            "{message}"
        );
        assert!(message.contains("90s"), "says what to write: {message}");
    }
}

#[test]
fn a_peer_timer_that_is_not_a_duration_is_reported() {
    let p = peer(BGPPeerSpec {
        keepalive_time: Some("thirty".into()),
        connect_time: Some("1m30s".into()),
        ..Default::default()
    });
    let errs = check_bgp_peer(&p, &BTreeSet::new(), &BTreeSet::new());
    assert_eq!(
        errs,
        vec![ConfigError::InvalidDuration {
            peer: "tor".into(),
            field: "keepaliveTime",
            value: "thirty".into(),
        }]
    );
}

#[test]
fn a_peer_with_every_error_reports_them_all_the_one_that_closes_the_session_first() {
    let p = peer(BGPPeerSpec {
        hold_time: "1e400s".into(),
        password_secret: Some(SecretRef { name: "md5".into() }),
        bfd_profile: Some("fast".into()),
        ..Default::default()
    });
    let reasons: Vec<&str> = check_bgp_peer(&p, &BTreeSet::new(), &BTreeSet::new())
        .iter()
        .map(ConfigError::reason)
        .collect();
    assert_eq!(
        reasons,
        ["InvalidDuration", "MissingSecret", "BFDProfileNotFound"]
    );
}

#[test]
fn a_community_alias_defined_twice_differently_is_an_error() {
    let c = |v: &str| Community {
        metadata: meta("c", 0),
        spec: CommunitySpec {
            communities: vec![CommunityAlias {
                name: "gold".into(),
                value: v.into(),
            }],
        },
        status: None,
    };
    assert!(community_aliases(&[c("65000:1"), c("65000:1")]).is_ok());
    assert!(matches!(
        community_aliases(&[c("65000:1"), c("65000:2")]),
        Err(ConfigError::DuplicateCommunityAlias { .. })
    ));
}

#[test]
fn community_values_parse_standard_and_large_forms() {
    assert_eq!(
        CommunityValue::parse("65000:100"),
        Some(CommunityValue::Standard(65000, 100))
    );
    assert_eq!(
        CommunityValue::parse("large:64512:1:2"),
        Some(CommunityValue::Large(64512, 1, 2))
    );
    assert_eq!(CommunityValue::parse("65536:1"), None);
    assert_eq!(CommunityValue::parse("gold"), None);
    assert_eq!(
        CommunityValue::parse("no-export"),
        Some(CommunityValue::Standard(0xFFFF, 0xFF01))
    );
}
