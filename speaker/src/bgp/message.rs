//! Decoding one whole message of what a peer may send us (RFC 4271 §4): the header checked by
//! [`wire`](super::wire), the body by [`open`](super::open) or
//! [`update_check`](super::update_check). Pure: no I/O, no clock.
//!
//! Everything here treats its input as hostile: every length is checked before it is used, nothing
//! is allocated from a peer-provided size beyond the 4096-byte message bound, and every failure is a
//! [`SessionError`], which is the NOTIFICATION to send back.

use super::error::{Notification, SessionError};
use super::open::Open;
use super::update_check::{UpdateSummary, check_update};
use super::wire::{DecodeContext, Family, HEADER_LEN, RouteRefresh, check_header, message_type};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::wire::encode_notification;

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
