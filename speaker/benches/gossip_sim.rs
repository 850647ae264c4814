//! Gossip at scale, simulated: N membership cores (the speaker's, with the default
//! `MembershipConfig`) on an in-process network with virtual time; no sockets, no real clock.
//!
//! For each size, with every datagram lost independently with probability `GOSSIP_SIM_LOSS`
//! and delayed 0.2–1 ms:
//! 1. all members start at once, each given every member as a seed (what the speaker does with
//!    its speaker Pods); **converge** is the virtual time until every member sees all. This
//!    phase gets `GOSSIP_SIM_JOIN_BUDGET_S` of wall time; past it the table says how far it got,
//!    and the next phases run on a cluster started converged instead (every member handed all
//!    others, no traffic);
//! 2. 10 s to settle, then `GOSSIP_SIM_STEADY_S` (60 s unless set) of steady state: **false
//!    positives** are live members that learned they were held down and rejoined with their
//!    next generation, with the down declarations by all observers; **views short of a member**
//!    counts the members whose view lacked a live member after some membership change (what a
//!    failover follows), and those changes; and the **traffic** every member sends
//!    (authenticated datagrams, without UDP/IP headers) per second;
//! 3. `GOSSIP_SIM_KILLS` times, one member is killed without a word: **first** is the time
//!    until one member sees it down, **all** until every other member does (median and, over
//!    the kills, p99 when there are at least 100 of them, else the max; the table says which),
//!    and **each member** the time until each other member sees it down (median and p99 over
//!    every (kill, member) pair; the max instead below 100 pairs). A member that had not within
//!    60 s counts as 60 s and is reported.
//!
//! ```text
//! cargo bench -p ferrolb-speaker --bench gossip_sim
//! GOSSIP_SIM_SIZES=1000,5000 GOSSIP_SIM_LOSS=0.01 GOSSIP_SIM_KILLS=5 GOSSIP_SIM_SEED=1
//! GOSSIP_SIM_JOIN_BUDGET_S=120 GOSSIP_SIM_BUDGET_S=600 GOSSIP_SIM_STEADY_S=60
//! (defaults; a budget of 0 means none)
//! ```
//!
//! Sizes run in parallel, one thread each. Simulating N members costs far more than N times
//! one member: foca keeps members and pending updates in vectors it scans for every message
//! and every update, so one simulated second costs about N² and the join storm (N members each
//! learning N members) about N³. Hence the budgets: `GOSSIP_SIM_BUDGET_S` bounds a whole size;
//! what did not run is said so.

use ferrolb_speaker::membership::sim::{Change, Cluster, NetConfig};
use ferrolb_speaker::membership::{GossipKey, MembershipConfig};
use std::time::{Duration, Instant};

const SETTLE: Duration = Duration::from_secs(10);
const CONVERGE_LIMIT: Duration = Duration::from_secs(600);
const DETECT_LIMIT: Duration = Duration::from_secs(60);
/// Past every phase: timers due later (foca forgets down members after 24 h) are dropped.
const HORIZON: Duration = Duration::from_secs(3_600);

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one size measured; `None` where the phase did not run or not to its end.
struct Row {
    n: usize,
    /// Virtual time to converge, or how far it got: (virtual time, members that saw all).
    converge: Result<Duration, (Duration, usize)>,
    /// Steady state and kills ran on a cluster started converged.
    converged_start: bool,
    converge_kib_per_node: f64,
    steady: Option<Steady>,
    first: Vec<Duration>,
    all: Vec<Duration>,
    /// Per kill and surviving member: when it saw the dead member down.
    each: Vec<Duration>,
    undetected: usize,
    /// Why the run stopped early.
    stopped: Option<String>,
    wall: Duration,
}

struct Steady {
    fp_members: u64,
    fp_declarations: u64,
    /// Members whose view lacked a live member at some point, and how many membership changes
    /// left a view short.
    short_observers: usize,
    short_views: u64,
    bytes_per_node_s: f64,
    datagrams_per_node_s: f64,
}

struct Budget {
    start: Instant,
    limit: Option<Duration>,
}

impl Budget {
    fn spent(&self) -> bool {
        self.limit.is_some_and(|l| self.start.elapsed() > l)
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// Samples needed before the tail is given as a p99 rather than the max.
const P99_SAMPLES: usize = 100;

/// The p99 (nearest rank) of at least [`P99_SAMPLES`] samples, else the max; and which.
fn tail(v: &[Duration]) -> (Duration, &'static str) {
    let mut v = v.to_vec();
    v.sort();
    if v.len() >= P99_SAMPLES {
        let rank = (v.len() * 99).div_ceil(100);
        (v[rank - 1], "p99")
    } else {
        (v[v.len() - 1], "max")
    }
}

fn bytes_total(c: &Cluster) -> u64 {
    (0..c.len()).map(|i| c.bytes_sent(i)).sum()
}

fn datagrams_total(c: &Cluster) -> u64 {
    (0..c.len()).map(|i| c.datagrams_sent(i)).sum()
}

/// (members that rejoined, down declarations) summed over the running members.
fn down_counters(c: &Cluster) -> (u64, u64) {
    (0..c.len())
        .filter_map(|i| c.member(i))
        .map(|m| (m.counters().rejoined, m.counters().declared_down))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// Runs the join phase; `Err` when the budget ran out first.
fn converge(
    c: &mut Cluster,
    row: &mut Row,
    budget: &Budget,
    join_budget: Option<Duration>,
) -> bool {
    let n = c.len();
    let start = Instant::now();
    let mut full = vec![false; n];
    let mut full_count = 0usize;
    while c.now() < CONVERGE_LIMIT {
        c.run_for(Duration::from_millis(100), |i, change, m, _| {
            if change == Change::Members {
                let now_full = m.live_count() == n;
                if now_full != full[i] {
                    full[i] = now_full;
                    if now_full {
                        full_count += 1;
                    } else {
                        full_count -= 1;
                    }
                }
            }
        });
        row.converge = Err((c.now(), full_count));
        row.converge_kib_per_node = bytes_total(c) as f64 / 1024.0 / n as f64;
        if full_count == n {
            row.converge = Ok(c.now());
            return true;
        }
        if c.now().as_millis().is_multiple_of(1_000) {
            eprintln!(
                "n={n}: joining, {} virtual, {full_count} members see all, wall {:.0} s",
                secs(c.now()),
                budget.start.elapsed().as_secs_f64()
            );
        }
        if budget.spent() || join_budget.is_some_and(|l| start.elapsed() > l) {
            return false;
        }
    }
    false
}

/// What every size shares.
#[derive(Clone, Copy)]
struct Params {
    loss: f64,
    kills: usize,
    seed: u64,
    join_budget: Option<Duration>,
    budget: Option<Duration>,
    steady: Duration,
}

fn run(n: usize, p: Params) -> Row {
    let Params {
        loss,
        kills,
        seed,
        join_budget,
        budget,
        steady,
    } = p;
    let budget = Budget {
        start: Instant::now(),
        limit: budget,
    };
    let key = GossipKey::new(vec![7u8; 32]).expect("32 bytes");
    let net = NetConfig {
        loss,
        seed,
        horizon: Some(HORIZON),
        ..NetConfig::default()
    };
    let mut row = Row {
        n,
        converge: Err((Duration::ZERO, 0)),
        converged_start: false,
        converge_kib_per_node: 0.0,
        steady: None,
        first: Vec::new(),
        all: Vec::new(),
        each: Vec::new(),
        undetected: 0,
        stopped: None,
        wall: Duration::ZERO,
    };
    let stop = |row: &mut Row, c: &Cluster, what: &str| {
        row.stopped = Some(format!(
            "wall-time budget spent during {what}, at {} of virtual time",
            secs(c.now())
        ));
        row.wall = budget.start.elapsed();
        eprintln!("n={n}: {}", row.stopped.as_deref().unwrap_or_default());
    };

    // 1. Convergence from joining.
    let mut c = Cluster::new(n, MembershipConfig::default(), key.clone(), net.clone());
    let seeds = c.seeds();
    for i in 0..n {
        c.start(i, 1, &seeds);
    }
    drop(seeds);
    if !converge(&mut c, &mut row, &budget, join_budget) {
        eprintln!(
            "n={n}: join phase stopped at {} virtual, wall {:.0} s; starting converged",
            secs(c.now()),
            budget.start.elapsed().as_secs_f64()
        );
        drop(c);
        if budget.spent() {
            row.stopped = Some("wall-time budget spent while joining".into());
            row.wall = budget.start.elapsed();
            return row;
        }
        c = Cluster::new(n, MembershipConfig::default(), key, net);
        c.start_converged(1);
        row.converged_start = true;
        eprintln!(
            "n={n}: started converged, wall {:.0} s",
            budget.start.elapsed().as_secs_f64()
        );
    } else {
        eprintln!(
            "n={n}: converged at {}, wall {:.0} s",
            secs(c.now()),
            budget.start.elapsed().as_secs_f64()
        );
    }

    // 2. Steady state: false positives and traffic.
    c.run_for(SETTLE, |_, _, _, _| {});
    let (rejoined0, down0) = down_counters(&c);
    let (bytes0, datagrams0) = (bytes_total(&c), datagrams_total(&c));
    let steady_end = c.now() + steady;
    let mut short = vec![false; n];
    let mut short_views = 0u64;
    while c.now() < steady_end {
        c.run_for(Duration::from_secs(1), |i, change, m, _| {
            // Every member runs during the steady state, so a view of fewer is a member seen down.
            if change == Change::Members && m.live_count() < n {
                short[i] = true;
                short_views += 1;
            }
        });
        if budget.spent() {
            stop(
                &mut row,
                &c,
                &format!("the {} of steady state", secs(steady)),
            );
            return row;
        }
    }
    let (rejoined1, down1) = down_counters(&c);
    let per_node_s = n as f64 * steady.as_secs_f64();
    row.steady = Some(Steady {
        fp_members: rejoined1 - rejoined0,
        fp_declarations: down1 - down0,
        short_observers: short.iter().filter(|s| **s).count(),
        short_views,
        bytes_per_node_s: (bytes_total(&c) - bytes0) as f64 / per_node_s,
        datagrams_per_node_s: (datagrams_total(&c) - datagrams0) as f64 / per_node_s,
    });
    let (asked, declared) = stale_counters(&c);
    eprintln!(
        "n={n}: steady state done, wall {:.0} s; stale suspicions so far: {asked} asked about, \
         {declared} declared down after the asks",
        budget.start.elapsed().as_secs_f64()
    );

    // 3. Failure detection.
    let mut alive = vec![true; n];
    for k in 0..kills {
        // Spread over the cluster, deterministic.
        let victim = (k * 7919 + 13) % n;
        if !alive[victim] {
            continue;
        }
        c.run_for(Duration::from_secs(2), |_, _, _, _| {});
        let name = Cluster::name(victim);
        c.kill(victim);
        alive[victim] = false;
        let t0 = c.now();
        let mut seen_down = vec![false; n];
        let mut remaining = alive.iter().filter(|a| **a).count();
        let mut first_at = None;
        let mut last_at = None;
        while c.now() - t0 < DETECT_LIMIT && remaining > 0 {
            c.run_for(Duration::from_millis(10), |i, change, m, now| {
                if change == Change::Members && !seen_down[i] && !m.is_live(&name) {
                    seen_down[i] = true;
                    row.each.push(now - t0);
                    remaining -= 1;
                    first_at.get_or_insert(now - t0);
                    if remaining == 0 {
                        last_at = Some(now - t0);
                    }
                }
            });
            if budget.spent() {
                stop(&mut row, &c, &format!("kill {}", k + 1));
                return row;
            }
        }
        row.undetected += remaining;
        row.each
            .extend(std::iter::repeat_n(DETECT_LIMIT, remaining));
        row.first.push(first_at.unwrap_or(DETECT_LIMIT));
        row.all.push(last_at.unwrap_or(DETECT_LIMIT));
        eprintln!(
            "n={n}: kill {} ({name}): first {first_at:?}, all {last_at:?}, {remaining} never, wall {:.0} s",
            k + 1,
            budget.start.elapsed().as_secs_f64()
        );
    }
    let (asked, declared) = stale_counters(&c);
    eprintln!(
        "n={n}: kills done; stale suspicions in all: {asked} asked about, {declared} declared \
         down after the asks"
    );
    row.wall = budget.start.elapsed();
    row
}

/// (stale suspicions asked about, of those declared down) summed over the running members.
fn stale_counters(c: &Cluster) -> (u64, u64) {
    (0..c.len())
        .filter_map(|i| c.member(i))
        .map(|m| {
            (
                m.counters().stale_suspicions,
                m.counters().stale_declared_down,
            )
        })
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

fn detect(v: &[Duration]) -> String {
    if v.is_empty() {
        return "not run".to_string();
    }
    let (t, which) = tail(v);
    format!("{} / {} {which}", secs(median(v)), secs(t))
}

fn main() {
    ferrolb_tests::provenance::print();
    // `cargo bench` passes `--bench`; there are no other arguments.
    let sizes: Vec<usize> = std::env::var("GOSSIP_SIM_SIZES")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let loss: f64 = env("GOSSIP_SIM_LOSS", 0.01);
    let kills: usize = env("GOSSIP_SIM_KILLS", 5);
    let seed: u64 = env("GOSSIP_SIM_SEED", 1);
    let seconds = |name, default| {
        let s: u64 = env(name, default);
        (s > 0).then(|| Duration::from_secs(s))
    };
    let join_budget = seconds("GOSSIP_SIM_JOIN_BUDGET_S", 120);
    let budget = seconds("GOSSIP_SIM_BUDGET_S", 600);
    let steady = Duration::from_secs(env("GOSSIP_SIM_STEADY_S", 60u64).max(1));
    let c = MembershipConfig::default();
    println!(
        "gossip simulation: default MembershipConfig (probe every {:?}, ack within {:?}, \
         suspect→down the longer of {:?} and {} × log10(n) probe periods, \
         to 10 ms, gossip every {:?}, announce/join every {:?}, {} indirect probes, \
         updates passed on 8 to {} times by size); latency 0.2–1 ms; \
         loss {:.1} %; {kills} kills; seed {seed}; steady state {}; \
         wall-time budgets: joining {}, all {} per size",
        c.probe_period,
        c.probe_rtt,
        c.suspect_to_down_after,
        ferrolb_speaker::membership::core::SUSPICION_PER_DECADE,
        c.gossip_every,
        c.announce_every,
        ferrolb_speaker::membership::core::INDIRECT_PROBES,
        ferrolb_speaker::membership::core::transmissions_for(
            sizes.iter().copied().max().unwrap_or(3)
        ),
        loss * 100.0,
        secs(steady),
        join_budget.map_or("none".to_string(), secs),
        budget.map_or("none".to_string(), secs),
    );
    let params = Params {
        loss,
        kills,
        seed,
        join_budget,
        budget,
        steady,
    };
    let rows: Vec<Row> = std::thread::scope(|s| {
        let handles: Vec<_> = sizes
            .iter()
            .map(|&n| s.spawn(move || run(n, params)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("simulation thread"))
            .collect()
    });
    println!();
    println!(
        "| members | suspicion | converge (KiB sent per node) | detect, first: median / tail | detect, all: median / tail | detect, each member: median / tail | false positives in {}: members (declarations); views short of a member: observers (changes) | steady state per node | wall |",
        secs(steady)
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let converge = match r.converge {
            Ok(t) => secs(t),
            Err((t, full)) => format!(
                "not within {} of joining ({full} of {} see all)",
                secs(t),
                r.n
            ),
        };
        let start = if r.converged_start { " †" } else { "" };
        let never = if r.undetected > 0 {
            format!(" ({} members not within 60 s)", r.undetected)
        } else {
            String::new()
        };
        let (fp, traffic) = match &r.steady {
            Some(s) => (
                format!(
                    "{} ({}); {} ({})",
                    s.fp_members, s.fp_declarations, s.short_observers, s.short_views
                ),
                format!(
                    "{:.0} B/s, {:.1} datagrams/s",
                    s.bytes_per_node_s, s.datagrams_per_node_s
                ),
            ),
            None => ("not run".to_string(), "not run".to_string()),
        };
        println!(
            "| {}{start} | {:?} | {} ({:.0} KiB) | {} | {}{} | {} | {} | {} | {:.0} s |",
            r.n,
            ferrolb_speaker::membership::core::suspicion_for(r.n, &MembershipConfig::default()),
            converge,
            r.converge_kib_per_node,
            detect(&r.first),
            detect(&r.all),
            never,
            detect(&r.each),
            fp,
            traffic,
            r.wall.as_secs_f64()
        );
    }
    if rows.iter().any(|r| r.converged_start) {
        println!(
            "\n† the join phase did not finish within its wall-time budget \
             (GOSSIP_SIM_JOIN_BUDGET_S); steady state and kills ran on a cluster started \
             converged."
        );
    }
    for r in &rows {
        if let Some(why) = &r.stopped {
            println!(
                "\n{} members: stopped early, {why} (GOSSIP_SIM_BUDGET_S=0 lets it run to the end).",
                r.n
            );
        }
    }
}
