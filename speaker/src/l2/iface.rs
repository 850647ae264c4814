//! Which interfaces answer for an address. The choice is pure ([`choose`]); only
//! [`system_interfaces`] reads the host (through pnet).

use super::frame::MacAddr;
use crate::planner::Interfaces;
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// What the choice needs to know about one host interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Name (`eth0`).
    pub name: String,
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address, when it has one.
    pub mac: Option<MacAddr>,
    /// Administratively up.
    pub up: bool,
    /// A loopback interface.
    pub loopback: bool,
    /// Configured addresses with their prefix.
    pub networks: Vec<IpNet>,
}

impl InterfaceInfo {
    /// Whether the interface can carry ARP/NDP answers at all: up, not loopback, with a MAC.
    pub fn usable(&self) -> bool {
        self.up && !self.loopback && self.mac.is_some_and(|m| m != MacAddr::default())
    }
}

/// The interfaces to answer on for `ip`:
/// - [`Interfaces::BySubnet`]: every usable interface with a configured subnet holding `ip`;
/// - [`Interfaces::Named`]: those of the named interfaces that exist and are usable, whatever
///   their addresses (an advertisement may name an interface with no address in the subnet).
///
/// The result is sorted by name; empty means the address cannot be announced on this node.
pub fn choose(ip: IpAddr, wanted: &Interfaces, host: &[InterfaceInfo]) -> Vec<String> {
    let mut out: Vec<String> = host
        .iter()
        .filter(|i| i.usable())
        .filter(|i| match wanted {
            Interfaces::BySubnet => i.networks.iter().any(|n| n.contains(&ip)),
            Interfaces::Named(names) => names.contains(&i.name),
        })
        .map(|i| i.name.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Turns the planner's owned addresses into what [`crate::l2::Responder::set_owned`] takes:
/// interface names per address. Addresses with no usable interface on this node are returned
/// apart (they are owned but cannot be announced: report them, do not hide them).
pub fn resolve_owned(
    owned: &BTreeMap<IpAddr, Interfaces>,
    host: &[InterfaceInfo],
) -> (BTreeMap<IpAddr, Vec<String>>, Vec<IpAddr>) {
    let mut ready = BTreeMap::new();
    let mut stranded = Vec::new();
    for (ip, wanted) in owned {
        let names = choose(*ip, wanted, host);
        if names.is_empty() {
            stranded.push(*ip);
        } else {
            ready.insert(*ip, names);
        }
    }
    (ready, stranded)
}

/// The host's interfaces, as pnet reads them (netlink / getifaddrs).
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
        networks: i
            .ips
            .iter()
            .filter_map(|n| IpNet::new(n.ip(), n.prefix()).ok())
            .map(|n| n.trunc())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn iface(name: &str, up: bool, loopback: bool, nets: &[&str]) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            index: 1,
            mac: (!loopback).then_some(MacAddr([2, 0, 0, 0, 0, 1])),
            up,
            loopback,
            networks: nets.iter().map(|n| n.parse().unwrap()).collect(),
        }
    }

    fn host() -> Vec<InterfaceInfo> {
        vec![
            iface("lo", true, true, &["127.0.0.0/8", "10.99.0.0/24"]),
            iface("eth0", true, false, &["10.99.0.0/24", "fd00:99::/64"]),
            iface("eth1", true, false, &["10.99.1.0/24"]),
            iface("eth2", false, false, &["10.99.0.0/24"]),
        ]
    }

    #[test]
    fn by_default_only_up_non_loopback_interfaces_whose_subnet_holds_the_address_answer() {
        let ip: IpAddr = "10.99.0.100".parse().unwrap();
        assert_eq!(choose(ip, &Interfaces::BySubnet, &host()), vec!["eth0"]);
        let v6: IpAddr = "fd00:99::100".parse().unwrap();
        assert_eq!(choose(v6, &Interfaces::BySubnet, &host()), vec!["eth0"]);
    }

    #[test]
    fn an_address_outside_every_subnet_has_no_interface_by_default() {
        let ip: IpAddr = "10.99.9.9".parse().unwrap();
        assert!(choose(ip, &Interfaces::BySubnet, &host()).is_empty());
    }

    #[test]
    fn owned_addresses_without_an_interface_are_reported_apart() {
        let owned: BTreeMap<IpAddr, Interfaces> = [
            ("10.99.0.100".parse().unwrap(), Interfaces::BySubnet),
            ("10.99.9.9".parse().unwrap(), Interfaces::BySubnet),
        ]
        .into();
        let (ready, stranded) = resolve_owned(&owned, &host());
        assert_eq!(ready.len(), 1);
        assert_eq!(
            ready[&"10.99.0.100".parse::<IpAddr>().unwrap()],
            vec!["eth0"]
        );
        assert_eq!(stranded, vec!["10.99.9.9".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn named_interfaces_override_the_subnet_rule_but_not_the_state() {
        let ip: IpAddr = "10.99.0.100".parse().unwrap();
        let names: BTreeSet<String> = ["eth1", "eth2", "lo", "missing"].map(String::from).into();
        assert_eq!(choose(ip, &Interfaces::Named(names), &host()), vec!["eth1"]);
    }
}
