//! Which interfaces answer for an address, and why none can. The choice is pure ([`diagnose`],
//! [`choose`]); only [`system_interfaces`] reads the host (through pnet).
//!
//! # Usable interfaces
//! An interface can answer when it is up, not loopback, has a MAC and does not carry
//! `IFF_NOARP`. NOARP rules an interface out for IPv6 as well as IPv4, because of what Linux
//! itself does on such an interface (checked on Linux 6.18, veth with `ip link set IF arp off`,
//! `arping` and `ndisc6` from the peer):
//! - ARP: received requests are dropped before ARP processing, so the kernel never answers.
//! - NDP: the kernel still processes a Neighbor Solicitation and sends an Advertisement, but to
//!   the interface's *own* MAC: every neighbour entry on a NOARP device is created resolved
//!   (`NUD_NOARP`) with the device's own address as the destination (the same holds for IPv4
//!   neighbours). The solicitor never receives it.
//! - So everything the node sends through that interface, a Service's replies included, goes
//!   to its own MAC. Answering NDP from our packet socket would draw clients' traffic in, but
//!   the replies could not get back: the address is not served, whatever the family.
//!
//! Dummy interfaces always carry NOARP; so do layer-3 ipvlan links. An operator who turns ARP
//! off by hand on an Ethernet interface is told so ([`Unusable::NoArp`]).

use super::error::{InterfaceProblem, Unusable};
use super::frame::MacAddr;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Where to answer for an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interfaces {
    /// Every interface that is up, not loopback, and has a configured subnet containing the
    /// address.
    BySubnet,
    /// Exactly these interfaces (from `L2Advertisement.interfaces`).
    Named(BTreeSet<String>),
}

/// What the choice needs to know about one host interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Name (`eth0`).
    pub name: String,
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address, when it has one.
    pub mac: Option<MacAddr>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// A loopback interface (`IFF_LOOPBACK`).
    pub loopback: bool,
    /// Address resolution is off (`IFF_NOARP`): neither ARP nor NDP works (module docs).
    pub noarp: bool,
    /// Configured addresses with their prefix.
    pub networks: Vec<IpNet>,
}

impl InterfaceInfo {
    /// Whether the interface can carry ARP/NDP answers at all: up, not loopback, with a MAC,
    /// without NOARP.
    pub fn usable(&self) -> bool {
        self.unusable().is_none()
    }

    /// Why the interface cannot answer, `None` when it can. When several reasons hold, the
    /// one that fixing the others would not cure comes first: loopback, no MAC, NOARP, down.
    pub fn unusable(&self) -> Option<Unusable> {
        if self.loopback {
            Some(Unusable::Loopback)
        } else if self.mac.is_none_or(|m| m == MacAddr::default()) {
            Some(Unusable::NoMac)
        } else if self.noarp {
            Some(Unusable::NoArp)
        } else if !self.up {
            Some(Unusable::Down)
        } else {
            None
        }
    }
}

/// The interfaces to answer on for `ip`, or why there is none:
/// - [`Interfaces::BySubnet`]: every usable interface with a configured subnet holding `ip`.
///   None holding it is [`InterfaceProblem::NoSubnet`] (listing what was found); some holding
///   it but none usable is [`InterfaceProblem::NoUsableInterface`] with each one's reason.
/// - [`Interfaces::Named`]: those of the named interfaces that exist and are usable, whatever
///   their addresses (an advertisement may name an interface with no address in the subnet).
///   None usable is [`InterfaceProblem::NoUsableInterface`], each name with its reason
///   ([`Unusable::Missing`] for a name not on the host). An empty set means the default, as an
///   empty `L2Advertisement.interfaces` does.
///
/// `Ok` is sorted by name and never empty. Unusable candidates next to a usable one are left
/// out silently: the address is answered.
pub fn diagnose(
    ip: IpAddr,
    wanted: &Interfaces,
    host: &[InterfaceInfo],
) -> Result<Vec<String>, InterfaceProblem> {
    let mut usable = BTreeSet::new();
    let mut refused = BTreeMap::new();
    let mut consider = |name: &str, info: Option<&InterfaceInfo>| match info
        .map_or(Some(Unusable::Missing), InterfaceInfo::unusable)
    {
        None => {
            usable.insert(name.to_owned());
        }
        Some(reason) => {
            refused.entry(name.to_owned()).or_insert(reason);
        }
    };
    match wanted {
        Interfaces::Named(names) if !names.is_empty() => {
            for name in names {
                consider(name, host.iter().find(|i| i.name == *name));
            }
        }
        Interfaces::Named(_) | Interfaces::BySubnet => {
            for i in host
                .iter()
                .filter(|i| i.networks.iter().any(|n| holds(n, ip)))
            {
                consider(&i.name, Some(i));
            }
            if usable.is_empty() && refused.is_empty() {
                return Err(InterfaceProblem::NoSubnet {
                    ip,
                    found: found_subnets(ip, host),
                });
            }
        }
    }
    if usable.is_empty() {
        Err(InterfaceProblem::NoUsableInterface {
            ip,
            interfaces: refused.into_iter().collect(),
        })
    } else {
        Ok(usable.into_iter().collect())
    }
}

/// Whether `network`, configured on an interface, is a subnet holding `ip`. A host address
/// (/32, /128) is no subnet: an interface that carries a Service address itself, as kube-proxy
/// in IPVS mode puts every one on `kube-ipvs0`, is not the segment its neighbours ask on.
fn holds(network: &IpNet, ip: IpAddr) -> bool {
    network.prefix_len() < network.max_prefix_len() && network.contains(&ip)
}

/// Every non-loopback interface with its subnets of `ip`'s family, for
/// [`InterfaceProblem::NoSubnet`].
fn found_subnets(ip: IpAddr, host: &[InterfaceInfo]) -> Vec<(String, Vec<IpNet>)> {
    let mut found: BTreeMap<String, Vec<IpNet>> = BTreeMap::new();
    for i in host.iter().filter(|i| !i.loopback) {
        let nets = found.entry(i.name.clone()).or_default();
        nets.extend(
            i.networks
                .iter()
                .filter(|n| n.addr().is_ipv4() == ip.is_ipv4()),
        );
    }
    found.into_iter().collect()
}

/// [`diagnose`] without the reason: the interfaces to answer on, empty when there is none.
/// Prefer [`diagnose`] wherever the reason can be reported.
pub fn choose(ip: IpAddr, wanted: &Interfaces, host: &[InterfaceInfo]) -> Vec<String> {
    diagnose(ip, wanted, host).unwrap_or_default()
}

/// Turns the planner's owned addresses into what [`crate::l2::Responder::set_owned`] takes:
/// interface names per address. Addresses with no usable interface on this node are returned
/// apart with the reason (they are owned but cannot be announced: report them, and let them
/// move to a node that can answer).
pub fn resolve_owned(
    owned: &BTreeMap<IpAddr, Interfaces>,
    host: &[InterfaceInfo],
) -> (BTreeMap<IpAddr, Vec<String>>, Vec<InterfaceProblem>) {
    let mut ready = BTreeMap::new();
    let mut stranded = Vec::new();
    for (ip, wanted) in owned {
        match diagnose(*ip, wanted, host) {
            Ok(names) => {
                ready.insert(*ip, names);
            }
            Err(problem) => stranded.push(problem),
        }
    }
    (ready, stranded)
}

/// The host's interfaces, as pnet reads them (getifaddrs, in the calling thread's network
/// namespace).
pub fn system_interfaces() -> Vec<InterfaceInfo> {
    pnet::datalink::interfaces().iter().map(from_pnet).collect()
}

/// Converts pnet's view of an interface.
pub fn from_pnet(i: &pnet::datalink::NetworkInterface) -> InterfaceInfo {
    InterfaceInfo {
        name: i.name.clone(),
        index: i.index,
        mac: i.mac.map(|m| MacAddr(m.octets())),
        up: i.is_up(),
        loopback: i.is_loopback(),
        noarp: i.flags & NOARP_FLAG != 0,
        networks: i
            .ips
            .iter()
            .filter_map(|n| IpNet::new(n.ip(), n.prefix()).ok())
            .map(|n| n.trunc())
            .collect(),
    }
}

/// `IFF_NOARP` in the flags pnet reports (the kernel's `ifi_flags`).
const NOARP_FLAG: u32 = libc::IFF_NOARP as u32;

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: Option<MacAddr> = Some(MacAddr([2, 0, 0, 0, 0, 1]));

    /// An up Ethernet interface with these subnets.
    fn eth(name: &str, nets: &[&str]) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            index: 1,
            mac: MAC,
            up: true,
            loopback: false,
            noarp: false,
            networks: nets.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    fn host() -> Vec<InterfaceInfo> {
        vec![
            InterfaceInfo {
                loopback: true,
                mac: Some(MacAddr::default()),
                noarp: false,
                ..eth("lo", &["127.0.0.0/8", "10.99.0.0/24"])
            },
            eth("eth0", &["10.99.0.0/24", "fd00:99::/64"]),
            eth("eth1", &["10.99.1.0/24"]),
            InterfaceInfo {
                up: false,
                ..eth("eth2", &["10.99.0.0/24"])
            },
            InterfaceInfo {
                up: false,
                ..eth("eth3", &["10.99.3.0/24"])
            },
            InterfaceInfo {
                noarp: true,
                ..eth("dummy0", &["10.99.4.0/24", "fd00:99:4::/64"])
            },
            InterfaceInfo {
                mac: None,
                ..eth("wg0", &["10.99.5.0/24"])
            },
        ]
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_interface_carrying_the_service_address_itself_is_not_its_segment() {
        // kube-proxy in IPVS mode puts every Service address on kube-ipvs0 as a host address;
        // here it is not even NOARP, as a veth standing in for it is not.
        let mut h = host();
        h.push(eth(
            "kube-ipvs0",
            &["10.99.0.100/32", "fd00:99::100/128", "10.99.9.9/32"],
        ));
        let by_subnet = |a: &str| diagnose(ip(a), &Interfaces::BySubnet, &h);
        assert_eq!(by_subnet("10.99.0.100"), Ok(vec!["eth0".to_string()]));
        assert_eq!(by_subnet("fd00:99::100"), Ok(vec!["eth0".to_string()]));
        assert!(
            matches!(
                by_subnet("10.99.9.9"),
                Err(InterfaceProblem::NoSubnet { .. })
            ),
            "{:?}",
            by_subnet("10.99.9.9")
        );
    }

    fn named(names: &[&str]) -> Interfaces {
        Interfaces::Named(names.iter().map(|n| n.to_string()).collect())
    }

    type Diagnosis = Result<Vec<String>, InterfaceProblem>;

    fn unusable(ip: IpAddr, each: &[(&str, Unusable)]) -> Diagnosis {
        Err(InterfaceProblem::NoUsableInterface {
            ip,
            interfaces: each.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
        })
    }

    #[test]
    fn each_flag_makes_an_interface_unusable_for_its_own_reason() {
        let cases = [
            (eth("e", &[]), None),
            (
                InterfaceInfo {
                    up: false,
                    ..eth("e", &[])
                },
                Some(Unusable::Down),
            ),
            (
                InterfaceInfo {
                    noarp: true,
                    ..eth("e", &[])
                },
                Some(Unusable::NoArp),
            ),
            (
                InterfaceInfo {
                    mac: None,
                    ..eth("e", &[])
                },
                Some(Unusable::NoMac),
            ),
            (
                InterfaceInfo {
                    mac: Some(MacAddr::default()),
                    ..eth("e", &[])
                },
                Some(Unusable::NoMac),
            ),
            (
                InterfaceInfo {
                    loopback: true,
                    ..eth("e", &[])
                },
                Some(Unusable::Loopback),
            ),
            // A down dummy: turning it up would not help, so NOARP is reported.
            (
                InterfaceInfo {
                    up: false,
                    noarp: true,
                    ..eth("e", &[])
                },
                Some(Unusable::NoArp),
            ),
        ];
        for (info, want) in cases {
            assert_eq!(info.unusable(), want, "{info:?}");
            assert_eq!(info.usable(), want.is_none(), "{info:?}");
        }
    }

    #[test]
    fn diagnose_answers_or_says_why_for_every_kind_of_candidate() {
        let h = host();
        let cases: Vec<(&str, Interfaces, Diagnosis)> = vec![
            // By subnet: lo and the down eth2 hold the subnet too, eth0 answers alone.
            ("10.99.0.100", Interfaces::BySubnet, Ok(vec!["eth0".into()])),
            (
                "fd00:99::100",
                Interfaces::BySubnet,
                Ok(vec!["eth0".into()]),
            ),
            (
                "10.99.3.7",
                Interfaces::BySubnet,
                unusable(ip("10.99.3.7"), &[("eth3", Unusable::Down)]),
            ),
            (
                "10.99.4.7",
                Interfaces::BySubnet,
                unusable(ip("10.99.4.7"), &[("dummy0", Unusable::NoArp)]),
            ),
            // NOARP rules out NDP as well (see the module docs).
            (
                "fd00:99:4::7",
                Interfaces::BySubnet,
                unusable(ip("fd00:99:4::7"), &[("dummy0", Unusable::NoArp)]),
            ),
            (
                "10.99.5.7",
                Interfaces::BySubnet,
                unusable(ip("10.99.5.7"), &[("wg0", Unusable::NoMac)]),
            ),
            // Named: the subnet does not matter, the state does.
            ("10.99.0.100", named(&["eth1"]), Ok(vec!["eth1".into()])),
            (
                "10.99.0.100",
                named(&["eth2", "eth1", "missing", "lo"]),
                Ok(vec!["eth1".into()]),
            ),
            (
                "10.99.0.100",
                named(&["missing"]),
                unusable(ip("10.99.0.100"), &[("missing", Unusable::Missing)]),
            ),
            (
                "10.99.0.100",
                named(&["lo", "eth2", "dummy0", "gone"]),
                unusable(
                    ip("10.99.0.100"),
                    &[
                        ("dummy0", Unusable::NoArp),
                        ("eth2", Unusable::Down),
                        ("gone", Unusable::Missing),
                        ("lo", Unusable::Loopback),
                    ],
                ),
            ),
            // An empty list means the default choice.
            ("10.99.1.9", named(&[]), Ok(vec!["eth1".into()])),
        ];
        for (addr, wanted, want) in cases {
            assert_eq!(diagnose(ip(addr), &wanted, &h), want, "{addr} {wanted:?}");
            assert_eq!(
                choose(ip(addr), &wanted, &h),
                want.unwrap_or_default(),
                "choose agrees with diagnose for {addr} {wanted:?}"
            );
        }
    }

    #[test]
    fn an_address_outside_every_subnet_lists_the_subnets_of_its_family_that_were_found() {
        let got = diagnose(ip("10.99.9.9"), &Interfaces::BySubnet, &host());
        let want = InterfaceProblem::NoSubnet {
            ip: ip("10.99.9.9"),
            found: [
                ("dummy0", vec!["10.99.4.0/24"]),
                ("eth0", vec!["10.99.0.0/24"]),
                ("eth1", vec!["10.99.1.0/24"]),
                ("eth2", vec!["10.99.0.0/24"]),
                ("eth3", vec!["10.99.3.0/24"]),
                ("wg0", vec!["10.99.5.0/24"]),
            ]
            .into_iter()
            .map(|(n, nets)| {
                (
                    n.to_string(),
                    nets.iter().map(|s| s.parse().unwrap()).collect(),
                )
            })
            .collect(),
        };
        assert_eq!(got, Err(want));
        let v6 = diagnose(
            ip("fd00:77::1"),
            &Interfaces::BySubnet,
            &[eth("eth1", &["10.0.0.0/8"])],
        );
        let message = v6.unwrap_err().to_string();
        assert!(
            message.contains("`eth1` with no subnet of that family"),
            "{message}"
        );
    }

    #[test]
    fn problems_carry_a_label_per_reason_and_a_message_that_says_what_to_do() {
        let cases = [
            (
                "10.99.9.9",
                Interfaces::BySubnet,
                "no_subnet",
                "add an address in that subnet",
            ),
            (
                "10.99.3.7",
                Interfaces::BySubnet,
                "down",
                "ip link set eth3 up",
            ),
            (
                "10.99.4.7",
                Interfaces::BySubnet,
                "noarp",
                "ip link set dummy0 arp on",
            ),
            (
                "10.99.5.7",
                Interfaces::BySubnet,
                "no_mac",
                "name an Ethernet interface",
            ),
            (
                "10.99.0.1",
                named(&["nope"]),
                "missing",
                "does not exist on this node",
            ),
            (
                "10.99.0.1",
                named(&["lo"]),
                "loopback",
                "never leave the node",
            ),
            (
                "10.99.0.1",
                named(&["lo", "eth3"]),
                "unusable",
                "ip link set eth3 up",
            ),
        ];
        for (addr, wanted, label, advice) in cases {
            let problem = diagnose(ip(addr), &wanted, &host()).unwrap_err();
            assert_eq!(problem.label(), label, "{problem}");
            assert_eq!(problem.ip(), ip(addr));
            let message = problem.to_string();
            assert!(message.contains(advice), "{label}: {message}");
            assert!(message.contains(addr), "{label}: {message}");
        }
    }

    #[test]
    fn owned_addresses_without_an_interface_are_reported_apart_with_the_reason() {
        let owned: BTreeMap<IpAddr, Interfaces> = [
            (ip("10.99.0.100"), Interfaces::BySubnet),
            (ip("10.99.4.100"), Interfaces::BySubnet),
            (ip("10.99.9.9"), Interfaces::BySubnet),
        ]
        .into();
        let (ready, stranded) = resolve_owned(&owned, &host());
        assert_eq!(
            ready,
            [(ip("10.99.0.100"), vec!["eth0".to_string()])].into()
        );
        let reasons: Vec<(IpAddr, &str)> = stranded.iter().map(|p| (p.ip(), p.label())).collect();
        assert_eq!(
            reasons,
            vec![(ip("10.99.4.100"), "noarp"), (ip("10.99.9.9"), "no_subnet")]
        );
    }
}
