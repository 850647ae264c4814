//! Errors of the layer-2 shell.

/// What can go wrong while setting up answers on an interface.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    /// The interface named (by an `L2Advertisement` or the default choice) is not on this node.
    #[error("interface `{name}` does not exist on this node; check L2Advertisement.interfaces")]
    InterfaceNotFound {
        /// Interface name.
        name: String,
    },
    /// The interface has no hardware address to answer with.
    #[error("interface `{name}` has no MAC address, so ARP/NDP cannot be answered on it")]
    NoMac {
        /// Interface name.
        name: String,
    },
    /// The packet socket could not be opened.
    #[error("cannot open a packet socket on `{name}` (the speaker needs CAP_NET_RAW): {source}")]
    Channel {
        /// Interface name.
        name: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// pnet returned a channel type other than Ethernet.
    #[error("the packet channel on `{name}` is not an Ethernet channel")]
    NotEthernet {
        /// Interface name.
        name: String,
    },
}
