//! A whole session fed arbitrary bytes in arbitrary chunks, from OpenSent and from Established:
//! whatever arrives, the session answers without panicking.
#![no_main]

use std::net::Ipv4Addr;
use std::time::Instant;

use ferrolb_speaker::bgp::open::{Capability, Open};
use ferrolb_speaker::bgp::wire::{Family, encode_keepalive};
use ferrolb_speaker::bgp::{Advertisement, Input, PeerConfig, Session};
use libfuzzer_sys::fuzz_target;

fn session(established: bool) -> Session {
    let mut cfg = PeerConfig::new("fuzz", 64512, 64513, "10.99.0.2".parse().unwrap());
    cfg.next_hop_v6 = Some("fd00:99::1".parse().unwrap());
    let mut s = Session::new(cfg);
    let now = Instant::now();
    s.handle(
        now,
        Input::SetAdvertisements(vec![Advertisement::new("10.99.1.1/32".parse().unwrap())]),
    );
    s.handle(now, Input::Start);
    s.handle(
        now,
        Input::Connected {
            local: "10.99.0.1:40000".parse().unwrap(),
            remote: "10.99.0.2:179".parse().unwrap(),
            other_family: None,
        },
    );
    if established {
        let mut b = Vec::new();
        Open {
            my_as: 64513,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(10, 99, 0, 2),
            capabilities: vec![
                Capability::Multiprotocol(Family::IPV4_UNICAST),
                Capability::Multiprotocol(Family::IPV6_UNICAST),
                Capability::FourOctetAs(64513),
            ],
        }
        .encode(&mut b);
        encode_keepalive(&mut b);
        s.handle(now, Input::Received(b));
    }
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split).max(1);
    for established in [false, true] {
        let mut s = session(established);
        for part in data.chunks(chunk) {
            s.handle(Instant::now(), Input::Received(part.to_vec()));
        }
    }
});
