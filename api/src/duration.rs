//! The duration syntax of FerroLB's timers (`holdTime`, `keepaliveTime`, `connectTime`, and the
//! binaries' duration flags), parsed one way everywhere. Pure: no I/O, no clock.

use std::time::Duration;

/// Parses Kubernetes-style durations (`90s`, `1m30s`, `500ms`, `1.5h`); `None` for anything
/// else, including a duration too long to represent (never a panic: a BGPPeer that got past the
/// CRD's rules with `holdTime: 99999999999999999999s` is a configuration error, not a crash).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let (unit, len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += n * unit;
        rest = &rest[len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("ninety"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn a_duration_too_long_to_represent_is_refused_not_a_panic() {
        assert_eq!(parse_duration("99999999999999999999s"), None);
        assert_eq!(parse_duration("1e400s"), None);
        assert_eq!(
            parse_duration(&format!("{}h", "9".repeat(400))),
            None,
            "infinite"
        );
    }
}
