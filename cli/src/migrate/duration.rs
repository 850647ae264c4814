//! MetalLB's durations (Go's `time.ParseDuration` syntax, which `metav1.Duration` takes)
//! rewritten in the syntax FerroLB's CRD takes. Pure.
//!
//! FerroLB's CRD accepts `^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`; Go also accepts `0`, a sign,
//! `ns`/`us`/`µs`, and `.5s` or `1.s`. A duration FerroLB accepts is kept as written; any other
//! is rewritten from its exact value in nanoseconds.

use std::time::Duration;

/// Why a MetalLB duration cannot be carried over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not a Go duration.
    Syntax,
    /// Negative (Go accepts it; no timer can be negative).
    Negative,
    /// Longer than Go's `time.Duration` can hold (about 292 years).
    TooLong,
}

impl DurationError {
    /// What is wrong, for the report.
    pub fn message(self) -> &'static str {
        match self {
            DurationError::Syntax => "not a duration; write it as 90s, 1m30s or 500ms",
            DurationError::Negative => "a negative duration; write a positive one such as 90s",
            DurationError::TooLong => "longer than MetalLB itself could hold",
        }
    }
}

/// A MetalLB duration as FerroLB writes it: the same text when FerroLB's syntax accepts it,
/// else the same value rewritten (`0` → `0s`, `1500us` → `1.5ms`, `+5s` → `5s`).
pub fn to_ferrolb(go: &str) -> Result<String, DurationError> {
    let nanos = parse_go(go)?;
    if is_ferrolb_syntax(go) {
        return Ok(go.to_string());
    }
    Ok(render(nanos))
}

/// The value of a duration in FerroLB's syntax, as FerroLB's components parse it.
pub fn value(ferrolb: &str) -> Option<Duration> {
    ferrolb_api::duration::parse_duration(ferrolb)
}

/// Whether `s` matches FerroLB's CRD pattern `^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`.
pub fn is_ferrolb_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.is_empty() {
        return false;
    }
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let frac = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == frac {
                return false;
            }
        }
        if b[i..].starts_with(b"ms") {
            i += 2;
        } else if i < b.len() && matches!(b[i], b's' | b'm' | b'h') {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// Go's `time.Duration` is an int64 of nanoseconds.
const GO_MAX_NANOS: u128 = i64::MAX as u128;

/// Parses Go's duration syntax into nanoseconds, exactly (no floating point).
fn parse_go(s: &str) -> Result<u128, DurationError> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after) = rest.strip_prefix('.') {
            let frac_len = after.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after[..frac_len];
            rest = &after[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Syntax);
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            _ => return Err(DurationError::Syntax),
        };
        rest = &rest[unit_len..];
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| DurationError::TooLong)?
        };
        let mut nanos = whole.checked_mul(unit).ok_or(DurationError::TooLong)?;
        // Go keeps the fraction's digits as long as they matter to a nanosecond.
        let mut scale = unit;
        for d in frac_part.bytes().take(30) {
            scale /= 10;
            nanos += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(nanos).ok_or(DurationError::TooLong)?;
        if total > GO_MAX_NANOS {
            return Err(DurationError::TooLong);
        }
    }
    if negative && total != 0 {
        return Err(DurationError::Negative);
    }
    Ok(total)
}

/// Writes `d` in FerroLB's syntax (`270s`, `500ms`).
pub fn render_std(d: Duration) -> String {
    render(d.as_nanos())
}

/// Writes nanoseconds in FerroLB's syntax: whole seconds as `90s`, whole milliseconds as
/// `500ms`, anything finer as a decimal of milliseconds (`0.001ms`).
fn render(nanos: u128) -> String {
    if nanos.is_multiple_of(NANOS_PER_SEC) {
        return format!("{}s", nanos / NANOS_PER_SEC);
    }
    let ms = nanos / 1_000_000;
    let sub = nanos % 1_000_000;
    if sub == 0 {
        return format!("{ms}ms");
    }
    let frac = format!("{sub:06}");
    format!("{ms}.{}ms", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_ferrolb_accepts_is_kept_as_written() {
        for s in ["90s", "1m30s", "3m0s", "1h0m0s", "500ms", "1.5s", "0s"] {
            assert_eq!(to_ferrolb(s), Ok(s.to_string()), "{s}");
        }
    }

    #[test]
    fn go_only_spellings_are_rewritten_to_the_same_value() {
        assert_eq!(to_ferrolb("0").unwrap(), "0s");
        assert_eq!(to_ferrolb("+5s").unwrap(), "5s");
        assert_eq!(to_ferrolb(".5s").unwrap(), "500ms");
        assert_eq!(to_ferrolb("1.s").unwrap(), "1s");
        assert_eq!(to_ferrolb("1500us").unwrap(), "1.5ms");
        assert_eq!(to_ferrolb("1500\u{b5}s").unwrap(), "1.5ms");
        assert_eq!(to_ferrolb("2000000000ns").unwrap(), "2s");
        assert_eq!(to_ferrolb("1ns").unwrap(), "0.000001ms");
        assert_eq!(to_ferrolb("-0s").unwrap(), "0s");
    }

    #[test]
    fn negative_malformed_and_overlong_durations_are_refused() {
        assert_eq!(to_ferrolb("-5s"), Err(DurationError::Negative));
        assert_eq!(to_ferrolb("ninety"), Err(DurationError::Syntax));
        assert_eq!(to_ferrolb("90"), Err(DurationError::Syntax));
        assert_eq!(to_ferrolb(""), Err(DurationError::Syntax));
        assert_eq!(to_ferrolb(".s"), Err(DurationError::Syntax));
        assert_eq!(to_ferrolb("3000000h"), Err(DurationError::TooLong));
        assert_eq!(
            to_ferrolb("99999999999999999999999999999999999999999s"),
            Err(DurationError::TooLong)
        );
    }

    #[test]
    fn ferrolb_syntax_is_the_crd_pattern() {
        assert!(is_ferrolb_syntax("1m30s"));
        assert!(is_ferrolb_syntax("1.25ms"));
        assert!(!is_ferrolb_syntax("1.s"));
        assert!(!is_ferrolb_syntax("s"));
        assert!(!is_ferrolb_syntax("5us"));
        assert!(!is_ferrolb_syntax("5"));
        assert!(!is_ferrolb_syntax(""));
    }
}
