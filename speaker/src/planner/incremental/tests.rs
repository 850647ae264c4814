//! The trackers against the reference planners on random change sequences: after every change
//! the kept plan equals the plan computed from the whole cluster.

use super::*;
use crate::cluster::fixtures::*;
use crate::cluster::{Scope, Update};
use crate::planner::bgp::plan_bgp;
use crate::planner::plan_l2;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

const NODES: [&str; 6] = ["node-a", "node-b", "node-c", "node-d", "node-e", "node-f"];

struct World {
    cluster: Cluster,
    l2: L2Tracker,
    bgp: BgpTracker,
    live: BTreeSet<String>,
    unable: Unable,
    hold_down: HoldDown,
}

impl World {
    fn new(me: &str) -> Self {
        let mut cluster = Cluster::new(Scope {
            this_node: me.into(),
            class: ferrolb_api::names::DEFAULT_LOAD_BALANCER_CLASS.into(),
            ignore_unclassed: false,
        });
        for n in NODES {
            cluster.node(Update::Apply(node(n, &[("rack", "1")])));
        }
        cluster.pool(Update::Apply(pool("v4", &["10.0.0.0/28"])));
        cluster.pool(Update::Apply(pool("v6", &["fd00::/124"])));
        cluster.l2_advertisement(Update::Apply(l2_advertisement("all", &[], None)));
        // Services labelled tier=internal are also answered for on rack 2, on eth1.
        cluster.l2_advertisement(Update::Apply(l2_advertisement_for(
            "internal",
            Some(("rack", "2")),
            &[("tier", "internal")],
            &["eth1"],
        )));
        cluster.bgp_advertisement(Update::Apply(bgp_advertisement("all", None)));
        cluster.bgp_advertisement(Update::Apply(selective_bgp_advertisement(
            "public",
            None,
            &[("tier", "public")],
        )));
        cluster.peer(Update::Apply(peer("tor", "192.0.2.1")));
        cluster.peer(Update::Apply(peer_for_all_nodes("rr", "192.0.2.2")));
        World {
            cluster,
            l2: L2Tracker::new(),
            bgp: BgpTracker::new(),
            live: NODES.iter().map(|n| n.to_string()).collect(),
            unable: Unable::new(),
            hold_down: HoldDown::default(),
        }
    }

    fn step(&mut self) -> (L2Update, BgpUpdate) {
        let changes = self.cluster.take_changes();
        let l2 = self.l2.update(
            &self.cluster,
            &changes,
            &self.live,
            &self.unable,
            &self.hold_down,
        );
        let bgp = self.bgp.update(&self.cluster, &changes);
        (l2, bgp)
    }

    fn check(&self, context: &str) {
        let mut snap = self
            .cluster
            .snapshot(self.live.clone(), self.unable.clone());
        snap.hold_down = self.hold_down.clone();
        let want = plan_l2(&snap);
        assert_eq!(self.l2.owned(), &want.owned, "{context}: owned addresses");
        for (ip, plan) in &want.addresses {
            let got = self
                .l2
                .decision(*ip)
                .unwrap_or_else(|| panic!("{context}: {ip} undecided"));
            assert_eq!(got.owner, plan.owner, "{context}: owner of {ip}");
            assert_eq!(got.services, plan.services, "{context}: services of {ip}");
            assert_eq!(
                self.l2.not_selected(*ip),
                plan.not_selected,
                "{context}: Services not selected at {ip}"
            );
        }
        assert_eq!(
            self.l2.decisions().count(),
            want.addresses.len(),
            "{context}: addresses"
        );
        let config = self.cluster.config();
        let want = plan_bgp(&snap, &config.bgp, &config.peers);
        for (peer, ads) in &want.per_peer {
            assert_eq!(
                &self.bgp.advertisements(peer),
                ads,
                "{context}: routes to {peer}"
            );
        }
        for (key, peers) in &want.per_service {
            assert_eq!(
                self.bgp.service(key),
                Some(&Ok(peers.clone())),
                "{context}: {key}"
            );
        }
    }
}

fn random_ips(rng: &mut StdRng) -> Vec<String> {
    let n = rng.random_range(1..=2);
    (0..n)
        .map(|_| {
            if rng.random_bool(0.5) {
                format!("10.0.0.{}", rng.random_range(0..20)) // some outside the /28
            } else {
                format!("fd00::{:x}", rng.random_range(0..16))
            }
        })
        .collect()
}

fn random_labels(rng: &mut StdRng) -> Vec<(&'static str, &'static str)> {
    match rng.random_range(0..4) {
        0 => vec![],
        1 => vec![("tier", "public")],
        2 => vec![("tier", "internal")],
        _ => vec![("app", "x"), ("tier", "other")],
    }
}

fn random_change(w: &mut World, rng: &mut StdRng) -> String {
    let svc = format!("svc-{}", rng.random_range(0..12));
    let node_name = NODES[rng.random_range(0..NODES.len())];
    match rng.random_range(0..100) {
        0..30 => {
            let ips = random_ips(rng);
            let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
            let local = rng.random_bool(0.3);
            let labels = random_labels(rng);
            w.cluster.service(Update::Apply(labelled_service(
                "default", &svc, &refs, local, &labels,
            )));
            format!("service {svc} {ips:?} local={local} labels={labels:?}")
        }
        30..38 => {
            w.cluster
                .service(Update::Delete(service("default", &svc, &[], false)));
            format!("delete service {svc}")
        }
        38..60 => {
            let eps: Vec<(&str, bool)> = (0..rng.random_range(0..3))
                .map(|_| {
                    (
                        NODES[rng.random_range(0..NODES.len())],
                        rng.random_bool(0.8),
                    )
                })
                .collect();
            let name = format!("{svc}-{}", rng.random_range(0..2));
            // Either family, now and then FQDN (which serves no address).
            let address_type = match rng.random_range(0..10) {
                0 => "FQDN",
                1..5 => "IPv4",
                _ => "IPv6",
            };
            w.cluster.slice(Update::Apply(slice_of(
                address_type,
                "default",
                &name,
                &svc,
                &eps,
            )));
            format!("slice {name} {address_type} {eps:?}")
        }
        60..65 => {
            let name = format!("{svc}-{}", rng.random_range(0..2));
            w.cluster
                .slice(Update::Delete(slice("default", &name, &svc, &[])));
            format!("delete slice {name}")
        }
        65..80 => {
            if !w.live.remove(node_name) {
                w.live.insert(node_name.into());
            }
            format!("live {:?}", w.live)
        }
        80..86 => {
            let ip: IpAddr = format!("10.0.0.{}", rng.random_range(0..16))
                .parse()
                .unwrap();
            let set = w.unable.entry(node_name.into()).or_default();
            if !set.remove(&ip) {
                set.insert(ip);
            }
            if set.is_empty() {
                w.unable.remove(node_name);
            }
            format!("unable {:?}", w.unable)
        }
        86..92 => {
            let rack = if rng.random_bool(0.5) { "1" } else { "2" };
            let mut labels = vec![("rack", rack)];
            if rng.random_bool(0.2) {
                labels.push((ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB, ""));
            }
            w.cluster.node(Update::Apply(node(node_name, &labels)));
            format!("node {node_name} {labels:?}")
        }
        92..96 => {
            let selector = rng.random_bool(0.5).then_some(("rack", "1"));
            let services: &[(&str, &str)] = match rng.random_range(0..3) {
                0 => &[],
                1 => &[("tier", "public")],
                _ => &[("tier", "public"), ("tier", "internal")],
            };
            w.cluster
                .l2_advertisement(Update::Apply(l2_advertisement_for(
                    "all",
                    selector,
                    services,
                    &[],
                )));
            format!("l2 advertisement selector {selector:?} services {services:?}")
        }
        _ => {
            let len = rng.random_bool(0.5).then_some(30);
            let services: &[(&str, &str)] = if rng.random_bool(0.5) {
                &[("tier", "internal")]
            } else {
                &[]
            };
            w.cluster
                .bgp_advertisement(Update::Apply(selective_bgp_advertisement(
                    "all", len, services,
                )));
            format!("bgp aggregation {len:?} services {services:?}")
        }
    }
}

#[test]
fn the_kept_plans_equal_the_reference_plans_after_every_random_change() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let me = NODES[(seed as usize) % NODES.len()];
        let mut w = World::new(me);
        w.step();
        w.check(&format!("seed {seed} start"));
        for i in 0..150 {
            let what = random_change(&mut w, &mut rng);
            w.step();
            w.check(&format!("seed {seed} step {i} ({what}) on {me}"));
        }
    }
}

/// A change of preferences or of who is in the hold-down; time moves on by a few seconds.
fn random_preference_change(w: &mut World, rng: &mut StdRng, t0: Instant) -> String {
    let node_name = NODES[rng.random_range(0..NODES.len())];
    let now = w.hold_down.now.unwrap_or(t0) + Duration::from_secs(rng.random_range(0..12));
    w.hold_down.now = Some(now);
    w.hold_down.duration = Duration::from_secs(30);
    match rng.random_range(0..100) {
        0..35 => {
            let rack = if rng.random_bool(0.5) { "1" } else { "2" };
            let weight = rng.random_range(1..=100);
            let pools: &[&str] = if rng.random_bool(0.5) { &["v4"] } else { &[] };
            let selectors = if rng.random_bool(0.3) {
                serde_json::json!([{"matchLabels": {"rack": "1"}}])
            } else {
                serde_json::json!([])
            };
            let adv = serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "ferrolb-system", "name": "prefer"},
                "spec": {"ipAddressPools": pools, "nodeSelectors": selectors,
                         "preferredNodeSelectors": [{"weight": weight, "preference": {"matchLabels": {"rack": rack}}}]},
            }))
            .unwrap();
            w.cluster.l2_advertisement(Update::Apply(adv));
            format!("prefer rack {rack} weight {weight} pools {pools:?} selectors {selectors}")
        }
        35..45 => {
            w.cluster
                .l2_advertisement(Update::Delete(l2_advertisement("prefer", &[], None)));
            "no preference".into()
        }
        45..75 => {
            w.hold_down.live_since.insert(node_name.into(), now);
            format!("{node_name} held from {:?}", now - t0)
        }
        _ => format!("time {:?}", now - t0),
    }
}

#[test]
fn the_kept_plans_equal_the_reference_plans_with_preferences_and_hold_downs() {
    for seed in 0..30u64 {
        let t0 = Instant::now();
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let me = NODES[(seed as usize) % NODES.len()];
        let mut w = World::new(me);
        w.step();
        for i in 0..150 {
            let what = if rng.random_bool(0.35) {
                random_preference_change(&mut w, &mut rng, t0)
            } else {
                random_change(&mut w, &mut rng)
            };
            let (l2, _) = w.step();
            assert_eq!(l2.recompute_at, w.hold_down.next_expiry());
            w.check(&format!("seed {seed} step {i} ({what}) on {me}"));
        }
    }
}

#[test]
fn a_hold_down_that_ends_gives_the_preferred_node_its_addresses_back() {
    let t0 = Instant::now();
    let mut w = World::new("node-a");
    w.cluster
        .node(Update::Apply(node("node-c", &[("rack", "2")])));
    let adv = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ferrolb-system", "name": "prefer"},
        "spec": {"preferredNodeSelectors": [{"weight": 10, "preference": {"matchLabels": {"rack": "2"}}}]},
    }))
    .unwrap();
    w.cluster.l2_advertisement(Update::Apply(adv));
    for i in 0..14 {
        let ip = format!("10.0.0.{i}");
        w.cluster.service(Update::Apply(service(
            "default",
            &format!("s{i}"),
            &[&ip],
            false,
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("s{i}-1"),
            &format!("s{i}"),
            &[("node-b", true)],
        )));
    }
    w.hold_down = HoldDown {
        now: Some(t0),
        live_since: [("node-c".to_string(), t0)].into(),
        duration: Duration::from_secs(30),
        ..HoldDown::default()
    };
    let (l2, _) = w.step();
    assert_eq!(l2.recompute_at, Some(t0 + Duration::from_secs(30)));
    assert!(
        w.l2.decisions()
            .all(|(_, d)| d.owner.as_deref() != Ok("node-c"))
    );
    w.check("node-c held");
    w.hold_down.now = Some(t0 + Duration::from_secs(30));
    let (l2, _) = w.step();
    assert_eq!(l2.decided, 14);
    assert_eq!(l2.recompute_at, None);
    assert!(
        w.l2.decisions()
            .all(|(_, d)| d.owner.as_deref() == Ok("node-c"))
    );
    w.check("node-c settled");
}

#[test]
fn a_change_to_one_service_decides_only_its_addresses_and_touches_no_peer_whose_paths_stay() {
    let mut w = World::new("node-a");
    for i in 0..10 {
        let ip = format!("10.0.0.{i}");
        w.cluster.service(Update::Apply(service(
            "default",
            &format!("s{i}"),
            &[&ip],
            false,
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("s{i}-1"),
            &format!("s{i}"),
            &[("node-b", true)],
        )));
    }
    w.step();
    w.cluster.slice(Update::Apply(slice(
        "default",
        "s3-1",
        "s3",
        &[("node-c", true)],
    )));
    let (l2, bgp) = w.step();
    assert_eq!(l2.decided, 1);
    assert!(bgp.services.is_empty(), "the same routes: {bgp:?}");
    // No peer's paths changed either: nobody merges its advertisements again.
    assert!(bgp.peers.is_empty(), "the same paths: {bgp:?}");
    w.check("after one slice change");
}

#[test]
fn a_leaving_node_redecides_only_the_addresses_it_owned() {
    let mut w = World::new("node-a");
    for i in 0..14 {
        let ip = format!("10.0.0.{i}");
        w.cluster.service(Update::Apply(service(
            "default",
            &format!("s{i}"),
            &[&ip],
            false,
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("s{i}-1"),
            &format!("s{i}"),
            &[("node-b", true)],
        )));
    }
    w.step();
    let owned_by_c =
        w.l2.decisions()
            .filter(|(_, d)| d.owner.as_deref() == Ok("node-c"))
            .count();
    w.live.remove("node-c");
    let (l2, _) = w.step();
    assert_eq!(l2.decided, owned_by_c);
    w.check("after node-c left");
}

#[test]
fn a_label_change_decides_only_that_services_addresses() {
    let mut w = World::new("node-a");
    for i in 0..10 {
        let ip = format!("10.0.0.{i}");
        w.cluster.service(Update::Apply(service(
            "default",
            &format!("s{i}"),
            &[&ip],
            false,
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("s{i}-1"),
            &format!("s{i}"),
            &[("node-b", true)],
        )));
    }
    w.step();
    w.cluster.service(Update::Apply(labelled_service(
        "default",
        "s4",
        &["10.0.0.4"],
        false,
        &[("tier", "public")],
    )));
    let (l2, bgp) = w.step();
    assert_eq!(l2.decided, 1);
    assert_eq!(
        bgp.services,
        BTreeSet::from([ServiceKey::new("default", "s4")]),
        "selected by the public BGPAdvertisement now"
    );
    w.check("after one label change");
}

#[test]
fn selectors_that_change_move_the_addresses_they_cover() {
    let mut w = World::new("node-a");
    for (name, ip, tier) in [
        ("pub", "10.0.0.1", "public"),
        ("int", "10.0.0.2", "internal"),
    ] {
        w.cluster.service(Update::Apply(labelled_service(
            "default",
            name,
            &[ip],
            false,
            &[("tier", tier)],
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("{name}-1"),
            name,
            &[("node-b", true)],
        )));
    }
    w.step();
    w.check("both announced");
    w.cluster
        .l2_advertisement(Update::Apply(selective_l2_advertisement(
            "all",
            &[("tier", "public")],
        )));
    w.cluster
        .l2_advertisement(Update::Delete(selective_l2_advertisement("internal", &[])));
    w.step();
    w.check("only the public Service is selected");
    let int = w.l2.decision("10.0.0.2".parse().unwrap()).unwrap();
    assert_eq!(int.owner, Err(NotAnnounced::NoServiceSelected));
    assert!(
        w.l2.decision("10.0.0.1".parse().unwrap())
            .unwrap()
            .owner
            .is_ok()
    );
}

#[test]
fn putting_this_node_on_standby_and_off_again_keeps_the_plans_equal_to_the_reference() {
    let mut w = World::new("node-a");
    for i in 0..14 {
        let ip = format!("10.0.0.{i}");
        w.cluster.service(Update::Apply(service(
            "default",
            &format!("s{i}"),
            &[&ip],
            i % 3 == 0,
        )));
        w.cluster.slice(Update::Apply(slice(
            "default",
            &format!("s{i}-1"),
            &format!("s{i}"),
            &[("node-a", true), ("node-b", i % 2 == 0)],
        )));
    }
    w.step();
    w.check("before");
    w.hold_down.standby = ["node-a".to_string()].into();
    w.step();
    w.check("node-a on standby");
    w.hold_down.standby.clear();
    w.step();
    w.check("node-a back");
}

#[test]
fn a_dual_stack_local_services_addresses_follow_the_endpoints_of_their_own_family() {
    let mut w = World::new("node-a");
    let (v4, v6): (IpAddr, IpAddr) = ("10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap());
    let owner = |w: &World, ip: IpAddr| w.l2.decision(ip).unwrap().owner.clone();
    w.cluster.service(Update::Apply(service(
        "default",
        "web",
        &["10.0.0.5", "fd00::5"],
        true,
    )));
    for (address_type, name, node) in [("IPv4", "web-v4", "node-b"), ("IPv6", "web-v6", "node-c")] {
        w.cluster.slice(Update::Apply(slice_of(
            address_type,
            "default",
            name,
            "web",
            &[(node, true)],
        )));
    }
    w.step();
    w.check("one family per node");
    assert_eq!(owner(&w, v4), Ok("node-b".to_string()));
    assert_eq!(owner(&w, v6), Ok("node-c".to_string()));
    w.cluster.slice(Update::Apply(slice_of(
        "IPv6",
        "default",
        "web-v6",
        "web",
        &[("node-b", true)],
    )));
    w.step();
    w.check("the IPv6 endpoint moved to node-b");
    assert_eq!(owner(&w, v6), Ok("node-b".to_string()));
    w.cluster.slice(Update::Delete(slice_of(
        "IPv4",
        "default",
        "web-v4",
        "web",
        &[],
    )));
    w.step();
    w.check("no IPv4 endpoint left");
    assert_eq!(owner(&w, v4), Err(NotAnnounced::NoReadyEndpoints));
    assert_eq!(owner(&w, v6), Ok("node-b".to_string()));
}
