//! Interfaces that change under the responder, on a real segment: the lab of `l2_netns`
//! (bridge, client with `arping` / `ndisc6`) with the responder running in this process, on a
//! thread inside the node's namespace, so the test can call `refresh` and `diagnose` with the
//! node's real view of its interfaces.
//!
//! Needs root, `ip`, `arping` and `ndisc6`; each test prints why and returns when one is
//! missing, and fails instead under `FERROLB_REQUIRE_BINARIES=1`.

mod l2_lab;

use ferrolb_speaker::l2::iface::{self, diagnose};
use ferrolb_speaker::l2::{InterfaceProblem, Responder, Unusable};
use ferrolb_speaker::planner::Interfaces;
use l2_lab::{Lab, run};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const V4: &str = "10.99.0.100";
const V6: &str = "fd00:99::100";
/// A locally administered MAC no interface of the lab starts with.
const NEW_MAC: &str = "02:fe:01:02:03:04";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Both addresses, answered on `eth0`.
fn owned_on_eth0() -> BTreeMap<IpAddr, Vec<String>> {
    [ip(V4), ip(V6)]
        .into_iter()
        .map(|a| (a, vec!["eth0".to_string()]))
        .collect()
}

/// Waits until `f` holds, or fails saying `what` after `within`.
fn eventually(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the client's `arping` / `ndisc6` for `addr` is answered by `mac` and nobody else.
fn answered_by(lab: &Lab, addr: &str, mac: &str) {
    let want: BTreeSet<String> = [mac.to_string()].into();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = lab.resolve(ip(addr));
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr} should be answered by {mac} only, got {got:?}"
        );
    }
}

/// Runs `ip` with `args` and requires success.
fn ip_cmd(args: &[&str]) {
    let out = run("ip", args);
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_owned_address_on_an_interface_re_created_with_a_new_mac_is_answered_with_the_new_mac_after_refresh()
 {
    let Some(lab) = Lab::new(1) else { return };
    let old_mac = lab.node_mac(0);
    lab.in_node(0, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        let before = responder.open_interfaces()["eth0"];
        answered_by(&lab, V4, &old_mac);
        answered_by(&lab, V6, &old_mac);
        // Fill the client's neighbour cache, so the new announcements have entries to move.
        lab.client_learn(V4);
        lab.client_learn(V6);

        lab.recreate_node_link(0, NEW_MAC);
        // The reader sees its socket lose the interface and says so, without spinning.
        eventually(
            "the reader reports its interface gone",
            Duration::from_secs(5),
            || {
                responder
                    .interface_errors()
                    .get("eth0")
                    .is_some_and(|f| f.label() == "read_failed")
            },
        );
        let errors_before = responder.counters().read_errors;

        responder.refresh(&iface::system_interfaces());
        let after = responder.open_interfaces()["eth0"];
        assert_eq!(after.mac.to_string(), NEW_MAC);
        assert_ne!(
            after.index, before.index,
            "a re-created interface has a new index"
        );
        assert_eq!(responder.interface_errors(), BTreeMap::new());
        assert_eq!(responder.counters().reopened, 1);

        // The gratuitous ARP and unsolicited NA from the new port moved the client's cache.
        for addr in [V4, V6] {
            eventually(
                &format!("the client learns {NEW_MAC} for {addr} unasked"),
                Duration::from_secs(5),
                || lab.client_neigh(addr).as_deref() == Some(NEW_MAC),
            );
        }
        answered_by(&lab, V4, NEW_MAC);
        answered_by(&lab, V6, NEW_MAC);
        let c = responder.counters();
        assert!(c.gratuitous_arp >= 2 && c.unsolicited_na >= 2, "{c:?}");
        assert_eq!(
            c.read_errors, errors_before,
            "the old reader stopped at its first error: {c:?}"
        );
        assert_eq!(c.multicast_errors, 0, "{c:?}");
    });
}

#[test]
fn an_owned_address_is_answered_with_the_new_mac_after_its_interface_mac_changes_in_place() {
    let Some(lab) = Lab::new(1) else { return };
    let old_mac = lab.node_mac(0);
    lab.in_node(0, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        let before = responder.open_interfaces()["eth0"];
        answered_by(&lab, V4, &old_mac);

        ip_cmd(&["link", "set", "eth0", "address", NEW_MAC]);
        responder.refresh(&iface::system_interfaces());
        let after = responder.open_interfaces()["eth0"];
        assert_eq!(after.mac.to_string(), NEW_MAC);
        assert_eq!(after.index, before.index);
        assert_eq!(responder.counters().reopened, 1);
        answered_by(&lab, V4, NEW_MAC);
        answered_by(&lab, V6, NEW_MAC);
    });
}

#[test]
fn an_interface_brought_down_is_reported_and_answered_again_once_a_refresh_finds_it_up() {
    let Some(lab) = Lab::new(1) else { return };
    let mac = lab.node_mac(0);
    lab.in_node(0, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        answered_by(&lab, V4, &mac);

        ip_cmd(&["link", "set", "eth0", "down"]);
        responder.refresh(&iface::system_interfaces());
        let errors = responder.interface_errors();
        assert_eq!(
            errors.get("eth0").map(|f| f.label()),
            Some("down"),
            "{errors:?}"
        );
        assert!(responder.open_interfaces().is_empty());
        assert!(
            errors["eth0"].to_string().contains("ip link set eth0 up"),
            "{}",
            errors["eth0"]
        );

        ip_cmd(&["link", "set", "eth0", "up"]);
        responder.refresh(&iface::system_interfaces());
        assert_eq!(responder.interface_errors(), BTreeMap::new());
        answered_by(&lab, V4, &mac);
        answered_by(&lab, V6, &mac);
    });
}

/// Adds an up NOARP interface `dummy0` to node 0, with subnets of its own: a dummy interface
/// (Linux always flags them NOARP), or, on a kernel built without dummy interfaces, one end of
/// a veth pair with ARP turned off, which carries the same flag.
fn add_dummy(lab: &Lab) {
    let ns = lab.node(0);
    let dummy = run("ip", &["-n", ns, "link", "add", "dummy0", "type", "dummy"]);
    if !dummy.status.success() {
        eprintln!(
            "no dummy interfaces in this kernel ({}): dummy0 is a veth with `arp off`",
            String::from_utf8_lossy(&dummy.stderr).trim()
        );
        ip_cmd(&[
            "-n", ns, "link", "add", "dummy0", "type", "veth", "peer", "name", "dummy0p",
        ]);
        ip_cmd(&["-n", ns, "link", "set", "dummy0", "arp", "off"]);
        ip_cmd(&["-n", ns, "link", "set", "dummy0p", "up"]);
    }
    ip_cmd(&["-n", ns, "addr", "add", "10.99.7.1/24", "dev", "dummy0"]);
    ip_cmd(&[
        "-n",
        ns,
        "addr",
        "add",
        "fd00:99:7::1/64",
        "dev",
        "dummy0",
        "nodad",
    ]);
    ip_cmd(&["-n", ns, "link", "set", "dummy0", "up"]);
}

#[test]
fn an_address_whose_only_candidate_is_a_dummy_interface_is_reported_as_noarp() {
    let Some(lab) = Lab::new(1) else { return };
    add_dummy(&lab);
    lab.in_node(0, || {
        let host = iface::system_interfaces();
        let dummy = host.iter().find(|i| i.name == "dummy0").expect("dummy0");
        assert!(dummy.noarp && dummy.up, "{dummy:?}");
        let eth0 = host.iter().find(|i| i.name == "eth0").expect("eth0");
        assert!(!eth0.noarp && eth0.usable(), "{eth0:?}");

        let only_dummy = |addr: &str| InterfaceProblem::NoUsableInterface {
            ip: ip(addr),
            interfaces: vec![("dummy0".to_string(), Unusable::NoArp)],
        };
        for addr in ["10.99.7.100", "fd00:99:7::100"] {
            let got = diagnose(ip(addr), &Interfaces::BySubnet, &host);
            assert_eq!(got, Err(only_dummy(addr)));
            let problem = got.unwrap_err();
            assert_eq!(problem.label(), "noarp");
            assert!(
                problem.to_string().contains("ip link set dummy0 arp on"),
                "{problem}"
            );
        }
        let named = Interfaces::Named(["dummy0".to_string()].into());
        assert_eq!(diagnose(ip(V4), &named, &host), Err(only_dummy(V4)));
        // The segment's own subnet still answers on eth0.
        assert_eq!(
            diagnose(ip(V4), &Interfaces::BySubnet, &host),
            Ok(vec!["eth0".to_string()])
        );
    });
}

#[test]
fn the_responder_reports_each_named_interface_it_cannot_answer_on_until_a_refresh_finds_it_usable()
{
    let Some(lab) = Lab::new(1) else { return };
    add_dummy(&lab);
    let mac = lab.node_mac(0);
    lab.in_node(0, || {
        let responder = Responder::new();
        let owned: BTreeMap<IpAddr, Vec<String>> = [
            (ip(V4), vec!["eth0".to_string()]),
            (ip("10.99.0.101"), vec!["dummy0".into(), "missing0".into()]),
        ]
        .into();
        let first = responder
            .set_owned(&owned)
            .expect_err("dummy0 cannot answer");
        assert!(first.to_string().contains("dummy0"), "{first}");
        let labels = |r: &Responder| -> BTreeMap<String, &'static str> {
            r.interface_errors()
                .iter()
                .map(|(n, f)| (n.clone(), f.label()))
                .collect()
        };
        assert_eq!(
            labels(&responder),
            [
                ("dummy0".to_string(), "noarp"),
                ("missing0".to_string(), "missing")
            ]
            .into()
        );
        // The interface that can answer does.
        answered_by(&lab, V4, &mac);

        ip_cmd(&["link", "set", "dummy0", "arp", "on"]);
        // Created now, but with ARP off.
        ip_cmd(&[
            "link",
            "add",
            "missing0",
            "type",
            "veth",
            "peer",
            "name",
            "missing0p",
        ]);
        ip_cmd(&["link", "set", "missing0", "arp", "off", "up"]);
        responder.refresh(&iface::system_interfaces());
        assert_eq!(
            labels(&responder),
            [("missing0".to_string(), "noarp")].into()
        );
        assert!(responder.open_interfaces().contains_key("dummy0"));
    });
}

#[test]
fn a_change_to_one_owned_address_leaves_the_others_answered_and_answers_the_new_one() {
    let Some(lab) = Lab::new(1) else { return };
    let mac = lab.node_mac(0);
    const ADDED: &str = "10.99.0.101";
    lab.in_node(0, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        answered_by(&lab, V4, &mac);
        let changes = BTreeMap::from([(ip(V4), None), (ip(ADDED), Some(vec!["eth0".to_string()]))]);
        responder
            .change_owned(&changes)
            .expect("a change on an open interface");
        answered_by(&lab, ADDED, &mac);
        answered_by(&lab, V6, &mac);
        assert!(
            lab.resolve(ip(V4)).is_empty(),
            "{V4} was given up and is still answered"
        );
    });
}

#[test]
fn an_address_handed_over_is_answered_until_the_new_owner_announces_it_and_then_never_again() {
    let Some(lab) = Lab::new(2) else { return };
    let (old_mac, new_mac) = (lab.node_mac(0), lab.node_mac(1));
    let old = lab.in_node(0, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        responder
    });
    answered_by(&lab, V4, &old_mac);
    answered_by(&lab, V6, &old_mac);
    // Handed over, nobody else has it yet: still answered, by the old owner alone.
    old.hand_over([ip(V4), ip(V6)]);
    answered_by(&lab, V4, &old_mac);
    answered_by(&lab, V6, &old_mac);
    assert!(old.taken_over().is_empty());
    // The new owner takes both and announces them (gratuitous ARP, unsolicited NA): the old
    // one stops answering at once, before its handover time would have run out.
    let new = lab.in_node(1, || {
        let responder = Responder::new();
        responder.set_owned(&owned_on_eth0()).expect("eth0 opens");
        responder
    });
    eventually(
        "the old owner sees both announcements",
        Duration::from_secs(5),
        || old.taken_over() == BTreeSet::from([ip(V4), ip(V6)]),
    );
    answered_by(&lab, V4, &new_mac);
    answered_by(&lab, V6, &new_mac);
    // Owned again (the handover ends): answered again.
    lab.in_node(1, || new.set_owned(&BTreeMap::new()))
        .expect("nothing to open");
    let again = owned_on_eth0()
        .into_iter()
        .map(|(a, n)| (a, Some(n)))
        .collect();
    lab.in_node(0, || old.change_owned(&again))
        .expect("eth0 is open");
    assert!(old.taken_over().is_empty());
    answered_by(&lab, V4, &old_mac);
}

#[test]
fn the_kernel_tells_of_an_interface_or_address_change_at_once_and_of_nothing_while_nothing_changes()
{
    let Some(lab) = Lab::new(1) else { return };
    let changes = lab.in_node(0, || {
        ferrolb_speaker::l2::hostwatch::HostWatch::start()
            .expect("a netlink socket in the node's namespace")
            .changes()
    });
    let count = || *changes.borrow();
    let quiet = count();
    let ns = lab.node(0);
    let at = Instant::now();
    ip_cmd(&["-n", ns, "addr", "add", "10.99.8.1/32", "dev", "eth0"]);
    eventually("an address added is told", Duration::from_secs(2), || {
        count() > quiet
    });
    eprintln!("address added: told after {:?}", at.elapsed());
    let after_add = count();
    ip_cmd(&["-n", ns, "link", "set", "eth0", "down"]);
    eventually("a link going down is told", Duration::from_secs(2), || {
        count() > after_add
    });
    ip_cmd(&["-n", ns, "link", "set", "eth0", "up"]);
    // Nothing more is said once nothing changes: the absence of a message can only be
    // watched for a while (after IPv6 duplicate address detection on the link coming up, which
    // itself changes the link-local address, is over).
    std::thread::sleep(Duration::from_secs(3));
    let settled = count();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(count(), settled, "told of changes while nothing changed");
}
