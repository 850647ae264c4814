//! Rules that span objects: overlapping pools, references to objects that do not exist,
//! aggregation lengths that would announce more than a pool. Pure: no I/O, no clock.
//!
//! The controller and the speaker call these and report each error as a `Ready=False` condition
//! and an Event on the offending object; the valid part of the configuration keeps working.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use kube::ResourceExt;

use crate::duration::parse_duration;
use crate::v1beta1::{BGPAdvertisement, BGPPeer, Community, IPAddressPool, L2Advertisement};

/// A configuration error found across objects. Each message says how to fix the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An entry of `spec.addresses` is not a CIDR or a valid range.
    #[error(
        "pool `{pool}`: address entry `{entry}` is invalid: {reason}; write a CIDR such as 10.0.0.0/24 or a range such as 10.0.0.10-10.0.0.20"
    )]
    InvalidAddress {
        /// The pool.
        pool: String,
        /// The offending entry.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two entries of one pool overlap.
    #[error(
        "pool `{pool}`: entries `{first}` and `{second}` overlap; remove one or make them disjoint"
    )]
    SelfOverlap {
        /// The pool.
        pool: String,
        /// The first entry.
        first: String,
        /// The entry overlapping it.
        second: String,
    },
    /// A pool overlaps an older pool, which wins.
    #[error(
        "pool `{pool}` overlaps pool `{older}` ({range}); `{pool}` is ignored until the overlap is removed"
    )]
    PoolOverlap {
        /// The newer pool, which is not used.
        pool: String,
        /// The older pool, which keeps working.
        older: String,
        /// The overlapping entry of the newer pool.
        range: String,
    },
    /// An advertisement names a pool that does not exist.
    #[error(
        "{kind} `{object}` names pool `{pool}`, which does not exist; create it or fix the name in spec.ipAddressPools"
    )]
    UnknownPool {
        /// `L2Advertisement` or `BGPAdvertisement`.
        kind: &'static str,
        /// The advertisement.
        object: String,
        /// The missing pool.
        pool: String,
    },
    /// A BGP advertisement names a peer that does not exist.
    #[error(
        "BGPAdvertisement `{object}` names peer `{peer}`, which does not exist; create the BGPPeer or fix spec.peers"
    )]
    UnknownPeer {
        /// The advertisement.
        object: String,
        /// The missing peer.
        peer: String,
    },
    /// A BGP advertisement names a community alias that no `Community` defines.
    #[error(
        "BGPAdvertisement `{object}` uses community alias `{alias}`, which no Community object defines; define it or write the value (65000:100)"
    )]
    UnknownCommunity {
        /// The advertisement.
        object: String,
        /// The alias.
        alias: String,
    },
    /// An aggregation length shorter than a selected pool's own prefix would announce addresses
    /// outside the pool.
    #[error(
        "BGPAdvertisement `{object}`: aggregation length /{length} is shorter than pool `{pool}`'s prefix {prefix}; use /{min} or longer"
    )]
    AggregationTooShort {
        /// The advertisement.
        object: String,
        /// The pool.
        pool: String,
        /// The configured aggregation length.
        length: u8,
        /// The pool's prefix that is longer than the aggregation length.
        prefix: String,
        /// The shortest length that is allowed for this pool.
        min: u8,
    },
    /// A BGP peer refers to a password Secret that does not exist.
    #[error(
        "BGPPeer `{peer}` refers to Secret `{secret}`, which does not exist in the install namespace; create it with the key `password`"
    )]
    MissingPasswordSecret {
        /// The peer.
        peer: String,
        /// The missing Secret.
        secret: String,
    },
    /// A BGP peer names a `BFDProfile` that does not exist: the speakers open the session
    /// without BFD.
    #[error(
        "BGPPeer `{peer}` names BFDProfile `{profile}`, which does not exist in the install namespace; the session runs without BFD until it exists: create it or fix spec.bfdProfile"
    )]
    MissingBfdProfile {
        /// The peer.
        peer: String,
        /// The missing profile.
        profile: String,
    },
    /// A BGP peer's timer is not a duration, or one too long to represent: the speakers do
    /// not open the session.
    #[error(
        "BGPPeer `{peer}`: {field} `{value}` is not a usable duration; the speakers do not open this session until it is a duration such as 90s, 1m30s or 500ms"
    )]
    InvalidDuration {
        /// The peer.
        peer: String,
        /// The field (`holdTime`, `keepaliveTime`, `connectTime`).
        field: &'static str,
        /// The value.
        value: String,
    },
    /// A `Community` alias is defined twice with different values.
    #[error(
        "community alias `{alias}` is defined twice with different values ({first} and {second}); keep one"
    )]
    DuplicateCommunityAlias {
        /// The alias.
        alias: String,
        /// The first value.
        first: String,
        /// The conflicting value.
        second: String,
    },
}

impl ConfigError {
    /// The condition reason (CamelCase) under which this error is reported.
    pub fn reason(&self) -> &'static str {
        match self {
            ConfigError::InvalidAddress { .. } | ConfigError::SelfOverlap { .. } => {
                "InvalidAddresses"
            }
            ConfigError::PoolOverlap { .. } => "Overlap",
            ConfigError::UnknownPool { .. } => "UnknownPool",
            ConfigError::UnknownPeer { .. } => "UnknownPeer",
            ConfigError::UnknownCommunity { .. } | ConfigError::DuplicateCommunityAlias { .. } => {
                "UnknownCommunity"
            }
            ConfigError::AggregationTooShort { .. } => "InvalidAggregationLength",
            ConfigError::MissingPasswordSecret { .. } => "MissingSecret",
            ConfigError::MissingBfdProfile { .. } => "BFDProfileNotFound",
            ConfigError::InvalidDuration { .. } => "InvalidDuration",
        }
    }
}

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddressRange {
    /// First address.
    pub start: IpAddr,
    /// Last address (inclusive).
    pub end: IpAddr,
}

impl AddressRange {
    /// Parses a pool entry: a CIDR (`10.0.0.0/24`) or an inclusive range (`10.0.0.1-10.0.0.9`).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        if let Some((a, b)) = entry.split_once('-') {
            let start: IpAddr = a
                .trim()
                .parse()
                .map_err(|_| format!("`{}` is not an IP address", a.trim()))?;
            let end: IpAddr = b
                .trim()
                .parse()
                .map_err(|_| format!("`{}` is not an IP address", b.trim()))?;
            if start.is_ipv4() != end.is_ipv4() {
                return Err("the two ends are of different IP families".into());
            }
            if start > end {
                return Err("the start is after the end".into());
            }
            return Ok(Self { start, end });
        }
        let net: IpNet = entry
            .parse()
            .map_err(|_| "not a CIDR and not a start-end range".to_string())?;
        Ok(Self {
            start: net.network(),
            end: net.broadcast(),
        })
    }

    /// Whether the two ranges share at least one address.
    pub fn overlaps(&self, other: &AddressRange) -> bool {
        self.start.is_ipv4() == other.start.is_ipv4()
            && self.start <= other.end
            && other.start <= self.end
    }

    /// The shortest prefix length among the CIDRs that exactly cover the range.
    pub fn shortest_prefix(&self) -> u8 {
        let (start, end, bits) = match (self.start, self.end) {
            (IpAddr::V4(s), IpAddr::V4(e)) => (u32::from(s) as u128, u32::from(e) as u128, 32u32),
            (IpAddr::V6(s), IpAddr::V6(e)) => (u128::from(s), u128::from(e), 128u32),
            _ => unreachable!("parse rejects mixed families"),
        };
        // Walk the range greedily with the largest aligned block that fits.
        let mut best = bits;
        let mut cur = start;
        loop {
            let align = if cur == 0 {
                bits
            } else {
                cur.trailing_zeros().min(bits)
            };
            let mut size = align;
            while size > 0
                && (size == 128
                    || cur
                        .checked_add((1u128 << size) - 1)
                        .is_none_or(|last| last > end))
            {
                size -= 1;
            }
            best = best.min(bits - size);
            let last = if size == 128 {
                u128::MAX
            } else {
                cur + ((1u128 << size) - 1)
            };
            if last >= end {
                break;
            }
            cur = last + 1;
        }
        best as u8
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// Whether a pool can be used, and its parsed ranges when it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolVerdict {
    /// The pool is valid and does not overlap an older pool.
    Ready(Vec<AddressRange>),
    /// The pool is not used; addresses already assigned from it stay as they are.
    NotReady(ConfigError),
}

/// The order in which pools were created: older first, then by name, so every process
/// reading the same objects reaches the same verdicts.
fn age_key(pool: &IPAddressPool) -> (Option<i64>, String) {
    (
        pool.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        pool.name_any(),
    )
}

/// Parses every pool and decides which may be used: invalid entries and overlaps make a pool
/// not ready; of two overlapping pools, the older one (then the smaller name) wins.
pub fn check_pools(pools: &[IPAddressPool]) -> BTreeMap<String, PoolVerdict> {
    let mut ordered: Vec<&IPAddressPool> = pools.iter().collect();
    ordered.sort_by_key(|p| age_key(p));
    let mut accepted: Vec<(String, AddressRange)> = Vec::new();
    let mut verdicts = BTreeMap::new();
    for pool in ordered {
        let name = pool.name_any();
        let verdict = match parse_pool(&name, &pool.spec.addresses) {
            Err(e) => PoolVerdict::NotReady(e),
            Ok(ranges) => match ranges.iter().find_map(|r| {
                accepted
                    .iter()
                    .find(|(_, a)| a.overlaps(r))
                    .map(|(older, _)| (older.clone(), *r))
            }) {
                Some((older, range)) => PoolVerdict::NotReady(ConfigError::PoolOverlap {
                    pool: name.clone(),
                    older,
                    range: range.to_string(),
                }),
                None => {
                    accepted.extend(ranges.iter().map(|r| (name.clone(), *r)));
                    PoolVerdict::Ready(ranges)
                }
            },
        };
        verdicts.insert(name, verdict);
    }
    verdicts
}

/// Parses a pool's entries, refusing invalid entries and entries that overlap each other.
pub fn parse_pool(pool: &str, entries: &[String]) -> Result<Vec<AddressRange>, ConfigError> {
    let mut ranges: Vec<(AddressRange, &String)> = Vec::with_capacity(entries.len());
    for entry in entries {
        let range = AddressRange::parse(entry).map_err(|reason| ConfigError::InvalidAddress {
            pool: pool.into(),
            entry: entry.clone(),
            reason,
        })?;
        if let Some((_, first)) = ranges.iter().find(|(r, _)| r.overlaps(&range)) {
            return Err(ConfigError::SelfOverlap {
                pool: pool.into(),
                first: (*first).clone(),
                second: entry.clone(),
            });
        }
        ranges.push((range, entry));
    }
    Ok(ranges.into_iter().map(|(r, _)| r).collect())
}

/// Checks an `L2Advertisement`'s pool references.
pub fn check_l2_advertisement(adv: &L2Advertisement, pools: &[IPAddressPool]) -> Vec<ConfigError> {
    unknown_pools(
        "L2Advertisement",
        &adv.name_any(),
        &adv.spec.ip_address_pools,
        pools,
    )
}

fn unknown_pools(
    kind: &'static str,
    object: &str,
    names: &[String],
    pools: &[IPAddressPool],
) -> Vec<ConfigError> {
    let known: BTreeSet<String> = pools.iter().map(|p| p.name_any()).collect();
    names
        .iter()
        .filter(|n| !known.contains(*n))
        .map(|n| ConfigError::UnknownPool {
            kind,
            object: object.into(),
            pool: n.clone(),
        })
        .collect()
}

/// Checks a `BGPAdvertisement`: pools, peers and community aliases exist, and the aggregation
/// lengths are not shorter than any selected pool's own prefixes.
pub fn check_bgp_advertisement(
    adv: &BGPAdvertisement,
    pools: &[IPAddressPool],
    peers: &[BGPPeer],
    communities: &[Community],
) -> Vec<ConfigError> {
    let name = adv.name_any();
    let mut errors = unknown_pools("BGPAdvertisement", &name, &adv.spec.ip_address_pools, pools);
    let known_peers: BTreeSet<String> = peers.iter().map(|p| p.name_any()).collect();
    errors.extend(
        adv.spec
            .peers
            .iter()
            .filter(|p| !known_peers.contains(*p))
            .map(|p| ConfigError::UnknownPeer {
                object: name.clone(),
                peer: p.clone(),
            }),
    );
    let aliases = community_aliases(communities).unwrap_or_default();
    errors.extend(
        adv.spec
            .communities
            .iter()
            .filter(|c| CommunityValue::parse(c).is_none() && !aliases.contains_key(*c))
            .map(|c| ConfigError::UnknownCommunity {
                object: name.clone(),
                alias: c.clone(),
            }),
    );
    let selected = pools.iter().filter(|p| {
        adv.spec.ip_address_pools.contains(&p.name_any())
            || adv.spec.ip_address_pool_selectors.iter().any(|s| {
                crate::selector::matches(s, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
            })
            || (adv.spec.ip_address_pools.is_empty()
                && adv.spec.ip_address_pool_selectors.is_empty())
    });
    for pool in selected {
        let Ok(ranges) = parse_pool(&pool.name_any(), &pool.spec.addresses) else {
            continue; // reported on the pool itself
        };
        for range in ranges {
            let (length, what) = if range.start.is_ipv4() {
                (adv.spec.aggregation_length.unwrap_or(32), "v4")
            } else {
                (adv.spec.aggregation_length_v6.unwrap_or(128), "v6")
            };
            let min = range.shortest_prefix();
            if (length as u8) < min {
                errors.push(ConfigError::AggregationTooShort {
                    object: name.clone(),
                    pool: pool.name_any(),
                    length: length as u8,
                    prefix: format!("{range} (/{min}, IP{what})"),
                    min,
                });
            }
        }
    }
    errors
}

/// Checks a `BGPPeer`: its password Secret exists among `secrets` and its BFD profile among
/// `bfd_profiles` (names in the install namespace), and its timers are durations that fit a
/// [`Duration`](std::time::Duration). The schema's rules (`holdTime` 0 or at least 3 s,
/// `keepaliveTime` not above `holdTime`, `connectTime` at least 1 s) are not repeated here.
/// The errors come most severe first (the first one is the condition's reason): a timer that
/// does not parse or a missing Secret keeps the session closed, a missing profile only leaves
/// BFD out.
pub fn check_bgp_peer(
    peer: &BGPPeer,
    secrets: &BTreeSet<String>,
    bfd_profiles: &BTreeSet<String>,
) -> Vec<ConfigError> {
    let name = peer.name_any();
    let spec = &peer.spec;
    let mut errors = Vec::new();
    let timers = [
        ("holdTime", Some(&spec.hold_time)),
        ("keepaliveTime", spec.keepalive_time.as_ref()),
        ("connectTime", spec.connect_time.as_ref()),
    ];
    for (field, value) in timers {
        if let Some(value) = value
            && parse_duration(value).is_none()
        {
            errors.push(ConfigError::InvalidDuration {
                peer: name.clone(),
                field,
                value: value.clone(),
            });
        }
    }
    if let Some(secret) = &spec.password_secret
        && !secrets.contains(&secret.name)
    {
        errors.push(ConfigError::MissingPasswordSecret {
            peer: name.clone(),
            secret: secret.name.clone(),
        });
    }
    if let Some(profile) = &spec.bfd_profile
        && !bfd_profiles.contains(profile)
    {
        errors.push(ConfigError::MissingBfdProfile {
            peer: name,
            profile: profile.clone(),
        });
    }
    errors
}

/// Well-known communities (RFC 1997, RFC 7999, RFC 8326, IANA), usable by name without a
/// `Community` alias.
pub const WELL_KNOWN_COMMUNITIES: [(&str, u16, u16); 6] = [
    ("no-export", 0xFFFF, 0xFF01),
    ("no-advertise", 0xFFFF, 0xFF02),
    ("no-export-subconfed", 0xFFFF, 0xFF03),
    ("no-peer", 0xFFFF, 0xFF04),
    ("blackhole", 0xFFFF, 0x029A),
    ("graceful-shutdown", 0xFFFF, 0x0000),
];

/// A BGP community value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommunityValue {
    /// RFC 1997 community, `asn:value`.
    Standard(u16, u16),
    /// RFC 8092 large community, `large:global:local1:local2`.
    Large(u32, u32, u32),
}

impl CommunityValue {
    /// Parses `65000:100`, `large:64512:1:2` or a well-known name (`no-export`, see
    /// [`WELL_KNOWN_COMMUNITIES`]); `None` for anything else (for example an alias).
    pub fn parse(s: &str) -> Option<Self> {
        if let Some((_, hi, lo)) = WELL_KNOWN_COMMUNITIES
            .iter()
            .find(|(name, _, _)| *name == s)
        {
            return Some(CommunityValue::Standard(*hi, *lo));
        }
        if let Some(rest) = s.strip_prefix("large:") {
            let mut it = rest.split(':').map(|p| p.parse::<u32>());
            let v = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
            return it
                .next()
                .is_none()
                .then_some(CommunityValue::Large(v.0, v.1, v.2));
        }
        let (a, b) = s.split_once(':')?;
        Some(CommunityValue::Standard(a.parse().ok()?, b.parse().ok()?))
    }
}

/// Collects the aliases defined by `Community` objects; an alias defined twice with different
/// values is an error.
pub fn community_aliases(
    communities: &[Community],
) -> Result<BTreeMap<String, CommunityValue>, ConfigError> {
    let mut out: BTreeMap<String, (CommunityValue, String)> = BTreeMap::new();
    for alias in communities.iter().flat_map(|c| &c.spec.communities) {
        let Some(value) = CommunityValue::parse(&alias.value) else {
            continue; // refused by the schema
        };
        if let Some((existing, text)) = out.get(&alias.name)
            && *existing != value
        {
            return Err(ConfigError::DuplicateCommunityAlias {
                alias: alias.name.clone(),
                first: text.clone(),
                second: alias.value.clone(),
            });
        }
        out.insert(alias.name.clone(), (value, alias.value.clone()));
    }
    Ok(out.into_iter().map(|(k, (v, _))| (k, v)).collect())
}

/// Resolves an advertisement's community strings to values, looking aliases up in `aliases`.
/// Unknown aliases are skipped (they are reported by [`check_bgp_advertisement`]).
pub fn resolve_communities(
    values: &[String],
    aliases: &BTreeMap<String, CommunityValue>,
) -> Vec<CommunityValue> {
    let mut out: Vec<CommunityValue> = values
        .iter()
        .filter_map(|v| CommunityValue::parse(v).or_else(|| aliases.get(v).copied()))
        .collect();
    out.sort();
    out.dedup();
    out
}
