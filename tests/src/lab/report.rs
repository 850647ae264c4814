//! The lab's printed report (Services, owners, routes, who answers each client) and the failover
//! measurement. Drives a running [`Lab`]; returns text and figures, prints nothing itself.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::standin::{self, SERVICE_PORT};
use super::{Lab, Result, ServiceView};
use crate::netns::topology::{NODE_NAMES, Topology, node_v4, node_v6};

/// What is done to the owner of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Its speaker gets SIGKILL; the node stays up and keeps accepting the address's traffic,
    /// as a node whose speaker crashed does.
    SpeakerKilled,
    /// Its port on the bridge goes down: the node (speaker included) vanishes from the segment,
    /// as a node that loses power or its link does.
    NodeCutOff,
}

impl Fault {
    fn describe(self, node: &str) -> String {
        match self {
            Fault::SpeakerKilled => format!("SIGKILL to {node}'s speaker"),
            Fault::NodeCutOff => format!("{node} cut off the segment (its bridge port down)"),
        }
    }
}

/// What a failover measurement saw.
#[derive(Debug, Clone)]
pub struct Failover {
    /// What was done.
    pub fault: Fault,
    /// The Service.
    pub service: String,
    /// Its address.
    pub address: IpAddr,
    /// The owner the fault hit.
    pub old_owner: String,
    /// The node that answered afterwards.
    pub new_owner: String,
    /// From the fault to the first answer from the new owner, as the client saw it.
    pub elapsed: Duration,
    /// When the fault was applied, in seconds since the Unix epoch (to line it up with
    /// packet captures, which `tcpdump -tt` stamps the same way).
    pub fault_epoch: f64,
    /// Requests made while waiting.
    pub attempts: usize,
    /// Requests that got no answer (the outage, in probes).
    pub failures: usize,
    /// From the fault until the router's kernel had no route through the old owner's node any
    /// more (`None` when it had none before, or kept one past the limit).
    pub bgp_withdrawn: Option<Duration>,
}

/// How often the failover probe asks.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(20);

/// Applies `fault` to the layer-2 owner of `service`'s first address and measures, from the
/// client on the segment, the time until another node answers; meanwhile it measures how long
/// the router keeps a route through the old owner. Leaves the fault in place: see [`restore`].
pub fn failover(lab: &mut Lab, service: &str, fault: Fault, limit: Duration) -> Result<Failover> {
    let view = find(lab, service)?;
    failover_address(lab, service, view.ingress[0].0, fault, limit)
}

/// [`failover`] for one given address of `service` (say, its IPv6 one).
pub fn failover_address(
    lab: &mut Lab,
    service: &str,
    address: IpAddr,
    fault: Fault,
    limit: Duration,
) -> Result<Failover> {
    // A settled start: one owner in ServiceL2Status, and the client answered by it twice a
    // second apart (a speaker restarted by an earlier run may still be taking its addresses
    // back).
    let settled = || {
        let owner = lab
            .wait_for_l2_owners(&[address], Duration::from_secs(1))
            .ok()?[&address]
            .clone();
        (lab.ask_from_client(address).ok()? == owner).then_some(owner)
    };
    let old_owner = lab.wait(
        Duration::from_secs(20),
        "a settled owner answering the client",
        || {
            let first = settled()?;
            std::thread::sleep(Duration::from_secs(1));
            (settled()? == first).then_some(first)
        },
    )?;
    // Every node peered (a node restored by an earlier run may still be reconnecting), so the
    // BGP figure starts from a converged router.
    lab.wait(
        Duration::from_secs(30),
        "a BGP session from every node",
        || (lab.router.established() == NODE_NAMES.len()).then_some(()),
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let index = Topology::node_index(&old_owner).expect("owner is a lab node");
    let hops = [IpAddr::from(node_v4(index)), IpAddr::from(node_v6(index))];
    let routed_through = |lab: &Lab| {
        lab.router
            .kernel_routes()
            .iter()
            .any(|r| r.next_hops.iter().any(|h| hops.contains(h)))
    };
    let had_routes = routed_through(lab);
    let fault_at = Instant::now();
    let fault_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    match fault {
        Fault::SpeakerKilled => lab.kill_speaker(index),
        Fault::NodeCutOff => lab.topo.set_node_link(index, false)?,
    }
    let lab = &*lab;
    let old = old_owner.clone();
    let (watched, bgp_withdrawn) = std::thread::scope(|s| {
        let bgp = s.spawn(|| {
            if !had_routes {
                return None;
            }
            while fault_at.elapsed() < limit {
                if !routed_through(lab) {
                    return Some(fault_at.elapsed());
                }
                std::thread::sleep(PROBE_INTERVAL);
            }
            None
        });
        let watched = standin::ask_until(
            lab.topo.client.name(),
            SocketAddr::new(address, SERVICE_PORT),
            fault_at,
            PROBE_INTERVAL,
            limit,
            move |answer| answer != old,
        );
        (watched, bgp.join().ok().flatten())
    });
    let watched = watched.ok_or_else(|| super::LabError::Timeout {
        what: format!("a node other than {old_owner} to answer for {address}"),
        after: limit,
    })?;
    Ok(Failover {
        fault,
        service: service.into(),
        address,
        old_owner,
        new_owner: watched.answer,
        elapsed: watched.elapsed,
        fault_epoch,
        attempts: watched.attempts,
        failures: watched.failures,
        bgp_withdrawn,
    })
}

/// Undoes the fault of a [`failover`]: restarts the speaker, or plugs the node back in and
/// restarts its speaker (and its frr-k8s Pod, in a lab of MetalLB in frr-k8s mode), as a node
/// that lost power comes back with a fresh one. (A speaker that
/// lived through the partition keeps believing it owned the address all along and sends no new
/// gratuitous ARP, so a client would stay with the interim owner's MAC.)
pub fn restore(lab: &mut Lab, f: &Failover) -> Result<()> {
    let index = Topology::node_index(&f.old_owner).expect("owner is a lab node");
    match f.fault {
        Fault::SpeakerKilled => lab.start_speaker(index),
        Fault::NodeCutOff => {
            lab.kill_speaker(index);
            // MetalLB in frr-k8s mode: the node's frr-k8s Pod (FRR included) comes back fresh
            // too.
            lab.kill_frr(index);
            lab.topo.set_node_link(index, true)?;
            lab.start_frr(index)?;
            lab.start_speaker(index)
        }
    }
}

fn find(lab: &Lab, service: &str) -> Result<ServiceView> {
    lab.wait_for_addresses(Duration::from_secs(20))?
        .into_iter()
        .find(|s| s.name == service)
        .ok_or_else(|| super::LabError::Timeout {
            what: format!("Service {service}"),
            after: Duration::ZERO,
        })
}

/// The report of the lab's state: Services, owners and announcers, the router's routes, and a
/// request from each client to each address.
pub fn render(lab: &Lab, services: &[ServiceView]) -> Result<String> {
    let mut out = String::new();
    let owners = lab.l2_owners()?;
    let bgp = lab.bgp_announcers()?;
    let routes = lab.router.kernel_routes();
    let _ = writeln!(out, "== Services (namespace default)");
    let _ = writeln!(
        out,
        "{:<10} {:<8} {:<8} {:<14} {:<6} ANNOUNCED BY",
        "NAME", "POOL", "POLICY", "ADDRESS", "MODE"
    );
    for s in services {
        for (ip, mode) in &s.ingress {
            let l2 = owners
                .get(ip)
                .map(|o| format!("L2 owner {}", o.join(",")))
                .unwrap_or_default();
            let mut by_bgp: Vec<&str> = bgp
                .iter()
                .filter(|(svc, _, peers)| *svc == s.name && !peers.is_empty())
                .map(|(_, node, _)| node.as_str())
                .collect();
            // Cluster-policy Services have no per-node ServiceBGPStatus: the router's routes
            // say who announces them.
            let routed: Vec<String>;
            if by_bgp.is_empty() {
                routed = routes
                    .iter()
                    .filter(|r| {
                        r.prefix
                            .parse::<ipnet::IpNet>()
                            .is_ok_and(|p| p.contains(ip))
                    })
                    .flat_map(|r| r.next_hops.iter())
                    .filter_map(|h| {
                        (0..NODE_NAMES.len())
                            .find(|i| {
                                IpAddr::from(node_v4(*i)) == *h || IpAddr::from(node_v6(*i)) == *h
                            })
                            .map(|i| NODE_NAMES[i].to_string())
                    })
                    .collect();
                by_bgp = routed.iter().map(String::as_str).collect();
                by_bgp.dedup();
            }
            by_bgp.sort();
            by_bgp.dedup();
            let how = match (l2.is_empty(), by_bgp.is_empty()) {
                (false, _) => l2,
                (true, false) => format!("BGP from {}", by_bgp.join(",")),
                (true, true) => "nobody yet".into(),
            };
            let _ = writeln!(
                out,
                "{:<10} {:<8} {:<8} {:<14} {:<6} {}",
                s.name,
                s.pool,
                if s.local { "Local" } else { "Cluster" },
                ip,
                mode,
                how
            );
        }
    }
    let _ = writeln!(
        out,
        "\n== Routes the router learned ({}: {})",
        lab.router.kind(),
        lab.router.show_routes_command()
    );
    let _ = writeln!(out, "{}", lab.router.show_routes());
    let _ = writeln!(out, "\n== Kernel routes the router forwards with");
    for r in lab.router.kernel_routes() {
        let hops: Vec<String> = r.next_hops.iter().map(|h| node_label(*h)).collect();
        let _ = writeln!(out, "{:<18} via {}", r.prefix, hops.join(", "));
    }
    let _ = writeln!(
        out,
        "\n== TCP requests to port {SERVICE_PORT}: the node each entered through (the stand-in \
         answers there itself; with the real kube-proxy a Pod on any node may answer)"
    );
    for s in services {
        for (ip, _) in &s.ingress {
            let near = lab
                .ask_from_client(*ip)
                .unwrap_or_else(|e| format!("no answer ({e})"));
            let far = lab
                .ask_from_remote(*ip)
                .unwrap_or_else(|e| format!("no answer ({e})"));
            let _ = writeln!(
                out,
                "{:<10} {:<14} client (segment): {:<8} remote (via router): {}",
                s.name, ip, near, far
            );
        }
    }
    Ok(out)
}

/// `node-b (10.99.0.12)` for a node address (either family), the address alone otherwise.
pub fn node_label(ip: IpAddr) -> String {
    (0..NODE_NAMES.len())
        .find(|i| IpAddr::from(node_v4(*i)) == ip || IpAddr::from(node_v6(*i)) == ip)
        .map(|i| format!("{} ({ip})", NODE_NAMES[i]))
        .unwrap_or_else(|| ip.to_string())
}

/// The failover section of the report.
pub fn render_failover(f: &Failover) -> String {
    let mut out = format!(
        "== Failover: {what}, owner of {addr} ({svc})\n\
         layer 2: the client on the segment was answered by {new} {ms:.0} ms after the fault \
         ({att} requests every {iv} ms, {fail} unanswered)\n",
        what = f.fault.describe(&f.old_owner),
        addr = f.address,
        svc = f.service,
        new = f.new_owner,
        ms = f.elapsed.as_secs_f64() * 1000.0,
        att = f.attempts,
        iv = PROBE_INTERVAL.as_millis(),
        fail = f.failures,
    );
    match f.bgp_withdrawn {
        Some(d) => {
            let _ = writeln!(
                out,
                "BGP: the router stopped routing through {} {:.0} ms after the fault",
                f.old_owner,
                d.as_secs_f64() * 1000.0
            );
        }
        None => {
            let _ = writeln!(
                out,
                "BGP: the router still routed through {} at the end of the measurement",
                f.old_owner
            );
        }
    }
    out
}
