//! Consistency checks of an UPDATE received from a peer (RFC 4271 §6.3), with the revised error
//! handling of RFC 7606. Pure: no I/O, no clock.
//!
//! An announce-only speaker keeps nothing a peer announces, so the UPDATE is walked, never
//! decoded into routes: lengths must add up, each attribute must fit, the well-known ones must
//! have their fixed sizes and flags, AS_PATH segments must fill the attribute exactly, and prefix
//! lengths must fit their family.
//!
//! What a malformed UPDATE costs follows RFC 7606 (the strongest approach wins when several
//! apply):
//!
//! | Error | RFC 7606 | Here |
//! |---|---|---|
//! | Withdrawn Routes or Total Attribute Length past the message (the NLRI cannot be found) | session reset | NOTIFICATION 3/1 |
//! | Classic NLRI or withdrawn prefix too long or cut short (§5.3) | session reset | NOTIFICATION 3/10 |
//! | MP_REACH_NLRI / MP_UNREACH_NLRI malformed or repeated (§7.11, §3 g) | session reset | NOTIFICATION |
//! | An attribute overrunning the path attributes, or a stub too short for one (§4) | treat-as-withdraw | session kept |
//! | Missing ORIGIN, AS_PATH or NEXT_HOP with NLRI (§3 d) | treat-as-withdraw | session kept |
//! | ORIGIN, AS_PATH, NEXT_HOP, MED, LOCAL_PREF, COMMUNITIES, ORIGINATOR_ID, CLUSTER_LIST, EXTENDED and LARGE COMMUNITIES, ONLY_TO_CUSTOMER malformed, or a well-known one with wrong flags (§7, §3 c; RFC 8092 §6; RFC 9234 §5) | treat-as-withdraw | session kept |
//! | ATOMIC_AGGREGATE or AGGREGATOR of the wrong length (§7.6, §7.7); any other attribute repeated (§3 g) | attribute discard | session kept |
//!
//! A treat-as-withdraw would withdraw the UPDATE's routes from our RIB, and an attribute discard
//! would use the routes without the attribute: we hold no routes of the peer, so both come to
//! the same thing, the session stays up and the UPDATE is counted and logged
//! ([`UpdateSummary::malformed`]). Resetting the session would instead withdraw every Service
//! route this node announces, for a fault that touches nothing of ours.

use super::error::SessionError;
use super::wire::DecodeContext;

/// What an UPDATE carried, counted without being kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateSummary {
    /// Prefixes withdrawn (classic and MP_UNREACH).
    pub withdrawn: u32,
    /// Prefixes announced (classic and MP_REACH).
    pub announced: u32,
    /// The strongest RFC 7606 problem found short of a session reset, if any.
    pub malformed: Option<Malformed>,
}

/// A malformed UPDATE that RFC 7606 does not reset the session for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// What RFC 7606 says to do with it.
    pub handling: Handling,
    /// The error RFC 4271 alone would have reset the session with.
    pub error: SessionError,
}

/// RFC 7606's approaches short of a session reset, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Handling {
    /// The malformed attribute is ignored (§2, "attribute discard").
    AttributeDiscard,
    /// The UPDATE's routes are taken as withdrawn (§2, "treat-as-withdraw").
    TreatAsWithdraw,
}

impl Handling {
    /// The `handling` label of `ferrolb_bgp_malformed_updates_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Handling::AttributeDiscard => "attribute_discard",
            Handling::TreatAsWithdraw => "treat_as_withdraw",
        }
    }
}

/// One problem found while walking an UPDATE.
enum Problem {
    /// The session must be reset with this NOTIFICATION.
    Reset(SessionError),
    /// A problem the session survives.
    Keep(Handling, SessionError),
}

fn withdraw(error: SessionError) -> Problem {
    Problem::Keep(Handling::TreatAsWithdraw, error)
}

fn discard(error: SessionError) -> Problem {
    Problem::Keep(Handling::AttributeDiscard, error)
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
    pub const ORIGINATOR_ID: u8 = 9;
    pub const CLUSTER_LIST: u8 = 10;
    pub const MP_REACH: u8 = 14;
    pub const MP_UNREACH: u8 = 15;
    pub const EXTENDED_COMMUNITIES: u8 = 16;
    pub const LARGE_COMMUNITIES: u8 = 32;
    pub const ONLY_TO_CUSTOMER: u8 = 35;
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

/// Walks an UPDATE body (after the header) and reports what it carried, or the NOTIFICATION
/// to reset the session with (see the module documentation for which errors do).
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
        malformed: None,
    };
    let mut seen = [false; 256];
    let asn_size = if ctx.four_octet_as { 4 } else { 2 };
    while !attrs.is_empty() {
        // §4: a stub too short for an attribute header, or an attribute running past the path
        // attributes: the rest cannot be read, the NLRI is still found by the total length.
        let header = match attrs {
            [f, t, ..] => {
                let extended = f & FLAG_EXTENDED != 0;
                let len = if extended {
                    be16(attrs, 2)
                } else {
                    attrs.get(2).map(|l| usize::from(*l))
                };
                len.map(|len| (*f, *t, len, if extended { 4 } else { 3 }))
            }
            _ => None,
        };
        let Some((flags, type_code, len, head)) = header else {
            note(
                &mut summary,
                Handling::TreatAsWithdraw,
                SessionError::MalformedAttributeList,
            );
            break;
        };
        let Some(value) = attrs.get(head..head + len) else {
            note(
                &mut summary,
                Handling::TreatAsWithdraw,
                SessionError::MalformedAttributeList,
            );
            break;
        };
        attrs = &attrs[head + len..];
        if std::mem::replace(&mut seen[usize::from(type_code)], true) {
            // §3 g: a repeated MP_REACH/MP_UNREACH resets; any other repeat is discarded.
            if matches!(type_code, attr::MP_REACH | attr::MP_UNREACH) {
                return Err(SessionError::MalformedAttributeList);
            }
            note(
                &mut summary,
                Handling::AttributeDiscard,
                SessionError::MalformedAttributeList,
            );
            continue;
        }
        match check_attribute(flags, type_code, value, asn_size, &mut summary) {
            Ok(()) => {}
            Err(Problem::Reset(e)) => return Err(e),
            Err(Problem::Keep(handling, e)) => note(&mut summary, handling, e),
        }
    }
    let has = |t: u8| seen[usize::from(t)];
    let mut missing = Vec::new();
    if !nlri.is_empty() || has(attr::MP_REACH) {
        missing.extend(
            [attr::ORIGIN, attr::AS_PATH]
                .into_iter()
                .filter(|t| !has(*t)),
        );
    }
    if !nlri.is_empty() && !has(attr::NEXT_HOP) {
        missing.push(attr::NEXT_HOP);
    }
    if let Some(&type_code) = missing.first() {
        note(
            &mut summary,
            Handling::TreatAsWithdraw,
            SessionError::MissingWellKnownAttribute { type_code },
        );
    }
    Ok(summary)
}

/// Keeps the strongest problem (the first of equals).
fn note(summary: &mut UpdateSummary, handling: Handling, error: SessionError) {
    if summary
        .malformed
        .as_ref()
        .is_none_or(|m| m.handling < handling)
    {
        summary.malformed = Some(Malformed { handling, error });
    }
}

fn check_attribute(
    flags: u8,
    type_code: u8,
    value: &[u8],
    asn_size: usize,
    summary: &mut UpdateSummary,
) -> Result<(), Problem> {
    let well_known = matches!(
        type_code,
        attr::ORIGIN | attr::AS_PATH | attr::NEXT_HOP | attr::LOCAL_PREF | attr::ATOMIC_AGGREGATE
    );
    // §3 c: wrong flags are handled as the attribute's own malformation.
    let malformed = |error: SessionError| match type_code {
        attr::ATOMIC_AGGREGATE | attr::AGGREGATOR => discard(error),
        attr::MP_REACH | attr::MP_UNREACH => Problem::Reset(error),
        _ => withdraw(error),
    };
    if well_known && flags & (FLAG_OPTIONAL | FLAG_TRANSITIVE) != FLAG_TRANSITIVE {
        return Err(malformed(SessionError::AttributeFlags { type_code }));
    }
    let fixed_len = match type_code {
        attr::ORIGIN => Some(1),
        attr::NEXT_HOP
        | attr::MED
        | attr::LOCAL_PREF
        | attr::ORIGINATOR_ID
        | attr::ONLY_TO_CUSTOMER => Some(4),
        attr::ATOMIC_AGGREGATE => Some(0),
        attr::AGGREGATOR => Some(2 + asn_size),
        _ => None,
    };
    if fixed_len.is_some_and(|l| l != value.len()) {
        return Err(malformed(SessionError::AttributeLength { type_code }));
    }
    let multiple_of = match type_code {
        attr::COMMUNITIES | attr::CLUSTER_LIST => Some(4),
        attr::EXTENDED_COMMUNITIES => Some(8),
        attr::LARGE_COMMUNITIES => Some(12),
        _ => None,
    };
    if multiple_of.is_some_and(|m| !value.len().is_multiple_of(m)) {
        return Err(malformed(SessionError::AttributeLength { type_code }));
    }
    let reset = |_| Problem::Reset(SessionError::AttributeLength { type_code });
    match type_code {
        attr::ORIGIN if value[0] > 2 => return Err(withdraw(SessionError::InvalidOrigin)),
        attr::AS_PATH => check_as_path(value, asn_size).map_err(withdraw)?,
        attr::MP_REACH => {
            // AFI(2) SAFI(1) next-hop length(1) next hop, reserved(1), NLRI.
            let nh_len = usize::from(*value.get(3).ok_or(()).map_err(reset)?);
            let nlri = value.get(5 + nh_len..).ok_or(()).map_err(reset)?;
            if let Some(bits) = be16(value, 0).and_then(|afi| max_bits(afi as u16)) {
                summary.announced += count_prefixes(nlri, bits).map_err(Problem::Reset)?;
            }
        }
        attr::MP_UNREACH => {
            let afi = be16(value, 0).ok_or(()).map_err(reset)?;
            let nlri = value.get(3..).ok_or(()).map_err(reset)?;
            if let Some(bits) = max_bits(afi as u16) {
                summary.withdrawn += count_prefixes(nlri, bits).map_err(Problem::Reset)?;
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
    const GOOD_ATTRS: [u8; 20] = [
        0x40, 1, 1, 0, //
        0x40, 2, 6, 2, 1, 0, 0, 0xfb, 0xf9, //
        0x40, 3, 4, 10, 99, 0, 2,
    ];

    /// An UPDATE with `attrs` (its length field counting exactly them) and `nlri`.
    fn update(attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0];
        b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        b.extend_from_slice(attrs);
        b.extend_from_slice(nlri);
        b
    }

    fn good() -> Vec<u8> {
        update(&GOOD_ATTRS, &[24, 10, 99, 1])
    }

    /// The good UPDATE with `extra` attributes appended.
    fn good_with(extra: &[u8]) -> Vec<u8> {
        let mut attrs = GOOD_ATTRS.to_vec();
        attrs.extend_from_slice(extra);
        update(&attrs, &[24, 10, 99, 1])
    }

    fn kept(body: &[u8]) -> Option<(Handling, SessionError)> {
        let summary = check_update(body, AS4).expect("the session is kept");
        summary.malformed.map(|m| (m.handling, m.error))
    }

    fn withdrawn(error: SessionError) -> Option<(Handling, SessionError)> {
        Some((Handling::TreatAsWithdraw, error))
    }

    fn discarded(error: SessionError) -> Option<(Handling, SessionError)> {
        Some((Handling::AttributeDiscard, error))
    }

    #[test]
    fn a_well_formed_update_is_counted() {
        assert_eq!(
            check_update(&good(), AS4),
            Ok(UpdateSummary {
                withdrawn: 0,
                announced: 1,
                malformed: None,
            })
        );
    }

    #[test]
    fn ipv4_routes_in_mp_reach_with_an_ipv6_next_hop_and_no_next_hop_attribute_are_well_formed() {
        // What a router sends on an unnumbered session (RFC 8950): ORIGIN, AS_PATH, then
        // MP_REACH AFI 1 SAFI 1 with a 32-byte (global + link-local) or a 16-byte next hop.
        for nh_len in [32u8, 16] {
            let mut mp = vec![0, 1, 1, nh_len];
            mp.extend(std::iter::repeat_n(0xfe, usize::from(nh_len)));
            mp.extend_from_slice(&[0, 24, 10, 255, 1, 32, 10, 255, 2, 1]);
            let mut attrs = GOOD_ATTRS[..13].to_vec();
            attrs.extend_from_slice(&[0x90, 14, 0, mp.len() as u8]);
            attrs.extend_from_slice(&mp);
            assert_eq!(
                check_update(&update(&attrs, &[]), AS4),
                Ok(UpdateSummary {
                    withdrawn: 0,
                    announced: 2,
                    malformed: None,
                }),
                "{nh_len}-byte next hop"
            );
        }
    }

    // ---- session reset: the NLRI cannot be found, or it is malformed ----

    #[test]
    fn a_total_attribute_length_running_past_the_message_resets_the_session() {
        let mut b = good();
        b[3] += 16;
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn a_withdrawn_length_running_past_the_message_resets_the_session() {
        assert_eq!(
            check_update(&[0, 9, 0, 0], AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn a_prefix_longer_than_32_bits_resets_the_session() {
        let mut b = good();
        let n = b.len();
        b[n - 4] = 33;
        assert_eq!(
            check_update(&b, AS4),
            Err(SessionError::InvalidNetworkField)
        );
    }

    #[test]
    fn a_repeated_mp_reach_resets_the_session() {
        // MP_REACH IPv6 unicast, next hop fd00::1, no NLRI: twice.
        let mp = [
            0x80, 14, 21, 0, 2, 1, 16, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
        ];
        let mut attrs = vec![0x40, 1, 1, 0, 0x40, 2, 0];
        attrs.extend_from_slice(&mp);
        attrs.extend_from_slice(&mp);
        assert_eq!(
            check_update(&update(&attrs, &[]), AS4),
            Err(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn an_mp_reach_whose_prefix_runs_past_it_resets_the_session() {
        // MP_REACH IPv6 unicast, next hop fd00::1, NLRI /64 with only 2 of its 8 bytes.
        let attrs = [
            0x40, 1, 1, 0, 0x40, 2, 0, //
            0x80, 14, 24, 0, 2, 1, 16, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 64,
            0xfd, 0,
        ];
        assert_eq!(
            check_update(&update(&attrs, &[]), AS4),
            Err(SessionError::InvalidNetworkField)
        );
    }

    // ---- treat-as-withdraw: the session is kept ----

    #[test]
    fn an_attribute_running_past_the_path_attributes_is_treated_as_withdraw() {
        // A MED claiming 200 bytes, inside a total length that says the attributes end sooner.
        let b = good_with(&[0x80, 4, 200, 0, 0, 0, 1]);
        assert_eq!(kept(&b), withdrawn(SessionError::MalformedAttributeList));
        assert_eq!(check_update(&b, AS4).unwrap().announced, 1);
    }

    #[test]
    fn a_stub_too_short_for_an_attribute_header_is_treated_as_withdraw() {
        assert_eq!(
            kept(&good_with(&[0x80, 4])),
            withdrawn(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn an_as_path_with_a_trailing_byte_is_treated_as_withdraw() {
        let attrs = [0x40, 1, 1, 0, 0x40, 2, 7, 2, 1, 0, 0, 0xfb, 0xf9, 0];
        assert_eq!(
            kept(&update(&attrs, &[])),
            withdrawn(SessionError::MalformedAsPath)
        );
    }

    #[test]
    fn an_origin_with_a_trailing_byte_is_treated_as_withdraw() {
        assert_eq!(
            kept(&update(&[0x40, 1, 2, 0, 0], &[])),
            withdrawn(SessionError::AttributeLength { type_code: 1 })
        );
    }

    #[test]
    fn an_origin_of_an_unknown_value_is_treated_as_withdraw() {
        assert_eq!(
            kept(&update(&[0x40, 1, 1, 7], &[])),
            withdrawn(SessionError::InvalidOrigin)
        );
    }

    #[test]
    fn an_origin_marked_optional_is_treated_as_withdraw() {
        assert_eq!(
            kept(&update(&[0xc0, 1, 1, 0], &[])),
            withdrawn(SessionError::AttributeFlags { type_code: 1 })
        );
    }

    #[test]
    fn nlri_without_next_hop_is_treated_as_withdraw() {
        assert_eq!(
            kept(&update(&[0x40, 1, 1, 0, 0x40, 2, 0], &[8, 10])),
            withdrawn(SessionError::MissingWellKnownAttribute { type_code: 3 })
        );
    }

    #[test]
    fn a_next_hop_med_or_local_pref_of_the_wrong_length_is_treated_as_withdraw() {
        for (flags, code) in [(0x40, 3), (0x80, 4), (0x40, 5)] {
            let attrs = [0x40, 1, 1, 0, 0x40, 2, 0, flags, code, 3, 1, 2, 3];
            assert_eq!(
                kept(&update(&attrs, &[])),
                withdrawn(SessionError::AttributeLength { type_code: code }),
                "attribute {code}"
            );
        }
    }

    #[test]
    fn communities_of_a_length_not_a_multiple_of_their_size_are_treated_as_withdraw() {
        for (code, len) in [(8u8, 5u8), (16, 12), (32, 16), (10, 6)] {
            let mut extra = vec![0xc0, code, len];
            extra.extend(std::iter::repeat_n(0, usize::from(len)));
            assert_eq!(
                kept(&good_with(&extra)),
                withdrawn(SessionError::AttributeLength { type_code: code }),
                "attribute {code}"
            );
        }
    }

    // ---- attribute discard ----

    #[test]
    fn an_atomic_aggregate_with_a_value_is_discarded() {
        assert_eq!(
            kept(&good_with(&[0x40, 6, 1, 0])),
            discarded(SessionError::AttributeLength { type_code: 6 })
        );
    }

    #[test]
    fn an_aggregator_of_the_wrong_length_is_discarded() {
        assert_eq!(
            kept(&good_with(&[0xc0, 7, 3, 0, 0, 1])),
            discarded(SessionError::AttributeLength { type_code: 7 })
        );
    }

    #[test]
    fn a_repeated_attribute_is_discarded() {
        assert_eq!(
            kept(&good_with(&[0x40, 1, 1, 0])),
            discarded(SessionError::MalformedAttributeList)
        );
    }

    #[test]
    fn the_strongest_handling_wins_whatever_the_order() {
        // A discarded ATOMIC_AGGREGATE first, a malformed MED after it.
        let b = good_with(&[0x40, 6, 1, 0, 0x80, 4, 3, 1, 2, 3]);
        assert_eq!(
            kept(&b),
            withdrawn(SessionError::AttributeLength { type_code: 4 })
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
