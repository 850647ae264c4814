//! `localASN`, `dynamicASN` with `localASN`, and single-family sessions
//! (`dualStackAddressFamily: false`) against real BIRD and FRR daemons in network namespaces
//! (see `bgp_daemons.rs` for how the labs are built). A test whose daemon is missing fails
//! under `FERROLB_REQUIRE_BINARIES=1`.

mod bgp_support;

use std::time::Duration;

use bgp_support::lab::{Lab, Probe, ROUTER_V4, SPEAKER_V4, eventually, skip_unless_available};
use serde_json::json;

const MY_AS: u32 = 64512;
const LOCAL_AS: u32 = 64600;
const ROUTER_AS: u32 = 64513;
const ESTABLISH: Duration = Duration::from_secs(20);
const CONVERGE: Duration = Duration::from_secs(15);
const V4: &str = "10.99.20.1/32";
const V6: &str = "fd00:99:20::1/128";

#[derive(Clone, Copy, Debug)]
enum Daemon {
    Bird,
    Frr,
}

impl Daemon {
    /// Whether the test cannot run here (printed); fails under `FERROLB_REQUIRE_BINARIES=1`.
    fn skip(self) -> bool {
        skip_unless_available(match self {
            Daemon::Bird => &["bird", "birdc"],
            Daemon::Frr => &["/usr/lib/frr/bgpd", "vtysh"],
        })
    }

    /// Starts the daemon as AS `router_as`, passive, expecting the speaker as `speaker_as`,
    /// with both families enabled on its side.
    fn start(self, lab: &mut Lab, router_as: u32, speaker_as: u32) {
        match self {
            Daemon::Bird => lab.spawn_bird(&format!(
                "router id {ROUTER_V4};\nprotocol device {{}}\n\
                 protocol bgp spk {{ local {ROUTER_V4} as {router_as}; neighbor {SPEAKER_V4} as {speaker_as};\n\
                 passive on; direct;\n\
                 ipv4 {{ import all; export none; gateway direct; }};\n\
                 ipv6 {{ import all; export none; gateway direct; }}; }}\n"
            )),
            Daemon::Frr => {
                let conf = format!(
                    "hostname r1\nrouter bgp {router_as}\n bgp router-id {ROUTER_V4}\n no bgp ebgp-requires-policy\n\
                     neighbor {SPEAKER_V4} remote-as {speaker_as}\n neighbor {SPEAKER_V4} passive\n\
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
        }
    }

    /// The daemon's view of one prefix, or None when it does not hold it.
    fn route(self, lab: &Lab, prefix: &str) -> Option<String> {
        let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
        match self {
            Daemon::Bird => {
                let ctl = lab.path("bird.ctl");
                let out = lab.router_cmd(&["birdc", "-s", &ctl, "show", "route", prefix, "all"]);
                out.lines().any(|l| l.starts_with(prefix)).then_some(out)
            }
            Daemon::Frr => {
                let d = lab.path("");
                let cmd = format!("show bgp {afi} unicast {prefix}");
                let out = lab.router_cmd(&["vtysh", "--vty_socket", &d, "-d", "bgpd", "-c", &cmd]);
                out.contains(&format!("BGP routing table entry for {prefix}"))
                    .then_some(out)
            }
        }
    }

    /// The text of an AS_PATH that is exactly `path` (empty: iBGP).
    fn as_path(self, path: &[u32]) -> String {
        let joined = path
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        match self {
            Daemon::Bird => format!("BGP.as_path: {joined}\n"),
            Daemon::Frr if path.is_empty() => "  Local\n".into(),
            Daemon::Frr => format!("  {joined}\n"),
        }
    }
}

/// The speaker's peer: AS `my_asn` presenting `local_asn`, expecting the router as
/// `peer_asn` (`None`: any other AS, `dynamicASN: external`).
fn peer(local_asn: Option<u32>, peer_asn: Option<u32>, dual_stack: bool) -> serde_json::Value {
    json!({
        "id": "router", "my_asn": MY_AS, "local_asn": local_asn,
        "peer_asn": peer_asn.unwrap_or(0), "peer_asn_external": peer_asn.is_none(),
        "peer_address": ROUTER_V4, "peer_port": 179, "source_address": SPEAKER_V4,
        "dual_stack": dual_stack,
        "router_id": null, "hold_time": {"secs": 90, "nanos": 0}, "keepalive_time": null,
        "connect_retry": {"secs": 1, "nanos": 0}, "ebgp_multihop": false,
        "password": null, "graceful_restart": false,
        "next_hop_v4": null, "next_hop_v6": null,
    })
}

fn advertise(prefixes: &[&str]) -> serde_json::Value {
    let advs: Vec<_> = prefixes
        .iter()
        .map(|p| json!({"prefix": p, "attrs": {"local_pref": null, "communities": [], "large_communities": []}}))
        .collect();
    json!({"advertise": {"peer": "router", "advertisements": advs}})
}

/// Brings up `peer` with `d` (AS `router_as`, expecting `speaker_as`), announces one IPv4 and
/// one IPv6 route, and returns the lab and the probe once the IPv4 route is at the router.
fn session(
    d: Daemon,
    name: &str,
    router_as: u32,
    speaker_as: u32,
    peer: serde_json::Value,
) -> Option<(Lab, Probe)> {
    if d.skip() {
        return None;
    }
    let mut lab = Lab::new(name);
    d.start(&mut lab, router_as, speaker_as);
    let mut probe = Probe::start(&lab, &peer);
    probe.send(advertise(&[V4, V6]));
    assert!(
        probe.wait_state("Established", ESTABLISH).is_some(),
        "{d:?}: no session; last status {:?}",
        probe.last
    );
    assert!(
        eventually(CONVERGE, || d.route(&lab, V4).is_some()),
        "{d:?} never got {V4}; speaker: {:?}",
        probe.last
    );
    Some((lab, probe))
}

/// Asserts that the router holds `prefix` with an AS_PATH of exactly `path`.
fn assert_as_path(d: Daemon, lab: &Lab, prefix: &str, path: &[u32]) {
    let mut seen = None;
    assert!(
        eventually(CONVERGE, || {
            seen = d.route(lab, prefix);
            seen.is_some()
        }),
        "{d:?} never got {prefix}"
    );
    let text = seen.unwrap();
    assert!(
        text.contains(&d.as_path(path)),
        "{d:?} {prefix}: want AS_PATH {path:?} in\n{text}"
    );
    assert!(
        !text.contains(&MY_AS.to_string()),
        "{d:?} {prefix}: myASN must not appear:\n{text}"
    );
}

fn local_asn_to_a_router_expecting_it(d: Daemon, name: &str) {
    let Some((lab, probe)) = session(
        d,
        name,
        ROUTER_AS,
        LOCAL_AS,
        peer(Some(LOCAL_AS), Some(ROUTER_AS), true),
    ) else {
        return;
    };
    assert_as_path(d, &lab, V4, &[LOCAL_AS]);
    assert_as_path(d, &lab, V6, &[LOCAL_AS]);
    probe.shutdown();
}

#[test]
fn bird_sees_a_local_asn_session_with_an_as_path_of_exactly_the_local_asn() {
    local_asn_to_a_router_expecting_it(Daemon::Bird, "asn-bird-local");
}

#[test]
fn frr_sees_a_local_asn_session_with_an_as_path_of_exactly_the_local_asn() {
    local_asn_to_a_router_expecting_it(Daemon::Frr, "asn-frr-local");
}

/// `dynamicASN: internal` with `localASN`: the router is in the local AS (iBGP, empty path).
fn local_asn_dynamic_internal(d: Daemon, name: &str) {
    // The conversion from a BGPPeer gives `internal` the AS presented as the peer's.
    let Some((lab, probe)) = session(
        d,
        name,
        LOCAL_AS,
        LOCAL_AS,
        peer(Some(LOCAL_AS), Some(LOCAL_AS), true),
    ) else {
        return;
    };
    assert_as_path(d, &lab, V4, &[]);
    probe.shutdown();
}

#[test]
fn bird_comes_up_as_ibgp_with_local_asn_and_dynamic_internal_asn() {
    local_asn_dynamic_internal(Daemon::Bird, "asn-bird-dynint");
}

#[test]
fn frr_comes_up_as_ibgp_with_local_asn_and_dynamic_internal_asn() {
    local_asn_dynamic_internal(Daemon::Frr, "asn-frr-dynint");
}

/// `dynamicASN: external` with `localASN`: the router's AS comes from its OPEN.
fn local_asn_dynamic_external(d: Daemon, name: &str) {
    let Some((lab, mut probe)) = session(
        d,
        name,
        ROUTER_AS,
        LOCAL_AS,
        peer(Some(LOCAL_AS), None, true),
    ) else {
        return;
    };
    assert_as_path(d, &lab, V4, &[LOCAL_AS]);
    let st = probe.wait_for(CONVERGE, |v| v["status"]["peer_as"] == ROUTER_AS);
    assert!(st.is_some(), "the peer's AS found: {:?}", probe.last);
    probe.shutdown();
}

#[test]
fn bird_comes_up_with_local_asn_and_dynamic_external_asn() {
    local_asn_dynamic_external(Daemon::Bird, "asn-bird-dynext");
}

#[test]
fn frr_comes_up_with_local_asn_and_dynamic_external_asn() {
    local_asn_dynamic_external(Daemon::Frr, "asn-frr-dynext");
}

/// With `dualStackAddressFamily: false` an IPv4 session offers and announces IPv4 only; the
/// default session carries both.
fn families(d: Daemon, name: &str, dual_stack: bool) {
    let Some((lab, mut probe)) = session(
        d,
        name,
        ROUTER_AS,
        MY_AS,
        peer(None, Some(ROUTER_AS), dual_stack),
    ) else {
        return;
    };
    let want_v6 = usize::from(dual_stack);
    let st = probe.wait_for(CONVERGE, |v| {
        v["status"]["announced_v4"] == 1 && v["status"]["announced_v6"] == want_v6
    });
    let st = st.unwrap_or_else(|| panic!("announced counts: {:?}", probe.last));
    let caps = st["status"]["capabilities"].clone();
    assert_eq!(
        caps.as_array().unwrap().iter().any(|c| c == "ipv6-unicast"),
        dual_stack,
        "{caps}"
    );
    if dual_stack {
        assert!(
            eventually(CONVERGE, || d.route(&lab, V6).is_some()),
            "{d:?} never got {V6}"
        );
    } else {
        // The IPv4 route is there, sent in the same pass as the IPv6 one would have been, and
        // the speaker holds no IPv6 route for this peer: nothing is on its way.
        assert!(
            d.route(&lab, V6).is_none(),
            "{d:?} holds {V6} from a single-family session"
        );
    }
    probe.shutdown();
}

#[test]
fn bird_holds_only_the_ipv4_route_from_a_single_family_ipv4_session() {
    families(Daemon::Bird, "asn-bird-v4only", false);
}

#[test]
fn bird_holds_both_routes_from_a_default_session() {
    families(Daemon::Bird, "asn-bird-dual", true);
}

#[test]
fn frr_holds_only_the_ipv4_route_from_a_single_family_ipv4_session() {
    families(Daemon::Frr, "asn-frr-v4only", false);
}
