//! Failover on a real segment: three node namespaces run `l2-probe` in gossip mode (SWIM over
//! UDP with a shared key, owner elected among live speakers); the client namespace watches the
//! announcements with `l2-watch` and resolves with `arping` / `ndisc6`.
//!
//! Needs root, `ip`, `arping`, `ndisc6` and `bash`; each test prints why and returns when one
//! is missing.

mod l2_lab;

use ferrolb_speaker::l2::election;
use l2_lab::{Lab, NODE_NAMES};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const V4: &str = "10.99.0.100";
const V6: &str = "fd00:99::100";

/// Waits until node `i`'s probe reports `live` as its live set; returns its owned list.
fn wait_live(lab: &Lab, i: usize, live: &[&str], within: Duration) -> String {
    let want = format!("live {}", live.join(","));
    let deadline = Instant::now() + within;
    loop {
        let out = lab.probe_output(i);
        if let Some(line) = out.lines().rev().find(|l| l.starts_with("owned "))
            && line.ends_with(&want)
        {
            return line.split_whitespace().nth(2).unwrap_or("-").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "node {i} never saw {want}; output:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_cluster(lab: &mut Lab) {
    for i in 0..3 {
        lab.start_gossip_probe(i, &[V4.into(), V6.into()]);
    }
    for i in 0..3 {
        wait_live(lab, i, &NODE_NAMES, Duration::from_secs(10));
    }
}

#[test]
fn a_killed_owner_is_replaced_and_the_client_hears_the_new_owner_announce() {
    let Some(mut lab) = Lab::new(3) else { return };
    start_cluster(&mut lab);
    let v4: IpAddr = V4.parse().unwrap();
    let v6: IpAddr = V6.parse().unwrap();
    let ranking = election::ranking(v4, NODE_NAMES);
    let owner = NODE_NAMES.iter().position(|n| *n == ranking[0]).unwrap();
    let next = NODE_NAMES.iter().position(|n| *n == ranking[1]).unwrap();
    assert_eq!(lab.resolve(v4), BTreeSet::from([lab.node_mac(owner)]));

    lab.start_watch(&[V4.into(), V6.into()]);
    lab.kill_probe(owner);
    let killed = Instant::now();
    let next_mac = lab.node_mac(next);
    let heard = loop {
        let out = lab.watch_output();
        if out
            .lines()
            .any(|l| l.contains(V4) && l.ends_with(&next_mac))
        {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "no announcement from the new owner:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    eprintln!("new owner heard {heard:?} after SIGKILL");
    assert!(heard < Duration::from_secs(2));
    assert_eq!(lab.resolve(v4), BTreeSet::from([next_mac.clone()]));
    let v6_owner = election::owner(
        v6,
        NODE_NAMES
            .iter()
            .copied()
            .filter(|n| *n != NODE_NAMES[owner]),
    )
    .unwrap();
    let v6_idx = NODE_NAMES.iter().position(|n| *n == v6_owner).unwrap();
    assert_eq!(lab.resolve(v6), BTreeSet::from([lab.node_mac(v6_idx)]));
}

#[test]
fn a_returning_owner_takes_its_addresses_back_and_the_stand_in_lets_go() {
    let Some(mut lab) = Lab::new(3) else { return };
    start_cluster(&mut lab);
    let v4: IpAddr = V4.parse().unwrap();
    let ranking = election::ranking(v4, NODE_NAMES);
    let owner = NODE_NAMES.iter().position(|n| *n == ranking[0]).unwrap();
    let next = NODE_NAMES.iter().position(|n| *n == ranking[1]).unwrap();
    lab.kill_probe(owner);
    let survivors: Vec<&str> = NODE_NAMES
        .iter()
        .copied()
        .filter(|n| *n != NODE_NAMES[owner])
        .collect();
    wait_live(&lab, next, &survivors, Duration::from_secs(5));
    lab.start_gossip_probe(owner, &[V4.into(), V6.into()]);
    let owned = wait_live(&lab, next, &NODE_NAMES, Duration::from_secs(10));
    assert!(!owned.contains(V4), "the stand-in still owns {V4}: {owned}");
    wait_live(&lab, owner, &NODE_NAMES, Duration::from_secs(10));
    assert_eq!(lab.resolve(v4), BTreeSet::from([lab.node_mac(owner)]));
}

#[test]
fn unauthenticated_gossip_datagrams_are_dropped_and_counted() {
    let Some(mut lab) = Lab::new(3) else { return };
    start_cluster(&mut lab);
    let target = format!("/dev/udp/{}/7946", lab.node_ip(0));
    for payload in [
        "hello",
        "FLB1 forged datagram without a valid tag, long enough to check",
    ] {
        let cmd = format!("printf '%s' '{payload}' > {target}");
        let out = l2_lab::run("ip", &["netns", "exec", lab.client(), "bash", "-c", &cmd]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let out = lab.probe_output(0);
        let failures = out
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("gossip "))
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .and_then(|v| v["auth_failures"].as_u64())
            .unwrap_or(0);
        if failures >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "forged datagrams not counted:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Membership is unchanged.
    for i in 0..3 {
        wait_live(&lab, i, &NODE_NAMES, Duration::from_secs(1));
    }
}
