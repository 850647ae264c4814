//! BFD Control packets from the network: decoding never panics nor reads past the datagram,
//! whatever decodes encodes back to the same packet, and a session fed it never panics and only
//! sends packets that decode.
#![no_main]

use ferrolb_speaker::bfd::{Output, Session, SessionConfig, decode};
use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = decode(data) else {
        return;
    };
    assert_eq!(decode(&packet.encode()), Ok(packet));

    let now = Instant::now();
    let mut session = Session::new(NonZeroU32::MIN, SessionConfig::default(), now);
    let mut outputs = session.receive(&packet, now);
    outputs.extend(session.poll(now + Duration::from_secs(1)));
    for output in outputs {
        if let Output::Send(sent) = output {
            assert_eq!(decode(&sent.encode()), Ok(sent));
        }
    }
});
