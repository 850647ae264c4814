//! What only this node can check, as the problems of its `ConfigurationState`
//! ([`ferrolb_api::summary`] turns them into the object's status). Pure: the time is passed in.
//!
//! A node reports:
//! - `BGPPeer`s selecting it that it cannot configure, or configures in part (a missing
//!   password Secret key, a missing `BFDProfile`): the controller sees only Secrets' names.
//! - `BGPPeer`s it has had no Established session with for [`UNREACHABLE_AFTER`] or more.
//!   The message does not change while the session retries (the changing details are in the
//!   peer's `BGPSessionState`), so a peer that stays down costs one write, not one per retry.
//! - `Interface`s it should answer ARP/NDP on but cannot (missing, down, NOARP, ...).
//! - `Address`es it was elected to answer for over layer 2 but cannot on any interface.
//! - `Address`es its own kernel answers ARP for as well ([`crate::l2::kernel_arp`]): one
//!   problem per address, whose text changes only with the sysctls or interfaces, so a node
//!   left as it is costs one write. Each text is made once and kept while its fault lasts.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_api::summary::Problem;

use crate::bgp::config::PeerConfig;
use crate::bgp::{PeerStatus, State};
use crate::cluster::peers::PeerConfigError;
use crate::l2::kernel_arp::{Exposure, KernelArp, sysctl_name};

/// How long a configured peer's session may stay down (at start, or after it went down)
/// before the node reports the peer unreachable: long enough for a session to come up or to
/// come back after a reset (a connect retry or two), short enough for an operator watching.
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(30);

/// What the checks look at, borrowed from the speaker's state.
pub struct Inputs<'a> {
    /// The `BGPPeer`s selecting this node that are configured in part or not at all.
    pub peer_errors: &'a [PeerConfigError],
    /// The sessions configured.
    pub peers: &'a [PeerConfig],
    /// Their states, by `BGPPeer` name.
    pub sessions: &'a BTreeMap<String, PeerStatus>,
    /// Interfaces that cannot answer, with why.
    pub interface_faults: &'a BTreeMap<String, String>,
    /// Addresses elected here that cannot be answered, with the reason's label.
    pub unable: &'a BTreeMap<IpAddr, &'static str>,
    /// Layer-2 Service addresses this node's kernel answers ARP for too.
    pub kernel_arp: &'a BTreeMap<Ipv4Addr, KernelArp>,
}

/// The node's checks; remembers since when each configured session is down.
#[derive(Debug, Default)]
pub struct NodeChecks {
    down_since: BTreeMap<String, Instant>,
    /// The problem made for each kernel ARP fault, kept while the fault is the same: thousands
    /// of addresses share one cause, and the checks run on every pass of the sync loop.
    kernel_arp: HashMap<Ipv4Addr, (KernelArp, Problem)>,
}

impl NodeChecks {
    /// The problems of `node` at `now`.
    pub fn problems(&mut self, now: Instant, node: &str, inputs: &Inputs) -> Vec<Problem> {
        let mut out: Vec<Problem> = inputs
            .peer_errors
            .iter()
            .map(|e| Problem::new("BGPPeer", e.peer(), e.to_string()))
            .collect();
        self.down_since
            .retain(|peer, _| inputs.peers.iter().any(|p| p.id.0 == *peer));
        for peer in inputs.peers {
            let name = &peer.id.0;
            let up = inputs
                .sessions
                .get(name)
                .is_some_and(|s| s.state == State::Established);
            if up {
                self.down_since.remove(name);
                continue;
            }
            let since = *self.down_since.entry(name.clone()).or_insert(now);
            if now.saturating_duration_since(since) >= UNREACHABLE_AFTER {
                out.push(Problem::new(
                    "BGPPeer",
                    name.as_str(),
                    format!(
                        "no Established session from node `{node}` to {} for {}s or more; \
                         BGPSessionState `{}` says why",
                        std::net::SocketAddr::new(peer.peer_address, peer.peer_port),
                        UNREACHABLE_AFTER.as_secs(),
                        super::sessions::object_name(name, node),
                    ),
                ));
            }
        }
        out.extend(
            inputs
                .interface_faults
                .iter()
                .map(|(name, fault)| Problem::new("Interface", name.as_str(), fault.as_str())),
        );
        out.extend(inputs.unable.iter().map(|(ip, reason)| {
            Problem::new(
                "Address",
                ip.to_string(),
                format!(
                    "elected to answer for it over layer 2 on node `{node}`, which cannot \
                     ({reason}; the speaker's log and CannotAnswer Event say why); another node \
                     answers instead"
                ),
            )
        }));
        self.kernel_arp
            .retain(|ip, (fault, _)| inputs.kernel_arp.get(ip) == Some(fault));
        for (ip, fault) in inputs.kernel_arp {
            let (_, problem) = self.kernel_arp.entry(*ip).or_insert_with(|| {
                let problem =
                    Problem::new("Address", ip.to_string(), kernel_arp_message(node, fault));
                (fault.clone(), problem)
            });
            out.push(problem.clone());
        }
        out
    }

    /// When a session now down will have been down for [`UNREACHABLE_AFTER`], if one will:
    /// the caller checks again then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.down_since
            .values()
            .min()
            .map(|t| *t + UNREACHABLE_AFTER)
    }
}

/// What the kernel of `node` does with `fault`'s address, why, and what to do.
pub fn kernel_arp_message(node: &str, fault: &KernelArp) -> String {
    let cause = &fault.cause;
    let key = cause.exposure.sysctl();
    let on: Vec<&str> = cause.on.iter().map(|(name, _)| name.as_str()).collect();
    let on = on.join(", ");
    let values = || {
        let each: Vec<String> = cause
            .on
            .iter()
            .map(|(name, v)| format!("{} {v}", sysctl_name(name, key)))
            .collect();
        format!(
            "{} is {} ({})",
            sysctl_name("all", key),
            cause.all,
            each.join(", ")
        )
    };
    let held = fault.held_on.join(", ");
    let ip = fault.ip;
    let strict = "Set strictARP: true in kube-proxy's configuration (arp_ignore=1, arp_announce=2)";
    match cause.exposure {
        Exposure::ArpIgnore => format!(
            "the kernel of node `{node}` also answers ARP for {ip} on {on}: it is on {held} and {}; \
             every such node answers, not only the elected one. {strict}",
            values()
        ),
        Exposure::OnInterface => format!(
            "the kernel of node `{node}` also answers ARP for {ip} on {on}: it is on {on} itself, \
             and an interface's own addresses are answered whatever arp_ignore says but 8; every \
             such node answers, not only the elected one. Take it off {on} (kube-proxy in IPVS \
             mode keeps Service addresses on kube-ipvs0)"
        ),
        Exposure::ArpAnnounce => format!(
            "the kernel of node `{node}` may send its own ARP requests from {ip} on {on}: it is \
             on {held} and {}; a neighbour that hears one points the address at this node, \
             elected or not. {strict}",
            values()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> PeerConfig {
        PeerConfig::new(name, 64512, 64513, "192.0.2.1".parse().unwrap())
    }

    fn status(state: State) -> PeerStatus {
        PeerStatus {
            state,
            ..Default::default()
        }
    }

    struct Fixture {
        peer_errors: Vec<PeerConfigError>,
        peers: Vec<PeerConfig>,
        sessions: BTreeMap<String, PeerStatus>,
        interface_faults: BTreeMap<String, String>,
        unable: BTreeMap<IpAddr, &'static str>,
        kernel_arp: BTreeMap<Ipv4Addr, KernelArp>,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                peer_errors: Vec::new(),
                peers: Vec::new(),
                sessions: BTreeMap::new(),
                interface_faults: BTreeMap::new(),
                unable: BTreeMap::new(),
                kernel_arp: BTreeMap::new(),
            }
        }

        fn inputs(&self) -> Inputs<'_> {
            Inputs {
                peer_errors: &self.peer_errors,
                peers: &self.peers,
                sessions: &self.sessions,
                interface_faults: &self.interface_faults,
                unable: &self.unable,
                kernel_arp: &self.kernel_arp,
            }
        }
    }

    #[test]
    fn a_node_with_its_sessions_up_and_interfaces_answering_has_no_problem() {
        let mut f = Fixture::new();
        f.peers.push(peer("tor"));
        f.sessions.insert("tor".into(), status(State::Established));
        let mut checks = NodeChecks::default();
        assert!(
            checks
                .problems(Instant::now(), "node-a", &f.inputs())
                .is_empty()
        );
        assert_eq!(checks.next_deadline(), None);
    }

    #[test]
    fn a_peer_down_is_reported_unreachable_only_after_the_grace_time() {
        let mut f = Fixture::new();
        f.peers.push(peer("tor"));
        f.sessions.insert("tor".into(), status(State::Active));
        let mut checks = NodeChecks::default();
        let t0 = Instant::now();
        assert!(checks.problems(t0, "node-a", &f.inputs()).is_empty());
        assert_eq!(checks.next_deadline(), Some(t0 + UNREACHABLE_AFTER));
        let just_before = t0 + UNREACHABLE_AFTER - Duration::from_millis(1);
        assert!(
            checks
                .problems(just_before, "node-a", &f.inputs())
                .is_empty()
        );
        let late = checks.problems(t0 + UNREACHABLE_AFTER, "node-a", &f.inputs());
        assert_eq!(late.len(), 1);
        assert_eq!((late[0].kind, late[0].name.as_str()), ("BGPPeer", "tor"));
        assert!(
            late[0].message.contains("192.0.2.1:179"),
            "{}",
            late[0].message
        );
        assert!(
            late[0].message.contains("`tor.node-a`"),
            "{}",
            late[0].message
        );
        // Retrying (Connect, Active, ...) changes nothing in what is reported.
        f.sessions.insert("tor".into(), status(State::Connect));
        let later = checks.problems(t0 + 3 * UNREACHABLE_AFTER, "node-a", &f.inputs());
        assert_eq!(later, late);
    }

    #[test]
    fn a_session_that_comes_up_clears_the_report_and_a_new_outage_waits_again() {
        let mut f = Fixture::new();
        f.peers.push(peer("tor"));
        f.sessions.insert("tor".into(), status(State::Idle));
        let mut checks = NodeChecks::default();
        let t0 = Instant::now();
        checks.problems(t0, "n", &f.inputs());
        assert_eq!(
            checks
                .problems(t0 + UNREACHABLE_AFTER, "n", &f.inputs())
                .len(),
            1
        );
        f.sessions.insert("tor".into(), status(State::Established));
        let t1 = t0 + 2 * UNREACHABLE_AFTER;
        assert!(checks.problems(t1, "n", &f.inputs()).is_empty());
        f.sessions.insert("tor".into(), status(State::Active));
        assert!(
            checks
                .problems(t1 + Duration::from_secs(1), "n", &f.inputs())
                .is_empty()
        );
    }

    #[test]
    fn a_peer_no_longer_configured_is_forgotten() {
        let mut f = Fixture::new();
        f.peers.push(peer("tor"));
        let mut checks = NodeChecks::default();
        checks.problems(Instant::now(), "n", &f.inputs());
        assert!(checks.next_deadline().is_some());
        f.peers.clear();
        assert!(checks.problems(Instant::now(), "n", &f.inputs()).is_empty());
        assert_eq!(checks.next_deadline(), None);
    }

    #[test]
    fn peer_errors_interface_faults_and_unanswerable_addresses_are_each_a_problem() {
        let mut f = Fixture::new();
        f.peer_errors.push(PeerConfigError::MissingSecret {
            peer: "tor".into(),
            secret: "md5".into(),
        });
        f.interface_faults.insert(
            "eth9".into(),
            "interface `eth9` does not exist on this node".into(),
        );
        f.unable.insert("10.0.0.5".parse().unwrap(), "no_subnet");
        let problems = NodeChecks::default().problems(Instant::now(), "node-a", &f.inputs());
        let named: Vec<(&str, &str)> = problems.iter().map(|p| (p.kind, p.name.as_str())).collect();
        assert_eq!(
            named,
            [
                ("BGPPeer", "tor"),
                ("Interface", "eth9"),
                ("Address", "10.0.0.5")
            ]
        );
        assert!(problems[0].message.contains("`md5`"));
        assert!(problems[2].message.contains("no_subnet"));
    }

    fn kernel_fault(ip: &str, exposure: Exposure, all: u32, on: &[(&str, u32)]) -> KernelArp {
        use crate::l2::kernel_arp::Cause;
        KernelArp {
            ip: ip.parse().unwrap(),
            held_on: vec!["kube-ipvs0".into()],
            cause: Cause {
                exposure,
                all,
                on: on.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            },
        }
    }

    #[test]
    fn an_address_the_kernel_answers_for_names_the_sysctl_the_interfaces_and_the_fix() {
        let mut f = Fixture::new();
        let fault = kernel_fault("10.99.0.100", Exposure::ArpIgnore, 0, &[("eth0", 0)]);
        f.kernel_arp.insert(fault.ip, fault);
        let mut checks = NodeChecks::default();
        let problems = checks.problems(Instant::now(), "node-a", &f.inputs());
        assert_eq!(problems.len(), 1);
        let p = &problems[0];
        assert_eq!((p.kind, p.name.as_str()), ("Address", "10.99.0.100"));
        assert_eq!(
            p.message,
            "the kernel of node `node-a` also answers ARP for 10.99.0.100 on eth0: it is on \
             kube-ipvs0 and net.ipv4.conf.all.arp_ignore is 0 (net.ipv4.conf.eth0.arp_ignore 0); \
             every such node answers, not only the elected one. Set strictARP: true in \
             kube-proxy's configuration (arp_ignore=1, arp_announce=2)"
        );
        // Nothing changed: the same problem, word for word (one ConfigurationState write).
        assert_eq!(
            checks.problems(Instant::now(), "node-a", &f.inputs()),
            problems
        );
    }

    #[test]
    fn each_kind_of_kernel_fault_reads_its_own_way_and_a_change_is_told_at_once() {
        let mut f = Fixture::new();
        let mut checks = NodeChecks::default();
        let cases = [
            (
                kernel_fault("10.99.0.7", Exposure::ArpAnnounce, 1, &[("eth0", 0)]),
                &[
                    "may send its own ARP requests from 10.99.0.7 on eth0",
                    "net.ipv4.conf.all.arp_announce is 1 (net.ipv4.conf.eth0.arp_announce 0)",
                    "strictARP: true",
                ][..],
            ),
            (
                kernel_fault("10.99.0.7", Exposure::OnInterface, 1, &[("eth0", 1)]),
                &[
                    "answers ARP for 10.99.0.7 on eth0: it is on eth0 itself",
                    "Take it off eth0",
                ][..],
            ),
            (
                kernel_fault(
                    "10.99.0.7",
                    Exposure::ArpIgnore,
                    3,
                    &[("eth0.100", 0), ("eth1", 2)],
                ),
                &[
                    "on eth0.100, eth1: it is on kube-ipvs0",
                    "net.ipv4.conf.all.arp_ignore is 3 (net.ipv4.conf.eth0/100.arp_ignore 0, \
                     net.ipv4.conf.eth1.arp_ignore 2)",
                ][..],
            ),
        ];
        for (fault, words) in cases {
            f.kernel_arp.insert(fault.ip, fault.clone());
            let problems = checks.problems(Instant::now(), "node-a", &f.inputs());
            assert_eq!(problems.len(), 1);
            assert_eq!(problems[0].message, kernel_arp_message("node-a", &fault));
            for w in words {
                assert!(
                    problems[0].message.contains(w),
                    "{w:?} in {}",
                    problems[0].message
                );
            }
        }
        f.kernel_arp.clear();
        assert!(
            checks
                .problems(Instant::now(), "node-a", &f.inputs())
                .is_empty()
        );
    }
}
