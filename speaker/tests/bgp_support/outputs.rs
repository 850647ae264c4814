//! What the pure session state machine asked to send, read back.

use ferrolb_speaker::bgp::Output;
use ferrolb_speaker::bgp::message::{Message, decode_message};
use ferrolb_speaker::bgp::wire::DecodeContext;

/// Every byte the outputs send, in order.
pub fn sent_bytes(out: &[Output]) -> Vec<u8> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(b) => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The messages the outputs send, decoded as a peer with 4-octet AS numbers would.
pub fn sent_messages(out: &[Output]) -> Vec<Message> {
    let ctx = DecodeContext {
        four_octet_as: true,
    };
    let bytes = sent_bytes(out);
    let mut b = &bytes[..];
    let mut v = vec![];
    while !b.is_empty() {
        let (m, n) = decode_message(b, ctx).unwrap().unwrap();
        v.push(m);
        b = &b[n..];
    }
    v
}
