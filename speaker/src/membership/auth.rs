//! Authentication of gossip datagrams with shared keys, and their replay window. Pure: no I/O,
//! no clock (time is passed in).
//!
//! Wire format of a datagram: a magic (4 octets: channel, format and version), a stamp (24
//! octets: the sender's boot id, its sequence number and its wall clock in milliseconds, each
//! big-endian u64), the payload, then HMAC-SHA256 (RFC 2104, FIPS 180-4) over all of that, 32
//! octets. The tag is verified in constant time before a single payload byte is decoded. Magic
//! `"FLB2"` carries SWIM (foca) messages, `"FLS2"` a member state pushed directly to one member
//! ([`Channel`]).
//!
//! # Replay
//! A datagram captured and sent again changes nothing ([`ReplayGuard`]):
//! - its stamp's clock must be within [`MAX_SKEW`] of the receiver's (older captures are
//!   `stale`; nodes' clocks must agree within that, as NTP keeps them);
//! - within that, each sender boot has a window of the last [`WINDOW`] sequence numbers (as
//!   IPsec's, RFC 4303 §3.4.3): a number seen, or older than the window, is `replayed`. A
//!   restarted speaker has a new boot id, so it starts a window of its own.
//!
//! Windows are kept for twice [`MAX_SKEW`] after their boot's last datagram, so a replay is
//! either in a window or stale; they are made only for datagrams whose tag verified.
//!
//! # Keys
//! A [`KeyRing`] holds the key datagrams are sent with and, during a rotation, the previous key,
//! which is still accepted. The gossip Secret holds them as `secretkey` and `previouskey`.
//!
//! # Caveats
//! - No confidentiality: membership is not secret, only its integrity matters.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

type HmacSha256 = Hmac<Sha256>;

/// Format and version marker at the start of every SWIM datagram.
pub const MAGIC: &[u8; 4] = b"FLB2";
/// Format and version marker at the start of every state datagram.
pub const STATE_MAGIC: &[u8; 4] = b"FLS2";
/// Length of the stamp that follows the magic.
pub const STAMP_LEN: usize = 24;
/// Length of the authentication tag.
pub const TAG_LEN: usize = 32;
/// Shortest key accepted: 16 octets (128 bits).
pub const MIN_KEY_LEN: usize = 16;
/// How far a datagram's clock may be from the receiver's.
pub const MAX_SKEW: Duration = Duration::from_secs(60);
/// Sequence numbers of a boot below its highest that are still accepted once (reordering).
pub const WINDOW: u64 = 64;
/// How long a member goes on sending with its former key after a key change (and accepting
/// it): longer than the change takes to reach every member.
pub const KEY_SWITCH_DELAY: Duration = Duration::from_secs(10);

/// The shared gossip key (from the gossip Secret).
#[derive(Clone, PartialEq, Eq)]
pub struct GossipKey(Vec<u8>);

impl GossipKey {
    /// A key from raw bytes; `None` when shorter than [`MIN_KEY_LEN`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Option<GossipKey> {
        let bytes = bytes.into();
        (bytes.len() >= MIN_KEY_LEN).then_some(GossipKey(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length.
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length")
    }
}

impl fmt::Debug for GossipKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GossipKey({} bytes)", self.0.len())
    }
}

/// The key datagrams are sealed with, and the previous one, still accepted during a rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRing {
    send: GossipKey,
    previous: Option<GossipKey>,
}

impl KeyRing {
    /// Sends with `send`; accepts `send` and `previous`.
    pub fn new(send: GossipKey, previous: Option<GossipKey>) -> KeyRing {
        let previous = previous.filter(|p| *p != send);
        KeyRing { send, previous }
    }
}

impl From<GossipKey> for KeyRing {
    fn from(key: GossipKey) -> KeyRing {
        KeyRing::new(key, None)
    }
}

/// A member's keys as they change: the configured [`KeyRing`], and the key it sent with before
/// the last change, still used to send for [`KEY_SWITCH_DELAY`] and accepted for twice that.
/// So a key change needs no coordination: as long as it reaches every member within that
/// delay, each member accepts the new key before any sends with it, and accepts the former key
/// as long as any still sends with it.
#[derive(Clone, Debug)]
pub struct Keys {
    ring: KeyRing,
    retiring: Option<(GossipKey, u64)>,
}

impl Keys {
    /// Keys that start as `ring`.
    pub fn new(ring: KeyRing) -> Keys {
        Keys {
            ring,
            retiring: None,
        }
    }

    /// The former key while it is still sent with (`0` of the delay) or accepted (up to
    /// twice the delay: the members that learn of the change last send with it that long).
    fn retiring(&self, now_ms: u64, delays: u64) -> Option<&GossipKey> {
        let delay = KEY_SWITCH_DELAY.as_millis() as u64;
        self.retiring
            .as_ref()
            .filter(|(_, since)| now_ms < since.saturating_add(delays * delay))
            .map(|(k, _)| k)
    }

    /// The key datagrams are sealed with at `now_ms`.
    pub fn sending(&self, now_ms: u64) -> &GossipKey {
        self.retiring(now_ms, 1).unwrap_or(&self.ring.send)
    }

    /// The keys accepted at `now_ms`, the one sent with first.
    pub fn accepted(&self, now_ms: u64) -> Vec<&GossipKey> {
        let mut keys = vec![self.sending(now_ms)];
        for k in [
            Some(&self.ring.send),
            self.ring.previous.as_ref(),
            self.retiring(now_ms, 2),
        ]
        .into_iter()
        .flatten()
        {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// Takes `ring` at `now_ms`: its keys are accepted at once; when its send key is new, the
    /// key sent with so far is still sent with for [`KEY_SWITCH_DELAY`] and accepted for twice
    /// that.
    pub fn replace(&mut self, ring: KeyRing, now_ms: u64) {
        let current = self.sending(now_ms).clone();
        if ring.send != current {
            self.retiring = Some((current, now_ms));
        }
        self.ring = ring;
    }
}

/// What a datagram carries, told by its magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Channel {
    /// A SWIM message for foca ([`MAGIC`]).
    Swim,
    /// One member's state, pushed to a member that just came up ([`STATE_MAGIC`]).
    State,
}

impl Channel {
    fn magic(self) -> &'static [u8; 4] {
        match self {
            Channel::Swim => MAGIC,
            Channel::State => STATE_MAGIC,
        }
    }
}

/// Why a datagram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuthFailure {
    /// Shorter than magic, stamp and tag.
    TooShort,
    /// Not starting with [`MAGIC`] or [`STATE_MAGIC`]: another protocol or version.
    BadMagic,
    /// The tag does not verify with any key of the ring: no key, a wrong key, or altered
    /// content.
    BadTag,
    /// Its clock is more than [`MAX_SKEW`] from ours: an old capture, or a node whose clock is
    /// off.
    Stale,
    /// Its sequence number was seen already, or is older than the window: a replay.
    Replayed,
}

impl AuthFailure {
    /// A stable label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::TooShort => "too_short",
            AuthFailure::BadMagic => "bad_magic",
            AuthFailure::BadTag => "bad_tag",
            AuthFailure::Stale => "stale",
            AuthFailure::Replayed => "replayed",
        }
    }
}

/// Who sent a datagram, which one it is and when (the sender's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The sender's boot id (random per start).
    pub boot: u64,
    /// The datagram's number in its boot, from 1.
    pub seq: u64,
    /// The sender's wall clock, Unix milliseconds.
    pub time_ms: u64,
}

/// Numbers the datagrams of one boot.
#[derive(Clone, Debug)]
pub struct Sealer {
    boot: u64,
    next: u64,
}

impl Sealer {
    /// A sealer for the boot `boot`.
    pub fn new(boot: u64) -> Sealer {
        Sealer { boot, next: 1 }
    }

    /// The stamp of the next datagram, sent at `now_ms`.
    pub fn stamp(&mut self, now_ms: u64) -> Stamp {
        let seq = self.next;
        self.next += 1;
        Stamp {
            boot: self.boot,
            seq,
            time_ms: now_ms,
        }
    }
}

/// Wraps `payload` into an authenticated datagram of `channel`, sealed with `key`.
pub fn seal_on(key: &GossipKey, channel: Channel, stamp: Stamp, payload: &[u8]) -> Vec<u8> {
    let magic = channel.magic();
    let mut out = Vec::with_capacity(magic.len() + STAMP_LEN + payload.len() + TAG_LEN);
    out.extend_from_slice(magic);
    for v in [stamp.boot, stamp.seq, stamp.time_ms] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(payload);
    let mut mac = key.mac();
    mac.update(&out);
    out.extend_from_slice(&mac.finalize().into_bytes());
    out
}

/// Magic of the version-1 SWIM datagrams (no stamp), which the speakers of the version before
/// this one send.
pub const V1_MAGIC: &[u8; 4] = b"FLB1";
/// Magic of the version-1 state datagrams.
pub const V1_STATE_MAGIC: &[u8; 4] = b"FLS1";

/// Wraps `payload` as a version-1 datagram (magic, payload, tag: no stamp), for a member that
/// speaks only that (a rolling update from the version before).
pub fn seal_v1(key: &GossipKey, channel: Channel, payload: &[u8]) -> Vec<u8> {
    let magic = match channel {
        Channel::Swim => V1_MAGIC,
        Channel::State => V1_STATE_MAGIC,
    };
    let mut out = Vec::with_capacity(magic.len() + payload.len() + TAG_LEN);
    out.extend_from_slice(magic);
    out.extend_from_slice(payload);
    let mut mac = key.mac();
    mac.update(&out);
    out.extend_from_slice(&mac.finalize().into_bytes());
    out
}

/// A datagram whose tag verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    /// What it carries.
    pub channel: Channel,
    /// Its stamp (not yet checked against replay: see [`ReplayGuard::check`]); `None` for a
    /// version-1 datagram, which has none.
    pub stamp: Option<Stamp>,
    /// The payload.
    pub payload: &'a [u8],
    /// It verified with another key than the first one given (the one sent with): its sender
    /// has not changed keys yet.
    pub previous_key: bool,
}

/// The channel, stamp and payload of a datagram that verifies with one of `keys`, or why it is
/// refused.
pub fn open_any<'a>(keys: &[&GossipKey], datagram: &'a [u8]) -> Result<Opened<'a>, AuthFailure> {
    if datagram.len() < MAGIC.len() + TAG_LEN {
        return Err(AuthFailure::TooShort);
    }
    let (body, tag) = datagram.split_at(datagram.len() - TAG_LEN);
    let (channel, stamped) = match &body[..MAGIC.len()] {
        m if m == MAGIC => (Channel::Swim, true),
        m if m == STATE_MAGIC => (Channel::State, true),
        m if m == V1_MAGIC => (Channel::Swim, false),
        m if m == V1_STATE_MAGIC => (Channel::State, false),
        _ => return Err(AuthFailure::BadMagic),
    };
    if stamped && body.len() < MAGIC.len() + STAMP_LEN {
        return Err(AuthFailure::TooShort);
    }
    let verifies = |key: &GossipKey| {
        let mut mac = key.mac();
        mac.update(body);
        mac.verify_slice(tag).is_ok()
    };
    let previous_key = match keys.iter().position(|k| verifies(k)) {
        Some(i) => i > 0,
        None => return Err(AuthFailure::BadTag),
    };
    let word = |i: usize| {
        let at = MAGIC.len() + 8 * i;
        u64::from_be_bytes(body[at..at + 8].try_into().expect("8 octets"))
    };
    if !stamped {
        return Ok(Opened {
            channel,
            stamp: None,
            payload: &body[MAGIC.len()..],
            previous_key,
        });
    }
    Ok(Opened {
        channel,
        stamp: Some(Stamp {
            boot: word(0),
            seq: word(1),
            time_ms: word(2),
        }),
        payload: &body[MAGIC.len() + STAMP_LEN..],
        previous_key,
    })
}

/// The sequence numbers seen of one boot.
#[derive(Clone, Copy, Debug)]
struct Window {
    highest: u64,
    /// Bit `i`: `highest - i` was seen.
    seen: u64,
    /// Our clock when the boot was last heard.
    last_ms: u64,
}

/// Refuses stale and replayed datagrams (see the module documentation). Bounded by the boots
/// heard in the last 2 × [`MAX_SKEW`].
#[derive(Clone, Debug, Default)]
pub struct ReplayGuard {
    windows: HashMap<u64, Window>,
    next_purge_ms: u64,
}

impl ReplayGuard {
    /// Accepts `stamp` (of a datagram whose tag verified) at our clock `now_ms`, once.
    pub fn check(&mut self, now_ms: u64, stamp: Stamp) -> Result<(), AuthFailure> {
        let skew = MAX_SKEW.as_millis() as u64;
        if now_ms.abs_diff(stamp.time_ms) > skew {
            return Err(AuthFailure::Stale);
        }
        if stamp.seq == 0 {
            // Sealers number from 1.
            return Err(AuthFailure::Replayed);
        }
        if now_ms >= self.next_purge_ms {
            self.windows
                .retain(|_, w| w.last_ms.saturating_add(2 * skew) >= now_ms);
            self.next_purge_ms = now_ms.saturating_add(skew);
        }
        let w = self.windows.entry(stamp.boot).or_insert(Window {
            highest: stamp.seq,
            seen: 0,
            last_ms: now_ms,
        });
        if stamp.seq > w.highest {
            let shift = stamp.seq - w.highest;
            w.seen = if shift >= WINDOW { 0 } else { w.seen << shift };
            w.highest = stamp.seq;
        }
        let age = w.highest - stamp.seq;
        if age >= WINDOW || w.seen & (1 << age) != 0 {
            return Err(AuthFailure::Replayed);
        }
        w.seen |= 1 << age;
        w.last_ms = w.last_ms.max(now_ms);
        Ok(())
    }

    /// How many boots have a window.
    pub fn boots(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> GossipKey {
        GossipKey::new(vec![b; 32]).unwrap()
    }

    fn ring(b: u8) -> Vec<GossipKey> {
        vec![key(b)]
    }

    fn refs(keys: &[GossipKey]) -> Vec<&GossipKey> {
        keys.iter().collect()
    }

    fn stamp(seq: u64) -> Stamp {
        Stamp {
            boot: 7,
            seq,
            time_ms: 1_000_000,
        }
    }

    fn seal(keys: &[GossipKey], payload: &[u8]) -> Vec<u8> {
        seal_on(&keys[0], Channel::Swim, stamp(1), payload)
    }

    fn open<'a>(keys: &[GossipKey], d: &'a [u8]) -> Result<Opened<'a>, AuthFailure> {
        open_any(&refs(keys), d)
    }

    #[test]
    fn a_sealed_datagram_opens_to_its_stamp_and_payload() {
        let d = seal(&ring(1), b"ping");
        let o = open(&ring(1), &d).unwrap();
        assert_eq!(
            (o.channel, o.stamp, o.payload),
            (Channel::Swim, Some(stamp(1)), &b"ping"[..])
        );
        assert!(!o.previous_key);
        assert_eq!(d.len(), 4 + 24 + 4 + 32);
    }

    #[test]
    fn the_mac_is_hmac_sha256_as_rfc4231_test_case_1_says() {
        let k = GossipKey::new(vec![0x0b; 20]).unwrap();
        let mut m = k.mac();
        m.update(b"Hi There");
        let want = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
        let got: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_tag_covers_magic_stamp_and_payload() {
        let d = seal(&ring(3), b"x");
        let mut m = key(3).mac();
        m.update(&d[..d.len() - TAG_LEN]);
        assert_eq!(&d[d.len() - TAG_LEN..], &m.finalize().into_bytes()[..]);
        // A stamp changed in flight (a replay made to look new) breaks the tag.
        let mut renumbered = d.clone();
        renumbered[4 + 15] ^= 1;
        assert_eq!(open(&ring(3), &renumbered), Err(AuthFailure::BadTag));
    }

    #[test]
    fn a_state_datagram_keeps_its_channel_and_cannot_be_relabelled() {
        let d = seal_on(&key(1), Channel::State, stamp(2), b"st");
        assert_eq!(open(&ring(1), &d).unwrap().channel, Channel::State);
        let mut relabelled = d.clone();
        relabelled[..4].copy_from_slice(MAGIC);
        assert_eq!(open(&ring(1), &relabelled), Err(AuthFailure::BadTag));
    }

    #[test]
    fn a_wrong_key_is_refused() {
        assert_eq!(
            open(&ring(2), &seal(&ring(1), b"ping")),
            Err(AuthFailure::BadTag)
        );
    }

    #[test]
    fn a_datagram_sealed_with_a_later_key_of_the_list_is_accepted_and_said_so() {
        let both = vec![key(2), key(1)];
        let old = seal(&ring(1), b"old");
        assert!(open(&both, &old).unwrap().previous_key);
        assert!(!open(&both, &seal(&ring(2), b"new")).unwrap().previous_key);
        assert_eq!(open(&ring(2), &old), Err(AuthFailure::BadTag));
    }

    #[test]
    fn after_a_key_change_the_former_key_is_sent_with_and_accepted_for_the_switch_delay() {
        let delay = KEY_SWITCH_DELAY.as_millis() as u64;
        let mut keys = Keys::new(key(1).into());
        assert_eq!(keys.accepted(0), [&key(1)]);
        keys.replace(key(2).into(), 1_000);
        // Until the delay is over: still sending with key 1, and key 2 accepted already.
        assert_eq!(keys.sending(1_000 + delay - 1), &key(1));
        assert_eq!(keys.accepted(1_000 + delay - 1), [&key(1), &key(2)]);
        // Then sending with key 2, and key 1 accepted for one more delay (members that
        // learnt of the change later still send with it).
        assert_eq!(keys.sending(1_000 + delay), &key(2));
        assert_eq!(keys.accepted(1_000 + delay), [&key(2), &key(1)]);
        // Then key 2 only, unless the Secret keeps key 1 as the previous one.
        assert_eq!(keys.accepted(1_000 + 2 * delay), [&key(2)]);
        let mut kept = Keys::new(key(1).into());
        kept.replace(KeyRing::new(key(2), Some(key(1))), 0);
        assert_eq!(kept.accepted(10 * delay), [&key(2), &key(1)]);
        // The same send key again (the previous key dropped) changes nothing about sending.
        kept.replace(key(2).into(), 10 * delay);
        assert_eq!(kept.sending(10 * delay), &key(2));
        assert_eq!(kept.accepted(10 * delay), [&key(2)]);
    }

    #[test]
    fn an_unauthenticated_datagram_is_refused() {
        let mut plain = MAGIC.to_vec();
        plain.extend_from_slice(&[0u8; 64]);
        assert_eq!(open(&ring(1), &plain), Err(AuthFailure::BadTag));
        assert_eq!(open(&ring(1), b"hello"), Err(AuthFailure::TooShort));
        assert_eq!(open(&ring(1), &[7u8; 80]), Err(AuthFailure::BadMagic));
        assert_eq!(
            open(&ring(1), b"FLB2 but too short for a stamp and a tag"),
            Err(AuthFailure::TooShort)
        );
    }

    #[test]
    fn a_version_1_datagram_opens_without_a_stamp_and_only_with_a_good_tag() {
        let d = seal_v1(&key(1), Channel::State, b"st");
        assert_eq!(&d[..4], V1_STATE_MAGIC);
        let o = open(&ring(1), &d).unwrap();
        assert_eq!(
            (o.channel, o.stamp, o.payload),
            (Channel::State, None, &b"st"[..])
        );
        assert_eq!(open(&ring(2), &d), Err(AuthFailure::BadTag));
    }

    #[test]
    fn short_keys_are_rejected() {
        assert!(GossipKey::new(vec![0u8; 15]).is_none());
        assert!(GossipKey::new(vec![0u8; 16]).is_some());
    }

    #[test]
    fn each_sequence_number_is_accepted_once_and_reordering_within_the_window_is_fine() {
        let mut g = ReplayGuard::default();
        let now = 1_000_000;
        for seq in [1, 3, 2, 10, 5] {
            assert_eq!(g.check(now, stamp(seq)), Ok(()), "seq {seq}");
        }
        for seq in [1, 2, 3, 5, 10] {
            assert_eq!(
                g.check(now, stamp(seq)),
                Err(AuthFailure::Replayed),
                "seq {seq}"
            );
        }
        assert_eq!(g.check(now, stamp(10 + WINDOW)), Ok(()));
        // Out of the window now: refused although never seen.
        assert_eq!(g.check(now, stamp(4)), Err(AuthFailure::Replayed));
        assert_eq!(g.check(now, stamp(11 + WINDOW)), Ok(()));
    }

    #[test]
    fn a_datagram_from_too_far_in_the_past_or_future_is_stale() {
        let mut g = ReplayGuard::default();
        let skew = MAX_SKEW.as_millis() as u64;
        let at = |seq, time_ms| Stamp {
            boot: 1,
            seq,
            time_ms,
        };
        let now = 10 * skew;
        assert_eq!(g.check(now, at(1, now - skew - 1)), Err(AuthFailure::Stale));
        assert_eq!(g.check(now, at(2, now + skew + 1)), Err(AuthFailure::Stale));
        assert_eq!(g.check(now, at(3, now - skew)), Ok(()));
        assert_eq!(g.check(now, at(4, now + skew)), Ok(()));
    }

    #[test]
    fn a_new_boot_has_a_window_of_its_own_and_idle_windows_are_forgotten() {
        let mut g = ReplayGuard::default();
        let skew = MAX_SKEW.as_millis() as u64;
        let at = |boot, seq, time_ms| Stamp { boot, seq, time_ms };
        assert_eq!(g.check(skew, at(1, 500, skew)), Ok(()));
        // The sender restarted: numbers from 1 again, under a new boot id.
        assert_eq!(g.check(skew, at(2, 1, skew)), Ok(()));
        assert_eq!(g.boots(), 2);
        // Long after: a replay of boot 1 is stale, and the idle windows are gone.
        let later = 4 * skew;
        assert_eq!(g.check(later, at(1, 501, skew)), Err(AuthFailure::Stale));
        assert_eq!(g.check(later, at(3, 1, later)), Ok(()));
        assert_eq!(g.boots(), 1);
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_detected(payload in prop::collection::vec(any::<u8>(), 0..200), bit in any::<prop::sample::Index>()) {
            let mut d = seal(&ring(9), &payload);
            let i = bit.index(d.len() * 8);
            d[i / 8] ^= 1 << (i % 8);
            prop_assert!(open(&ring(9), &d).is_err());
        }
    }
}
