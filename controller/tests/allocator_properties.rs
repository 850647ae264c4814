//! Property tests: for random pools, Services and operation orders, the allocator's invariants hold.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_controller::allocator::IpFamily::{V4, V6};
use ferrolb_controller::allocator::*;
use proptest::prelude::*;

/// Pool `i` draws from its own blocks, so pools never overlap (the shell holds overlapping
/// pools back): IPv4 `10.0.2i.250-10.0.2i+1.5` (crosses a .255/.0 boundary) and IPv6
/// `fd00::i:0-fd00::i:7`.
fn pool_strategy(i: u8) -> impl Strategy<Value = Pool> {
    (
        (0u8..=4, 0u8..=6),
        prop::option::of(0u8..=7),
        prop::bool::weighted(0.85),
        any::<bool>(),
        prop::option::of(0i32..3),
        prop_oneof![3 => Just(vec![]), 1 => Just(vec!["a".to_string()])],
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.9),
        0i64..3,
    )
        .prop_map(
            move |(
                (lo4, hi4),
                v6_last,
                auto,
                buggy,
                prio,
                namespaces,
                web_only,
                ready,
                created,
            )| {
                let mut addresses = vec![
                    AddressRange::parse(&format!(
                        "10.0.{}.{}-10.0.{}.{}",
                        2 * i,
                        250 + lo4,
                        2 * i + 1,
                        hi4
                    ))
                    .unwrap(),
                ];
                if let Some(last) = v6_last {
                    addresses.push(
                        AddressRange::parse(&format!("fd00::{i}:0-fd00::{i}:{last}")).unwrap(),
                    );
                }
                let mut p = Pool::new(format!("p{i}"), addresses);
                p.auto_assign = auto;
                p.avoid_buggy_ips = buggy;
                p.priority = prio;
                p.namespaces = namespaces;
                if web_only {
                    p.service_selectors.push(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                            match_labels: Some([("tier".to_string(), "web".to_string())].into()),
                            ..Default::default()
                        },
                    );
                }
                p.ready = ready;
                p.created = created;
                p
            },
        )
}

fn pools_strategy() -> impl Strategy<Value = Vec<Pool>> {
    (1u8..=3).prop_flat_map(|n| (0..n).map(pool_strategy).collect::<Vec<_>>())
}

fn address_strategy() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u8..3, 250u8..=255).prop_map(|(i, b)| format!("10.0.{}.{b}", 2 * i)),
        (0u8..3, 0u8..=6).prop_map(|(i, b)| format!("10.0.{}.{b}", 2 * i + 1)),
        (0u8..3, 0u8..=8).prop_map(|(i, b)| format!("fd00::{i}:{b}")),
    ]
    .prop_map(|s| s.parse().unwrap())
}

fn service_strategy() -> impl Strategy<Value = ServiceRequest> {
    use Protocol::{Tcp, Udp};
    let families = prop_oneof![
        4 => Just((vec![V4], FamilyPolicy::SingleStack)),
        2 => Just((vec![V6], FamilyPolicy::SingleStack)),
        1 => Just((vec![], FamilyPolicy::SingleStack)),
        2 => Just((vec![V4, V6], FamilyPolicy::PreferDualStack)),
        2 => Just((vec![V6, V4], FamilyPolicy::RequireDualStack)),
    ];
    (
        (prop_oneof![Just("a"), Just("b")], 0u8..8),
        prop::option::of(prop_oneof![Just("k1"), Just("k2")]),
        prop::sample::subsequence(vec![(80, Tcp), (80, Udp), (443, Tcp)], 1..=2),
        prop::option::of(prop_oneof![Just("x"), Just("y")]),
        families,
        prop::option::weighted(0.1, prop_oneof![Just("p0"), Just("p1"), Just("nope")]),
        prop::option::weighted(0.15, address_strategy()),
        any::<bool>(),
    )
        .prop_map(
            |((ns, n), key, ports, local, (families, policy), pool, ask, web)| {
                let mut s = ServiceRequest::new(ns, format!("s{n}"));
                s.sharing_key = key.map(String::from);
                s.ports = ports;
                if let Some(app) = local {
                    s.traffic_policy = TrafficPolicy::Local;
                    s.pod_selector = [("app".to_string(), app.to_string())].into();
                }
                s.families = families;
                s.family_policy = policy;
                s.requested_pool = pool.map(String::from);
                s.requested_ips = ask.into_iter().collect();
                if web {
                    s.labels = [("tier".to_string(), "web".to_string())].into();
                }
                s
            },
        )
}

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
enum Op {
    Assign(ServiceRequest),
    Release(u8, bool),
    SetPools(Vec<Pool>),
    Restart,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => service_strategy().prop_map(Op::Assign),
        2 => (0u8..8, any::<bool>()).prop_map(|(n, a)| Op::Release(n, a)),
        1 => pools_strategy().prop_map(Op::SetPools),
        1 => Just(Op::Restart),
    ]
}

/// The sharing rule, written independently of the allocator.
fn may_share(a: &ServiceRequest, b: &ServiceRequest) -> bool {
    a.sharing_key.is_some()
        && a.sharing_key == b.sharing_key
        && !a.ports.iter().any(|p| b.ports.contains(p))
        && a.traffic_policy == b.traffic_policy
        && (a.traffic_policy == TrafficPolicy::Cluster || a.pod_selector == b.pod_selector)
}

fn in_pool(p: &Pool, ip: IpAddr) -> bool {
    let buggy = match ip {
        IpAddr::V4(v4) => p.avoid_buggy_ips && matches!(v4.octets()[3], 0 | 255),
        IpAddr::V6(_) => false,
    };
    !buggy && p.addresses.iter().any(|r| r.contains(ip))
}

struct World {
    pools: Vec<Pool>,
    alloc: Allocator,
    /// The request each known Service was last assigned with.
    reqs: BTreeMap<ServiceKey, ServiceRequest>,
}

impl World {
    fn check_invariants(&self) -> Result<(), TestCaseError> {
        let all = self.alloc.assignments();
        prop_assert_eq!(self.alloc.assigned_services(), all.len());
        let mut holders: BTreeMap<IpAddr, Vec<&ServiceKey>> = BTreeMap::new();
        for (key, a) in &all {
            let req = &self.reqs[key];
            let pool = self.pools.iter().find(|p| p.name == a.pool);
            let pool = pool.ok_or_else(|| TestCaseError::fail(format!("{key}: unknown pool")))?;
            prop_assert_eq!(a.ip_mode, pool.ip_mode);
            prop_assert!(
                pool.admits(req),
                "{} holds {:?} from {}, which does not admit it",
                key,
                a.ips,
                a.pool
            );
            for &ip in &a.ips {
                prop_assert!(
                    in_pool(pool, ip),
                    "{}: {} is not in pool {}",
                    key,
                    ip,
                    pool.name
                );
                holders.entry(ip).or_default().push(key);
            }
            let mut fams: Vec<IpFamily> = a.ips.iter().map(|ip| IpFamily::of(*ip)).collect();
            fams.dedup();
            prop_assert_eq!(fams.len(), a.ips.len(), "one address per family");
            if let Some(name) = &req.requested_pool {
                prop_assert_eq!(&a.pool, name);
            }
            if !req.requested_ips.is_empty() {
                let mut want = req.requested_ips.clone();
                let mut got = a.ips.clone();
                want.sort();
                got.sort();
                prop_assert_eq!(got, want, "{} did not get what it asked for", key);
            }
        }
        for (ip, keys) in holders {
            for (i, a) in keys.iter().enumerate() {
                for b in &keys[i + 1..] {
                    prop_assert!(
                        may_share(&self.reqs[*a], &self.reqs[*b]),
                        "{} is held by {} and {}, which may not share it",
                        ip,
                        a,
                        b
                    );
                }
            }
        }
        Ok(())
    }

    /// The snapshot a restarted controller would read.
    fn snapshot(&self) -> Vec<ServiceRequest> {
        (self.reqs.values())
            .map(|r| ServiceRequest {
                current_ips: (self.alloc.assignment(&r.key)).map_or(vec![], |a| a.ips),
                ..r.clone()
            })
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_any_pools_services_and_operation_order(
        pools in pools_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..40),
    ) {
        let mut w = World { alloc: Allocator::new(pools.clone()), pools, reqs: BTreeMap::new() };
        for op in ops {
            let before = w.alloc.assignments();
            match op {
                Op::Assign(req) => {
                    let out = w.alloc.assign(&req);
                    w.reqs.insert(req.key.clone(), req.clone());
                    // Assigning one Service never moves another.
                    let others = |v: &[(ServiceKey, Assignment)]| {
                        v.iter().filter(|(k, _)| *k != req.key).cloned().collect::<Vec<_>>()
                    };
                    prop_assert_eq!(others(&before), others(&w.alloc.assignments()));
                    // Asking again changes nothing.
                    if out.assignment().is_some() {
                        let again = w.alloc.assign(&req);
                        prop_assert!(matches!(again, Outcome::Unchanged(_)), "not idempotent: {:?} then {:?}", out, again);
                    }
                }
                Op::Release(n, ns_a) => {
                    let key = ServiceKey::new(if ns_a { "a" } else { "b" }, format!("s{n}"));
                    w.alloc.release(&key);
                    w.reqs.remove(&key);
                    // Deleting one Service changes no other Service's address.
                    let rest: Vec<_> = before.into_iter().filter(|(k, _)| *k != key).collect();
                    prop_assert_eq!(rest, w.alloc.assignments());
                }
                Op::SetPools(pools) => {
                    let changed = w.alloc.set_pools(pools.clone());
                    w.pools = pools;
                    // Only invalidated Services lose addresses; the rest keep theirs exactly.
                    let after = w.alloc.assignments();
                    for (k, a) in &before {
                        if !changed.invalidated.contains(k) {
                            prop_assert_eq!(after.iter().find(|(x, _)| x == k).map(|(_, a)| a.ips.clone()), Some(a.ips.clone()));
                        }
                    }
                    w.check_invariants()?;
                    // The shell then assigns every invalidated Service again.
                    for k in &changed.invalidated {
                        let req = w.reqs[k].clone();
                        let out = w.alloc.assign(&req);
                        prop_assert!(matches!(out, Outcome::Changed { .. } | Outcome::Revoked { .. }), "{:?}", out);
                    }
                }
                Op::Restart => {
                    let rebuilt = Allocator::from_snapshot(w.pools.clone(), w.snapshot());
                    prop_assert_eq!(rebuilt.assignments(), w.alloc.assignments());
                    w.alloc = rebuilt;
                    // Every Service that holds addresses keeps them when processed again.
                    let held: Vec<ServiceKey> = w.alloc.assignments().into_iter().map(|(k, _)| k).collect();
                    for k in held.iter().rev() {
                        let out = w.alloc.assign(&w.reqs[k].clone());
                        prop_assert!(matches!(out, Outcome::Unchanged(_)), "{} after restart: {:?}", k, out);
                    }
                }
            }
            w.check_invariants()?;
        }
    }

    #[test]
    fn a_rebuild_from_any_snapshot_reproduces_the_assignment(
        pools in pools_strategy(),
        services in prop::collection::vec(service_strategy(), 1..16),
        order in any::<prop::sample::Index>(),
    ) {
        let mut alloc = Allocator::new(pools.clone());
        let mut reqs: BTreeMap<ServiceKey, ServiceRequest> = BTreeMap::new();
        for s in &services {
            alloc.assign(s);
            reqs.insert(s.key.clone(), s.clone());
        }
        let mut snapshot: Vec<ServiceRequest> = reqs.values().map(|r| ServiceRequest {
            current_ips: alloc.assignment(&r.key).map_or(vec![], |a| a.ips),
            ..r.clone()
        }).collect();
        // The order the snapshot arrives in does not matter.
        let k = order.index(snapshot.len());
        snapshot.rotate_left(k);
        let rebuilt = Allocator::from_snapshot(pools, snapshot);
        prop_assert_eq!(rebuilt.assignments(), alloc.assignments());
    }
}
