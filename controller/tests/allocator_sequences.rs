//! Table-driven sequences for every allocator rule: (step, input, expected outcome).

mod allocator_support;

use allocator_support::*;
use ferrolb_controller::allocator::IpFamily::{V4, V6};
use ferrolb_controller::allocator::*;

use AllocationError as E;
use ChangeReason as R;
use Step::{Assign, Release, SetPools};

fn pools_of(p: Vec<Pool>) -> Allocator {
    Allocator::new(p)
}

#[test]
#[rustfmt::skip]
fn the_lowest_free_address_is_given_first_and_reused_after_release() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/30"])]);
    run(&mut a, vec![
        ("first", Assign(svc("ns/a"), Assigned(&["10.0.0.0"], "p"))),
        ("second", Assign(svc("ns/b"), Assigned(&["10.0.0.1"], "p"))),
        ("third", Assign(svc("ns/c"), Assigned(&["10.0.0.2"], "p"))),
        ("free the first", Release("ns/a", Retry(&[]))),
        ("the hole is filled", Assign(svc("ns/d"), Assigned(&["10.0.0.0"], "p"))),
        ("last one", Assign(svc("ns/e"), Assigned(&["10.0.0.3"], "p"))),
        ("pool full", Assign(svc("ns/f"), Failed(E::PoolExhausted { pools: vec!["p".into()], family: V4 }))),
        ("again is stable", Assign(svc("ns/b"), Unchanged(&["10.0.0.1"]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn avoid_buggy_ips_skips_addresses_ending_in_0_and_255() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.254-10.0.1.1"]).avoid_buggy()]);
    run(&mut a, vec![
        (".254", Assign(svc("ns/a"), Assigned(&["10.0.0.254"], "p"))),
        ("skips .255 and .0", Assign(svc("ns/b"), Assigned(&["10.0.1.1"], "p"))),
        ("nothing left", Assign(svc("ns/c"), Failed(E::PoolExhausted { pools: vec!["p".into()], family: V4 }))),
        ("a buggy address cannot be requested", Assign(svc("ns/d").ask_ips(&["10.0.0.255"]), Failed(E::RequestedIpNotInAnyPool { ip: ip("10.0.0.255") }))),
    ]);
    let stats = a.pool_stats("p").unwrap();
    assert_eq!((stats.v4.assigned, stats.v4.available), (2, 0));
}

#[test]
#[rustfmt::skip]
fn a_pool_without_auto_assign_serves_only_explicit_requests() {
    let mut a = pools_of(vec![pool("reserved", &["10.0.0.0/29"]).manual()]);
    run(&mut a, vec![
        ("no auto pool", Assign(svc("ns/a"), Failed(E::NoPoolAdmitsService))),
        ("by pool name", Assign(svc("ns/b").ask_pool("reserved"), Assigned(&["10.0.0.0"], "reserved"))),
        ("by address", Assign(svc("ns/c").ask_ips(&["10.0.0.5"]), Assigned(&["10.0.0.5"], "reserved"))),
        ("unknown pool", Assign(svc("ns/d").ask_pool("nope"), Failed(E::UnknownPool { pool: "nope".into() }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn pools_are_tried_by_priority_then_unprioritised_then_by_name() {
    let mut a = pools_of(vec![
        pool("a-none", &["10.0.4.0/32"]),
        pool("b-ten", &["10.0.3.0/32"]).priority(10),
        pool("c-five", &["10.0.1.0/32"]).priority(5),
        pool("d-five", &["10.0.2.0/32"]).priority(5),
        pool("e-none", &["10.0.5.0/32"]),
    ]);
    run(&mut a, vec![
        ("priority 5, name c", Assign(svc("ns/1"), Assigned(&["10.0.1.0"], "c-five"))),
        ("priority 5, name d", Assign(svc("ns/2"), Assigned(&["10.0.2.0"], "d-five"))),
        ("priority 10", Assign(svc("ns/3"), Assigned(&["10.0.3.0"], "b-ten"))),
        ("no priority, name a", Assign(svc("ns/4"), Assigned(&["10.0.4.0"], "a-none"))),
        ("no priority, name e", Assign(svc("ns/5"), Assigned(&["10.0.5.0"], "e-none"))),
        ("all exhausted", Assign(svc("ns/6"), Failed(E::PoolExhausted {
            pools: ["c-five", "d-five", "b-ten", "a-none", "e-none"].map(String::from).to_vec(),
            family: V4,
        }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn service_allocation_restricts_pools_by_namespace_and_labels() {
    let mut a = pools_of(vec![
        pool("team-a", &["10.0.1.0/32"]).priority(1).namespaces(&["team-a"]),
        pool("prod", &["10.0.2.0/32"]).priority(2).namespace_selector(&[("env", "prod")]),
        pool("web", &["10.0.3.0/32"]).priority(3).service_selector(&[("tier", "web")]),
    ]);
    run(&mut a, vec![
        ("listed namespace", Assign(svc("team-a/x"), Assigned(&["10.0.1.0"], "team-a"))),
        ("selected namespace", Assign(svc("shop/x").ns_labels(&[("env", "prod")]), Assigned(&["10.0.2.0"], "prod"))),
        ("selected service", Assign(svc("blog/x").labels(&[("tier", "web")]), Assigned(&["10.0.3.0"], "web"))),
        ("admitted nowhere", Assign(svc("blog/y"), Failed(E::NoPoolAdmitsService))),
        ("a named pool must admit too", Assign(svc("blog/z").ask_pool("team-a"), Failed(E::PoolDoesNotAdmitService { pool: "team-a".into() }))),
        ("so must a requested address", Assign(svc("blog/w").ask_ips(&["10.0.2.0"]), Failed(E::PoolDoesNotAdmitService { pool: "prod".into() }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn requested_addresses_are_given_exactly_or_refused_with_the_reason() {
    let mut a = pools_of(vec![
        pool("p", &["10.0.0.0/24", "fd00::/120"]),
        pool("q", &["10.0.1.0/24"]),
        pool("held", &["10.0.2.0/24"]).not_ready(),
    ]);
    run(&mut a, vec![
        ("free address", Assign(svc("ns/a").ask_ips(&["10.0.0.7"]), Assigned(&["10.0.0.7"], "p"))),
        ("held by another", Assign(svc("ns/b").ask_ips(&["10.0.0.7"]), Failed(E::RequestedIpInUse { ip: ip("10.0.0.7"), by: key("ns/a") }))),
        ("outside every pool", Assign(svc("ns/c").ask_ips(&["192.0.2.1"]), Failed(E::RequestedIpNotInAnyPool { ip: ip("192.0.2.1") }))),
        ("outside the named pool", Assign(svc("ns/d").ask_ips(&["10.0.0.9"]).ask_pool("q"), Failed(E::RequestedIpNotInPool { ip: ip("10.0.0.9"), pool: "q".into() }))),
        ("in a held-back pool", Assign(svc("ns/e").ask_ips(&["10.0.2.1"]), Failed(E::PoolNotReady { pool: "held".into() }))),
        ("two of one family", Assign(svc("ns/f").ask_ips(&["10.0.0.1", "10.0.0.2"]), Failed(E::TooManyRequestedIps { family: V4 }))),
        ("family not on the Service", Assign(svc("ns/g").ask_ips(&["fd00::1"]), Failed(E::RequestedFamilyNotOnService { ip: ip("fd00::1"), family: V6 }))),
        ("different pools", Assign(
            svc("ns/h").ask_ips(&["10.0.0.3", "fd00::3"]).families(&[V4, V6], FamilyPolicy::RequireDualStack)
                .ask_ips(&["10.0.1.3", "fd00::3"]),
            Failed(E::RequestedIpsInDifferentPools { first: ip("10.0.1.3"), first_pool: "q".into(), second: ip("fd00::3"), second_pool: "p".into() }))),
        ("dual stack needs both", Assign(
            svc("ns/i").families(&[V4, V6], FamilyPolicy::RequireDualStack).ask_ips(&["10.0.0.4"]),
            Failed(E::DualStackNeedsBothAddresses { family: V4 }))),
        ("both families, in family order", Assign(
            svc("ns/j").families(&[V6, V4], FamilyPolicy::RequireDualStack).ask_ips(&["10.0.0.4", "fd00::4"]),
            Assigned(&["fd00::4", "10.0.0.4"], "p"))),
        ("changing the request moves the Service", Assign(svc("ns/a").ask_ips(&["10.0.0.8"]),
            Changed(&["10.0.0.7"], &["10.0.0.8"], R::RequestChanged { ip: ip("10.0.0.7") }))),
        ("the old address is free again", Assign(svc("ns/b").ask_ips(&["10.0.0.7"]), Assigned(&["10.0.0.7"], "p"))),
        ("asking for a held address loses the old one and gets nothing", Assign(svc("ns/a").ask_ips(&["10.0.0.7"]),
            Revoked(&["10.0.0.8"], R::RequestChanged { ip: ip("10.0.0.8") }, E::RequestedIpInUse { ip: ip("10.0.0.7"), by: key("ns/b") }))),
        ("the holder keeps it", Assign(svc("ns/b").ask_ips(&["10.0.0.7"]), Unchanged(&["10.0.0.7"]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn dual_stack_follows_ip_family_policy() {
    let mut a = pools_of(vec![
        pool("v4only", &["10.0.0.0/30"]).priority(1),
        pool("dual", &["10.0.1.0/31", "fd00::/127"]).priority(2),
        pool("v6only", &["fd01::/128"]).priority(3),
    ]);
    let single = |k, f: &[IpFamily]| svc(k).families(f, FamilyPolicy::SingleStack);
    let prefer = |k| svc(k).families(&[V4, V6], FamilyPolicy::PreferDualStack);
    let require = |k| svc(k).families(&[V6, V4], FamilyPolicy::RequireDualStack);
    run(&mut a, vec![
        ("single stack v4 takes the first pool", Assign(single("ns/a", &[V4]), Assigned(&["10.0.0.0"], "v4only"))),
        ("single stack v6 skips v4-only pools", Assign(single("ns/b", &[V6, V4]), Assigned(&["fd00::"], "dual"))),
        ("prefer dual: the pool that gives both", Assign(prefer("ns/c"), Assigned(&["10.0.1.0", "fd00::1"], "dual"))),
        ("require dual: no pool has both left", Assign(require("ns/d"),
            Failed(E::PoolExhausted { pools: ["v4only", "dual", "v6only"].map(String::from).to_vec(), family: V6 }))),
        ("prefer dual falls back to the first family", Assign(prefer("ns/e"), Assigned(&["10.0.0.1"], "v4only"))),
        ("an empty family list takes any one address", Assign(svc("ns/f").families(&[], FamilyPolicy::SingleStack), Assigned(&["10.0.0.2"], "v4only"))),
    ]);
    // No pool can give both families to this one at all.
    let mut b = pools_of(vec![pool("v4", &["10.0.0.0/24"]), pool("v6", &["fd00::/64"])]);
    run(&mut b, vec![
        ("require dual without a dual pool", Assign(svc("ns/a").families(&[V4, V6], FamilyPolicy::RequireDualStack),
            Failed(E::FamilyNotAvailable { pools: vec!["v4".into(), "v6".into()], family: V6 }))),
        ("single v6 from a v4-only choice", Assign(svc("ns/b").families(&[V6], FamilyPolicy::SingleStack).ask_pool("v4"),
            Failed(E::FamilyNotAvailable { pools: vec!["v4".into()], family: V6 }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn services_with_one_key_share_an_address_when_ports_and_policy_allow() {
    use Protocol::{Tcp, Udp};
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/29"])]);
    run(&mut a, vec![
        ("first of the group", Assign(svc("ns/dns-tcp").share("dns").ports(&[(53, Tcp)]), Assigned(&["10.0.0.0"], "p"))),
        ("joins on another protocol", Assign(svc("ns/dns-udp").share("dns").ports(&[(53, Udp)]), Assigned(&["10.0.0.0"], "p"))),
        ("same port and protocol gets its own address", Assign(svc("ns/dns-tcp2").share("dns").ports(&[(53, Tcp)]), Assigned(&["10.0.0.1"], "p"))),
        ("no key, no sharing", Assign(svc("ns/web"), Assigned(&["10.0.0.2"], "p"))),
        ("requested with a port clash", Assign(svc("ns/x").share("dns").ports(&[(53, Udp)]).ask_ips(&["10.0.0.0"]),
            Failed(E::SharingPortConflict { ip: ip("10.0.0.0"), with: key("ns/dns-udp"), port: 53, protocol: Udp }))),
        ("requested with another key", Assign(svc("ns/y").share("other").ports(&[(8080, Tcp)]).ask_ips(&["10.0.0.0"]),
            Failed(E::RequestedIpInUse { ip: ip("10.0.0.0"), by: key("ns/dns-tcp") }))),
        ("requested with another traffic policy", Assign(svc("ns/z").share("dns").ports(&[(99, Tcp)]).local(&[("app", "z")]).ask_ips(&["10.0.0.0"]),
            Failed(E::SharingPolicyConflict { ip: ip("10.0.0.0"), with: key("ns/dns-tcp") }))),
        ("the first holder leaves", Release("ns/dns-tcp", Retry(&["ns/x", "ns/y", "ns/z"]))),
        ("the other holder keeps the address", Assign(svc("ns/dns-udp").share("dns").ports(&[(53, Udp)]), Unchanged(&["10.0.0.0"]))),
        ("a key-less Service still cannot take it", Assign(svc("ns/w").ask_ips(&["10.0.0.0"]),
            Failed(E::RequestedIpInUse { ip: ip("10.0.0.0"), by: key("ns/dns-udp") }))),
        ("the last holder leaves", Release("ns/dns-udp", Retry(&["ns/w", "ns/x", "ns/y", "ns/z"]))),
        ("now it is free", Assign(svc("ns/w").ask_ips(&["10.0.0.0"]), Assigned(&["10.0.0.0"], "p"))),
    ]);
}

#[test]
#[rustfmt::skip]
fn local_services_share_only_with_the_same_pod_selector() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/30"])]);
    run(&mut a, vec![
        ("first", Assign(svc("ns/a").share("k").local(&[("app", "x")]), Assigned(&["10.0.0.0"], "p"))),
        ("same selector joins", Assign(svc("ns/b").share("k").local(&[("app", "x")]).ports(&[(81, Protocol::Tcp)]), Assigned(&["10.0.0.0"], "p"))),
        ("other selector gets its own", Assign(svc("ns/c").share("k").local(&[("app", "y")]).ports(&[(82, Protocol::Tcp)]), Assigned(&["10.0.0.1"], "p"))),
        ("cluster policy gets its own", Assign(svc("ns/d").share("k").ports(&[(83, Protocol::Tcp)]), Assigned(&["10.0.0.2"], "p"))),
        ("a clash after an edit costs the editor its address", Assign(svc("ns/b").share("k").local(&[("app", "x")]).ports(&[(80, Protocol::Tcp)]),
            Changed(&["10.0.0.0"], &["10.0.0.3"], R::SharingNoLongerAllowed { ip: ip("10.0.0.0"), with: key("ns/a") }))),
        ("the other keeps it", Assign(svc("ns/a").share("k").local(&[("app", "x")]), Unchanged(&["10.0.0.0"]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn a_restart_with_pending_services_first_in_event_order_changes_nothing() {
    // MetalLB regression: after a restart, Services without an address were processed before
    // those with one and took their addresses.
    let pools = vec![pool("p", &["10.0.0.0/29"])];
    let assigned = vec![svc("ns/b").current(&["10.0.0.0"]), svc("ns/a").current(&["10.0.0.5"]), svc("ns/c").current(&["10.0.0.2"])];
    let pending = [svc("ns/p1"), svc("ns/p2"), svc("ns/p3")];
    let mut a = Allocator::from_snapshot(pools, pending.iter().chain(&assigned).cloned().collect());
    run(&mut a, vec![
        ("pending first", Assign(pending[0].clone(), Assigned(&["10.0.0.1"], "p"))),
        ("pending second", Assign(pending[1].clone(), Assigned(&["10.0.0.3"], "p"))),
        ("pending third", Assign(pending[2].clone(), Assigned(&["10.0.0.4"], "p"))),
        ("b keeps .0", Assign(assigned[0].clone(), Unchanged(&["10.0.0.0"]))),
        ("a keeps .5", Assign(assigned[1].clone(), Unchanged(&["10.0.0.5"]))),
        ("c keeps .2", Assign(assigned[2].clone(), Unchanged(&["10.0.0.2"]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn deleting_one_service_changes_no_other_service_address() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/29"])]);
    run(&mut a, vec![
        ("a", Assign(svc("ns/a"), Assigned(&["10.0.0.0"], "p"))),
        ("b", Assign(svc("ns/b"), Assigned(&["10.0.0.1"], "p"))),
        ("c", Assign(svc("ns/c"), Assigned(&["10.0.0.2"], "p"))),
        ("delete b", Release("ns/b", Retry(&[]))),
        ("a again", Assign(svc("ns/a"), Unchanged(&["10.0.0.0"]))),
        ("c again", Assign(svc("ns/c"), Unchanged(&["10.0.0.2"]))),
        ("delete a", Release("ns/a", Retry(&[]))),
        ("c still", Assign(svc("ns/c"), Unchanged(&["10.0.0.2"]))),
        ("a newcomer takes the lowest hole", Assign(svc("ns/d"), Assigned(&["10.0.0.0"], "p"))),
    ]);
}

#[test]
#[rustfmt::skip]
fn a_restart_keeps_every_valid_address_and_reports_the_invalid_ones() {
    let pools = vec![pool("p", &["10.0.0.0/29"]), pool("v6", &["fd00::/64"])];
    let services = vec![
        svc("ns/a").current(&["10.0.0.3"]),
        svc("ns/b").current(&["10.0.0.3"]),
        svc("ns/gone").current(&["192.0.2.1"]),
        svc("ns/v6").families(&[V6], FamilyPolicy::SingleStack).current(&["fd00::1234"]),
    ];
    let mut a = Allocator::from_snapshot(pools, services.clone());
    run(&mut a, vec![
        ("the lower key keeps a contested address", Assign(services[1].clone(),
            Changed(&["10.0.0.3"], &["10.0.0.0"], R::SharingNoLongerAllowed { ip: ip("10.0.0.3"), with: key("ns/a") }))),
        ("a keeps it", Assign(services[0].clone(), Unchanged(&["10.0.0.3"]))),
        ("an address outside every pool is replaced", Assign(services[2].clone(),
            Changed(&["192.0.2.1"], &["10.0.0.1"], R::NotInAnyPool { ip: ip("192.0.2.1") }))),
        ("any valid address is kept, not only the lowest", Assign(services[3].clone(), Unchanged(&["fd00::1234"]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn a_pool_change_releases_only_addresses_that_became_invalid() {
    let p = || pool("p", &["10.0.0.0/29"]);
    let q = || pool("q", &["10.0.1.0/29"]).priority(9);
    let mut a = pools_of(vec![p(), q()]);
    run(&mut a, vec![
        ("a from the prioritised pool", Assign(svc("ns/a"), Assigned(&["10.0.1.0"], "q"))),
        ("b too", Assign(svc("ns/b"), Assigned(&["10.0.1.1"], "q"))),
        ("c names p", Assign(svc("ns/c").ask_pool("p"), Assigned(&["10.0.0.0"], "p"))),
        ("q shrinks", SetPools(vec![p(), pool("q", &["10.0.1.1/32"]).priority(9)], Invalidated(&["ns/a"]))),
        ("a moves, saying why", Assign(svc("ns/a"), Changed(&["10.0.1.0"], &["10.0.0.1"], R::NotInAnyPool { ip: ip("10.0.1.0") }))),
        ("b is untouched", Assign(svc("ns/b"), Unchanged(&["10.0.1.1"]))),
        ("q stops admitting ns", SetPools(vec![p(), pool("q", &["10.0.1.1/32"]).priority(9).namespaces(&["other"])], Invalidated(&["ns/b"]))),
        ("b moves, saying why", Assign(svc("ns/b"), Changed(&["10.0.1.1"], &["10.0.0.2"], R::PoolNoLongerAdmits { ip: ip("10.0.1.1"), pool: "q".into() }))),
        ("p is deleted", SetPools(vec![pool("q", &["10.0.1.1/32"]).namespaces(&["other"])], Invalidated(&["ns/a", "ns/b", "ns/c"]))),
        ("a loses its address", Assign(svc("ns/a"), Revoked(&["10.0.0.1"], R::NotInAnyPool { ip: ip("10.0.0.1") }, E::NoPoolAdmitsService))),
        ("c loses its address", Assign(svc("ns/c").ask_pool("p"), Revoked(&["10.0.0.0"], R::NotInAnyPool { ip: ip("10.0.0.0") }, E::UnknownPool { pool: "p".into() }))),
        ("after that, b just fails", Assign(svc("ns/b"), Revoked(&["10.0.0.2"], R::NotInAnyPool { ip: ip("10.0.0.2") }, E::NoPoolAdmitsService))),
        ("and fails plainly the next time", Assign(svc("ns/b"), Failed(E::NoPoolAdmitsService))),
    ]);
}

#[test]
#[rustfmt::skip]
fn a_held_back_pool_keeps_existing_addresses_and_gives_nothing_new() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/29"])]);
    run(&mut a, vec![
        ("a", Assign(svc("ns/a"), Assigned(&["10.0.0.0"], "p"))),
        ("p is held back", SetPools(vec![pool("p", &["10.0.0.0/29"]).not_ready()], Invalidated(&[]))),
        ("a keeps its address", Assign(svc("ns/a"), Unchanged(&["10.0.0.0"]))),
        ("nothing new automatically", Assign(svc("ns/b"), Failed(E::NoPoolAdmitsService))),
        ("nothing new by name", Assign(svc("ns/c").ask_pool("p"), Failed(E::PoolNotReady { pool: "p".into() }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn the_oldest_pool_owns_addresses_where_pools_overlap() {
    let pools = vec![
        pool("old", &["10.0.0.0/25"]).created(100),
        pool("new", &["10.0.0.0/24"]).created(200).not_ready(),
    ];
    let x = svc("ns/x").current(&["10.0.0.200"]);
    let z = svc("ns/z").current(&["10.0.0.5"]);
    let mut a = Allocator::from_snapshot(pools, vec![x.clone(), z.clone()]);
    run(&mut a, vec![
        ("an address only the held-back pool has is kept", Assign(x.clone(), Unchanged(&["10.0.0.200"]))),
        ("a shared address belongs to the old pool", Assign(z.clone(), Unchanged(&["10.0.0.5"]))),
        ("no new address from the held-back pool", Assign(svc("ns/y").ask_ips(&["10.0.0.201"]), Failed(E::PoolNotReady { pool: "new".into() }))),
    ]);
    assert_eq!(a.assignment(&key("ns/x")).unwrap().pool, "new");
    assert_eq!(a.assignment(&key("ns/z")).unwrap().pool, "old");
}

#[test]
#[rustfmt::skip]
fn waiting_services_are_named_when_addresses_are_freed() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.1/32"])]);
    run(&mut a, vec![
        ("a", Assign(svc("ns/a"), Assigned(&["10.0.0.1"], "p"))),
        ("b waits", Assign(svc("ns/b"), Failed(E::PoolExhausted { pools: vec!["p".into()], family: V4 }))),
        ("a misconfigured Service does not wait", Assign(svc("ns/c").ask_pool("nope"), Failed(E::UnknownPool { pool: "nope".into() }))),
    ]);
    assert_eq!(a.waiting(), vec![key("ns/b")]);
    let grown = a.set_pools(vec![pool("p", &["10.0.0.1-10.0.0.2"])]);
    assert_eq!(grown.retry, vec![key("ns/b")], "a grown pool is worth a retry");
    run(&mut a, vec![
        ("b gets the new address", Assign(svc("ns/b"), Assigned(&["10.0.0.2"], "p"))),
        ("d waits", Assign(svc("ns/d"), Failed(E::PoolExhausted { pools: vec!["p".into()], family: V4 }))),
        ("a leaves", Release("ns/a", Retry(&["ns/d"]))),
        ("d gets it", Assign(svc("ns/d"), Assigned(&["10.0.0.1"], "p"))),
        ("nobody waits", Release("ns/b", Retry(&[]))),
    ]);
}

#[test]
#[rustfmt::skip]
fn dual_stack_services_are_completed_from_their_own_pool() {
    let d = |v6: &str| pool("d", &["10.0.0.0/30", v6]);
    let mut a = pools_of(vec![d("fd00::/126"), pool("other", &["fd99::/64"]).priority(1)]);
    let x = svc("ns/x").families(&[V4, V6], FamilyPolicy::RequireDualStack);
    let y1 = svc("ns/y").families(&[V4], FamilyPolicy::SingleStack);
    let y2 = svc("ns/y").families(&[V4, V6], FamilyPolicy::RequireDualStack);
    run(&mut a, vec![
        ("x gets both", Assign(x.clone(), Assigned(&["10.0.0.0", "fd00::"], "d"))),
        ("the v6 range shrinks", SetPools(vec![d("fd00::1-fd00::3"), pool("other", &["fd99::/64"]).priority(1)], Invalidated(&["ns/x"]))),
        ("x keeps v4, gets a new v6 from the same pool", Assign(x.clone(),
            Changed(&["10.0.0.0", "fd00::"], &["10.0.0.0", "fd00::1"], R::NotInAnyPool { ip: ip("fd00::") }))),
        ("y single stack", Assign(y1.clone(), Assigned(&["10.0.0.1"], "d"))),
        ("y turns dual: an address is added", Assign(y2.clone(), Changed(&["10.0.0.1"], &["10.0.0.1", "fd00::2"], R::Completed { ip: ip("fd00::2") }))),
        ("y turns single again", Assign(y1.clone(), Changed(&["10.0.0.1", "fd00::2"], &["10.0.0.1"], R::FamilyNotWanted { ip: ip("fd00::2") }))),
    ]);
}

#[test]
#[rustfmt::skip]
fn a_sole_holder_keeps_its_address_when_its_sharing_key_changes() {
    let mut a = pools_of(vec![pool("p", &["10.0.0.0/30"])]);
    run(&mut a, vec![
        ("a under k1", Assign(svc("ns/a").share("k1"), Assigned(&["10.0.0.0"], "p"))),
        ("a moves to k2 and keeps it", Assign(svc("ns/a").share("k2"), Unchanged(&["10.0.0.0"]))),
        ("k1 no longer leads there", Assign(svc("ns/b").share("k1").ports(&[(81, Protocol::Tcp)]), Assigned(&["10.0.0.1"], "p"))),
        ("k2 does", Assign(svc("ns/c").share("k2").ports(&[(82, Protocol::Tcp)]), Assigned(&["10.0.0.0"], "p"))),
    ]);
}

#[test]
#[rustfmt::skip]
fn results_carry_the_pool_ip_mode_and_statistics_never_go_negative() {
    let mut a = pools_of(vec![
        pool("big", &["fd00::/64"]).proxy(),
        pool("all", &["::/0"]).manual(),
    ]);
    let v6 = |k| svc(k).families(&[V6], FamilyPolicy::SingleStack);
    let got = a.assign(&v6("ns/a"));
    assert_eq!(got.assignment().unwrap().ip_mode, IpMode::Proxy);
    a.assign(&v6("ns/b"));
    a.assign(&v6("ns/c").ask_pool("all").ask_ips(&["ffff::1"]));
    let big = a.pool_stats("big").unwrap();
    assert_eq!(big.v6, FamilyStats { assigned: 2, available: (1u128 << 64) - 2 });
    assert_eq!(big.v4, FamilyStats::default());
    let all = a.pool_stats("all").unwrap();
    assert_eq!(all.v6.assigned, 3);
    assert_eq!(all.v6.available, u128::MAX - 3, "2^128 saturates at u128::MAX");
    assert_eq!(a.pool_stats("nope"), None);
}

#[test]
#[rustfmt::skip]
fn every_refusal_says_how_to_fix_it() {
    let errors = [
        E::NoPoolAdmitsService,
        E::PoolExhausted { pools: vec!["p".into()], family: V4 },
        E::RequestedIpInUse { ip: ip("10.0.0.1"), by: key("ns/a") },
        E::ConflictingRequestedIps,
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(msg.contains(':'), "{msg}");
        let advice = msg.rsplit(':').next().unwrap();
        assert!(
            ["add", "remove", "request", "delete", "name", "give"].iter().any(|w| advice.contains(w)),
            "no advice in `{msg}`"
        );
    }
    assert_eq!(
        E::RequestedIpInUse { ip: ip("10.0.0.1"), by: key("ns/a") }.to_string(),
        "requested address 10.0.0.1 is in use by ns/a: request another address, or give both Services the same allow-shared-ip key"
    );
}

#[test]
#[rustfmt::skip]
fn narrowing_a_dual_stack_service_to_one_requested_address_keeps_only_that_one() {
    let mut a = pools_of(vec![pool("d", &["10.0.0.0/30", "fd00::/126"])]);
    let x = svc("ns/x").families(&[V4, V6], FamilyPolicy::PreferDualStack);
    run(&mut a, vec![
        ("both families", Assign(x.clone(), Assigned(&["10.0.0.0", "fd00::"], "d"))),
        ("only the IPv4 one is asked for", Assign(x.clone().ask_ips(&["10.0.0.0"]),
            Changed(&["10.0.0.0", "fd00::"], &["10.0.0.0"], R::RequestChanged { ip: ip("fd00::") }))),
        ("and it stays so", Assign(x.clone().ask_ips(&["10.0.0.0"]), Unchanged(&["10.0.0.0"]))),
    ]);
}
