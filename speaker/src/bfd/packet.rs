//! The BFD Control packet (RFC 5880 §4.1): encoding, and decoding with every reception check of
//! §6.8.6 that needs nothing but the packet. Pure: no I/O, no clock; decoding never panics.
//!
//! Authentication (§4.2, §6.7) is not supported: we never send an authentication section, and a
//! packet with the Authentication Present bit is refused with
//! [`PacketError::AuthenticationNotSupported`] (§6.8.6: "If the A bit is set and no
//! authentication is in use (bfd.AuthType is zero), the packet MUST be discarded"). A peer that
//! is configured with authentication therefore never brings a session up with us.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
//! |                       My Discriminator                        |
//! |                      Your Discriminator                       |
//! |                    Desired Min TX Interval                    |
//! |                   Required Min RX Interval                    |
//! |                 Required Min Echo RX Interval                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

/// The only protocol version (RFC 5880 §4.1).
pub const VERSION: u8 = 1;
/// Length of the mandatory section, the whole packet when there is no authentication.
pub const MANDATORY_LEN: usize = 24;
/// Smallest length of a packet that carries an authentication section (§6.8.6).
pub const MIN_AUTHENTICATED_LEN: usize = 26;

const FLAG_POLL: u8 = 0x20;
const FLAG_FINAL: u8 = 0x10;
const FLAG_CPI: u8 = 0x08;
const FLAG_AUTH: u8 = 0x04;
const FLAG_DEMAND: u8 = 0x02;
const FLAG_MULTIPOINT: u8 = 0x01;

/// The diagnostic code (RFC 5880 §4.1): why the sender's session last changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diag {
    /// 0: no diagnostic.
    NoDiagnostic,
    /// 1: Control Detection Time Expired (the peer went silent).
    ControlDetectionTimeExpired,
    /// 2: Echo Function Failed.
    EchoFunctionFailed,
    /// 3: Neighbor Signaled Session Down.
    NeighborSignaledDown,
    /// 4: Forwarding Plane Reset.
    ForwardingPlaneReset,
    /// 5: Path Down.
    PathDown,
    /// 6: Concatenated Path Down.
    ConcatenatedPathDown,
    /// 7: Administratively Down.
    AdministrativelyDown,
    /// 8: Reverse Concatenated Path Down.
    ReverseConcatenatedPathDown,
    /// 9..=31: reserved for future use; kept so that it can be logged.
    Other(u8),
}

impl Diag {
    /// The diagnostic for a 5-bit code; only the low 5 bits of `code` are read.
    pub fn from_code(code: u8) -> Diag {
        match code & 0x1f {
            0 => Diag::NoDiagnostic,
            1 => Diag::ControlDetectionTimeExpired,
            2 => Diag::EchoFunctionFailed,
            3 => Diag::NeighborSignaledDown,
            4 => Diag::ForwardingPlaneReset,
            5 => Diag::PathDown,
            6 => Diag::ConcatenatedPathDown,
            7 => Diag::AdministrativelyDown,
            8 => Diag::ReverseConcatenatedPathDown,
            other => Diag::Other(other),
        }
    }

    /// The 5-bit code on the wire (`Other` keeps its low 5 bits).
    pub fn code(self) -> u8 {
        match self {
            Diag::NoDiagnostic => 0,
            Diag::ControlDetectionTimeExpired => 1,
            Diag::EchoFunctionFailed => 2,
            Diag::NeighborSignaledDown => 3,
            Diag::ForwardingPlaneReset => 4,
            Diag::PathDown => 5,
            Diag::ConcatenatedPathDown => 6,
            Diag::AdministrativelyDown => 7,
            Diag::ReverseConcatenatedPathDown => 8,
            Diag::Other(code) => code & 0x1f,
        }
    }
}

/// A session state (RFC 5880 §4.1, §6.2), as carried by the Sta field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum State {
    /// 0: held down by configuration.
    AdminDown,
    /// 1: down, or just created.
    Down,
    /// 2: the peer is heard, but it has not heard us yet.
    Init,
    /// 3: both ends hear each other.
    Up,
}

impl State {
    /// The state for a 2-bit code; only the low 2 bits of `code` are read.
    pub fn from_code(code: u8) -> State {
        match code & 0x03 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    /// The 2-bit code on the wire.
    pub fn code(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }
}

/// A BFD Control packet without authentication section (RFC 5880 §4.1). Intervals are in
/// microseconds, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlPacket {
    /// Protocol version; [`decode`] accepts only [`VERSION`].
    pub version: u8,
    /// Why the sender's session last changed state.
    pub diag: Diag,
    /// The sender's session state.
    pub state: State,
    /// Poll (P): the sender asks for a packet with Final set (§6.5).
    pub poll: bool,
    /// Final (F): the answer to a Poll.
    pub fin: bool,
    /// Control Plane Independent (C): the sender's BFD does not share fate with its control
    /// plane.
    pub control_plane_independent: bool,
    /// Authentication Present (A). [`decode`] refuses packets that set it.
    pub authentication_present: bool,
    /// Demand (D): the sender wants to run in Demand mode.
    pub demand: bool,
    /// Multipoint (M): reserved, [`decode`] refuses packets that set it.
    pub multipoint: bool,
    /// Detection time multiplier; [`decode`] refuses zero.
    pub detect_mult: u8,
    /// The sender's discriminator; [`decode`] refuses zero.
    pub my_discriminator: u32,
    /// The receiver's discriminator as the sender knows it; zero when unknown.
    pub your_discriminator: u32,
    /// The sender's desired minimum transmit interval, in microseconds.
    pub desired_min_tx: u32,
    /// The slowest rate at which the sender accepts packets, in microseconds; zero asks the
    /// receiver not to send periodic packets.
    pub required_min_rx: u32,
    /// The sender's minimum Echo receive interval, in microseconds; zero: no Echo.
    pub required_min_echo_rx: u32,
}

impl ControlPacket {
    /// The 24 bytes of the packet. The Length field is always 24: no authentication section is
    /// ever written, whatever `authentication_present` says (a packet built with it set is
    /// refused by the peer, and by [`decode`]).
    pub fn encode(&self) -> [u8; MANDATORY_LEN] {
        let mut flags = 0;
        for (set, bit) in [
            (self.poll, FLAG_POLL),
            (self.fin, FLAG_FINAL),
            (self.control_plane_independent, FLAG_CPI),
            (self.authentication_present, FLAG_AUTH),
            (self.demand, FLAG_DEMAND),
            (self.multipoint, FLAG_MULTIPOINT),
        ] {
            if set {
                flags |= bit;
            }
        }
        let mut out = [0u8; MANDATORY_LEN];
        out[0] = ((self.version & 0x07) << 5) | self.diag.code();
        out[1] = (self.state.code() << 6) | flags;
        out[2] = self.detect_mult;
        out[3] = MANDATORY_LEN as u8;
        for (at, value) in [
            (4, self.my_discriminator),
            (8, self.your_discriminator),
            (12, self.desired_min_tx),
            (16, self.required_min_rx),
            (20, self.required_min_echo_rx),
        ] {
            out[at..at + 4].copy_from_slice(&value.to_be_bytes());
        }
        out
    }

    /// The checks of RFC 5880 §6.8.6 that read only the fields, in the RFC's order: version,
    /// Detect Mult, Multipoint, My Discriminator, a zero Your Discriminator only from a Down or
    /// AdminDown sender, and (last, since we use no authentication) the A bit. [`decode`] runs
    /// them; so does the session, for packets that were built rather than decoded.
    pub fn check(&self) -> Result<(), PacketError> {
        if self.version != VERSION {
            return Err(PacketError::UnsupportedVersion {
                version: self.version,
            });
        }
        if self.detect_mult == 0 {
            return Err(PacketError::ZeroDetectMult);
        }
        if self.multipoint {
            return Err(PacketError::Multipoint);
        }
        if self.my_discriminator == 0 {
            return Err(PacketError::ZeroMyDiscriminator);
        }
        if self.your_discriminator == 0 && !matches!(self.state, State::Down | State::AdminDown) {
            return Err(PacketError::ZeroYourDiscriminator { state: self.state });
        }
        if self.authentication_present {
            return Err(PacketError::AuthenticationNotSupported);
        }
        Ok(())
    }
}

/// Why a datagram is not a Control packet we accept. Each variant is one reception check of
/// RFC 5880 §6.8.6 (or the datagram being too short to read them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PacketError {
    /// The datagram is shorter than the 24-byte mandatory section.
    #[error(
        "BFD datagram of {datagram_len} bytes is shorter than the {MANDATORY_LEN}-byte Control \
         packet; it is not BFD, or it was truncated on the way"
    )]
    Truncated {
        /// Bytes in the UDP payload.
        datagram_len: usize,
    },
    /// The version is not 1.
    #[error("BFD version {version} is not supported (only version {VERSION}); check the peer")]
    UnsupportedVersion {
        /// The version received.
        version: u8,
    },
    /// The Length field is smaller than the mandatory section (26 with authentication).
    #[error(
        "BFD Length field {length} is below the minimum of {minimum} bytes; the peer sends \
         malformed packets"
    )]
    LengthTooSmall {
        /// The Length field.
        length: u8,
        /// 24, or 26 when the A bit is set.
        minimum: u8,
    },
    /// The Length field says more bytes than the datagram holds.
    #[error(
        "BFD Length field {length} is longer than the {datagram_len}-byte datagram; the packet \
         was truncated on the way"
    )]
    LengthExceedsDatagram {
        /// The Length field.
        length: u8,
        /// Bytes in the UDP payload.
        datagram_len: usize,
    },
    /// Detect Mult is zero.
    #[error("BFD Detect Mult is zero; the peer's detect multiplier must be at least 1")]
    ZeroDetectMult,
    /// The Multipoint bit, reserved for point-to-multipoint extensions, is set.
    #[error("BFD Multipoint bit is set; point-to-multipoint BFD is not supported")]
    Multipoint,
    /// My Discriminator is zero.
    #[error("BFD My Discriminator is zero; the peer sends malformed packets")]
    ZeroMyDiscriminator,
    /// Your Discriminator is zero while the sender says it is neither Down nor AdminDown.
    #[error(
        "BFD Your Discriminator is zero in a packet whose state is {state:?}; only Down and \
         AdminDown packets may omit it"
    )]
    ZeroYourDiscriminator {
        /// The sender's state.
        state: State,
    },
    /// The Authentication Present bit is set; we do not support authentication.
    #[error(
        "BFD peer uses authentication, which FerroLB does not support; disable authentication \
         for this session on the peer"
    )]
    AuthenticationNotSupported,
}

impl PacketError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PacketError::Truncated { .. } => "truncated",
            PacketError::UnsupportedVersion { .. } => "unsupported_version",
            PacketError::LengthTooSmall { .. } => "length_too_small",
            PacketError::LengthExceedsDatagram { .. } => "length_exceeds_datagram",
            PacketError::ZeroDetectMult => "zero_detect_mult",
            PacketError::Multipoint => "multipoint",
            PacketError::ZeroMyDiscriminator => "zero_my_discriminator",
            PacketError::ZeroYourDiscriminator { .. } => "zero_your_discriminator",
            PacketError::AuthenticationNotSupported => "authentication_not_supported",
        }
    }
}

/// Decodes one UDP payload into a Control packet, applying, in the order of RFC 5880 §6.8.6,
/// every check that needs only the packet: version, Length field (at least 24, 26 with
/// authentication, and within the datagram), Detect Mult, Multipoint, My Discriminator, and a
/// zero Your Discriminator only from a Down or AdminDown sender; then the A bit, refused since
/// we use no authentication. Bytes past the Length field are ignored.
///
/// Left to the caller: selecting the session by Your Discriminator, or by addresses when it is
/// zero; the TTL / hop-limit checks of RFC 5881 §5 and RFC 5883 §5.
pub fn decode(datagram: &[u8]) -> Result<ControlPacket, PacketError> {
    let truncated = PacketError::Truncated {
        datagram_len: datagram.len(),
    };
    let first = *datagram.first().ok_or(truncated)?;
    let version = first >> 5;
    if version != VERSION {
        return Err(PacketError::UnsupportedVersion { version });
    }
    let bytes: &[u8; MANDATORY_LEN] = datagram
        .get(..MANDATORY_LEN)
        .and_then(|head| head.try_into().ok())
        .ok_or(truncated)?;
    let flags = bytes[1];
    let authentication_present = flags & FLAG_AUTH != 0;
    let length = bytes[3];
    let minimum = if authentication_present {
        MIN_AUTHENTICATED_LEN
    } else {
        MANDATORY_LEN
    };
    if usize::from(length) < minimum {
        return Err(PacketError::LengthTooSmall {
            length,
            minimum: minimum as u8,
        });
    }
    if usize::from(length) > datagram.len() {
        return Err(PacketError::LengthExceedsDatagram {
            length,
            datagram_len: datagram.len(),
        });
    }
    let word =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let packet = ControlPacket {
        version,
        diag: Diag::from_code(first),
        state: State::from_code(flags >> 6),
        poll: flags & FLAG_POLL != 0,
        fin: flags & FLAG_FINAL != 0,
        control_plane_independent: flags & FLAG_CPI != 0,
        authentication_present,
        demand: flags & FLAG_DEMAND != 0,
        multipoint: flags & FLAG_MULTIPOINT != 0,
        detect_mult: bytes[2],
        my_discriminator: word(4),
        your_discriminator: word(8),
        desired_min_tx: word(12),
        required_min_rx: word(16),
        required_min_echo_rx: word(20),
    };
    packet.check()?;
    Ok(packet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bfd::session::SplitMix64;

    /// An Up packet laid out by hand from the RFC 5880 §4.1 drawing (not a capture): version 1,
    /// diag 0, state Up, no flags, Detect Mult 3, Length 24, My Discriminator 0x11223344, Your
    /// Discriminator 0x55667788, 300 ms / 300 ms, no Echo.
    const UP_PACKET: [u8; 24] = [
        0x20, 0xc0, 0x03, 0x18, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0x04, 0x93,
        0xe0, 0x00, 0x04, 0x93, 0xe0, 0x00, 0x00, 0x00, 0x00,
    ];

    fn up_packet() -> ControlPacket {
        ControlPacket {
            version: 1,
            diag: Diag::NoDiagnostic,
            state: State::Up,
            poll: false,
            fin: false,
            control_plane_independent: false,
            authentication_present: false,
            demand: false,
            multipoint: false,
            detect_mult: 3,
            my_discriminator: 0x1122_3344,
            your_discriminator: 0x5566_7788,
            desired_min_tx: 300_000,
            required_min_rx: 300_000,
            required_min_echo_rx: 0,
        }
    }

    /// `UP_PACKET` with `edit` applied to its bytes.
    fn edited(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut bytes = UP_PACKET.to_vec();
        edit(&mut bytes);
        bytes
    }

    #[test]
    fn a_hand_laid_packet_decodes_to_its_fields() {
        assert_eq!(decode(&UP_PACKET), Ok(up_packet()));
    }

    #[test]
    fn encoding_puts_every_field_where_rfc_5880_draws_it() {
        assert_eq!(up_packet().encode(), UP_PACKET);
        let flagged = ControlPacket {
            diag: Diag::AdministrativelyDown,
            state: State::AdminDown,
            poll: true,
            demand: true,
            ..up_packet()
        };
        let bytes = flagged.encode();
        assert_eq!(bytes[0], 0x20 | 7);
        assert_eq!(bytes[1], FLAG_POLL | FLAG_DEMAND);
        let fin = ControlPacket {
            fin: true,
            control_plane_independent: true,
            ..up_packet()
        };
        assert_eq!(fin.encode()[1], 0xc0 | FLAG_FINAL | FLAG_CPI);
    }

    #[test]
    fn a_packet_with_version_two_is_refused() {
        let bytes = edited(|b| b[0] = (2 << 5) | (b[0] & 0x1f));
        assert_eq!(
            decode(&bytes),
            Err(PacketError::UnsupportedVersion { version: 2 })
        );
    }

    #[test]
    fn a_datagram_shorter_than_the_mandatory_section_is_refused() {
        assert_eq!(
            decode(&UP_PACKET[..23]),
            Err(PacketError::Truncated { datagram_len: 23 })
        );
        assert_eq!(decode(&[]), Err(PacketError::Truncated { datagram_len: 0 }));
    }

    #[test]
    fn a_length_field_below_24_is_refused() {
        let bytes = edited(|b| b[3] = 23);
        assert_eq!(
            decode(&bytes),
            Err(PacketError::LengthTooSmall {
                length: 23,
                minimum: 24
            })
        );
    }

    #[test]
    fn an_authenticated_packet_needs_a_length_of_26() {
        let bytes = edited(|b| {
            b[1] |= FLAG_AUTH;
            b[3] = 25;
            b.extend([0, 0]);
        });
        assert_eq!(
            decode(&bytes),
            Err(PacketError::LengthTooSmall {
                length: 25,
                minimum: 26
            })
        );
    }

    #[test]
    fn a_length_field_beyond_the_datagram_is_refused() {
        let bytes = edited(|b| b[3] = 28);
        assert_eq!(
            decode(&bytes),
            Err(PacketError::LengthExceedsDatagram {
                length: 28,
                datagram_len: 24
            })
        );
    }

    #[test]
    fn bytes_past_the_length_field_are_ignored() {
        let padded = edited(|b| b.extend([0xff; 8]));
        assert_eq!(decode(&padded), Ok(up_packet()));
        let longer = edited(|b| {
            b[3] = 28;
            b.extend([0xff; 4]);
        });
        assert_eq!(decode(&longer), Ok(up_packet()));
    }

    #[test]
    fn a_zero_detect_multiplier_is_refused() {
        assert_eq!(
            decode(&edited(|b| b[2] = 0)),
            Err(PacketError::ZeroDetectMult)
        );
    }

    #[test]
    fn a_packet_with_the_multipoint_bit_is_refused() {
        assert_eq!(
            decode(&edited(|b| b[1] |= FLAG_MULTIPOINT)),
            Err(PacketError::Multipoint)
        );
    }

    #[test]
    fn a_zero_my_discriminator_is_refused() {
        assert_eq!(
            decode(&edited(|b| b[4..8].fill(0))),
            Err(PacketError::ZeroMyDiscriminator)
        );
    }

    #[test]
    fn a_zero_your_discriminator_is_refused_unless_the_sender_is_down_or_admin_down() {
        for (state, accepted) in [
            (State::AdminDown, true),
            (State::Down, true),
            (State::Init, false),
            (State::Up, false),
        ] {
            let bytes = ControlPacket {
                state,
                your_discriminator: 0,
                ..up_packet()
            }
            .encode();
            let got = decode(&bytes);
            if accepted {
                assert!(got.is_ok(), "{state:?}: {got:?}");
            } else {
                assert_eq!(got, Err(PacketError::ZeroYourDiscriminator { state }));
            }
        }
    }

    #[test]
    fn an_authenticated_packet_is_refused_as_unsupported() {
        // Simple Password (type 1), length 5, key id 1, password "k": a well-formed section.
        let bytes = edited(|b| {
            b[1] |= FLAG_AUTH;
            b[3] = 29;
            b.extend([1, 5, 1, b'k', b'!']);
        });
        assert_eq!(decode(&bytes), Err(PacketError::AuthenticationNotSupported));
    }

    #[test]
    fn every_diagnostic_and_state_code_round_trips() {
        for code in 0..32u8 {
            assert_eq!(Diag::from_code(code).code(), code);
        }
        assert_eq!(Diag::from_code(8), Diag::ReverseConcatenatedPathDown);
        assert_eq!(Diag::from_code(9), Diag::Other(9));
        for code in 0..4u8 {
            assert_eq!(State::from_code(code).code(), code);
        }
    }

    /// A packet that [`decode`] accepts, its fields drawn from `rng`.
    fn random_valid_packet(rng: &mut SplitMix64) -> ControlPacket {
        let r = rng.next_u64();
        let state = State::from_code(r as u8);
        let down = matches!(state, State::Down | State::AdminDown);
        let bit = |n: u32| r >> (8 + n) & 1 == 1;
        ControlPacket {
            version: VERSION,
            diag: Diag::from_code((r >> 2) as u8),
            state,
            poll: bit(0),
            fin: bit(1),
            control_plane_independent: bit(2),
            authentication_present: false,
            demand: bit(3),
            multipoint: false,
            detect_mult: ((r >> 16) as u8).max(1),
            my_discriminator: (rng.next_u64() as u32).max(1),
            your_discriminator: if down && bit(4) {
                0
            } else {
                (rng.next_u64() as u32).max(1)
            },
            desired_min_tx: rng.next_u64() as u32,
            required_min_rx: rng.next_u64() as u32,
            required_min_echo_rx: rng.next_u64() as u32,
        }
    }

    #[test]
    fn random_packets_round_trip_through_encode_and_decode() {
        let mut rng = SplitMix64::new(5880);
        for _ in 0..10_000 {
            let packet = random_valid_packet(&mut rng);
            assert_eq!(decode(&packet.encode()), Ok(packet));
        }
    }

    #[test]
    fn decode_never_panics_on_any_prefix_or_on_random_bytes() {
        for len in 0..=UP_PACKET.len() {
            let got = decode(&UP_PACKET[..len]);
            assert_eq!(
                got.is_ok(),
                len == UP_PACKET.len(),
                "prefix of {len}: {got:?}"
            );
        }
        let mut rng = SplitMix64::new(5881);
        let mut accepted = 0;
        for _ in 0..10_000 {
            let len = (rng.next_u64() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Give a good share a valid first byte and length so later checks are reached.
            if len >= 24 && rng.next_u64().is_multiple_of(2) {
                bytes[0] = (VERSION << 5) | (bytes[0] & 0x1f);
                bytes[3] = 24 + (bytes[3] % (len as u8 - 23));
            }
            if let Ok(packet) = decode(&bytes) {
                accepted += 1;
                assert_eq!(decode(&packet.encode()), Ok(packet));
            }
        }
        assert!(
            accepted > 0,
            "the random inputs never reached a valid packet"
        );
    }

    #[test]
    fn every_error_has_its_own_metric_label() {
        let errors = [
            PacketError::Truncated { datagram_len: 0 },
            PacketError::UnsupportedVersion { version: 0 },
            PacketError::LengthTooSmall {
                length: 0,
                minimum: 24,
            },
            PacketError::LengthExceedsDatagram {
                length: 30,
                datagram_len: 24,
            },
            PacketError::ZeroDetectMult,
            PacketError::Multipoint,
            PacketError::ZeroMyDiscriminator,
            PacketError::ZeroYourDiscriminator { state: State::Up },
            PacketError::AuthenticationNotSupported,
        ];
        let labels: std::collections::HashSet<_> =
            errors.iter().map(PacketError::metric_label).collect();
        assert_eq!(labels.len(), errors.len());
    }
}
