//! Encoding of the UPDATEs we send: announcements packed many prefixes to a message, withdrawals
//! and End-of-RIB markers (RFC 4271 §4.3, RFC 4760, RFC 4724 §2), IPv6 next hops with their
//! link-local half (RFC 2545 §3), IPv4 routes with an IPv6 next hop (RFC 8950), third-party
//! next hops, and path identifiers before each NLRI where ADD-PATH is in force (RFC 7911 §3).
//! Pure: no I/O, no clock.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::config::RouteAttrs;
use super::open::AS_TRANS;
use super::wire::{Family, HEADER_LEN, MAX_MESSAGE_LEN, message_type, put_header};

const ORIGIN: u8 = 1;
const AS_PATH: u8 = 2;
const NEXT_HOP: u8 = 3;
const LOCAL_PREF: u8 = 5;
const COMMUNITIES: u8 = 8;
const MP_REACH: u8 = 14;
const MP_UNREACH: u8 = 15;
const AS4_PATH: u8 = 17;
const LARGE_COMMUNITIES: u8 = 32;
const ONLY_TO_CUSTOMER: u8 = 35;

const WELL_KNOWN: u8 = 0x40;
const OPTIONAL_TRANSITIVE: u8 = 0xc0;
const OPTIONAL: u8 = 0x80;
const EXTENDED_LENGTH: u8 = 0x10;
const AS_SEQUENCE: u8 = 2;

/// Room for the two 2-byte length fields of an UPDATE.
const UPDATE_FIXED: usize = 4;

/// What the encoder needs to know about the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeParams {
    /// Our AS number.
    pub my_asn: u32,
    /// The peer is in our AS: empty AS_PATH and LOCAL_PREF.
    pub ibgp: bool,
    /// 4-octet AS numbers were negotiated.
    pub four_octet_as: bool,
    /// NEXT_HOP for IPv4 routes.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop inside MP_REACH for IPv6 routes (the global one, RFC 2545 §3).
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Our link-local address on a session over one link (BGP unnumbered): sent after
    /// `next_hop_v6` in a 32-byte next hop, or alone in a 16-byte one when there is no global
    /// address (RFC 2545 §3).
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
    /// The peer accepts IPv4 routes with an IPv6 next hop (RFC 8950, negotiated): IPv4 routes
    /// go in MP_REACH with the IPv6 next hop instead of the NEXT_HOP attribute.
    pub ipv4_over_ipv6: bool,
    /// The AS to put in the Only-to-Customer attribute (RFC 9234 §5) of every route: ours,
    /// when our role makes the peer a customer, a lateral peer or a route-server client.
    pub only_to_customer: Option<u32>,
}

/// Where a group of prefixes takes its next hop on the wire.
enum WireNextHop {
    /// The NEXT_HOP attribute, with the prefixes in the classic IPv4 NLRI field.
    Attribute(Ipv4Addr),
    /// The next hop field of MP_REACH_NLRI (RFC 4760), with the prefixes inside it.
    MpReach(Vec<u8>),
}

impl EncodeParams {
    /// The next hop field of MP_REACH for IPv6 next hops: global and link-local (32 bytes),
    /// or whichever of the two exists (16 bytes).
    fn mp_next_hop_v6(&self) -> Option<Vec<u8>> {
        match (self.next_hop_v6, self.next_hop_v6_link_local) {
            (Some(g), Some(ll)) => Some([g.octets(), ll.octets()].concat()),
            (Some(a), None) | (None, Some(a)) => Some(a.octets().to_vec()),
            (None, None) => None,
        }
    }

    /// How the paths of `family` via `next_hop` carry it: the session's own next hop
    /// (`None`), or a third-party one, alone (a third-party IPv6 next hop has no link-local
    /// half). IPv4 routes go with an IPv6 next hop only where RFC 8950 was negotiated.
    fn wire_next_hop(
        &self,
        family: Family,
        next_hop: Option<IpAddr>,
    ) -> Result<WireNextHop, EncodeError> {
        let ipv4 = family == Family::IPV4_UNICAST;
        match next_hop {
            None if ipv4 && !self.ipv4_over_ipv6 => self
                .next_hop_v4
                .map(WireNextHop::Attribute)
                .ok_or(EncodeError::NoNextHop),
            None => self
                .mp_next_hop_v6()
                .map(WireNextHop::MpReach)
                .ok_or(EncodeError::NoNextHop),
            Some(IpAddr::V4(a)) if ipv4 => Ok(WireNextHop::Attribute(a)),
            Some(IpAddr::V6(a)) if !ipv4 || self.ipv4_over_ipv6 => {
                Ok(WireNextHop::MpReach(a.octets().to_vec()))
            }
            Some(next_hop) => Err(EncodeError::NextHopOfTheOtherFamily { next_hop }),
        }
    }
}

/// What the prefixes of one announcement share besides their attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathGroup {
    /// Their address family.
    pub family: Family,
    /// Their next hop: `None` for the session's own, else a third-party one.
    pub next_hop: Option<IpAddr>,
    /// Their path identifier, where ADD-PATH is in force for the family (RFC 7911 §3).
    pub path_id: Option<u32>,
}

impl PathGroup {
    /// Prefixes of `family` via the session's own next hop, without path identifiers.
    pub fn own(family: Family) -> Self {
        PathGroup {
            family,
            next_hop: None,
            path_id: None,
        }
    }
}

/// One NLRI: a prefix, preceded on the wire by its path identifier where ADD-PATH is in force
/// for its family (RFC 7911 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nlri {
    /// The path identifier, `None` without ADD-PATH.
    pub path_id: Option<u32>,
    /// The prefix.
    pub prefix: IpNet,
}

/// The family of a prefix.
pub fn family_of(prefix: &IpNet) -> Family {
    match prefix {
        IpNet::V4(_) => Family::IPV4_UNICAST,
        IpNet::V6(_) => Family::IPV6_UNICAST,
    }
}

fn put_attr(out: &mut Vec<u8>, flags: u8, type_code: u8, value: &[u8]) {
    if value.len() > 255 {
        out.extend_from_slice(&[flags | EXTENDED_LENGTH, type_code]);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, type_code, value.len() as u8]);
    }
    out.extend_from_slice(value);
}

fn put_nlri(out: &mut Vec<u8>, path_id: Option<u32>, prefix: &IpNet) {
    if let Some(id) = path_id {
        out.extend_from_slice(&id.to_be_bytes());
    }
    let bits = prefix.prefix_len();
    out.push(bits);
    let n = usize::from(bits).div_ceil(8);
    match prefix.network() {
        IpAddr::V4(a) => out.extend_from_slice(&a.octets()[..n]),
        IpAddr::V6(a) => out.extend_from_slice(&a.octets()[..n]),
    }
}

fn nlri_wire_len(path_id: Option<u32>, prefix: &IpNet) -> usize {
    let id_len = if path_id.is_some() { 4 } else { 0 };
    id_len + 1 + usize::from(prefix.prefix_len()).div_ceil(8)
}

/// The longest NLRI of a family: a host route, with its path identifier.
fn max_nlri_len(family: Family, path_id: Option<u32>) -> usize {
    let id_len = if path_id.is_some() { 4 } else { 0 };
    let address_len = if family == Family::IPV4_UNICAST {
        4
    } else {
        16
    };
    id_len + 1 + address_len
}

/// Path attributes of one attribute set, split around the place MP_REACH takes so that the
/// message carries them in ascending type order.
struct Attributes {
    before_mp: Vec<u8>,
    after_mp: Vec<u8>,
}

fn build_attributes(
    p: &EncodeParams,
    attrs: &RouteAttrs,
    next_hop: Option<Ipv4Addr>,
) -> Attributes {
    let mut before = Vec::with_capacity(64);
    let mut after = Vec::new();
    put_attr(&mut before, WELL_KNOWN, ORIGIN, &[0]);
    if p.ibgp {
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &[]);
    } else if p.four_octet_as {
        let mut v = vec![AS_SEQUENCE, 1];
        v.extend_from_slice(&p.my_asn.to_be_bytes());
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &v);
    } else {
        // RFC 6793 §4.2.2: a 2-octet peer sees AS_TRANS, the real AS travels in AS4_PATH.
        let two = u16::try_from(p.my_asn).unwrap_or(AS_TRANS);
        let mut v = vec![AS_SEQUENCE, 1];
        v.extend_from_slice(&two.to_be_bytes());
        put_attr(&mut before, WELL_KNOWN, AS_PATH, &v);
        if p.my_asn > u32::from(u16::MAX) {
            let mut v4 = vec![AS_SEQUENCE, 1];
            v4.extend_from_slice(&p.my_asn.to_be_bytes());
            put_attr(&mut after, OPTIONAL_TRANSITIVE, AS4_PATH, &v4);
        }
    }
    if let Some(nh) = next_hop {
        put_attr(&mut before, WELL_KNOWN, NEXT_HOP, &nh.octets());
    }
    if p.ibgp {
        let lp = attrs.local_pref.unwrap_or(100);
        put_attr(&mut before, WELL_KNOWN, LOCAL_PREF, &lp.to_be_bytes());
    }
    if !attrs.communities.is_empty() {
        let v: Vec<u8> = attrs
            .communities
            .iter()
            .flat_map(|c| c.0.to_be_bytes())
            .collect();
        put_attr(&mut before, OPTIONAL_TRANSITIVE, COMMUNITIES, &v);
    }
    if !attrs.large_communities.is_empty() {
        let v: Vec<u8> = attrs
            .large_communities
            .iter()
            .flat_map(|c| {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&c.global.to_be_bytes());
                b[4..8].copy_from_slice(&c.local1.to_be_bytes());
                b[8..].copy_from_slice(&c.local2.to_be_bytes());
                b
            })
            .collect();
        put_attr(&mut after, OPTIONAL_TRANSITIVE, LARGE_COMMUNITIES, &v);
    }
    if let Some(asn) = p.only_to_customer {
        put_attr(
            &mut after,
            OPTIONAL_TRANSITIVE,
            ONLY_TO_CUSTOMER,
            &asn.to_be_bytes(),
        );
    }
    Attributes {
        before_mp: before,
        after_mp: after,
    }
}

/// Why prefixes could not be put in an UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum EncodeError {
    /// The attributes alone leave no room for a prefix in a 4096-byte message.
    #[error("route attributes are too large for a BGP message; use fewer communities")]
    AttributesTooLarge,
    /// No next hop is known for the prefix's family.
    #[error("no next hop for this address family; set the peer's next hop for it")]
    NoNextHop,
    /// A third-party next hop of the other family than the prefix: an IPv6 one for an IPv4
    /// prefix on a session without RFC 8950 extended next hops, or an IPv4 one for an IPv6
    /// prefix.
    #[error(
        "next hop {next_hop} is of the other address family than the prefix and the session cannot carry it (an IPv4 prefix takes an IPv6 next hop only with RFC 8950 extended next hops); give the path a next hop of the prefix's family"
    )]
    NextHopOfTheOtherFamily {
        /// The next hop.
        next_hop: IpAddr,
    },
}

/// Appends UPDATEs announcing `prefixes`, which share `attrs` and `group` (family, next hop,
/// path identifier), packed as densely as 4096-byte messages allow. Returns how many messages
/// were written.
pub fn encode_announcements<'a>(
    out: &mut Vec<u8>,
    p: &EncodeParams,
    attrs: &RouteAttrs,
    group: PathGroup,
    prefixes: impl IntoIterator<Item = &'a IpNet>,
) -> Result<usize, EncodeError> {
    let next_hop = p.wire_next_hop(group.family, group.next_hop)?;
    let a = build_attributes(
        p,
        attrs,
        match next_hop {
            WireNextHop::Attribute(nh) => Some(nh),
            WireNextHop::MpReach(_) => None,
        },
    );
    // MP_REACH: flags, type, 2-byte length, AFI, SAFI, next-hop length, next hop, reserved.
    let mp_fixed = match &next_hop {
        WireNextHop::Attribute(_) => 0,
        WireNextHop::MpReach(nh) => 4 + 3 + 1 + nh.len() + 1,
    };
    let fixed = HEADER_LEN + UPDATE_FIXED + a.before_mp.len() + a.after_mp.len() + mp_fixed;
    let room = MAX_MESSAGE_LEN
        .checked_sub(fixed)
        .filter(|r| *r >= max_nlri_len(group.family, group.path_id))
        .ok_or(EncodeError::AttributesTooLarge)?;
    let mut prefixes = prefixes.into_iter().peekable();
    let mut messages = 0;
    let mut nlri = Vec::with_capacity(room);
    while prefixes.peek().is_some() {
        nlri.clear();
        while let Some(px) =
            prefixes.next_if(|px| nlri.len() + nlri_wire_len(group.path_id, px) <= room)
        {
            put_nlri(&mut nlri, group.path_id, px);
        }
        put_announcement(out, &a, &next_hop, group.family, &nlri);
        messages += 1;
    }
    Ok(messages)
}

/// Appends one UPDATE with the attributes `a`, the next hop and the NLRI (already encoded).
fn put_announcement(
    out: &mut Vec<u8>,
    a: &Attributes,
    next_hop: &WireNextHop,
    family: Family,
    nlri: &[u8],
) {
    let attrs_len = a.before_mp.len() + a.after_mp.len();
    match next_hop {
        WireNextHop::Attribute(_) => {
            put_header(
                out,
                message_type::UPDATE,
                UPDATE_FIXED + attrs_len + nlri.len(),
            );
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(attrs_len as u16).to_be_bytes());
            out.extend_from_slice(&a.before_mp);
            out.extend_from_slice(&a.after_mp);
            out.extend_from_slice(nlri);
        }
        WireNextHop::MpReach(nh) => {
            // After flags, type and length: AFI, SAFI, next-hop length, next hop, reserved.
            let mp_len = 3 + 1 + nh.len() + 1 + nlri.len();
            let attrs_len = attrs_len + 4 + mp_len;
            put_header(out, message_type::UPDATE, UPDATE_FIXED + attrs_len);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(attrs_len as u16).to_be_bytes());
            out.extend_from_slice(&a.before_mp);
            out.extend_from_slice(&[OPTIONAL | EXTENDED_LENGTH, MP_REACH]);
            out.extend_from_slice(&(mp_len as u16).to_be_bytes());
            out.extend_from_slice(&family.afi.to_be_bytes());
            out.extend_from_slice(&[family.safi, nh.len() as u8]);
            out.extend_from_slice(nh);
            out.push(0);
            out.extend_from_slice(nlri);
            out.extend_from_slice(&a.after_mp);
        }
    }
}

/// Appends UPDATEs withdrawing `paths` of one family: IPv4 ones in the Withdrawn Routes field,
/// others in MP_UNREACH_NLRI. Each carries its path identifier where ADD-PATH is in force for
/// the family (all or none of them). Returns how many messages were written.
pub fn encode_withdrawals(
    out: &mut Vec<u8>,
    family: Family,
    paths: impl IntoIterator<Item = Nlri>,
) -> usize {
    let mut paths = paths.into_iter().peekable();
    let mut messages = 0;
    let ipv4 = family == Family::IPV4_UNICAST;
    // IPv6 withdrawals travel in MP_UNREACH: flags, type, 2-byte length, AFI, SAFI.
    let overhead = HEADER_LEN + UPDATE_FIXED + if ipv4 { 0 } else { 7 };
    let room = MAX_MESSAGE_LEN - overhead;
    let mut nlri = Vec::with_capacity(room);
    while paths.peek().is_some() {
        nlri.clear();
        while let Some(n) =
            paths.next_if(|n| nlri.len() + nlri_wire_len(n.path_id, &n.prefix) <= room)
        {
            put_nlri(&mut nlri, n.path_id, &n.prefix);
        }
        if ipv4 {
            put_header(out, message_type::UPDATE, UPDATE_FIXED + nlri.len());
            out.extend_from_slice(&(nlri.len() as u16).to_be_bytes());
            out.extend_from_slice(&nlri);
            out.extend_from_slice(&[0, 0]);
        } else {
            let mp_len = 3 + nlri.len();
            put_header(out, message_type::UPDATE, UPDATE_FIXED + 4 + mp_len);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&((4 + mp_len) as u16).to_be_bytes());
            out.extend_from_slice(&[OPTIONAL | EXTENDED_LENGTH, MP_UNREACH]);
            out.extend_from_slice(&(mp_len as u16).to_be_bytes());
            out.extend_from_slice(&family.afi.to_be_bytes());
            out.push(family.safi);
            out.extend_from_slice(&nlri);
        }
        messages += 1;
    }
    messages
}

/// Appends the End-of-RIB marker of a family (RFC 4724 §2): an empty UPDATE for IPv4 unicast, an
/// empty MP_UNREACH otherwise.
pub fn encode_end_of_rib(out: &mut Vec<u8>, family: Family) {
    if family == Family::IPV4_UNICAST {
        put_header(out, message_type::UPDATE, UPDATE_FIXED);
        out.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        put_header(out, message_type::UPDATE, UPDATE_FIXED + 6);
        out.extend_from_slice(&[0, 0, 0, 6, OPTIONAL, MP_UNREACH, 3]);
        out.extend_from_slice(&family.afi.to_be_bytes());
        out.push(family.safi);
    }
}

#[cfg(test)]
mod tests;
