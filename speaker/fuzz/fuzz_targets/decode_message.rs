//! Framing and decoding of a byte stream from a peer, as the session does it.
#![no_main]

use ferrolb_speaker::bgp::message::decode_message;
use ferrolb_speaker::bgp::wire::DecodeContext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for four_octet_as in [false, true] {
        let ctx = DecodeContext { four_octet_as };
        let mut rest = data;
        while let Ok(Some((_, used))) = decode_message(rest, ctx) {
            assert!((19..=4096).contains(&used) && used <= rest.len());
            rest = &rest[used..];
        }
    }
});
