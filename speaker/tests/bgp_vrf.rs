//! A peer's `vrf`: the session's sockets are bound to the named device (`SO_BINDTODEVICE`),
//! end to end against a real BIRD in network namespaces.
//!
//! Two tests. The first binds to plain interfaces: the node namespace reaches the router only
//! through the device the peer names (its connected route lives in a table of its own, chosen
//! by an `oif` rule, and the main table's default route points at `blue`, which leads nowhere).
//! The second puts the node's interface into a real Linux VRF. This project's CI kernel has no
//! VRF (`CONFIG_NET_VRF` is not set and it loads no modules), so there that test re-runs itself
//! in a QEMU guest booting Debian's packaged kernel, which has one (`bgp_support::guest`); it
//! prints which way it tested VRF and how long the guest took.
//!
//! ```text
//!   node (speaker ns)                              router (router ns, BIRD)
//!   red    10.99.0.1/24 ───── veth ─────────────── vb 10.99.0.2/24
//!          (route in table 10, rule oif red)
//!   green  10.99.2.1/24 ───── veth ─────────────── vg 10.99.2.2/24
//!          (created as `parked`, renamed into place during the test; table 11)
//!   blue   10.99.5.1/24 ── veth to nothing; main table: default dev blue
//! ```

mod bgp_support;

use std::cell::RefCell;
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use bgp_support::guest::{Kit, QEMU, boot_with_init, in_guest, run_test_in_guest, why_failed};
use bgp_support::lab::{Lab, Probe, ROUTER_V4, SPEAKER_V4, eventually, skip_unless_available};
use serde_json::{Value, json};

const SPEAKER_AS: u32 = 64512;
const ROUTER_AS: u32 = 64513;
const ESTABLISH: Duration = Duration::from_secs(30);
const CONVERGE: Duration = Duration::from_secs(15);
const GREEN_SPEAKER: &str = "10.99.2.1";
const GREEN_ROUTER: &str = "10.99.2.2";
/// Announced to the peer bound to `red`.
const RED_ROUTE: &str = "10.99.10.1/32";
/// Announced to the peer bound to `green`.
const GREEN_ROUTE: &str = "10.99.12.1/32";
/// Announced to the peers that must not reach the router (unbound, bound to `blue`).
const LOST_ROUTE: &str = "10.99.11.1/32";

/// Runs `script` in namespace `ns` and returns what it printed; panics when it fails.
fn sh(ns: &str, script: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-ec", script])
        .output()
        .expect("ip netns exec");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lab's speaker end `va` becomes `red`, reachable only by sockets bound to it; `blue`
/// takes the main table's default route; `parked` (the future `green`) waits, down.
fn build(lab: &Lab) {
    let (s, r) = (lab.speaker_ns.as_str(), lab.router_ns.as_str());
    sh(
        s,
        "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
         ip link set va down
         ip link set va name red
         ip link set red up
         ip route del 10.99.0.0/24 dev red
         ip route add 10.99.0.0/24 dev red src 10.99.0.1 table 10
         ip rule add oif red table 10 pref 100
         ip link add blue type veth peer name blue-end
         ip addr add 10.99.5.1/24 dev blue
         ip link set blue up
         ip link set blue-end up
         ip route add default dev blue",
    );
    let out = Command::new("ip")
        .args([
            "-n", s, "link", "add", "parked", "type", "veth", "peer", "name", "vg", "netns", r,
        ])
        .output()
        .expect("ip link add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sh(
        s,
        "ip addr add 10.99.2.1/24 dev parked
         ip rule add oif green table 11 pref 101",
    );
    sh(
        r,
        "ip addr add 10.99.2.2/24 dev vg
         ip link set vg up",
    );
    // The main table holds nothing towards the router: only `blue`'s subnet and the default.
    let main = sh(s, "ip route show table main");
    assert!(
        !main.contains("10.99.0.0/24") && !main.contains("10.99.2.0/24"),
        "{main}"
    );
}

/// `parked` becomes `green`, and its connected route moves to table 11.
fn create_green(lab: &Lab) {
    sh(
        &lab.speaker_ns,
        "ip link set parked name green
         ip link set green up
         ip route add 10.99.2.0/24 dev green src 10.99.2.1 table 11
         ip route del 10.99.2.0/24 dev green table main || true",
    );
}

fn bird_conf() -> String {
    let session = |name: &str, local: &str, neighbor: &str| {
        format!(
            "protocol bgp {name} {{ local {local} as {ROUTER_AS}; neighbor {neighbor} as {SPEAKER_AS};\n\
             passive on; direct; bfd on; ipv4 {{ import all; export none; }}; }}\n"
        )
    };
    format!(
        "router id {ROUTER_V4};\nprotocol device {{ scan time 1; }}\n\
         protocol bfd {{ interface \"*\" {{ interval 300 ms; multiplier 3; }}; }}\n{}{}",
        session("red", ROUTER_V4, SPEAKER_V4),
        session("green", GREEN_ROUTER, GREEN_SPEAKER)
    )
}

/// A peer as `bgp-probe` takes it: eBGP to `address`, bound to `vrf`, with BFD.
fn peer(id: &str, address: &str, vrf: Option<&str>) -> Value {
    let ms300 = json!({"secs": 0, "nanos": 300_000_000});
    json!({
        "id": id, "my_asn": SPEAKER_AS, "peer_asn": ROUTER_AS,
        "peer_address": address, "peer_port": 179, "source_address": null, "vrf": vrf,
        "router_id": "10.99.0.1", "hold_time": {"secs": 90, "nanos": 0}, "keepalive_time": null,
        "connect_retry": {"secs": 1, "nanos": 0}, "ebgp_multihop": false,
        "password": null, "graceful_restart": false, "next_hop_v4": null, "next_hop_v6": null,
        "bfd": {"receive_interval": ms300, "transmit_interval": ms300, "detect_multiplier": 3,
                "passive": false, "minimum_ttl": 254},
    })
}

fn advertise(probe: &mut Probe, peer: &str, prefix: &str) {
    probe.send(json!({"advertise": {"peer": peer, "advertisements": [
        {"prefix": prefix, "attrs": {"local_pref": null, "communities": [], "large_communities": []}}
    ]}}));
}

/// BIRD's view of `prefix`, when it holds it.
fn bird_route(lab: &Lab, prefix: &str) -> Option<String> {
    let ctl = lab.path("bird.ctl");
    let out = lab.router_cmd(&["birdc", "-s", &ctl, "show", "route", prefix, "all"]);
    out.lines().any(|l| l.starts_with(prefix)).then_some(out)
}

/// The latest status of every peer, as the probe's lines said.
type Latest = RefCell<HashMap<String, Value>>;

/// Waits until `peer`'s latest status satisfies `pred` (also when the line saying so was read
/// while waiting for another peer), and returns that status.
fn wait_peer(
    probe: &mut Probe,
    latest: &Latest,
    peer: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Option<Value> {
    if let Some(s) = latest.borrow().get(peer).filter(|s| pred(s)) {
        return Some(s.clone());
    }
    probe
        .wait_for(timeout, |v| {
            let id = v["peer"].as_str().unwrap_or_default().to_owned();
            latest.borrow_mut().insert(id, v["status"].clone());
            v["peer"] == peer && pred(&v["status"])
        })
        .map(|v| v["status"].clone())
}

/// Waits until BIRD holds `prefix`, learned over its session `session` with `next_hop`.
fn assert_route_over(lab: &Lab, prefix: &str, session: &str, next_hop: &str) {
    let mut seen = None;
    assert!(
        eventually(CONVERGE, || {
            seen = bird_route(lab, prefix);
            seen.is_some()
        }),
        "BIRD never got {prefix}"
    );
    let text = seen.unwrap();
    assert!(
        text.contains(&format!("[{session} "))
            && text.contains(&format!("BGP.next_hop: {next_hop}")),
        "{prefix} comes over BIRD's session {session} with next hop {next_hop}:\n{text}"
    );
}

/// Waits until each of `ids` has failed a connection to the router, and checks none was ever
/// established and BIRD holds none of their routes.
fn assert_never_connect(probe: &mut Probe, latest: &Latest, lab: &Lab, ids: &[&str]) {
    for id in ids {
        let failed = wait_peer(probe, latest, id, CONVERGE, |s| {
            s["last_error"]
                .as_str()
                .is_some_and(|e| e.contains(&format!("TCP connection to {ROUTER_V4}:179")))
        });
        let failed = failed.unwrap_or_else(|| panic!("{id}: no failed attempt; {:?}", probe.last));
        assert_eq!(failed["established_count"], 0, "{id}: {failed}");
    }
    assert!(
        bird_route(lab, LOST_ROUTE).is_none(),
        "one of {ids:?} reached the router"
    );
}

#[test]
fn a_session_bound_to_its_device_comes_up_where_the_default_table_cannot_reach_and_a_missing_one_comes_up_once_created()
 {
    if skip_unless_available(&["bird", "birdc"]) {
        return;
    }
    let mut lab = Lab::new("vrf");
    build(&lab);
    lab.spawn_bird(&bird_conf());
    let peers = [
        peer("red", ROUTER_V4, Some("red")),
        peer("unbound", ROUTER_V4, None),
        peer("blue", ROUTER_V4, Some("blue")),
        peer("green", GREEN_ROUTER, Some("green")),
    ];
    let args: Vec<String> = peers.iter().map(Value::to_string).collect();
    let mut probe = Probe::spawn(&lab, &ferrolb_tests::tool("bgp-probe"), &args);
    let latest = Latest::default();
    advertise(&mut probe, "red", RED_ROUTE);
    advertise(&mut probe, "unbound", LOST_ROUTE);
    advertise(&mut probe, "blue", LOST_ROUTE);
    advertise(&mut probe, "green", GREEN_ROUTE);

    // The session bound to `red` comes up, and its BFD session too (its sockets are bound to
    // `red` as well: unbound, they would leave through `blue`).
    let red = wait_peer(&mut probe, &latest, "red", ESTABLISH, |s| {
        s["state"] == "Established" && s["bfd"] == "Up"
    });
    assert!(
        red.is_some(),
        "red: no session with BFD Up; last {:?}",
        probe.last
    );
    assert_route_over(&lab, RED_ROUTE, "red", SPEAKER_V4);

    // The same router, unbound or bound to `blue`: each attempt fails (the SYN leaves through
    // `blue`, where nothing answers its ARP: "no route to host", or no answer in time).
    assert_never_connect(&mut probe, &latest, &lab, &["unbound", "blue"]);

    // `green` does not exist yet: the session says so, and comes up once the device does.
    let missing = wait_peer(&mut probe, &latest, "green", CONVERGE, |s| {
        s["missing_vrf"] == "green"
    });
    let missing = missing.unwrap_or_else(|| panic!("green: not reported; {:?}", probe.last));
    let error = missing["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("VRF `green` does not exist on this node"),
        "{missing}"
    );
    assert_ne!(missing["state"], "Established");
    create_green(&lab);
    let green = wait_peer(&mut probe, &latest, "green", ESTABLISH, |s| {
        s["state"] == "Established" && s["missing_vrf"].is_null()
    });
    assert!(
        green.is_some(),
        "green: no session once created; {:?}",
        probe.last
    );
    assert_route_over(&lab, GREEN_ROUTE, "green", GREEN_SPEAKER);
    probe.shutdown();
}

/// How long the guest may take: booting under TCG takes a few seconds, the test itself under a
/// minute even emulated.
const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether this kernel creates a VRF device (tried in a namespace of its own).
fn kernel_has_vrf() -> bool {
    let ns = format!("flb-vrf-probe-{}", std::process::id());
    let ok = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ok(&["netns", "add", &ns]) {
        return false;
    }
    let has = ok(&[
        "-n", &ns, "link", "add", "probe", "type", "vrf", "table", "7",
    ]);
    ok(&["netns", "del", &ns]);
    has
}

#[test]
fn a_session_in_a_linux_vrf_comes_up_over_it_and_announces_the_vrf_address_as_next_hop() {
    if skip_unless_available(&["bird", "birdc"]) {
        return;
    }
    if kernel_has_vrf() {
        if !in_guest() {
            say("VRF: tested on this machine's kernel");
        }
        return session_in_a_real_vrf();
    }
    assert!(!in_guest(), "the guest's kernel has no VRF either");
    let Some(kit) = guest_kit() else {
        return;
    };
    let run = run_test_in_guest(
        &kit,
        "a_session_in_a_linux_vrf_comes_up_over_it_and_announces_the_vrf_address_as_next_hop",
        GUEST_TIMEOUT,
    );
    say(&format!(
        "VRF: this machine's kernel has none; tested {}",
        run.summary()
    ));
    if let Some(why) = &run.failure {
        panic!("{why}\n{}", run.output);
    }
    println!("{}", run.output);
    assert!(
        run.output.contains("test result: ok. 1 passed")
            && !run.output.to_lowercase().contains("skipped: "),
        "the test did not run in the guest:\n{}",
        run.output
    );
}

/// Prints `line`, and keeps it in `target/vrf-tested` for `scripts/test`'s summary (the
/// harness captures what a passing test prints).
fn say(line: &str) {
    println!("{line}");
    let _ = std::fs::write(Kit::dir().with_file_name("vrf-tested"), format!("{line}\n"));
}

/// The guest kit and QEMU, or `None` after saying why not (a failure under
/// `FERROLB_REQUIRE_BINARIES=1`).
fn guest_kit() -> Option<Kit> {
    if skip_unless_available(&[QEMU]) {
        return None;
    }
    match Kit::find() {
        Ok(kit) => Some(kit),
        Err(why) => ferrolb_tests::skip::skip(why),
    }
}

#[test]
fn a_guest_that_cannot_start_its_init_says_why_on_the_first_line() {
    // Runs on a machine with VRF too (scripts/test builds the kit everywhere): the guest's way
    // of failing is checked wherever the guest may be needed.
    if in_guest() {
        return;
    }
    let Some(kit) = guest_kit() else {
        return;
    };
    let missing = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-init");
    let run = boot_with_init(&kit, &missing, GUEST_TIMEOUT);
    let why = run.failure.expect("a guest without its init cannot pass");
    assert_eq!(
        why,
        format!(
            "guest: the test's init {} is not executable on the host's root",
            missing.display()
        ),
        "{}",
        run.output
    );
}

#[test]
fn a_kernel_panic_is_the_first_line_of_a_failure_before_the_tail() {
    // The console of a guest that died at init (user-mode Linux on a CPU with AMX).
    let console = "Linux version 6.1.0\n\
        userspace - ptrace set fp regs failed, errno = 14\n\
        [    0.412000] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n\
        [    0.412001] CPU: 0 PID: 1 Comm: init\n";
    assert_eq!(
        why_failed(console, "", "", None, None).as_deref(),
        Some(
            "the guest's kernel died: Kernel panic - not syncing: Attempted to kill init! \
             exitcode=0x0000000b"
        )
    );
    let qemu = "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n";
    assert_eq!(
        why_failed("", qemu, "", None, None).as_deref(),
        Some("qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69")
    );
    let log =
        "running 1 test\nthread 'x' panicked at speaker/tests/bgp_vrf.rs:9:5:\nred: no session\n";
    assert_eq!(
        why_failed("", "", log, Some(101), None).as_deref(),
        Some(
            "the test failed in the guest (exit 101): thread 'x' panicked at \
             speaker/tests/bgp_vrf.rs:9:5: red: no session"
        )
    );
    assert_eq!(why_failed("", "", "", Some(0), None), None);
    // The power-off's kernel message can land before the guest's newline.
    let console = "guest: the test's init /x is not executable on the host's root[    4.725453] \
        sysrq: Power Off\n[    4.753770] reboot: Power down\n";
    assert_eq!(
        why_failed(console, "", "", None, None).as_deref(),
        Some("guest: the test's init /x is not executable on the host's root")
    );
}

/// The node's interface `va` is enslaved to VRF `red` (table 10); the main table then holds no
/// route towards the router. A session with `vrf: red` comes up with BFD, its TCP socket is
/// bound to `red`, and BIRD gets the route with the VRF's address as next hop; a session with
/// no `vrf` cannot reach the router.
fn session_in_a_real_vrf() {
    let mut lab = Lab::new("realvrf");
    let s = lab.speaker_ns.clone();
    sh(
        &s,
        "ip link add red type vrf table 10
         ip link set red up
         ip link set va master red",
    );
    let in_vrf = sh(&s, "ip -4 route show vrf red");
    assert!(in_vrf.contains("10.99.0.0/24 dev va"), "{in_vrf}");
    let main = sh(&s, "ip -4 route show table main");
    assert!(!main.contains("10.99.0.0/24"), "main table: {main}");
    lab.spawn_bird(&bird_conf());
    let peers = [
        peer("red", ROUTER_V4, Some("red")),
        peer("unbound", ROUTER_V4, None),
    ];
    let args: Vec<String> = peers.iter().map(Value::to_string).collect();
    let mut probe = Probe::spawn(&lab, &ferrolb_tests::tool("bgp-probe"), &args);
    let latest = Latest::default();
    advertise(&mut probe, "red", RED_ROUTE);
    advertise(&mut probe, "unbound", LOST_ROUTE);

    let red = wait_peer(&mut probe, &latest, "red", ESTABLISH, |s| {
        s["state"] == "Established" && s["bfd"] == "Up"
    });
    assert!(
        red.is_some(),
        "red: no session with BFD Up; last {:?}",
        probe.last
    );
    // The established socket is bound to the VRF device (`ss` prints it as `address%device`).
    let sockets = sh(&s, "ss -tnH state established");
    let bound = sockets
        .lines()
        .find(|l| l.contains(&format!("{SPEAKER_V4}%red:")) && l.contains(ROUTER_V4));
    let bound = bound.unwrap_or_else(|| panic!("no established socket bound to red:\n{sockets}"));
    eprintln!("the session's socket, as ss shows it: {bound}");
    // The VRF's address is the next hop.
    assert_route_over(&lab, RED_ROUTE, "red", SPEAKER_V4);
    assert_never_connect(&mut probe, &latest, &lab, &["unbound"]);
    probe.shutdown();
}
