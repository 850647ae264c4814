//! Allocator benchmarks: 100,000 assignments across pools that include a /16 and a /64, a
//! rebuild from a 100,000-Service snapshot, and one assignment in a /48 with 100,000 addresses
//! in use.
//!
//! `cargo bench -p ferrolb-controller --bench allocator` runs them with criterion.
//! `ALLOCATOR_MEMORY=small|large cargo bench -p ferrolb-controller --bench allocator` instead
//! assigns 100,000 Services once and prints the process's resident memory before and after
//! (`small`: pools of a /16 and /64s; `large`: the same Services over a /8 and /48s), showing
//! that memory follows the Services, not the pool sizes.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use criterion::{BatchSize, Criterion};
use ferrolb_controller::allocator::IpFamily::{V4, V6};
use ferrolb_controller::allocator::*;

const SERVICES: usize = 100_000;

fn range(s: &str) -> AddressRange {
    AddressRange::parse(s).unwrap()
}

/// A small team pool first, then a dual-stack pool (IPv4 /16 or /8, IPv6 /64 or /48), then an
/// IPv6-only pool.
fn pools(large: bool) -> Vec<Pool> {
    let (v4, v6a, v6b) = if large {
        ("10.0.0.0/8", "fd00:1::/48", "fd00:2::/48")
    } else {
        ("10.0.0.0/16", "fd00:1::/64", "fd00:2::/64")
    };
    let mut team = Pool::new("team", vec![range("192.168.0.0/24")]);
    team.priority = Some(0);
    team.namespaces = vec!["team-a".into()];
    let mut dual = Pool::new("dual", vec![range(v4), range(v6a)]);
    dual.priority = Some(1);
    let v6 = Pool::new("v6", vec![range(v6b)]);
    vec![team, dual, v6]
}

/// 30 % IPv4, 30 % dual stack, 40 % IPv6; one in ten in the team's namespace; one in twenty
/// with a sharing key shared by pairs on different ports.
fn services(n: usize) -> Vec<ServiceRequest> {
    (0..n)
        .map(|i| {
            let ns = if i % 10 == 0 {
                "team-a".to_string()
            } else {
                format!("ns{}", i % 50)
            };
            let mut s = ServiceRequest::new(ns, format!("svc-{i}"));
            s.ports = vec![(80 + (i % 2) as u16, Protocol::Tcp)];
            (s.families, s.family_policy) = match i % 10 {
                0..=2 => (vec![V4], FamilyPolicy::SingleStack),
                3..=5 => (vec![V4, V6], FamilyPolicy::RequireDualStack),
                _ => (vec![V6], FamilyPolicy::SingleStack),
            };
            if i % 20 == 1 || i % 20 == 2 {
                s.sharing_key = Some(format!("shared-{}", i / 20));
            }
            s
        })
        .collect()
}

fn assign_all(pools: Vec<Pool>, reqs: &[ServiceRequest]) -> Allocator {
    let mut a = Allocator::new(pools);
    for r in reqs {
        let out = a.assign(r);
        assert!(out.assignment().is_some(), "{:?}", out.error());
    }
    a
}

fn snapshot(a: &Allocator, reqs: &[ServiceRequest]) -> Vec<ServiceRequest> {
    reqs.iter()
        .map(|r| ServiceRequest {
            current_ips: a.assignment(&r.key).map_or(vec![], |x| x.ips),
            ..r.clone()
        })
        .collect()
}

/// A /48 with 100,000 addresses in use: the first 50,000 in a row and 50,000 scattered.
fn busy_slash_48() -> (Allocator, ServiceRequest) {
    let base = u128::from("fd00:99::".parse::<Ipv6Addr>().unwrap());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let held: Vec<ServiceRequest> = (0..SERVICES as u128)
        .map(|i| {
            let offset = if i < 50_000 {
                i
            } else {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (u128::from(x) << 16) | 1 << 15
            };
            let mut s = ServiceRequest::new("busy", format!("held-{i}"));
            s.families = vec![V6];
            s.current_ips = vec![IpAddr::V6(Ipv6Addr::from(base + offset))];
            s
        })
        .collect();
    let a = Allocator::from_snapshot(vec![Pool::new("big", vec![range("fd00:99::/48")])], held);
    let mut probe = ServiceRequest::new("busy", "probe");
    probe.families = vec![V6];
    (a, probe)
}

fn benches(c: &mut Criterion) {
    let reqs = services(SERVICES);
    let mut g = c.benchmark_group("allocator");
    g.sample_size(10);
    g.bench_function("assign_100k_services", |b| {
        b.iter_batched(
            || Allocator::new(pools(false)),
            |mut a| {
                for r in &reqs {
                    black_box(a.assign(r));
                }
                a
            },
            BatchSize::PerIteration,
        )
    });
    let done = assign_all(pools(false), &reqs);
    let snap = snapshot(&done, &reqs);
    g.bench_function("rebuild_from_100k_snapshot", |b| {
        b.iter_batched(
            || snap.clone(),
            |s| Allocator::from_snapshot(pools(false), s),
            BatchSize::PerIteration,
        )
    });
    g.finish();

    let (mut a, probe) = busy_slash_48();
    let first = a.assign(&probe);
    assert_eq!(
        first.assignment().unwrap().ips,
        vec!["fd00:99::c350".parse::<IpAddr>().unwrap()],
        "the lowest free address follows the 50,000 in a row"
    );
    c.bench_function("allocator/assign_one_in_busy_slash_48", |b| {
        b.iter(|| {
            a.release(&probe.key);
            black_box(a.assign(&probe))
        })
    });
}

/// Resident memory of this process, from `/proc/self/status` (kB).
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn memory_report(large: bool) {
    let reqs = services(SERVICES);
    let before = status_kb("VmRSS:");
    let t = Instant::now();
    let a = assign_all(pools(large), &reqs);
    let elapsed = t.elapsed();
    let after = status_kb("VmRSS:");
    let peak = status_kb("VmHWM:");
    let stats = ["team", "dual", "v6"].map(|p| a.pool_stats(p).unwrap());
    println!(
        "pools: {}; {SERVICES} Services assigned in {:.0} ms",
        if large { "/8 + /48s" } else { "/16 + /64s" },
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "RSS before {:.1} MiB (requests built), after {:.1} MiB, peak {:.1} MiB: allocator holds {:.1} MiB ({:.0} bytes per Service)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        peak as f64 / 1024.0,
        (after - before) as f64 / 1024.0,
        (after - before) as f64 * 1024.0 / SERVICES as f64
    );
    for (name, s) in ["team", "dual", "v6"].iter().zip(stats) {
        println!(
            "  pool {name}: IPv4 {} assigned / {} available, IPv6 {} assigned / {} available",
            s.v4.assigned, s.v4.available, s.v6.assigned, s.v6.available
        );
    }
    black_box(a);
}

fn main() {
    ferrolb_tests::provenance::print();
    match std::env::var("ALLOCATOR_MEMORY").as_deref() {
        Ok("large") => return memory_report(true),
        Ok(_) => return memory_report(false),
        Err(_) => {}
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
