//! BGP message framing (RFC 4271 §4): the header, its checks, families, and the small messages
//! we send. Pure: no I/O, no clock. [`message`](super::message) decodes whole messages.
//!
//! Everything here treats its input as hostile: every length is checked before it is used, nothing
//! is allocated from a peer-provided size beyond the 4096-byte message bound, and every failure is a
//! [`SessionError`], which is the NOTIFICATION to send back.

use super::error::{Notification, SessionError};

/// Bytes in a message header: marker, length and type.
pub const HEADER_LEN: usize = 19;
/// Largest message without the extended message capability (RFC 4271 §4.1).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// Message type codes.
pub mod message_type {
    /// OPEN.
    pub const OPEN: u8 = 1;
    /// UPDATE.
    pub const UPDATE: u8 = 2;
    /// NOTIFICATION.
    pub const NOTIFICATION: u8 = 3;
    /// KEEPALIVE.
    pub const KEEPALIVE: u8 = 4;
    /// ROUTE-REFRESH (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 5;
}

/// An address family / subsequent address family pair (RFC 4760).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Family {
    /// Address family identifier (1 = IPv4, 2 = IPv6).
    pub afi: u16,
    /// Subsequent address family identifier (1 = unicast).
    pub safi: u8,
}

impl Family {
    /// IPv4 unicast.
    pub const IPV4_UNICAST: Family = Family { afi: 1, safi: 1 };
    /// IPv6 unicast.
    pub const IPV6_UNICAST: Family = Family { afi: 2, safi: 1 };
}

/// A ROUTE-REFRESH request (RFC 2918; subtype from RFC 7313).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRefresh {
    /// The family to re-advertise.
    pub family: Family,
    /// 0 = request, 1 = BoRR, 2 = EoRR.
    pub subtype: u8,
}

/// What the decoder must know about the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeContext {
    /// 4-octet AS numbers were negotiated (RFC 6793): AS_PATH carries 4-byte ASNs.
    pub four_octet_as: bool,
}

/// A checked message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Total length including the header.
    pub length: u16,
    /// Message type.
    pub message_type: u8,
}

/// Checks a header (RFC 4271 §6.1): marker, 19 ≤ length ≤ 4096, known type, and a length that the
/// type allows. `bytes` must hold at least [`HEADER_LEN`] bytes.
pub fn check_header(bytes: &[u8]) -> Result<Header, SessionError> {
    let Some(head) = bytes.get(..HEADER_LEN) else {
        return Err(SessionError::BadLength {
            length: u16::try_from(bytes.len()).unwrap_or(u16::MAX),
        });
    };
    if head[..16].iter().any(|&b| b != 0xff) {
        return Err(SessionError::BadMarker);
    }
    let length = u16::from_be_bytes([head[16], head[17]]);
    let message_type = head[18];
    let len = usize::from(length);
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(SessionError::BadLength { length });
    }
    let length_ok = match message_type {
        message_type::OPEN => len >= 29,
        message_type::UPDATE => len >= 23,
        message_type::NOTIFICATION => len >= 21,
        message_type::KEEPALIVE => len == 19,
        message_type::ROUTE_REFRESH => len == 23,
        _ => return Err(SessionError::BadType { message_type }),
    };
    if !length_ok {
        return Err(SessionError::BadLength { length });
    }
    Ok(Header {
        length,
        message_type,
    })
}

/// Appends a header for a message of `body_len` bytes. Callers keep bodies within
/// [`MAX_MESSAGE_LEN`].
pub fn put_header(out: &mut Vec<u8>, message_type: u8, body_len: usize) {
    debug_assert!(HEADER_LEN + body_len <= MAX_MESSAGE_LEN);
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&((HEADER_LEN + body_len) as u16).to_be_bytes());
    out.push(message_type);
}

/// Appends a KEEPALIVE.
pub fn encode_keepalive(out: &mut Vec<u8>) {
    put_header(out, message_type::KEEPALIVE, 0);
}

/// Appends a NOTIFICATION; data beyond what fits in one message is cut.
pub fn encode_notification(out: &mut Vec<u8>, n: &Notification) {
    let data = &n.data[..n.data.len().min(MAX_MESSAGE_LEN - HEADER_LEN - 2)];
    put_header(out, message_type::NOTIFICATION, 2 + data.len());
    out.push(n.code);
    out.push(n.subcode);
    out.extend_from_slice(data);
}

/// Appends a ROUTE-REFRESH.
pub fn encode_route_refresh(out: &mut Vec<u8>, rr: RouteRefresh) {
    put_header(out, message_type::ROUTE_REFRESH, 4);
    out.extend_from_slice(&rr.family.afi.to_be_bytes());
    out.push(rr.subtype);
    out.push(rr.family.safi);
}
