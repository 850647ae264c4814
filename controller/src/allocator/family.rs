//! An IP address family and an address's number within it. Pure: no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first.
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            IpFamily::V4 => 0,
            IpFamily::V6 => 1,
        }
    }

    /// The address of this family numbered `n` (`n` must fit the family).
    pub(crate) fn addr(self, n: u128) -> IpAddr {
        match self {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// An address as its family and its number within the family.
pub(crate) fn numbered(ip: IpAddr) -> (IpFamily, u128) {
    match ip {
        IpAddr::V4(a) => (IpFamily::V4, u32::from(a) as u128),
        IpAddr::V6(a) => (IpFamily::V6, u128::from(a)),
    }
}
