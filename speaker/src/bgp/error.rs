//! Every way a session can fail, each mapped to the NOTIFICATION it sends (RFC 4271 §4.5, §6).
//! Pure: no I/O, no clock.

use std::fmt;

/// A NOTIFICATION message body: error code, subcode and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Error code (RFC 4271 §4.5).
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Diagnostic data.
    pub data: Vec<u8>,
}

/// NOTIFICATION error codes (RFC 4271 §4.5, RFC 6608, RFC 7313).
pub mod code {
    /// Message Header Error.
    pub const HEADER: u8 = 1;
    /// OPEN Message Error.
    pub const OPEN: u8 = 2;
    /// UPDATE Message Error.
    pub const UPDATE: u8 = 3;
    /// Hold Timer Expired.
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    /// Finite State Machine Error.
    pub const FSM: u8 = 5;
    /// Cease.
    pub const CEASE: u8 = 6;
}

impl Notification {
    /// The RFC 9003 shutdown communication of a Cease (subcodes 2 and 4), if one is present and
    /// well formed.
    pub fn shutdown_message(&self) -> Option<String> {
        if self.code != code::CEASE || !matches!(self.subcode, 2 | 4) {
            return None;
        }
        let (&len, rest) = self.data.split_first()?;
        let text = rest.get(..usize::from(len))?;
        String::from_utf8(text.to_vec()).ok()
    }
}

impl Notification {
    /// The code and subcode in words (RFC 4271 §4.5, RFC 4486, RFC 6608, RFC 7313), such as
    /// `6/2 Cease: administrative shutdown`, with the shutdown message when one was sent.
    pub fn describe(&self) -> String {
        let code = match self.code {
            code::HEADER => "Message Header Error",
            code::OPEN => "OPEN Message Error",
            code::UPDATE => "UPDATE Message Error",
            code::HOLD_TIMER_EXPIRED => "Hold Timer Expired",
            code::FSM => "Finite State Machine Error",
            code::CEASE => "Cease",
            7 => "ROUTE-REFRESH Message Error",
            _ => "unknown error code",
        };
        let sub = match (self.code, self.subcode) {
            (code::HEADER, 1) => "connection not synchronized",
            (code::HEADER, 2) => "bad message length",
            (code::HEADER, 3) => "bad message type",
            (code::OPEN, 1) => "unsupported version number",
            (code::OPEN, 2) => "bad peer AS",
            (code::OPEN, 3) => "bad BGP identifier",
            (code::OPEN, 4) => "unsupported optional parameter",
            (code::OPEN, 6) => "unacceptable hold time",
            (code::OPEN, 7) => "unsupported capability",
            (code::OPEN, 11) => "role mismatch",
            (code::UPDATE, 1) => "malformed attribute list",
            (code::UPDATE, 2) => "unrecognized well-known attribute",
            (code::UPDATE, 3) => "missing well-known attribute",
            (code::UPDATE, 4) => "attribute flags error",
            (code::UPDATE, 5) => "attribute length error",
            (code::UPDATE, 6) => "invalid ORIGIN attribute",
            (code::UPDATE, 8) => "invalid NEXT_HOP attribute",
            (code::UPDATE, 9) => "optional attribute error",
            (code::UPDATE, 10) => "invalid network field",
            (code::UPDATE, 11) => "malformed AS_PATH",
            (code::FSM, 1) => "unexpected message in OpenSent",
            (code::FSM, 2) => "unexpected message in OpenConfirm",
            (code::FSM, 3) => "unexpected message in Established",
            (code::CEASE, 1) => "maximum number of prefixes reached",
            (code::CEASE, 2) => "administrative shutdown",
            (code::CEASE, 3) => "peer de-configured",
            (code::CEASE, 4) => "administrative reset",
            (code::CEASE, 5) => "connection rejected",
            (code::CEASE, 6) => "other configuration change",
            (code::CEASE, 7) => "connection collision resolution",
            (code::CEASE, 8) => "out of resources",
            (code::CEASE, 9) => "hard reset",
            (code::CEASE, 10) => "BFD down",
            (7, 1) => "invalid message length",
            (_, 0) => "unspecific",
            _ => "unknown subcode",
        };
        match self.shutdown_message() {
            Some(m) if !m.is_empty() => {
                format!("{}/{} {code}: {sub} ({m:?})", self.code, self.subcode)
            }
            _ => format!("{}/{} {code}: {sub}", self.code, self.subcode),
        }
    }
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.code, self.subcode)?;
        if !self.data.is_empty() {
            f.write_str(" data ")?;
            for b in &self.data {
                write!(f, "{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// Cease subcodes we send (RFC 4486).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CeaseReason {
    /// The speaker is shutting down (subcode 2).
    AdministrativeShutdown,
    /// The peer was removed from the configuration (subcode 3).
    PeerDeconfigured,
    /// The peer's configuration changed and the session restarts (subcode 6).
    OtherConfigurationChange,
}

/// FSM states named in RFC 6608 subcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsmErrorState {
    /// Unexpected message in OpenSent (5/1).
    OpenSent,
    /// Unexpected message in OpenConfirm (5/2).
    OpenConfirm,
    /// Unexpected message in Established (5/3).
    Established,
}

/// An error that ends a session. Each variant *is* a NOTIFICATION: [`SessionError::notification`]
/// gives its code, subcode and data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The marker is not 16 bytes of 0xff (1/1).
    #[error("message header marker is not all ones")]
    BadMarker,
    /// Length below 19, above 4096, or wrong for the message type (1/2).
    #[error("bad message length {length}")]
    BadLength {
        /// The length field as received.
        length: u16,
    },
    /// Unknown message type (1/3).
    #[error("unknown message type {message_type}")]
    BadType {
        /// The type byte as received.
        message_type: u8,
    },
    /// OPEN with a version other than 4 (2/1, data = the version we support).
    #[error("unsupported BGP version {version}")]
    UnsupportedVersion {
        /// The peer's version.
        version: u8,
    },
    /// The peer's AS is not the configured one (2/2).
    #[error("peer announced AS {received}, expected {expected}")]
    BadPeerAs {
        /// AS from the OPEN (or its 4-octet AS capability).
        received: u32,
        /// AS from our configuration.
        expected: u32,
    },
    /// `dynamicASN: external`, but the peer announced our own AS (2/2).
    #[error("peer announced AS {received}, ours; dynamicASN external wants another")]
    PeerAsNotExternal {
        /// AS from the OPEN.
        received: u32,
    },
    /// BGP identifier 0, or equal to ours on an iBGP session (2/3).
    #[error("bad BGP identifier")]
    BadBgpId,
    /// An optional parameter other than capabilities (2/4).
    #[error("unsupported optional parameter {param_type}")]
    UnsupportedOptionalParameter {
        /// The parameter type.
        param_type: u8,
    },
    /// Hold time 1 or 2 (2/6, data = the hold time).
    #[error("unacceptable hold time {hold_time}")]
    UnacceptableHoldTime {
        /// The peer's hold time in seconds.
        hold_time: u16,
    },
    /// The peer's BGP Role does not pair with ours, it announced several different ones, or
    /// none while `strictRole` asks for one (2/11, RFC 9234 §4.2).
    #[error("{}", describe_role_mismatch(*ours, theirs))]
    RoleMismatch {
        /// Our configured role.
        ours: crate::bgp::role::Role,
        /// The distinct role values in the peer's OPEN, in wire order (empty: none).
        theirs: Vec<u8>,
    },
    /// OPEN whose optional parameters or capabilities do not add up (2/0).
    #[error("malformed OPEN optional parameters")]
    MalformedOpen,
    /// UPDATE whose length fields or attribute framing do not add up, or that repeats an
    /// attribute (3/1).
    #[error("malformed attribute list")]
    MalformedAttributeList,
    /// A well-known attribute with wrong flags (3/4).
    #[error("attribute {type_code} has wrong flags")]
    AttributeFlags {
        /// The attribute's type code.
        type_code: u8,
    },
    /// A mandatory well-known attribute is missing (3/3, data = its type code).
    #[error("missing well-known attribute {type_code}")]
    MissingWellKnownAttribute {
        /// The type code of the missing attribute.
        type_code: u8,
    },
    /// A fixed-size attribute of the wrong length (3/5).
    #[error("attribute {type_code} has a wrong length")]
    AttributeLength {
        /// The attribute's type code.
        type_code: u8,
    },
    /// ORIGIN other than 0, 1, 2 (3/6).
    #[error("invalid ORIGIN")]
    InvalidOrigin,
    /// A prefix length beyond the family's address size (3/10).
    #[error("invalid network field")]
    InvalidNetworkField,
    /// AS_PATH whose segments do not fill the attribute exactly (3/11).
    #[error("malformed AS_PATH")]
    MalformedAsPath,
    /// No message from the peer within the hold time (4/0).
    #[error("hold timer expired")]
    HoldTimerExpired,
    /// A message the current state does not accept (5/1, 5/2, 5/3).
    #[error("unexpected message in {0:?}")]
    UnexpectedMessage(FsmErrorState),
    /// We end the session on purpose (6/x).
    #[error("cease: {0:?}")]
    Cease(CeaseReason),
}

fn describe_role_mismatch(ours: crate::bgp::role::Role, theirs: &[u8]) -> String {
    use crate::bgp::role::Role;
    let want = ours.counterpart();
    let named = |v: u8| match Role::from_value(v) {
        Some(r) => r.name().to_owned(),
        None => format!("value {v}, which RFC 9234 does not define"),
    };
    match theirs {
        [] => format!(
            "role mismatch: we are {ours} and strictRole requires the peer to announce its BGP role (RFC 9234); it announced none"
        ),
        [one] => format!(
            "role mismatch: we are {ours}, the peer announced {}; a {ours}'s peer must be {want} (RFC 9234)",
            named(*one)
        ),
        several => format!(
            "role mismatch: the peer announced several different roles ({}); RFC 9234 allows one",
            several
                .iter()
                .map(|v| named(*v))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl SessionError {
    /// The NOTIFICATION that reports this error to the peer.
    pub fn notification(&self) -> Notification {
        use SessionError::*;
        let (code, subcode, data) = match self {
            BadMarker => (code::HEADER, 1, vec![]),
            BadLength { length } => (code::HEADER, 2, length.to_be_bytes().to_vec()),
            BadType { message_type } => (code::HEADER, 3, vec![*message_type]),
            MalformedOpen => (code::OPEN, 0, vec![]),
            UnsupportedVersion { .. } => (code::OPEN, 1, 4u16.to_be_bytes().to_vec()),
            BadPeerAs { .. } | PeerAsNotExternal { .. } => (code::OPEN, 2, vec![]),
            BadBgpId => (code::OPEN, 3, vec![]),
            UnsupportedOptionalParameter { .. } => (code::OPEN, 4, vec![]),
            UnacceptableHoldTime { hold_time } => (code::OPEN, 6, hold_time.to_be_bytes().to_vec()),
            RoleMismatch { .. } => (code::OPEN, 11, vec![]),
            MalformedAttributeList => (code::UPDATE, 1, vec![]),
            MissingWellKnownAttribute { type_code } => (code::UPDATE, 3, vec![*type_code]),
            AttributeFlags { .. } => (code::UPDATE, 4, vec![]),
            AttributeLength { .. } => (code::UPDATE, 5, vec![]),
            InvalidOrigin => (code::UPDATE, 6, vec![]),
            InvalidNetworkField => (code::UPDATE, 10, vec![]),
            MalformedAsPath => (code::UPDATE, 11, vec![]),
            HoldTimerExpired => (code::HOLD_TIMER_EXPIRED, 0, vec![]),
            UnexpectedMessage(FsmErrorState::OpenSent) => (code::FSM, 1, vec![]),
            UnexpectedMessage(FsmErrorState::OpenConfirm) => (code::FSM, 2, vec![]),
            UnexpectedMessage(FsmErrorState::Established) => (code::FSM, 3, vec![]),
            Cease(CeaseReason::AdministrativeShutdown) => (code::CEASE, 2, vec![]),
            Cease(CeaseReason::PeerDeconfigured) => (code::CEASE, 3, vec![]),
            Cease(CeaseReason::OtherConfigurationChange) => (code::CEASE, 6, vec![]),
        };
        Notification {
            code,
            subcode,
            data,
        }
    }

    /// A short stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        use SessionError::*;
        match self {
            BadMarker => "bad_marker",
            BadLength { .. } => "bad_length",
            BadType { .. } => "bad_type",
            UnsupportedVersion { .. } => "unsupported_version",
            BadPeerAs { .. } | PeerAsNotExternal { .. } => "bad_peer_as",
            BadBgpId => "bad_bgp_id",
            UnsupportedOptionalParameter { .. } => "unsupported_optional_parameter",
            UnacceptableHoldTime { .. } => "unacceptable_hold_time",
            RoleMismatch { .. } => "role_mismatch",
            MalformedOpen => "malformed_open",
            MalformedAttributeList => "malformed_attribute_list",
            AttributeFlags { .. } => "attribute_flags",
            MissingWellKnownAttribute { .. } => "missing_well_known_attribute",
            AttributeLength { .. } => "attribute_length",
            InvalidOrigin => "invalid_origin",
            InvalidNetworkField => "invalid_network_field",
            MalformedAsPath => "malformed_as_path",
            HoldTimerExpired => "hold_timer_expired",
            UnexpectedMessage(_) => "fsm_error",
            Cease(_) => "cease",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_is_described_in_words_with_its_shutdown_message() {
        let plain = Notification {
            code: code::OPEN,
            subcode: 2,
            data: vec![],
        };
        assert_eq!(plain.describe(), "2/2 OPEN Message Error: bad peer AS");
        let mut data = vec![11];
        data.extend_from_slice(b"maintenance");
        let shutdown = Notification {
            code: code::CEASE,
            subcode: 2,
            data,
        };
        assert_eq!(
            shutdown.describe(),
            "6/2 Cease: administrative shutdown (\"maintenance\")"
        );
        let unknown = Notification {
            code: 42,
            subcode: 7,
            data: vec![],
        };
        assert_eq!(
            unknown.describe(),
            "42/7 unknown error code: unknown subcode"
        );
    }
}
