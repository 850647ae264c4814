//! Layer-2 answers on a real segment: three node namespaces and a client namespace on a bridge,
//! the responder (`l2-probe`) in the nodes, `arping` and `ndisc6` in the client.
//!
//! Needs root, `ip`, `arping` and `ndisc6` (Debian: iproute2 iputils-arping ndisc6); each test
//! prints why and returns when one is missing. Namespaces are named after the process id and a
//! counter, and removed by a Drop guard even when an assertion fails.

mod l2_lab;

use ferrolb_speaker::l2::election;
use l2_lab::{Lab, NODE_NAMES};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Starts one probe per node with the addresses the election gives it.
fn start_elected(lab: &mut Lab, addrs: &[IpAddr]) -> BTreeMap<IpAddr, usize> {
    let mut owners = BTreeMap::new();
    for a in addrs {
        let owner = election::owner(*a, NODE_NAMES).unwrap();
        let idx = NODE_NAMES.iter().position(|n| *n == owner).unwrap();
        owners.insert(*a, idx);
    }
    for node in 0..NODE_NAMES.len() {
        let mine: Vec<String> = owners
            .iter()
            .filter(|(_, o)| **o == node)
            .map(|(a, _)| a.to_string())
            .collect();
        lab.start_probe(node, &mine, false);
    }
    lab.wait_for_probes();
    owners
}

#[test]
fn exactly_one_node_answers_for_each_address_with_the_owners_mac() {
    let Some(mut lab) = Lab::new(3) else { return };
    let addrs = [
        ip("10.99.0.100"),
        ip("10.99.0.101"),
        ip("10.99.0.102"),
        ip("fd00:99::100"),
        ip("fd00:99::101"),
        ip("fd00:99::102"),
    ];
    let owners = start_elected(&mut lab, &addrs);
    for (a, node) in &owners {
        let want: BTreeSet<String> = [lab.node_mac(*node)].into();
        let got = lab.resolve(*a);
        assert_eq!(
            got, want,
            "{a} should be answered by {} only",
            NODE_NAMES[*node]
        );
    }
}

#[test]
fn an_address_nobody_owns_gets_no_answer() {
    let Some(mut lab) = Lab::new(3) else { return };
    start_elected(&mut lab, &[ip("10.99.0.100"), ip("fd00:99::100")]);
    assert!(lab.resolve(ip("10.99.0.200")).is_empty());
    assert!(lab.resolve(ip("fd00:99::200")).is_empty());
    let stats: Vec<_> = (0..3).map(|n| lab.probe_stats(n)).collect();
    let not_owned: u64 = stats.iter().map(|s| s["not_owned"].as_u64().unwrap()).sum();
    assert!(
        not_owned >= 3,
        "the requests were seen and refused: {stats:?}"
    );
}

#[test]
fn a_flood_of_malformed_and_valid_frames_leaves_the_responder_answering() {
    let Some(mut lab) = Lab::new(1) else { return };
    lab.start_probe(0, &["10.99.0.100".into(), "fd00:99::100".into()], false);
    lab.wait_for_probes();
    let flood = lab.flood(100_000, "10.99.0.100", "fd00:99::100");
    let sent: u64 = flood["sent"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(sent, 100_000, "{flood}");
    assert!(lab.probe_alive(0), "the responder died under the flood");
    // Valid requests in the flood were answered, and still are after it.
    let want: BTreeSet<String> = [lab.node_mac(0)].into();
    assert_eq!(lab.resolve(ip("10.99.0.100")), want);
    assert_eq!(lab.resolve(ip("fd00:99::100")), want);
    std::thread::sleep(Duration::from_millis(700));
    // Random IPv6 frames stay in the kernel (the socket filter passes only solicitations), so
    // they are not counted here; malformed ARP and solicitations are.
    let s = lab.probe_stats(0);
    eprintln!("flood: {flood}\nresponder: {s}");
    assert!(s["malformed"].as_u64().unwrap() > 10_000, "{s}");
    assert!(s["arp_replies"].as_u64().unwrap() > 1_000, "{s}");
    assert!(s["na_replies"].as_u64().unwrap() > 1_000, "{s}");
    for reason in [
        "truncated",
        "ndp_bad_checksum",
        "ndp_hop_limit",
        "ndp_multicast_target",
        "ipv6_length_mismatch",
        "arp_unsupported_format",
    ] {
        assert!(
            s["drops"][reason].as_u64().unwrap_or(0) > 0,
            "no {reason} drop counted: {s}"
        );
    }
}

#[test]
fn a_new_owner_announces_itself_and_the_old_one_stops_answering_at_once() {
    let Some(mut lab) = Lab::new(2) else { return };
    lab.start_probe(0, &["10.99.0.100".into(), "fd00:99::100".into()], true);
    lab.start_probe(1, &[], true);
    lab.wait_for_probes();
    let (mac0, mac1) = (lab.node_mac(0), lab.node_mac(1));
    assert_eq!(lab.resolve(ip("10.99.0.100")), [mac0.clone()].into());
    assert_eq!(lab.resolve(ip("fd00:99::100")), [mac0.clone()].into());
    // Fill the client's neighbour cache so the announcements have an entry to override.
    lab.client_learn("10.99.0.100");
    lab.client_learn("fd00:99::100");
    assert_eq!(
        lab.client_neigh("10.99.0.100").as_deref(),
        Some(mac0.as_str())
    );
    lab.control(0, "-");
    lab.control(1, "10.99.0.100 fd00:99::100");
    std::thread::sleep(Duration::from_millis(300));
    // The gratuitous ARP and unsolicited NA moved the client's cache without a question.
    assert_eq!(
        lab.client_neigh("10.99.0.100").as_deref(),
        Some(mac1.as_str())
    );
    assert_eq!(
        lab.client_neigh("fd00:99::100").as_deref(),
        Some(mac1.as_str())
    );
    assert_eq!(lab.resolve(ip("10.99.0.100")), [mac1.clone()].into());
    assert_eq!(lab.resolve(ip("fd00:99::100")), [mac1].into());
    let s1 = lab.probe_stats(1);
    assert!(s1["gratuitous_arp"].as_u64().unwrap() >= 2, "{s1}");
    assert!(s1["unsolicited_na"].as_u64().unwrap() >= 1, "{s1}");
}
