//! The membership core on a simulated network: a deterministic event queue with virtual time,
//! 1 ms latency, and nodes that can be killed or restarted.

use super::auth::{self, AuthFailure, GossipKey};
use super::core::{Membership, MembershipConfig, Output, SpeakerId, Timer};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::net::SocketAddr;
use std::time::Duration;

const LATENCY_MS: u64 = 1;

enum Event {
    Deliver {
        to: SocketAddr,
        datagram: Vec<u8>,
    },
    Fire {
        node: usize,
        generation: u64,
        timer: Timer,
    },
}

struct Sim {
    now_ms: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: std::collections::HashMap<u64, Event>,
    members: Vec<Option<Membership>>,
    addrs: Vec<SocketAddr>,
    key: GossipKey,
}

fn key(b: u8) -> GossipKey {
    GossipKey::new(vec![b; 32]).unwrap()
}

fn name(i: usize) -> String {
    format!("node-{i}")
}

impl Sim {
    fn new(n: usize) -> Sim {
        let mut sim = Sim {
            now_ms: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Default::default(),
            members: (0..n).map(|_| None).collect(),
            addrs: (0..n)
                .map(|i| format!("10.99.0.{}:7946", 11 + i).parse().unwrap())
                .collect(),
            key: key(7),
        };
        for i in 0..n {
            sim.start(i, 1);
        }
        sim
    }

    fn peers(&self) -> Vec<(String, SocketAddr)> {
        self.addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (name(i), *a))
            .collect()
    }

    fn start(&mut self, i: usize, generation: u64) {
        let me = SpeakerId {
            node: name(i),
            addr: self.addrs[i],
            generation,
        };
        let mut m = Membership::new(
            me,
            self.key.clone(),
            &MembershipConfig::default(),
            i as u64 + generation * 1000,
        );
        let out = m.join(&self.peers());
        self.members[i] = Some(m);
        self.apply(i, out);
    }

    fn kill(&mut self, i: usize) {
        self.members[i] = None;
    }

    fn push(&mut self, at: u64, e: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, e);
    }

    fn apply(&mut self, node: usize, out: Vec<Output>) {
        let generation = self.members[node].as_ref().map_or(0, |m| m.me().generation);
        for o in out {
            match o {
                Output::Send { to, datagram } => {
                    self.push(self.now_ms + LATENCY_MS, Event::Deliver { to, datagram })
                }
                Output::After { delay, timer } => {
                    let at = self.now_ms + delay.as_millis() as u64;
                    self.push(
                        at,
                        Event::Fire {
                            node,
                            generation,
                            timer,
                        },
                    )
                }
                Output::MembersChanged => {}
            }
        }
    }

    /// Runs until `until_ms` of virtual time.
    fn run_until(&mut self, until_ms: u64) {
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > until_ms {
                break;
            }
            self.queue.pop();
            self.now_ms = at;
            let Some(event) = self.events.remove(&seq) else {
                continue;
            };
            match event {
                Event::Deliver { to, datagram } => {
                    let Some(i) = self.addrs.iter().position(|a| *a == to) else {
                        continue;
                    };
                    if let Some(m) = self.members[i].as_mut() {
                        let out = m.handle_datagram(&datagram);
                        self.apply(i, out);
                    }
                }
                Event::Fire {
                    node,
                    generation,
                    timer,
                } => {
                    // Timers of a killed incarnation die with it.
                    if let Some(m) = self.members[node]
                        .as_mut()
                        .filter(|m| m.me().generation == generation)
                    {
                        let out = m.handle_timer(timer);
                        self.apply(node, out);
                    }
                }
            }
        }
        self.now_ms = until_ms;
    }

    fn live(&self, i: usize) -> BTreeSet<String> {
        self.members[i].as_ref().unwrap().live_nodes()
    }

    /// Virtual time until every survivor in `who` sees exactly `want`, checking every 10 ms.
    fn time_until(&mut self, who: &[usize], want: &BTreeSet<String>, limit_ms: u64) -> Option<u64> {
        let start = self.now_ms;
        while self.now_ms - start <= limit_ms {
            if who.iter().all(|i| self.live(*i) == *want) {
                return Some(self.now_ms - start);
            }
            let next = self.now_ms + 10;
            self.run_until(next);
        }
        None
    }
}

fn names(ids: &[usize]) -> BTreeSet<String> {
    ids.iter().map(|i| name(*i)).collect()
}

#[test]
fn speakers_seeded_with_each_other_all_see_each_other() {
    let mut sim = Sim::new(3);
    let t = sim.time_until(&[0, 1, 2], &names(&[0, 1, 2]), 2_000);
    assert!(
        t.is_some(),
        "views: {:?}",
        (0..3).map(|i| sim.live(i)).collect::<Vec<_>>()
    );
}

#[test]
fn a_killed_speaker_is_declared_down_by_all_survivors_within_a_second() {
    let mut worst = 0;
    for victim in 0..3 {
        let mut sim = Sim::new(3);
        sim.time_until(&[0, 1, 2], &names(&[0, 1, 2]), 2_000)
            .unwrap();
        sim.run_until(sim.now_ms + 1_000);
        sim.kill(victim);
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        let t = sim
            .time_until(&survivors, &names(&survivors), 3_000)
            .expect("victim never declared down");
        worst = worst.max(t);
    }
    assert!(
        worst <= 1_000,
        "slowest detection took {worst} ms of virtual time"
    );
}

#[test]
fn a_restarted_speaker_is_taken_back_with_its_new_generation() {
    let mut sim = Sim::new(3);
    sim.time_until(&[0, 1, 2], &names(&[0, 1, 2]), 2_000)
        .unwrap();
    sim.kill(2);
    sim.time_until(&[0, 1], &names(&[0, 1]), 3_000).unwrap();
    sim.start(2, 2);
    assert!(
        sim.time_until(&[0, 1, 2], &names(&[0, 1, 2]), 3_000)
            .is_some()
    );
}

#[test]
fn a_speaker_with_the_wrong_key_or_no_key_changes_nobodys_view() {
    let mut sim = Sim::new(2);
    sim.time_until(&[0, 1], &names(&[0, 1]), 2_000).unwrap();
    // An intruder with another key announces itself to both speakers.
    let intruder_addr: SocketAddr = "10.99.0.66:7946".parse().unwrap();
    let mut intruder = Membership::new(
        SpeakerId {
            node: "intruder".into(),
            addr: intruder_addr,
            generation: 1,
        },
        key(99),
        &MembershipConfig::default(),
        5,
    );
    let forged = intruder.join(&sim.peers());
    let mut sent = 0;
    for o in forged {
        if let Output::Send { to, datagram } = o {
            sim.push(
                sim.now_ms + 1,
                Event::Deliver {
                    to,
                    datagram: datagram.clone(),
                },
            );
            // The same message with the tag stripped, and as raw foca bytes without any framing.
            let bare = datagram[auth::MAGIC.len()..datagram.len() - auth::TAG_LEN].to_vec();
            sim.push(sim.now_ms + 1, Event::Deliver { to, datagram: bare });
            sent += 1;
        }
    }
    assert_eq!(sent, 2);
    sim.run_until(sim.now_ms + 1_000);
    for i in 0..2 {
        assert_eq!(sim.live(i), names(&[0, 1]));
        let c = sim.members[i].as_ref().unwrap().counters();
        assert_eq!(c.auth_failures.get(&AuthFailure::BadTag), Some(&1), "{c:?}");
        assert_eq!(c.auth_failures_total(), 2, "{c:?}");
    }
}

#[test]
fn an_authenticated_but_undecodable_datagram_is_counted_as_a_protocol_error() {
    let mut sim = Sim::new(1);
    let junk = auth::seal(&sim.key, &[0xff; 10]);
    let m = sim.members[0].as_mut().unwrap();
    let before = m.counters().protocol_errors;
    let out = m.handle_datagram(&junk);
    assert!(out.is_empty());
    assert_eq!(m.counters().protocol_errors, before + 1);
    assert_eq!(m.live_nodes(), names(&[0]));
}

#[test]
fn the_default_timing_fits_the_failover_goal() {
    let c = MembershipConfig::default();
    assert!(c.probe_rtt < c.probe_period);
    assert!(c.probe_period + c.suspect_to_down_after < Duration::from_millis(600));
}
