//! Plain data describing peers and what to announce to them. Pure: no I/O, no clock.
//!
//! The Kubernetes-facing code converts `BGPPeer` / `BGPAdvertisement` objects into these types; the
//! BGP module never sees a CRD.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

use ferrolb_api::validate::CommunityValue;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use super::role::Role;
use super::wire::Family;

/// Names a peer session on this node (the `BGPPeer` object's name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PeerId(pub String);

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One BGP neighbour, as this node should talk to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerConfig {
    /// The session's name (stable across configuration changes).
    pub id: PeerId,
    /// Our AS number (the node's, `myASN`).
    pub my_asn: u32,
    /// The AS number this session presents instead of `my_asn` (`localASN`; FRR's `local-as
    /// ASN no-prepend replace-as`): see [`PeerConfig::local_as`].
    #[serde(default)]
    pub local_asn: Option<u32>,
    /// The AS number the peer must announce in its OPEN (unless `peer_asn_external`).
    pub peer_asn: u32,
    /// Accept any AS number other than ours (`dynamicASN: external`): the session is eBGP with
    /// whatever AS the peer's OPEN announces.
    #[serde(default)]
    pub peer_asn_external: bool,
    /// Where we connect to (unused when `interface` is set: `::` by convention).
    pub peer_address: IpAddr,
    /// BGP unnumbered: the peer is the one router on this interface, found by its router
    /// advertisements (see [`crate::bgp::unnumbered`]); we connect to its IPv6 link-local
    /// address from ours, offer RFC 8950 extended next hops and announce link-local next hops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Offer and announce both IPv4 and IPv6 unicast (`dualStackAddressFamily`, the default);
    /// `false`: only the family of `peer_address` (see [`PeerConfig::families`]).
    #[serde(default = "both_families")]
    pub dual_stack: bool,
    /// TCP port of the peer (179 by default).
    pub peer_port: u16,
    /// Local address to bind before connecting; the kernel chooses when absent.
    pub source_address: Option<IpAddr>,
    /// Our BGP identifier. When absent the IPv4 source address of the session is used.
    pub router_id: Option<Ipv4Addr>,
    /// The device the session's sockets are bound to (`BGPPeer.spec.vrf`, a VRF master device
    /// or any interface): TCP and BFD use that device's routes and addresses, so the source
    /// address and the next hop we announce come from it. The default VRF when absent.
    #[serde(default)]
    pub vrf: Option<crate::netdev::DeviceName>,
    /// Hold time we propose (RFC 4271 §4.2); 0 disables keepalives and the hold timer.
    pub hold_time: Duration,
    /// Keepalive interval; a third of the negotiated hold time when absent.
    pub keepalive_time: Option<Duration>,
    /// First delay between connection attempts; doubled after each failure up to
    /// [`MAX_CONNECT_RETRY`].
    pub connect_retry: Duration,
    /// eBGP peer more than one hop away: TTL 255 instead of 1.
    pub ebgp_multihop: bool,
    /// TCP-MD5 (RFC 2385) key, when the session is protected.
    pub password: Option<String>,
    /// Advertise the graceful restart capability (RFC 4724) so routers keep our routes while the
    /// speaker restarts.
    pub graceful_restart: bool,
    /// Next hop for IPv4 routes when the session runs over IPv6 (IPv4 sessions use their local
    /// address).
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop for IPv6 routes when the session runs over IPv4 (IPv6 sessions use their local
    /// address).
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Run BFD (RFC 5880) with the peer: when BFD goes down after having been up, the BGP
    /// session is taken down at once instead of after the hold time (RFC 5882). Multihop
    /// (RFC 5883) when `ebgp_multihop` is set.
    #[serde(default)]
    pub bfd: Option<BfdSettings>,
    /// Our BGP Role on this eBGP session (RFC 9234, `BGPPeer.spec.role`): sent in the OPEN,
    /// checked against the peer's, and Only-to-Customer marks what we send to a customer, a
    /// lateral peer or a route-server client. Never sent on iBGP, where RFC 9234 has no roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Refuse a peer that announces no role (`BGPPeer.spec.strictRole`, RFC 9234 §4.2 strict
    /// mode) with a Role Mismatch NOTIFICATION.
    #[serde(default)]
    pub strict_role: bool,
    /// Offer ADD-PATH send (RFC 7911) for each of [`PeerConfig::families`]: where the peer
    /// can receive, every path of a prefix (one per distinct [`Advertisement::next_hop`]) goes
    /// out with its own path identifier, so that the router can spread traffic over them.
    /// Without it, or with a peer that cannot receive, the peer gets one path per prefix.
    #[serde(default)]
    pub add_path: bool,
}

/// The BFD values of a peer (MetalLB's `BFDProfile` fields that FerroLB runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdSettings {
    /// The fastest rate we accept the peer's packets at.
    pub receive_interval: Duration,
    /// How often we would like to send.
    pub transmit_interval: Duration,
    /// Missed intervals after which the peer is declared down.
    pub detect_multiplier: u8,
    /// Wait for the peer to speak first.
    pub passive: bool,
    /// Lowest TTL accepted from a multihop peer (single hop always requires 255).
    pub minimum_ttl: u8,
}

impl Default for BfdSettings {
    /// MetalLB's `BFDProfile` defaults: 300 ms, 300 ms, 3, active, minimum TTL 254.
    fn default() -> Self {
        let d = crate::bfd::SessionConfig::default();
        BfdSettings {
            receive_interval: d.required_min_rx,
            transmit_interval: d.desired_min_tx,
            detect_multiplier: d.detect_mult,
            passive: d.passive,
            minimum_ttl: d.minimum_ttl,
        }
    }
}

impl BfdSettings {
    /// The BFD session configuration these settings give.
    pub fn session_config(&self) -> crate::bfd::SessionConfig {
        crate::bfd::SessionConfig {
            desired_min_tx: self.transmit_interval,
            required_min_rx: self.receive_interval,
            detect_mult: self.detect_multiplier,
            passive: self.passive,
            minimum_ttl: self.minimum_ttl,
        }
    }
}

/// Upper bound of the exponential connect back-off.
pub const MAX_CONNECT_RETRY: Duration = Duration::from_secs(120);

/// How long routers keep our routes after the session drops when graceful restart is on.
pub const GRACEFUL_RESTART_TIME: Duration = Duration::from_secs(120);

fn both_families() -> bool {
    true
}

impl PeerConfig {
    /// A peer with the defaults of the `BGPPeer` API: port 179, hold time 90 s, no password,
    /// both address families.
    pub fn new(id: &str, my_asn: u32, peer_asn: u32, peer_address: IpAddr) -> Self {
        PeerConfig {
            id: PeerId(id.to_owned()),
            my_asn,
            local_asn: None,
            peer_asn,
            peer_asn_external: false,
            peer_address,
            interface: None,
            dual_stack: true,
            peer_port: 179,
            source_address: None,
            router_id: None,
            vrf: None,
            hold_time: Duration::from_secs(90),
            keepalive_time: None,
            connect_retry: Duration::from_secs(2),
            ebgp_multihop: false,
            password: None,
            graceful_restart: false,
            bfd: None,
            next_hop_v4: None,
            next_hop_v6: None,
            role: None,
            strict_role: false,
            add_path: false,
        }
    }

    /// An unnumbered peer: the router on `interface`, whatever its address.
    pub fn unnumbered(id: &str, my_asn: u32, peer_asn: u32, interface: &str) -> Self {
        PeerConfig {
            interface: Some(interface.to_owned()),
            ..PeerConfig::new(id, my_asn, peer_asn, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
        }
    }

    /// The AS number in force towards this peer: `local_asn` when set, else `my_asn`. The OPEN
    /// carries it, the AS_PATH of our routes holds it alone, and iBGP means the peer is in it.
    pub fn local_as(&self) -> u32 {
        self.local_asn.unwrap_or(self.my_asn)
    }

    /// The role this session announces and holds the peer to: the configured one, on eBGP only.
    pub fn ebgp_role(&self) -> Option<Role> {
        self.role.filter(|_| !self.is_ibgp())
    }

    /// Whether the peer is in the AS we present to it ([`PeerConfig::local_as`]).
    pub fn is_ibgp(&self) -> bool {
        !self.peer_asn_external && self.local_as() == self.peer_asn
    }

    /// The address families the session offers (multiprotocol capability, RFC 4760) and
    /// announces: IPv4 and IPv6 unicast, or with `dual_stack` off only the family of the
    /// peer's address. An unnumbered session has no address family of its own and always
    /// carries both (IPv4 over its IPv6 link-local next hop, RFC 8950), as in MetalLB.
    pub fn families(&self) -> &'static [Family] {
        const BOTH: [Family; 2] = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];
        match (
            self.dual_stack || self.interface.is_some(),
            self.peer_address,
        ) {
            (true, _) => &BOTH,
            (false, IpAddr::V4(_)) => &BOTH[..1],
            (false, IpAddr::V6(_)) => &BOTH[1..],
        }
    }

    /// The IP TTL of the session: 255 for iBGP and multi-hop eBGP, 1 for directly connected eBGP.
    pub fn ttl(&self) -> u8 {
        if self.is_ibgp() || self.ebgp_multihop {
            255
        } else {
            1
        }
    }
}

/// A standard community (RFC 1997), `high:low`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Community(pub u32);

/// A large community (RFC 8092), `global:local1:local2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LargeCommunity {
    /// Global administrator (usually an AS number).
    pub global: u32,
    /// First local data part.
    pub local1: u32,
    /// Second local data part.
    pub local2: u32,
}

/// A community value from configuration: `65000:1`, a well-known name (`no-export`), or
/// `large:1:2:3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AnyCommunity {
    /// RFC 1997.
    Standard(Community),
    /// RFC 8092.
    Large(LargeCommunity),
}

/// Why a community string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "community `{0}` is not `high:low` (two 16-bit numbers), `large:a:b:c` (three 32-bit numbers) or a well-known name such as `no-export`"
)]
pub struct CommunityParseError(pub String);

impl FromStr for AnyCommunity {
    type Err = CommunityParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CommunityValue::parse(s)
            .map(AnyCommunity::from)
            .ok_or_else(|| CommunityParseError(s.to_owned()))
    }
}

impl From<CommunityValue> for AnyCommunity {
    fn from(value: CommunityValue) -> Self {
        match value {
            CommunityValue::Standard(hi, lo) => {
                AnyCommunity::Standard(Community((u32::from(hi) << 16) | u32::from(lo)))
            }
            CommunityValue::Large(global, local1, local2) => AnyCommunity::Large(LargeCommunity {
                global,
                local1,
                local2,
            }),
        }
    }
}

/// One path to announce to a peer: a prefix, its route attributes and its next hop.
///
/// Advertisements of one prefix with different `next_hop`s are different paths (sent with
/// ADD-PATH where negotiated, see [`PeerConfig::add_path`]); with the same `next_hop` they are
/// one path with merged attributes ([`RouteAttrs::merge`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advertisement {
    /// The announced prefix (already aggregated to `aggregationLength` by the caller).
    pub prefix: IpNet,
    /// Attributes that vary per advertisement.
    pub attrs: RouteAttrs,
    /// The path's next hop. `None`: the session's own (its local address, or the configured
    /// `next_hop_v4` / `next_hop_v6`). `Some(addr)`: a third-party next hop, usually another
    /// node's address on the router's link, which the router must be able to reach directly.
    /// An IPv4 prefix takes an IPv6 next hop only on a session with RFC 8950 extended next
    /// hops; an IPv6 prefix never takes an IPv4 one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
}

impl Advertisement {
    /// A prefix with no local preference and no communities, via the session's own next hop.
    pub fn new(prefix: IpNet) -> Self {
        Advertisement {
            prefix,
            attrs: RouteAttrs::default(),
            next_hop: None,
        }
    }

    /// The same path via the third-party next hop `next_hop`.
    pub fn via(self, next_hop: IpAddr) -> Self {
        Advertisement {
            next_hop: Some(next_hop),
            ..self
        }
    }
}

/// Route attributes chosen by configuration; the session adds ORIGIN, AS_PATH and the next hop.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RouteAttrs {
    /// LOCAL_PREF, sent to iBGP peers only (100 when absent).
    pub local_pref: Option<u32>,
    /// COMMUNITIES.
    pub communities: BTreeSet<Community>,
    /// LARGE_COMMUNITIES.
    pub large_communities: BTreeSet<LargeCommunity>,
}

impl RouteAttrs {
    /// Folds another advertisement of the same prefix into this one: communities are united and
    /// the highest local preference wins, so the result does not depend on input order.
    pub fn merge(&mut self, other: &RouteAttrs) {
        self.local_pref = match (self.local_pref, other.local_pref) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.communities.extend(other.communities.iter().copied());
        self.large_communities
            .extend(other.large_communities.iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn community_strings_parse_to_wire_values() {
        assert_eq!(
            "65000:1".parse::<AnyCommunity>().unwrap(),
            AnyCommunity::Standard(Community(0xFDE8_0001))
        );
        assert_eq!(
            "no-export".parse::<AnyCommunity>().unwrap(),
            AnyCommunity::Standard(Community(0xFFFF_FF01))
        );
        assert_eq!(
            "large:4200000000:1:2".parse::<AnyCommunity>().unwrap(),
            AnyCommunity::Large(LargeCommunity {
                global: 4_200_000_000,
                local1: 1,
                local2: 2
            })
        );
    }

    #[test]
    fn community_strings_out_of_range_are_refused() {
        for bad in ["70000:1", "1:2:3", "large:1:2", "x", ""] {
            assert!(bad.parse::<AnyCommunity>().is_err(), "{bad}");
        }
    }

    #[test]
    fn merging_attributes_unites_communities_and_keeps_the_highest_local_pref() {
        let mut a = RouteAttrs {
            local_pref: Some(100),
            communities: [Community(1)].into(),
            ..Default::default()
        };
        let b = RouteAttrs {
            local_pref: Some(200),
            communities: [Community(2)].into(),
            ..Default::default()
        };
        a.merge(&b);
        assert_eq!(a.local_pref, Some(200));
        assert_eq!(a.communities, [Community(1), Community(2)].into());
    }

    #[test]
    fn a_local_asn_is_the_as_in_force_and_decides_ibgp() {
        let mut p = PeerConfig::new("r", 64512, 64600, "10.99.0.2".parse().unwrap());
        assert_eq!(p.local_as(), 64512);
        assert!(!p.is_ibgp());
        p.local_asn = Some(64600);
        assert_eq!(p.local_as(), 64600);
        assert!(p.is_ibgp(), "the peer is in the AS we present");
        assert_eq!(p.ttl(), 255);
        p.peer_asn = 64512;
        assert!(!p.is_ibgp(), "myASN no longer counts");
    }

    #[test]
    fn a_session_carries_both_families_unless_limited_to_its_own() {
        let mut v4 = PeerConfig::new("r", 64512, 64513, "10.99.0.2".parse().unwrap());
        assert_eq!(v4.families(), [Family::IPV4_UNICAST, Family::IPV6_UNICAST]);
        v4.dual_stack = false;
        assert_eq!(v4.families(), [Family::IPV4_UNICAST]);
        let mut v6 = PeerConfig::new("r", 64512, 64513, "fd00:99::2".parse().unwrap());
        v6.dual_stack = false;
        assert_eq!(v6.families(), [Family::IPV6_UNICAST]);
    }

    #[test]
    fn a_peer_config_without_the_new_fields_deserialises_with_both_families_and_no_local_asn() {
        let mut json = serde_json::to_value(PeerConfig::new(
            "r",
            64512,
            64513,
            "10.99.0.2".parse().unwrap(),
        ))
        .unwrap();
        let obj = json.as_object_mut().unwrap();
        obj.remove("dual_stack");
        obj.remove("local_asn");
        let p: PeerConfig = serde_json::from_value(json).unwrap();
        assert!(p.dual_stack);
        assert_eq!(p.local_asn, None);
    }

    #[test]
    fn single_hop_ebgp_uses_ttl_one_and_multihop_or_ibgp_use_255() {
        let mut p = PeerConfig::new("r", 64512, 64513, "10.99.0.2".parse().unwrap());
        assert_eq!(p.ttl(), 1);
        p.ebgp_multihop = true;
        assert_eq!(p.ttl(), 255);
        let i = PeerConfig::new("r", 64512, 64512, "10.99.0.2".parse().unwrap());
        assert_eq!(i.ttl(), 255);
    }
}
