//! Address pools as the allocator sees them: ranges, admission rules, free-space search. Pure: no I/O, no clock.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ferrolb_api::selector::any_matches;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::family::{IpFamily, numbered};
use super::ranges::{IntervalSet, span_len};
use super::request::ServiceRequest;

/// How traffic to an address reaches the node (`status.loadBalancer.ingress[].ipMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IpMode {
    /// Packets reach the node with the address as destination (the default).
    #[default]
    Vip,
    /// A proxy in front of the nodes terminates the traffic.
    Proxy,
}

/// Why a pool `addresses` entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressRangeError {
    /// The entry is empty.
    #[error(
        "empty address entry: write a CIDR such as 10.0.0.0/24 or a range such as 10.0.0.10-10.0.0.20"
    )]
    Empty,
    /// The entry has a `/` but is not a CIDR.
    #[error("`{input}` is not a valid CIDR ({reason}): write it like 10.0.0.0/24 or fd00::/64")]
    InvalidCidr {
        /// The entry as written.
        input: String,
        /// What the CIDR parser said.
        reason: String,
    },
    /// One end of a `start-end` range is not an IP address.
    #[error(
        "`{input}` is not an IP address: write a range as two addresses, like 10.0.0.10-10.0.0.20"
    )]
    InvalidAddress {
        /// The offending part.
        input: String,
    },
    /// The two ends of a range are of different families.
    #[error("range `{input}` mixes IPv4 and IPv6: write one range per family")]
    MixedFamilies {
        /// The entry as written.
        input: String,
    },
    /// The start of a range is after its end.
    #[error("range `{input}` starts after it ends: put the lower address first")]
    Reversed {
        /// The entry as written.
        input: String,
    },
    /// The entry is a bare address, neither a CIDR nor a range.
    #[error(
        "`{input}` is a single address, not a range: write it as {input}/32 (or /128 for IPv6)"
    )]
    NotARange {
        /// The entry as written.
        input: String,
    },
}

/// A contiguous, non-empty range of addresses of one family, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressRange {
    first: IpAddr,
    last: IpAddr,
}

impl AddressRange {
    /// The range `[first, last]`; both ends of one family, `first <= last`.
    pub fn new(first: IpAddr, last: IpAddr) -> Result<Self, AddressRangeError> {
        let input = format!("{first}-{last}");
        if IpFamily::of(first) != IpFamily::of(last) {
            return Err(AddressRangeError::MixedFamilies { input });
        }
        if numbered(first).1 > numbered(last).1 {
            return Err(AddressRangeError::Reversed { input });
        }
        Ok(Self { first, last })
    }

    /// Reads a pool `addresses` entry: a CIDR (`10.0.0.0/24`, `fd00::/64`; host bits are
    /// ignored, as MetalLB does) or `start-end` (`10.0.0.10-10.0.0.20`, spaces allowed).
    pub fn parse(input: &str) -> Result<Self, AddressRangeError> {
        let text = input.trim();
        if text.is_empty() {
            return Err(AddressRangeError::Empty);
        }
        if text.contains('/') {
            let net = ipnet::IpNet::from_str(text).map_err(|e| AddressRangeError::InvalidCidr {
                input: text.to_owned(),
                reason: e.to_string(),
            })?;
            return Ok(Self {
                first: net.network(),
                last: net.broadcast(),
            });
        }
        let Some((a, b)) = text.split_once('-') else {
            return match IpAddr::from_str(text) {
                Ok(_) => Err(AddressRangeError::NotARange {
                    input: text.to_owned(),
                }),
                Err(_) => Err(AddressRangeError::InvalidAddress {
                    input: text.to_owned(),
                }),
            };
        };
        let parse = |s: &str| {
            IpAddr::from_str(s.trim()).map_err(|_| AddressRangeError::InvalidAddress {
                input: s.trim().to_owned(),
            })
        };
        let (first, last) = (parse(a)?, parse(b)?);
        Self::new(first, last).map_err(|e| match e {
            AddressRangeError::MixedFamilies { .. } => AddressRangeError::MixedFamilies {
                input: text.to_owned(),
            },
            _ => AddressRangeError::Reversed {
                input: text.to_owned(),
            },
        })
    }

    /// The lowest address of the range.
    pub fn first(&self) -> IpAddr {
        self.first
    }

    /// The highest address of the range.
    pub fn last(&self) -> IpAddr {
        self.last
    }

    /// The family of both ends.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.first)
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (fam, n) = numbered(ip);
        fam == self.family() && numbered(self.first).1 <= n && n <= numbered(self.last).1
    }
}

impl FromStr for AddressRange {
    type Err = AddressRangeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// An `IPAddressPool` as plain data; the Kubernetes shell converts the custom resource into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The pool's name (unique).
    pub name: String,
    /// `metadata.creationTimestamp` in seconds; when pools overlap, the oldest (then the lowest
    /// name) owns the common addresses.
    pub created: i64,
    /// The addresses, in any order; entries may overlap, IPv4 and IPv6 may mix.
    pub addresses: Vec<AddressRange>,
    /// Whether the pool serves Services that do not name it or one of its addresses.
    pub auto_assign: bool,
    /// Skip IPv4 addresses ending in `.0` and `.255`.
    pub avoid_buggy_ips: bool,
    /// `serviceAllocation.priority`: lower is tried first; pools without one come after.
    pub priority: Option<i32>,
    /// `serviceAllocation.namespaces`: empty admits every namespace.
    pub namespaces: Vec<String>,
    /// `serviceAllocation.namespaceSelectors`: empty admits every namespace.
    pub namespace_selectors: Vec<LabelSelector>,
    /// `serviceAllocation.serviceSelectors`: empty admits every Service.
    pub service_selectors: Vec<LabelSelector>,
    /// The `ipMode` written for addresses of this pool.
    pub ip_mode: IpMode,
    /// False for a pool the shell holds back (for example `Ready=False, reason=Overlap`): its
    /// Services keep the addresses they have, and it gives out nothing new.
    pub ready: bool,
}

impl Pool {
    /// A ready, auto-assigning pool with no restrictions, created at time 0.
    pub fn new(name: impl Into<String>, addresses: Vec<AddressRange>) -> Self {
        Self {
            name: name.into(),
            created: 0,
            addresses,
            auto_assign: true,
            avoid_buggy_ips: false,
            priority: None,
            namespaces: Vec::new(),
            namespace_selectors: Vec::new(),
            service_selectors: Vec::new(),
            ip_mode: IpMode::Vip,
            ready: true,
        }
    }

    /// Whether the pool's `serviceAllocation` admits the Service.
    ///
    /// The namespace is admitted when `namespaces` and `namespaceSelectors` are both empty, or
    /// when it is listed in one or matched by the other; the Service must also match
    /// `serviceSelectors` (empty matches all).
    pub fn admits(&self, svc: &ServiceRequest) -> bool {
        let namespace_ok = (self.namespaces.is_empty() && self.namespace_selectors.is_empty())
            || self.namespaces.contains(&svc.key.namespace)
            || (!self.namespace_selectors.is_empty()
                && any_matches(&self.namespace_selectors, &svc.namespace_labels));
        namespace_ok && any_matches(&self.service_selectors, &svc.labels)
    }

    /// Order in which pools are tried for automatic assignment: by priority (lower first,
    /// none last), then by name.
    pub fn priority_order(a: &Pool, b: &Pool) -> Ordering {
        let key = |p: &Pool| (p.priority.is_none(), p.priority, p.name.clone());
        key(a).cmp(&key(b))
    }
}

/// Whether an IPv4 number ends in `.0` or `.255`.
fn is_buggy(n: u128) -> bool {
    matches!(n & 0xff, 0 | 0xff)
}

/// How many numbers in `[a, b]` end in `.0` or `.255`.
fn buggy_within(a: u128, b: u128) -> u128 {
    // Multiples of 256 plus `r` up to `n`, inclusive.
    let upto = |n: u128, r: u128| if n < r { 0 } else { (n - r) / 256 + 1 };
    let count = |r: u128| upto(b, r) - if a == 0 { 0 } else { upto(a - 1, r) };
    count(0) + count(0xff)
}

/// A pool with its ranges merged and sorted per family, plus a search cursor per range.
#[derive(Debug, Clone)]
pub(crate) struct PoolEntry {
    pub(crate) spec: Pool,
    /// Per family, sorted disjoint `(first, last)` ranges.
    ranges: [Vec<(u128, u128)>; 2],
    /// Per family and range: every number in `[first, cursor)` is in use or skipped, so the
    /// search starts there; `None` when the whole range is.
    cursors: [Vec<Option<u128>>; 2],
}

impl PoolEntry {
    pub(crate) fn new(spec: Pool) -> Self {
        let mut ranges: [Vec<(u128, u128)>; 2] = Default::default();
        for r in &spec.addresses {
            ranges[r.family().index()].push((numbered(r.first()).1, numbered(r.last()).1));
        }
        for list in &mut ranges {
            list.sort_unstable();
            let mut merged: Vec<(u128, u128)> = Vec::with_capacity(list.len());
            for &(s, e) in list.iter() {
                match merged.last_mut() {
                    Some(last) if last.1.checked_add(1).is_none_or(|n| s <= n) => {
                        last.1 = last.1.max(e)
                    }
                    _ => merged.push((s, e)),
                }
            }
            *list = merged;
        }
        let cursors = [0, 1].map(|i| ranges[i].iter().map(|&(s, _)| Some(s)).collect());
        Self {
            spec,
            ranges,
            cursors,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether the pool has any address of `fam`.
    pub(crate) fn has_family(&self, fam: IpFamily) -> bool {
        !self.ranges[fam.index()].is_empty()
    }

    fn skips(&self, fam: IpFamily, n: u128) -> bool {
        fam == IpFamily::V4 && self.spec.avoid_buggy_ips && is_buggy(n)
    }

    fn range_index(&self, fam: IpFamily, n: u128) -> Option<usize> {
        let list = &self.ranges[fam.index()];
        let i = list.partition_point(|&(s, _)| s <= n);
        (i > 0 && list[i - 1].1 >= n).then(|| i - 1)
    }

    /// Whether the pool hands out this address (in a range, and not skipped as buggy).
    pub(crate) fn contains(&self, fam: IpFamily, n: u128) -> bool {
        self.range_index(fam, n).is_some() && !self.skips(fam, n)
    }

    /// The pool's ranges of `fam`, lowest first.
    pub(crate) fn ranges(&self, fam: IpFamily) -> &[(u128, u128)] {
        &self.ranges[fam.index()]
    }

    /// The lowest address of `fam` in the pool that is not in `used`.
    ///
    /// Starts at each range's cursor and jumps over whole intervals of `used`; skipped buggy
    /// addresses cost one step each. The cursor moves up to the answer, so repeated
    /// assignment does not walk the same intervals again.
    pub(crate) fn lowest_free(&mut self, fam: IpFamily, used: &IntervalSet) -> Option<u128> {
        let f = fam.index();
        for i in 0..self.ranges[f].len() {
            let (_, last) = self.ranges[f][i];
            let Some(mut x) = self.cursors[f][i] else {
                continue;
            };
            let found = loop {
                if self.skips(fam, x) {
                    match x.checked_add(1).filter(|&n| n <= last) {
                        Some(n) => x = n,
                        None => break None,
                    }
                    continue;
                }
                match used.first_gap(x, last) {
                    Some(g) if g == x => break Some(x),
                    Some(g) => x = g,
                    None => break None,
                }
            };
            self.cursors[f][i] = found;
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Tells the search that `n` is free again.
    pub(crate) fn released(&mut self, fam: IpFamily, n: u128) {
        if let Some(i) = self.range_index(fam, n) {
            let c = &mut self.cursors[fam.index()][i];
            *c = Some(c.map_or(n, |c| c.min(n)));
        }
    }

    /// How many addresses of `fam` the pool hands out, and how many of them are in `used`.
    pub(crate) fn counts(&self, fam: IpFamily, used: &IntervalSet) -> (u128, u128) {
        let skip = fam == IpFamily::V4 && self.spec.avoid_buggy_ips;
        let usable = |s: u128, e: u128| {
            let n = span_len(s, e);
            if skip { n - buggy_within(s, e) } else { n }
        };
        let mut size = 0u128;
        let mut in_use = 0u128;
        for &(s, e) in self.ranges(fam) {
            size = size.saturating_add(usable(s, e));
            for (a, b) in used.spans_within(s, e) {
                in_use = in_use.saturating_add(usable(a, b));
            }
        }
        (size, in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn range(s: &str) -> AddressRange {
        AddressRange::parse(s).unwrap()
    }

    #[test]
    fn a_cidr_covers_its_whole_network() {
        let r = range("10.0.0.0/30");
        assert_eq!(r.first().to_string(), "10.0.0.0");
        assert_eq!(r.last().to_string(), "10.0.0.3");
        let r = range("fd00::/64");
        assert_eq!(r.last().to_string(), "fd00::ffff:ffff:ffff:ffff");
    }

    #[test]
    fn a_start_end_range_accepts_spaces_around_the_dash() {
        let r = range(" 10.0.0.10 - 10.0.0.20 ");
        assert_eq!(r.to_string(), "10.0.0.10-10.0.0.20");
        assert_eq!(range("fd00::1-fd00::ff").family(), IpFamily::V6);
    }

    #[test]
    fn malformed_entries_get_a_typed_error() {
        use AddressRangeError::*;
        let err = |s: &str| AddressRange::parse(s).unwrap_err();
        assert_eq!(err(""), Empty);
        assert!(matches!(err("10.0.0.0/33"), InvalidCidr { .. }));
        assert!(matches!(err("10.0.0.1-banana"), InvalidAddress { .. }));
        assert!(matches!(err("10.0.0.1-fd00::1"), MixedFamilies { .. }));
        assert!(matches!(err("10.0.0.9-10.0.0.1"), Reversed { .. }));
        assert!(matches!(err("10.0.0.1"), NotARange { .. }));
        assert!(matches!(err("nonsense"), InvalidAddress { .. }));
    }

    #[test]
    fn buggy_addresses_are_counted_per_slash_24() {
        assert_eq!(buggy_within(0, 255), 2);
        assert_eq!(buggy_within(1, 254), 0);
        assert_eq!(buggy_within(255, 256), 2);
        assert_eq!(buggy_within(0, 65535), 512);
    }

    #[test]
    fn overlapping_entries_of_one_pool_are_merged() {
        let e = PoolEntry::new(Pool::new(
            "p",
            vec![
                range("10.0.0.0/24"),
                range("10.0.0.10-10.0.1.5"),
                range("10.0.1.6/32"),
            ],
        ));
        assert_eq!(e.ranges(IpFamily::V4).len(), 1);
        assert_eq!(e.counts(IpFamily::V4, &IntervalSet::new()).0, 256 + 7);
    }

    #[test]
    fn the_search_skips_buggy_addresses_and_used_intervals() {
        let mut spec = Pool::new("p", vec![range("10.0.0.254-10.0.1.3")]);
        spec.avoid_buggy_ips = true;
        let mut e = PoolEntry::new(spec);
        let mut used = IntervalSet::new();
        let base = u32::from(Ipv4Addr::new(10, 0, 0, 0)) as u128;
        assert_eq!(e.lowest_free(IpFamily::V4, &used), Some(base + 254));
        used.insert(base + 254);
        assert_eq!(e.lowest_free(IpFamily::V4, &used), Some(base + 257));
        used.insert(base + 257);
        used.insert(base + 258);
        used.insert(base + 259);
        assert_eq!(e.lowest_free(IpFamily::V4, &used), None);
        used.remove(base + 254);
        e.released(IpFamily::V4, base + 254);
        assert_eq!(e.lowest_free(IpFamily::V4, &used), Some(base + 254));
    }
}
