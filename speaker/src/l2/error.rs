//! Errors of the layer-2 shell, and the typed reasons an address or interface cannot be
//! answered for (they become Events, conditions, log fields and metric labels).

use ipnet::IpNet;
use std::net::IpAddr;

/// What can go wrong while setting up answers on an interface.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    /// The interface named (by an `L2Advertisement` or the default choice) is not on this node.
    #[error("interface `{name}` does not exist on this node; check L2Advertisement.interfaces")]
    InterfaceNotFound {
        /// Interface name.
        name: String,
    },
    /// The interface cannot answer for another reason (down, NOARP, loopback).
    #[error("{}", reason.explain(name))]
    Unusable {
        /// Interface name.
        name: String,
        /// Why.
        reason: Unusable,
    },
    /// The interface has no hardware address to answer with.
    #[error("interface `{name}` has no MAC address, so ARP/NDP cannot be answered on it")]
    NoMac {
        /// Interface name.
        name: String,
    },
    /// The packet socket could not be opened.
    #[error("cannot open a packet socket on `{name}` (the speaker needs CAP_NET_RAW): {source}")]
    Channel {
        /// Interface name.
        name: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// pnet returned a channel type other than Ethernet.
    #[error("the packet channel on `{name}` is not an Ethernet channel")]
    NotEthernet {
        /// Interface name.
        name: String,
    },
}

/// Why one interface cannot answer ARP or NDP. Reported per interface inside an
/// [`InterfaceProblem`] or an [`InterfaceFault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unusable {
    /// No interface of that name on this node.
    Missing,
    /// A loopback interface: nothing sent there leaves the node.
    Loopback,
    /// No hardware address (a layer-3 tunnel, WireGuard, a point-to-point link): an answer
    /// has no MAC to give.
    NoMac,
    /// `IFF_NOARP` is set (every dummy interface, or `ip link set IF arp off`). Covers NDP
    /// too: see [`crate::l2::iface`] for what Linux does on such an interface.
    NoArp,
    /// Administratively down (`IFF_UP` clear).
    Down,
}

impl Unusable {
    /// A short metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Unusable::Missing => "missing",
            Unusable::Loopback => "loopback",
            Unusable::NoMac => "no_mac",
            Unusable::NoArp => "noarp",
            Unusable::Down => "down",
        }
    }

    /// What is wrong with `name` and what the operator can do about it.
    pub fn explain(self, name: &str) -> String {
        match self {
            Unusable::Missing => format!(
                "interface `{name}` does not exist on this node; name an existing interface in \
                 L2Advertisement.interfaces or create it"
            ),
            Unusable::Loopback => format!(
                "interface `{name}` is a loopback interface, whose answers never leave the node; \
                 name the interface facing the clients instead"
            ),
            Unusable::NoMac => format!(
                "interface `{name}` has no MAC address (a tunnel or point-to-point link), so \
                 ARP/NDP cannot be answered on it; name an Ethernet interface instead"
            ),
            Unusable::NoArp => format!(
                "interface `{name}` has ARP turned off (IFF_NOARP: a dummy interface, or `ip link \
                 set {name} arp off`), so neither ARP nor NDP can be answered on it; name the \
                 Ethernet interface facing the clients, or run `ip link set {name} arp on`"
            ),
            Unusable::Down => {
                format!("interface `{name}` is down; bring it up with `ip link set {name} up`")
            }
        }
    }
}

/// Why an owned address cannot be announced on this node: no interface here can answer for
/// it. The address should move to a node that can (see [`crate::l2::iface::diagnose`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceProblem {
    /// The default choice ([`super::iface::Interfaces::BySubnet`]) found no interface with a
    /// configured subnet holding the address. `found` lists every non-loopback interface with
    /// its subnets of the address's family (possibly none), sorted by name.
    #[error(
        "no interface on this node has a subnet holding {ip} (found: {}); add an address in \
         that subnet to the interface facing the clients, or name the interface in an \
         L2Advertisement",
        describe_found(found)
    )]
    NoSubnet {
        /// The owned address.
        ip: IpAddr,
        /// Interfaces seen, with their subnets of `ip`'s family.
        found: Vec<(String, Vec<IpNet>)>,
    },
    /// Every candidate interface (the named ones, or those whose subnet holds the address)
    /// exists in some form but none can answer; each is listed, sorted by name, with why.
    #[error(
        "{ip} cannot be announced on this node: {}",
        describe_unusable(interfaces)
    )]
    NoUsableInterface {
        /// The owned address.
        ip: IpAddr,
        /// Each candidate and why it cannot answer (never empty).
        interfaces: Vec<(String, Unusable)>,
    },
}

impl InterfaceProblem {
    /// The address concerned.
    pub fn ip(&self) -> IpAddr {
        match self {
            InterfaceProblem::NoSubnet { ip, .. }
            | InterfaceProblem::NoUsableInterface { ip, .. } => *ip,
        }
    }

    /// A metrics label: `no_subnet`; the [`Unusable::label`] shared by every candidate
    /// (`missing`, `loopback`, `no_mac`, `noarp`, `down`); or `unusable` when candidates fail
    /// for different reasons.
    pub fn label(&self) -> &'static str {
        match self {
            InterfaceProblem::NoSubnet { .. } => "no_subnet",
            InterfaceProblem::NoUsableInterface { interfaces, .. } => {
                let mut reasons = interfaces.iter().map(|(_, r)| *r);
                match reasons.next() {
                    Some(first) if reasons.all(|r| r == first) => first.label(),
                    _ => "unusable",
                }
            }
        }
    }
}

fn describe_found(found: &[(String, Vec<IpNet>)]) -> String {
    if found.is_empty() {
        return "no interface but loopback".into();
    }
    found
        .iter()
        .map(|(name, nets)| {
            if nets.is_empty() {
                format!("`{name}` with no subnet of that family")
            } else {
                let nets: Vec<String> = nets.iter().map(ToString::to_string).collect();
                format!("`{name}` {}", nets.join(" "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe_unusable(interfaces: &[(String, Unusable)]) -> String {
    interfaces
        .iter()
        .map(|(name, reason)| reason.explain(name))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why an interface the responder was asked to answer on is not answering now
/// ([`crate::l2::Responder::interface_errors`]). Each clears by itself once the cause is gone
/// and [`crate::l2::Responder::refresh`] has run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceFault {
    /// The host's view shows the interface cannot answer (missing, down, NOARP, ...).
    #[error("{}", reason.explain(name))]
    Unusable {
        /// Interface name.
        name: String,
        /// Why it cannot answer.
        reason: Unusable,
    },
    /// The packet socket could not be opened ([`L2Error`]'s message); retried on every refresh.
    #[error("{error}; retried on the next refresh")]
    Open {
        /// Interface name.
        name: String,
        /// What opening it said.
        error: String,
    },
    /// The packet socket stopped working (the interface went away under it); it is reopened on
    /// the next refresh if the interface is back.
    #[error("reading from interface `{name}` failed ({error}); reopened on the next refresh")]
    ReadFailed {
        /// Interface name.
        name: String,
        /// The system error.
        error: String,
    },
}

impl InterfaceFault {
    /// A short metrics label: the [`Unusable::label`], `open_failed` or `read_failed`.
    pub fn label(&self) -> &'static str {
        match self {
            InterfaceFault::Unusable { reason, .. } => reason.label(),
            InterfaceFault::Open { .. } => "open_failed",
            InterfaceFault::ReadFailed { .. } => "read_failed",
        }
    }
}
