//! End-to-end: the lab of `ferrolb-lab` (real controller, real speakers, BIRD or FRR, clients in
//! network namespaces) checked the way a user would: who answers ARP, which node answers a TCP
//! request, what the router routes, what happens when a speaker or the controller dies.
//! Skipped with a printed reason only when not root or when `ferrolb-speaker` is not built.

mod e2e_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use ferrolb_tests::lab::report::{self, Fault};
use ferrolb_tests::lab::{Lab, NoAnswer, RouterKind, ServiceView};
use ferrolb_tests::netns::topology::{NODE_NAMES, Topology};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

const CONVERGE: Duration = Duration::from_secs(30);
/// The router withdraws a cut-off node's routes within this (BFD 300 ms x 3 detects in
/// 600-900 ms after the node's last packet; the margin is for a loaded machine).
const BFD_WITHDRAWN: Duration = Duration::from_millis(1200);
/// A layer-2 failover, fault to another node's gratuitous ARP/NA: the README claims about
/// 0.3 s; this is that with a margin for a loaded CI machine.
const FAILOVER: Duration = Duration::from_secs(1);
/// How long each request of the clients that count lost requests (rolling restarts, drains)
/// waits for its answer: a SYN that went nowhere (to a node that no longer answers, or waiting
/// for ARP or NDP to find the new owner) is sent again only after 1 s, so it is lost, not
/// answered late. Anything quicker is an answer: on CI's two cores, with suites beside each
/// other, a backend can take a few hundred milliseconds to be scheduled.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(900);

fn address_of(services: &[ServiceView], name: &str) -> IpAddr {
    services
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no Service {name}"))
        .ingress[0]
        .0
}

fn addresses(lab: &Lab) -> Vec<ServiceView> {
    lab.wait_for_addresses(CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("controller.log", 30)))
}

fn owner(lab: &Lab, ip: IpAddr) -> String {
    let owners = lab
        .wait_for_l2_owners(&[ip], CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-a.log", 30)));
    owners[&ip].clone()
}

fn all_addresses_of(services: &[ServiceView], name: &str) -> Vec<IpAddr> {
    let s = services
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no Service {name}"));
    s.ingress.iter().map(|(ip, _)| *ip).collect()
}

#[test]
fn the_client_on_the_segment_reaches_an_l2_service_through_its_single_owner_in_both_families() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let web = all_addresses_of(&services, "web");
    assert!(
        web.iter().any(IpAddr::is_ipv4) && web.iter().any(IpAddr::is_ipv6),
        "web is dual-stack: {web:?}"
    );
    for ip in web {
        let owner = owner(&lab, ip);
        let i = Topology::node_index(&owner).unwrap();
        // Exactly one MAC answers ARP (IPv4) or NDP (IPv6) for the address: the owner's.
        let macs = lab.topo.who_answers(ip).unwrap();
        assert_eq!(
            macs,
            vec![lab.topo.node_mac(i).unwrap()],
            "answers for {ip}"
        );
        // And the owner's node answers the TCP request, every time.
        for _ in 0..5 {
            assert_eq!(lab.ask_from_client(ip).as_deref(), Ok(owner.as_str()));
        }
    }
}

fn bgp_reachability(router: RouterKind) {
    let Some(lab) = e2e_support::lab(router) else {
        return;
    };
    let services = addresses(&lab);
    let web = all_addresses_of(&services, "web-bgp");
    assert_eq!(web.len(), 2, "web-bgp is dual-stack: {web:?}");
    for ip in web {
        lab.wait_for_route(ip, &[0, 1, 2], CONVERGE)
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
        answered_through_the_router(&lab, ip);
    }
    // `kubectl get bgpsessionstates`: one per node, Established and Ready, with the prefixes
    // the router holds from it (web-bgp's two, at least) and the agreed timers.
    let sessions = lab
        .wait(
            CONVERGE,
            "every node's BGPSessionState Established and Ready",
            || {
                let s = lab.bgp_sessions().ok()?;
                (s.len() == NODE_NAMES.len()
                    && s.iter().all(|(_, st)| {
                        st.bgp_state == "Established"
                            && st.conditions.first().is_some_and(|c| c.status == "True")
                            // Past the poll sequence that replaces the 1 s floor of a new
                            // BFD session with the profile's 300 ms.
                            && st.bfd_detection_time.as_deref() == Some("900ms")
                            && st.ipv4_prefixes >= 1
                            && st.ipv6_prefixes >= 1
                    }))
                .then_some(s)
            },
        )
        .unwrap_or_else(|e| panic!("{e}: {:?}", lab.bgp_sessions()));
    for (name, st) in &sessions {
        assert_eq!(st.bfd_state.as_deref(), Some("Up"), "{st:?}");
        assert_eq!(*name, format!("lab-router.{}", st.node));
        assert_eq!(st.peer, "lab-router");
        assert_eq!(st.peer_address, "10.99.0.1:179");
        let ready = &st.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True"),
            "{st:?}"
        );
        assert_eq!(st.hold_time.as_deref(), Some("9s"), "{st:?}");
        assert!(st.established_time.is_some(), "{st:?}");
        assert!(
            st.capabilities.iter().any(|c| c == "ipv6-unicast"),
            "{st:?}"
        );
    }
}

/// The remote client, which has no path to the pool but the router's BGP routes, is answered
/// for `ip` by the lab's nodes, every time once the route has settled.
fn answered_through_the_router(lab: &Lab, ip: IpAddr) {
    // The router's kernel can still be rewriting the multipath route as the last paths
    // arrive, and a connection hashed to another node mid-handshake is reset; ask until
    // five answers in a row (a path added late rewrites the route once more), then every
    // request must succeed.
    lab.wait(CONVERGE, "five answers in a row through the router", || {
        (0..5)
            .all(|_| lab.ask_from_remote(ip).is_ok())
            .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
    // ECMP spreads connections, and each answer comes from a node the router routes to.
    let answers: BTreeSet<String> = (0..10)
        .map(|n| {
            lab.ask_from_remote(ip).unwrap_or_else(|e| {
                panic!("request {n} to {ip}: {e:?}\n{}", lab.router.show_routes())
            })
        })
        .collect();
    assert!(
        answers.iter().all(|a| NODE_NAMES.contains(&a.as_str())),
        "{answers:?}"
    );
}

#[test]
fn the_client_behind_a_bird_router_reaches_a_bgp_service_through_the_learned_routes() {
    bgp_reachability(RouterKind::Bird);
}

#[test]
fn the_client_behind_an_frr_router_reaches_a_bgp_service_through_the_learned_routes() {
    bgp_reachability(RouterKind::Frr);
}

/// Only node-a keeps a session to the lab router, with `announceAllNodes`: the router still
/// routes each address through every node that may carry it (ADD-PATH, the other nodes'
/// InternalIPs as next hops), and a remote client is answered through them.
fn one_session_for_all_nodes(router: RouterKind) {
    let Some(lab) = e2e_support::lab(router) else {
        return;
    };
    let client = lab.client();
    lab.block(async move {
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("ferrolb.io", "v1beta1", "BGPPeer"),
            "bgppeers",
        );
        let patch = serde_json::json!({"spec": {
            "announceAllNodes": true,
            "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-a"}}],
        }});
        Api::<kube::core::DynamicObject>::namespaced_with(
            client,
            ferrolb_tests::lab::INSTALL_NS,
            &ar,
        )
        .patch("lab-router", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
    })
    .expect("the BGPPeer is patched");
    // One session left, node-a's, with ADD-PATH in force.
    lab.wait(CONVERGE, "node-a's session alone, with add-path", || {
        let s = lab.bgp_sessions().ok()?;
        (s.len() == 1
            && s[0].1.node == "node-a"
            && s[0].1.bgp_state == "Established"
            && s[0].1.capabilities.iter().any(|c| c == "add-path"))
        .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", lab.bgp_sessions()));
    let services = addresses(&lab);
    // web-bgp (externalTrafficPolicy: Cluster) through all three nodes; local-bgp through
    // node-c, its endpoint's node, which has no session of its own now.
    for (name, nodes) in [("web-bgp", &[0, 1, 2][..]), ("local-bgp", &[2][..])] {
        for ip in all_addresses_of(&services, name) {
            lab.wait_for_route(ip, nodes, CONVERGE)
                .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
        }
    }
    for ip in all_addresses_of(&services, "web-bgp") {
        answered_through_the_router(&lab, ip);
    }
    for ip in all_addresses_of(&services, "local-bgp") {
        let answer = lab
            .wait(CONVERGE, "an answer through the router", || {
                lab.ask_from_remote(ip).ok()
            })
            .unwrap_or_else(|e| panic!("{ip}: {e}"));
        assert_eq!(answer, "node-c", "{ip}");
    }
    // node-b's kubelet reports it not Ready: its paths go; Ready again, they come back.
    for (ready, nodes) in [("False", &[0, 2][..]), ("True", &[0, 1, 2][..])] {
        set_node_ready(&lab, "node-b", ready);
        for ip in all_addresses_of(&services, "web-bgp") {
            lab.wait_for_route(ip, nodes, CONVERGE)
                .unwrap_or_else(|e| panic!("Ready {ready}: {e}\n{}", lab.router.show_routes()));
        }
    }
}

/// Sets `node`'s `Ready` condition to `status`, as its kubelet (or the node lifecycle
/// controller, for a node gone silent) would.
fn set_node_ready(lab: &Lab, node: &'static str, status: &'static str) {
    let client = lab.client();
    lab.block(async move {
        let patch = serde_json::json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "reason": "KubeletReady"},
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
        ]}});
        Api::<k8s_openapi::api::core::v1::Node>::all(client)
            .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    })
    .expect("the Node's status is patched");
}

#[test]
fn one_session_announcing_all_nodes_has_a_bird_router_reach_every_node_that_may_carry_each_address()
{
    one_session_for_all_nodes(RouterKind::Bird);
}

#[test]
fn one_session_announcing_all_nodes_has_an_frr_router_reach_every_node_that_may_carry_each_address()
{
    one_session_for_all_nodes(RouterKind::Frr);
}

#[test]
fn external_traffic_policy_local_steers_traffic_to_the_node_with_the_endpoint_and_follows_it() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let (l2, bgp) = (
        address_of(&services, "local-l2"),
        address_of(&services, "local-bgp"),
    );
    // The only endpoint runs on node-c: node-c owns the L2 addresses and alone announces the
    // routes, in both families.
    // The first answer is waited for: the owner's status can be written a moment before its
    // node answers for the address (a cold CI run saw one 2 s request time out there).
    for ip in all_addresses_of(&services, "local-l2") {
        assert_eq!(owner(&lab, ip), "node-c", "owner of {ip}");
        let first = lab
            .wait(CONVERGE, "an answer from the segment", || {
                lab.ask_from_client(ip).ok()
            })
            .unwrap_or_else(|e| panic!("{ip}: {e}"));
        assert_eq!(first, "node-c", "{ip}");
    }
    for ip in all_addresses_of(&services, "local-bgp") {
        lab.wait_for_route(ip, &[2], CONVERGE)
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
        let first = lab
            .wait(CONVERGE, "an answer through the router", || {
                lab.ask_from_remote(ip).ok()
            })
            .unwrap_or_else(|e| panic!("{ip}: {e}"));
        assert_eq!(first, "node-c", "{ip}");
    }
    for _ in 0..3 {
        assert_eq!(lab.ask_from_client(l2).as_deref(), Ok("node-c"));
        assert_eq!(lab.ask_from_remote(bgp).as_deref(), Ok("node-c"));
    }
    // The endpoints move to node-a: so do the L2 ownership and the route.
    let client = lab.client();
    lab.block(async move {
        let slices = Api::<EndpointSlice>::namespaced(client, "default");
        for name in ["local-l2-lab", "local-bgp-lab"] {
            let patch = serde_json::json!({"endpoints": [{
                "addresses": ["10.99.10.40"], "conditions": {"ready": true}, "nodeName": "node-a"
            }]});
            slices
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("the EndpointSlice is patched");
        }
    });
    lab.wait(CONVERGE, "node-a to own local-l2", || {
        (lab.l2_owners().ok()?.get(&l2)? == &vec!["node-a".to_string()]).then_some(())
    })
    .unwrap();
    lab.wait_for_route(bgp, &[0], CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
    lab.wait(Duration::from_secs(10), "node-a to answer both", || {
        (lab.ask_from_client(l2).ok()? == "node-a" && lab.ask_from_remote(bgp).ok()? == "node-a")
            .then_some(())
    })
    .unwrap();
}

#[test]
fn killing_the_owners_speaker_moves_the_address_to_a_surviving_node_within_seconds() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let web = address_of(&services, "web");
    let f = report::failover(
        &mut lab,
        "web",
        Fault::SpeakerKilled,
        Duration::from_secs(15),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-b.log", 30)));
    eprintln!("{}", report::render_failover(&f));
    assert_ne!(f.new_owner, f.old_owner);
    assert!(NODE_NAMES.contains(&f.new_owner.as_str()));
    assert!(f.elapsed < FAILOVER, "failover took {:?}", f.elapsed);
    // The new owner says so in a ServiceL2Status (the dead speaker's own object stays until it
    // comes back, as nobody else writes it).
    lab.wait(CONVERGE, "the new owner in ServiceL2Status", || {
        lab.l2_owners()
            .ok()?
            .get(&web)?
            .contains(&f.new_owner)
            .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", lab.l2_owners()));
    // BGP: the router no longer routes through the dead speaker's node.
    assert!(
        f.bgp_withdrawn.is_some(),
        "routes through the dead node stayed"
    );
}

#[test]
fn with_the_api_server_blackholed_two_owners_killed_in_turn_each_hand_over_within_seconds() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let web = address_of(&services, "web");
    let first = owner(&lab, web);
    lab.wait(CONVERGE, "the owner answering the client", || {
        (lab.ask_from_client(web).ok()? == first).then_some(())
    })
    .unwrap();
    // Every node loses the API server: watches and status writes hang from now on. The first
    // handover leaves each speaker with status writes that cannot finish; the second shows
    // that announcing does not wait behind them.
    for i in 0..NODE_NAMES.len() {
        lab.set_api_reachable(i, false).unwrap();
    }
    let mut gone = vec![first.clone()];
    for round in 1..=2 {
        let victim = gone.last().unwrap().clone();
        let killed_at = std::time::Instant::now();
        lab.kill_speaker(Topology::node_index(&victim).unwrap());
        let next = lab
            .wait(Duration::from_secs(5), "another node to answer", || {
                let answer = lab.ask_from_client(web).ok()?;
                (!gone.contains(&answer)).then_some(answer)
            })
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: {e}\n{}",
                    lab.log_tail(&format!("speaker-{}.log", NODE_NAMES[2]), 30)
                )
            });
        eprintln!(
            "round {round}: {victim} killed, {next} answers after {:?} (API server blackholed)",
            killed_at.elapsed()
        );
        gone.push(next);
    }
}

#[test]
fn killing_the_owners_speaker_moves_an_ipv6_address_too() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let v6 = all_addresses_of(&services, "web")
        .into_iter()
        .find(IpAddr::is_ipv6)
        .expect("web has an IPv6 address");
    let f = report::failover_address(
        &mut lab,
        "web",
        v6,
        Fault::SpeakerKilled,
        Duration::from_secs(15),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-b.log", 30)));
    eprintln!("{}", report::render_failover(&f));
    assert_ne!(f.new_owner, f.old_owner);
    assert!(f.elapsed < FAILOVER, "failover took {:?}", f.elapsed);
    // Exactly one node answers NDP for the address now: the new owner.
    let i = Topology::node_index(&f.new_owner).unwrap();
    lab.wait(CONVERGE, "the new owner alone to answer NDP", || {
        (lab.topo.who_answers(v6).ok()? == vec![lab.topo.node_mac(i).ok()?]).then_some(())
    })
    .unwrap();
}

#[test]
fn cutting_the_owner_off_the_segment_moves_the_address_and_withdraws_its_routes() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    addresses(&lab);
    let f = report::failover(&mut lab, "web", Fault::NodeCutOff, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-b.log", 30)));
    eprintln!("{}", report::render_failover(&f));
    assert_ne!(f.new_owner, f.old_owner);
    assert!(f.elapsed < FAILOVER, "failover took {:?}", f.elapsed);
    // BFD (300 ms x 3, the lab's BFDProfile) takes the router's session to the dead node down
    // within a second; the BGP hold time alone (9 s) would keep its routes 9 s.
    let withdrawn = f
        .bgp_withdrawn
        .expect("routes through the cut-off node stayed");
    eprintln!(
        "the router withdrew the cut-off node's routes after {} ms with BFD 300 ms x 3 \
         (the hold time is 9 s)",
        withdrawn.as_millis()
    );
    assert!(withdrawn < BFD_WITHDRAWN, "withdrawn after {withdrawn:?}");
    // Plugged back in, the node is answered through again.
    report::restore(&mut lab, &f).unwrap();
    let i = Topology::node_index(&f.old_owner).unwrap();
    let back = IpAddr::from(ferrolb_tests::netns::topology::node_v4(i));
    lab.wait(CONVERGE, "routes through the returning node", || {
        lab.router
            .kernel_routes()
            .iter()
            .any(|r| r.next_hops.contains(&back))
            .then_some(())
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}\n{}",
            lab.router.show_routes(),
            lab.log_tail(&format!("speaker-{}.log", f.old_owner), 40)
        )
    });
}

#[test]
fn a_controller_restart_changes_no_address() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let before = addresses(&lab);
    // Record every status the Services go through while the controller restarts.
    let client = lab.client();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    type Seen = Vec<(String, Vec<String>)>;
    let seen: std::sync::Arc<std::sync::Mutex<Seen>> = Default::default();
    let sink = seen.clone();
    let recorder = lab.spawn(async move {
        let api = Api::<Service>::namespaced(client, "default");
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok(list) = api.list(&Default::default()).await {
                for svc in list.items {
                    let ips: Vec<String> = svc
                        .status
                        .and_then(|s| s.load_balancer)
                        .and_then(|lb| lb.ingress)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|i| i.ip)
                        .collect();
                    sink.lock()
                        .unwrap()
                        .push((svc.metadata.name.unwrap_or_default(), ips));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // The recorder must span the restart: it has listed once before the kill, and it lists
    // again after the new controller's first assignment (waited for below).
    let recorded = |what: &str, f: &dyn Fn(&Seen) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !f(&seen.lock().unwrap()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the recorder never saw {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    recorded("a first list", &|s| !s.is_empty());
    lab.kill_controller();
    lab.start_controller().unwrap();
    // A Service created after the restart gets an address: the new controller is at work.
    let client = lab.client();
    lab.block(async move {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("after-restart".into()),
                namespace: Some("default".into()),
                annotations: Some([("ferrolb.io/address-pool".into(), "lab-l2".into())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        };
        Api::<Service>::namespaced(client, "default")
            .create(&PostParams::default(), &svc)
            .await
            .expect("the Service is created");
    });
    let after = addresses(&lab);
    recorded("the new controller's address for after-restart", &|s| {
        s.iter()
            .any(|(name, ips)| name == "after-restart" && !ips.is_empty())
    });
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    lab.block(recorder).expect("the recorder ran");
    let seen = seen.lock().unwrap().clone();
    for s in &before {
        let ips: Vec<String> = s.ingress.iter().map(|(ip, _)| ip.to_string()).collect();
        for (name, now) in &seen {
            assert!(
                name != &s.name || now == &ips,
                "{name} went through {now:?} (had {ips:?})"
            );
        }
    }
    let new = address_of(&after, "after-restart");
    for s in &before {
        let now = after.iter().find(|a| a.name == s.name).unwrap();
        assert_eq!(now.ingress, s.ingress, "{} changed", s.name);
        assert!(s.ingress.iter().all(|(ip, _)| *ip != new));
    }
}

#[test]
fn restarting_every_speaker_one_at_a_time_loses_no_request_through_the_router() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let ip = all_addresses_of(&services, "web-bgp")
        .into_iter()
        .find(IpAddr::is_ipv4)
        .expect("web-bgp has an IPv4 address");
    let all = [0, 1, 2];
    lab.wait_for_route(ip, &all, CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
    // Counting starts once the router is done: every session up with BFD at its agreed
    // timers, and the router's routes unchanged for 2 s (a multipath route rewritten while a
    // request is in flight resets it, restart or not).
    lab.wait(
        CONVERGE,
        "every session Established with BFD at 900 ms",
        || {
            let s = lab.bgp_sessions().ok()?;
            (s.len() == NODE_NAMES.len()
                && s.iter().all(|(_, st)| {
                    st.bgp_state == "Established"
                        && st.bfd_detection_time.as_deref() == Some("900ms")
                }))
            .then_some(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {:?}", lab.bgp_sessions()));
    let mut stable_since = (lab.router.show_routes(), std::time::Instant::now());
    lab.wait(CONVERGE, "the router's routes unchanged for 2 s", || {
        let now = lab.router.show_routes();
        if now != stable_since.0 {
            stable_since = (now, std::time::Instant::now());
        }
        (stable_since.1.elapsed() >= Duration::from_secs(2)).then_some(())
    })
    .unwrap();
    lab.wait(CONVERGE, "five answers in a row through the router", || {
        (0..5)
            .all(|_| lab.ask_from_remote(ip).is_ok())
            .then_some(())
    })
    .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client_started = std::time::Instant::now();
    let client =
        lab.ask_from_remote_every(ip, Duration::from_millis(10), REQUEST_TIMEOUT, stop.clone());
    // Restarts begin once the client has had a second of answers: CI saw the very first
    // request of a fresh client reset twice, before anything was restarted.
    std::thread::sleep(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let mut steps = Vec::new();
    for i in all {
        // As a DaemonSet rolling update does: SIGTERM (the speaker drains its routes with
        // GRACEFUL_SHUTDOWN for --bgp-drain-time, 5 s, then withdraws them), a new speaker
        // once the old one is gone, the next node once the router routes through this one
        // again.
        let at = started.elapsed();
        let exited = lab.stop_speaker(i, Duration::from_secs(30));
        let gone = started.elapsed();
        assert!(exited, "the speaker of {} ignored SIGTERM", NODE_NAMES[i]);
        lab.wait(
            CONVERGE,
            "the router to route around the stopped node",
            || {
                let routes = lab.router.kernel_routes();
                let prefix = ferrolb_tests::lab::host_prefix(ip);
                let route = routes.iter().find(|r| r.prefix == prefix)?;
                (route.next_hops.len() == 2).then_some(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
        lab.start_speaker(i).unwrap();
        lab.wait_for_route(ip, &all, CONVERGE)
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
        steps.push(format!(
            "{}: SIGTERM at {:.1} s, exited {:.1} s later, routed through again at {:.1} s",
            NODE_NAMES[i],
            at.as_secs_f64(),
            (gone - at).as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut requests = client.join().unwrap().expect("the client ran");
    // A fresh client's first requests may fail (CI saw the very first reset twice, before
    // anything was restarted): only those that started before the first SIGTERM are dropped.
    let first_sigterm = started - client_started;
    let warm_up = requests
        .results
        .iter()
        .take_while(|(at, r)| r.is_err() && *at < first_sigterm)
        .count();
    requests.results.drain(..warm_up);
    // A connection in flight when the router moves its flow to another next hop (a path
    // lowered by GRACEFUL_SHUTDOWN, withdrawn, or added back) is reset by the node it lands
    // on, which has no state for it: that is ECMP, not the restart. Such a reset is told
    // apart by the answers around it coming from different nodes. Anything else (a timeout, a
    // reset while the flow stayed on one node) is a lost request.
    let (moved, lost) = split_flow_moves(&requests);
    if warm_up > 0 {
        eprintln!("the client's first {warm_up} request(s), before any restart, got no answer");
    }
    eprintln!(
        "rolling restart of 3 speakers: {} requests every 10 ms through the router, {} lost, \
         {} reset as the router moved their flow to another node\n{}",
        requests.results.len(),
        lost.len(),
        moved.len(),
        steps.join("\n")
    );
    assert_kept_pace(&requests, started);
    // The flow moves at most twice per restarted node (away from it, and back).
    assert!(
        moved.len() <= 2 * all.len(),
        "{} resets as the flow moved: {moved:?}",
        moved.len()
    );
    assert!(
        lost.is_empty(),
        "{}\nlost (request start after the client's, outcome, answered before, answered after): {lost:?}",
        lab.router.show_routes()
    );
}

/// The client, asking every 10 ms, kept its pace from `started` on (at least half its slots).
fn assert_kept_pace(requests: &ferrolb_tests::lab::Requests, started: std::time::Instant) {
    let slots = started.elapsed().as_millis() / 10;
    assert!(
        requests.results.len() as u128 * 2 >= slots,
        "{} requests in {slots} slots",
        requests.results.len()
    );
}

/// A lost request with the answers just before and after it.
type LostRequest<'a> = (Duration, &'a NoAnswer, Option<&'a str>, Option<&'a str>);

/// Splits the requests that got no answer into resets where the flow moved (the answer before
/// and the answer after came from different nodes) and the rest.
fn split_flow_moves(
    requests: &ferrolb_tests::lab::Requests,
) -> (Vec<LostRequest<'_>>, Vec<LostRequest<'_>>) {
    let r = &requests.results;
    let answer = |i: usize| r[i].1.as_ref().ok().map(String::as_str);
    let (mut moved, mut lost) = (Vec::new(), Vec::new());
    for (i, (at, outcome)) in r.iter().enumerate() {
        let Err(why) = outcome else { continue };
        let before = (0..i).rev().find_map(answer);
        let after = (i + 1..r.len()).find_map(answer);
        let entry = (*at, why, before, after);
        // Only a reset: a refused connect or a timeout is a request the restart lost.
        let reset = matches!(why, NoAnswer::Reset(_));
        if reset && before.is_some() && after.is_some() && before != after {
            moved.push(entry);
        } else {
            lost.push(entry);
        }
    }
    (moved, lost)
}

#[test]
fn a_peer_removed_while_down_leaves_no_session_state_and_no_session_metric() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    // A second router that does not exist: every node's session to it stays down.
    let peer = serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "BGPPeer",
        "metadata": {"name": "gone", "namespace": ferrolb_tests::lab::INSTALL_NS},
        "spec": {"myASN": 64512, "peerASN": 64514, "peerAddress": "10.99.0.250",
                 "connectTime": "1s"},
    });
    let client = lab.client();
    lab.block(async move {
        ferrolb_tests::lab::manifests::server_side_apply(&client, &[peer], "e2e").await
    })
    .expect("the BGPPeer is applied");
    let series = "ferrolb_bgp_session_up{peer=\"gone\"} 0";
    let down = lab
        .wait(CONVERGE, "node-a's session to `gone`, down", || {
            let st = lab
                .bgp_sessions()
                .ok()?
                .into_iter()
                .find(|(n, _)| n == "gone.node-a")?
                .1;
            let metrics = lab.speaker_metrics(0)?;
            (st.conditions.first()?.reason == "NotEstablished"
                && st.last_error.is_some()
                && metrics.lines().any(|l| l == series))
            .then_some(st)
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}", lab.bgp_sessions()));
    assert_ne!(down.bgp_state, "Established");
    let client = lab.client();
    lab.block(async move {
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("ferrolb.io", "v1beta1", "BGPPeer"),
            "bgppeers",
        );
        Api::<kube::core::DynamicObject>::namespaced_with(
            client,
            ferrolb_tests::lab::INSTALL_NS,
            &ar,
        )
        .delete("gone", &Default::default())
        .await
        .map(|_| ())
    })
    .expect("the BGPPeer is deleted");
    lab.wait(
        CONVERGE,
        "`gone` out of the objects and the metrics",
        || {
            let left = lab.bgp_sessions().ok()?;
            let metrics = lab.speaker_metrics(0)?;
            (left.iter().all(|(_, st)| st.peer != "gone") && !metrics.contains("peer=\"gone\""))
                .then_some(())
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}\n{:?}",
            lab.bgp_sessions(),
            lab.speaker_metrics(0)
        )
    });
    // The router that exists is untouched.
    assert_eq!(lab.bgp_sessions().unwrap().len(), NODE_NAMES.len());
}

/// `web`'s IPv4 address and its layer-2 owner, once the client gets five answers in a row
/// from that owner (every speaker sees the others: the owner is the same everywhere).
fn web_and_its_owner(lab: &Lab) -> (IpAddr, String) {
    let services = addresses(lab);
    let ip = address_of(&services, "web");
    // The owner is read again on every try: one read once may name a node the lab has since
    // settled away from (CI saw 30 s of answers from another node than the first read).
    let mut last = None;
    let old = lab
        .wait(CONVERGE, "five answers in a row from the owner", || {
            let old = owner(lab, ip);
            let answers: Vec<_> = (0..5).map(|_| lab.ask_from_client(ip)).collect();
            let all_owner = answers.iter().all(|a| a.as_ref().is_ok_and(|a| *a == old));
            last = Some((old.clone(), answers));
            all_owner.then_some(old)
        })
        .unwrap_or_else(|e| panic!("{e}: owner and answers of the last try: {last:?}"));
    (ip, old)
}

/// Stops `web`'s layer-2 owner as a node drain does (SIGTERM to its speaker, then the node
/// goes away once the speaker has exited) while the client on the segment asks every 20 ms,
/// each request given up after 250 ms; returns (requests, lost, the old owner, the new one).
fn drain_the_l2_owner(lab: &mut Lab) -> (usize, Vec<ferrolb_tests::lab::NoAnswer>, String, String) {
    let (ip, old) = web_and_its_owner(lab);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A SYN that waits for ARP to find the new owner counts as lost (REQUEST_TIMEOUT).
    let client =
        lab.ask_from_client_every(ip, Duration::from_millis(20), REQUEST_TIMEOUT, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    let i = Topology::node_index(&old).unwrap();
    assert!(
        lab.stop_speaker(i, Duration::from_secs(30)),
        "the speaker ignored SIGTERM"
    );
    lab.topo.set_node_link(i, false).unwrap();
    let new = lab
        .wait(CONVERGE, "a new owner answering", || {
            lab.ask_from_client(ip).ok().filter(|a| *a != old)
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-a.log", 30)));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let requests = client.join().unwrap().expect("the client ran");
    let lost = requests
        .lost()
        .into_iter()
        .map(|(at, why)| {
            eprintln!(
                "lost: the request sent {at:?} after the client started (SIGTERM at 500ms): {why:?}"
            );
            why.clone().unwrap_err()
        })
        .collect();
    (requests.results.len(), lost, old, new)
}

#[test]
fn a_drained_owner_hands_its_address_over_before_it_stops_answering() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let (asked, lost, old, new) = drain_the_l2_owner(&mut lab);
    eprintln!(
        "node drain of {old} (SIGTERM to its speaker, then the node gone): {asked} requests \
         every 20 ms from the segment, {} lost; {new} answers now",
        lost.len()
    );
    assert_ne!(old, new);
    // The address is answered throughout: no request waits for ARP (without the handover,
    // 2-3 of them time out here). The one connection in flight when the client's cache
    // switches to the new owner's MAC may be reset: its state is on the old node.
    assert!(
        lost.iter()
            .all(|l| matches!(l, ferrolb_tests::lab::NoAnswer::Reset(_)))
            && lost.len() <= 1,
        "requests lost while {old} was drained: {lost:?}"
    );
}

/// `ferrolb_layer2_announced_addresses` of node `i`'s speaker.
fn l2_announced(lab: &Lab, i: usize) -> Option<u64> {
    let metrics = lab.speaker_metrics(i)?;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("ferrolb_layer2_announced_addresses "))?
        .trim()
        .parse()
        .ok()
}

#[test]
fn an_owner_whose_node_gets_the_exclusion_label_answers_until_the_new_owner_has_taken_over() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let (ip, old) = web_and_its_owner(&lab);
    let i = Topology::node_index(&old).unwrap();
    // The owner answers for `web` only: its other addresses are elsewhere or not layer 2.
    let before = l2_announced(&lab, i).expect("the owner's metrics");
    assert!(before >= 1, "{old} announces {before} addresses");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client =
        lab.ask_from_client_every(ip, Duration::from_millis(20), REQUEST_TIMEOUT, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    // A node drain: `kubectl cordon` (which moves nothing by itself) and the exclusion label.
    let client_api = lab.client();
    let name = old.clone();
    let labelled = std::time::Instant::now();
    lab.block(async move {
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client_api);
        let patch = serde_json::json!({
            "metadata": {"labels": {ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB: ""}},
            "spec": {"unschedulable": true},
        });
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    })
    .expect("the Node is labelled and cordoned");
    let new = lab
        .wait(CONVERGE, "a new owner answering", || {
            lab.ask_from_client(ip).ok().filter(|a| *a != old)
        })
        .unwrap();
    let new_seen = labelled.elapsed();
    // The old owner goes on answering until it sees the new owner's gratuitous ARP (within
    // the handover time, 1 s), then stops.
    let answered_for = lab
        .wait(
            CONVERGE,
            "the old owner to stop answering for `web`",
            || (l2_announced(&lab, i)? < before).then(|| labelled.elapsed()),
        )
        .unwrap();
    // Then the node goes away (rebooted): the client's cache already names the new owner.
    lab.topo.set_node_link(i, false).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let requests = client.join().unwrap().expect("the client ran");
    let lost = requests.lost();
    eprintln!(
        "{old} labelled excluded: {new} answered the client {:.2} s later, {old} stopped \
         answering {:.2} s after the label; {} requests every 20 ms from the segment, {} lost: \
         {lost:?}",
        new_seen.as_secs_f64(),
        answered_for.as_secs_f64(),
        requests.results.len(),
        lost.len()
    );
    assert_ne!(old, new);
    // It stopped because it saw the new owner announce the address (with
    // `--l2-handover-time=0s` it stops at the label, and says nothing of the kind) ...
    let log = lab.log_tail(&format!("speaker-{old}.log"), 400);
    assert!(
        log.lines().any(|l| l.contains(
            "another node announced an address this node hands over: no longer answering"
        ) && l.contains(&ip.to_string())),
        "{old}'s speaker did not stop at the new owner's announcement of {ip}:\n{}",
        lab.log_tail(&format!("speaker-{old}.log"), 30)
    );
    // ... and not only when the handover time ran out: answering on after the new owner's
    // announcement lets a client that asks again switch back to the old node, and its next
    // connection move twice.
    assert!(
        answered_for < new_seen + Duration::from_millis(500),
        "{old} answered {answered_for:?} after the label, though {new} answered the client \
         after {new_seen:?}"
    );
    // As in the SIGTERM drain: no request waits for ARP; the one connection in flight when
    // the client's cache switches to the new owner's MAC may be reset.
    assert!(
        lost.iter()
            .all(|(_, r)| matches!(r, Err(NoAnswer::Reset(_))))
            && lost.len() <= 1,
        "requests lost while {old} was drained: {lost:?}"
    );
}

/// `ferrolb_gossip_members` of node `i`'s speaker.
fn gossip_members(lab: &Lab, i: usize) -> Option<u64> {
    lab.speaker_metrics(i)?
        .lines()
        .find_map(|l| l.strip_prefix("ferrolb_gossip_members "))?
        .trim()
        .parse()
        .ok()
}

#[test]
fn restarting_every_speaker_one_at_a_time_loses_no_request_to_a_layer2_service() {
    let Some(mut lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let (ip, old) = web_and_its_owner(&lab);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A request every 10 ms from the segment; one that waits for ARP counts as lost
    // (REQUEST_TIMEOUT).
    let client =
        lab.ask_from_client_every(ip, Duration::from_millis(10), REQUEST_TIMEOUT, stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let mut steps = Vec::new();
    for (i, name) in NODE_NAMES.iter().enumerate() {
        // As a DaemonSet rolling update does: SIGTERM, a new speaker once the old one has
        // exited, the next node once the new one has joined the others.
        let at = started.elapsed();
        assert!(
            lab.stop_speaker(i, Duration::from_secs(30)),
            "the speaker of {name} ignored SIGTERM"
        );
        let gone = started.elapsed();
        lab.start_speaker(i).unwrap();
        lab.wait(CONVERGE, "the new speaker to see all three", || {
            (gossip_members(&lab, i)? == NODE_NAMES.len() as u64).then_some(())
        })
        .unwrap_or_else(|e| {
            panic!(
                "{e}\n{}",
                lab.log_tail(&format!("speaker-{}.log", NODE_NAMES[i]), 30)
            )
        });
        steps.push(format!(
            "{}: SIGTERM at {:.1} s, exited {:.1} s later, joined again at {:.1} s",
            NODE_NAMES[i],
            at.as_secs_f64(),
            (gone - at).as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
    }
    // The owner took its address back: the client has moved with it.
    lab.wait(CONVERGE, "the first owner answering again", || {
        (lab.ask_from_client(ip).ok()? == old).then_some(())
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let requests = client.join().unwrap().expect("the client ran");
    // The one connection in flight when the client's ARP cache switches to another node's
    // MAC is reset by that node (its state was on the other): counted apart, as in the BGP
    // test. A timeout (a request that waited for ARP) is lost.
    let (moved, lost) = split_flow_moves(&requests);
    eprintln!(
        "layer-2 rolling restart of 3 speakers: {} requests every 10 ms from the segment, {} \
         lost, {} reset as the client moved to another node's MAC\n{}",
        requests.results.len(),
        lost.len(),
        moved.len(),
        steps.join("\n")
    );
    assert_kept_pace(&requests, started);
    // The address moves away from its owner and back: twice.
    assert!(
        moved.len() <= 2,
        "{} resets as the client moved: {moved:?}",
        moved.len()
    );
    assert!(
        lost.is_empty(),
        "lost (request start after the client's, outcome, answered before, answered after): {lost:?}"
    );
}

/// One claim `l2-watch` saw on the segment: when (Unix nanoseconds), what kind, for which
/// address, from which MAC.
#[derive(Debug, Clone)]
struct Claim {
    at_ns: u128,
    kind: String,
    addr: IpAddr,
    mac: String,
}

/// Starts `l2-watch` in the client namespace for `addrs`; returns the process and its output
/// file once it is listening.
fn watch_claims(
    lab: &Lab,
    addrs: &[IpAddr],
) -> (ferrolb_tests::netns::Process, std::path::PathBuf) {
    let exe = e2e_support::bin_dir().join("l2-watch");
    assert!(
        exe.is_file(),
        "{} is not built (cargo build -p ferrolb-speaker)",
        exe.display()
    );
    let out = lab.dir().join("l2-watch.out");
    let mut args = vec![exe.display().to_string(), "eth0".into()];
    args.extend(addrs.iter().map(IpAddr::to_string));
    let p = lab.topo.client.spawn(&args, &out).expect("l2-watch starts");
    lab.wait(Duration::from_secs(5), "l2-watch to listen", || {
        std::fs::read_to_string(&out)
            .ok()?
            .starts_with("ready")
            .then_some(())
    })
    .unwrap();
    (p, out)
}

fn read_claims(out: &std::path::Path) -> Vec<Claim> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some(Claim {
                at_ns: w.first()?.parse().ok()?,
                kind: (*w.get(1)?).to_owned(),
                addr: w.get(2)?.parse().ok()?,
                mac: w.get(3)?.to_lowercase(),
            })
        })
        .collect()
}

fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `web`'s layer-2 owner, frozen (SIGSTOP) while `l2-watch` watches web's addresses from the
/// client, once another node answers the client in its place.
struct FrozenOwner {
    /// web's first address, the one whose owner was frozen.
    ip: IpAddr,
    /// All of web's addresses.
    web: Vec<IpAddr>,
    /// The frozen owner, its index and its MAC.
    old: String,
    i: usize,
    old_mac: String,
    /// The node that answered the client instead, and how long after the freeze.
    new: String,
    taken_over: Duration,
    /// The frozen speaker's process, and when it was stopped.
    pid: u32,
    frozen: std::time::Instant,
    /// `l2-watch` and its output.
    watch: ferrolb_tests::netns::Process,
    out: std::path::PathBuf,
}

fn freeze_web_owner(lab: &Lab) -> FrozenOwner {
    let (ip, old) = web_and_its_owner(lab);
    let web = all_addresses_of(&addresses(lab), "web");
    let i = Topology::node_index(&old).unwrap();
    let old_mac = lab.topo.node_mac(i).unwrap();
    // The freeze must find the owner's BFD session up at the router, or the router keeps its
    // routes for the hold time (a lab whose speaker had started 0.4 s before the freeze, its
    // BFD session not yet up, failed the route check under load).
    lab.wait(CONVERGE, "the owner's BFD session up at the router", || {
        lab.router.bfd_up(i).then_some(())
    })
    .unwrap();
    let (watch, out) = watch_claims(lab, &web);
    let pid = lab.speaker_pid(i).expect("the owner's speaker runs");
    signal(pid, "-STOP");
    let frozen = std::time::Instant::now();
    let new = lab
        .wait(
            CONVERGE,
            "another node answering while the owner is frozen",
            || lab.ask_from_client(ip).ok().filter(|a| *a != old),
        )
        .unwrap();
    FrozenOwner {
        ip,
        web,
        old,
        i,
        old_mac,
        new,
        taken_over: frozen.elapsed(),
        pid,
        frozen,
        watch,
        out,
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// Wakes (SIGCONT) the process `pid`, frozen at `frozen`, once it has stood still for `after`;
/// returns the Unix time of the wake in nanoseconds.
fn wake_after(pid: u32, frozen: std::time::Instant, after: Duration) -> u128 {
    std::thread::sleep(after.saturating_sub(frozen.elapsed()));
    let woke_ns = unix_ns();
    signal(pid, "-CONT");
    woke_ns
}

/// A stopped process (SIGSTOP: a VM paused, a host stalled, a debugger) keeps believing what
/// it believed: a frozen owner wakes thinking it still owns its addresses, though the others
/// moved them meanwhile, and here it was even excluded while it stood still. It must not pull
/// the neighbours back with an announcement it missed while frozen, nor answer the questions
/// its sockets kept meanwhile.
#[test]
fn an_owner_frozen_for_five_seconds_and_excluded_meanwhile_announces_nothing_stale_when_it_wakes() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let FrozenOwner {
        ip,
        web,
        old,
        i,
        old_mac,
        new,
        taken_over,
        pid,
        frozen,
        mut watch,
        out,
    } = freeze_web_owner(&lab);
    // While it stands still, its node is excluded (a drain that went on without it).
    let client_api = lab.client();
    let name = old.clone();
    lab.block(async move {
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client_api);
        let patch = serde_json::json!({
            "metadata": {"labels": {ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB: ""}},
        });
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    })
    .expect("the Node is labelled");
    // Neighbours ask meanwhile; the frozen node's packet sockets keep the questions.
    for a in &web {
        let macs = lab.topo.who_answers(*a).unwrap();
        assert!(!macs.contains(&old_mac), "{a} answered by the frozen {old}");
    }
    let woke_ns = wake_after(pid, frozen, Duration::from_secs(5));
    // The segment is watched for 5 s after the wake, the client asking as clients do.
    let woke = std::time::Instant::now();
    let mut answers = Vec::new();
    // Nor does the router learn a route through it again: BFD took its BGP session down while
    // it stood still, and the session comes back after the wake, with nothing to announce
    // from an excluded node.
    let hops = [
        IpAddr::from(ferrolb_tests::netns::topology::node_v4(i)),
        IpAddr::from(ferrolb_tests::netns::topology::node_v6(i)),
    ];
    let mut routed = Vec::new();
    while woke.elapsed() < Duration::from_secs(5) {
        answers.push(lab.ask_from_client(ip));
        routed.extend(
            lab.router
                .kernel_routes()
                .into_iter()
                .filter(|r| r.next_hops.iter().any(|h| hops.contains(h))),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    watch.kill();
    assert!(
        routed.is_empty(),
        "the router routed through {old} after the wake: {routed:?}\n{}",
        lab.log_tail(&format!("speaker-{old}.log"), 40)
    );
    let claims = read_claims(&out);
    let shown = |c: &Claim| {
        format!(
            "{:+.3} s {} {} {}",
            (c.at_ns as f64 - woke_ns as f64) / 1e9,
            c.kind,
            c.addr,
            c.mac
        )
    };
    let stale: Vec<String> = claims
        .iter()
        .filter(|c| c.at_ns >= woke_ns && c.mac == old_mac)
        .map(shown)
        .collect();
    let elsewhere = answers
        .iter()
        .filter(|a| a.as_ref().is_ok_and(|n| *n != old))
        .count();
    eprintln!(
        "{old} frozen for 5 s and excluded meanwhile; {new} answered the client {:.2} s after \
         the freeze; after the wake: {} claims by {old} (stale), {elsewhere} of {} requests \
         answered by another node",
        taken_over.as_secs_f64(),
        stale.len(),
        answers.len()
    );
    let log = lab.log_tail(&format!("speaker-{old}.log"), 400);
    assert!(
        stale.is_empty(),
        "{old} woke and claimed web's addresses, which the others had moved and its Node no \
         longer may hold:\n{}\n{}",
        stale.join("\n"),
        lab.log_tail(&format!("speaker-{old}.log"), 30)
    );
    assert!(
        log.contains("this speaker stood still: a new connection to the peer waits"),
        "{old}'s BGP session did not notice it stood still (it would reconnect at once and may \
         announce what it no longer may before the exclusion arrives):\n{}",
        lab.log_tail(&format!("speaker-{old}.log"), 30)
    );
    assert!(
        log.contains("is skipped, not sent late"),
        "{old} said nothing of the announcements it missed:\n{}",
        lab.log_tail(&format!("speaker-{old}.log"), 30)
    );
    assert_eq!(
        elsewhere,
        answers.len(),
        "answers after the wake: {answers:?}"
    );
    // One MAC answers each of web's addresses, and not the woken node's.
    for a in &web {
        let macs = lab.topo.who_answers(*a).unwrap();
        assert!(
            macs.len() == 1 && macs[0] != old_mac,
            "{a} answered by {macs:?} ({old} is {old_mac})"
        );
    }
}

/// The Unix time in nanoseconds of the first line of `log` (the speaker's, ANSI colours and
/// all) containing `needle` at or after `since_ns`.
fn logged_at(log: &str, needle: &str, since_ns: u128) -> Option<u128> {
    log.lines().filter(|l| l.contains(needle)).find_map(|l| {
        let plain: String = l
            .split('\u{1b}')
            .map(|part| part.split_once('m').map_or(part, |(_, rest)| rest))
            .collect();
        let stamp: jiff::Timestamp = plain.split_whitespace().next()?.parse().ok()?;
        let ns = u128::try_from(stamp.as_nanosecond()).ok()?;
        (ns >= since_ns).then_some(ns)
    })
}

/// The owner wakes after the others declared it dead and took its addresses; once it has
/// rejoined, it is their owner again (no preferences: the same node wins), and it announces
/// them then, not before.
#[test]
fn an_owner_frozen_for_five_seconds_announces_its_addresses_only_once_it_has_rejoined() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let FrozenOwner {
        ip,
        web,
        old,
        old_mac,
        pid,
        frozen,
        mut watch,
        out,
        ..
    } = freeze_web_owner(&lab);
    let woke_ns = wake_after(pid, frozen, Duration::from_secs(5));
    let back = lab
        .wait(
            CONVERGE,
            "the woken owner answering the client again",
            || lab.ask_from_client(ip).ok().filter(|a| *a == old),
        )
        .map(|_| (unix_ns() - woke_ns) as f64 / 1e9);
    watch.kill();
    let log = lab.log_tail(&format!("speaker-{old}.log"), 400);
    let rejoined = logged_at(&log, "it has rejoined", woke_ns);
    let claims: Vec<Claim> = read_claims(&out)
        .into_iter()
        .filter(|c| c.at_ns >= woke_ns && c.mac == old_mac)
        .collect();
    let since = |ns: u128| (ns as f64 - woke_ns as f64) / 1e9;
    eprintln!(
        "{old} woke: rejoined at {:+.3} s, announced web at {:?} s, answered the client again \
         at {back:?} s",
        rejoined.map_or(f64::NAN, since),
        claims.iter().map(|c| since(c.at_ns)).collect::<Vec<_>>()
    );
    let rejoined = rejoined.unwrap_or_else(|| {
        panic!(
            "{old} never said it rejoined:\n{}",
            lab.log_tail(&format!("speaker-{old}.log"), 30)
        )
    });
    assert!(!claims.is_empty(), "{old} never announced web again");
    assert!(
        claims.iter().all(|c| c.at_ns >= rejoined),
        "{old} announced before it had rejoined: {claims:?}"
    );
    back.unwrap();
    assert_eq!(lab.topo.who_answers(ip).unwrap(), vec![old_mac.clone()]);
    for a in &web {
        assert_eq!(lab.topo.who_answers(*a).unwrap().len(), 1, "{a}");
    }
}

/// The speakers' gossip port (their default).
const GOSSIP_PORT: &str = "7946";

/// Drops (`cut`) or stops dropping every gossip datagram into and out of node `i`: its speaker
/// and the others no longer hear each other, while clients, the router and the API server still
/// reach every node.
fn cut_gossip(lab: &Lab, i: usize, cut: bool) {
    let op = if cut { "-I" } else { "-D" };
    for chain in ["INPUT", "OUTPUT"] {
        for port in ["--dport", "--sport"] {
            lab.topo
                .node(i)
                .exec_ok(&[
                    "iptables",
                    op,
                    chain,
                    "-p",
                    "udp",
                    port,
                    GOSSIP_PORT,
                    "-j",
                    "DROP",
                ])
                .unwrap_or_else(|e| panic!("iptables {op} {chain} in node {i}: {e}"));
        }
    }
}

/// Asks for each of `addrs` from the client, one request at a time per address, until `stop`:
/// `l2-watch` records every answer on the wire, from every MAC that gives one.
fn keep_asking(
    lab: &Lab,
    addrs: &[IpAddr],
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<usize>> {
    addrs
        .iter()
        .map(|ip| {
            let client = lab.topo.client.name().to_owned();
            let stop = stop.clone();
            let target = ip.to_string();
            let v6 = ip.is_ipv6();
            std::thread::spawn(move || {
                let mut asked = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let ask: &[&str] = if v6 {
                        &[
                            "ndisc6", "-n", "-m", "-r", "1", "-w", "300", &target, "eth0",
                        ]
                    } else {
                        &["arping", "-c", "1", "-w", "1", "-I", "eth0", &target]
                    };
                    let mut args = vec!["ip", "netns", "exec", &client];
                    args.extend(ask);
                    let _ = ferrolb_tests::netns::run(&args);
                    asked += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                asked
            })
        })
        .collect()
}

/// Per address, the MACs that claimed it in each whole second since `from_ns` (negative seconds
/// before it).
fn macs_per_second(
    claims: &[Claim],
    from_ns: u128,
) -> BTreeMap<IpAddr, BTreeMap<i64, BTreeSet<String>>> {
    let mut out: BTreeMap<IpAddr, BTreeMap<i64, BTreeSet<String>>> = BTreeMap::new();
    for c in claims {
        let second = ((c.at_ns as f64 - from_ns as f64) / 1e9).floor() as i64;
        out.entry(c.addr)
            .or_default()
            .entry(second)
            .or_default()
            .insert(c.mac.clone());
    }
    out
}

/// Gossip between one node and the two others is cut for 30 s while the client, the router and
/// the API server reach every node. Gossip alone cannot tell that from the others' death; the
/// API server, which both sides reach, breaks the tie: the side that cannot win stops answering,
/// so one MAC answers each layer-2 address within a second, and after the heal no address
/// moves more than once.
#[test]
fn a_gossip_partition_leaves_one_mac_per_address_within_a_second_and_each_moves_at_most_once_after_the_heal()
 {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let (_, old) = web_and_its_owner(&lab);
    let services = addresses(&lab);
    let l2: Vec<IpAddr> = services
        .iter()
        .filter(|s| s.pool == "lab-l2")
        .flat_map(|s| s.ingress.iter().map(|(ip, _)| *ip))
        .collect();
    let owners = lab.wait_for_l2_owners(&l2, CONVERGE).unwrap();
    let i = Topology::node_index(&old).unwrap();
    let macs: BTreeMap<String, String> = (0..NODE_NAMES.len())
        .map(|n| (lab.topo.node_mac(n).unwrap(), NODE_NAMES[n].to_owned()))
        .collect();
    let (mut watch, out) = watch_claims(&lab, &l2);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let askers = keep_asking(&lab, &l2, &stop);
    std::thread::sleep(Duration::from_secs(2));
    let cut_ns = unix_ns();
    cut_gossip(&lab, i, true);
    let cut = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(30).saturating_sub(cut.elapsed()));
    let healed_ns = unix_ns();
    cut_gossip(&lab, i, false);
    std::thread::sleep(Duration::from_secs(10));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let asked: usize = askers.into_iter().map(|t| t.join().unwrap()).sum();
    watch.kill();
    let claims: Vec<Claim> = read_claims(&out)
        .into_iter()
        .map(|mut c| {
            c.mac = macs.get(&c.mac).cloned().unwrap_or(c.mac);
            c
        })
        .collect();
    let during = macs_per_second(&claims, cut_ns);
    let heal_offset = ((healed_ns - cut_ns) as f64 / 1e9).floor() as i64;
    let mut report = Vec::new();
    let mut late_duplicates = Vec::new();
    let mut unanswered = Vec::new();
    let mut moves_after_heal = Vec::new();
    let mut late_single = Vec::new();
    for ip in &l2 {
        let seconds = during.get(ip).cloned().unwrap_or_default();
        let row: Vec<usize> = (0..heal_offset + 10)
            .map(|s| seconds.get(&s).map_or(0, |m| m.len()))
            .collect();
        let duplicated: Vec<i64> = (0..heal_offset)
            .filter(|s| seconds.get(s).is_some_and(|m| m.len() > 1))
            .collect();
        late_duplicates.extend(duplicated.iter().filter(|s| **s >= 1).map(|s| (*ip, *s)));
        unanswered.extend(
            (2..heal_offset)
                .filter(|s| !seconds.contains_key(s))
                .map(|s| (*ip, s)),
        );
        // Who claimed it after the heal, in order, repeats collapsed.
        let mut sequence: Vec<&str> = Vec::new();
        for c in claims
            .iter()
            .filter(|c| c.addr == *ip && c.at_ns >= healed_ns)
        {
            if sequence.last() != Some(&c.mac.as_str()) {
                sequence.push(&c.mac);
            }
        }
        // The MAC answering when the heal came, and when another last claimed the address.
        let cut_window: Vec<&Claim> = claims
            .iter()
            .filter(|c| c.addr == *ip && c.at_ns >= cut_ns && c.at_ns < healed_ns)
            .collect();
        let single_from = cut_window.last().map_or(0.0, |settled| {
            cut_window
                .iter()
                .filter(|c| c.mac != settled.mac)
                .map(|c| (c.at_ns - cut_ns) as f64 / 1e9)
                .fold(0.0, f64::max)
        });
        if single_from >= 1.0 {
            late_single.push((*ip, single_from));
        }
        let last_dup = seconds
            .iter()
            .filter(|(s, m)| **s >= heal_offset && m.len() > 1)
            .map(|(s, _)| s - heal_offset + 1)
            .max();
        if sequence.len() > 2 {
            moves_after_heal.push((*ip, sequence.join(" → ")));
        }
        report.push(format!(
            "{ip:<18} owner {:<7} MACs per second from the cut (healed after 30) {row:?}; one \
             MAC from +{single_from:.3} s; seconds with two: {}; after the heal: {} (one owner \
             left within {} s)",
            owners[ip],
            duplicated.len(),
            sequence.join(" → "),
            last_dup.unwrap_or(0)
        ));
    }
    let summary = format!(
        "gossip cut between {old} and the others for 30 s ({asked} questions asked):\n  {}",
        report.join("\n  ")
    );
    eprintln!("{summary}");
    // Every failure says what was measured and what each speaker last said.
    let log: String = std::iter::once(summary)
        .chain(NODE_NAMES.iter().map(|n| {
            format!(
                "\n--- {n}\n{}",
                lab.log_tail(&format!("speaker-{n}.log"), 12)
            )
        }))
        .collect();
    assert!(
        late_single.is_empty(),
        "another MAC still claimed these addresses 1 s or more after the cut (address, seconds): \
         {late_single:?}\n{log}"
    );
    assert!(
        late_duplicates.is_empty(),
        "two MACs answered after the first second of the partition (address, second): \
         {late_duplicates:?}\n{log}"
    );
    assert!(
        unanswered.is_empty(),
        "nobody answered (address, second): {unanswered:?}\n{log}"
    );
    assert!(
        moves_after_heal.is_empty(),
        "addresses that moved more than once after the heal: {moves_after_heal:?}\n{log}"
    );
    for ip in &l2 {
        assert_eq!(lab.topo.who_answers(*ip).unwrap().len(), 1, "{ip}");
    }
}

/// `ferrolb explain` (the binary, in the namespace the lab's API server listens in) over what
/// real speakers and a real router did.
fn explain(lab: &Lab, args: &[&str]) -> String {
    let out = e2e_support::ferrolb(lab, args);
    assert!(
        out.status.success(),
        "ferrolb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `ferrolb explain` prints for the lab's two Services: the layer-2 owner answering on its
/// interface and the others standing by; every node announcing the BGP Service to the router,
/// which holds the route; and `ferrolb status` with nothing to look at.
#[test]
fn explain_names_the_layer2_owner_and_the_router_holding_each_nodes_route() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let services = addresses(&lab);
    let web = address_of(&services, "web");
    // The owner is read beside each explain: a handover between a first reading and the
    // explains (a speaker the others met late, or one falsely suspected and back: the
    // speakers log both as "live speakers changed") would otherwise leave explain naming the
    // new owner while the test waits for the old one.
    let (web_owner, text) = lab
        .wait(CONVERGE, "explain naming web's owner", || {
            let owners = lab.l2_owners().ok()?;
            let [web_owner] = owners.get(&web)?.as_slice() else {
                return None;
            };
            let text = explain(&lab, &["explain", "-n", "default", "web"]);
            text.contains(&format!(
                "    {web_owner}: announces: layer 2: answers ARP on "
            ))
            .then(|| (web_owner.clone(), text))
        })
        .unwrap_or_else(|e| panic!("{e}: {}", explain(&lab, &["explain", "web"])));
    eprintln!("{text}");
    for node in NODE_NAMES.iter().filter(|n| **n != web_owner) {
        assert!(
            text.contains(&format!(
                "    {node}: does not announce: standing by: {web_owner} answers for {web}"
            )),
            "{node}: {text}"
        );
    }
    for ip in all_addresses_of(&services, "web-bgp") {
        lab.wait_for_route(ip, &[0, 1, 2], CONVERGE)
            .unwrap_or_else(|e| panic!("{e}\n{}", lab.router.show_routes()));
    }
    let text = lab
        .wait(CONVERGE, "explain naming the router for every node", || {
            let text = explain(&lab, &["explain", "service", "web-bgp"]);
            NODE_NAMES
                .iter()
                .all(|n| {
                    text.contains(&format!(
                        "    {n}: announces: BGP: announced to lab-router (10.99.0.1:179), session Established\n      the router lab-router (10.99.0.1:179) holds the route"
                    ))
                })
                .then_some(text)
        })
        .unwrap_or_else(|e| panic!("{e}: {}", explain(&lab, &["explain", "web-bgp"])));
    eprintln!("{text}");
    let status = explain(&lab, &["status"]);
    eprintln!("{status}");
    assert!(
        status.contains("Services without an address: 0"),
        "{status}"
    );
    assert!(
        status.contains("BGP sessions not Established or BFD not Up: 0"),
        "{status}"
    );
    let node = explain(&lab, &["explain", "node", &web_owner]);
    eprintln!("{node}");
    assert!(node.contains("May announce: yes"), "{node}");
    assert!(
        node.contains("session lab-router (10.99.0.1:179): Established, BFD Up"),
        "{node}"
    );
    assert!(node.contains("default/web-bgp to lab-router"), "{node}");
}
