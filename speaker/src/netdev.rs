//! Linux network device names, and binding a socket to one (`SO_BINDTODEVICE`). Pure, but for
//! [`bind`].
//!
//! A `BGPPeer`'s `vrf` names a device; the session's TCP socket and its BFD sockets are bound
//! to it, so that routing, the source address and the next hop come from that device's VRF.
//! Binding works the same way for a VRF master device and for a plain interface.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// Longest device name Linux accepts (`IFNAMSIZ` less the terminating NUL).
pub const MAX_NAME_LEN: usize = 15;

/// A name the kernel accepts for a network device (`dev_valid_name`): 1 to 15 bytes, no `/`,
/// `:` or whitespace, and not `.` or `..`. `Copy`, so keys that hold one stay `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DeviceName {
    len: u8,
    bytes: [u8; MAX_NAME_LEN],
}

/// Why a string is not a device name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a Linux network device name (1 to 15 characters, no '/', ':' or whitespace, not '.' or '..')"
)]
pub struct BadDeviceName(pub String);

impl DeviceName {
    /// `name`, when the kernel would accept it.
    pub fn new(name: &str) -> Result<DeviceName, BadDeviceName> {
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name != "."
            && name != ".."
            && !name
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace());
        if !valid {
            return Err(BadDeviceName(name.to_owned()));
        }
        let mut bytes = [0u8; MAX_NAME_LEN];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(DeviceName {
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Built from a `&str` in `new`, cut at its own length: always UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl TryFrom<String> for DeviceName {
    type Error = BadDeviceName;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        DeviceName::new(&s)
    }
}

impl From<DeviceName> for String {
    fn from(d: DeviceName) -> String {
        d.as_str().to_owned()
    }
}

/// Why a socket could not be bound to its device.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// No device of that name exists on this node (`ENODEV`). The caller retries: the device
    /// may be created later.
    #[error(
        "VRF `{0}` does not exist on this node (no network device of that name); retrying until it does"
    )]
    Missing(DeviceName),
    /// Any other refusal (`EPERM` without `CAP_NET_RAW` on old kernels, ...).
    #[error("cannot bind the socket to VRF device `{device}`: {source}")]
    Other {
        /// The device.
        device: DeviceName,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

impl BindError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BindError::Missing(_) => "vrf_not_found",
            BindError::Other { .. } => "vrf_bind_failed",
        }
    }

    /// The device concerned.
    pub fn device(&self) -> DeviceName {
        match self {
            BindError::Missing(d) | BindError::Other { device: d, .. } => *d,
        }
    }
}

/// Binds `socket` to `device` (`SO_BINDTODEVICE`): from now on it sends and receives only
/// through that device, and route lookups for it use that device's VRF. Must come before
/// `bind` / `connect` for the source address to be chosen in the VRF.
pub fn bind(socket: &socket2::SockRef<'_>, device: DeviceName) -> Result<(), BindError> {
    socket
        .bind_device(Some(device.as_str().as_bytes()))
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ENODEV) => BindError::Missing(device),
            _ => BindError::Other { device, source },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_follow_the_kernels_rule() {
        for ok in ["red", "eth0.100", "vrf-0123456789a", "a"] {
            assert_eq!(DeviceName::new(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "red/blue",
            "red:1",
            "red blue",
            "a\tb",
            "vrf-0123456789ab",
        ] {
            assert!(DeviceName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_device_name_reads_and_writes_as_a_json_string() {
        let d: DeviceName = serde_json::from_str("\"red\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"red\"");
        assert!(serde_json::from_str::<DeviceName>("\"a/b\"").is_err());
    }

    #[test]
    fn binding_to_a_device_that_does_not_exist_says_which_one_is_missing() {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        let device = DeviceName::new("flb-no-such0").unwrap();
        match bind(&socket2::SockRef::from(&socket), device) {
            Err(BindError::Missing(d)) => assert_eq!(d, device),
            other => panic!("expected a missing device, got {other:?}"),
        }
    }

    #[test]
    fn binding_to_the_loopback_device_works() {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        let sock = socket2::SockRef::from(&socket);
        bind(&sock, DeviceName::new("lo").unwrap()).expect("bound to lo");
        assert_eq!(sock.device().unwrap().as_deref(), Some(&b"lo"[..]));
    }
}
