//! Authentication of gossip datagrams with a shared key. Pure: no I/O, no clock.
//!
//! Wire format of a datagram: a magic (4 octets: channel, format and version), the payload, then
//! HMAC-SHA256 (RFC 2104, FIPS 180-4) over magic and payload, 32 octets. The tag is verified in
//! constant time before a single payload byte is decoded. Magic `"FLB1"` carries SWIM (foca)
//! messages, `"FLS1"` a member state pushed directly to one member ([`Channel`]).
//!
//! # Caveats
//! - No confidentiality: membership is not secret, only its integrity matters.
//! - No replay window: a captured datagram can be replayed while its content is current.
//!   SWIM messages carry incarnation numbers and probe sequence numbers, so a replay can at
//!   worst re-assert an old liveness claim that the next probe round corrects.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Format and version marker at the start of every SWIM datagram.
pub const MAGIC: &[u8; 4] = b"FLB1";
/// Format and version marker at the start of every state datagram.
pub const STATE_MAGIC: &[u8; 4] = b"FLS1";
/// Length of the authentication tag.
pub const TAG_LEN: usize = 32;
/// Shortest key accepted: 16 octets (128 bits).
pub const MIN_KEY_LEN: usize = 16;

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
    /// Shorter than magic and tag.
    TooShort,
    /// Not starting with [`MAGIC`] or [`STATE_MAGIC`]: another protocol or version.
    BadMagic,
    /// The tag does not verify: no key, a wrong key, or altered content.
    BadTag,
}

impl AuthFailure {
    /// A stable label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::TooShort => "too_short",
            AuthFailure::BadMagic => "bad_magic",
            AuthFailure::BadTag => "bad_tag",
        }
    }
}

/// Wraps `payload` into an authenticated SWIM datagram.
pub fn seal(key: &GossipKey, payload: &[u8]) -> Vec<u8> {
    seal_on(key, Channel::Swim, payload)
}

/// Wraps `payload` into an authenticated datagram of `channel`.
pub fn seal_on(key: &GossipKey, channel: Channel, payload: &[u8]) -> Vec<u8> {
    let magic = channel.magic();
    let mut out = Vec::with_capacity(magic.len() + payload.len() + TAG_LEN);
    out.extend_from_slice(magic);
    out.extend_from_slice(payload);
    let mut mac = key.mac();
    mac.update(&out);
    out.extend_from_slice(&mac.finalize().into_bytes());
    out
}

/// The payload of an authenticated SWIM datagram, or why it is refused (a state datagram is
/// [`AuthFailure::BadMagic`] here).
pub fn open<'a>(key: &GossipKey, datagram: &'a [u8]) -> Result<&'a [u8], AuthFailure> {
    match open_any(key, datagram)? {
        (Channel::Swim, payload) => Ok(payload),
        (Channel::State, _) => Err(AuthFailure::BadMagic),
    }
}

/// The channel and payload of an authenticated datagram, or why it is refused.
pub fn open_any<'a>(
    key: &GossipKey,
    datagram: &'a [u8],
) -> Result<(Channel, &'a [u8]), AuthFailure> {
    if datagram.len() < MAGIC.len() + TAG_LEN {
        return Err(AuthFailure::TooShort);
    }
    let (body, tag) = datagram.split_at(datagram.len() - TAG_LEN);
    let channel = if body.starts_with(MAGIC) {
        Channel::Swim
    } else if body.starts_with(STATE_MAGIC) {
        Channel::State
    } else {
        return Err(AuthFailure::BadMagic);
    };
    let mut mac = key.mac();
    mac.update(body);
    mac.verify_slice(tag).map_err(|_| AuthFailure::BadTag)?;
    Ok((channel, &body[MAGIC.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> GossipKey {
        GossipKey::new(vec![b; 32]).unwrap()
    }

    #[test]
    fn a_sealed_datagram_opens_to_its_payload() {
        let d = seal(&key(1), b"ping");
        assert_eq!(open(&key(1), &d), Ok(&b"ping"[..]));
        assert_eq!(d.len(), 4 + 4 + 32);
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
    fn the_tag_covers_magic_and_payload() {
        let k = key(3);
        let d = seal(&k, b"x");
        let mut m = k.mac();
        m.update(b"FLB1x");
        assert_eq!(&d[5..], &m.finalize().into_bytes()[..]);
    }

    #[test]
    fn a_state_datagram_opens_on_its_own_channel_only() {
        let d = seal_on(&key(1), Channel::State, b"st");
        assert_eq!(open_any(&key(1), &d), Ok((Channel::State, &b"st"[..])));
        assert_eq!(open(&key(1), &d), Err(AuthFailure::BadMagic));
        // The channel is covered by the tag: relabelling a state datagram as SWIM breaks it.
        let mut relabelled = d.clone();
        relabelled[..4].copy_from_slice(MAGIC);
        assert_eq!(open_any(&key(1), &relabelled), Err(AuthFailure::BadTag));
    }

    #[test]
    fn a_wrong_key_is_refused() {
        assert_eq!(
            open(&key(2), &seal(&key(1), b"ping")),
            Err(AuthFailure::BadTag)
        );
    }

    #[test]
    fn an_unauthenticated_datagram_is_refused() {
        let mut plain = MAGIC.to_vec();
        plain.extend_from_slice(&[0u8; 40]);
        assert_eq!(open(&key(1), &plain), Err(AuthFailure::BadTag));
        assert_eq!(open(&key(1), b"hello"), Err(AuthFailure::TooShort));
        assert_eq!(open(&key(1), &[7u8; 64]), Err(AuthFailure::BadMagic));
    }

    #[test]
    fn short_keys_are_rejected() {
        assert!(GossipKey::new(vec![0u8; 15]).is_none());
        assert!(GossipKey::new(vec![0u8; 16]).is_some());
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_detected(payload in prop::collection::vec(any::<u8>(), 0..200), bit in any::<prop::sample::Index>()) {
            let mut d = seal(&key(9), &payload);
            let i = bit.index(d.len() * 8);
            d[i / 8] ^= 1 << (i % 8);
            prop_assert!(open(&key(9), &d).is_err());
        }
    }
}
