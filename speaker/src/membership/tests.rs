//! The membership core alone and on the simulated network of [`super::sim`]: virtual time,
//! 0.2–1 ms latency, members that can be killed, restarted or partitioned.

use super::auth::{self, AuthFailure, Channel, GossipKey};
use super::core::{JOIN_FANOUT, Membership, MembershipConfig, Output, SpeakerId, StateError};
use super::sim::{Cluster, NetConfig};
use super::states::{MAX_STATE_LEN, StateDecodeError, StateItem};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

fn key(b: u8) -> GossipKey {
    GossipKey::new(vec![b; 32]).unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn names(ids: &[usize]) -> BTreeSet<String> {
    ids.iter().map(|i| Cluster::name(*i)).collect()
}

/// A cluster of `n` members with the default timing on the default network, started
/// converged ([`Cluster::start_converged`]).
fn converged(n: usize) -> Cluster {
    let mut c = Cluster::new(n, MembershipConfig::default(), key(7), NetConfig::default());
    c.start_converged(1);
    c
}

/// A cluster of `n` members, all started at once with every member as a seed.
fn cluster(n: usize) -> Cluster {
    cluster_on(n, NetConfig::default())
}

fn cluster_on(n: usize, net: NetConfig) -> Cluster {
    let mut c = Cluster::new(n, MembershipConfig::default(), key(7), net);
    let seeds = c.seeds();
    for i in 0..n {
        c.start(i, 1, &seeds);
    }
    c
}

fn live(c: &Cluster, i: usize) -> BTreeSet<String> {
    c.member(i).unwrap().live_nodes()
}

fn states(c: &Cluster, i: usize) -> BTreeMap<String, Vec<u8>> {
    c.member(i).unwrap().states()
}

/// Runs in steps of 10 ms until `done` holds, for at most `limit`; the time it took.
fn time_until(
    c: &mut Cluster,
    limit: Duration,
    done: impl Fn(&Cluster) -> bool,
) -> Option<Duration> {
    let start = c.now();
    loop {
        if done(c) {
            return Some(c.now() - start);
        }
        if c.now() - start > limit {
            return None;
        }
        c.run_for(ms(10), |_, _, _, _| {});
    }
}

/// Runs until every member of `who` sees exactly `want`.
fn until_views(
    c: &mut Cluster,
    who: &[usize],
    want: &BTreeSet<String>,
    limit: Duration,
) -> Option<Duration> {
    time_until(c, limit, |c| who.iter().all(|i| live(c, *i) == *want))
}

fn set_state(c: &mut Cluster, i: usize, state: &[u8]) {
    c.with_member(i, |m| ((), m.set_local_state(state.to_vec()).unwrap()))
        .unwrap();
}

/// A datagram sealed with `key(7)` as another member (boot 99) sends it at clock 0: each one
/// with a sequence number of its own.
fn sealed(channel: Channel, payload: &[u8]) -> Vec<u8> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stamp = auth::Stamp {
        boot: 99,
        seq,
        time_ms: 0,
    };
    auth::seal_on(&key(7), channel, stamp, payload)
}

/// The member of index `i` of a simulated cluster, outside one (its name and address).
fn member_at(i: usize) -> Membership {
    Membership::new(
        SpeakerId {
            node: Cluster::name(i),
            addr: Cluster::addr(i),
            generation: 1,
        },
        key(7),
        &MembershipConfig::default(),
        i as u64,
    )
}

/// A member that is not part of any simulated cluster.
fn lone(node: &str, seed: u64) -> Membership {
    Membership::new(
        SpeakerId {
            node: node.into(),
            addr: "10.200.0.1:7946".parse().unwrap(),
            generation: 1,
        },
        key(7),
        &MembershipConfig::default(),
        seed,
    )
}

fn seeds(n: usize) -> Vec<(String, SocketAddr)> {
    (0..n)
        .map(|i| (Cluster::name(i), Cluster::addr(i)))
        .collect()
}

fn sends(out: &[Output]) -> Vec<SocketAddr> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, .. } => Some(*to),
            _ => None,
        })
        .collect()
}

fn join_timer(out: &[Output]) -> Option<(Duration, super::core::Timer)> {
    out.iter().find_map(|o| match o {
        Output::After { delay, timer } if *delay == MembershipConfig::default().announce_every => {
            Some((*delay, timer.clone()))
        }
        _ => None,
    })
}

// ---- membership on the simulated network ----

#[test]
fn speakers_seeded_with_each_other_all_see_each_other() {
    let mut c = cluster(3);
    let t = until_views(&mut c, &[0, 1, 2], &names(&[0, 1, 2]), ms(2_000));
    assert!(
        t.is_some(),
        "views: {:?}",
        (0..3).map(|i| live(&c, i)).collect::<Vec<_>>()
    );
}

#[test]
fn a_killed_speaker_is_declared_down_by_all_survivors_within_a_second() {
    let mut worst = Duration::ZERO;
    for victim in 0..3 {
        let mut c = cluster(3);
        until_views(&mut c, &[0, 1, 2], &names(&[0, 1, 2]), ms(2_000)).unwrap();
        c.run_for(ms(1_000), |_, _, _, _| {});
        c.kill(victim);
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        let t = until_views(&mut c, &survivors, &names(&survivors), ms(3_000))
            .expect("victim never declared down");
        worst = worst.max(t);
    }
    assert!(
        worst <= ms(1_000),
        "slowest detection took {worst:?} of virtual time"
    );
}

/// Runs until every member of `observers` has reported a view without `victim`, for at most
/// `limit`: for each, when (virtual time since the call, exact to the event).
fn times_seen_down(
    c: &mut Cluster,
    observers: &[usize],
    victim: usize,
    limit: Duration,
) -> Option<Vec<Duration>> {
    let (start, gone) = (c.now(), Cluster::name(victim));
    let mut seen: BTreeMap<usize, Duration> = BTreeMap::new();
    while seen.len() < observers.len() {
        if c.now() - start > limit {
            return None;
        }
        c.run_for(ms(10), |i, _, m, now| {
            if observers.contains(&i) && !seen.contains_key(&i) && !m.is_live(&gone) {
                seen.insert(i, now - start);
            }
        });
    }
    Some(seen.into_values().collect())
}

/// Kills `kills` members of the `n` in `c` one after the other (`stride` apart), each time
/// handing `seen` the times its survivors saw it down (as [`times_seen_down`]), then starts it
/// again with its next generation and lets the cluster settle.
fn kill_each(
    c: &mut Cluster,
    n: usize,
    kills: usize,
    stride: usize,
    mut seen: impl FnMut(Vec<Duration>),
) {
    let all: Vec<usize> = (0..n).collect();
    for kill in 0..kills {
        let victim = (kill * stride) % n;
        c.kill(victim);
        let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != victim).collect();
        seen(times_seen_down(c, &survivors, victim, ms(5_000)).expect("declared down"));
        let seeds = c.seeds();
        c.start(victim, 2 + kill as u64, &seeds);
        until_views(c, &all, &names(&all), ms(10_000)).expect("back");
        c.run_for(ms(1_000), |_, _, _, _| {});
    }
}

#[test]
fn a_failed_probe_of_a_member_suspected_by_another_declares_it_down_without_a_second_suspicion() {
    // 30 members: the suspicion stays at the configured 150 ms. Without confirmations every
    // member learns of a death from the member whose probe failed first: that probe began
    // after the death (or its ping was still on the way), failed a probe period later, and
    // its prober waited the whole suspicion. So never sooner than `unconfirmed` after it.
    let config = MembershipConfig::default();
    let suspicion = super::core::suspicion_for(30, &config);
    assert_eq!(suspicion, ms(150));
    let net = NetConfig::default();
    let unconfirmed = config.probe_period + suspicion - net.latency_max;
    let mut c = Cluster::new(30, config.clone(), key(7), net);
    c.start_converged(1);
    c.run_for(ms(2_000), |_, _, _, _| {});
    let all: Vec<usize> = (0..30).collect();
    let mut everybody = Vec::new();
    kill_each(&mut c, 30, 40, 7, |seen| {
        everybody.push(seen.into_iter().max().unwrap())
    });
    let sooner = everybody.iter().filter(|t| **t < unconfirmed).count();
    let confirmed: u64 = all
        .iter()
        .map(|i| c.member(*i).unwrap().counters().confirmed_suspicions)
        .sum();
    // Seeded: 9 of the 40 with confirmations, 0 without (the fastest then took 231 ms).
    assert!(
        sooner >= everybody.len() / 8 && confirmed > 0,
        "{sooner} of {} deaths known by every member within {unconfirmed:?} ({confirmed} \
         confirmations): {everybody:?}",
        everybody.len()
    );
}

#[test]
fn a_death_reaches_most_members_within_a_few_hops_of_its_first_declaration() {
    // 100 members: a member that hears of a death passes it on at once, even when it passed
    // the suspicion of the same member on a moment before (the death then replaces the
    // suspicion in foca's backlog, which stays as long as it was). A hop is at most 1 ms here,
    // so the median member hears within a few; waiting for the next gossip round (100 ms)
    // or probe (80 ms) at each member that had just passed the suspicion on is far slower.
    let mut c = converged(100);
    c.run_for(ms(2_000), |_, _, _, _| {});
    let mut lags = Vec::new();
    kill_each(&mut c, 100, 10, 37, |mut seen| {
        seen.sort();
        lags.push(seen[seen.len() / 2] - seen[0]);
    });
    lags.sort();
    assert!(
        lags[lags.len() / 2] <= ms(10),
        "the median member heard of a death this long after the first declaration: {lags:?}"
    );
}

#[test]
fn members_started_converged_probe_out_of_step() {
    // Speakers start one by one; their probe rounds are spread over the period (a member's
    // first timer is its first probe round). In step, the probes of a dead member that failed
    // in the same round could never confirm each other.
    let mut c = converged(30);
    let mut first_timer = BTreeMap::new();
    for step in 0..200 {
        c.run_for(ms(1), |_, _, _, _| {});
        for i in 0..30 {
            if c.timers_fired(i) > 0 {
                first_timer.entry(i).or_insert(step);
            }
        }
    }
    let distinct: BTreeSet<_> = first_timer.values().collect();
    assert_eq!(
        first_timer.len(),
        30,
        "every member's timers ran: {first_timer:?}"
    );
    assert!(
        distinct.len() >= 15,
        "first timers fell in {} distinct milliseconds: {first_timer:?}",
        distinct.len()
    );
}

#[test]
fn a_member_suspected_by_one_prober_only_is_declared_down_after_the_whole_suspicion() {
    // Two members cut off from each other: each is the other's only prober, with no helper,
    // and probes it every round. Its second failed probe confirms nothing: only its own
    // suspicion is there.
    let config = MembershipConfig::default();
    let suspicion = super::core::suspicion_for(2, &config);
    let net = NetConfig::default();
    // A probe that began before the cut fails only if its ping was still on the way.
    let earliest = config.probe_period + suspicion - net.latency_max;
    for phase in (0..80).step_by(10) {
        let mut c = Cluster::new(2, config.clone(), key(7), net.clone());
        c.start_converged(1);
        c.run_for(ms(2_000 + phase), |_, _, _, _| {});
        c.partition(Some(vec![0, 1]));
        let seen = times_seen_down(&mut c, &[0], 1, ms(2_000)).expect("declared down")[0];
        assert!(
            seen >= earliest,
            "cut {phase} ms into a round: down after {seen:?}, before {earliest:?}"
        );
        assert_eq!(c.member(0).unwrap().counters().confirmed_suspicions, 0);
    }
}

#[test]
fn a_restarted_speaker_is_taken_back_with_its_new_generation() {
    let mut c = cluster(3);
    until_views(&mut c, &[0, 1, 2], &names(&[0, 1, 2]), ms(2_000)).unwrap();
    c.kill(2);
    until_views(&mut c, &[0, 1], &names(&[0, 1]), ms(3_000)).unwrap();
    let seeds = c.seeds();
    c.start(2, 2, &seeds);
    assert!(until_views(&mut c, &[0, 1, 2], &names(&[0, 1, 2]), ms(3_000)).is_some());
}

#[test]
fn a_speaker_with_the_wrong_key_or_no_key_changes_nobodys_view() {
    let mut c = cluster(2);
    until_views(&mut c, &[0, 1], &names(&[0, 1]), ms(2_000)).unwrap();
    // An intruder with another key announces itself to both speakers.
    let mut intruder = Membership::new(
        SpeakerId {
            node: "intruder".into(),
            addr: "10.99.0.66:7946".parse().unwrap(),
            generation: 1,
        },
        key(99),
        &MembershipConfig::default(),
        5,
    );
    let forged = intruder.join(&c.seeds());
    let mut sent = 0;
    for o in forged {
        if let Output::Send { to, datagram } = o {
            c.inject(to, datagram.clone(), ms(1));
            // The same message with the tag stripped, and as raw foca bytes without any framing.
            let bare = datagram[auth::MAGIC.len()..datagram.len() - auth::TAG_LEN].to_vec();
            c.inject(to, bare, ms(1));
            sent += 1;
        }
    }
    assert_eq!(sent, 2);
    c.run_for(ms(1_000), |_, _, _, _| {});
    for i in 0..2 {
        assert_eq!(live(&c, i), names(&[0, 1]));
        let counters = c.member(i).unwrap().counters();
        assert_eq!(
            counters.auth_failures.get(&AuthFailure::BadTag),
            Some(&1),
            "{counters:?}"
        );
        assert_eq!(counters.auth_failures_total(), 2, "{counters:?}");
    }
}

#[test]
fn a_replayed_datagram_changes_nothing_and_is_counted() {
    let mut m = lone("node-0", 1);
    let datagram = sealed(
        Channel::State,
        &StateItem {
            node: "node-1".into(),
            generation: 1,
            version: 1,
            state: b"v1".to_vec(),
        }
        .encode(),
    );
    assert_eq!(m.handle_datagram(&datagram), vec![Output::StatesChanged]);
    let before = m.counters().clone();
    assert!(m.handle_datagram(&datagram).is_empty());
    let after = m.counters();
    assert_eq!(after.auth_failures.get(&AuthFailure::Replayed), Some(&1));
    assert_eq!(after.protocol_errors, before.protocol_errors);
}

#[test]
fn a_datagram_sent_longer_ago_than_the_clock_skew_allows_is_refused_as_stale() {
    let mut m = lone("node-0", 1);
    // `sealed` stamps clock 0; ours is now past the allowed skew.
    m.set_time(auth::MAX_SKEW.as_millis() as u64 + 1);
    assert!(
        m.handle_datagram(&sealed(Channel::Swim, &[0xff; 10]))
            .is_empty()
    );
    assert_eq!(
        m.counters().auth_failures.get(&AuthFailure::Stale),
        Some(&1)
    );
    assert_eq!(m.counters().protocol_errors, 0, "refused before decoding");
}

/// What `m` sends when it joins three seeds.
fn join_datagrams(m: &mut Membership) -> Vec<Vec<u8>> {
    m.join(&seeds(3))
        .into_iter()
        .filter_map(|o| match o {
            Output::Send { datagram, .. } => Some(datagram),
            _ => None,
        })
        .collect()
}

/// A SWIM-channel datagram sealed with `key` by boot `boot` at `time_ms`.
fn sealed_with(key: &GossipKey, boot: u64, time_ms: u64) -> Vec<u8> {
    let stamp = auth::Stamp {
        boot,
        seq: 1,
        time_ms,
    };
    auth::seal_on(key, Channel::Swim, stamp, &[0xff; 10])
}

#[test]
fn after_a_key_change_a_member_accepts_the_new_key_at_once_and_sends_with_it_later() {
    let delay = auth::KEY_SWITCH_DELAY.as_millis() as u64;
    // Within the switch delay: still sending with key 7 (members that have not seen the
    // change yet read it), and both keys accepted.
    let mut m = lone("node-0", 1);
    m.set_keys(key(8).into());
    let early = join_datagrams(&mut m);
    assert!(!early.is_empty());
    for d in &early {
        assert!(auth::open_any(&[&key(7)], d).is_ok());
    }
    let _ = m.handle_datagram(&sealed_with(&key(8), 5, 0));
    let _ = m.handle_datagram(&sealed_with(&key(7), 6, 0));
    assert_eq!(m.counters().auth_failures_total(), 0);
    assert_eq!(m.counters().previous_key, 1);
    // After it: sending with key 8 only; key 7 is refused once twice the delay is over.
    let mut m = lone("node-0", 1);
    m.set_keys(key(8).into());
    m.set_time(delay);
    for d in &join_datagrams(&mut m) {
        assert!(auth::open_any(&[&key(8)], d).is_ok());
        assert_eq!(auth::open_any(&[&key(7)], d), Err(AuthFailure::BadTag));
    }
    let _ = m.handle_datagram(&sealed_with(&key(7), 6, delay));
    assert_eq!(m.counters().auth_failures_total(), 0);
    m.set_time(2 * delay);
    let _ = m.handle_datagram(&sealed_with(&key(7), 7, 2 * delay));
    assert_eq!(
        m.counters().auth_failures.get(&AuthFailure::BadTag),
        Some(&1)
    );
}

#[test]
fn replacing_the_key_member_by_member_declares_nobody_down() {
    for with_previous in [false, true] {
        let mut c = cluster(5);
        let all = names(&[0, 1, 2, 3, 4]);
        until_views(&mut c, &[0, 1, 2, 3, 4], &all, ms(2_000)).unwrap();
        let down = |c: &Cluster| -> u64 {
            (0..5)
                .map(|i| c.member(i).unwrap().counters().declared_down)
                .sum()
        };
        let before = down(&c);
        // The Secret reaches the speakers one after the other, 500 ms apart: the new key
        // alone, or with the old one as `previouskey`.
        let ring = || auth::KeyRing::new(key(8), with_previous.then(|| key(7)));
        for i in 0..5 {
            c.with_member(i, |m| {
                m.set_keys(ring());
                ((), Vec::new())
            })
            .unwrap();
            c.run_for(ms(500), |_, _, _, _| {});
        }
        c.run_for(auth::KEY_SWITCH_DELAY * 2 + ms(5_000), |_, _, _, _| {});
        assert_eq!(
            down(&c),
            before,
            "declared down (previous key kept: {with_previous})"
        );
        for i in 0..5 {
            assert_eq!(live(&c, i), all, "member {i}");
        }
        // Everyone sends with the new key now: nothing more arrives under the old one.
        let old_key = |c: &Cluster| -> u64 {
            (0..5)
                .map(|i| c.member(i).unwrap().counters().previous_key)
                .sum()
        };
        let seen = old_key(&c);
        c.run_for(ms(3_000), |_, _, _, _| {});
        assert_eq!(old_key(&c), seen);
    }
}

#[test]
fn an_authenticated_but_undecodable_datagram_is_counted_as_a_protocol_error() {
    let mut m = lone("node-0", 1);
    for junk in [
        sealed(Channel::Swim, &[0xff; 10]),
        sealed(Channel::State, &[0xff; 10]),
    ] {
        let before = m.counters().protocol_errors;
        let out = m.handle_datagram(&junk);
        assert!(out.is_empty());
        assert_eq!(m.counters().protocol_errors, before + 1);
    }
    assert_eq!(m.live_nodes(), BTreeSet::from(["node-0".to_string()]));
}

#[test]
fn the_default_timing_fits_the_failover_goal() {
    let c = MembershipConfig::default();
    assert!(c.probe_rtt < c.probe_period);
    // Probed within a period, suspected a period later, down after the suspicion: the worst
    // case stays under the 500 ms goal with room for the announcement.
    assert!(2 * c.probe_period + c.suspect_to_down_after <= Duration::from_millis(400));
}

// ---- bounded joins ----

#[test]
fn joining_with_a_thousand_seeds_announces_to_at_most_three_of_them_at_once() {
    let mut m = lone("alone", 3);
    let out = m.join(&seeds(1_000));
    let to = sends(&out);
    assert!(
        !to.is_empty() && to.len() <= JOIN_FANOUT,
        "{} announces",
        to.len()
    );
    assert_eq!(
        to.iter().collect::<BTreeSet<_>>().len(),
        to.len(),
        "one announce per seed"
    );
    assert!(
        join_timer(&out).is_some(),
        "the next round waits one join period"
    );
}

#[test]
fn the_same_seeds_again_send_nothing_until_the_join_period_is_over() {
    let mut m = lone("alone", 4);
    let seeds = seeds(1_000);
    let (_, timer) = join_timer(&m.join(&seeds)).unwrap();
    for _ in 0..10 {
        assert!(m.join(&seeds).is_empty());
    }
    // Other seeds within the period wait too: the period bounds the rate, not the list.
    assert!(m.join(&seeds[..10]).is_empty());
    // Once the period is over, the round runs again by itself, with the latest seeds.
    let out = m.handle_timer(timer);
    let to = sends(&out);
    assert!(!to.is_empty() && to.len() <= JOIN_FANOUT);
    assert!(to.iter().all(|a| seeds[..10].iter().any(|(_, s)| s == a)));
    assert!(m.join(&seeds).is_empty());
}

#[test]
fn join_rounds_are_the_same_for_the_same_seed() {
    let a = sends(&lone("alone", 11).join(&seeds(1_000)));
    let b = sends(&lone("alone", 11).join(&seeds(1_000)));
    assert_eq!(a, b);
}

#[test]
fn a_member_does_not_announce_to_itself_nor_with_no_seeds() {
    let mut c = Cluster::new(1, MembershipConfig::default(), key(7), NetConfig::default());
    c.start(0, 1, &[]);
    let me = (Cluster::name(0), Cluster::addr(0));
    let out = c
        .with_member(0, |m| (m.join(std::slice::from_ref(&me)), Vec::new()))
        .unwrap();
    assert_eq!(out, Vec::new());
}

#[test]
fn a_join_round_sends_nothing_once_every_seed_is_live() {
    let (mut a, mut b) = (member_at(0), member_at(1));
    let seeds = seeds(2);
    let out = a.join(&seeds);
    let (_, timer) = join_timer(&out).unwrap();
    // B answers A's announce with a feed, which makes B live for A.
    for o in out {
        if let Output::Send { datagram, .. } = o {
            for reply in b.handle_datagram(&datagram) {
                if let Output::Send { datagram, .. } = reply {
                    a.handle_datagram(&datagram);
                }
            }
        }
    }
    assert!(a.is_live("node-1"));
    let out = a.handle_timer(timer);
    assert!(sends(&out).is_empty(), "{out:?}");
    assert!(
        join_timer(&out).is_some(),
        "rounds go on, to notice a seed that goes missing"
    );
    assert!(a.join(&seeds).is_empty());
}

/// What a speaker of the version before sends: the same content in the version-1 format
/// (no stamp), and it ignores version 2 (`None`).
fn as_v1(datagram: &[u8]) -> Option<Vec<u8>> {
    let o = auth::open_any(&[&key(7)], datagram).ok()?;
    o.stamp?;
    Some(auth::seal_v1(&key(7), o.channel, o.payload))
}

#[test]
fn a_speaker_of_the_version_before_is_answered_in_its_format_and_both_see_each_other() {
    // `old` stands for the former version: what it sends is turned into version 1, and what
    // reaches it in version 2 is lost (it does not know that magic).
    let (mut new, mut old) = (member_at(0), member_at(1));
    let mut to_new: Vec<Vec<u8>> = Vec::new();
    for o in old.join(&seeds(2)) {
        if let Output::Send { datagram, .. } = o {
            to_new.extend(as_v1(&datagram));
        }
    }
    let mut rounds = 0;
    while !to_new.is_empty() && rounds < 10 {
        rounds += 1;
        let mut to_old = Vec::new();
        for d in to_new.drain(..) {
            for o in new.handle_datagram_from(Cluster::addr(1), &d) {
                if let Output::Send { to, datagram } = o {
                    assert_eq!(to, Cluster::addr(1));
                    assert_eq!(
                        &datagram[..4],
                        auth::V1_MAGIC.as_slice(),
                        "answered in version 1"
                    );
                    to_old.push(datagram);
                }
            }
        }
        for d in to_old {
            for o in old.handle_datagram_from(Cluster::addr(0), &d) {
                if let Output::Send { datagram, .. } = o {
                    to_new.extend(as_v1(&datagram));
                }
            }
        }
    }
    assert!(new.is_live("node-1") && old.is_live("node-0"));
    assert!(new.counters().v1_datagrams > 0);
    assert_eq!(new.counters().auth_failures_total(), 0);
}

#[test]
fn fifty_members_started_together_all_see_each_other() {
    let mut c = cluster(50);
    let all: Vec<usize> = (0..50).collect();
    let t = time_until(&mut c, ms(30_000), |c| {
        all.iter().all(|i| c.member(*i).unwrap().live_count() == 50)
    });
    assert!(
        t.is_some(),
        "live counts: {:?}",
        all.iter()
            .map(|i| c.member(*i).unwrap().live_count())
            .collect::<Vec<_>>()
    );
    assert!(until_views(&mut c, &all, &names(&all), ms(0)).is_some());
}

#[test]
fn fifty_members_started_together_converge_with_one_percent_loss() {
    let mut c = cluster_on(
        50,
        NetConfig {
            loss: 0.01,
            seed: 9,
            ..NetConfig::default()
        },
    );
    let t = time_until(&mut c, ms(30_000), |c| {
        (0..50).all(|i| c.member(i).unwrap().live_count() == 50)
    });
    assert!(t.is_some());
}

#[test]
fn a_cluster_started_converged_stays_converged_and_quiet() {
    let mut c = converged(30);
    let all: Vec<usize> = (0..30).collect();
    assert!(until_views(&mut c, &all, &names(&all), ms(0)).is_some());
    c.run_for(ms(10_000), |_, _, _, _| {});
    assert!(until_views(&mut c, &all, &names(&all), ms(0)).is_some());
    for i in all {
        assert_eq!(c.member(i).unwrap().counters().declared_down, 0);
    }
}

#[test]
fn a_partition_heals_once_the_network_does() {
    let mut c = cluster(6);
    let all: Vec<usize> = (0..6).collect();
    until_views(&mut c, &all, &names(&all), ms(2_000)).unwrap();
    c.partition(Some(vec![0, 0, 0, 1, 1, 1]));
    until_views(&mut c, &[0, 1, 2], &names(&[0, 1, 2]), ms(5_000)).expect("left side");
    until_views(&mut c, &[3, 4, 5], &names(&[3, 4, 5]), ms(5_000)).expect("right side");
    c.partition(None);
    // foca's periodic announces and the join rounds both run every `announce_every` (5 s).
    let t = until_views(&mut c, &all, &names(&all), ms(20_000));
    assert!(
        t.is_some(),
        "views: {:?}",
        all.iter().map(|i| live(&c, *i)).collect::<Vec<_>>()
    );
}

// ---- states ----

#[test]
fn a_state_set_on_one_member_reaches_all_twenty_members() {
    let mut c = cluster(20);
    time_until(&mut c, ms(10_000), |c| {
        (0..20).all(|i| c.member(i).unwrap().live_count() == 20)
    })
    .unwrap();
    set_state(&mut c, 7, b"10.0.0.7 cannot answer");
    let want = BTreeMap::from([("node-7".to_string(), b"10.0.0.7 cannot answer".to_vec())]);
    let t = time_until(&mut c, ms(2_000), |c| (0..20).all(|i| states(c, i) == want));
    assert!(
        t.is_some(),
        "{:?}",
        (0..20).map(|i| states(&c, i)).collect::<Vec<_>>()
    );
}

#[test]
fn a_newer_state_replaces_the_older_one_on_every_member() {
    let mut c = cluster(20);
    time_until(&mut c, ms(10_000), |c| {
        (0..20).all(|i| c.member(i).unwrap().live_count() == 20)
    })
    .unwrap();
    set_state(&mut c, 3, b"joining");
    time_until(&mut c, ms(2_000), |c| {
        (0..20).all(|i| states(c, i).contains_key("node-3"))
    })
    .unwrap();
    set_state(&mut c, 3, b"ready");
    let t = time_until(&mut c, ms(2_000), |c| {
        (0..20).all(|i| states(c, i).get("node-3").map(Vec::as_slice) == Some(b"ready"))
    });
    assert!(t.is_some());
    // An empty state withdraws it.
    set_state(&mut c, 3, b"");
    let t = time_until(&mut c, ms(2_000), |c| {
        (0..20).all(|i| states(c, i).is_empty())
    });
    assert!(t.is_some());
}

#[test]
fn the_state_of_a_member_that_went_down_is_gone() {
    let mut c = cluster(20);
    time_until(&mut c, ms(10_000), |c| {
        (0..20).all(|i| c.member(i).unwrap().live_count() == 20)
    })
    .unwrap();
    set_state(&mut c, 5, b"leaving");
    set_state(&mut c, 6, b"ready");
    time_until(&mut c, ms(2_000), |c| {
        (0..20).all(|i| states(c, i).len() == 2)
    })
    .unwrap();
    c.kill(5);
    let survivors: Vec<usize> = (0..20).filter(|i| *i != 5).collect();
    let want = BTreeMap::from([("node-6".to_string(), b"ready".to_vec())]);
    let t = time_until(&mut c, ms(5_000), |c| {
        survivors.iter().all(|i| states(c, *i) == want)
    });
    assert!(
        t.is_some(),
        "{:?}",
        survivors.iter().map(|i| states(&c, *i)).collect::<Vec<_>>()
    );
}

#[test]
fn a_member_that_comes_up_later_learns_the_states_published_before() {
    let mut c = Cluster::new(
        10,
        MembershipConfig::default(),
        key(7),
        NetConfig::default(),
    );
    let seeds = c.seeds();
    for i in 0..9 {
        c.start(i, 1, &seeds);
    }
    time_until(&mut c, ms(10_000), |c| {
        (0..9).all(|i| c.member(i).unwrap().live_count() == 9)
    })
    .unwrap();
    for i in 0..9 {
        set_state(&mut c, i, format!("state of {i}").as_bytes());
    }
    // Long after the broadcasts were spread.
    c.run_for(ms(10_000), |_, _, _, _| {});
    c.start(9, 1, &seeds);
    let t = time_until(&mut c, ms(5_000), |c| states(c, 9).len() == 9);
    assert!(t.is_some(), "{:?}", states(&c, 9));
}

#[test]
fn a_restarted_member_replaces_the_state_of_its_former_self() {
    let mut c = cluster(5);
    time_until(&mut c, ms(10_000), |c| {
        (0..5).all(|i| c.member(i).unwrap().live_count() == 5)
    })
    .unwrap();
    set_state(&mut c, 4, b"old self");
    time_until(&mut c, ms(2_000), |c| {
        (0..5).all(|i| states(c, i).len() == 1)
    })
    .unwrap();
    // Restarted at once (its former self not yet declared down): its version starts again at 1.
    let seeds = c.seeds();
    c.kill(4);
    c.start(4, 2, &seeds);
    let others = [0, 1, 2, 3];
    let t = time_until(&mut c, ms(5_000), |c| {
        others
            .iter()
            .all(|i| c.member(*i).unwrap().states().is_empty() && live(c, *i).contains("node-4"))
    });
    assert!(
        t.is_some(),
        "the former self's state is hidden once the new self is up"
    );
    set_state(&mut c, 4, b"new self");
    let t = time_until(&mut c, ms(2_000), |c| {
        others
            .iter()
            .all(|i| states(c, *i).get("node-4").map(Vec::as_slice) == Some(b"new self"))
    });
    assert!(t.is_some());
}

#[test]
fn a_member_that_rejoins_after_a_partition_shows_its_state_again() {
    let mut c = cluster(6);
    let all: Vec<usize> = (0..6).collect();
    until_views(&mut c, &all, &names(&all), ms(2_000)).unwrap();
    set_state(&mut c, 5, b"five");
    time_until(&mut c, ms(2_000), |c| {
        all.iter().all(|i| states(c, *i).len() == 1)
    })
    .unwrap();
    c.partition(Some(vec![0, 0, 0, 0, 0, 1]));
    until_views(
        &mut c,
        &[0, 1, 2, 3, 4],
        &names(&[0, 1, 2, 3, 4]),
        ms(5_000),
    )
    .unwrap();
    c.partition(None);
    let t = time_until(&mut c, ms(20_000), |c| {
        all.iter()
            .all(|i| states(c, *i).get("node-5").map(Vec::as_slice) == Some(b"five"))
    });
    assert!(
        t.is_some(),
        "{:?}",
        all.iter().map(|i| states(&c, *i)).collect::<Vec<_>>()
    );
    assert!(c.member(5).unwrap().counters().rejoined >= 1);
}

#[test]
fn a_state_of_more_than_512_bytes_is_refused_and_the_previous_one_stays() {
    let mut m = lone("node-0", 1);
    m.set_local_state(b"kept".to_vec()).unwrap();
    assert_eq!(
        m.set_local_state(vec![0; MAX_STATE_LEN + 1]),
        Err(StateError::TooLarge { len: 513, max: 512 })
    );
    assert!(m.set_local_state(vec![1; MAX_STATE_LEN]).is_ok());
    assert!(
        m.set_local_state(vec![1; MAX_STATE_LEN])
            .unwrap()
            .is_empty(),
        "same state: nothing"
    );
}

#[test]
fn an_older_or_replayed_state_never_undoes_a_newer_one() {
    let item = |generation, version, state: &[u8]| {
        sealed(
            Channel::State,
            &StateItem {
                node: "node-1".into(),
                generation,
                version,
                state: state.to_vec(),
            }
            .encode(),
        )
    };
    let mut m = lone("node-0", 1);
    assert_eq!(
        m.handle_datagram(&item(1, 2, b"v2")),
        vec![Output::StatesChanged]
    );
    assert!(m.handle_datagram(&item(1, 1, b"v1")).is_empty());
    assert!(m.handle_datagram(&item(1, 2, b"v2")).is_empty());
    // A later generation wins whatever its version.
    assert_eq!(
        m.handle_datagram(&item(2, 1, b"restarted")),
        vec![Output::StatesChanged]
    );
    assert!(m.handle_datagram(&item(1, 9, b"ghost")).is_empty());
    // node-1 is not a live member of this lone one: nothing shows.
    assert!(m.states().is_empty());
}

// ---- the state item codec ----

#[test]
fn a_state_item_is_its_bytes() {
    let item = StateItem {
        node: "n1".into(),
        generation: 0x0102,
        version: 3,
        state: b"ab".to_vec(),
    };
    let bytes = [
        2, b'n', b'1', 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 2, b'a', b'b',
    ];
    assert_eq!(item.encode(), bytes);
    assert_eq!(StateItem::decode(&bytes), Ok(item));
}

#[test]
fn malformed_state_items_are_refused_with_their_reason() {
    let good = StateItem {
        node: "n".into(),
        generation: 1,
        version: 1,
        state: b"x".to_vec(),
    }
    .encode();
    assert_eq!(StateItem::decode(&[]), Err(StateDecodeError::Truncated));
    assert_eq!(
        StateItem::decode(&[0, 1, 2]),
        Err(StateDecodeError::BadNode)
    );
    assert_eq!(
        StateItem::decode(&[1, 0xff]),
        Err(StateDecodeError::BadNode)
    );
    assert_eq!(
        StateItem::decode(&good[..good.len() - 1]),
        Err(StateDecodeError::Truncated)
    );
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        StateItem::decode(&trailing),
        Err(StateDecodeError::Trailing)
    );
    let mut long = good[..good.len() - 3].to_vec();
    long.extend_from_slice(&513u16.to_be_bytes());
    long.extend_from_slice(&[0; 513]);
    assert_eq!(StateItem::decode(&long), Err(StateDecodeError::TooLong));
}

proptest! {
    #[test]
    fn state_items_round_trip(node in "[a-z0-9.-]{1,253}", generation: u64, version: u64, state in prop::collection::vec(any::<u8>(), 0..=MAX_STATE_LEN)) {
        let item = StateItem { node, generation, version, state };
        prop_assert_eq!(StateItem::decode(&item.encode()), Ok(item));
    }

    #[test]
    fn decoding_arbitrary_bytes_as_a_state_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = StateItem::decode(&bytes);
        let mut m = lone("node-0", 1);
        let _ = m.handle_datagram(&sealed(Channel::State, &bytes));
        prop_assert!(m.states().is_empty());
    }
}

// ---- the UDP shell ----

/// A localhost address with a port that was free a moment ago.
fn free_local_addr() -> SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn two_shells_on_localhost_see_each_other_and_each_others_state_and_a_restart_rebinds() {
    use super::udp::Gossip;
    let (a_addr, b_addr) = (free_local_addr(), free_local_addr());
    let start = |node: &str, addr| {
        Gossip::start(
            node.to_string(),
            addr,
            addr,
            key(7),
            MembershipConfig::default(),
        )
    };
    let a = start("a", a_addr).await.unwrap();
    let b = start("b", b_addr).await.unwrap();
    a.set_seeds(vec![("b".into(), b_addr)]);
    b.set_seeds(vec![("a".into(), a_addr)]);
    let mut live = b.live();
    tokio::time::timeout(Duration::from_secs(10), live.wait_for(|l| l.contains("a")))
        .await
        .expect("b sees a")
        .unwrap();
    a.set_local_state(b"10.0.0.1".to_vec()).unwrap();
    let mut states = b.states();
    tokio::time::timeout(
        Duration::from_secs(10),
        states.wait_for(|s| s.get("a").map(Vec::as_slice) == Some(b"10.0.0.1")),
    )
    .await
    .expect("b sees the state of a")
    .unwrap();
    assert_eq!(
        a.set_local_state(vec![0; MAX_STATE_LEN + 1]),
        Err(StateError::TooLarge { len: 513, max: 512 })
    );
    // Dropping a stops it: b declares it down and its state is gone.
    drop(a);
    tokio::time::timeout(Duration::from_secs(10), states.wait_for(|s| s.is_empty()))
        .await
        .expect("the state of a is gone with it")
        .unwrap();
    // Its thread closed the socket when the drop returned: a restarted member binds it again
    // and rejoins.
    let a = start("a", a_addr).await.expect("the port is free again");
    a.set_seeds(vec![("b".into(), b_addr)]);
    tokio::time::timeout(Duration::from_secs(10), live.wait_for(|l| l.contains("a")))
        .await
        .expect("b sees a again")
        .unwrap();
}

#[test]
fn an_idle_member_wakes_for_its_probes_only_and_a_new_state_still_goes_out_at_once() {
    let mut c = cluster(3);
    let all = [0, 1, 2];
    assert!(until_views(&mut c, &all, &names(&all), ms(10_000)).is_some());
    // The joins' updates are passed on often enough by then.
    c.run_for(ms(5_000), |_, _, _, _| {});
    let (timers, sent) = (c.timers_fired(0), c.datagrams_sent(0));
    c.run_for(ms(10_000), |_, _, _, _| {});
    let timers = c.timers_fired(0) - timers;
    let sent = c.datagrams_sent(0) - sent;
    // A probe every 80 ms (125), a join check and two announce rounds every 5 s (6): no
    // gossip round with nothing to send (100), no deadline of a probe already acked (125).
    assert!((120..=140).contains(&timers), "{timers} timers in 10 s");
    // Its pings (125) and its acks to the others' pings (about 125), and the announces.
    assert!((220..=280).contains(&sent), "{sent} datagrams in 10 s");
    assert!(all.iter().all(|i| live(&c, *i).len() == 3));
    // A state published now reaches the others at once, not at the next probe or round.
    set_state(&mut c, 0, b"10.0.0.1");
    let seen = time_until(&mut c, ms(1_000), |c| {
        [1, 2]
            .iter()
            .all(|i| states(c, *i).get(&Cluster::name(0)).map(Vec::as_slice) == Some(b"10.0.0.1"))
    });
    assert_eq!(
        seen,
        Some(ms(10)),
        "seen by both within the first 10 ms step"
    );
}

// ---- a suspicion this member holds on another's word, after the rest moved on ----

/// One member driven by hand: its timers fire in virtual time, what it sends is recorded
/// (nothing answers it unless a test injects a datagram).
struct Driven {
    m: Membership,
    now_ms: u64,
    timers: Vec<(u64, super::core::Timer)>,
    sent_to: Vec<(u64, SocketAddr)>,
}

impl Driven {
    fn apply(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::After { delay, timer } => self
                    .timers
                    .push((self.now_ms + delay.as_millis() as u64, timer)),
                Output::Cancel { timer } => {
                    if let Some(k) = self.timers.iter().position(|(_, t)| *t == timer) {
                        self.timers.swap_remove(k);
                    }
                }
                Output::Send { to, .. } => self.sent_to.push((self.now_ms, to)),
                _ => {}
            }
        }
    }

    /// Fires every timer due until `until_ms`, in order.
    fn run_until(&mut self, until_ms: u64) {
        while let Some(k) = (0..self.timers.len())
            .filter(|k| self.timers[*k].0 <= until_ms)
            .min_by_key(|k| self.timers[*k].0)
        {
            let (at, timer) = self.timers.swap_remove(k);
            self.now_ms = at;
            self.m.set_time(at);
            let out = self.m.handle_timer(timer);
            self.apply(out);
        }
        self.now_ms = until_ms;
        self.m.set_time(until_ms);
    }

    fn receive(&mut self, datagram: &[u8]) {
        let out = self.m.handle_datagram(datagram);
        self.apply(out);
    }
}

fn id(i: usize) -> SpeakerId {
    SpeakerId {
        node: Cluster::name(i),
        addr: Cluster::addr(i),
        generation: 1,
    }
}

/// A foca datagram from member `from` to member 0 carrying `updates`.
fn swim_datagram(
    from: usize,
    incarnation: foca::Incarnation,
    message: foca::Message<SpeakerId>,
    updates: &[foca::Member<SpeakerId>],
) -> Vec<u8> {
    use foca::Codec;
    let header = foca::Header {
        src: id(from),
        src_incarnation: incarnation,
        dst: id(0),
        message,
    };
    let mut payload = Vec::new();
    foca::PostcardCodec
        .encode_header(&header, &mut payload)
        .unwrap();
    payload.extend_from_slice(&(updates.len() as u16).to_be_bytes());
    for u in updates {
        foca::PostcardCodec.encode_member(u, &mut payload).unwrap();
    }
    sealed(Channel::Swim, &payload)
}

/// Member 0 of 500, holding member 2 suspect on member 1's word from 0 ms on. Member 0 gets
/// no answer from anyone: its own probes fail, so member 2 must be one it does not probe in
/// the time the test runs (its probe would confirm the suspicion another way). With when, in
/// ms, that suspicion goes stale ([`super::core::STALE_SUSPICION_FACTOR`]).
fn holding_a_suspicion() -> (Driven, u64) {
    let mut d = Driven {
        m: member_at(0),
        now_ms: 0,
        timers: Vec::new(),
        sent_to: Vec::new(),
    };
    d.m.set_time(0);
    let out = d.m.assume_live((1..500).map(id).collect());
    d.apply(out);
    let suspect = foca::Member::new(id(2), 0, foca::State::Suspect);
    d.receive(&swim_datagram(1, 0, foca::Message::Gossip, &[suspect]));
    assert!(d.m.is_live(&Cluster::name(2)), "suspect, not down yet");
    let suspicion = super::core::suspicion_for(500, &MembershipConfig::default());
    let stale = suspicion.as_millis() as u64 * u64::from(super::core::STALE_SUSPICION_FACTOR);
    (d, stale)
}

#[test]
fn a_member_that_missed_a_death_declares_it_down_itself_once_its_suspicion_is_stale() {
    let (mut d, stale) = holding_a_suspicion();
    let mut down_at = None;
    for t in (10..=5_000).step_by(10) {
        d.run_until(t);
        if !d.m.is_live(&Cluster::name(2)) {
            down_at = Some(t);
            break;
        }
    }
    let down_at = down_at.expect("still suspect after 5 s");
    // Before it went stale, datagrams to the suspect are news passed on (the suspicion).
    let asks: Vec<u64> = d
        .sent_to
        .iter()
        .filter(|(t, to)| *to == Cluster::addr(2) && *t >= stale)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(
        asks.len(),
        usize::from(super::core::STALE_ASKS),
        "asked the suspect directly before: {asks:?}"
    );
    let period = MembershipConfig::default().probe_period.as_millis() as u64;
    assert!(
        asks.windows(2).all(|w| w[1] - w[0] == period),
        "one ask per probe period: {asks:?}"
    );
    assert!(
        down_at > *asks.last().unwrap() && down_at <= stale + 500 + 4 * period,
        "declared down at {down_at} ms (stale at {stale} ms, asked at {asks:?})"
    );
    let c = d.m.counters();
    assert_eq!((c.stale_suspicions, c.stale_declared_down), (1, 1));
}

#[test]
fn a_stale_suspicion_ends_when_the_suspect_answers_with_its_refutation() {
    let (mut d, stale) = holding_a_suspicion();
    let mut answered = false;
    for t in (10..=5_000).step_by(10) {
        d.run_until(t);
        let asked = d
            .sent_to
            .iter()
            .any(|(at, to)| *to == Cluster::addr(2) && *at >= stale);
        if !answered && asked {
            // The suspect had refuted (incarnation 1); this member missed it. Its answer to
            // the ask carries it.
            d.receive(&swim_datagram(2, 1, foca::Message::Feed, &[]));
            answered = true;
        }
    }
    assert!(answered, "the suspect was never asked");
    assert!(
        d.m.is_live(&Cluster::name(2)),
        "a refuted suspect was declared down"
    );
    let c = d.m.counters();
    assert_eq!((c.stale_suspicions, c.stale_declared_down), (1, 0));
}
