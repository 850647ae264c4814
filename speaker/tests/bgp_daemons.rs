//! End to end against real BIRD, FRR (bgpd) and GoBGP daemons in network namespaces.
//!
//! Each test builds its own pair of namespaces (speaker, router) joined by a veth pair; the
//! daemon runs in the router namespace and the real speaker code runs as the `bgp-probe`
//! binary under `ip netns exec` in the speaker namespace. A separate process (rather than
//! `setns` inside the test) keeps the test process in the root namespace, lets tests run in
//! parallel, and exercises the same binary-level path a node runs. Tests print why and pass
//! when they are not root or a daemon is not installed.

mod bgp_support;

use std::time::Duration;

use bgp_support::lab::{
    Lab, Probe, ROUTER_V4, SPEAKER_V4, SPEAKER_V6, eventually, skip_unless_available,
};
use ferrolb_speaker::bgp::config::Role;
use serde_json::json;

const SPEAKER_AS: u32 = 64512;
const ROUTER_AS: u32 = 64513;
const ESTABLISH: Duration = Duration::from_secs(20);
const CONVERGE: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Daemon {
    Bird,
    Frr,
    Gobgp,
}

struct Session {
    ibgp: bool,
    password: Option<&'static str>,
    graceful_restart: bool,
    /// The router's own BGP Role (RFC 9234, FRR's spelling) and whether it requires ours.
    role: Option<(Role, bool)>,
}

impl Daemon {
    fn binaries(self) -> &'static [&'static str] {
        match self {
            Daemon::Bird => &["bird", "birdc"],
            Daemon::Frr => &["/usr/lib/frr/bgpd", "vtysh"],
            Daemon::Gobgp => &["gobgpd", "gobgp"],
        }
    }

    fn start(self, lab: &mut Lab, s: &Session) {
        let peer_as = if s.ibgp { ROUTER_AS } else { SPEAKER_AS };
        match self {
            Daemon::Bird => {
                let password = s
                    .password
                    .map(|p| format!("password \"{p}\";"))
                    .unwrap_or_default();
                let gr = if s.graceful_restart {
                    "graceful restart on;"
                } else {
                    ""
                };
                // BIRD spells the route-server roles with an underscore.
                let role = s
                    .role
                    .map(|(r, strict)| {
                        let strict = if strict { "require roles on;" } else { "" };
                        format!("local role {}; {strict}", r.name().replace('-', "_"))
                    })
                    .unwrap_or_default();
                let conf = format!(
                    "router id {ROUTER_V4};\nprotocol device {{}}\n\
                     protocol bgp spk {{ local {ROUTER_V4} as {ROUTER_AS}; neighbor {SPEAKER_V4} as {peer_as};\n\
                     passive on; direct; {password} {gr} {role}\n\
                     ipv4 {{ import all; export none; gateway direct; }};\n\
                     ipv6 {{ import all; export none; gateway direct; }}; }}\n"
                );
                lab.spawn_bird(&conf);
            }
            Daemon::Frr => {
                let password = s
                    .password
                    .map(|p| format!(" neighbor {SPEAKER_V4} password {p}\n"))
                    .unwrap_or_default();
                let role = s
                    .role
                    .map(|(r, strict)| {
                        let strict = if strict { " strict-mode" } else { "" };
                        format!(" neighbor {SPEAKER_V4} local-role {r}{strict}\n")
                    })
                    .unwrap_or_default();
                let conf = format!(
                    "hostname r1\nlog stdout informational\nrouter bgp {ROUTER_AS}\n bgp router-id {ROUTER_V4}\n bgp log-neighbor-changes\n no bgp ebgp-requires-policy\n\
                     neighbor {SPEAKER_V4} remote-as {peer_as}\n neighbor {SPEAKER_V4} passive\n{password}{role}\
                     address-family ipv4 unicast\n  neighbor {SPEAKER_V4} activate\n exit-address-family\n\
                     address-family ipv6 unicast\n  neighbor {SPEAKER_V4} activate\n exit-address-family\n"
                );
                std::fs::write(lab.path("bgpd.conf"), conf).unwrap();
                let (c, p, d) = (lab.path("bgpd.conf"), lab.path("bgpd.pid"), lab.path(""));
                lab.spawn_router(
                    &[
                        "/usr/lib/frr/bgpd",
                        "-f",
                        &c,
                        "-i",
                        &p,
                        "-Z",
                        "-S",
                        "-P",
                        "0",
                        "-l",
                        ROUTER_V4,
                        "--vty_socket",
                        &d,
                    ],
                    "bgpd.log",
                );
            }
            Daemon::Gobgp => {
                let conf = format!(
                    "[global.config]\n  as = {ROUTER_AS}\n  router-id = \"{ROUTER_V4}\"\n  local-address-list = [\"{ROUTER_V4}\"]\n\
                     [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{SPEAKER_V4}\"\n    peer-as = {peer_as}\n\
                     [neighbors.transport.config]\n    passive-mode = true\n\
                     [[neighbors.afi-safis]]\n  [neighbors.afi-safis.config]\n    afi-safi-name = \"ipv4-unicast\"\n\
                     [[neighbors.afi-safis]]\n  [neighbors.afi-safis.config]\n    afi-safi-name = \"ipv6-unicast\"\n"
                );
                std::fs::write(lab.path("gobgpd.toml"), conf).unwrap();
                let c = lab.path("gobgpd.toml");
                lab.spawn_router(&["gobgpd", "-f", &c, "--pprof-disable"], "gobgpd.log");
            }
        }
    }

    /// The daemon's view of one prefix, or None when it does not hold it.
    fn route(self, lab: &Lab, prefix: &str) -> Option<String> {
        let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
        let out = match self {
            Daemon::Bird => {
                let ctl = lab.path("bird.ctl");
                lab.router_cmd(&["birdc", "-s", &ctl, "show", "route", prefix, "all"])
            }
            Daemon::Frr => {
                let d = lab.path("");
                let cmd = format!("show bgp {afi} unicast {prefix}");
                lab.router_cmd(&["vtysh", "--vty_socket", &d, "-d", "bgpd", "-c", &cmd])
            }
            Daemon::Gobgp => lab.router_cmd(&["gobgp", "global", "rib", "-a", afi, prefix]),
        };
        let present = match self {
            Daemon::Bird => out.lines().any(|l| l.starts_with(prefix)),
            Daemon::Frr => out.contains(&format!("BGP routing table entry for {prefix}")),
            Daemon::Gobgp => out.lines().any(|l| l.contains(&format!(" {prefix} "))),
        };
        present.then_some(out)
    }

    /// Text each daemon prints for our attributes.
    fn expected(self, ibgp: bool, next_hop: &str, large: bool) -> Vec<String> {
        let mut v = vec![];
        match self {
            Daemon::Bird => {
                v.push(format!("BGP.next_hop: {next_hop}"));
                v.push(if ibgp {
                    "BGP.as_path: \n".into()
                } else {
                    format!("BGP.as_path: {SPEAKER_AS}\n")
                });
                v.push("BGP.community: (64512,100)".into());
                if ibgp {
                    v.push("BGP.local_pref: 200".into());
                }
                if large {
                    v.push("BGP.large_community: (64512, 1, 2)".into());
                }
            }
            Daemon::Frr => {
                v.push(format!("{next_hop} from {SPEAKER_V4}"));
                v.push(if ibgp {
                    "  Local\n".into()
                } else {
                    format!("  {SPEAKER_AS}\n")
                });
                v.push("Community: 64512:100".into());
                if ibgp {
                    v.push("localpref 200".into());
                }
                if large {
                    v.push("Large Community: 64512:1:2".into());
                }
            }
            Daemon::Gobgp => {
                v.push(format!(" {next_hop} "));
                if !ibgp {
                    v.push(format!(" {SPEAKER_AS} "));
                }
                v.push("{Communities: 64512:100}".into());
                if ibgp {
                    v.push("{LocalPref: 200}".into());
                }
                if large {
                    v.push("{LargeCommunity: [ 64512:1:2]}".into());
                }
            }
        }
        v
    }
}

fn peer_json(ibgp: bool, password: Option<&str>, graceful_restart: bool) -> serde_json::Value {
    let my_asn = if ibgp { ROUTER_AS } else { SPEAKER_AS };
    json!({
        "id": "router", "my_asn": my_asn, "peer_asn": ROUTER_AS,
        "peer_address": ROUTER_V4, "peer_port": 179, "source_address": SPEAKER_V4,
        "router_id": null, "hold_time": {"secs": 90, "nanos": 0}, "keepalive_time": null,
        "connect_retry": {"secs": 1, "nanos": 0}, "ebgp_multihop": false,
        "password": password, "graceful_restart": graceful_restart,
        // No IPv6 next hop configured: the speaker finds fd00:99::1 on the session's interface.
        "next_hop_v4": null, "next_hop_v6": null,
    })
}

fn advertise(prefixes: &[&str]) -> serde_json::Value {
    let advs: Vec<serde_json::Value> = prefixes
        .iter()
        .map(|p| {
            let large = if p.contains(':') {
                json!([])
            } else {
                json!([{"global": 64512, "local1": 1, "local2": 2}])
            };
            json!({"prefix": p, "attrs": {
                "local_pref": 200,
                "communities": [(64512u32 << 16) | 100],
                "large_communities": large,
            }})
        })
        .collect();
    json!({"advertise": {"peer": "router", "advertisements": advs}})
}

/// Whether `d` cannot run here (printed); fails instead under `FERROLB_REQUIRE_BINARIES=1`.
fn skip(d: Daemon) -> bool {
    skip_unless_available(d.binaries())
}

const V4_KEEP: &str = "10.99.10.1/32";
const V4_GONE: &str = "10.99.10.2/32";
const V6_KEEP: &str = "fd00:99:10::1/128";
const V6_GONE: &str = "fd00:99:10::2/128";

/// Establishes, checks both families' routes and attributes, then withdraws one of each.
fn routes_and_withdrawal(d: Daemon, name: &str, ibgp: bool) {
    if skip(d) {
        return;
    }
    let mut lab = Lab::new(name);
    let session = Session {
        ibgp,
        password: None,
        graceful_restart: false,
        role: None,
    };
    d.start(&mut lab, &session);
    let mut probe = Probe::start(&lab, &peer_json(ibgp, None, false));
    probe.send(advertise(&[V4_KEEP, V4_GONE, V6_KEEP, V6_GONE]));
    assert!(
        probe.wait_state("Established", ESTABLISH).is_some(),
        "{d:?}: no session; last status {:?}",
        probe.last
    );
    for (prefix, nh, large) in [
        (V4_KEEP, SPEAKER_V4, true),
        (V4_GONE, SPEAKER_V4, true),
        (V6_KEEP, SPEAKER_V6, false),
        (V6_GONE, SPEAKER_V6, false),
    ] {
        let mut seen = None;
        assert!(
            eventually(CONVERGE, || {
                seen = d.route(&lab, prefix);
                seen.is_some()
            }),
            "{d:?} never got {prefix}"
        );
        let text = seen.unwrap();
        for want in d.expected(ibgp, nh, large) {
            assert!(
                text.contains(&want),
                "{d:?} {prefix}: want {want:?} in\n{text}\nspeaker: {:?}",
                probe.last
            );
        }
    }
    probe.send(advertise(&[V4_KEEP, V6_KEEP]));
    for gone in [V4_GONE, V6_GONE] {
        assert!(
            eventually(CONVERGE, || d.route(&lab, gone).is_none()),
            "{d:?} still has {gone}"
        );
    }
    assert!(d.route(&lab, V4_KEEP).is_some() && d.route(&lab, V6_KEEP).is_some());
    probe.shutdown();
}

#[test]
fn bird_ebgp_gets_both_families_with_attributes_and_withdrawals() {
    routes_and_withdrawal(Daemon::Bird, "bird-e", false);
}

#[test]
fn bird_ibgp_gets_both_families_with_local_pref_and_withdrawals() {
    routes_and_withdrawal(Daemon::Bird, "bird-i", true);
}

#[test]
fn frr_ebgp_gets_both_families_with_attributes_and_withdrawals() {
    routes_and_withdrawal(Daemon::Frr, "frr-e", false);
}

#[test]
fn frr_ibgp_gets_both_families_with_local_pref_and_withdrawals() {
    routes_and_withdrawal(Daemon::Frr, "frr-i", true);
}

#[test]
fn gobgp_ebgp_gets_both_families_with_attributes_and_withdrawals() {
    routes_and_withdrawal(Daemon::Gobgp, "gobgp-e", false);
}

#[test]
fn gobgp_ibgp_gets_both_families_with_local_pref_and_withdrawals() {
    routes_and_withdrawal(Daemon::Gobgp, "gobgp-i", true);
}

/// The session comes up only when both sides use the same TCP-MD5 key.
fn md5(d: Daemon, name: &str, ours: &str, establishes: bool) {
    if skip(d) {
        return;
    }
    let mut lab = Lab::new(name);
    d.start(
        &mut lab,
        &Session {
            ibgp: false,
            password: Some("s3cret-md5"),
            graceful_restart: false,
            role: None,
        },
    );
    let mut probe = Probe::start(&lab, &peer_json(false, Some(ours), false));
    probe.send(advertise(&[V4_KEEP]));
    if establishes {
        assert!(probe.wait_state("Established", ESTABLISH).is_some());
        assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_some()));
    } else {
        // Segments with a wrong signature are dropped by the router's kernel: no session.
        // The attempt is given up after the connect timeout (10 s), and the status says what
        // an operator should look at.
        let failed = probe.wait_for(Duration::from_secs(15), |v| {
            v["status"]["state"] == "Established" || v["status"]["last_error"].is_string()
        });
        let last = failed.unwrap_or_else(|| panic!("no error recorded: {:?}", probe.last));
        assert_ne!(last["status"]["state"], "Established", "{last}");
        assert!(d.route(&lab, V4_KEEP).is_none());
        let error = last["status"]["last_error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with(&format!("no TCP connection to {ROUTER_V4}:179 within"))
                && error.contains("TCP-MD5"),
            "{last}"
        );
    }
    probe.shutdown();
}

#[test]
fn bird_md5_session_comes_up_with_the_right_password() {
    md5(Daemon::Bird, "bird-md5ok", "s3cret-md5", true);
}

#[test]
fn bird_md5_session_stays_down_with_a_wrong_password() {
    md5(Daemon::Bird, "bird-md5bad", "wrong", false);
}

#[test]
fn frr_md5_session_comes_up_with_the_right_password() {
    md5(Daemon::Frr, "frr-md5ok", "s3cret-md5", true);
}

#[test]
fn frr_md5_session_stays_down_with_a_wrong_password() {
    md5(Daemon::Frr, "frr-md5bad", "wrong", false);
}

#[test]
fn bird_keeps_routes_across_a_speaker_restart_with_graceful_restart_until_end_of_rib() {
    let d = Daemon::Bird;
    if skip(d) {
        return;
    }
    let mut lab = Lab::new("bird-gr");
    d.start(
        &mut lab,
        &Session {
            ibgp: false,
            password: None,
            graceful_restart: true,
            role: None,
        },
    );
    let mut probe = Probe::start(&lab, &peer_json(false, None, true));
    probe.send(advertise(&[V4_KEEP, V4_GONE]));
    assert!(probe.wait_state("Established", ESTABLISH).is_some());
    assert!(eventually(CONVERGE, || d.route(&lab, V4_GONE).is_some()));
    // A crash: the connection closes without a NOTIFICATION.
    probe.kill();
    std::thread::sleep(Duration::from_secs(2));
    let stale = d.route(&lab, V4_GONE);
    assert!(
        stale.is_some(),
        "BIRD dropped our routes when the speaker died"
    );
    // The restarted speaker no longer announces V4_GONE: BIRD drops it after our End-of-RIB.
    let mut probe = Probe::start(&lab, &peer_json(false, None, true));
    probe.send(advertise(&[V4_KEEP]));
    assert!(probe.wait_state("Established", ESTABLISH).is_some());
    assert!(eventually(CONVERGE, || d.route(&lab, V4_GONE).is_none()));
    assert!(d.route(&lab, V4_KEEP).is_some());
    probe.shutdown();
}

#[test]
fn bird_drops_routes_at_once_when_a_speaker_without_graceful_restart_dies() {
    let d = Daemon::Bird;
    if skip(d) {
        return;
    }
    let mut lab = Lab::new("bird-nogr");
    d.start(
        &mut lab,
        &Session {
            ibgp: false,
            password: None,
            graceful_restart: false,
            role: None,
        },
    );
    let mut probe = Probe::start(&lab, &peer_json(false, None, false));
    probe.send(advertise(&[V4_KEEP]));
    assert!(probe.wait_state("Established", ESTABLISH).is_some());
    assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_some()));
    probe.kill();
    assert!(eventually(Duration::from_secs(2), || d
        .route(&lab, V4_KEEP)
        .is_none()));
}

/// Drains (RFC 8326) over iBGP: the router sees our routes again with GRACEFUL_SHUTDOWN and
/// LOCAL_PREF 0 while the session is still up, then loses them when we stop.
fn graceful_shutdown(d: Daemon, name: &str) {
    if skip(d) {
        return;
    }
    let mut lab = Lab::new(name);
    let session = Session {
        ibgp: true,
        password: None,
        graceful_restart: false,
        role: None,
    };
    d.start(&mut lab, &session);
    let mut probe = Probe::start(&lab, &peer_json(true, None, false));
    probe.send(advertise(&[V4_KEEP, V6_KEEP]));
    assert!(probe.wait_state("Established", ESTABLISH).is_some());
    assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_some()));
    let (community, local_pref) = match d {
        Daemon::Bird => ("(65535,0)", "BGP.local_pref: 0\n"),
        Daemon::Frr => ("graceful-shutdown", "localpref 0,"),
        Daemon::Gobgp => ("65535:0", "{LocalPref: 0}"),
    };
    probe.send(json!("drain"));
    for prefix in [V4_KEEP, V6_KEEP] {
        let mut last = None;
        let drained = eventually(CONVERGE, || {
            last = d.route(&lab, prefix);
            last.as_deref()
                .is_some_and(|r| r.contains(community) && r.contains(local_pref))
        });
        assert!(drained, "{d:?} {prefix} while draining: {last:?}");
    }
    // (The routes seen above with the community are the session still up: a closed session
    // withdraws them.)
    probe.shutdown();
    assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_none()));
}

#[test]
fn bird_sees_our_routes_with_graceful_shutdown_and_local_pref_0_while_we_drain() {
    graceful_shutdown(Daemon::Bird, "bird-gshut");
}

#[test]
fn frr_sees_our_routes_with_graceful_shutdown_and_local_pref_0_while_we_drain() {
    graceful_shutdown(Daemon::Frr, "frr-gshut");
}

/// BFD with BIRD (RFC 5882): a cut is seen by BFD within a second and takes the BGP session
/// down then, where the 9 s hold time alone would take up to 9 s. Five cuts.
#[test]
fn bfd_takes_the_bgp_session_down_within_a_second_of_a_cut_where_the_hold_time_takes_nine() {
    let d = Daemon::Bird;
    if skip(d) {
        return;
    }
    if skip_unless_available(&["iptables", "ip6tables"]) {
        return;
    }
    let mut lab = Lab::new("bird-bfdbgp");
    start_bird_with_bfd(&mut lab);
    let peer = bfd_peer(3);
    let mut probe = Probe::start(&lab, &peer);
    probe.send(advertise(&[V4_KEEP]));
    let mut took = Vec::new();
    for cut in 1..=5 {
        // Up, and past the Poll Sequence that replaces the 1 s floor of a session coming up
        // with the profile's 300 ms (before it, detection takes 3 × 1 s).
        let up = probe.wait_for(ESTABLISH, |v| {
            v["status"]["state"] == "Established"
                && v["status"]["bfd"] == "Up"
                && v["status"]["bfd_detection_time"] == json!({"secs": 0, "nanos": 900_000_000})
        });
        assert!(
            up.is_some(),
            "cut {cut}: BGP Established with BFD Up at 300 ms x 3"
        );
        assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_some()));
        let at = std::time::Instant::now();
        lab.cut_router();
        let down = probe.wait_for(Duration::from_secs(5), |v| {
            v["status"]["state"] != "Established" && v["status"]["bfd_downs"] == cut
        });
        took.push(at.elapsed());
        lab.restore_router();
        let down = down.unwrap_or_else(|| panic!("cut {cut}: the BGP session stayed up"));
        assert!(
            down["status"]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("BFD went down")),
            "{down}"
        );
    }
    took.sort();
    println!(
        "BFD 300 ms x 3 took the BGP session down {:?} (median) / {:?} (max) after a cut; \
         the hold time is 9 s",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(1500)),
        "{took:?}"
    );
    probe.shutdown();
}

/// BIRD passive towards the speaker with `bfd on` (300 ms x 3) and a 9 s hold time.
fn start_bird_with_bfd(lab: &mut Lab) {
    let conf = format!(
        "router id {ROUTER_V4};\nprotocol device {{}}\n\
         protocol bfd {{ interface \"*\" {{ interval 300 ms; multiplier 3; }}; }}\n\
         protocol bgp spk {{ local {ROUTER_V4} as {ROUTER_AS}; neighbor {SPEAKER_V4} as {SPEAKER_AS};\n\
         passive on; direct; bfd on; hold time 9; error wait time 1, 2;\n\
         ipv4 {{ import all; export none; gateway direct; }};\n\
         ipv6 {{ import all; export none; gateway direct; }}; }}\n"
    );
    lab.spawn_bird(&conf);
}

/// The speaker's side of [`start_bird_with_bfd`]: BFD at 300 ms with `multiplier`.
fn bfd_peer(multiplier: u8) -> serde_json::Value {
    let mut peer = peer_json(false, None, false);
    let ms300 = json!({"secs": 0, "nanos": 300_000_000});
    peer["hold_time"] = json!({"secs": 9, "nanos": 0});
    peer["bfd"] = json!({
        "receive_interval": ms300, "transmit_interval": ms300, "detect_multiplier": multiplier,
        "passive": false, "minimum_ttl": 254,
    });
    peer
}

#[test]
fn a_changed_bfd_profile_applies_to_the_running_session_without_restarting_bgp() {
    let d = Daemon::Bird;
    if skip(d) {
        return;
    }
    let mut lab = Lab::new("bird-bfdchg");
    start_bird_with_bfd(&mut lab);
    let mut probe = Probe::start(&lab, &bfd_peer(3));
    probe.send(advertise(&[V4_KEEP]));
    let detection = |ms: u64| json!({"secs": ms / 1000, "nanos": (ms % 1000) * 1_000_000});
    let up = probe.wait_for(ESTABLISH, |v| {
        v["status"]["state"] == "Established"
            && v["status"]["bfd"] == "Up"
            && v["status"]["bfd_detection_time"] == detection(900)
    });
    assert!(
        up.is_some(),
        "Established with BFD Up at 300 ms x 3: {:?}",
        probe.last
    );
    // The peer's detection time is its own multiplier; ours is BIRD's 3 x our new receive
    // interval. A multiplier of 5 shows at BIRD; a receive interval of 500 ms shows here.
    let mut slower = bfd_peer(5);
    slower["bfd"]["receive_interval"] = json!({"secs": 0, "nanos": 500_000_000});
    probe.send(json!({ "peers": [slower] }));
    let changed = probe.wait_for(ESTABLISH, |v| {
        v["status"]["state"] != "Established"
            || v["status"]["bfd_detection_time"] == detection(1500)
    });
    let changed = changed.unwrap_or_else(|| panic!("the new timers: {:?}", probe.last));
    assert_eq!(changed["status"]["state"], "Established", "{changed}");
    assert_eq!(changed["status"]["bfd"], "Up", "{changed}");
    assert_eq!(changed["status"]["established_count"], 1, "{changed}");
    // Without a profile BFD stops: AdminDown to BIRD, and our side keeps BGP. BIRD 2.0.12,
    // still configured `bfd on`, does not follow RFC 5882 §3.2 here: it closes the session
    // (Cease 6/0) and accepts it again without BFD.
    let mut without = bfd_peer(3);
    without["bfd"] = serde_json::Value::Null;
    probe.send(json!({ "peers": [without] }));
    let again = probe.wait_for(ESTABLISH, |v| {
        v["status"]["bfd"].is_null() && v["status"]["state"] == "Established"
    });
    let again = again.unwrap_or_else(|| panic!("Established without BFD: {:?}", probe.last));
    assert_eq!(again["status"]["notifications_sent"], json!({}), "{again}");
    assert_eq!(again["status"]["bfd_downs"], 0, "{again}");
    probe.shutdown();
}

/// A lab with `d` as a plain eBGP router (no password, no graceful restart), or `None` when
/// `d` cannot run here.
fn ebgp_lab(d: Daemon, name: &str) -> Option<Lab> {
    if skip(d) {
        return None;
    }
    let mut lab = Lab::new(name);
    d.start(
        &mut lab,
        &Session {
            ibgp: false,
            password: None,
            graceful_restart: false,
            role: None,
        },
    );
    Some(lab)
}

/// `dynamicASN: external`: the router's AS is taken from its OPEN, and the session is eBGP.
fn dynamic_external_asn(d: Daemon, name: &str) {
    let Some(lab) = ebgp_lab(d, name) else {
        return;
    };
    let mut peer = peer_json(false, None, false);
    peer["peer_asn"] = json!(0);
    peer["peer_asn_external"] = json!(true);
    let mut probe = Probe::start(&lab, &peer);
    probe.send(advertise(&[V4_KEEP]));
    assert!(
        probe.wait_state("Established", ESTABLISH).is_some(),
        "{:?}",
        probe.last
    );
    assert!(eventually(CONVERGE, || d.route(&lab, V4_KEEP).is_some()));
    probe.shutdown();
}

#[test]
fn bird_comes_up_with_a_dynamic_external_asn() {
    dynamic_external_asn(Daemon::Bird, "bird-dynasn");
}

#[test]
fn frr_comes_up_with_a_dynamic_external_asn() {
    dynamic_external_asn(Daemon::Frr, "frr-dynasn");
}

/// A NOTIFICATION from the router is kept as the last one received, in words, and is the
/// session's last error.
fn notification_from_the_router(d: Daemon, name: &str) {
    let Some(lab) = ebgp_lab(d, name) else {
        return;
    };
    let mut probe = Probe::start(&lab, &peer_json(false, None, false));
    probe.send(advertise(&[V4_KEEP, V6_KEEP]));
    let up = probe.wait_for(ESTABLISH, |v| {
        v["status"]["state"] == "Established" && v["status"]["announced_prefixes"] == 2
    });
    let up = up.unwrap_or_else(|| panic!("Established with both routes: {:?}", probe.last));
    assert_eq!(
        (&up["status"]["announced_v4"], &up["status"]["announced_v6"]),
        (&json!(1), &json!(1))
    );
    assert!(up["status"]["established_since"].is_object(), "{up}");
    assert_eq!(up["status"]["hold_time"], json!({"secs": 90, "nanos": 0}));
    let shut = match d {
        Daemon::Bird => {
            let ctl = lab.path("bird.ctl");
            lab.router_cmd(&["birdc", "-s", &ctl, "disable", "spk"])
        }
        _ => {
            let dir = lab.path("");
            let cmd = format!("neighbor {SPEAKER_V4} shutdown");
            lab.router_cmd(&[
                "vtysh",
                "--vty_socket",
                &dir,
                "-d",
                "bgpd",
                "-c",
                "configure terminal",
                "-c",
                &format!("router bgp {ROUTER_AS}"),
                "-c",
                &cmd,
            ])
        }
    };
    let down = probe.wait_for(ESTABLISH, |v| {
        v["status"]["last_notification_received"].is_object()
            && v["status"]["state"] != "Established"
    });
    let down = down.unwrap_or_else(|| panic!("no NOTIFICATION recorded after `{shut}`"));
    let n = &down["status"]["last_notification_received"];
    assert_eq!(
        (&n["code"], &n["subcode"]),
        (&json!(6), &json!(2)),
        "{down}"
    );
    assert!(
        n["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("6/2 Cease: administrative shutdown")),
        "{down}"
    );
    assert!(
        down["status"]["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the peer sent 6/2 Cease")),
        "{down}"
    );
    assert!(down["status"]["established_since"].is_null(), "{down}");
    probe.shutdown();
}

#[test]
fn a_notification_from_bird_is_recorded_in_words_as_the_last_one_received() {
    notification_from_the_router(Daemon::Bird, "bird-notif");
}

#[test]
fn a_notification_from_frr_is_recorded_in_words_as_the_last_one_received() {
    notification_from_the_router(Daemon::Frr, "frr-notif");
}

impl Daemon {
    /// How the daemon shows a route's Only-to-Customer attribute holding `asn`.
    fn only_to_customer(self, asn: u32) -> String {
        match self {
            Daemon::Bird => format!("BGP.otc: {asn}"),
            _ => format!("otc {asn}"),
        }
    }

    /// The daemon's own account of the session (where it names a role mismatch).
    fn session_text(self, lab: &Lab) -> String {
        match self {
            Daemon::Bird => {
                let ctl = lab.path("bird.ctl");
                lab.router_cmd(&["birdc", "-s", &ctl, "show", "protocols", "all", "spk"])
            }
            _ => {
                // bgpd forgets a connection it accepted once it fails; its log keeps the why.
                let d = lab.path("");
                let cmd = format!("show bgp neighbors {SPEAKER_V4}");
                let shown =
                    lab.router_cmd(&["vtysh", "--vty_socket", &d, "-d", "bgpd", "-c", &cmd]);
                let log = std::fs::read_to_string(lab.path("bgpd.log")).unwrap_or_default();
                format!("{shown}\n--- bgpd.log\n{log}")
            }
        }
    }
}

/// A lab whose router has BGP Role `router` (required of us when `strict`), and a speaker
/// with role `ours` (none: `None`) and strictRole.
fn role_lab(
    d: Daemon,
    name: &str,
    router: Role,
    strict: bool,
    ours: Option<Role>,
) -> Option<(Lab, Probe)> {
    if skip(d) {
        return None;
    }
    let mut lab = Lab::new(name);
    d.start(
        &mut lab,
        &Session {
            ibgp: false,
            password: None,
            graceful_restart: false,
            role: Some((router, strict)),
        },
    );
    let mut peer = peer_json(false, None, false);
    if let Some(ours) = ours {
        peer["role"] = json!(ours.name());
        peer["strict_role"] = json!(true);
    }
    let mut probe = Probe::start(&lab, &peer);
    probe.send(advertise(&[V4_KEEP]));
    Some((lab, probe))
}

/// Roles that pair come up with `bgp-role` agreed, and our route carries Only-to-Customer
/// with our AS exactly when the router is our customer or lateral peer.
fn roles_that_pair(d: Daemon, name: &str, router: Role) {
    let ours = router.counterpart();
    let Some((lab, mut probe)) = role_lab(d, name, router, true, Some(ours)) else {
        return;
    };
    let up = probe.wait_state("Established", ESTABLISH);
    let up = up.unwrap_or_else(|| {
        panic!(
            "{d:?} as {router}, we {ours}: no session; {:?}\n{}",
            probe.last,
            d.session_text(&lab)
        )
    });
    assert!(
        up["status"]["capabilities"]
            .as_array()
            .is_some_and(|c| c.contains(&json!("bgp-role"))),
        "{up}"
    );
    let mut seen = None;
    assert!(
        eventually(CONVERGE, || {
            seen = d.route(&lab, V4_KEEP);
            seen.is_some()
        }),
        "{d:?} never got {V4_KEEP}"
    );
    let text = seen.unwrap();
    let otc = d.only_to_customer(SPEAKER_AS);
    assert_eq!(
        text.contains(&otc),
        ours.marks_only_to_customer(),
        "{d:?} as {router}, we {ours}: {otc:?} expected {} in\n{text}",
        ours.marks_only_to_customer()
    );
    probe.shutdown();
}

/// Roles that do not pair never come up; both sides name the mismatch.
fn roles_that_do_not_pair(d: Daemon, name: &str, router: Role, strict: bool, ours: Option<Role>) {
    let Some((lab, mut probe)) = role_lab(d, name, router, strict, ours) else {
        return;
    };
    let down = probe.wait_for(ESTABLISH, |v| {
        v["status"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("role mismatch"))
    });
    let down = down.unwrap_or_else(|| {
        panic!(
            "{d:?} as {router}, we {ours:?}: no role mismatch; {:?}\n{}",
            probe.last,
            d.session_text(&lab)
        )
    });
    assert_eq!(down["status"]["established_count"], 0, "{down}");
    let mut theirs = String::new();
    assert!(
        eventually(CONVERGE, || {
            theirs = d.session_text(&lab);
            theirs.to_lowercase().contains("role mismatch")
        }),
        "{d:?} does not name the mismatch:\n{theirs}\nours: {down}"
    );
    probe.shutdown();
}

#[test]
fn bird_as_our_provider_gets_our_route_without_only_to_customer() {
    roles_that_pair(Daemon::Bird, "bird-role-prov", Role::Provider);
}

#[test]
fn bird_as_our_customer_gets_our_route_with_only_to_customer_set_to_our_as() {
    roles_that_pair(Daemon::Bird, "bird-role-cust", Role::Customer);
}

#[test]
fn bird_as_our_lateral_peer_gets_our_route_with_only_to_customer_set_to_our_as() {
    roles_that_pair(Daemon::Bird, "bird-role-peer", Role::Peer);
}

#[test]
fn frr_as_our_provider_gets_our_route_without_only_to_customer() {
    roles_that_pair(Daemon::Frr, "frr-role-prov", Role::Provider);
}

#[test]
fn frr_as_our_customer_gets_our_route_with_only_to_customer_set_to_our_as() {
    roles_that_pair(Daemon::Frr, "frr-role-cust", Role::Customer);
}

#[test]
fn bird_and_we_both_customers_is_a_role_mismatch_on_both_sides() {
    roles_that_do_not_pair(
        Daemon::Bird,
        "bird-role-mism",
        Role::Customer,
        false,
        Some(Role::Customer),
    );
}

#[test]
fn frr_and_we_both_customers_is_a_role_mismatch_on_both_sides() {
    roles_that_do_not_pair(
        Daemon::Frr,
        "frr-role-mism",
        Role::Customer,
        false,
        Some(Role::Customer),
    );
}

#[test]
fn bird_requiring_roles_refuses_a_speaker_without_one_and_we_say_why() {
    roles_that_do_not_pair(Daemon::Bird, "bird-role-strict", Role::Provider, true, None);
}

#[test]
fn frr_in_strict_mode_refuses_a_speaker_without_a_role_and_we_say_why() {
    roles_that_do_not_pair(Daemon::Frr, "frr-role-strict", Role::Provider, true, None);
}

// ADD-PATH (RFC 7911) send with third-party next hops: one session carries several paths of
// one prefix, each via another node's address on the router's link. In these labs the
// "other node" is a second address on the speaker's end of the veth, so that the router
// resolves it on its link (and it answers ARP and neighbour discovery).

/// A second node's addresses on the router's link.
const OTHER_NODE_V4: &str = "10.99.0.3";
const OTHER_NODE_V6: &str = "fd00:99::3";
const ECMP_V4: &str = "10.99.30.1/32";
const ECMP_V6: &str = "fd00:99:30::1/128";

/// Adds the other node's addresses to the speaker's end of the link.
fn add_other_node(lab: &Lab) {
    for (addr, extra) in [
        (format!("{OTHER_NODE_V4}/24"), None),
        (format!("{OTHER_NODE_V6}/64"), Some("nodad")),
    ] {
        let mut args = vec![
            "ip",
            "-n",
            &lab.speaker_ns,
            "addr",
            "add",
            &addr,
            "dev",
            "va",
        ];
        args.extend(extra);
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
}

/// Our eBGP peer offering ADD-PATH send. With two IPv6 addresses on the link, the session's
/// own IPv6 next hop is named rather than found.
fn add_path_peer() -> serde_json::Value {
    let mut peer = peer_json(false, None, false);
    peer["add_path"] = json!(true);
    peer["next_hop_v6"] = json!(SPEAKER_V6);
    peer
}

/// Paths as (prefix, third-party next hop; `None`: ours).
fn advertise_paths(paths: &[(&str, Option<&str>)]) -> serde_json::Value {
    let advs: Vec<serde_json::Value> = paths
        .iter()
        .map(|(prefix, next_hop)| {
            json!({"prefix": prefix, "next_hop": next_hop, "attrs": {
                "local_pref": null, "communities": [], "large_communities": [],
            }})
        })
        .collect();
    json!({"advertise": {"peer": "router", "advertisements": advs}})
}

/// Our own path and the other node's for both ECMP prefixes.
fn both_nodes() -> serde_json::Value {
    advertise_paths(&[
        (ECMP_V4, None),
        (ECMP_V4, Some(OTHER_NODE_V4)),
        (ECMP_V6, None),
        (ECMP_V6, Some(OTHER_NODE_V6)),
    ])
}

/// The router namespace's kernel route for `prefix` (`ip route show PREFIX`).
fn kernel_route(lab: &Lab, prefix: &str) -> String {
    let family = if prefix.contains(':') { "-6" } else { "-4" };
    lab.router_cmd(&["ip", family, "route", "show", prefix])
}

/// The `nexthop via ADDR dev vb` lines of a multipath kernel route, as ADDR, sorted.
fn kernel_nexthops(route: &str) -> Vec<String> {
    let mut v: Vec<String> = route
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nexthop via "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

/// BIRD passive towards the speaker, with `add paths rx` on both channels when `rx`, and
/// kernel protocols that merge equal paths into one multipath route (ECMP).
fn start_bird_add_path(lab: &mut Lab, rx: bool) {
    let rx = if rx { "add paths rx;" } else { "" };
    let conf = format!(
        "router id {ROUTER_V4};\nprotocol device {{}}\n\
         protocol kernel {{ ipv4 {{ export all; }}; merge paths yes limit 16; }}\n\
         protocol kernel {{ ipv6 {{ export all; }}; merge paths yes limit 16; }}\n\
         protocol bgp spk {{ local {ROUTER_V4} as {ROUTER_AS}; neighbor {SPEAKER_V4} as {SPEAKER_AS};\n\
         passive on; direct;\n\
         ipv4 {{ import all; export none; gateway direct; {rx} }};\n\
         ipv6 {{ import all; export none; gateway direct; {rx} }}; }}\n"
    );
    lab.spawn_bird(&conf);
}

/// The `BGP.next_hop` values of BIRD's paths of `prefix` (`birdc show route PREFIX all`).
fn bird_next_hops(lab: &Lab, prefix: &str) -> Vec<String> {
    let ctl = lab.path("bird.ctl");
    let out = lab.router_cmd(&["birdc", "-s", &ctl, "show", "route", prefix, "all"]);
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("BGP.next_hop: "))
        .map(str::to_owned)
        .collect()
}

/// A lab with the other node's addresses, BIRD (`add paths rx` when `rx`), and our session
/// up with ADD-PATH offered; `None` when BIRD cannot run here.
fn bird_add_path_lab(name: &str, rx: bool) -> Option<(Lab, Probe)> {
    if skip(Daemon::Bird) {
        return None;
    }
    let mut lab = Lab::new(name);
    add_other_node(&lab);
    start_bird_add_path(&mut lab, rx);
    let mut probe = Probe::start(&lab, &add_path_peer());
    let up = probe.wait_state("Established", ESTABLISH);
    let up = up.unwrap_or_else(|| panic!("no session: {:?}", probe.last));
    let caps = &up["status"]["capabilities"];
    assert_eq!(
        caps.as_array().unwrap().contains(&json!("add-path")),
        rx,
        "{caps}"
    );
    Some((lab, probe))
}

#[test]
fn bird_with_add_paths_rx_installs_one_prefix_via_two_nodes_from_our_one_session() {
    let Some((lab, mut probe)) = bird_add_path_lab("bird-addpath", true) else {
        return;
    };
    probe.send(both_nodes());
    for (prefix, ours, other) in [
        (ECMP_V4, SPEAKER_V4, OTHER_NODE_V4),
        (ECMP_V6, SPEAKER_V6, OTHER_NODE_V6),
    ] {
        let mut seen = vec![];
        let both = eventually(CONVERGE, || {
            seen = bird_next_hops(&lab, prefix);
            seen.len() == 2
        });
        assert!(both, "BIRD's paths of {prefix}: {seen:?}");
        assert!(seen.contains(&ours.into()) && seen.contains(&other.into()));
        let mut route = String::new();
        let ecmp = eventually(CONVERGE, || {
            route = kernel_route(&lab, prefix);
            kernel_nexthops(&route).len() == 2
        });
        assert!(ecmp, "kernel route of {prefix}:\n{route}");
        assert_eq!(kernel_nexthops(&route), [ours, other], "{route}");
    }
    // The other node's paths go: one path, one next hop each.
    probe.send(advertise_paths(&[(ECMP_V4, None), (ECMP_V6, None)]));
    for (prefix, ours) in [(ECMP_V4, SPEAKER_V4), (ECMP_V6, SPEAKER_V6)] {
        let mut seen = vec![];
        let one = eventually(CONVERGE, || {
            seen = bird_next_hops(&lab, prefix);
            seen == [ours]
        });
        assert!(one, "BIRD's paths of {prefix}: {seen:?}");
        let mut route = String::new();
        let single = eventually(CONVERGE, || {
            route = kernel_route(&lab, prefix);
            route.starts_with(&format!("{} via {ours} dev vb", prefix_addr(prefix)))
        });
        assert!(single, "kernel route of {prefix}:\n{route}");
    }
    probe.shutdown();
}

/// The address of a host route (`10.99.30.1/32` -> `10.99.30.1`), as `ip route` prints it.
fn prefix_addr(prefix: &str) -> &str {
    prefix.split('/').next().unwrap()
}

#[test]
fn bird_without_add_paths_rx_gets_one_path_per_prefix_with_our_own_next_hop() {
    let Some((lab, mut probe)) = bird_add_path_lab("bird-noaddpath", false) else {
        return;
    };
    probe.send(both_nodes());
    let mut seen = vec![];
    let ours = eventually(CONVERGE, || {
        seen = bird_next_hops(&lab, ECMP_V4);
        !seen.is_empty()
    });
    assert!(ours, "BIRD never got {ECMP_V4}");
    assert_eq!(seen, [SPEAKER_V4]);
    assert_eq!(bird_next_hops(&lab, ECMP_V6), [SPEAKER_V6]);
    // Without our own path, the other node's replaces it.
    probe.send(advertise_paths(&[(ECMP_V4, Some(OTHER_NODE_V4))]));
    let replaced = eventually(CONVERGE, || {
        seen = bird_next_hops(&lab, ECMP_V4);
        seen == [OTHER_NODE_V4]
    });
    assert!(replaced, "BIRD's paths of {ECMP_V4}: {seen:?}");
    probe.shutdown();
}

/// Starts zebra and bgpd (passive towards the speaker, `maximum-paths 8`) in the router
/// namespace; returns the directory of their vty sockets.
fn start_frr_with_zebra(lab: &mut Lab) -> String {
    let conf = format!(
        "hostname r1\nrouter bgp {ROUTER_AS}\n bgp router-id {ROUTER_V4}\n no bgp ebgp-requires-policy\n\
         neighbor {SPEAKER_V4} remote-as {SPEAKER_AS}\n neighbor {SPEAKER_V4} passive\n\
         address-family ipv4 unicast\n  neighbor {SPEAKER_V4} activate\n  maximum-paths 8\n exit-address-family\n\
         address-family ipv6 unicast\n  neighbor {SPEAKER_V4} activate\n  maximum-paths 8\n exit-address-family\n"
    );
    lab.spawn_frr("hostname r1\n", &conf, &["-S", "-l", ROUTER_V4])
}

/// A `vtysh` command's JSON answer (zebra's or bgpd's), `null` when there is none.
fn frr_json(lab: &Lab, frr_dir: &str, command: &str) -> serde_json::Value {
    let out = lab.router_cmd(&["vtysh", "--vty_socket", frr_dir, "-c", command]);
    serde_json::from_str(&out).unwrap_or_default()
}

/// bgpd's paths of `prefix`: (next hop, multipath, best).
fn frr_paths(lab: &Lab, frr_dir: &str, prefix: &str) -> Vec<(String, bool, bool)> {
    let v = frr_json(
        lab,
        frr_dir,
        &format!("show bgp ipv4 unicast {prefix} json"),
    );
    let paths = v["paths"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<(String, bool, bool)> = paths
        .iter()
        .map(|p| {
            let nh = p["nexthops"][0]["ip"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let best = p["bestpath"]["overall"] == json!(true);
            (nh, p["multipath"] == json!(true), best)
        })
        .collect();
    out.sort();
    out
}

/// zebra's next hops of `prefix` that are in the FIB (`show ip route PREFIX json`).
fn zebra_fib_next_hops(lab: &Lab, frr_dir: &str, prefix: &str) -> Vec<String> {
    let v = frr_json(lab, frr_dir, &format!("show ip route {prefix} json"));
    let nexthops = v[prefix][0]["nexthops"].as_array().cloned();
    let mut out: Vec<String> = nexthops
        .unwrap_or_default()
        .iter()
        .filter(|n| n["fib"] == json!(true))
        .filter_map(|n| n["ip"].as_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

#[test]
fn frr_takes_our_two_paths_of_one_prefix_as_multipath_and_zebra_installs_both_next_hops() {
    let d = Daemon::Frr;
    if skip(d) || skip_unless_available(&["/usr/lib/frr/zebra"]) {
        return;
    }
    let mut lab = Lab::new("frr-addpath");
    add_other_node(&lab);
    let dir = start_frr_with_zebra(&mut lab);
    let mut probe = Probe::start(&lab, &add_path_peer());
    let up = probe.wait_state("Established", ESTABLISH);
    let up = up.unwrap_or_else(|| panic!("no session: {:?}", probe.last));
    // FRR 8.4 offers ADD-PATH receive by default.
    let caps = &up["status"]["capabilities"];
    assert!(
        caps.as_array().unwrap().contains(&json!("add-path")),
        "{caps}"
    );
    probe.send(advertise_paths(&[
        (ECMP_V4, None),
        (ECMP_V4, Some(OTHER_NODE_V4)),
    ]));
    // Both paths, both multipath, one of them best (once bgpd has run its best-path
    // selection, shortly after the paths arrive).
    let mut paths = vec![];
    let both = eventually(CONVERGE, || {
        paths = frr_paths(&lab, &dir, ECMP_V4);
        paths.iter().filter(|p| p.2).count() == 1 && paths.iter().all(|p| p.1)
    });
    assert!(both, "bgpd's paths of {ECMP_V4}: {paths:?}");
    let next_hops: Vec<&str> = paths.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(next_hops, [SPEAKER_V4, OTHER_NODE_V4]);
    let mut fib = vec![];
    let installed = eventually(CONVERGE, || {
        fib = zebra_fib_next_hops(&lab, &dir, ECMP_V4);
        fib.len() == 2
    });
    assert!(installed, "zebra's next hops of {ECMP_V4}: {fib:?}");
    assert_eq!(fib, [SPEAKER_V4, OTHER_NODE_V4]);
    let route = kernel_route(&lab, ECMP_V4);
    assert_eq!(
        kernel_nexthops(&route),
        [SPEAKER_V4, OTHER_NODE_V4],
        "{route}"
    );
    // Our own path goes: the other node's stays, alone.
    probe.send(advertise_paths(&[(ECMP_V4, Some(OTHER_NODE_V4))]));
    let one = eventually(CONVERGE, || {
        fib = zebra_fib_next_hops(&lab, &dir, ECMP_V4);
        fib == [OTHER_NODE_V4]
    });
    assert!(one, "zebra's next hops of {ECMP_V4}: {fib:?}");
    let alone = eventually(CONVERGE, || {
        paths = frr_paths(&lab, &dir, ECMP_V4);
        paths.len() == 1 && paths[0].2
    });
    assert!(alone, "bgpd's paths of {ECMP_V4}: {paths:?}");
    assert_eq!(paths, [(OTHER_NODE_V4.to_owned(), false, true)]);
    probe.shutdown();
}
