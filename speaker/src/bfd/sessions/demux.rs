//! Which session a datagram belongs to, and whether its TTL is acceptable (RFC 5880 §6.8.6,
//! RFC 5881 §5, RFC 5883 §5). Pure: no I/O, no clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;

use super::GTSM_TTL;
use crate::bfd::packet::{ControlPacket, PacketError, decode};
use crate::bfd::session::Discard;
use crate::netdev::DeviceName;

/// What selects a session when Your Discriminator is zero (RFC 5880 §6.8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The peer's address: the datagram's source.
    pub peer: IpAddr,
    /// Our address: the one the receiving socket is bound to.
    pub local: IpAddr,
    /// Which port the datagram arrived on.
    pub multihop: bool,
    /// The VRF device the receiving socket is bound to (`None`: the default VRF), so that the
    /// same addresses in two VRFs are two sessions.
    pub device: Option<DeviceName>,
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hop = if self.multihop {
            "multihop"
        } else {
            "single hop"
        };
        write!(f, "from {} to {} ({hop})", self.local, self.peer)?;
        match self.device {
            Some(d) => write!(f, " in VRF {d}"),
            None => Ok(()),
        }
    }
}

/// Why a datagram did not reach a session, or a packet did not leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// A single-hop packet whose TTL / hop limit is not 255: it crossed a router, or was forged
    /// off-link (RFC 5881 §5).
    #[error(
        "single-hop BFD packet arrived with TTL {received}, not 255; it was not sent from the link"
    )]
    TtlNot255 {
        /// The TTL / hop limit received.
        received: u8,
    },
    /// A multihop packet below the configured minimum TTL (RFC 5883 §5).
    #[error("multihop BFD packet arrived with TTL {received}, below the minimum of {minimum}")]
    TtlBelowMinimum {
        /// The TTL / hop limit received.
        received: u8,
        /// [`SessionConfig::minimum_ttl`](crate::bfd::session::SessionConfig::minimum_ttl).
        minimum: u8,
    },
    /// The kernel gave no TTL / hop limit with the datagram.
    #[error("BFD datagram came without its TTL; it cannot be checked, so it is dropped")]
    TtlUnknown,
    /// Not a Control packet we accept.
    #[error(transparent)]
    Invalid(PacketError),
    /// Your Discriminator names no session of ours.
    #[error("BFD packet for a discriminator no local session has; the peer holds stale state")]
    UnknownDiscriminator,
    /// Your Discriminator is zero and no session has this (peer, local) pair.
    #[error("BFD packet from an address no session is configured for")]
    NoSession,
    /// Your Discriminator names a session whose addresses differ from the datagram's.
    #[error("BFD packet names a session of another peer or local address")]
    AddressMismatch,
    /// The session refused it ([`Output::Discarded`](crate::bfd::session::Output::Discarded)).
    #[error(transparent)]
    Refused(Discard),
    /// Sending failed (counted with the drops: the peer never saw the packet).
    #[error("sending a BFD packet failed")]
    SendFailed,
}

impl DropReason {
    /// A short stable label for metrics and [`BfdStatus::dropped`](crate::bfd::sessions::BfdStatus::dropped).
    pub fn metric_label(&self) -> &'static str {
        match self {
            DropReason::TtlNot255 { .. } => "ttl_not_255",
            DropReason::TtlBelowMinimum { .. } => "ttl_below_minimum",
            DropReason::TtlUnknown => "ttl_unknown",
            DropReason::Invalid(e) => e.metric_label(),
            DropReason::UnknownDiscriminator => "unknown_discriminator",
            DropReason::NoSession => "no_session",
            DropReason::AddressMismatch => "address_mismatch",
            DropReason::Refused(d) => d.metric_label(),
            DropReason::SendFailed => "send_failed",
        }
    }
}

/// The TTL rule: exactly 255 for single hop (RFC 5881 §5), at least `minimum_ttl` for
/// multihop (RFC 5883 §5).
pub fn ttl_check(multihop: bool, minimum_ttl: u8, received: Option<u8>) -> Result<(), DropReason> {
    match received {
        None => Err(DropReason::TtlUnknown),
        Some(GTSM_TTL) if !multihop => Ok(()),
        Some(received) if !multihop => Err(DropReason::TtlNot255 { received }),
        Some(received) if received < minimum_ttl => Err(DropReason::TtlBelowMinimum {
            received,
            minimum: minimum_ttl,
        }),
        Some(_) => Ok(()),
    }
}

/// Where one datagram goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatch {
    /// To this session.
    Deliver(NonZeroU32, ControlPacket),
    /// Nowhere; counted in the session named, if any.
    Drop(Option<NonZeroU32>, DropReason),
}

#[derive(Debug, Clone, Copy)]
struct DemuxEntry {
    key: SessionKey,
    minimum_ttl: u8,
}

/// The session table: which session a datagram belongs to (RFC 5880 §6.8.6). Pure.
#[derive(Debug, Default)]
pub struct Demux {
    by_discr: HashMap<NonZeroU32, DemuxEntry>,
    by_key: HashMap<SessionKey, NonZeroU32>,
}

impl Demux {
    /// Adds a session; `false` (and no change) when its discriminator or addresses are taken.
    pub fn insert(&mut self, discr: NonZeroU32, key: SessionKey, minimum_ttl: u8) -> bool {
        if self.by_discr.contains_key(&discr) || self.by_key.contains_key(&key) {
            return false;
        }
        self.by_discr.insert(discr, DemuxEntry { key, minimum_ttl });
        self.by_key.insert(key, discr);
        true
    }

    /// Removes a session.
    pub fn remove(&mut self, discr: NonZeroU32) {
        if let Some(entry) = self.by_discr.remove(&discr) {
            self.by_key.remove(&entry.key);
        }
    }

    /// Changes the lowest TTL accepted for session `discr` (its profile changed).
    pub fn set_minimum_ttl(&mut self, discr: NonZeroU32, minimum_ttl: u8) {
        if let Some(entry) = self.by_discr.get_mut(&discr) {
            entry.minimum_ttl = minimum_ttl;
        }
    }

    /// Whether a session with these addresses exists.
    pub fn contains(&self, key: &SessionKey) -> bool {
        self.by_key.contains_key(key)
    }

    /// Whether `discr` is taken.
    pub fn has_discriminator(&self, discr: NonZeroU32) -> bool {
        self.by_discr.contains_key(&discr)
    }

    /// Decodes `datagram`, selects its session by Your Discriminator when nonzero and by
    /// `arrival` (source, receiving address, port) when zero, and checks its TTL against that
    /// session's rule. A datagram that fails to decode is attributed to the session of its
    /// addresses, if there is one.
    pub fn dispatch(&self, arrival: SessionKey, datagram: &[u8], ttl: Option<u8>) -> Dispatch {
        let packet = match decode(datagram) {
            Ok(packet) => packet,
            Err(e) => {
                return Dispatch::Drop(self.by_key.get(&arrival).copied(), DropReason::Invalid(e));
            }
        };
        let (discr, entry) = match NonZeroU32::new(packet.your_discriminator) {
            Some(discr) => match self.by_discr.get(&discr) {
                None => return Dispatch::Drop(None, DropReason::UnknownDiscriminator),
                Some(entry) if entry.key != arrival => {
                    return Dispatch::Drop(Some(discr), DropReason::AddressMismatch);
                }
                Some(entry) => (discr, entry),
            },
            None => match self.by_key.get(&arrival) {
                None => return Dispatch::Drop(None, DropReason::NoSession),
                Some(discr) => (*discr, &self.by_discr[discr]),
            },
        };
        match ttl_check(arrival.multihop, entry.minimum_ttl, ttl) {
            Ok(()) => Dispatch::Deliver(discr, packet),
            Err(reason) => Dispatch::Drop(Some(discr), reason),
        }
    }
}

/// The next free discriminator after `*next`: nonzero and not `taken`. Advances `*next`.
pub(super) fn allocate_discriminator(
    next: &mut u32,
    taken: impl Fn(NonZeroU32) -> bool,
) -> NonZeroU32 {
    loop {
        *next = next.wrapping_add(1);
        if let Some(discr) = NonZeroU32::new(*next)
            && !taken(discr)
        {
            return discr;
        }
    }
}
