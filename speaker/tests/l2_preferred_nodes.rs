//! `preferredNodeSelectors` on a real segment: three node namespaces run `l2-probe` in gossip
//! mode with the same preferences and a short hold-down; the client resolves with `arping`.
//! The preferred node answers; when its speaker is killed another answers; when it returns, the
//! stand-in keeps answering until the hold-down has passed, then the preferred node answers
//! again.
//!
//! Needs root, `ip`, `arping` and `ndisc6`; without them each test prints why and returns, or
//! fails with `FERROLB_REQUIRE_BINARIES=1`.

mod l2_lab;

use ferrolb_speaker::l2::election;
use l2_lab::{Lab, NODE_NAMES};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const V4: &str = "10.99.0.100";
const HOLD_DOWN: Duration = Duration::from_secs(4);

/// The last `owned` line of node `i`'s probe: (owned addresses, live set), once it has one.
fn last_owned(lab: &Lab, i: usize) -> Option<(String, String)> {
    let out = lab.probe_output(i);
    let line = out.lines().rev().find(|l| l.starts_with("owned "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    Some((words.get(2)?.to_string(), words.get(4)?.to_string()))
}

/// Polls until `cond` holds for node `i`'s last `owned` line, or fails after `within`.
fn wait_owned(
    lab: &Lab,
    i: usize,
    within: Duration,
    what: &str,
    cond: impl Fn(&str, &str) -> bool,
) {
    let deadline = Instant::now() + within;
    loop {
        if let Some((owned, live)) = last_owned(lab, i)
            && cond(&owned, &live)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {i}: never {what}; output:\n{}",
            lab.probe_output(i)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `arping` until the client hears exactly `mac` for `ip`.
fn wait_answer(lab: &Lab, ip: IpAddr, mac: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let heard = lab.resolve(ip);
        if heard == BTreeSet::from([mac.to_string()]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ip}: the client heard {heard:?}, not only {mac}"
        );
    }
}

#[test]
fn the_preferred_node_answers_another_stands_in_and_the_preferred_one_answers_again_after_the_hold_down()
 {
    let Some(mut lab) = Lab::new(3) else { return };
    let v4: IpAddr = V4.parse().unwrap();
    // Prefer the node the plain hash ranks last, so only the preference can make it the owner.
    let plain = election::ranking(v4, NODE_NAMES);
    let preferred = NODE_NAMES.iter().position(|n| *n == plain[2]).unwrap();
    let flags = vec![
        "--prefer".to_string(),
        format!("{}=50", NODE_NAMES[preferred]),
        "--hold-down-ms".into(),
        HOLD_DOWN.as_millis().to_string(),
    ];
    for i in 0..3 {
        lab.start_gossip_probe_with(i, &[V4.into()], &flags);
    }
    let everyone = NODE_NAMES.join(",");
    // At the start every speaker holds itself for the hold-down: the preferred node answers
    // once its own has passed.
    wait_owned(
        &lab,
        preferred,
        Duration::from_secs(15),
        "owned the address",
        |o, l| l == everyone && o.contains(V4),
    );
    wait_answer(&lab, v4, &lab.node_mac(preferred), Duration::from_secs(5));

    // Its speaker dies: the best of the others (by the plain hash) answers.
    lab.kill_probe(preferred);
    let stand_in = NODE_NAMES.iter().position(|n| *n == plain[0]).unwrap();
    let survivors: Vec<&str> = NODE_NAMES
        .iter()
        .copied()
        .filter(|n| *n != NODE_NAMES[preferred])
        .collect();
    let survivors = survivors.join(",");
    wait_owned(
        &lab,
        stand_in,
        Duration::from_secs(5),
        "took over",
        |o, l| l == survivors && o.contains(V4),
    );
    wait_answer(&lab, v4, &lab.node_mac(stand_in), Duration::from_secs(5));

    // It comes back: the stand-in sees it live and keeps the address for the hold-down.
    let restarted = Instant::now();
    lab.start_gossip_probe_with(preferred, &[V4.into()], &flags);
    wait_owned(
        &lab,
        stand_in,
        Duration::from_secs(10),
        "saw the preferred node back",
        |_, l| l == everyone,
    );
    let (owned, _) = last_owned(&lab, stand_in).unwrap();
    assert!(owned.contains(V4), "the stand-in let go at once: {owned}");
    assert!(
        restarted.elapsed() < HOLD_DOWN,
        "the check came too late to mean anything"
    );
    assert_eq!(lab.resolve(v4), BTreeSet::from([lab.node_mac(stand_in)]));

    // After the hold-down the preferred node answers again, and the stand-in has let go.
    wait_owned(
        &lab,
        preferred,
        HOLD_DOWN + Duration::from_secs(5),
        "took the address back",
        |o, l| l == everyone && o.contains(V4),
    );
    wait_owned(&lab, stand_in, Duration::from_secs(2), "let go", |o, _| {
        !o.contains(V4)
    });
    let back = restarted.elapsed();
    eprintln!("the preferred node took the address back {back:?} after its restart");
    assert!(
        back >= HOLD_DOWN,
        "it took it back before the hold-down: {back:?}"
    );
    wait_answer(&lab, v4, &lab.node_mac(preferred), Duration::from_secs(5));
}
