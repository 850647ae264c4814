//! `preferredNodeSelectors` in the layer-2 plan: scores, how advertisements combine, and the
//! hold-down of a returning preferred node, over time.

use super::*;
use crate::l2::arrivals::Arrivals;
use ferrolb_api::validate::AddressRange;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const HOLD: Duration = Duration::from_secs(30);

fn selector(k: &str, v: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(k.to_string(), v.to_string())].into()),
        ..Default::default()
    }
}

fn prefer(weight: u32, zone: Option<&str>) -> (u32, LabelSelector) {
    let s = zone.map_or_else(LabelSelector::default, |z| selector("zone", z));
    (weight, s)
}

/// `n` Services of one address each in 10.99.0.0/24, endpoints on every node; nodes `node-x`
/// carry `zone: x`; one advertisement preferring `zone: a` with weight 50.
fn world(this: &str, n: u32) -> Snapshot {
    let services = (1..=n)
        .map(|i| ServiceInfo {
            key: ServiceKey::new("default", format!("s{i}")),
            ingress: vec![IpAddr::from([10, 99, 0, i as u8])],
            local_traffic_policy: false,
            endpoints: NODES
                .iter()
                .map(|node| EndpointInfo {
                    node_name: Some((*node).into()),
                    ready: Some(true),
                    serving: None,
                    terminating: None,
                    address_type: AddressType::Ipv4,
                })
                .collect(),
            labels: Default::default(),
        })
        .collect();
    Snapshot {
        services,
        nodes: NODES
            .iter()
            .map(|n| {
                let zone = n.trim_start_matches("node-");
                let labels = [
                    ("kubernetes.io/hostname".to_string(), n.to_string()),
                    ("zone".to_string(), zone.to_string()),
                ];
                let info = NodeInfo {
                    name: (*n).into(),
                    labels: labels.into(),
                    network_unavailable: false,
                    ..Default::default()
                };
                ((*n).to_string(), info)
            })
            .collect(),
        pools: vec![PoolInfo {
            name: "blue".into(),
            labels: BTreeMap::new(),
            ranges: vec![AddressRange::parse("10.99.0.0/24").unwrap()],
        }],
        l2_advertisements: vec![L2AdvertisementInfo {
            name: "prefer-a".into(),
            preferred: vec![prefer(50, Some("a"))],
            ..Default::default()
        }],
        live_speakers: NODES.iter().map(|n| n.to_string()).collect(),
        this_node: this.into(),
        ..Default::default()
    }
}

fn owners(plan: &L2Plan) -> BTreeMap<IpAddr, String> {
    plan.addresses
        .iter()
        .map(|(ip, a)| (*ip, a.owner.clone().unwrap()))
        .collect()
}

fn all_owned_by(plan: &L2Plan, node: &str) -> bool {
    plan.addresses
        .values()
        .all(|a| a.owner.as_deref() == Ok(node))
}

#[test]
fn the_preferred_node_owns_every_address_and_the_others_follow_by_hash() {
    let s = world("node-a", 100);
    let plan = plan_l2(&s);
    assert!(all_owned_by(&plan, "node-a"));
    for (ip, a) in &plan.addresses {
        let rest = crate::l2::election::ranking(*ip, ["node-b", "node-c"]);
        assert_eq!(&a.candidates[1..], rest.as_slice(), "{ip}");
    }
    assert_eq!(plan.owned.len(), 100);
}

#[test]
fn preferences_only_rank_nodes_the_advertisement_selects_and_add_up_across_advertisements() {
    let mut s = world("node-a", 50);
    s.l2_advertisements = vec![
        L2AdvertisementInfo {
            preferred: vec![prefer(10, Some("b"))],
            ..Default::default()
        },
        // node-b matches the preference, but this advertisement does not select it.
        L2AdvertisementInfo {
            node_selectors: vec![selector("kubernetes.io/hostname", "node-a")],
            preferred: vec![prefer(20, Some("b"))],
            ..Default::default()
        },
    ];
    assert!(all_owned_by(&plan_l2(&s), "node-b"), "node-b scores 10");
    s.l2_advertisements.push(L2AdvertisementInfo {
        preferred: vec![prefer(5, Some("c")), prefer(1, None)],
        ..Default::default()
    });
    // node-b 10 + 1, node-c 5 + 1: still node-b.
    assert!(all_owned_by(&plan_l2(&s), "node-b"));
    s.l2_advertisements.push(L2AdvertisementInfo {
        preferred: vec![prefer(6, Some("c"))],
        ..Default::default()
    });
    // node-c 5 + 1 + 6 = 12 beats node-b's 11.
    assert!(all_owned_by(&plan_l2(&s), "node-c"));
}

#[test]
fn a_preference_never_makes_an_ineligible_node_a_candidate() {
    let mut s = world("node-a", 10);
    for svc in &mut s.services {
        svc.local_traffic_policy = true;
        svc.endpoints
            .retain(|e| e.node_name.as_deref() == Some("node-c"));
    }
    assert!(all_owned_by(&plan_l2(&s), "node-c"));
    let mut s = world("node-a", 10);
    s.l2_advertisements[0].node_selectors = vec![selector("zone", "b")];
    let plan = plan_l2(&s);
    assert!(all_owned_by(&plan, "node-b"));
    assert_eq!(
        plan.addresses
            .values()
            .next()
            .unwrap()
            .not_eligible
            .get("node-a"),
        Some(&NotEligible::NodeSelectorMismatch)
    );
}

#[test]
fn a_returning_preferred_node_gets_its_addresses_back_only_after_the_hold_down_even_when_it_flaps()
{
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let base = world("node-b", 100);
    let mut arrivals = Arrivals::new("node-b", HOLD);
    let mut plan_at = |secs: u64, live: &[&str]| {
        let live: BTreeSet<String> = live.iter().map(|n| n.to_string()).collect();
        arrivals.observe(at(secs), &live);
        plan_l2(&Snapshot {
            live_speakers: live,
            hold_down: arrivals.hold_down(at(secs), &BTreeMap::new()),
            ..base.clone()
        })
    };
    let all = ["node-a", "node-b", "node-c"];
    let without_a = ["node-b", "node-c"];
    assert!(all_owned_by(&plan_at(0, &all), "node-a"));
    let away = plan_at(10, &without_a);
    let away_owners = owners(&away);
    assert!(away_owners.values().all(|o| o != "node-a"));
    // This speaker itself is held from its join (it has no preference: that changes nothing).
    assert_eq!(away.recompute_at, Some(at(30)));
    // node-a is back: held until 50 s; nothing moves to it.
    let back = plan_at(20, &all);
    assert_eq!(owners(&back), away_owners);
    assert_eq!(back.recompute_at, Some(at(30)));
    // It fails again within its hold-down, and returns: nothing moved, nothing moves.
    assert_eq!(owners(&plan_at(35, &without_a)), away_owners);
    assert_eq!(owners(&plan_at(40, &all)), away_owners);
    // The first hold-down's end is not the one that counts now.
    let still = plan_at(50, &all);
    assert_eq!(owners(&still), away_owners);
    assert_eq!(still.recompute_at, Some(at(70)));
    assert_eq!(owners(&plan_at(69, &all)), away_owners);
    // Live for 30 s: it takes every address back, at once.
    let settled = plan_at(70, &all);
    assert!(all_owned_by(&settled, "node-a"));
    assert_eq!(settled.recompute_at, None);
}

#[test]
fn a_held_preferred_node_still_answers_when_no_other_node_can() {
    let t0 = Instant::now();
    let mut s = world("node-a", 5);
    s.live_speakers = ["node-a".to_string()].into();
    s.hold_down = HoldDown {
        now: Some(t0),
        live_since: [("node-a".to_string(), t0)].into(),
        duration: HOLD,
        ..HoldDown::default()
    };
    assert!(all_owned_by(&plan_l2(&s), "node-a"));
}

#[test]
fn a_returning_node_without_preference_takes_its_share_at_once() {
    let t0 = Instant::now();
    let mut s = world("node-a", 100);
    s.l2_advertisements[0].preferred.clear();
    let before = owners(&plan_l2(&s));
    s.hold_down = HoldDown {
        now: Some(t0),
        live_since: [("node-c".to_string(), t0)].into(),
        duration: HOLD,
        ..HoldDown::default()
    };
    assert_eq!(owners(&plan_l2(&s)), before, "node-c is not held");
}

#[test]
fn a_node_on_standby_keeps_only_the_addresses_no_other_live_node_may_hold() {
    let mut s = world("node-a", 20);
    s.l2_advertisements[0].preferred.clear();
    s.hold_down.standby = ["node-a".to_string()].into();
    let plan = plan_l2(&s);
    assert!(
        owners(&plan).values().all(|o| o != "node-a"),
        "node-a on standby owns nothing another node can hold"
    );
    s.live_speakers = ["node-a".to_string()].into();
    assert!(
        all_owned_by(&plan_l2(&s), "node-a"),
        "alone, it holds them all"
    );
}
