//! The host as read at one moment: its interfaces ([`system_interfaces`]) and their ARP sysctls
//! ([`read_sysctls`]), read together so that both describe the same interfaces.

use super::iface::{InterfaceInfo, system_interfaces};
use super::kernel_arp::{ArpSysctls, read_sysctls};

/// The host as read at one moment: its interfaces and their ARP sysctls.
#[derive(Debug)]
pub struct HostRead {
    /// [`system_interfaces`].
    pub interfaces: Vec<InterfaceInfo>,
    /// [`read_sysctls`] for those interfaces.
    pub arp: std::io::Result<ArpSysctls>,
}

impl HostRead {
    /// Reads the interfaces, then their sysctls, in the calling thread's network namespace.
    pub fn read() -> Self {
        let interfaces = system_interfaces();
        let arp = read_sysctls(interfaces.iter().map(|i| i.name.as_str()));
        Self { interfaces, arp }
    }
}
