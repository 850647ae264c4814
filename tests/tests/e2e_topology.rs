//! The lab's plumbing without speakers: node kernels leave ARP/NDP for Service addresses to the
//! speaker, and the controller plus the kube-proxy stand-in put every Service address where it
//! belongs. Needs root; skipped with a printed reason otherwise (a failure under
//! `FERROLB_REQUIRE_BINARIES=1`).

mod e2e_support;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrolb_tests::lab::{Binaries, Lab, LabConfig, RouterKind};
use ferrolb_tests::netns;
use ferrolb_tests::netns::topology::{self, Topology, node_v4, node_v6};

#[test]
fn node_kernels_leave_arp_and_ndp_for_service_addresses_to_the_speakers_responder() {
    if !e2e_support::can_run(RouterKind::Bird) {
        return;
    }
    let topo = Topology::create(&netns::unique_prefix("fe2t")).expect("topology builds");
    let v4: IpAddr = "10.99.0.100".parse().unwrap();
    let v6: IpAddr = "fd00:99::100".parse().unwrap();
    for i in 0..3 {
        topo.set_service_addresses(i, &[v4, v6]).unwrap();
    }
    let mac = topo.node_mac(0).unwrap();
    // The control: the kernel does answer for the node's own addresses on eth0.
    assert_eq!(
        topo.who_answers(node_v4(0).into()).unwrap(),
        vec![mac.clone()]
    );
    assert_eq!(topo.who_answers(node_v6(0).into()).unwrap(), vec![mac]);
    // The Service addresses sit on lb0 of every node, and no kernel answers for them.
    assert_eq!(topo.who_answers(v4).unwrap(), Vec::<String>::new());
    assert_eq!(topo.who_answers(v6).unwrap(), Vec::<String>::new());
    // With the speaker's responder (l2-probe) owning them on node-b, node-b alone answers.
    let probe = e2e_support::bin_dir().join("l2-probe");
    if !probe.is_file() {
        return ferrolb_tests::skip::skip(format!(
            "{} is not built: the responder half of this check cannot run",
            probe.display()
        ))
        .unwrap_or_default();
    }
    let log = std::env::temp_dir().join(format!("{}-probe.log", topo.prefix));
    let _responder = topo
        .node(1)
        .spawn(
            &[probe.display().to_string(), v4.to_string(), v6.to_string()],
            &log,
        )
        .unwrap();
    let b = topo.node_mac(1).unwrap();
    for ip in [v4, v6] {
        let macs = (0..50)
            .map(|_| topo.who_answers(ip).unwrap())
            .find(|m| !m.is_empty())
            .unwrap_or_default();
        assert_eq!(macs, vec![b.clone()], "answers for {ip}");
    }
    let _ = std::fs::remove_file(log);
}

#[test]
fn the_controller_addresses_every_lab_service_and_the_stand_in_puts_them_on_the_right_nodes() {
    if !e2e_support::can_run(RouterKind::Bird) {
        return;
    }
    let dir = e2e_support::bin_dir();
    let binaries = Binaries {
        controller: dir.join("ferrolb-controller"),
        speaker: None,
        lab: PathBuf::from(env!("CARGO_BIN_EXE_ferrolb-lab")),
    };
    assert!(
        binaries.controller.is_file(),
        "build ferrolb-controller first"
    );
    let prefix = netns::unique_prefix("fe2t");
    let lab = Lab::start(LabConfig::new(
        &prefix,
        RouterKind::Bird,
        binaries,
        std::env::temp_dir().join(&prefix),
    ))
    .expect("the lab starts");
    let services = lab
        .wait_for_addresses(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("controller.log", 20)));
    let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["local-bgp", "local-l2", "proxied", "web", "web-bgp"]
    );
    for s in &services {
        // Every Service but `proxied` asks for both families.
        let families = if s.name == "proxied" { 1 } else { 2 };
        assert_eq!(s.ingress.len(), families, "{}: {:?}", s.name, s.ingress);
        for (ip, mode) in &s.ingress {
            let expected = if s.name == "proxied" { "Proxy" } else { "VIP" };
            assert_eq!(mode, expected, "ipMode of {}", s.name);
            let text = ip.to_string();
            let in_pool = match s.pool.as_str() {
                "lab-l2" => text.starts_with("10.99.0.10") || text.starts_with("fd00:99::10"),
                _ => text.starts_with("10.99.2.") || text.starts_with("fd00:99:2::"),
            };
            assert!(in_pool, "{} got {ip} outside {}", s.name, s.pool);
        }
    }
    let addr = |name: &str| services.iter().find(|s| s.name == name).unwrap().ingress[0].0;
    lab.wait(
        Duration::from_secs(5),
        "lb0 addresses on every node",
        || {
            let on = |i: usize| topology::node_addresses(lab.topo.node(i), "lb0").unwrap();
            let c = on(2);
            let a = on(0);
            (c.contains(&addr("local-l2")) && a.contains(&addr("web"))).then_some(())
        },
    )
    .unwrap();
    // externalTrafficPolicy Local: only node-c (the endpoint's node) accepts its traffic.
    for i in 0..2 {
        let on = topology::node_addresses(lab.topo.node(i), "lb0").unwrap();
        assert!(!on.contains(&addr("local-l2")), "node {i} holds local-l2");
        assert!(!on.contains(&addr("local-bgp")), "node {i} holds local-bgp");
    }
    // The stand-in server answers with the node's name.
    let web = std::net::SocketAddr::new(addr("web"), 80);
    let answer =
        ferrolb_tests::lab::standin::ask(lab.topo.node(1).name(), web, Duration::from_secs(2));
    assert_eq!(answer.as_deref(), Ok("node-b"));
}
