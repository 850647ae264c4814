//! Ethernet frames from the segment: parsing never panics nor reads past the frame, and every
//! answer built from what parses is well formed (valid ICMPv6 checksum, our MAC as source).
//! Reading a frame as another host's announcement never panics either, and a frame is never
//! both a question and an announcement.
#![no_main]

use ferrolb_speaker::l2::frame::{self, MacAddr, Request};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv6Addr;

const OURS: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x42]);

fuzz_target!(|data: &[u8]| {
    if let Some(a) = frame::announcement(data) {
        assert_eq!(&a.from.0[..], &data[6..12]);
        assert!(frame::parse(data).is_err());
    }
    match frame::parse(data) {
        Ok(Request::Arp(req)) => {
            let reply = frame::arp_reply(&req, OURS);
            assert_eq!(&reply[6..12], &OURS.0);
            assert_eq!(&reply[28..32], &req.target_ip.octets());
        }
        Ok(Request::Ns(ns)) => {
            let na = frame::neighbor_advertisement(&ns, OURS);
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&na[22..38]).unwrap());
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&na[38..54]).unwrap());
            assert_eq!(src, ns.target);
            assert_eq!(frame::icmpv6_checksum(src, dst, &na[54..]), 0);
        }
        Err(_) => {}
    }
});
