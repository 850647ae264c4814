//! Gossip datagrams: unauthenticated bytes never reach the SWIM core, and authenticated but
//! arbitrary payloads (a peer holding the key, or a bug) never panic it nor add a member that
//! did not send a well-formed message.
#![no_main]

use ferrolb_speaker::membership::auth::{self, GossipKey};
use ferrolb_speaker::membership::{Membership, MembershipConfig, SpeakerId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = GossipKey::new(vec![7u8; 32]).unwrap();
    let me = SpeakerId {
        node: "fuzz".into(),
        addr: "10.99.0.1:7946".parse().unwrap(),
        generation: 1,
    };
    let mut m = Membership::new(me, key.clone(), &MembershipConfig::default(), 1);
    // As received: almost always refused by authentication.
    let _ = m.handle_datagram(data);
    assert_eq!(m.counters().protocol_errors, 0);
    // As if a key holder had sent it.
    let stamp = auth::Stamp {
        boot: 2,
        seq: 1,
        time_ms: 0,
    };
    let _ = m.handle_datagram(&auth::seal_on(&key, auth::Channel::Swim, stamp, data));
    assert!(m.live_nodes().contains("fuzz"));
});
