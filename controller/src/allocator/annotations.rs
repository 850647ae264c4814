//! The allocator's annotations on a Service (every spelling) and the deprecated
//! `spec.loadBalancerIP`, read into what the Service asks for. Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;

use super::family::IpFamily;
use super::names;
use super::outcome::AllocationError;

/// What a Service asks for through annotations and `spec.loadBalancerIP`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    /// The pool named by `address-pool`.
    pub pool: Option<String>,
    /// The addresses named by `loadBalancerIPs` or `spec.loadBalancerIP`.
    pub ips: Vec<IpAddr>,
    /// The `allow-shared-ip` key.
    pub sharing_key: Option<String>,
}

/// Reads the allocator's annotations (every spelling) and the deprecated `spec.loadBalancerIP`.
///
/// Two spellings of one annotation must agree; the addresses annotation and
/// `spec.loadBalancerIP` must not both be set; addresses must parse, at most one per family.
/// Empty values count as absent.
pub fn requested_from_annotations(
    annotations: &BTreeMap<String, String>,
    load_balancer_ip: Option<&str>,
) -> Result<Requested, AllocationError> {
    let pool = one_annotation(annotations, &names::ADDRESS_POOL_KEYS)?.map(str::to_owned);
    let sharing_key = one_annotation(annotations, &names::ALLOW_SHARED_IP_KEYS)?.map(str::to_owned);
    let ips_text = one_annotation(annotations, &names::LOAD_BALANCER_IPS_KEYS)?;
    let spec_ip = load_balancer_ip.map(str::trim).filter(|s| !s.is_empty());
    let text = match (ips_text, spec_ip) {
        (Some(_), Some(_)) => return Err(AllocationError::ConflictingRequestedIps),
        (Some(t), None) | (None, Some(t)) => t,
        (None, None) => "",
    };
    let mut ips: Vec<IpAddr> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let ip = IpAddr::from_str(part).map_err(|_| AllocationError::InvalidRequestedIp {
            value: part.to_owned(),
        })?;
        if ips.iter().any(|o| IpFamily::of(*o) == IpFamily::of(ip)) {
            return Err(AllocationError::TooManyRequestedIps {
                family: IpFamily::of(ip),
            });
        }
        ips.push(ip);
    }
    Ok(Requested {
        pool,
        ips,
        sharing_key,
    })
}

/// The value of an annotation under any of its spellings; two different values are an error.
fn one_annotation<'a>(
    annotations: &'a BTreeMap<String, String>,
    keys: &[&str],
) -> Result<Option<&'a str>, AllocationError> {
    let mut found: Option<(&str, &str)> = None;
    for key in keys {
        let Some(value) = annotations
            .get(*key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        match found {
            None => found = Some((key, value)),
            Some((first, v)) if v != value => {
                return Err(AllocationError::ConflictingAnnotations {
                    first: first.to_owned(),
                    second: (*key).to_owned(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(found.map(|(_, v)| v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_spelling_of_the_annotations_is_read() {
        for i in 0..3 {
            let pool = names::ADDRESS_POOL_KEYS[i];
            let ips = names::LOAD_BALANCER_IPS_KEYS[i];
            let share = names::ALLOW_SHARED_IP_KEYS[i];
            let r = requested_from_annotations(
                &annotations(&[(pool, "blue"), (ips, "10.0.0.1, fd00::1"), (share, "k")]),
                None,
            )
            .unwrap();
            assert_eq!(r.pool.as_deref(), Some("blue"));
            assert_eq!(r.ips.len(), 2);
            assert_eq!(r.sharing_key.as_deref(), Some("k"));
        }
    }

    #[test]
    fn the_deprecated_load_balancer_ip_is_honoured_alone() {
        let r = requested_from_annotations(&annotations(&[]), Some("10.0.0.7")).unwrap();
        assert_eq!(r.ips, vec!["10.0.0.7".parse::<IpAddr>().unwrap()]);
        let r = requested_from_annotations(&annotations(&[]), Some("")).unwrap();
        assert!(r.ips.is_empty());
    }

    #[test]
    fn the_annotation_and_load_balancer_ip_together_are_an_error() {
        let err = requested_from_annotations(
            &annotations(&[(names::LOAD_BALANCER_IPS, "10.0.0.7")]),
            Some("10.0.0.7"),
        )
        .unwrap_err();
        assert_eq!(err, AllocationError::ConflictingRequestedIps);
    }

    #[test]
    fn two_spellings_with_different_values_are_an_error() {
        let err = requested_from_annotations(
            &annotations(&[
                (names::ADDRESS_POOL, "a"),
                (names::METALLB_ADDRESS_POOL, "b"),
            ]),
            None,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            AllocationError::ConflictingAnnotations { .. }
        ));
        let same = requested_from_annotations(
            &annotations(&[
                (names::ADDRESS_POOL, "a"),
                (names::LEGACY_ADDRESS_POOL, "a"),
            ]),
            None,
        );
        assert_eq!(same.unwrap().pool.as_deref(), Some("a"));
    }

    #[test]
    fn malformed_or_duplicate_family_addresses_are_errors() {
        let bad = annotations(&[(names::LOAD_BALANCER_IPS, "10.0.0.1,nope")]);
        assert!(matches!(
            requested_from_annotations(&bad, None),
            Err(AllocationError::InvalidRequestedIp { .. })
        ));
        let two_v4 = annotations(&[(names::METALLB_LOAD_BALANCER_IPS, "10.0.0.1,10.0.0.2")]);
        assert_eq!(
            requested_from_annotations(&two_v4, None),
            Err(AllocationError::TooManyRequestedIps {
                family: IpFamily::V4
            })
        );
    }
}
