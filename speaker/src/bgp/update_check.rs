//! Consistency checks of an UPDATE received from a peer (RFC 4271 §6.3). Pure: no I/O, no clock.
//!
//! An announce-only speaker keeps nothing a peer announces, so the UPDATE is walked, never
//! decoded into routes: lengths must add up, each attribute must fit, the well-known ones must
//! have their fixed sizes and flags, AS_PATH segments must fill the attribute exactly, and prefix
//! lengths must fit their family. We reset the session with the RFC 4271 NOTIFICATION instead of
//! RFC 7606's treat-as-withdraw: there is nothing of the peer's to withdraw, and a reset makes a
//! broken peer visible in its own logs.

use super::error::SessionError;
use super::wire::DecodeContext;

/// What an UPDATE carried, counted without being kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateSummary {
    /// Prefixes withdrawn (classic and MP_UNREACH).
    pub withdrawn: u32,
    /// Prefixes announced (classic and MP_REACH).
    pub announced: u32,
}

mod attr {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MED: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const MP_REACH: u8 = 14;
    pub const MP_UNREACH: u8 = 15;
    pub const LARGE_COMMUNITIES: u8 = 32;
}

const FLAG_OPTIONAL: u8 = 0x80;
const FLAG_TRANSITIVE: u8 = 0x40;
const FLAG_EXTENDED: u8 = 0x10;

fn be16(b: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
    ])))
}

/// Counts the prefixes of an NLRI field; each prefix must fit `max_bits` and the field.
fn count_prefixes(mut nlri: &[u8], max_bits: u8) -> Result<u32, SessionError> {
    let mut n = 0u32;
    while let Some((&bits, rest)) = nlri.split_first() {
        if bits > max_bits {
            return Err(SessionError::InvalidNetworkField);
        }
        let bytes = usize::from(bits).div_ceil(8);
        nlri = rest.get(bytes..).ok_or(SessionError::InvalidNetworkField)?;
        n += 1;
    }
    Ok(n)
}

fn max_bits(afi: u16) -> Option<u8> {
    match afi {
        1 => Some(32),
        2 => Some(128),
        _ => None,
    }
}

fn check_as_path(mut v: &[u8], asn_size: usize) -> Result<(), SessionError> {
    while !v.is_empty() {
        let (seg_type, count) = match v {
            [t, c, ..] => (*t, usize::from(*c)),
            _ => return Err(SessionError::MalformedAsPath),
        };
        if !(1..=4).contains(&seg_type) || count == 0 {
            return Err(SessionError::MalformedAsPath);
        }
        v = v
            .get(2 + count * asn_size..)
            .ok_or(SessionError::MalformedAsPath)?;
    }
    Ok(())
}

/// Walks an UPDATE body (after the header) and reports what it carried, or the error to send.
pub fn check_update(body: &[u8], ctx: DecodeContext) -> Result<UpdateSummary, SessionError> {
    let withdrawn_len = be16(body, 0).ok_or(SessionError::MalformedAttributeList)?;
    let withdrawn = body
        .get(2..2 + withdrawn_len)
        .ok_or(SessionError::MalformedAttributeList)?;
    let attrs_len = be16(body, 2 + withdrawn_len).ok_or(SessionError::MalformedAttributeList)?;
    let attrs_start = 4 + withdrawn_len;
    let mut attrs = body
        .get(attrs_start..attrs_start + attrs_len)
        .ok_or(SessionError::MalformedAttributeList)?;
    let nlri = &body[attrs_start + attrs_len..];

    let mut summary = UpdateSummary {
        withdrawn: count_prefixes(withdrawn, 32)?,
        announced: count_prefixes(nlri, 32)?,
    };
    let mut seen = [false; 256];
    let asn_size = if ctx.four_octet_as { 4 } else { 2 };
    while !attrs.is_empty() {
        let (flags, type_code) = match attrs {
            [f, t, ..] => (*f, *t),
            _ => return Err(SessionError::MalformedAttributeList),
        };
        let (len, head) = if flags & FLAG_EXTENDED != 0 {
            (
                be16(attrs, 2).ok_or(SessionError::MalformedAttributeList)?,
                4,
            )
        } else {
            (
                usize::from(*attrs.get(2).ok_or(SessionError::MalformedAttributeList)?),
                3,
            )
        };
        let value = attrs
            .get(head..head + len)
            .ok_or(SessionError::MalformedAttributeList)?;
        attrs = &attrs[head + len..];
        if std::mem::replace(&mut seen[usize::from(type_code)], true) {
            return Err(SessionError::MalformedAttributeList);
        }
        check_attribute(flags, type_code, value, asn_size, &mut summary)?;
    }
    let has = |t: u8| seen[usize::from(t)];
    if !nlri.is_empty() || has(attr::MP_REACH) {
        for t in [attr::ORIGIN, attr::AS_PATH] {
            if !has(t) {
                return Err(SessionError::MissingWellKnownAttribute { type_code: t });
            }
        }
    }
    if !nlri.is_empty() && !has(attr::NEXT_HOP) {
        return Err(SessionError::MissingWellKnownAttribute {
            type_code: attr::NEXT_HOP,
        });
    }
    Ok(summary)
}

fn check_attribute(
    flags: u8,
    type_code: u8,
    value: &[u8],
    asn_size: usize,
    summary: &mut UpdateSummary,
) -> Result<(), SessionError> {
    let well_known = matches!(
        type_code,
        attr::ORIGIN | attr::AS_PATH | attr::NEXT_HOP | attr::LOCAL_PREF | attr::ATOMIC_AGGREGATE
    );
    if well_known && flags & (FLAG_OPTIONAL | FLAG_TRANSITIVE) != FLAG_TRANSITIVE {
        return Err(SessionError::AttributeFlags { type_code });
    }
    let fixed_len = match type_code {
        attr::ORIGIN => Some(1),
        attr::NEXT_HOP | attr::MED | attr::LOCAL_PREF => Some(4),
        attr::ATOMIC_AGGREGATE => Some(0),
        attr::AGGREGATOR => Some(2 + asn_size),
        _ => None,
    };
    if fixed_len.is_some_and(|l| l != value.len()) {
        return Err(SessionError::AttributeLength { type_code });
    }
    match type_code {
        attr::ORIGIN if value[0] > 2 => return Err(SessionError::InvalidOrigin),
        attr::AS_PATH => check_as_path(value, asn_size)?,
        attr::COMMUNITIES if !value.len().is_multiple_of(4) => {
            return Err(SessionError::AttributeLength { type_code });
        }
        attr::LARGE_COMMUNITIES if !value.len().is_multiple_of(12) => {
            return Err(SessionError::AttributeLength { type_code });
        }
        attr::MP_REACH => {
            // AFI(2) SAFI(1) next-hop length(1) next hop, reserved(1), NLRI.
            let nh_len = usize::from(
                *value
                    .get(3)
                    .ok_or(SessionError::AttributeLength { type_code })?,
            );
            let nlri = value
                .get(5 + nh_len..)
                .ok_or(SessionError::AttributeLength { type_code })?;
            if let Some(bits) = be16(value, 0).and_then(|afi| max_bits(afi as u16)) {
                summary.announced += count_prefixes(nlri, bits)?;
            }
        }
        attr::MP_UNREACH => {
            let afi = be16(value, 0).ok_or(SessionError::AttributeLength { type_code })?;
            let nlri = value
                .get(3..)
                .ok_or(SessionError::AttributeLength { type_code })?;
            if let Some(bits) = max_bits(afi as u16) {
                summary.withdrawn += count_prefixes(nlri, bits)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AS4: DecodeContext = DecodeContext {
        four_octet_as: true,
    };

    /// ORIGIN IGP, AS_PATH [64513], NEXT_HOP 10.99.0.2, NLRI 10.99.1.0/24.
    fn good() -> Vec<u8> {
        let attrs = [
            0x40, 1, 1, 0, //
            0x40, 2, 6, 2, 1, 0, 0, 0xfb, 0xf9, //
            0x40, 3, 4, 10, 99, 0, 2,
        ];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        b.extend_from_slice(&[24, 10, 99, 1]);
        b
    }

    #[test]
    fn a_well_formed_update_is_counted() {
        assert_eq!(
            check_update(&good(), AS4),
            Ok(UpdateSummary {
                withdrawn: 0,
                announced: 1
            })
        );
    }

    #[test]
    fn an_attribute_length_running_past_the_message_is_a_malformed_attribute_list() {
        let mut b = good();
        b[3] += 16;
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn a_withdrawn_length_running_past_the_message_is_a_malformed_attribute_list() {
        assert_eq!(
            check_update(&[0, 9, 0, 0], AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn an_as_path_with_a_trailing_byte_is_a_malformed_as_path() {
        let attrs = [0x40, 1, 1, 0, 0x40, 2, 7, 2, 1, 0, 0, 0xfb, 0xf9, 0];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        assert_eq!(check_update(&b, AS4), Err(SessionError::MalformedAsPath));
    }

    #[test]
    fn an_origin_with_a_trailing_byte_is_an_attribute_length_error() {
        let attrs = [0x40, 1, 2, 0, 0];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::AttributeLength { type_code: 1 })
        );
    }

    #[test]
    fn a_repeated_attribute_is_a_malformed_attribute_list() {
        let attrs = [0x40, 1, 1, 0, 0x40, 1, 1, 0];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn nlri_without_next_hop_misses_a_well_known_attribute() {
        let attrs = [0x40, 1, 1, 0, 0x40, 2, 0];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        b.extend_from_slice(&[8, 10]);
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::MissingWellKnownAttribute { type_code: 3 })
        );
    }

    #[test]
    fn a_prefix_longer_than_32_bits_is_an_invalid_network_field() {
        let mut b = good();
        let n = b.len();
        b[n - 4] = 33;
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::InvalidNetworkField)
        );
    }

    #[test]
    fn an_origin_marked_optional_has_wrong_flags() {
        let attrs = [0xc0, 1, 1, 0];
        let mut b = vec![0, 0, 0, attrs.len() as u8];
        b.extend_from_slice(&attrs);
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::AttributeFlags { type_code: 1 })
        );
    }

    #[test]
    fn end_of_rib_markers_are_valid() {
        assert_eq!(
            check_update(&[0, 0, 0, 0], AS4),
            Ok(UpdateSummary::default())
        );
        let v6 = [0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1];
        assert_eq!(check_update(&v6, AS4), Ok(UpdateSummary::default()));
    }
}
