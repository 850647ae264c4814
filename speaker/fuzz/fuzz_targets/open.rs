//! OPEN bodies: decoding never panics, and what decodes re-encodes to an equal OPEN (apart from
//! capabilities we only keep as codes).
#![no_main]

use ferrolb_speaker::bgp::open::{Capability, Open};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(open) = Open::decode(data) else { return };
    let known = Open {
        capabilities: open
            .capabilities
            .iter()
            .filter(|c| !matches!(c, Capability::Unrecognized(_)))
            .cloned()
            .collect(),
        ..open
    };
    let mut bytes = Vec::new();
    known.encode(&mut bytes);
    // We only ever encode a handful of capabilities: the one-parameter form holds 253 bytes.
    let fits = bytes.len() - 19 - 12 <= 253
        && known.capabilities.iter().all(|c| match c {
            Capability::GracefulRestart { families, .. } => families.len() < 63,
            _ => true,
        });
    if fits {
        let again = Open::decode(&bytes[19..]).expect("our own OPEN decodes");
        assert_eq!(again, known);
    }
});
