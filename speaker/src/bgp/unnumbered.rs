//! BGP unnumbered: finding the one router on an interface from its router advertisements, and
//! the router advertisements we send so that it finds us. Pure: no I/O, no clock.
//!
//! A peer given as an interface (`BGPPeer.spec.interface`) has no configured address. As FRR
//! does for `neighbor IFNAME interface`, the peer's IPv6 link-local address is learnt from the
//! Router Advertisements (RFC 4861 §4.2) it sends on the link, and we send our own so that it
//! learns ours: FRR accepts a connection on such a neighbour only from the address it learnt
//! that way.
//!
//! # Guarantees
//! - Only advertisements from a link-local source count. A router never forwards a packet with
//!   a link-local source (RFC 4291 §2.5.6), so such a sender is on the link; the hop limit of
//!   255 (RFC 4861 §6.1.2) is not checked, as reading it needs ancillary data.
//! - A sender is remembered for its advertised router lifetime, and at least
//!   [`MIN_NEIGHBOUR_HOLD`] (a lifetime of 0 only says "not a default router").
//! - One sender is the neighbour. None is [`NeighbourError::NoneYet`] (the shell keeps
//!   listening and retries); several are [`NeighbourError::Several`]: unnumbered BGP needs a
//!   point-to-point link, and guessing would peer with the wrong router.
//!
//! Our advertisements have a router lifetime of 0 (RFC 4861 §6.2.3: not a default router), so
//! the hosts and routers on the link route nothing through the speaker because of them, and no
//! prefix options; they carry our link-layer address.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// ICMPv6 type of a Router Advertisement (RFC 4861 §4.2).
pub const ROUTER_ADVERTISEMENT: u8 = 134;
/// How often we send our advertisement (RFC 4861 allows 4 s to 1800 s between unsolicited
/// ones; FRR uses 10 s on its unnumbered interfaces).
pub const ADVERTISE_INTERVAL: Duration = Duration::from_secs(10);
/// Shortest time a sender is remembered for.
pub const MIN_NEIGHBOUR_HOLD: Duration = Duration::from_secs(30);
/// Fixed part of a Router Advertisement: type, code, checksum, hop limit, flags, router
/// lifetime, reachable time, retransmission timer.
const RA_FIXED: usize = 16;

/// What a Router Advertisement told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterAdvertisement {
    /// How long the sender wants to be a default router (0: it is not one).
    pub router_lifetime: Duration,
}

/// Reads an ICMPv6 message (as a raw ICMPv6 socket delivers it, without the IPv6 header);
/// `None` when it is not a well-formed Router Advertisement. The checksum was verified by the
/// kernel.
pub fn parse_router_advertisement(icmp: &[u8]) -> Option<RouterAdvertisement> {
    if icmp.len() < RA_FIXED || icmp[0] != ROUTER_ADVERTISEMENT || icmp[1] != 0 {
        return None;
    }
    // RFC 4861 §6.1.2: options must have a non-zero length and fit the message.
    let mut options = &icmp[RA_FIXED..];
    while !options.is_empty() {
        let len = usize::from(*options.get(1)?) * 8;
        if len == 0 || len > options.len() {
            return None;
        }
        options = &options[len..];
    }
    let lifetime = u16::from_be_bytes([icmp[6], icmp[7]]);
    Some(RouterAdvertisement {
        router_lifetime: Duration::from_secs(u64::from(lifetime)),
    })
}

/// Our Router Advertisement: router lifetime 0, no prefixes, and the Source Link-Layer Address
/// option (RFC 4861 §4.6.1) when the interface has a MAC address. The checksum is left 0: the
/// kernel computes it for raw ICMPv6 sockets (RFC 3542 §3.1).
pub fn encode_router_advertisement(mac: Option<[u8; 6]>) -> Vec<u8> {
    let mut b = vec![
        ROUTER_ADVERTISEMENT,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    if let Some(mac) = mac {
        b.extend_from_slice(&[1, 1]);
        b.extend_from_slice(&mac);
    }
    b
}

/// Why an unnumbered peer has no address to connect to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeighbourError {
    /// The interface does not exist on this node (yet).
    #[error("interface `{interface}` does not exist on this node; the session starts once it does")]
    NoInterface {
        /// The interface.
        interface: String,
    },
    /// Nothing was heard on the interface yet.
    #[error(
        "no router advertisement heard on `{interface}` yet: the router must send them \
         (FRR: `interface {interface}` / `no ipv6 nd suppress-ra`); still listening"
    )]
    NoneYet {
        /// The interface.
        interface: String,
    },
    /// More than one router advertises on the interface.
    #[error(
        "{} routers advertise on `{interface}` ({}); BGP unnumbered needs exactly one router on \
         the link: give this peer a peerAddress instead", .routers.len(), Addrs(.routers)
    )]
    Several {
        /// The interface.
        interface: String,
        /// Their link-local addresses.
        routers: Vec<Ipv6Addr>,
    },
    /// The interface could not be listened on.
    #[error("cannot listen for router advertisements on `{interface}`: {reason}")]
    Socket {
        /// The interface.
        interface: String,
        /// The system's error.
        reason: String,
    },
}

impl NeighbourError {
    /// The `reason` label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            NeighbourError::NoInterface { .. } => "no_interface",
            NeighbourError::NoneYet { .. } => "no_router_yet",
            NeighbourError::Several { .. } => "several_routers",
            NeighbourError::Socket { .. } => "socket",
        }
    }
}

struct Addrs<'a>(&'a [Ipv6Addr]);

impl fmt::Display for Addrs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

/// The routers heard on one interface, and which of them is the neighbour.
#[derive(Debug, Clone)]
pub struct Neighbours {
    interface: String,
    /// Each sender, until when it is remembered.
    heard: BTreeMap<Ipv6Addr, Instant>,
}

impl Neighbours {
    /// Nothing heard yet on `interface`.
    pub fn new(interface: &str) -> Self {
        Neighbours {
            interface: interface.to_owned(),
            heard: BTreeMap::new(),
        }
    }

    /// Records an advertisement from `source`; true when the sender was not known (the shell
    /// then answers with its own advertisement at once, so that the router learns us without
    /// waiting for our next one). Advertisements from addresses that are not link-local are
    /// ignored (false).
    pub fn heard(&mut self, now: Instant, source: Ipv6Addr, ra: RouterAdvertisement) -> bool {
        if !source.is_unicast_link_local() {
            return false;
        }
        let until = now + ra.router_lifetime.max(MIN_NEIGHBOUR_HOLD);
        self.heard.insert(source, until).is_none_or(|t| t <= now)
    }

    /// The neighbour at `now`: the one router still remembered.
    pub fn neighbour(&mut self, now: Instant) -> Result<Ipv6Addr, NeighbourError> {
        self.heard.retain(|_, until| *until > now);
        let mut routers = self.heard.keys().copied();
        match (routers.next(), routers.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err(NeighbourError::NoneYet {
                interface: self.interface.clone(),
            }),
            (Some(_), Some(_)) => Err(NeighbourError::Several {
                interface: self.interface.clone(),
                routers: self.heard.keys().copied().collect(),
            }),
        }
    }

    /// When the next remembered sender expires (the shell looks again then).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.heard.values().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ll(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn ra(lifetime: u64) -> RouterAdvertisement {
        RouterAdvertisement {
            router_lifetime: Duration::from_secs(lifetime),
        }
    }

    #[test]
    fn our_router_advertisement_is_not_a_default_router_and_carries_our_mac() {
        let b = encode_router_advertisement(Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            b,
            [
                134, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 1
            ]
        );
        assert_eq!(parse_router_advertisement(&b), Some(ra(0)));
    }

    #[test]
    fn a_router_advertisement_with_a_prefix_option_and_a_lifetime_parses() {
        // Hop limit 64, lifetime 9 s, then SLLA and a 32-byte prefix information option.
        let mut b = vec![134, 0, 0x12, 0x34, 64, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 2]);
        b.extend_from_slice(&[3, 4]);
        b.extend_from_slice(&[0; 30]);
        assert_eq!(parse_router_advertisement(&b), Some(ra(9)));
    }

    #[test]
    fn other_icmpv6_messages_and_broken_options_are_not_router_advertisements() {
        let mut na = encode_router_advertisement(None);
        na[0] = 136;
        assert_eq!(parse_router_advertisement(&na), None);
        assert_eq!(parse_router_advertisement(&[134, 0, 0, 0]), None);
        let mut zero_len = encode_router_advertisement(None);
        zero_len.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse_router_advertisement(&zero_len), None);
        let mut past_end = encode_router_advertisement(None);
        past_end.extend_from_slice(&[3, 4, 0, 0]);
        assert_eq!(parse_router_advertisement(&past_end), None);
    }

    #[test]
    fn the_one_router_heard_is_the_neighbour() {
        let now = Instant::now();
        let mut n = Neighbours::new("eth0");
        assert_eq!(
            n.neighbour(now),
            Err(NeighbourError::NoneYet {
                interface: "eth0".into()
            })
        );
        assert!(n.heard(now, ll("fe80::2"), ra(1800)));
        assert!(!n.heard(now, ll("fe80::2"), ra(1800)));
        assert_eq!(n.neighbour(now), Ok(ll("fe80::2")));
    }

    #[test]
    fn two_routers_on_the_link_are_an_error_that_names_both() {
        let now = Instant::now();
        let mut n = Neighbours::new("eth0");
        n.heard(now, ll("fe80::2"), ra(30));
        n.heard(now, ll("fe80::3"), ra(30));
        let e = n.neighbour(now).unwrap_err();
        assert_eq!(
            e,
            NeighbourError::Several {
                interface: "eth0".into(),
                routers: vec![ll("fe80::2"), ll("fe80::3")]
            }
        );
        assert!(e.to_string().contains("fe80::2, fe80::3"), "{e}");
    }

    #[test]
    fn a_router_silent_past_its_lifetime_is_forgotten() {
        let now = Instant::now();
        let mut n = Neighbours::new("eth0");
        n.heard(now, ll("fe80::2"), ra(60));
        n.heard(now, ll("fe80::3"), ra(0));
        // fe80::3 said lifetime 0: it is kept MIN_NEIGHBOUR_HOLD, then only fe80::2 is left.
        assert!(n.neighbour(now + Duration::from_secs(29)).is_err());
        assert_eq!(n.next_expiry(), Some(now + MIN_NEIGHBOUR_HOLD));
        assert_eq!(n.neighbour(now + MIN_NEIGHBOUR_HOLD), Ok(ll("fe80::2")));
        assert!(n.neighbour(now + Duration::from_secs(60)).is_err());
        // Heard again after it was forgotten: new again.
        assert!(n.heard(now + Duration::from_secs(61), ll("fe80::2"), ra(60)));
    }

    #[test]
    fn advertisements_from_global_addresses_are_ignored() {
        let now = Instant::now();
        let mut n = Neighbours::new("eth0");
        assert!(!n.heard(now, ll("fd00::2"), ra(1800)));
        assert!(n.neighbour(now).is_err());
    }
}
