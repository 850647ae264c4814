//! A scripted hostile peer: a TCP listener on the loopback that lets the real [`BgpSpeaker`]
//! connect, then sends each class of malformed message. Where RFC 7606 still resets the session
//! the speaker must answer with the right NOTIFICATION, close and reconnect after its back-off;
//! where it does not (treat-as-withdraw, attribute discard) the session must stay up and the
//! UPDATE be counted; and memory stays flat throughout.

use std::net::Ipv4Addr;
use std::time::Duration;

use ferrolb_speaker::bgp::open::{Capability, Open};
use ferrolb_speaker::bgp::wire::Family;
use ferrolb_speaker::bgp::{BgpSpeaker, PeerConfig, PeerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const OUR_AS: u32 = 64512;
const PEER_AS: u32 = 64513;
const STEP: Duration = Duration::from_secs(5);

fn header(len: u16, ty: u8) -> Vec<u8> {
    let mut v = vec![0xff; 16];
    v.extend_from_slice(&len.to_be_bytes());
    v.push(ty);
    v
}

fn open_bytes(version: u8, hold: u16) -> Vec<u8> {
    let mut b = vec![];
    Open {
        my_as: PEER_AS as u16,
        hold_time: hold,
        bgp_id: Ipv4Addr::new(10, 99, 0, 2),
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::FourOctetAs(PEER_AS),
        ],
    }
    .encode(&mut b);
    b[19] = version;
    b
}

fn update(body: &[u8]) -> Vec<u8> {
    let mut b = header(19 + body.len() as u16, 2);
    b.extend_from_slice(body);
    b
}

/// Reads one message as the speaker framed it.
async fn read_message(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut h = [0u8; 19];
    s.read_exact(&mut h).await.ok()?;
    let len = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let mut body = vec![0u8; len.saturating_sub(19)];
    s.read_exact(&mut body).await.ok()?;
    let mut m = h.to_vec();
    m.extend(body);
    Some(m)
}

/// Reads until a NOTIFICATION; returns its code, subcode and data.
async fn read_notification(s: &mut TcpStream) -> (u8, u8, Vec<u8>) {
    loop {
        let m = timeout(STEP, read_message(s))
            .await
            .expect("the speaker answers in time")
            .expect("the speaker sends a NOTIFICATION before closing");
        if m[18] == 3 {
            return (m[19], m[20], m[21..].to_vec());
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Stage {
    /// The malformed message replaces the peer's OPEN.
    OpenSent,
    /// The malformed message follows a normal OPEN and KEEPALIVE.
    Established,
}

struct Case {
    name: &'static str,
    stage: Stage,
    bytes: Vec<u8>,
    expected: (u8, u8, Vec<u8>),
}

const ORIGIN_OK: [u8; 4] = [0x40, 1, 1, 0];
const AS_PATH_OK: [u8; 9] = [0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x01];
const NEXT_HOP_OK: [u8; 7] = [0x40, 3, 4, 10, 99, 0, 2];

/// An UPDATE body with these attributes (the total length counting exactly them) and NLRI.
fn update_body(attrs: &[&[u8]], nlri: &[u8]) -> Vec<u8> {
    let attrs = attrs.concat();
    let mut b = vec![0, 0];
    b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    b.extend(attrs);
    b.extend_from_slice(nlri);
    b
}

/// MP_REACH_NLRI for IPv6 unicast with next hop fd00::1 and no NLRI.
const MP_REACH_V6: [u8; 24] = [
    0x80, 14, 21, 0, 2, 1, 16, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
];

fn cases() -> Vec<Case> {
    let mut bad_marker = header(19, 4);
    bad_marker[15] = 0;
    let mut too_long = header(4097, 2);
    too_long.extend(vec![0u8; 100]);
    vec![
        Case {
            name: "bad marker",
            stage: Stage::Established,
            bytes: bad_marker,
            expected: (1, 1, vec![]),
        },
        Case {
            name: "length 18",
            stage: Stage::Established,
            bytes: header(18, 4),
            expected: (1, 2, vec![0, 18]),
        },
        Case {
            name: "length 4097",
            stage: Stage::Established,
            bytes: too_long,
            expected: (1, 2, vec![0x10, 0x01]),
        },
        Case {
            name: "bad version",
            stage: Stage::OpenSent,
            bytes: open_bytes(3, 90),
            expected: (2, 1, vec![0, 4]),
        },
        Case {
            name: "bad hold time",
            stage: Stage::OpenSent,
            bytes: open_bytes(4, 1),
            expected: (2, 6, vec![0, 1]),
        },
        Case {
            name: "unknown type",
            stage: Stage::Established,
            bytes: header(19, 9),
            expected: (1, 3, vec![9]),
        },
        Case {
            name: "truncated update (attribute length past the end)",
            stage: Stage::Established,
            bytes: update(&[0, 0, 0, 20, 0x40, 1, 1, 0]),
            expected: (3, 1, vec![]),
        },
        Case {
            name: "inconsistent update (withdrawn length past the end)",
            stage: Stage::Established,
            bytes: update(&[0, 40, 24, 10, 99, 1, 0, 0]),
            expected: (3, 1, vec![]),
        },
        Case {
            name: "prefix longer than 32 bits in the NLRI (RFC 7606 5.3)",
            stage: Stage::Established,
            bytes: update(&update_body(
                &[&ORIGIN_OK, &AS_PATH_OK, &NEXT_HOP_OK],
                &[33, 10, 99, 1, 1, 1],
            )),
            expected: (3, 10, vec![]),
        },
        Case {
            name: "MP_REACH_NLRI twice (RFC 7606 3 g)",
            stage: Stage::Established,
            bytes: update(&update_body(
                &[&ORIGIN_OK, &AS_PATH_OK, &MP_REACH_V6, &MP_REACH_V6],
                &[],
            )),
            expected: (3, 1, vec![]),
        },
    ]
}

/// Malformed UPDATEs RFC 7606 keeps the session for, with the handling each must be counted
/// under.
fn kept_cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let nlri = [24u8, 10, 99, 200];
    let withdraw = "treat_as_withdraw";
    let discard = "attribute_discard";
    vec![
        (
            "AS_PATH with a trailing byte",
            update(&update_body(
                &[
                    &ORIGIN_OK,
                    &[0x40, 2, 7, 2, 1, 0, 0, 0xfc, 0x01, 0],
                    &NEXT_HOP_OK,
                ],
                &nlri,
            )),
            withdraw,
        ),
        (
            "ORIGIN with a trailing byte",
            update(&update_body(&[&[0x40, 1, 2, 0, 0]], &[])),
            withdraw,
        ),
        (
            "NLRI without NEXT_HOP",
            update(&update_body(&[&ORIGIN_OK, &AS_PATH_OK], &nlri)),
            withdraw,
        ),
        (
            "MED running past the path attributes",
            update(&update_body(
                &[&ORIGIN_OK, &AS_PATH_OK, &NEXT_HOP_OK, &[0x80, 4, 200, 0, 0]],
                &nlri,
            )),
            withdraw,
        ),
        (
            "COMMUNITIES of 5 bytes",
            update(&update_body(
                &[
                    &ORIGIN_OK,
                    &AS_PATH_OK,
                    &NEXT_HOP_OK,
                    &[0xc0, 8, 5, 0, 0, 0, 0, 0],
                ],
                &nlri,
            )),
            withdraw,
        ),
        (
            "ATOMIC_AGGREGATE with a value",
            update(&update_body(
                &[&ORIGIN_OK, &AS_PATH_OK, &NEXT_HOP_OK, &[0x40, 6, 1, 0]],
                &nlri,
            )),
            discard,
        ),
        (
            "ORIGIN twice",
            update(&update_body(
                &[&ORIGIN_OK, &AS_PATH_OK, &NEXT_HOP_OK, &ORIGIN_OK],
                &nlri,
            )),
            discard,
        ),
    ]
}

/// The scripted peer `name` on the loopback `port`, retried after `retry` (doubled per failure).
fn peer_config(name: &str, port: u16, retry: Duration) -> PeerConfig {
    let mut cfg = PeerConfig::new(name, OUR_AS, PEER_AS, "127.0.0.1".parse().unwrap());
    cfg.peer_port = port;
    cfg.connect_retry = retry;
    cfg.ebgp_multihop = true;
    cfg
}

async fn start(port: u16, retry: Duration) -> (BgpSpeaker, PeerId) {
    let cfg = peer_config("hostile", port, retry);
    let id = cfg.id.clone();
    let speaker = BgpSpeaker::new();
    speaker.set_peers(vec![cfg]);
    (speaker, id)
}

/// Accepts the speaker's next connection and takes it to the requested stage.
async fn accept(listener: &TcpListener, stage: Stage) -> TcpStream {
    let (s, _) = timeout(STEP, listener.accept())
        .await
        .expect("the speaker reconnects")
        .unwrap();
    handshake(s, stage).await
}

/// Takes a connection the speaker opened to the requested stage.
async fn handshake(mut s: TcpStream, stage: Stage) -> TcpStream {
    let open = timeout(STEP, read_message(&mut s)).await.unwrap().unwrap();
    assert_eq!(open[18], 1, "the speaker starts with an OPEN");
    if let Stage::Established = stage {
        s.write_all(&open_bytes(4, 90)).await.unwrap();
        s.write_all(&header(19, 4)).await.unwrap();
        // Our KEEPALIVE, then End-of-RIB for both families.
        for _ in 0..3 {
            timeout(STEP, read_message(&mut s)).await.unwrap().unwrap();
        }
    }
    s
}

async fn expect_closed(s: &mut TcpStream) {
    let mut rest = [0u8; 64];
    let n = timeout(STEP, s.read(&mut rest))
        .await
        .expect("the speaker closes");
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "connection closed after the NOTIFICATION"
    );
}

#[tokio::test]
async fn every_malformed_message_class_gets_its_notification_and_a_reconnect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Each ended session doubles the back-off (none lasts STABLE_SESSION): 1 ms doubled ten
    // times stays within the step.
    let (speaker, id) = start(port, Duration::from_millis(1)).await;
    for case in cases() {
        let mut s = accept(&listener, case.stage).await;
        s.write_all(&case.bytes).await.unwrap();
        let got = read_notification(&mut s).await;
        assert_eq!(got, case.expected, "{}", case.name);
        expect_closed(&mut s).await;
    }
    // Still alive: one more well-behaved session reaches Established.
    let _s = accept(&listener, Stage::Established).await;
    let status = speaker.session_states()[&id].clone();
    assert_eq!(status.notifications_sent.values().sum::<u64>(), 10);
    speaker.shutdown().await;
}

#[tokio::test]
async fn malformed_updates_that_rfc_7606_survives_keep_the_session_and_are_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (speaker, id) = start(port, Duration::from_millis(20)).await;
    let mut s = accept(&listener, Stage::Established).await;
    let cases = kept_cases();
    for (_, bytes, _) in &cases {
        s.write_all(bytes).await.unwrap();
    }
    // A KEEPALIVE after them: once it is read, every UPDATE before it was.
    s.write_all(&header(19, 4)).await.unwrap();
    let mut want = std::collections::BTreeMap::new();
    for (_, _, handling) in &cases {
        *want.entry(*handling).or_insert(0u64) += 1;
    }
    let deadline = tokio::time::Instant::now() + STEP;
    let status = loop {
        let status = speaker.session_states()[&id].clone();
        if status.malformed_updates == want {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "counted {:?}, want {want:?} ({:?})",
            status.malformed_updates,
            cases.iter().map(|c| c.0).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.state, ferrolb_speaker::bgp::State::Established);
    assert_eq!(status.established_count, 1, "never reset");
    assert!(status.notifications_sent.is_empty(), "{status:?}");
    assert!(status.last_malformed.is_some());
    speaker.shutdown().await;
}

#[tokio::test]
async fn shutting_down_sends_cease_administrative_shutdown() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (speaker, _) = start(port, Duration::from_millis(20)).await;
    let mut s = accept(&listener, Stage::Established).await;
    speaker.shutdown().await;
    assert_eq!(read_notification(&mut s).await, (6, 2, vec![]));
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[tokio::test]
async fn memory_stays_flat_across_many_hostile_sessions() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port: u16 = listener.local_addr().unwrap().port();
    let (speaker, _) = start(port, Duration::from_millis(5)).await;
    // The same peer ending session after session is retried ever later (STABLE_SESSION): each
    // round configures it anew, under another name, as a fresh session that connects at once.
    let mut round = 0;
    let mut run = async |rounds: usize| {
        for i in 0..rounds {
            round += 1;
            let cfg = peer_config(&format!("hostile-{round}"), port, Duration::from_millis(5));
            speaker.set_peers(vec![cfg]);
            let mut s = accept(&listener, Stage::Established).await;
            // A header announcing a full-size UPDATE, then garbage in bulk: the speaker may keep
            // one message's worth, never the flood.
            let mut flood = header(4096, 2);
            flood.extend(vec![0xee; 256 * 1024]);
            let _ = s.write_all(&flood).await;
            let (code, _, _) = read_notification(&mut s).await;
            assert_eq!(code, 3, "round {i}");
        }
    };
    run(20).await;
    let before = rss_kib();
    run(100).await;
    let after = rss_kib();
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 100 hostile sessions"
    );
    speaker.shutdown().await;
}

/// Reads messages until an UPDATE; fails after [`STEP`].
async fn read_update(s: &mut TcpStream) -> Vec<u8> {
    loop {
        let m = timeout(STEP, read_message(s))
            .await
            .expect("the speaker sends an UPDATE in time")
            .expect("the connection stays open");
        if m[18] == 2 {
            return m;
        }
    }
}

/// Writes `count` distinct IPv4 /32 routes (10.0.0.0 onwards), packed into full UPDATEs.
async fn send_routes(s: &mut TcpStream, first: u32, count: u32) {
    let attrs = [&ORIGIN_OK[..], &AS_PATH_OK, &NEXT_HOP_OK].concat();
    let per_message = (4096 - 19 - 4 - attrs.len()) / 5;
    let mut next = first;
    let end = first + count;
    let mut buf = Vec::with_capacity(64 * 4096);
    while next < end {
        let n = (end - next).min(per_message as u32);
        let mut nlri = Vec::with_capacity(5 * n as usize);
        for a in next..next + n {
            nlri.push(32);
            nlri.extend_from_slice(&(0x0a00_0000 + a).to_be_bytes());
        }
        buf.extend(update(&update_body(&[&attrs], &nlri)));
        next += n;
        if buf.len() > 60 * 4096 {
            s.write_all(&buf).await.unwrap();
            buf.clear();
        }
    }
    s.write_all(&buf).await.unwrap();
}

/// A ROUTE-REFRESH for IPv4 unicast: the speaker answers it with its routes, after reading
/// everything sent before it.
async fn round_trip(s: &mut TcpStream) {
    let mut rr = header(23, 5);
    rr.extend_from_slice(&[0, 1, 0, 1]);
    s.write_all(&rr).await.unwrap();
    read_update(s).await;
}

#[tokio::test]
async fn a_peer_that_sends_a_million_routes_keeps_its_session_costs_no_memory_and_disturbs_no_other()
 {
    let hostile = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let quiet = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = |name: &str, port: u16| peer_config(name, port, Duration::from_millis(20));
    let speaker = BgpSpeaker::new();
    speaker.set_peers(vec![
        peer("hostile", hostile.local_addr().unwrap().port()),
        peer("quiet", quiet.local_addr().unwrap().port()),
    ]);
    let mut h = accept(&hostile, Stage::Established).await;
    let _q = accept(&quiet, Stage::Established).await;
    let ours = ferrolb_speaker::bgp::Advertisement::new("10.99.1.1/32".parse().unwrap());
    speaker.set_advertisements(&PeerId("hostile".into()), vec![ours]);
    read_update(&mut h).await;
    // Warm up (buffers, allocator), then a million routes: an announce-only speaker keeps none.
    send_routes(&mut h, 0, 20_000).await;
    round_trip(&mut h).await;
    let before = rss_kib();
    let started = std::time::Instant::now();
    send_routes(&mut h, 20_000, 1_000_000).await;
    round_trip(&mut h).await;
    let took = started.elapsed();
    let after = rss_kib();
    eprintln!(
        "1,000,000 routes read in {took:?}; RSS {before} KiB before, {after} KiB after (the \
         test process: speaker, peer and harness)"
    );
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB over a million routes"
    );
    let states = speaker.session_states();
    for (id, status) in &states {
        assert_eq!(
            status.state,
            ferrolb_speaker::bgp::State::Established,
            "{id}"
        );
        assert_eq!(status.established_count, 1, "{id}: never reset");
        assert!(status.notifications_sent.is_empty(), "{id}: {status:?}");
    }
    speaker.shutdown().await;
}

#[tokio::test]
async fn a_peer_that_drops_every_session_it_accepts_is_retried_ever_later_and_disturbs_no_other() {
    let flapping = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let quiet = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = |name: &str, port: u16| peer_config(name, port, Duration::from_millis(10));
    let speaker = BgpSpeaker::new();
    speaker.set_peers(vec![
        peer("flapping", flapping.local_addr().unwrap().port()),
        peer("quiet", quiet.local_addr().unwrap().port()),
    ]);
    let _q = accept(&quiet, Stage::Established).await;
    // Each session reaches Established and is dropped at once: the speaker waits 10 ms, then
    // twice as long each time (none lasted STABLE_SESSION).
    let mut gaps = vec![];
    let mut dropped_at = None;
    for _ in 0..8 {
        let s = accept(&flapping, Stage::Established).await;
        if let Some(at) = dropped_at {
            gaps.push(tokio::time::Instant::now().duration_since(at));
        }
        drop(s);
        dropped_at = Some(tokio::time::Instant::now());
    }
    let ms: Vec<u128> = gaps.iter().map(Duration::as_millis).collect();
    eprintln!("reconnects after {ms:?} ms");
    for (i, gap) in gaps.iter().enumerate() {
        // At least 10 ms doubled once per earlier drop (a loaded machine only adds to it).
        let want = Duration::from_millis(10 << i);
        assert!(
            *gap >= want,
            "reconnect {i} after {gap:?}, before the back-off of {want:?}: {ms:?}"
        );
    }
    let quiet_status = speaker.session_states()[&PeerId("quiet".into())].clone();
    assert_eq!(quiet_status.state, ferrolb_speaker::bgp::State::Established);
    assert_eq!(
        quiet_status.established_count, 1,
        "the other session never reset"
    );
    speaker.shutdown().await;
}

/// How long [`a_peer_that_flaps_every_second_is_retried_with_back_off_and_memory_stays_under_64_mib`]
/// runs: `FERROLB_FLAP_SECONDS`, 20 s unless set. Ten minutes, as an operator's bad router would:
/// `FERROLB_FLAP_SECONDS=600 cargo test -p ferrolb-speaker --test bgp_hostile flaps -- --nocapture`.
fn flap_duration() -> Duration {
    let seconds = std::env::var("FERROLB_FLAP_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(seconds)
}

#[tokio::test]
async fn a_peer_that_flaps_every_second_is_retried_with_back_off_and_memory_stays_under_64_mib() {
    const LIMIT_KIB: u64 = 64 * 1024;
    let flapping = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let quiet = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = Duration::from_millis(10);
    let peer = |name: &str, port: u16| peer_config(name, port, base);
    let speaker = BgpSpeaker::new();
    // Both peers are to hold 1,000 routes, so that every new session has a table to send.
    let routes: Vec<_> = (0..1000u32)
        .map(|i| {
            let a = Ipv4Addr::from(0x0a62_0000 + i);
            ferrolb_speaker::bgp::Advertisement::new(format!("{a}/32").parse().unwrap())
        })
        .collect();
    speaker.set_advertisements(&PeerId("flapping".into()), routes.clone());
    speaker.set_advertisements(&PeerId("quiet".into()), routes);
    speaker.set_peers(vec![
        peer("flapping", flapping.local_addr().unwrap().port()),
        peer("quiet", quiet.local_addr().unwrap().port()),
    ]);
    // The quiet peer stays a good one for the whole run: it reads what it is sent and keeps the
    // session alive (its hold time is 90 s).
    let (mut quiet_rx, mut quiet_tx) = accept(&quiet, Stage::Established).await.into_split();
    let quiet_reader =
        tokio::spawn(async move { tokio::io::copy(&mut quiet_rx, &mut tokio::io::sink()).await });
    let quiet_keepalive = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            if quiet_tx.write_all(&header(19, 4)).await.is_err() {
                return;
            }
        }
    });

    // RSS every second, from a task of its own, for the whole run.
    let run_for = flap_duration();
    let started = tokio::time::Instant::now();
    let deadline = started + run_for;
    let sampler = tokio::spawn(async move {
        let mut samples = vec![];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while tokio::time::Instant::now() < deadline {
            tick.tick().await;
            samples.push((started.elapsed().as_secs(), rss_kib()));
        }
        samples
    });
    // Each session the speaker opens is taken to Established, sent 10,000 routes, and dropped a
    // second later: the router flaps every second whenever the speaker lets it.
    let mut gaps = vec![];
    let mut dropped_at: Option<tokio::time::Instant> = None;
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let wait = deadline - now;
        let Ok(conn) = timeout(wait, flapping.accept()).await else {
            break;
        };
        let mut s = handshake(conn.unwrap().0, Stage::Established).await;
        if let Some(at) = dropped_at {
            gaps.push(tokio::time::Instant::now().duration_since(at));
        }
        send_routes(&mut s, 0, 10_000).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(s);
        dropped_at = Some(tokio::time::Instant::now());
    }
    let samples = sampler.await.unwrap();
    let gaps_s: Vec<String> = gaps
        .iter()
        .map(|g| format!("{:.2}", g.as_secs_f64()))
        .collect();
    eprintln!(
        "flapping peer for {} s: {} sessions established and dropped; the speaker came back after \
         [{}] s",
        run_for.as_secs(),
        gaps.len() + usize::from(dropped_at.is_some()),
        gaps_s.join(", ")
    );
    let step = (samples.len() / 20).max(1);
    eprintln!("  s   RSS KiB (this test process: speaker, both peers, harness)");
    for (at, kib) in samples.iter().step_by(step) {
        eprintln!("{at:>4} {kib:>9}");
    }
    let (highest, highest_at) = samples.iter().map(|(at, k)| (*k, *at)).max().unwrap();
    let first = samples.first().unwrap().1;
    let last = samples.last().unwrap().1;
    eprintln!("first {first} KiB, last {last} KiB, highest {highest} KiB at {highest_at} s");
    assert!(
        highest < LIMIT_KIB,
        "RSS reached {highest} KiB at {highest_at} s, over the 64 MiB a speaker may use"
    );
    assert!(
        dropped_at.is_some(),
        "the speaker never established a session with the flapping peer"
    );
    for (i, gap) in gaps.iter().enumerate() {
        // At least the base doubled once per earlier drop, up to the longest back-off.
        let want = (base * (1 << i.min(20))).min(ferrolb_speaker::bgp::config::MAX_CONNECT_RETRY);
        assert!(
            *gap >= want,
            "session {} came {gap:?} after the last drop, before the back-off of {want:?}",
            i + 2
        );
    }
    let quiet_status = speaker.session_states()[&PeerId("quiet".into())].clone();
    assert_eq!(quiet_status.state, ferrolb_speaker::bgp::State::Established);
    assert_eq!(
        quiet_status.established_count, 1,
        "the other session never reset"
    );
    quiet_keepalive.abort();
    quiet_reader.abort();
    speaker.shutdown().await;
}
