//! Framing and decoding of a byte stream from a peer, as the session does it.
#![no_main]

use ferrolb_speaker::bgp::wire::{DecodeContext, decode_message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for four_octet_as in [false, true] {
        let ctx = DecodeContext { four_octet_as };
        let mut rest = data;
        while let Ok(Some((_, used))) = decode_message(rest, ctx) {
            assert!(used >= 19 && used <= 4096 && used <= rest.len());
            rest = &rest[used..];
        }
    }
});
