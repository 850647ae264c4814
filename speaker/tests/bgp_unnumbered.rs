//! BGP unnumbered end to end: the speaker (`bgp-probe`) and FRR (zebra + bgpd, `neighbor IFNAME
//! interface`) over a veth pair with no IPv4 address and no global IPv6 address on either end,
//! only the kernel's link-local ones. The speaker finds FRR by its router advertisements, FRR
//! finds the speaker by the speaker's, and FRR ends up with an IPv4 Service route via the
//! speaker's link-local address (RFC 8950) and an IPv6 one (RFC 2545), in BGP and in the
//! kernel. BIRD (`interface` with `extended next hop`, and its own router advertisements)
//! gets both routes too. Needs root; fails instead of skipping under `FERROLB_REQUIRE_BINARIES=1`.
//!
//! The session state machine's side of it (what is offered, what the UPDATEs carry) is tested
//! first, without a network.

mod bgp_support;

use std::time::Duration;

use bgp_support::lab::{Lab, Probe, eventually, skip_unless_available};
use ferrolb_speaker::bgp::PeerConfig;
use serde_json::{Value, json};

mod session {
    //! The pure session of an unnumbered peer.
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Instant;

    use ferrolb_speaker::bgp::fsm::{Event, NotAnnounced};
    use ferrolb_speaker::bgp::open::{Capability, Open};
    use ferrolb_speaker::bgp::update::EncodeError;
    use ferrolb_speaker::bgp::wire::{Family, encode_keepalive};
    use ferrolb_speaker::bgp::{Advertisement, Input, Output, PeerConfig, Session, State};

    const LOCAL: &str = "[fe80::1%2]:40000";
    const FE80_1: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    fn peer_open(extended_next_hop: bool) -> Vec<u8> {
        let mut capabilities = vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::FourOctetAs(64513),
        ];
        if extended_next_hop {
            capabilities.push(Capability::ExtendedNextHop(vec![(Family::IPV4_UNICAST, 2)]));
        }
        let mut b = vec![];
        Open {
            my_as: 64513,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 255, 0, 2),
            capabilities,
        }
        .encode(&mut b);
        b
    }

    use super::bgp_support::outputs::sent_bytes as sent;

    /// Connects `config` from fe80::1 and returns our OPEN, decoded.
    fn our_open(session: &mut Session, now: Instant) -> Open {
        session.handle(now, Input::Start);
        let out = session.handle(
            now,
            Input::Connected {
                local: LOCAL.parse().unwrap(),
                remote: "[fe80::2%2]:179".parse::<SocketAddr>().unwrap(),
                other_family: None,
            },
        );
        Open::decode(&sent(&out)[19..]).unwrap()
    }

    /// An Established session with the peer offering (or not) extended next hops, with an
    /// IPv4 and an IPv6 route to announce; returns what it sent on reaching Established.
    fn established(extended_next_hop: bool) -> (Session, Vec<Output>) {
        let now = Instant::now();
        let mut config = PeerConfig::unnumbered("r", 64512, 64513, "eth0");
        config.router_id = Some(Ipv4Addr::new(10, 255, 0, 1));
        let mut s = Session::new(config);
        s.handle(
            now,
            Input::SetAdvertisements(vec![
                Advertisement::new("10.99.10.1/32".parse().unwrap()),
                Advertisement::new("fd00:99:10::1/128".parse().unwrap()),
            ]),
        );
        our_open(&mut s, now);
        s.handle(now, Input::Received(peer_open(extended_next_hop)));
        let mut ka = vec![];
        encode_keepalive(&mut ka);
        let out = s.handle(now, Input::Received(ka));
        assert_eq!(s.state(), State::Established);
        (s, out)
    }

    #[test]
    fn an_unnumbered_session_offers_ipv4_routes_with_ipv6_next_hops_and_a_numbered_one_does_not() {
        let now = Instant::now();
        let mut unnumbered = Session::new(PeerConfig::unnumbered("r", 64512, 64513, "eth0"));
        assert!(our_open(&mut unnumbered, now).extended_next_hop(Family::IPV4_UNICAST, 2));
        let mut numbered = Session::new(PeerConfig::new(
            "r",
            64512,
            64513,
            "fe80::2".parse().unwrap(),
        ));
        let open = our_open(&mut numbered, now);
        assert!(
            !open.has(|c| matches!(c, Capability::ExtendedNextHop(_))),
            "{open:?}"
        );
    }

    #[test]
    fn when_the_peer_agrees_ipv4_routes_go_in_mp_reach_with_our_link_local_next_hop() {
        let (s, out) = established(true);
        assert!(s.negotiated().unwrap().ipv4_over_ipv6);
        let bytes = sent(&out);
        // MP_REACH: AFI 1, SAFI 1, 16-byte next hop fe80::1, reserved, 10.99.10.1/32.
        let v4 = [&[0, 1, 1, 16][..], &FE80_1, &[0, 32, 10, 99, 10, 1]].concat();
        assert!(bytes.windows(v4.len()).any(|w| w == v4), "{bytes:02x?}");
        // No link has a global address here: the IPv6 route's next hop is fe80::1 alone.
        let v6 = [&[0, 2, 1, 16][..], &FE80_1, &[0, 128]].concat();
        assert!(bytes.windows(v6.len()).any(|w| w == v6), "{bytes:02x?}");
        // No NEXT_HOP attribute (type 3) anywhere.
        assert!(!bytes.windows(3).any(|w| w == [0x40, 3, 4]), "{bytes:02x?}");
    }

    #[test]
    fn when_the_peer_does_not_agree_an_ipv4_route_without_an_ipv4_next_hop_is_reported_not_announced()
     {
        let (s, out) = established(false);
        assert!(!s.negotiated().unwrap().ipv4_over_ipv6);
        let not_announced: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Event(Event::NotAnnounced { prefixes, reason }) => {
                    Some((prefixes.clone(), *reason))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            not_announced,
            vec![(
                vec!["10.99.10.1/32".parse().unwrap()],
                NotAnnounced::Encode(EncodeError::NoNextHop)
            )]
        );
        assert_eq!(s.adj_rib_out().len(), 1, "the IPv6 route still goes");
    }
}

const SPEAKER_AS: u32 = 64512;
const ROUTER_AS: u32 = 64513;
/// FRR advertises every 3 s here; the session needs one advertisement each way.
const ESTABLISH: Duration = Duration::from_secs(30);
const CONVERGE: Duration = Duration::from_secs(15);
const V4_ROUTE: &str = "10.99.10.1/32";
const V6_ROUTE: &str = "fd00:99:10::1/128";
const V4_MORE: &str = "10.99.10.2/32";
/// Routes FRR announces to us, so that what FRR sends on such a session meets our UPDATE checks.
const FRR_V4: &str = "10.255.1.0/24";
const FRR_V6: &str = "fd00:255:1::/64";

/// Runs `ip` with `args` and returns its stdout.
fn ip(args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A lab whose veth pair (`va` in the speaker namespace, `vb` in the router's) has only
/// link-local addresses, once both have passed duplicate address detection.
fn link_local_lab(name: &str) -> Lab {
    let lab = Lab::new(name);
    for (ns, dev, v4, v6) in [
        (&lab.speaker_ns, "va", "10.99.0.1/24", "fd00:99::1/64"),
        (&lab.router_ns, "vb", "10.99.0.2/24", "fd00:99::2/64"),
    ] {
        ip(&["-n", ns, "addr", "del", v4, "dev", dev]);
        ip(&["-n", ns, "addr", "del", v6, "dev", dev]);
    }
    for (ns, dev) in [(&lab.speaker_ns, "va"), (&lab.router_ns, "vb")] {
        assert!(
            eventually(Duration::from_secs(10), || {
                let a = ip(&["-n", ns, "addr", "show", "dev", dev]);
                a.contains("inet6 fe80::") && !a.contains("tentative") && !a.contains("inet ")
            }),
            "{dev}: {}",
            ip(&["-n", ns, "addr", "show", "dev", dev])
        );
        let global = ip(&[
            "-n", ns, "-6", "addr", "show", "dev", dev, "scope", "global",
        ]);
        assert!(global.trim().is_empty(), "{dev} has {global}");
    }
    lab
}

/// The link-local address of `dev` in `ns`.
fn link_local(ns: &str, dev: &str) -> String {
    let out = ip(&[
        "-n", ns, "-6", "-o", "addr", "show", "dev", dev, "scope", "link",
    ]);
    let word = out
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .unwrap_or_else(|| panic!("no link-local address on {dev}: {out}"));
    word.split('/').next().unwrap().to_owned()
}

/// Starts zebra (sending router advertisements on `vb` every 3 s) and bgpd with an unnumbered
/// eBGP neighbour on `vb`, as MetalLB's FRR mode and most ToR configurations write it.
fn start_frr(lab: &mut Lab) -> String {
    let bgpd = format!(
        "hostname r1\nrouter bgp {ROUTER_AS}\n bgp router-id 10.255.0.2\n no bgp ebgp-requires-policy\n\
         no bgp network import-check\n neighbor vb interface remote-as external\n\
         address-family ipv4 unicast\n  network {FRR_V4}\n  neighbor vb activate\n exit-address-family\n\
         address-family ipv6 unicast\n  network {FRR_V6}\n  neighbor vb activate\n exit-address-family\n"
    );
    lab.spawn_frr(
        "hostname r1\ninterface vb\n ipv6 nd ra-interval 3\n no ipv6 nd suppress-ra\n",
        &bgpd,
        &["-S"],
    )
}

fn vtysh(lab: &Lab, frr_dir: &str, command: &str) -> String {
    lab.router_cmd(&["vtysh", "--vty_socket", frr_dir, "-c", command])
}

/// FRR's BGP entry for `prefix` (from `show bgp <afi> unicast json`), if it holds one.
fn frr_route(lab: &Lab, frr_dir: &str, prefix: &str) -> Option<Value> {
    let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
    let text = vtysh(lab, frr_dir, &format!("show bgp {afi} unicast json"));
    let v: Value = serde_json::from_str(&text).ok()?;
    let route = v["routes"][prefix].clone();
    (!route.is_null()).then_some(route)
}

fn unnumbered_peer() -> Value {
    let mut p = PeerConfig::unnumbered("router", SPEAKER_AS, SPEAKER_AS, "va");
    // `dynamicASN: external`: FRR's AS is whatever it says, as long as it is not ours.
    p.peer_asn_external = true;
    p.connect_retry = Duration::from_secs(1);
    serde_json::to_value(p).unwrap()
}

fn advertise() -> Value {
    json!({"advertise": {"peer": "router", "advertisements": [
        {"prefix": V4_ROUTE, "attrs": {"local_pref": null, "communities": [], "large_communities": []}},
        {"prefix": V6_ROUTE, "attrs": {"local_pref": null, "communities": [], "large_communities": []}},
    ]}})
}

#[test]
fn frr_unnumbered_over_a_link_with_only_link_local_addresses_gets_a_v4_and_a_v6_service_route() {
    if skip_unless_available(&["/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "vtysh"]) {
        return;
    }
    let mut lab = link_local_lab("unnum-frr");
    let ours = link_local(&lab.speaker_ns, "va");
    let frrs = link_local(&lab.router_ns, "vb");
    let frr_dir = start_frr(&mut lab);
    let mut probe = Probe::start(&lab, &unnumbered_peer());
    probe.send(advertise());
    let up = probe.wait_state("Established", ESTABLISH);
    assert!(
        up.is_some(),
        "no session; last status {:?}\nFRR: {}",
        probe.last,
        vtysh(&lab, &frr_dir, "show bgp neighbors vb")
    );
    let status = &probe.last.as_ref().unwrap()["status"];
    assert_eq!(status["neighbour"], json!(frrs), "{status}");
    let caps = status["capabilities"].to_string();
    assert!(caps.contains("extended-nexthop"), "{caps}");

    for prefix in [V4_ROUTE, V6_ROUTE] {
        let mut route = None;
        assert!(
            eventually(CONVERGE, || {
                route = frr_route(&lab, &frr_dir, prefix);
                route.is_some()
            }),
            "FRR never got {prefix}: {}",
            vtysh(&lab, &frr_dir, "show bgp ipv4 unicast")
        );
        // The next hop is our link-local address, for the IPv4 route as for the IPv6 one.
        let text = route.unwrap().to_string();
        assert!(
            text.contains(&ours),
            "{prefix}: want next hop {ours} in {text}"
        );
    }
    // zebra installed both: the IPv4 route via an inet6 next hop on the veth.
    let mut kernel = String::new();
    assert!(
        eventually(CONVERGE, || {
            kernel = lab.router_cmd(&["ip", "-4", "route", "show", V4_ROUTE]);
            kernel.contains(&format!("via inet6 {ours} dev vb"))
        }),
        "kernel IPv4 route: {kernel:?}"
    );
    assert!(
        eventually(CONVERGE, || {
            kernel = lab.router_cmd(&["ip", "-6", "route", "show", V6_ROUTE]);
            kernel.contains(&format!("via {ours} dev vb"))
        }),
        "kernel IPv6 route: {kernel:?}"
    );
    // FRR's own routes reached us (over the same link-local next hops) and passed our UPDATE
    // checks: nothing malformed, the session still up.
    for afi in ["ipv4", "ipv6"] {
        let cmd = format!("show bgp {afi} unicast neighbors vb advertised-routes json");
        assert!(
            eventually(CONVERGE, || {
                let v: Value =
                    serde_json::from_str(&vtysh(&lab, &frr_dir, &cmd)).unwrap_or_default();
                v["totalPrefixCounter"].as_u64().unwrap_or(0) >= 1
            }),
            "FRR advertised no {afi} route: {}",
            vtysh(&lab, &frr_dir, &cmd)
        );
    }
    let mut stats = String::new();
    assert!(
        eventually(CONVERGE, || {
            stats = vtysh(&lab, &frr_dir, "show bgp neighbors vb json");
            let v: Value = serde_json::from_str(&stats).unwrap_or_default();
            v["vb"]["messageStats"]["updatesSent"].as_u64().unwrap_or(0) >= 2
        }),
        "FRR sent no UPDATEs: {stats}"
    );
    // One more route of ours, and FRR holding it, comes after FRR's UPDATEs were read: the
    // status then says what our checks made of them.
    let mut more = advertise();
    more["advertise"]["advertisements"]
        .as_array_mut()
        .unwrap()
        .push(json!({"prefix": V4_MORE, "attrs": {"local_pref": null, "communities": [], "large_communities": []}}));
    probe.send(more);
    assert!(
        eventually(CONVERGE, || frr_route(&lab, &frr_dir, V4_MORE).is_some()),
        "FRR never got {V4_MORE}"
    );
    let st = probe
        .wait_for(CONVERGE, |v| v["status"]["announced_prefixes"] == 3)
        .expect("three routes announced");
    assert_eq!(st["status"]["state"], "Established", "{st}");
    assert_eq!(st["status"]["malformed_updates"], json!({}), "{st}");
    assert_eq!(st["status"]["notifications_sent"], json!({}), "{st}");
    probe.shutdown();
}

#[test]
fn an_unnumbered_peer_with_no_router_on_its_interface_says_so_and_keeps_listening() {
    if skip_unless_available(&[]) {
        return;
    }
    let lab = link_local_lab("unnum-none");
    let mut probe = Probe::start(&lab, &unnumbered_peer());
    let waiting = probe.wait_for(ESTABLISH, |v| {
        v["status"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no router advertisement heard on `va` yet"))
    });
    assert!(waiting.is_some(), "last status {:?}", probe.last);
    assert_eq!(
        probe.last.as_ref().unwrap()["status"]["neighbour"],
        json!(null)
    );
    probe.shutdown();
}

#[test]
fn an_unnumbered_peer_on_an_interface_that_does_not_exist_says_so() {
    if skip_unless_available(&[]) {
        return;
    }
    let lab = link_local_lab("unnum-noif");
    let mut p = unnumbered_peer();
    p["interface"] = json!("nosuch0");
    let mut probe = Probe::start(&lab, &p);
    let waiting = probe.wait_for(ESTABLISH, |v| {
        v["status"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("interface `nosuch0` does not exist on this node"))
    });
    assert!(waiting.is_some(), "last status {:?}", probe.last);
    probe.shutdown();
}

#[test]
fn bird_over_a_link_with_only_link_local_addresses_gets_a_v4_and_a_v6_service_route() {
    if skip_unless_available(&["bird", "birdc"]) {
        return;
    }
    let mut lab = link_local_lab("unnum-bird");
    let ours = link_local(&lab.speaker_ns, "va");
    // BIRD sends router advertisements (radv, lifetime 0) for the speaker to find it, and takes
    // the connection from the speaker's link-local address on `vb`.
    let conf = format!(
        "router id 10.255.0.3;\nprotocol device {{}}\n\
         protocol radv {{ ipv6 {{ export none; }}; interface \"vb\" {{ max ra interval 4; default lifetime 0; }}; }}\n\
         protocol bgp spk {{ local as {ROUTER_AS}; neighbor {ours} as {SPEAKER_AS}; interface \"vb\";\n\
         passive on; direct;\n\
         ipv4 {{ import all; export none; extended next hop on; }};\n\
         ipv6 {{ import all; export none; }}; }}\n"
    );
    lab.spawn_bird(&conf);
    let mut probe = Probe::start(&lab, &unnumbered_peer());
    probe.send(advertise());
    let ctl = lab.path("bird.ctl");
    assert!(
        probe.wait_state("Established", ESTABLISH).is_some(),
        "no session; last status {:?}\nBIRD: {}",
        probe.last,
        lab.router_cmd(&["birdc", "-s", &ctl, "show", "protocols", "all", "spk"])
    );
    for prefix in [V4_ROUTE, V6_ROUTE] {
        let mut text = String::new();
        assert!(
            eventually(CONVERGE, || {
                text = lab.router_cmd(&["birdc", "-s", &ctl, "show", "route", prefix, "all"]);
                text.lines().any(|l| l.starts_with(prefix))
            }),
            "BIRD never got {prefix}: {text}"
        );
        assert!(
            text.contains(&ours),
            "{prefix}: want next hop {ours} in {text}"
        );
    }
    probe.shutdown();
}
