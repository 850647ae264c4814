//! Whether this node's own kernel answers ARP for a Service address as well as the speaker, so
//! that clients see this node's MAC whether or not it was elected. The check is pure
//! ([`KernelView::check`]); only [`read_sysctls`] reads the host (`/proc/sys`).
//!
//! # Why
//! kube-proxy in IPVS mode puts every LoadBalancer address on the dummy `kube-ipvs0` of every
//! node, as a host address (/32). The kernel takes them for its own: unless told otherwise
//! (kube-proxy's `strictARP: true`, which sets `arp_ignore=1` and `arp_announce=2`), every node
//! answers ARP requests for every such address on its Ethernet interface, with its own MAC. One
//! address, several MACs: the elected owner is one answer among many, and each client sends to
//! whichever it heard last.
//!
//! # The kernel's rules
//! From `Documentation/networking/ip-sysctl.rst`, each checked on Linux 6.18 (two namespaces
//! joined by a veth pair; the address as a /32 on a NOARP veth standing in for `kube-ipvs0`;
//! `arping` and `ndisc6` from the peer; `curl --interface` from the address and `tcpdump` on
//! the peer for `arp_announce`). The kernel uses the larger of `net.ipv4.conf.all.X` and
//! `net.ipv4.conf.IF.X` (seen with either set alone).
//! - `arp_ignore`, on the interface a request comes in on:
//!   - 0 (the default), and the reserved 4 to 7: answers for an address on any interface.
//!   - 1: only for an address on the incoming interface. 2: the same, when the sender is in a
//!     subnet of that interface that also holds the address.
//!   - 3: answers unless the address has scope `host`. kube-proxy's addresses have scope
//!     `global`, and [`InterfaceInfo`] carries no scope, so 3 counts as answering.
//!   - 8: never answers, not even for the interface's own addresses.
//!
//!   An address on the incoming interface itself is answered with any value but 8 (seen for a
//!   /32 on `eth0` with 0 to 3).
//! - `arp_announce`, on the interface the kernel sends its own ARP request out of: 0 and 1 let
//!   it name a local address of another interface as the sender, when a packet from that
//!   address needs a neighbour in the same subnet (seen: `who-has 10.77.0.2 tell 10.77.0.100`
//!   with 0 and 1, `tell 10.77.0.11`, the interface's own address, with 2). Neighbours that
//!   hear it point the address at this node. A smaller fault than answering (the node must
//!   send from the address first), reported only where the kernel does not answer.
//! - NDP: Linux answers a Neighbor Solicitation only for an address on the interface it came
//!   in on, whatever the sysctls (seen with `ndisc6`, forwarding off and on: no answer for an
//!   address on the stand-in for `kube-ipvs0`). IPv6 Service addresses are never answered by
//!   the kernel from there, and are not checked.
//!
//! # What is checked
//! For each IPv4 address held by an interface of this node (every node holds every Service
//! address with IPVS), on each interface the speaker would answer on for it
//! ([`iface::choose`]; `wanted` as the planner decided for an address owned here):
//! - held on that interface itself and `arp_ignore` not 8: [`Exposure::OnInterface`];
//! - otherwise, `arp_ignore` neither 1, 2 nor 8: [`Exposure::ArpIgnore`];
//! - otherwise, `arp_announce` below 2: [`Exposure::ArpAnnounce`].
//!
//! The first that holds on any of the interfaces is the address's fault, with those interfaces.
//!
//! # Caveats
//! - Only host addresses (/32) are seen: [`InterfaceInfo::networks`] keeps the subnet of an
//!   address with a wider prefix, not the address.
//! - Writing a sysctl sends no netlink notification: the speaker sees a change at its next
//!   read of the host, on the next link or address change (kube-proxy adding a Service address
//!   is one) or at the latest after [`super::hostwatch::SAFETY_INTERVAL`] (a minute).
//! - For an address elected elsewhere, the interfaces are the default choice (by subnet): an
//!   `L2Advertisement`'s `interfaces` are resolved for the owner only.
//! - `arp_filter` and `rp_filter` are not considered: neither stops the answer for a client on
//!   the address's own segment.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use super::iface::Interfaces;
use super::iface::{self, InterfaceInfo};

/// `arp_ignore` and `arp_announce` of one `net.ipv4.conf` directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpConf {
    /// `arp_ignore`.
    pub ignore: u32,
    /// `arp_announce`.
    pub announce: u32,
}

/// The host's ARP sysctls: `net.ipv4.conf.all` and each interface's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArpSysctls {
    /// `net.ipv4.conf.all`.
    pub all: ArpConf,
    /// By interface name. An interface missing here has no IPv4 configuration (no
    /// `/proc/sys/net/ipv4/conf/IF`): the kernel does no ARP on it.
    pub interfaces: BTreeMap<String, ArpConf>,
}

/// What lets the kernel claim an address on an interface, most serious first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Exposure {
    /// The address is on the interface the requests come in on: the kernel answers for it
    /// whatever `arp_ignore` says, but 8.
    OnInterface,
    /// `arp_ignore` lets the kernel answer for an address held on another interface.
    ArpIgnore,
    /// The kernel does not answer, but `arp_announce` below 2 lets it name the address as the
    /// sender of its own ARP requests.
    ArpAnnounce,
}

impl Exposure {
    /// A stable label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Exposure::OnInterface => "on_interface",
            Exposure::ArpIgnore => "arp_ignore",
            Exposure::ArpAnnounce => "arp_announce",
        }
    }

    /// The sysctl whose values a [`Cause`] of this exposure carries.
    pub fn sysctl(self) -> &'static str {
        match self {
            Exposure::OnInterface | Exposure::ArpIgnore => "arp_ignore",
            Exposure::ArpAnnounce => "arp_announce",
        }
    }
}

/// Why the kernel claims an address: the same for every address held alike, so a change of
/// causes (not of addresses) is worth a log line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cause {
    /// What lets it.
    pub exposure: Exposure,
    /// `net.ipv4.conf.all.<sysctl>` (the exposure's [`Exposure::sysctl`]).
    pub all: u32,
    /// The interfaces where the kernel claims the address, each with its own
    /// `net.ipv4.conf.IF.<sysctl>`, sorted by name.
    pub on: Vec<(String, u32)>,
}

/// One Service address the kernel claims besides the speaker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelArp {
    /// The address.
    pub ip: Ipv4Addr,
    /// The interfaces holding it (`kube-ipvs0`), sorted.
    pub held_on: Vec<String>,
    /// Why the kernel claims it, and where.
    pub cause: Cause,
}

/// The name of sysctl `key` of `scope` (`all` or an interface) as `sysctl(8)` writes it: a dot
/// in an interface's name (`eth0.100`) becomes a slash.
pub fn sysctl_name(scope: &str, key: &str) -> String {
    format!("net.ipv4.conf.{}.{key}", scope.replace('.', "/"))
}

/// The host, prepared to check many addresses: which interfaces hold each IPv4 host address,
/// the interfaces without their host addresses (which are no subnet to [`iface::choose`], and
/// would make each choice walk every Service address), and the sysctls.
#[derive(Clone, Debug, Default)]
pub struct KernelView {
    held: HashMap<Ipv4Addr, Vec<String>>,
    segments: Vec<InterfaceInfo>,
    sysctls: ArpSysctls,
}

impl KernelView {
    /// The view of `host` with `sysctls`.
    pub fn new(host: &[InterfaceInfo], sysctls: ArpSysctls) -> Self {
        let mut held: HashMap<Ipv4Addr, Vec<String>> = HashMap::new();
        let mut segments = Vec::with_capacity(host.len());
        for i in host {
            for n in &i.networks {
                if let IpAddr::V4(a) = n.addr()
                    && n.prefix_len() == n.max_prefix_len()
                {
                    held.entry(a).or_default().push(i.name.clone());
                }
            }
            segments.push(InterfaceInfo {
                networks: i
                    .networks
                    .iter()
                    .filter(|n| n.prefix_len() < n.max_prefix_len())
                    .copied()
                    .collect(),
                ..i.clone()
            });
        }
        for names in held.values_mut() {
            names.sort();
            names.dedup();
        }
        Self {
            held,
            segments,
            sysctls,
        }
    }

    /// The IPv4 host addresses of this node, in no particular order: the only addresses
    /// [`KernelView::check`] can find a fault for.
    pub fn held(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.held.keys().copied()
    }

    /// Whether the kernel claims `ip` (module docs) on the interfaces the speaker would answer
    /// on for it: `wanted` as [`iface::choose`] resolves it. `None` when it does not, when no
    /// interface of this node holds `ip`, and for IPv6.
    pub fn check(&self, ip: IpAddr, wanted: &Interfaces) -> Option<KernelArp> {
        let IpAddr::V4(v4) = ip else { return None };
        let held_on = self.held.get(&v4)?;
        let all = self.sysctls.all;
        let mut found: BTreeMap<Exposure, Vec<(String, u32)>> = BTreeMap::new();
        for name in iface::choose(ip, wanted, &self.segments) {
            // No IPv4 configuration on it: no ARP either.
            let Some(own) = self.sysctls.interfaces.get(&name) else {
                continue;
            };
            let ignore = all.ignore.max(own.ignore);
            let found_here = if held_on.contains(&name) {
                (ignore != 8).then_some((Exposure::OnInterface, own.ignore))
            } else if !matches!(ignore, 1 | 2 | 8) {
                Some((Exposure::ArpIgnore, own.ignore))
            } else if all.announce.max(own.announce) < 2 {
                Some((Exposure::ArpAnnounce, own.announce))
            } else {
                None
            };
            if let Some((exposure, value)) = found_here {
                found.entry(exposure).or_default().push((name, value));
            }
        }
        let (exposure, on) = found.into_iter().next()?;
        let all = match exposure {
            Exposure::OnInterface | Exposure::ArpIgnore => all.ignore,
            Exposure::ArpAnnounce => all.announce,
        };
        Some(KernelArp {
            ip: v4,
            held_on: held_on.clone(),
            cause: Cause { exposure, all, on },
        })
    }
}

/// Where the kernel shows `net.ipv4.conf`.
const CONF_DIR: &str = "/proc/sys/net/ipv4/conf";

/// Reads `arp_ignore` and `arp_announce` of `all` and of each of `interfaces`, in the calling
/// thread's network namespace (the network sysctls are per namespace). An interface whose
/// directory is missing (no IPv4 configuration, or gone since it was listed) is left out;
/// failing to read `all` is an error.
pub fn read_sysctls<'a>(interfaces: impl IntoIterator<Item = &'a str>) -> io::Result<ArpSysctls> {
    read_sysctls_in(Path::new(CONF_DIR), interfaces)
}

/// [`read_sysctls`] from `dir` instead of `/proc/sys/net/ipv4/conf`.
pub fn read_sysctls_in<'a>(
    dir: &Path,
    interfaces: impl IntoIterator<Item = &'a str>,
) -> io::Result<ArpSysctls> {
    let read = |scope: &str| -> io::Result<ArpConf> {
        let value = |key: &str| -> io::Result<u32> {
            let path = dir.join(scope).join(key);
            let text = std::fs::read_to_string(&path)?;
            text.trim().parse().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })
        };
        Ok(ArpConf {
            ignore: value("arp_ignore")?,
            announce: value("arp_announce")?,
        })
    };
    let all = read("all")?;
    let mut out = ArpSysctls {
        all,
        interfaces: BTreeMap::new(),
    };
    // A name that is not a plain directory name is no interface of ours.
    for name in interfaces
        .into_iter()
        .filter(|n| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..")
    {
        if let Ok(conf) = read(name) {
            out.interfaces.insert(name.to_owned(), conf);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::l2::frame::MacAddr;

    fn eth(name: &str, nets: &[&str]) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            index: 1,
            mac: Some(MacAddr([2, 0, 0, 0, 0, 1])),
            up: true,
            loopback: false,
            noarp: false,
            networks: nets.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    /// A node as kube-proxy in IPVS mode leaves it: `eth0` on the segment, the Service
    /// addresses on the NOARP dummy `kube-ipvs0`.
    fn ipvs_node() -> Vec<InterfaceInfo> {
        vec![
            InterfaceInfo {
                loopback: true,
                mac: None,
                ..eth("lo", &["127.0.0.0/8"])
            },
            eth("eth0", &["10.99.0.0/24", "fd00:99::/64"]),
            eth("eth1", &["10.98.0.0/24"]),
            InterfaceInfo {
                noarp: true,
                ..eth(
                    "kube-ipvs0",
                    &["10.99.0.100/32", "fd00:99::100/128", "10.99.0.101/32"],
                )
            },
        ]
    }

    fn conf(ignore: u32, announce: u32) -> ArpConf {
        ArpConf { ignore, announce }
    }

    /// `all` and every interface of [`ipvs_node`] at `all`, `eth0` at `eth0`.
    fn sysctls(all: ArpConf, eth0: ArpConf) -> ArpSysctls {
        let mut interfaces: BTreeMap<String, ArpConf> = ["lo", "eth1", "kube-ipvs0"]
            .into_iter()
            .map(|n| (n.to_string(), ArpConf::default()))
            .collect();
        interfaces.insert("eth0".into(), eth0);
        ArpSysctls { all, interfaces }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn check(host: &[InterfaceInfo], s: ArpSysctls, addr: &str) -> Option<KernelArp> {
        KernelView::new(host, s).check(ip(addr), &Interfaces::BySubnet)
    }

    fn cause(exposure: Exposure, all: u32, on: &[(&str, u32)]) -> Cause {
        Cause {
            exposure,
            all,
            on: on.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn an_ipvs_dummy_with_the_default_sysctls_has_the_kernel_answer_on_the_segment() {
        let got = check(&ipvs_node(), sysctls(conf(0, 0), conf(0, 0)), "10.99.0.100");
        assert_eq!(
            got,
            Some(KernelArp {
                ip: "10.99.0.100".parse().unwrap(),
                held_on: vec!["kube-ipvs0".into()],
                cause: cause(Exposure::ArpIgnore, 0, &[("eth0", 0)]),
            })
        );
    }

    #[test]
    fn arp_ignore_1_or_2_in_all_or_on_the_interface_stops_the_answer() {
        for ignore in [1, 2] {
            for (all, eth0) in [(conf(ignore, 2), conf(0, 0)), (conf(0, 2), conf(ignore, 0))] {
                assert_eq!(
                    check(&ipvs_node(), sysctls(all, eth0), "10.99.0.100"),
                    None,
                    "all {all:?}, eth0 {eth0:?}"
                );
            }
        }
    }

    #[test]
    fn the_larger_of_all_and_the_interface_counts_so_8_silences_and_3_to_7_answer() {
        let cases = [
            // (all, eth0, answers)
            (8, 0, false),
            (0, 8, false),
            (1, 8, false),
            // 3 refuses scope-host addresses only; kube-proxy's are global.
            (3, 0, true),
            (0, 3, true),
            // Reserved: the kernel answers.
            (4, 0, true),
            (7, 1, true),
        ];
        for (all, eth0, answers) in cases {
            let got = check(
                &ipvs_node(),
                sysctls(conf(all, 2), conf(eth0, 2)),
                "10.99.0.100",
            );
            assert_eq!(got.is_some(), answers, "all {all}, eth0 {eth0}: {got:?}");
            if let Some(f) = got {
                assert_eq!(f.cause, cause(Exposure::ArpIgnore, all, &[("eth0", eth0)]));
            }
        }
    }

    #[test]
    fn an_address_on_the_answering_interface_itself_is_answered_whatever_arp_ignore_but_8() {
        let mut host = ipvs_node();
        host[1].networks.push("10.99.0.102/32".parse().unwrap());
        for ignore in [0, 1, 2, 3] {
            let got = check(&host, sysctls(conf(ignore, 2), conf(0, 2)), "10.99.0.102");
            assert_eq!(
                got.map(|f| (f.held_on, f.cause)),
                Some((
                    vec!["eth0".to_string()],
                    cause(Exposure::OnInterface, ignore, &[("eth0", 0)])
                )),
                "arp_ignore {ignore}"
            );
        }
        assert_eq!(
            check(&host, sysctls(conf(8, 2), conf(0, 2)), "10.99.0.102"),
            None
        );
    }

    #[test]
    fn arp_announce_below_2_is_reported_where_the_kernel_does_not_answer() {
        for (all, eth0) in [(0, 0), (1, 0), (0, 1)] {
            let got = check(
                &ipvs_node(),
                sysctls(conf(1, all), conf(1, eth0)),
                "10.99.0.100",
            );
            assert_eq!(
                got.map(|f| f.cause),
                Some(cause(Exposure::ArpAnnounce, all, &[("eth0", eth0)])),
                "arp_announce all {all}, eth0 {eth0}"
            );
        }
        assert_eq!(
            check(&ipvs_node(), sysctls(conf(1, 0), conf(1, 2)), "10.99.0.100"),
            None
        );
    }

    #[test]
    fn ipv6_addresses_are_never_answered_by_the_kernel_from_another_interface() {
        assert_eq!(
            check(
                &ipvs_node(),
                sysctls(conf(0, 0), conf(0, 0)),
                "fd00:99::100"
            ),
            None
        );
    }

    #[test]
    fn an_address_no_interface_holds_is_no_fault() {
        // A Service address kube-proxy has not put on kube-ipvs0 (yet): nothing to answer for.
        assert_eq!(
            check(&ipvs_node(), sysctls(conf(0, 0), conf(0, 0)), "10.99.0.200"),
            None
        );
    }

    #[test]
    fn only_the_interfaces_the_speaker_answers_on_count() {
        let view = KernelView::new(&ipvs_node(), sysctls(conf(0, 0), conf(0, 0)));
        // An advertisement naming eth1: the requests come in there.
        let named = Interfaces::Named(["eth1".to_string()].into());
        assert_eq!(
            view.check(ip("10.99.0.100"), &named).map(|f| f.cause),
            Some(cause(Exposure::ArpIgnore, 0, &[("eth1", 0)]))
        );
        // An address outside every segment: the speaker answers nowhere, nor is asked.
        let mut host = ipvs_node();
        host[3].networks.push("10.50.0.1/32".parse().unwrap());
        let view = KernelView::new(&host, sysctls(conf(0, 0), conf(0, 0)));
        assert_eq!(view.check(ip("10.50.0.1"), &Interfaces::BySubnet), None);
    }

    #[test]
    fn an_interface_without_ipv4_configuration_does_no_arp() {
        let mut s = sysctls(conf(0, 0), conf(0, 0));
        s.interfaces.remove("eth0");
        assert_eq!(check(&ipvs_node(), s, "10.99.0.100"), None);
    }

    #[test]
    fn every_answering_interface_is_named_with_its_own_value() {
        let mut host = ipvs_node();
        host[2].networks.push("10.99.0.0/24".parse().unwrap());
        let mut s = sysctls(conf(0, 0), conf(3, 0));
        s.interfaces.insert("eth1".into(), conf(0, 0));
        assert_eq!(
            check(&host, s, "10.99.0.101").map(|f| f.cause),
            Some(cause(Exposure::ArpIgnore, 0, &[("eth0", 3), ("eth1", 0)]))
        );
    }

    #[test]
    fn held_lists_the_ipv4_host_addresses_only() {
        let view = KernelView::new(&ipvs_node(), ArpSysctls::default());
        let mut held: Vec<Ipv4Addr> = view.held().collect();
        held.sort();
        assert_eq!(
            held,
            [
                "10.99.0.100".parse::<Ipv4Addr>().unwrap(),
                "10.99.0.101".parse().unwrap()
            ]
        );
    }

    #[test]
    fn sysctl_names_write_a_dot_in_an_interface_name_as_a_slash() {
        assert_eq!(
            sysctl_name("all", "arp_ignore"),
            "net.ipv4.conf.all.arp_ignore"
        );
        assert_eq!(
            sysctl_name("eth0.100", "arp_announce"),
            "net.ipv4.conf.eth0/100.arp_announce"
        );
    }

    #[test]
    fn the_sysctls_are_read_per_interface_and_a_missing_interface_is_left_out() {
        let dir = std::env::temp_dir().join(format!("ferrolb-kernel-arp-{}", std::process::id()));
        let write = |scope: &str, ignore: &str, announce: &str| {
            let d = dir.join(scope);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("arp_ignore"), ignore).unwrap();
            std::fs::write(d.join("arp_announce"), announce).unwrap();
        };
        write("all", "1\n", "2\n");
        write("eth0", "0\n", "0\n");
        let got = read_sysctls_in(&dir, ["eth0", "gone", "../all"]).unwrap();
        assert_eq!(got.all, conf(1, 2));
        assert_eq!(
            got.interfaces,
            [("eth0".to_string(), conf(0, 0))].into_iter().collect()
        );
        write("all", "x\n", "2\n");
        assert!(read_sysctls_in(&dir, ["eth0"]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_sysctls_in(&dir, ["eth0"]).is_err());
    }
}
