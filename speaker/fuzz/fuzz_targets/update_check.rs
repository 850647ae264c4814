//! UPDATE bodies from peers: the consistency walk never panics and never loops.
#![no_main]

use ferrolb_speaker::bgp::update_check::check_update;
use ferrolb_speaker::bgp::wire::DecodeContext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for four_octet_as in [false, true] {
        let _ = check_update(data, DecodeContext { four_octet_as });
    }
});
