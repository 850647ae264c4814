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
    if bytes.len() <= 4096
        && known.capabilities.iter().all(|c| match c {
            Capability::GracefulRestart { families, .. } => families.len() < 63,
            _ => true,
        })
    {
        let again = Open::decode(&bytes[19..]).expect("our own OPEN decodes");
        assert_eq!(again.asn(), known.asn());
        assert_eq!(again.hold_time, known.hold_time);
    }
});
