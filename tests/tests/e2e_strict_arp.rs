//! End-to-end: a node whose kernel answers ARP for Service addresses itself, as every node does
//! under kube-proxy's IPVS mode without `strictARP`. The lab's kube-proxy stand-in puts every
//! Service address on each node's `lb0`, as IPVS puts them on `kube-ipvs0`; the topology sets
//! `arp_ignore=1` and `arp_announce=2` (strictARP), and these tests undo that. Who answers is
//! asked with real `arping` (and `ndisc6`) from the client on the segment; what each node says
//! is read from its `ConfigurationState`.
//!
//! A sysctl write sends no netlink notification: the speaker sees it at its next read of the
//! host, on the next link or address change or within a minute (hostwatch's safety interval).
//! The tests make an address change on each node after writing (`nudge`), so that they need
//! not wait for the minute; their deadline covers the minute all the same.
//!
//! Skipped with a printed reason only when not root or when `ferrolb-speaker` is not built
//! (a failure instead under `FERROLB_REQUIRE_BINARIES=1`).

mod e2e_support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_api::v1beta1::{ConfigurationResult, ConfigurationState, speaker_object_name};
use ferrolb_tests::lab::{INSTALL_NS, Lab, RouterKind};
use ferrolb_tests::netns::topology::{NODE_NAMES, Topology};
use kube::api::{Api, ListParams};

const CONVERGE: Duration = Duration::from_secs(30);
/// How long a sysctl write may take to reach every node's `ConfigurationState`: the speaker's
/// safety re-read of the host (60 s) and a write (1 s apart at most), with a margin. The nudge
/// makes it a second or two.
const SYSCTL_SEEN: Duration = Duration::from_secs(75);

/// Each node's `ConfigurationState` status as (result, errorSummary), by node.
fn config_states(lab: &Lab) -> BTreeMap<String, (ConfigurationResult, String)> {
    let client = lab.client();
    lab.block(async move {
        let list = Api::<ConfigurationState>::namespaced(client, INSTALL_NS)
            .list(&ListParams::default())
            .await
            .expect("listing ConfigurationStates");
        NODE_NAMES
            .iter()
            .filter_map(|node| {
                let name = speaker_object_name(node);
                let o = list
                    .items
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(name.as_str()))?;
                let s = o.status.as_ref()?;
                Some((node.to_string(), (s.result, s.error_summary.clone())))
            })
            .collect()
    })
}

/// Waits until every node's `ConfigurationState` is `Valid`, with nothing to report.
fn wait_until_valid(lab: &Lab) {
    lab.wait(
        CONVERGE,
        "every node's ConfigurationState to be Valid",
        || {
            let states = config_states(lab);
            (states.len() == NODE_NAMES.len()
                && states.values().all(|(result, summary)| {
                    *result == ConfigurationResult::Valid && summary.is_empty()
                }))
            .then_some(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {:#?}", config_states(lab)));
}

/// Sets `arp_ignore` in `all` and on `eth0` of every node, then has each speaker read its host.
fn set_arp_ignore(lab: &Lab, value: u32) {
    for i in 0..NODE_NAMES.len() {
        let node = lab.topo.node(i);
        for scope in ["all", "eth0"] {
            node.sysctl(&format!("net.ipv4.conf.{scope}.arp_ignore={value}"))
                .unwrap_or_else(|e| panic!("node {i}: {e}"));
        }
        nudge(lab, i);
    }
}

/// An address added to and taken off node `i`'s `lo`: the kernel notifies the change, and the
/// speaker reads the host, its sysctls with it, at once instead of within the minute.
fn nudge(lab: &Lab, i: usize) {
    let node = lab.topo.node(i);
    for op in ["add", "del"] {
        node.ip(&["addr", op, "192.0.2.254/32", "dev", "lo"])
            .unwrap_or_else(|e| panic!("node {i}: ip addr {op}: {e}"));
    }
}

/// The lab's `web` Service's IPv4 and IPv6 addresses, each with its layer-2 owner's index.
fn web(lab: &Lab) -> Vec<(IpAddr, usize)> {
    let services = lab
        .wait_for_addresses(CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("controller.log", 30)));
    let addrs: Vec<IpAddr> = services
        .iter()
        .find(|s| s.name == "web")
        .expect("the lab's web Service")
        .ingress
        .iter()
        .map(|(ip, _)| *ip)
        .collect();
    assert!(
        addrs.iter().any(IpAddr::is_ipv4) && addrs.iter().any(IpAddr::is_ipv6),
        "web is dual-stack: {addrs:?}"
    );
    let owners = lab
        .wait_for_l2_owners(&addrs, CONVERGE)
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.log_tail("speaker-node-a.log", 30)));
    addrs
        .iter()
        .map(|ip| (*ip, Topology::node_index(&owners[ip]).expect("a lab node")))
        .collect()
}

fn macs(lab: &Lab, nodes: impl IntoIterator<Item = usize>) -> Vec<String> {
    let mut macs: Vec<String> = nodes
        .into_iter()
        .map(|i| lab.topo.node_mac(i).unwrap())
        .collect();
    macs.sort();
    macs
}

/// Every MAC that answers the client's ARP requests for `ip` within three seconds, sorted.
fn arp_answers(lab: &Lab, ip: IpAddr) -> Vec<String> {
    lab.topo
        .arp_answers_within(ip, 3)
        .expect("arping runs in the client's namespace")
}

/// What node `node` should say about `ip` once it sees `arp_ignore=0`.
fn kernel_answers(node: &str, ip: IpAddr) -> String {
    format!(
        "Address {ip}: the kernel of node `{node}` also answers ARP for {ip} on eth0: it is on \
         lb0 and net.ipv4.conf.all.arp_ignore is 0 (net.ipv4.conf.eth0.arp_ignore 0); every \
         such node answers, not only the elected one. Set strictARP: true in kube-proxy's \
         configuration (arp_ignore=1, arp_announce=2)"
    )
}

#[test]
fn without_strict_arp_every_nodes_kernel_answers_and_each_node_reports_the_sysctl() {
    let Some(lab) = e2e_support::lab(RouterKind::Bird) else {
        return;
    };
    let web = web(&lab);
    let (v4, owner) = *web.iter().find(|(ip, _)| ip.is_ipv4()).unwrap();
    let (v6, v6_owner) = *web.iter().find(|(ip, _)| ip.is_ipv6()).unwrap();
    // With the topology's strictARP sysctls every node has read them and reports nothing, and
    // only the elected owner answers.
    wait_until_valid(&lab);
    assert_eq!(arp_answers(&lab, v4), macs(&lab, [owner]));

    let started = Instant::now();
    set_arp_ignore(&lab, 0);
    let states = lab
        .wait(
            SYSCTL_SEEN,
            "every node's ConfigurationState to name arp_ignore and eth0 for web's address",
            || {
                let states = config_states(&lab);
                NODE_NAMES
                    .iter()
                    .all(|node| {
                        states.get(*node).is_some_and(|(result, summary)| {
                            *result == ConfigurationResult::Invalid
                                && summary.contains(&kernel_answers(node, v4))
                        })
                    })
                    .then_some(states)
            },
        )
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {:#?}\n{}",
                config_states(&lab),
                lab.log_tail("speaker-node-a.log", 30)
            )
        });
    eprintln!(
        "reported {:?} after arp_ignore=0; node-a's errorSummary: {}",
        started.elapsed(),
        states["node-a"].1
    );
    // Every node's kernel answers, with its own MAC, besides the owner's speaker.
    assert_eq!(
        arp_answers(&lab, v4),
        macs(&lab, 0..NODE_NAMES.len()),
        "answers for {v4} with arp_ignore=0"
    );
    // NDP is not the kernel's to answer for an address on another interface: the owner alone.
    assert_eq!(lab.topo.who_answers(v6).unwrap(), macs(&lab, [v6_owner]));
    for (node, (_, summary)) in &states {
        assert!(
            !summary.contains(&v6.to_string()),
            "{node} says nothing of {v6}: {summary}"
        );
        assert!(
            !summary.contains("may send its own ARP requests"),
            "{node}: arp_announce stays 2, so only arp_ignore is named: {summary}"
        );
    }

    let restored = Instant::now();
    set_arp_ignore(&lab, 1);
    lab.wait(
        SYSCTL_SEEN,
        "every node's ConfigurationState to drop the kernel's ARP answers",
        || {
            let states = config_states(&lab);
            NODE_NAMES
                .iter()
                .all(|node| {
                    states
                        .get(*node)
                        .is_some_and(|(_, summary)| !summary.contains("arp_ignore"))
                })
                .then_some(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {:#?}", config_states(&lab)));
    eprintln!("cleared {:?} after arp_ignore=1", restored.elapsed());
    assert_eq!(
        arp_answers(&lab, v4),
        macs(&lab, [owner]),
        "answers for {v4} with arp_ignore=1"
    );
    let metrics = lab.speaker_metrics(owner).expect("the owner's metrics");
    assert!(
        metrics.contains("ferrolb_layer2_kernel_arp_addresses{reason=\"arp_ignore\"} 0"),
        "the gauge went back to 0:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("kernel_arp"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
