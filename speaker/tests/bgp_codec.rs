//! Codec tests as (bytes, struct) pairs, from messages recorded from BIRD, FRR and GoBGP.

mod bgp_support;

use std::net::Ipv4Addr;

use bgp_support::{all, load};
use ferrolb_speaker::bgp::message::{Message, decode_message};
use ferrolb_speaker::bgp::open::Capability;
use ferrolb_speaker::bgp::update_check::UpdateSummary;
use ferrolb_speaker::bgp::wire::{DecodeContext, Family, RouteRefresh};

const AS4: DecodeContext = DecodeContext {
    four_octet_as: true,
};

fn decode_one(bytes: &[u8]) -> Message {
    let (m, used) = decode_message(bytes, AS4)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("complete message");
    assert_eq!(used, bytes.len());
    m
}

fn daemon_messages(name: &str) -> Vec<Message> {
    load(name)
        .messages
        .iter()
        .filter(|m| m.from_daemon)
        .map(|m| decode_one(&m.bytes))
        .collect()
}

#[test]
fn every_message_a_daemon_sent_decodes_without_error() {
    for v in all() {
        if v.addpath {
            // We never announce ADD-PATH receive, so real peers never send us path identifiers.
            continue;
        }
        for m in v.messages.iter().filter(|m| m.from_daemon) {
            let r = decode_message(&m.bytes, AS4);
            assert!(
                matches!(r, Ok(Some((_, n))) if n == m.bytes.len()),
                "{}: {:?}",
                v.name,
                r
            );
        }
    }
}

#[test]
fn birds_open_decodes_with_graceful_restart_and_unknown_capabilities_kept_as_codes() {
    let Message::Open(open) = &daemon_messages("bird-open-plain")[0] else {
        panic!("not an OPEN")
    };
    assert_eq!(open.my_as, 64513);
    assert_eq!(open.hold_time, 240);
    assert_eq!(open.bgp_id, Ipv4Addr::new(10, 98, 0, 2));
    assert_eq!(
        open.capabilities,
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::GracefulRestart {
                restarted: false,
                restart_time: 120,
                families: vec![]
            },
            Capability::FourOctetAs(64513),
            Capability::Unrecognized(70),
            Capability::Unrecognized(71),
        ]
    );
}

#[test]
fn frrs_open_with_one_parameter_per_capability_and_fqdn_decodes() {
    let Message::Open(open) = &daemon_messages("frr-open-fqdn")[0] else {
        panic!("not an OPEN")
    };
    assert_eq!(open.asn(), 64513);
    assert_eq!(open.hold_time, 180);
    assert_eq!(
        open.families(),
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
    assert!(open.has(|c| *c == Capability::Unrecognized(73)));
    assert!(open.has(|c| matches!(
        c,
        Capability::GracefulRestart {
            restarted: true,
            restart_time: 120,
            ..
        }
    )));
}

#[test]
fn gobgps_open_with_graceful_restart_lists_both_families() {
    let Message::Open(open) = &daemon_messages("gobgp-open-gr")[0] else {
        panic!("not an OPEN")
    };
    assert!(open.has(|c| *c
        == Capability::GracefulRestart {
            restarted: false,
            restart_time: 120,
            families: vec![(Family::IPV4_UNICAST, false), (Family::IPV6_UNICAST, false)],
        }));
}

#[test]
fn a_four_octet_asn_travels_as_as_trans_plus_the_capability() {
    for d in ["bird", "frr", "gobgp"] {
        let Message::Open(open) = &daemon_messages(&format!("{d}-open-as4"))[0] else {
            panic!("not an OPEN")
        };
        assert_eq!(open.my_as, 23456, "{d}");
        assert_eq!(open.asn(), 4_200_000_002, "{d}");
    }
}

#[test]
fn daemon_updates_are_counted_announcements_withdrawals_and_end_of_rib() {
    let updates: Vec<UpdateSummary> = daemon_messages("bird-updates")
        .into_iter()
        .filter_map(|m| match m {
            Message::Update(s) => Some(s),
            _ => None,
        })
        .collect();
    let announced: u32 = updates.iter().map(|s| s.announced).sum();
    let withdrawn: u32 = updates.iter().map(|s| s.withdrawn).sum();
    assert_eq!((announced, withdrawn), (4, 2));
    // BIRD ends each family's initial batch with an End-of-RIB: an UPDATE carrying nothing.
    assert!(updates.contains(&UpdateSummary::default()));
}

#[test]
fn route_refresh_requests_decode_with_their_family() {
    let rr: Vec<RouteRefresh> = daemon_messages("frr-route-refresh")
        .into_iter()
        .filter_map(|m| match m {
            Message::RouteRefresh(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(
        rr,
        vec![
            RouteRefresh {
                family: Family::IPV4_UNICAST,
                subtype: 0
            },
            RouteRefresh {
                family: Family::IPV6_UNICAST,
                subtype: 0
            }
        ]
    );
}

#[test]
fn a_shutdown_communication_is_read_from_every_daemons_cease() {
    for d in ["bird", "frr", "gobgp"] {
        let n = daemon_messages(&format!("{d}-notif-admin-shutdown-message"))
            .into_iter()
            .find_map(|m| match m {
                Message::Notification(n) => Some(n),
                _ => None,
            })
            .expect("a NOTIFICATION");
        assert_eq!((n.code, n.subcode), (6, 2), "{d}");
        assert_eq!(n.shutdown_message().as_deref(), Some("maintenance window"));
    }
}

#[test]
fn every_recorded_notification_decodes_to_its_code_subcode_and_data() {
    for v in all() {
        let Some((code, subcode, data)) = &v.notification else {
            continue;
        };
        let n = v
            .messages
            .iter()
            .filter(|m| m.from_daemon)
            .find_map(|m| match decode_one(&m.bytes) {
                Message::Notification(n) => Some(n),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{}: no NOTIFICATION", v.name));
        assert_eq!(
            (n.code, n.subcode, &n.data),
            (*code, *subcode, data),
            "{}",
            v.name
        );
    }
}
