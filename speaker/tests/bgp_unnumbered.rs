//! BGP unnumbered end to end: the speaker (`bgp-probe`) and FRR (zebra + bgpd, `neighbor IFNAME
//! interface`) over a veth pair with no IPv4 address and no global IPv6 address on either end,
//! only the kernel's link-local ones. The speaker finds FRR by its router advertisements, FRR
//! finds the speaker by the speaker's, and FRR ends up with an IPv4 Service route via the
//! speaker's link-local address (RFC 8950) and an IPv6 one (RFC 2545), in BGP and in the
//! kernel. Needs root; fails instead of skipping under `FERROLB_REQUIRE_BINARIES=1`.

mod bgp_support;

use std::time::Duration;

use bgp_support::lab::{Lab, Probe, eventually, skip_unless_available};
use ferrolb_speaker::bgp::PeerConfig;
use serde_json::{Value, json};

const SPEAKER_AS: u32 = 64512;
const ROUTER_AS: u32 = 64513;
/// FRR advertises every 3 s here; the session needs one advertisement each way.
const ESTABLISH: Duration = Duration::from_secs(30);
const CONVERGE: Duration = Duration::from_secs(15);
const V4_ROUTE: &str = "10.99.10.1/32";
const V6_ROUTE: &str = "fd00:99:10::1/128";

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
    // zebra drops root for the `frr` user, so its files live in a directory that user owns.
    let dir = lab.dir.join("frr");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    std::fs::write(
        dir.join("zebra.conf"),
        "hostname r1\ninterface vb\n ipv6 nd ra-interval 3\n no ipv6 nd suppress-ra\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("bgpd.conf"),
        format!(
            "hostname r1\nrouter bgp {ROUTER_AS}\n bgp router-id 10.255.0.2\n no bgp ebgp-requires-policy\n\
             neighbor vb interface remote-as external\n\
             address-family ipv4 unicast\n  neighbor vb activate\n exit-address-family\n\
             address-family ipv6 unicast\n  neighbor vb activate\n exit-address-family\n"
        ),
    )
    .unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", "frr:frr", &d])
        .status()
        .unwrap();
    assert!(chown.success());
    let zsock = format!("{d}/zserv.api");
    let common = |conf: &str, pid: &str| -> Vec<String> {
        [
            "-f",
            &format!("{d}/{conf}"),
            "-i",
            &format!("{d}/{pid}"),
            "-z",
            &zsock,
            "--vty_socket",
            &d,
            "-P",
            "0",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let mut zebra = vec!["/usr/lib/frr/zebra".to_owned()];
    zebra.extend(common("zebra.conf", "zebra.pid"));
    lab.spawn_router(
        &zebra.iter().map(String::as_str).collect::<Vec<_>>(),
        "zebra.log",
    );
    assert!(
        eventually(Duration::from_secs(10), || std::path::Path::new(&zsock)
            .exists()),
        "zebra did not start: {}",
        std::fs::read_to_string(lab.dir.join("zebra.log")).unwrap_or_default()
    );
    let mut bgpd = vec!["/usr/lib/frr/bgpd".to_owned()];
    bgpd.extend(common("bgpd.conf", "bgpd.pid"));
    bgpd.push("-S".into());
    lab.spawn_router(
        &bgpd.iter().map(String::as_str).collect::<Vec<_>>(),
        "bgpd.log",
    );
    d
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
