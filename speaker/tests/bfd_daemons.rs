//! BFD end to end against real BIRD 2 and FRR bfdd in network namespaces.
//!
//! Each test builds its own pair of namespaces (speaker, router) joined by a veth pair
//! (`bgp_support::lab`); the daemon runs in the router namespace and our shell runs as the
//! `bfd-probe` binary under `ip netns exec` in the speaker namespace, one single-hop session per
//! address family. Tests print why and pass when they are not root or a daemon is missing, and
//! fail instead under `FERROLB_REQUIRE_BINARIES=1`.

mod bgp_support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use bgp_support::lab::{
    Lab, Probe, ROUTER_V4, ROUTER_V6, SPEAKER_V4, SPEAKER_V6, eventually, skip_unless_available,
};
use serde_json::json;

/// From start to Up on both sides: the slow rate (1 s) until Up, a couple of exchanges.
const UP: Duration = Duration::from_secs(15);
/// 300 ms x 3, as both sides are configured.
const DETECTION: Duration = Duration::from_millis(900);
/// The detection time plus scheduling: what a cut may take to be seen.
const DETECTED_WITHIN: Duration = Duration::from_millis(1200);

/// (router address, speaker address) of the two sessions.
const SESSIONS: [(&str, &str); 2] = [(ROUTER_V4, SPEAKER_V4), (ROUTER_V6, SPEAKER_V6)];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Daemon {
    Bird,
    Frr,
}

/// One session as the daemon shows it.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    /// Lower case: `up`, `down`, `init`, `admindown`.
    state: String,
    /// The detection time the daemon uses, when it shows one.
    detection: Option<Duration>,
    /// The diagnostic in our last packet, when the daemon shows it (FRR).
    remote_diag: Option<String>,
}

impl Daemon {
    fn binaries(self) -> &'static [&'static str] {
        match self {
            Daemon::Bird => &["bird", "birdc"],
            Daemon::Frr => &["/usr/lib/frr/bfdd", "vtysh"],
        }
    }

    fn start(self, lab: &mut Lab) {
        match self {
            Daemon::Bird => {
                let conf = format!(
                    "router id {ROUTER_V4};\nprotocol device {{}}\n\
                     protocol bfd {{\n  interface \"*\" {{ interval 300 ms; multiplier 3; }};\n\
                     neighbor {SPEAKER_V4};\n  neighbor {SPEAKER_V6};\n}}\n"
                );
                lab.spawn_bird(&conf);
            }
            Daemon::Frr => {
                let mut conf = String::from("hostname r1\nbfd\n");
                for (router, speaker) in SESSIONS {
                    conf.push_str(&format!(
                        " peer {speaker} local-address {router}\n  receive-interval 300\n  \
                         transmit-interval 300\n  detect-multiplier 3\n exit\n"
                    ));
                }
                conf.push_str("exit\n");
                std::fs::write(lab.path("bfdd.conf"), conf).unwrap();
                // bfdd drops to the `frr` user before it writes its pid file and sockets.
                std::fs::set_permissions(&lab.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
                let (c, p, d, ctl) = (
                    lab.path("bfdd.conf"),
                    lab.path("bfdd.pid"),
                    lab.path(""),
                    lab.path("bfdd.sock"),
                );
                lab.spawn_router(
                    &[
                        "/usr/lib/frr/bfdd",
                        "-f",
                        &c,
                        "-i",
                        &p,
                        "-P",
                        "0",
                        "--vty_socket",
                        &d,
                        "--bfdctl",
                        &ctl,
                    ],
                    "bfdd.log",
                );
            }
        }
    }

    /// The daemon's sessions, by the speaker's address.
    fn sessions(self, lab: &Lab) -> BTreeMap<String, Seen> {
        match self {
            Daemon::Bird => {
                let ctl = lab.path("bird.ctl");
                let out = lab.router_cmd(&["birdc", "-s", &ctl, "show", "bfd", "sessions"]);
                bird_sessions(&out)
            }
            Daemon::Frr => {
                let d = lab.path("");
                let out = lab.router_cmd(&[
                    "vtysh",
                    "--vty_socket",
                    &d,
                    "-d",
                    "bfdd",
                    "-c",
                    "show bfd peers json",
                ]);
                frr_sessions(&out)
            }
        }
    }

    /// [`Daemon::sessions`] without `ip netns exec` (the control sockets are files), to time
    /// what the daemon sees closely.
    fn sessions_now(self, lab: &Lab) -> BTreeMap<String, Seen> {
        match self {
            Daemon::Bird => {
                let ctl = lab.path("bird.ctl");
                let out = std::process::Command::new("birdc")
                    .args(["-s", &ctl, "show", "bfd", "sessions"])
                    .output()
                    .expect("birdc");
                bird_sessions(&String::from_utf8_lossy(&out.stdout))
            }
            Daemon::Frr => self.sessions(lab),
        }
    }

    /// Whether both of the daemon's sessions are in `state`.
    fn all_in(self, lab: &Lab, state: &str) -> bool {
        let seen = self.sessions(lab);
        SESSIONS
            .iter()
            .all(|(_, speaker)| seen.get(*speaker).is_some_and(|s| s.state == state))
    }
}

/// `birdc show bfd sessions`: one line per session, `ADDRESS IFACE STATE SINCE INTERVAL
/// TIMEOUT` (the timeout is the detection time; read from the end, since SINCE may hold a
/// space).
fn bird_sessions(out: &str) -> BTreeMap<String, Seen> {
    out.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.first()?.parse::<std::net::IpAddr>().ok()?;
            Some((
                cols[0].to_owned(),
                Seen {
                    state: cols.get(2)?.to_lowercase(),
                    detection: cols
                        .last()
                        .and_then(|t| t.parse::<f64>().ok())
                        .map(Duration::from_secs_f64),
                    remote_diag: None,
                },
            ))
        })
        .collect()
}

/// `vtysh -c 'show bfd peers json'`: an array of peers with `peer`, `status` and
/// `detect-multiplier` / `remote-transmit-interval` (ms).
fn frr_sessions(out: &str) -> BTreeMap<String, Seen> {
    let Ok(serde_json::Value::Array(peers)) = serde_json::from_str(out) else {
        return BTreeMap::new();
    };
    peers
        .iter()
        .filter_map(|p| {
            let detection = match (
                p["remote-detect-multiplier"].as_u64(),
                p["receive-interval"].as_u64(),
                p["remote-transmit-interval"].as_u64(),
            ) {
                (Some(mult), Some(rx), Some(tx)) => Some(Duration::from_millis(mult * rx.max(tx))),
                _ => None,
            };
            Some((
                p["peer"].as_str()?.to_owned(),
                Seen {
                    state: p["status"].as_str()?.to_lowercase(),
                    detection,
                    remote_diag: p["remote-diagnostic"].as_str().map(str::to_owned),
                },
            ))
        })
        .collect()
}

/// `bfd-probe` in the speaker namespace, with the last state and status of each session.
struct BfdProbe {
    probe: Probe,
    /// Router address → last state line's `state`, and when that line arrived.
    states: BTreeMap<String, (String, Instant)>,
    /// Router address → last status line's `status`.
    statuses: BTreeMap<String, serde_json::Value>,
    /// Router address → last state line in full (with the peer's state and our diagnostic),
    /// for failure messages.
    lines: BTreeMap<String, serde_json::Value>,
}

impl BfdProbe {
    fn start(lab: &Lab) -> BfdProbe {
        let args: Vec<String> = SESSIONS
            .iter()
            .map(|(router, speaker)| {
                json!({"local": speaker, "peer": router, "tx_ms": 300, "rx_ms": 300, "multiplier": 3})
                    .to_string()
            })
            .collect();
        BfdProbe {
            probe: Probe::spawn(lab, &ferrolb_tests::tool("bfd-probe"), &args),
            states: BTreeMap::new(),
            statuses: BTreeMap::new(),
            lines: BTreeMap::new(),
        }
    }

    /// Reads one line (waiting at most `timeout`); returns when it arrived.
    fn read(&mut self, timeout: Duration) -> Option<Instant> {
        let line = self.probe.next_line(timeout)?;
        let at = Instant::now();
        let peer = line["peer"].as_str().unwrap_or_default().to_owned();
        if let Some(state) = line["state"].as_str() {
            self.states.insert(peer.clone(), (state.to_owned(), at));
            self.lines.insert(peer, line);
        } else if line["status"].is_object() {
            self.statuses.insert(peer, line["status"].clone());
        }
        Some(at)
    }

    /// Reads until `done` holds; when it began to hold, or `None` after `timeout`.
    fn until(&mut self, timeout: Duration, done: impl Fn(&BfdProbe) -> bool) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        if done(self) {
            return Some(Instant::now());
        }
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let at = self.read(left)?;
            if done(self) {
                return Some(at);
            }
        }
    }

    fn all_in(&self, state: &str) -> bool {
        SESSIONS
            .iter()
            .all(|(router, _)| self.state(router) == Some(state))
    }

    fn state(&self, router: &str) -> Option<&str> {
        self.states.get(router).map(|(s, _)| s.as_str())
    }

    /// Asks for every session's status and waits for the answers.
    fn refresh_statuses(&mut self) -> bool {
        self.statuses.clear();
        self.probe.send(json!("status"));
        self.until(Duration::from_secs(5), |p| {
            p.statuses.len() == SESSIONS.len()
        })
        .is_some()
    }

    /// Ends the sessions with AdminDown and waits for the process.
    fn shutdown(mut self) -> bool {
        self.probe.send(json!("shutdown"));
        let done = self
            .until(Duration::from_secs(5), |p| {
                p.probe.last.as_ref().is_some_and(|l| l["shutdown"] == true)
            })
            .is_some();
        self.probe.shutdown();
        done
    }
}

fn skip(d: Daemon, more: &[&str]) -> bool {
    let binaries: Vec<&str> = d.binaries().iter().chain(more).copied().collect();
    skip_unless_available(&binaries)
}

/// Waits until both sides show both sessions Up with the 300 ms timers in force.
fn wait_up_and_fast(d: Daemon, lab: &Lab, probe: &mut BfdProbe) {
    assert!(
        probe.until(UP, |p| p.all_in("Up")).is_some(),
        "{d:?}: our sessions did not come up: {:?}; daemon: {:?}",
        probe.states,
        d.sessions(lab)
    );
    assert!(
        eventually(UP, || d.all_in(lab, "up")),
        "{d:?}: the daemon's sessions did not come up: {:?}",
        d.sessions(lab)
    );
    let fast = DETECTION.as_secs_f64() * 1000.0;
    let deadline = Instant::now() + UP;
    loop {
        assert!(probe.refresh_statuses(), "the probe gave no status");
        let ours = probe.statuses.values().all(|s| {
            s["state"] == "Up"
                && s["detection_time_ms"]
                    .as_f64()
                    .is_some_and(|t| (t - fast).abs() < 0.5)
        });
        let theirs = d
            .sessions(lab)
            .values()
            .all(|s| s.state == "up" && s.detection.is_none_or(|t| close(t, DETECTION)));
        if ours && theirs {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{d:?}: timers did not settle at 300 ms x 3: ours {:?}, daemon {:?}",
            probe.statuses,
            d.sessions(lab)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Both sessions come up on both sides, carry no drops, and our shutdown takes the daemon's
/// sessions down (our AdminDown).
fn comes_up(d: Daemon, name: &str) {
    if skip(d, &[]) {
        return;
    }
    let mut lab = Lab::new(name);
    d.start(&mut lab);
    let mut probe = BfdProbe::start(&lab);
    wait_up_and_fast(d, &lab, &mut probe);
    for (router, status) in &probe.statuses {
        assert_eq!(
            status["dropped"],
            json!({}),
            "{d:?}: session to {router} dropped packets: {status}"
        );
        assert!(status["packets_received"].as_u64() >= Some(2), "{status}");
    }
    assert!(probe.shutdown(), "the probe did not shut down");
    assert!(
        eventually(Duration::from_secs(5), || d.all_in(&lab, "down")),
        "{d:?} did not see our AdminDown: {:?}",
        d.sessions(&lab)
    );
    // Where the daemon shows why, it must be our AdminDown, not a detection timeout.
    for (speaker, seen) in d.sessions(&lab) {
        if let Some(diag) = seen.remote_diag {
            assert_eq!(diag, "administratively down", "{d:?}: session to {speaker}");
        }
    }
}

#[test]
fn a_bird_bfd_session_comes_up_over_ipv4_and_ipv6() {
    comes_up(Daemon::Bird, "bfd-bird");
}

#[test]
fn an_frr_bfdd_session_comes_up_over_ipv4_and_ipv6() {
    comes_up(Daemon::Frr, "bfd-frr");
}

/// Within a millisecond (daemons print seconds with three decimals).
fn close(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) < Duration::from_millis(1)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn cutting_the_link_is_detected_within_a_second_by_both_sides() {
    let d = Daemon::Bird;
    if skip(d, &["iptables", "ip6tables"]) {
        return;
    }
    let mut lab = Lab::new("bfd-cut");
    d.start(&mut lab);
    let mut probe = BfdProbe::start(&lab);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..10 {
        wait_up_and_fast(d, &lab, &mut probe);
        // Measured from before the cut command starts, so its run time counts against us.
        let cut = Instant::now();
        lab.cut_router();
        let daemon_down = std::thread::scope(|scope| {
            let lab = &lab;
            let watcher = scope.spawn(move || {
                let mut down = BTreeMap::new();
                while cut.elapsed() < Duration::from_secs(5) && down.len() < SESSIONS.len() {
                    for (speaker, seen) in d.sessions_now(lab) {
                        if seen.state != "up" {
                            down.entry(speaker).or_insert_with(|| cut.elapsed());
                        }
                    }
                }
                down
            });
            let all_down = probe.until(Duration::from_secs(5), |p| p.all_in("Down"));
            assert!(
                all_down.is_some(),
                "round {round}: our sessions did not go Down: {:?}",
                probe.states
            );
            for (router, _) in SESSIONS {
                ours.push(probe.states[router].1.duration_since(cut));
            }
            watcher.join().unwrap()
        });
        assert_eq!(
            daemon_down.len(),
            SESSIONS.len(),
            "round {round}: BIRD did not see the cut: {:?}",
            d.sessions(&lab)
        );
        theirs.extend(daemon_down.into_values());
        lab.restore_router();
    }
    let (mut o, mut t) = (ours.clone(), theirs.clone());
    println!(
        "detection over 10 cuts x 2 sessions: ours median {:?} max {:?}; BIRD median {:?} max {:?}",
        median(&mut o),
        o.last().unwrap(),
        median(&mut t),
        t.last().unwrap()
    );
    for (side, times) in [("ours", &ours), ("BIRD", &theirs)] {
        for time in times {
            assert!(
                *time <= DETECTED_WITHIN,
                "{side}: a cut took {time:?} to detect (all: {times:?})"
            );
        }
    }
    probe.shutdown();
}

/// Floods the speaker's BFD port from the router's namespace for `secs` seconds: garbage,
/// well-formed control packets with discriminators no session has (TTL 255, as a router on
/// the link sends), and packets with a TTL below 255. Returns how many were sent.
fn flood_bfd(lab: &Lab, secs: f64) -> u64 {
    let script = format!(
        r#"
import os, random, socket, struct, time
targets = [("{SPEAKER_V4}", socket.AF_INET), ("{SPEAKER_V6}", socket.AF_INET6)]
socks = []
for addr, fam in targets:
    for ttl in (255, 64):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        else:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ttl)
        socks.append((s, addr))
sent = 0
end = time.time() + {secs}
while time.time() < end:
    for s, addr in socks:
        kind = sent % 3
        if kind == 0:
            data = os.urandom(random.randint(0, 64))
        else:
            # version 1, state Up, detect mult 3, length 24, random discriminators
            data = struct.pack("!BBBBIIIII", 0x20, 0xC0, 3, 24, random.randint(1, 2**32 - 1),
                               random.randint(1, 2**32 - 1), 300000, 300000, 0)
        try:
            s.sendto(data, (addr, 3784))
            sent += 1
        except OSError:
            pass
print(sent)
"#
    );
    let out = lab.router_cmd(&["python3", "-c", &script]);
    out.trim()
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("the flood did not run: {out}"))
}

/// How long the flood runs.
const FLOOD: Duration = Duration::from_secs(5);

#[test]
fn a_flood_at_the_bfd_port_moves_no_session_and_is_counted() {
    let d = Daemon::Bird;
    if skip(d, &["python3"]) {
        return;
    }
    let mut lab = Lab::new("bfd-flood");
    d.start(&mut lab);
    let mut probe = BfdProbe::start(&lab);
    wait_up_and_fast(d, &lab, &mut probe);
    let received = |p: &BfdProbe| -> BTreeMap<String, u64> {
        p.statuses
            .iter()
            .map(|(r, s)| (r.clone(), s["packets_received"].as_u64().unwrap_or(0)))
            .collect()
    };
    assert!(probe.refresh_statuses(), "the probe gave no status");
    let before = received(&probe);
    let sent = std::thread::scope(|s| {
        let flood = s.spawn(|| flood_bfd(&lab, FLOOD.as_secs_f64()));
        // Any state line other than Up during the flood is a session it moved.
        let moved = probe.until(FLOOD + Duration::from_secs(1), |p| !p.all_in("Up"));
        assert!(moved.is_none(), "a session left Up: {:?}", probe.lines);
        flood.join().unwrap()
    });
    assert!(
        d.all_in(&lab, "up"),
        "the daemon's side: {:?}",
        d.sessions(&lab)
    );
    assert!(probe.refresh_statuses(), "the probe gave no status");
    // BIRD sends every 225-300 ms (300 ms less its jitter): at least 16 packets per session
    // in the flood's 5 s, and the two status reads enclose more than the flood (the flood
    // starts after the first and the second waits for its end). Every one of them must have
    // reached its session, not been dropped behind the flood in a shared queue.
    let least = (FLOOD.as_millis() / 300) as u64;
    let reached: BTreeMap<String, u64> = received(&probe)
        .into_iter()
        .map(|(router, after)| {
            let got = after - before.get(&router).copied().unwrap_or(0);
            (router, got)
        })
        .collect();
    eprintln!("packets of BIRD's that reached each session during the flood: {reached:?}");
    for (router, got) in &reached {
        assert!(
            *got >= least,
            "{router}: {got} packets of BIRD's reached the session during the flood, fewer than {least}"
        );
    }
    let dropped: u64 = probe
        .statuses
        .values()
        .flat_map(|s| s["dropped"].as_object().cloned().unwrap_or_default())
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    eprintln!(
        "{sent} packets in 5 s at the BFD port: both sessions stayed Up on both sides; {dropped} \
         dropped and counted: {:?}",
        probe
            .statuses
            .iter()
            .map(|(r, s)| (r.clone(), s["dropped"].clone()))
            .collect::<Vec<_>>()
    );
    assert!(sent > 1000, "only {sent} packets sent");
    assert!(
        dropped > 0,
        "nothing counted as dropped: {:?}",
        probe.statuses
    );
    assert!(probe.shutdown());
}
