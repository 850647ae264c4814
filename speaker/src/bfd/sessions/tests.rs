//! The shell's pure parts (demultiplexing, the TTL rule, control-message and address parsing,
//! discriminators) against tables, then real sessions over loopback addresses: 127.0.0.0/8
//! delivers locally with the TTL untouched, so a packet sent with 255 arrives with 255.

use super::socket::{
    peer_queue, receive_socket, recv_with_ttl, socket_addr_from_raw, ttl_from_control,
};
use super::*;
use crate::bfd::packet::{ControlPacket, PacketError, VERSION};
use crate::bfd::session::Discard;

const WORD: usize = size_of::<usize>();

fn discr(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn key(peer: &str, local: &str, multihop: bool) -> SessionKey {
    SessionKey {
        peer: peer.parse().unwrap(),
        local: local.parse().unwrap(),
        multihop,
        device: None,
    }
}

fn packet(state: State, mine: u32, yours: u32) -> ControlPacket {
    ControlPacket {
        version: VERSION,
        diag: Diag::NoDiagnostic,
        state,
        poll: false,
        fin: false,
        control_plane_independent: false,
        authentication_present: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discriminator: mine,
        your_discriminator: yours,
        desired_min_tx: 1_000_000,
        required_min_rx: 300_000,
        required_min_echo_rx: 0,
    }
}

/// Two single-hop sessions and one multihop session with a minimum TTL of 250.
fn demux() -> Demux {
    let mut d = Demux::default();
    assert!(d.insert(discr(7), key("10.0.0.2", "10.0.0.1", false), 254));
    assert!(d.insert(discr(8), key("fd00::2", "fd00::1", false), 254));
    assert!(d.insert(discr(9), key("10.9.0.2", "10.0.0.1", true), 250));
    d
}

#[test]
fn a_packet_with_your_discriminator_goes_to_that_session() {
    let d = demux();
    let p = packet(State::Up, 0xabc, 7);
    assert_eq!(
        d.dispatch(key("10.0.0.2", "10.0.0.1", false), &p.encode(), Some(255)),
        Dispatch::Deliver(discr(7), p)
    );
}

#[test]
fn a_packet_without_your_discriminator_goes_to_the_session_of_its_addresses() {
    let d = demux();
    let p = packet(State::Down, 0xabc, 0);
    for (arrival, want) in [
        (key("10.0.0.2", "10.0.0.1", false), 7),
        (key("fd00::2", "fd00::1", false), 8),
        (key("10.9.0.2", "10.0.0.1", true), 9),
    ] {
        assert_eq!(
            d.dispatch(arrival, &p.encode(), Some(255)),
            Dispatch::Deliver(discr(want), p),
            "{arrival:?}"
        );
    }
}

#[test]
fn packets_no_session_can_own_are_dropped_without_a_session() {
    let d = demux();
    let arrival = key("10.0.0.3", "10.0.0.1", false);
    assert_eq!(
        d.dispatch(arrival, &packet(State::Down, 1, 0).encode(), Some(255)),
        Dispatch::Drop(None, DropReason::NoSession)
    );
    assert_eq!(
        d.dispatch(arrival, &packet(State::Up, 1, 4242).encode(), Some(255)),
        Dispatch::Drop(None, DropReason::UnknownDiscriminator)
    );
    // The same addresses on the multihop port are another session.
    assert_eq!(
        d.dispatch(
            key("10.0.0.2", "10.0.0.1", true),
            &packet(State::Down, 1, 0).encode(),
            Some(255)
        ),
        Dispatch::Drop(None, DropReason::NoSession)
    );
}

#[test]
fn a_discriminator_arriving_from_another_address_is_dropped_in_its_session() {
    let d = demux();
    assert_eq!(
        d.dispatch(
            key("10.0.0.66", "10.0.0.1", false),
            &packet(State::Up, 1, 7).encode(),
            Some(255)
        ),
        Dispatch::Drop(Some(discr(7)), DropReason::AddressMismatch)
    );
}

#[test]
fn a_datagram_that_does_not_decode_is_counted_in_the_session_of_its_addresses() {
    let d = demux();
    let short = &packet(State::Down, 1, 0).encode()[..20];
    assert_eq!(
        d.dispatch(key("10.0.0.2", "10.0.0.1", false), short, Some(255)),
        Dispatch::Drop(
            Some(discr(7)),
            DropReason::Invalid(PacketError::Truncated { datagram_len: 20 })
        )
    );
    assert_eq!(
        d.dispatch(key("10.0.0.5", "10.0.0.1", false), short, Some(255)),
        Dispatch::Drop(
            None,
            DropReason::Invalid(PacketError::Truncated { datagram_len: 20 })
        )
    );
}

#[test]
fn single_hop_accepts_only_ttl_255_and_multihop_its_minimum() {
    for (multihop, minimum, received, want) in [
        (false, 254, Some(255), Ok(())),
        (
            false,
            254,
            Some(254),
            Err(DropReason::TtlNot255 { received: 254 }),
        ),
        (
            false,
            0,
            Some(1),
            Err(DropReason::TtlNot255 { received: 1 }),
        ),
        (false, 254, None, Err(DropReason::TtlUnknown)),
        (true, 250, Some(250), Ok(())),
        (true, 250, Some(255), Ok(())),
        (
            true,
            250,
            Some(249),
            Err(DropReason::TtlBelowMinimum {
                received: 249,
                minimum: 250,
            }),
        ),
        (true, 250, None, Err(DropReason::TtlUnknown)),
    ] {
        assert_eq!(
            ttl_check(multihop, minimum, received),
            want,
            "{multihop} {minimum} {received:?}"
        );
    }
}

#[test]
fn the_ttl_is_checked_against_the_rule_of_the_session_the_packet_belongs_to() {
    let d = demux();
    let p = packet(State::Down, 1, 0);
    assert_eq!(
        d.dispatch(key("10.0.0.2", "10.0.0.1", false), &p.encode(), Some(254)),
        Dispatch::Drop(Some(discr(7)), DropReason::TtlNot255 { received: 254 })
    );
    assert_eq!(
        d.dispatch(key("10.9.0.2", "10.0.0.1", true), &p.encode(), Some(251)),
        Dispatch::Deliver(discr(9), p)
    );
}

#[test]
fn a_session_is_refused_when_its_discriminator_or_addresses_are_taken() {
    let mut d = demux();
    assert!(!d.insert(discr(7), key("10.1.1.1", "10.0.0.1", false), 254));
    assert!(!d.insert(discr(70), key("10.0.0.2", "10.0.0.1", false), 254));
    d.remove(discr(7));
    assert!(!d.contains(&key("10.0.0.2", "10.0.0.1", false)));
    assert!(d.insert(discr(70), key("10.0.0.2", "10.0.0.1", false), 254));
}

#[test]
fn discriminators_are_nonzero_and_skip_those_taken() {
    let mut next = u32::MAX - 1;
    let taken = |d: NonZeroU32| d.get() == 1 || d.get() == 3;
    assert_eq!(allocate_discriminator(&mut next, taken).get(), u32::MAX);
    // Wraps past zero and the taken 1.
    assert_eq!(allocate_discriminator(&mut next, taken).get(), 2);
    assert_eq!(allocate_discriminator(&mut next, taken).get(), 4);
}

/// One control message as the kernel lays it out.
fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
    let header = (WORD + 8).div_ceil(WORD) * WORD;
    let len = header + data.len();
    let mut b = vec![0u8; len.div_ceil(WORD) * WORD];
    b[..WORD].copy_from_slice(&len.to_ne_bytes());
    b[WORD..WORD + 4].copy_from_slice(&level.to_ne_bytes());
    b[WORD + 4..WORD + 8].copy_from_slice(&kind.to_ne_bytes());
    b[header..header + data.len()].copy_from_slice(data);
    b
}

#[test]
fn the_ttl_and_the_hop_limit_are_read_from_their_control_messages() {
    let v4 = cmsg(libc::IPPROTO_IP, libc::IP_TTL, &255i32.to_ne_bytes());
    assert_eq!(ttl_from_control(&v4), Some(255));
    let v6 = cmsg(
        libc::IPPROTO_IPV6,
        libc::IPV6_HOPLIMIT,
        &64i32.to_ne_bytes(),
    );
    assert_eq!(ttl_from_control(&v6), Some(64));
    // Another message first (IP_TOS, one byte padded), then the TTL.
    let mut both = cmsg(libc::IPPROTO_IP, libc::IP_TOS, &[0x10]);
    both.extend(cmsg(libc::IPPROTO_IP, libc::IP_TTL, &254i32.to_ne_bytes()));
    assert_eq!(ttl_from_control(&both), Some(254));
}

#[test]
fn control_messages_that_do_not_fit_give_no_ttl() {
    assert_eq!(ttl_from_control(&[]), None);
    let v4 = cmsg(libc::IPPROTO_IP, libc::IP_TTL, &255i32.to_ne_bytes());
    // The message itself (header and the 4-byte TTL) must be whole; trailing padding may not be.
    let whole = usize::from_ne_bytes(v4[..WORD].try_into().unwrap());
    for cut in 0..whole {
        assert_eq!(ttl_from_control(&v4[..cut]), None, "cut at {cut}");
    }
    assert_eq!(ttl_from_control(&v4[..whole]), Some(255));
    let mut lying = v4.clone();
    lying[..WORD].copy_from_slice(&1000usize.to_ne_bytes());
    assert_eq!(ttl_from_control(&lying), None);
    let mut zero = v4;
    zero[..WORD].copy_from_slice(&0usize.to_ne_bytes());
    assert_eq!(ttl_from_control(&zero), None);
    // A TTL that is not a byte is not a TTL.
    let odd = cmsg(libc::IPPROTO_IP, libc::IP_TTL, &300i32.to_ne_bytes());
    assert_eq!(ttl_from_control(&odd), None);
}

#[test]
fn source_addresses_are_read_as_the_kernel_writes_them() {
    let mut v4 = vec![0u8; 16];
    v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    v4[2..4].copy_from_slice(&49152u16.to_be_bytes());
    v4[4..8].copy_from_slice(&[10, 99, 0, 2]);
    assert_eq!(
        socket_addr_from_raw(&v4),
        Some("10.99.0.2:49152".parse().unwrap())
    );
    let mut v6 = vec![0u8; 28];
    v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
    v6[2..4].copy_from_slice(&65535u16.to_be_bytes());
    v6[8..24].copy_from_slice(&"fd00:99::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(
        socket_addr_from_raw(&v6),
        Some("[fd00:99::2]:65535".parse().unwrap())
    );
    assert_eq!(socket_addr_from_raw(&v4[..7]), None);
    assert_eq!(socket_addr_from_raw(&[]), None);
    let mut unix = v4;
    unix[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
    assert_eq!(socket_addr_from_raw(&unix), None);
}

#[test]
fn every_drop_reason_has_its_own_metric_label() {
    let reasons = [
        DropReason::TtlNot255 { received: 1 },
        DropReason::TtlBelowMinimum {
            received: 1,
            minimum: 2,
        },
        DropReason::TtlUnknown,
        DropReason::Invalid(PacketError::ZeroDetectMult),
        DropReason::UnknownDiscriminator,
        DropReason::NoSession,
        DropReason::AddressMismatch,
        DropReason::Refused(Discard::NotOurDiscriminator {
            received: 1,
            ours: 2,
        }),
        DropReason::SendFailed,
    ];
    let labels: std::collections::HashSet<_> =
        reasons.iter().map(DropReason::metric_label).collect();
    assert_eq!(labels.len(), reasons.len());
}

fn peer(local: &str, remote: &str) -> BfdPeer {
    BfdPeer {
        local: local.parse().unwrap(),
        peer: remote.parse().unwrap(),
        multihop: false,
        device: None,
        config: SessionConfig::default(),
    }
}

/// Waits (real time) until the status satisfies `pred`; returns it.
async fn wait_for(
    handle: &BfdHandle,
    timeout: Duration,
    pred: impl Fn(&BfdStatus) -> bool,
) -> BfdStatus {
    let mut rx = handle.status();
    let got = tokio::time::timeout(timeout, async {
        loop {
            let now = rx.borrow_and_update().clone();
            if pred(&now) {
                return now;
            }
            // Counters change without waking: look again at least every 20 ms.
            let _ = tokio::time::timeout(Duration::from_millis(20), rx.changed()).await;
        }
    })
    .await;
    got.unwrap_or_else(|_| panic!("timed out; last status {:?}", handle.status().borrow()))
}

const UP_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn two_shells_on_loopback_addresses_come_up_and_see_each_others_admin_down() {
    let (a, b) = (BfdSessions::new(), BfdSessions::new());
    let ha = a.start(peer("127.0.0.2", "127.0.0.3")).unwrap();
    let hb = b.start(peer("127.0.0.3", "127.0.0.2")).unwrap();
    for h in [&ha, &hb] {
        // Up at the slow rate first; 3 x 300 ms once both Poll Sequences have run.
        let s = wait_for(h, UP_WITHIN, |s| {
            s.state == State::Up && s.detection_time == Some(Duration::from_millis(900))
        })
        .await;
        assert_eq!(s.remote_state, State::Up);
        assert!(s.up_since.is_some());
        assert!(s.dropped.is_empty(), "{:?}", s.dropped);
    }
    let started = Instant::now();
    ha.shutdown().await;
    assert!(started.elapsed() < Duration::from_millis(100));
    let s = wait_for(&hb, Duration::from_secs(3), |s| s.state == State::Down).await;
    assert_eq!(
        (s.remote_state, s.local_diag),
        (State::AdminDown, Diag::NeighborSignaledDown)
    );
    assert!(s.up_since.is_none());
    // B answers the AdminDown with a Down packet at once; A's session is gone by then (its
    // receiver runs on A's own `bfd` thread), so that packet may be counted as for an unknown
    // discriminator. Nothing else is unmatched.
    let a_unmatched = a.unmatched_drops();
    assert!(
        a_unmatched.keys().all(|r| *r == "unknown_discriminator")
            && a_unmatched.values().sum::<u64>() <= 1,
        "{a_unmatched:?}"
    );
    assert!(b.unmatched_drops().is_empty());
}

#[tokio::test]
async fn a_session_looped_back_to_itself_over_ipv6_reads_hop_limit_255_and_comes_up() {
    // Its own packets come back to it: Down, then Init with its own discriminator, then Up.
    let shell = BfdSessions::new();
    let h = shell.start(peer("::1", "::1")).unwrap();
    let s = wait_for(&h, UP_WITHIN, |s| s.state == State::Up).await;
    assert!(s.dropped.is_empty(), "{:?}", s.dropped);
    assert!(s.packets_received >= 2);
}

#[tokio::test]
async fn a_single_hop_packet_with_ttl_254_is_dropped_and_counted_in_its_session() {
    let shell = BfdSessions::new();
    let h = shell
        .start(BfdPeer {
            config: SessionConfig {
                passive: true,
                ..SessionConfig::default()
            },
            ..peer("127.0.0.4", "127.0.0.5")
        })
        .unwrap();
    let sender = std::net::UdpSocket::bind("127.0.0.5:0").unwrap();
    let down = packet(State::Down, 0x5555, 0).encode();
    sender.set_ttl(254).unwrap();
    sender.send_to(&down, "127.0.0.4:3784").unwrap();
    let s = wait_for(&h, Duration::from_secs(3), |s| !s.dropped.is_empty()).await;
    assert_eq!(s.dropped.get("ttl_not_255"), Some(&1));
    assert_eq!((s.state, s.packets_received), (State::Down, 0));
    // The same packet with TTL 255 reaches the session.
    sender.set_ttl(255).unwrap();
    sender.send_to(&down, "127.0.0.4:3784").unwrap();
    let s = wait_for(&h, Duration::from_secs(3), |s| s.state == State::Init).await;
    assert_eq!(s.packets_received, 1);
    // The shell's totals (the drop metric) keep the session's drops once it has ended.
    assert_eq!(shell.drops().get("ttl_not_255"), Some(&1));
    h.shutdown().await;
    assert_eq!(shell.drops().get("ttl_not_255"), Some(&1));
}

#[tokio::test]
async fn a_datagram_from_an_address_without_a_session_is_counted_as_unmatched() {
    let shell = BfdSessions::new();
    let _h = shell.start(peer("127.0.0.6", "127.0.0.7")).unwrap();
    let sender = std::net::UdpSocket::bind("127.0.0.8:0").unwrap();
    sender.set_ttl(255).unwrap();
    sender
        .send_to(&packet(State::Down, 1, 0).encode(), "127.0.0.6:3784")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while shell.unmatched_drops().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shell.unmatched_drops().get("no_session"), Some(&1));
}

#[tokio::test]
async fn a_second_session_with_the_same_addresses_is_refused() {
    let shell = BfdSessions::new();
    let _h = shell.start(peer("127.0.0.9", "127.0.0.10")).unwrap();
    let err = shell.start(peer("127.0.0.9", "127.0.0.10")).unwrap_err();
    assert_eq!(err.metric_label(), "duplicate_session");
    let err = shell.start(peer("127.0.0.9", "::1")).unwrap_err();
    assert_eq!(err.metric_label(), "address_family_mismatch");
    let err = shell.start(peer("fe80::1", "fe80::2")).unwrap_err();
    assert_eq!(err.metric_label(), "link_local");
}

/// What is waiting on `socket`: each datagram's payload and source.
fn queued(socket: &std::net::UdpSocket) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    loop {
        match recv_with_ttl(socket.as_raw_fd(), &mut buf) {
            Ok(d) => got.push((buf[..d.len].to_vec(), d.source)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
            Err(e) => panic!("reading the queue: {e}"),
        }
    }
}

#[test]
fn a_sessions_own_queue_takes_its_peers_datagrams_and_the_shared_receiver_the_rest() {
    let local: IpAddr = "127.0.0.11".parse().unwrap();
    let shared = receive_socket(local, false, None, None).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.12:0").unwrap();
    // The same address as the peer, another port: a flood from the peer's own host.
    let other = std::net::UdpSocket::bind("127.0.0.12:0").unwrap();
    let own = peer_queue(local, false, None, peer.local_addr().unwrap()).unwrap();
    let to = SocketAddr::new(local, SINGLE_HOP_PORT);
    for i in 0..3u8 {
        other.send_to(&[b'x', i], to).unwrap();
        peer.send_to(&[b'p', i], to).unwrap();
    }
    // Loopback queues a datagram before send_to returns.
    let theirs = other.local_addr().unwrap();
    let peers = peer.local_addr().unwrap();
    assert_eq!(
        queued(&own),
        (0..3u8).map(|i| (vec![b'p', i], peers)).collect::<Vec<_>>()
    );
    assert_eq!(
        queued(&shared),
        (0..3u8)
            .map(|i| (vec![b'x', i], theirs))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_receiver_is_refused_on_a_port_another_socket_holds() {
    let local: IpAddr = "127.0.0.13".parse().unwrap();
    let _first = receive_socket(local, false, None, None).unwrap();
    let err = receive_socket(local, false, None, None).unwrap_err();
    assert_eq!(err.metric_label(), "bind");
    // A session's own queue joins the port.
    let peer: SocketAddr = "127.0.0.14:50000".parse().unwrap();
    assert!(peer_queue(local, false, None, peer).is_ok());
}
