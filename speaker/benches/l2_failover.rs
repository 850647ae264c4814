//! Layer-2 failover benchmark in network namespaces: three nodes run `l2-probe` in gossip mode,
//! the client runs `l2-watch`. Each run SIGKILLs the owner of 10.99.0.100 and measures, on the
//! client, the time until the new owner's gratuitous ARP arrives; then restarts the old owner
//! and measures the time until only one node answers again (the stand-in let go).
//!
//! ```text
//! cargo bench -p ferrolb-speaker --bench l2_failover        # FAILOVER_RUNS=20 by default
//! ```
//! Needs root, `ip`, `arping`, `ndisc6`, `bash`, `taskset`, `iptables`. Prints the
//! distributions; target: median at most 300 ms and every run at most 500 ms (it exits 1 past
//! it, after printing everything). It drives `l2-probe` (the speaker's layer-2 election and
//! gossip without the API server), not `ferrolb-speaker`; the side-by-side bench measures the
//! real speaker in the lab. Then, for
//! `FAILOVER_STRESS_S` (60; 0 skips it) each, it saturates every core from the owner's
//! namespace and drops 10 % of the owner's packets, and prints how often the owner lost its
//! address (a false failover) and how often another node saw it down.

#[path = "../tests/l2_lab/mod.rs"]
mod l2_lab;

use ferrolb_speaker::l2::election;
use l2_lab::{Lab, NODE_NAMES, run};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const V4: &str = "10.99.0.100";
const V6: &str = "fd00:99::100";

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The last `owned` line of node `i`: (unix nanos, owned list, live list).
fn last_owned(lab: &Lab, i: usize) -> Option<(u128, String, String)> {
    let out = lab.probe_output(i);
    let line = out.lines().rev().find(|l| l.starts_with("owned "))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    Some((
        w.get(1)?.parse().ok()?,
        w.get(2)?.to_string(),
        w.get(4)?.to_string(),
    ))
}

fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// First watch line at or after byte `from` claiming `V4` with `mac`: its unix nanos.
fn heard_from(lab: &Lab, from: usize, mac: &str) -> Option<u128> {
    let out = lab.watch_output();
    out.get(from..)?
        .lines()
        .find(|l| l.contains(&format!(" {V4} ")) && l.ends_with(mac))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

fn summary(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name}: n={} min={:.0} ms median={:.0} ms p90={:.0} ms max={:.0} ms",
        ms.len(),
        ms[0],
        pick(0.5),
        pick(0.9),
        ms[ms.len() - 1]
    );
    println!(
        "  runs (ms): {}",
        ms.iter()
            .map(|m| format!("{m:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn main() {
    ferrolb_tests::provenance::print();
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runs: usize = std::env::var("FAILOVER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let Some(mut lab) = Lab::new(3) else { return };
    let all = NODE_NAMES.join(",");
    for i in 0..3 {
        lab.start_gossip_probe(i, &[V4.into(), V6.into()]);
    }
    for i in 0..3 {
        wait_until("the cluster to form", Duration::from_secs(10), || {
            last_owned(&lab, i).is_some_and(|(_, _, live)| live == all)
        });
    }
    lab.start_watch(&[V4.into(), V6.into()]);
    let ranking = election::ranking(V4.parse().unwrap(), NODE_NAMES);
    let owner = NODE_NAMES.iter().position(|n| *n == ranking[0]).unwrap();
    let next = NODE_NAMES.iter().position(|n| *n == ranking[1]).unwrap();
    let (owner_mac, next_mac) = (lab.node_mac(owner), lab.node_mac(next));
    let (mut failover, mut settle, mut overlap) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let mark = lab.watch_output().len();
        let killed_at = now_nanos();
        lab.kill_probe(owner);
        wait_until(
            "the new owner's announcement",
            Duration::from_secs(5),
            || heard_from(&lab, mark, &next_mac).is_some(),
        );
        let heard = heard_from(&lab, mark, &next_mac).unwrap();
        failover.push((heard - killed_at) as f64 / 1e6);

        // Let the stand-in settle, then bring the owner back.
        std::thread::sleep(Duration::from_millis(300));
        let mark = lab.watch_output().len();
        let restarted_at = now_nanos();
        lab.start_gossip_probe(owner, &[V4.into(), V6.into()]);
        wait_until("the stand-in to let go", Duration::from_secs(10), || {
            last_owned(&lab, next).is_some_and(|(t, owned, live)| {
                t > restarted_at && live == all && !owned.contains(V4)
            })
        });
        wait_until("the owner's announcement", Duration::from_secs(5), || {
            heard_from(&lab, mark, &owner_mac).is_some()
        });
        let (released, _, _) = last_owned(&lab, next).unwrap();
        let taken = heard_from(&lab, mark, &owner_mac).unwrap();
        settle.push((released - restarted_at) as f64 / 1e6);
        overlap.push(released.saturating_sub(taken) as f64 / 1e6);
        for i in 0..3 {
            wait_until("the cluster to re-form", Duration::from_secs(10), || {
                last_owned(&lab, i).is_some_and(|(_, _, live)| live == all)
            });
        }
        eprintln!(
            "run {run}: failover {:.0} ms, settle {:.0} ms",
            failover[run], settle[run]
        );
    }
    let missed = missed_target(&failover);
    summary(
        "failover: SIGKILL of the owner to the new owner's gratuitous ARP at the client",
        failover,
    );
    summary(
        "return: restart of the old owner to the stand-in releasing (one answerer again)",
        settle,
    );
    summary(
        "both answering: owner's announcement heard to stand-in release",
        overlap,
    );
    let stress_s: u64 = std::env::var("FAILOVER_STRESS_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    if stress_s > 0 {
        let within = Duration::from_secs(stress_s);
        for fault in [Fault::Cpu, Fault::Loss] {
            let (lost, declared) = stress(&lab, owner, fault, within);
            println!(
                "no false failover, {}: {stress_s} s: the owner lost its address {lost} time(s); \
                 another node saw it down {declared} time(s)",
                fault.describe()
            );
        }
    }
    if let Some(why) = missed {
        eprintln!("l2_failover: target missed: {why}");
        std::process::exit(1);
    }
}

/// The failover target: median at most 300 ms, every run at most 500 ms. Why it was missed, if
/// it was.
fn missed_target(ms: &[f64]) -> Option<String> {
    let mut sorted = ms.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[(sorted.len() - 1) / 2];
    let max = sorted[sorted.len() - 1];
    (median > 300.0 || max > 500.0)
        .then(|| format!("median {median:.0} ms (target 300), max {max:.0} ms (target 500)"))
}

/// What [`stress`] does to the owner for its duration.
#[derive(Clone, Copy)]
enum Fault {
    /// Busy loops on every core, started in the owner's namespace (the nodes share the cores).
    Cpu,
    /// 10 % of the packets to and from the owner's `eth0` dropped (iptables `statistic`).
    Loss,
}

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Fault::Cpu => "every core busy (2 busy loops per core) for",
            Fault::Loss => "10 % of the owner's packets dropped each way for",
        }
    }
}

/// Applies `fault` to node `owner` for `within`; returns how many times another node took
/// the address (a false failover), and how many times another node's live set lost the owner.
fn stress(lab: &Lab, owner: usize, fault: Fault, within: Duration) -> (usize, usize) {
    let ns = lab.node(owner).to_string();
    let marks: Vec<usize> = (0..3).map(|i| lab.probe_output(i).len()).collect();
    let mut loops = Vec::new();
    let iptables = |op: &str| {
        for (chain, dir) in [("INPUT", "-i"), ("OUTPUT", "-o")] {
            let out = run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "iptables",
                    op,
                    chain,
                    dir,
                    "eth0",
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    "0.1",
                    "-j",
                    "DROP",
                ],
            );
            assert!(out.status.success(), "iptables {op}: {out:?}");
        }
    };
    match fault {
        Fault::Cpu => {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            for core in 0..2 * cores {
                let core = (core % cores).to_string();
                loops.push(
                    std::process::Command::new("ip")
                        .args(["netns", "exec", &ns, "taskset", "-c", &core, "sh", "-c"])
                        .arg("while :; do :; done")
                        .spawn()
                        .expect("a busy loop starts"),
                );
            }
        }
        Fault::Loss => iptables("-I"),
    }
    std::thread::sleep(within);
    match fault {
        Fault::Cpu => {
            for mut l in loops {
                let _ = l.kill();
                let _ = l.wait();
            }
        }
        Fault::Loss => iptables("-D"),
    }
    // Per other node: times its owned set gained the address, and times its live set lost the
    // owner.
    let (mut lost, mut declared) = (0, 0);
    for i in (0..3).filter(|i| *i != owner) {
        let out = lab.probe_output(i);
        let (mut owned_before, mut live_before) = (false, true);
        for line in out.get(marks[i]..).unwrap_or_default().lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (Some(&"owned"), Some(owned), Some(live)) = (w.first(), w.get(2), w.get(4)) else {
                continue;
            };
            let owned_now = owned.split(',').any(|a| a == V4);
            let live_now = live.split(',').any(|n| n == NODE_NAMES[owner]);
            lost += usize::from(owned_now && !owned_before);
            declared += usize::from(live_before && !live_now);
            (owned_before, live_before) = (owned_now, live_now);
        }
    }
    (lost, declared)
}
