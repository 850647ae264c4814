//! BGP message framing and the decoding of what a peer may send us (RFC 4271 §4). Pure: no I/O,
//! no clock.
//!
//! Everything here treats its input as hostile: every length is checked before it is used, nothing
//! is allocated from a peer-provided size beyond the 4096-byte message bound, and every failure is a
//! [`SessionError`], which is the NOTIFICATION to send back.

use super::error::{Notification, SessionError};
use super::open::Open;
use super::update_check::{UpdateSummary, check_update};

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

/// A message received from a peer, decoded as far as an announce-only speaker needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// OPEN, with the capabilities we understand.
    Open(Open),
    /// UPDATE: checked for consistency, its routes are not kept.
    Update(UpdateSummary),
    /// NOTIFICATION.
    Notification(Notification),
    /// KEEPALIVE.
    Keepalive,
    /// ROUTE-REFRESH.
    RouteRefresh(RouteRefresh),
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

/// Decodes the first message of `buf`. Returns `Ok(None)` when more bytes are needed, or the
/// message and how many bytes it used. Header errors are reported as soon as the 19 header bytes
/// are in, without waiting for a body that may never come.
pub fn decode_message(
    buf: &[u8],
    ctx: DecodeContext,
) -> Result<Option<(Message, usize)>, SessionError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header = check_header(buf)?;
    let len = usize::from(header.length);
    let Some(body) = buf.get(HEADER_LEN..len) else {
        return Ok(None);
    };
    let message = match header.message_type {
        message_type::OPEN => Message::Open(Open::decode(body)?),
        message_type::UPDATE => Message::Update(check_update(body, ctx)?),
        message_type::NOTIFICATION => Message::Notification(Notification {
            code: body[0],
            subcode: body[1],
            data: body[2..].to_vec(),
        }),
        message_type::KEEPALIVE => Message::Keepalive,
        // check_header accepted only the five types above.
        _ => Message::RouteRefresh(RouteRefresh {
            family: Family {
                afi: u16::from_be_bytes([body[0], body[1]]),
                safi: body[3],
            },
            subtype: body[2],
        }),
    };
    Ok(Some((message, len)))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u16, ty: u8) -> Vec<u8> {
        let mut v = vec![0xff; 16];
        v.extend_from_slice(&len.to_be_bytes());
        v.push(ty);
        v
    }

    #[test]
    fn a_partial_header_needs_more_bytes() {
        let k = header(19, 4);
        for cut in 0..19 {
            assert_eq!(
                decode_message(&k[..cut], DecodeContext::default()),
                Ok(None)
            );
        }
    }

    #[test]
    fn a_partial_body_needs_more_bytes() {
        let mut n = header(23, 3);
        n.extend_from_slice(&[6, 2]);
        assert_eq!(decode_message(&n, DecodeContext::default()), Ok(None));
    }

    #[test]
    fn two_messages_in_one_buffer_decode_one_at_a_time() {
        let mut b = header(19, 4);
        b.extend(header(19, 4));
        let (m, used) = decode_message(&b, DecodeContext::default())
            .unwrap()
            .unwrap();
        assert_eq!((m, used), (Message::Keepalive, 19));
    }

    #[test]
    fn length_18_is_a_bad_length_before_the_body_arrives() {
        assert_eq!(
            decode_message(&header(18, 4), DecodeContext::default()),
            Err(SessionError::BadLength { length: 18 })
        );
    }

    #[test]
    fn length_4097_is_a_bad_length() {
        assert_eq!(
            decode_message(&header(4097, 2), DecodeContext::default()),
            Err(SessionError::BadLength { length: 4097 })
        );
    }

    #[test]
    fn a_keepalive_with_a_body_is_a_bad_length() {
        let mut k = header(20, 4);
        k.push(0);
        assert_eq!(
            decode_message(&k, DecodeContext::default()),
            Err(SessionError::BadLength { length: 20 })
        );
    }

    #[test]
    fn a_notification_round_trips() {
        let n = Notification {
            code: 6,
            subcode: 2,
            data: b"\x03bye".to_vec(),
        };
        let mut b = vec![];
        encode_notification(&mut b, &n);
        let (m, _) = decode_message(&b, DecodeContext::default())
            .unwrap()
            .unwrap();
        assert_eq!(m, Message::Notification(n.clone()));
        assert_eq!(n.shutdown_message().as_deref(), Some("bye"));
    }
}
