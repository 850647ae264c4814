//! Builders and a table runner shared by the allocator's integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_controller::allocator::*;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

pub fn key(s: &str) -> ServiceKey {
    let (ns, name) = s.split_once('/').unwrap();
    ServiceKey::new(ns, name)
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A ready auto-assign pool.
pub fn pool(name: &str, ranges: &[&str]) -> Pool {
    Pool::new(
        name,
        ranges
            .iter()
            .map(|r| AddressRange::parse(r).unwrap())
            .collect(),
    )
}

/// Chained tweaks of a pool.
pub trait PoolExt {
    fn priority(self, p: i32) -> Self;
    fn manual(self) -> Self;
    fn avoid_buggy(self) -> Self;
    fn not_ready(self) -> Self;
    fn created(self, t: i64) -> Self;
    fn namespaces(self, ns: &[&str]) -> Self;
    fn namespace_selector(self, pairs: &[(&str, &str)]) -> Self;
    fn service_selector(self, pairs: &[(&str, &str)]) -> Self;
    fn proxy(self) -> Self;
}

fn selector(
    pairs: &[(&str, &str)],
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some(labels(pairs)),
        ..Default::default()
    }
}

impl PoolExt for Pool {
    fn priority(mut self, p: i32) -> Self {
        self.priority = Some(p);
        self
    }
    fn manual(mut self) -> Self {
        self.auto_assign = false;
        self
    }
    fn avoid_buggy(mut self) -> Self {
        self.avoid_buggy_ips = true;
        self
    }
    fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }
    fn created(mut self, t: i64) -> Self {
        self.created = t;
        self
    }
    fn namespaces(mut self, ns: &[&str]) -> Self {
        self.namespaces = ns.iter().map(|s| s.to_string()).collect();
        self
    }
    fn namespace_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.namespace_selectors.push(selector(pairs));
        self
    }
    fn service_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.service_selectors.push(selector(pairs));
        self
    }
    fn proxy(mut self) -> Self {
        self.ip_mode = IpMode::Proxy;
        self
    }
}

/// A single-stack IPv4 Service `ns/name` with port 80/TCP.
pub fn svc(k: &str) -> ServiceRequest {
    let k = key(k);
    ServiceRequest {
        ports: vec![(80, Protocol::Tcp)],
        ..ServiceRequest::new(k.namespace, k.name)
    }
}

/// Chained tweaks of a Service.
pub trait SvcExt {
    fn ports(self, p: &[(u16, Protocol)]) -> Self;
    fn share(self, k: &str) -> Self;
    fn ask_ips(self, list: &[&str]) -> Self;
    fn ask_pool(self, p: &str) -> Self;
    fn families(self, f: &[IpFamily], policy: FamilyPolicy) -> Self;
    fn local(self, pod_selector: &[(&str, &str)]) -> Self;
    fn labels(self, pairs: &[(&str, &str)]) -> Self;
    fn ns_labels(self, pairs: &[(&str, &str)]) -> Self;
    fn current(self, list: &[&str]) -> Self;
}

impl SvcExt for ServiceRequest {
    fn ports(mut self, p: &[(u16, Protocol)]) -> Self {
        self.ports = p.to_vec();
        self
    }
    fn share(mut self, k: &str) -> Self {
        self.sharing_key = Some(k.into());
        self
    }
    fn ask_ips(mut self, list: &[&str]) -> Self {
        self.requested_ips = ips(list);
        self
    }
    fn ask_pool(mut self, p: &str) -> Self {
        self.requested_pool = Some(p.into());
        self
    }
    fn families(mut self, f: &[IpFamily], policy: FamilyPolicy) -> Self {
        self.families = f.to_vec();
        self.family_policy = policy;
        self
    }
    fn local(mut self, pod_selector: &[(&str, &str)]) -> Self {
        self.traffic_policy = TrafficPolicy::Local;
        self.pod_selector = labels(pod_selector);
        self
    }
    fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.labels = labels(pairs);
        self
    }
    fn ns_labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.namespace_labels = labels(pairs);
        self
    }
    fn current(mut self, list: &[&str]) -> Self {
        self.current_ips = ips(list);
        self
    }
}

/// What a step must produce.
pub enum Expect {
    /// `Outcome::Assigned` with these addresses from this pool.
    Assigned(&'static [&'static str], &'static str),
    /// `Outcome::Unchanged` with these addresses.
    Unchanged(&'static [&'static str]),
    /// `Outcome::Changed` from `old` to `new`, for `reason`.
    Changed(
        &'static [&'static str],
        &'static [&'static str],
        ChangeReason,
    ),
    /// `Outcome::Revoked` of `old`, for `reason`, with `error`.
    Revoked(&'static [&'static str], ChangeReason, AllocationError),
    /// `Outcome::Failed`.
    Failed(AllocationError),
    /// `release` names these waiting Services.
    Retry(&'static [&'static str]),
    /// `set_pools` invalidates these Services.
    Invalidated(&'static [&'static str]),
}

/// One step of a sequence. (Rows are built once per test; their size does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Step {
    Assign(ServiceRequest, Expect),
    Release(&'static str, Expect),
    SetPools(Vec<Pool>, Expect),
}

pub use Expect::*;

/// Runs `steps` against `alloc`, naming the failing step.
pub fn run(alloc: &mut Allocator, steps: Vec<(&str, Step)>) {
    for (label, step) in steps {
        match step {
            Step::Assign(req, expect) => {
                let got = alloc.assign(&req);
                check_outcome(label, &got, &expect);
                // What the allocator records must agree with what it reported.
                assert_eq!(
                    alloc.assignment(&req.key).as_ref(),
                    got.assignment(),
                    "step `{label}`: recorded assignment differs from the outcome"
                );
            }
            Step::Release(k, Retry(want)) => {
                let got = alloc.release(&key(k));
                let want: Vec<ServiceKey> = want.iter().map(|k| key(k)).collect();
                assert_eq!(got, want, "step `{label}`: services to retry");
                assert_eq!(alloc.assignment(&key(k)), None, "step `{label}`");
            }
            Step::SetPools(pools, Invalidated(want)) => {
                let got = alloc.set_pools(pools);
                let want: Vec<ServiceKey> = want.iter().map(|k| key(k)).collect();
                assert_eq!(
                    got.invalidated, want,
                    "step `{label}`: invalidated services"
                );
            }
            _ => panic!("step `{label}`: malformed table row"),
        }
    }
}

fn check_outcome(label: &str, got: &Outcome, expect: &Expect) {
    let ok = match (got, expect) {
        (Outcome::Assigned(a), Assigned(want, pool)) => a.ips == ips(want) && a.pool == *pool,
        (Outcome::Unchanged(a), Unchanged(want)) => a.ips == ips(want),
        (Outcome::Changed { old, new, reason }, Changed(o, n, r)) => {
            *old == ips(o) && new.ips == ips(n) && reason == r
        }
        (Outcome::Revoked { old, reason, error }, Revoked(o, r, e)) => {
            *old == ips(o) && reason == r && error == e
        }
        (Outcome::Failed(e), Failed(want)) => e == want,
        _ => false,
    };
    assert!(
        ok,
        "step `{label}`: got {got:?}, expected {}",
        describe(expect)
    );
}

fn describe(e: &Expect) -> String {
    match e {
        Assigned(i, p) => format!("Assigned {i:?} from {p}"),
        Unchanged(i) => format!("Unchanged {i:?}"),
        Changed(o, n, r) => format!("Changed {o:?} -> {n:?} because {r:?}"),
        Revoked(o, r, e) => format!("Revoked {o:?} because {r:?}, error {e:?}"),
        Failed(e) => format!("Failed {e:?}"),
        Retry(k) => format!("Retry {k:?}"),
        Invalidated(k) => format!("Invalidated {k:?}"),
    }
}
