//! A BGP Role (RFC 9234): the value in the capability, the pairs that agree, and its name in
//! configuration. Pure: plain data.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A BGP Role (RFC 9234 §3.1): what the AS on this side of an eBGP session is to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Sells transit to the peer (value 0).
    Provider,
    /// A route server (value 1).
    RsServer,
    /// A client of the peer's route server (value 2).
    RsClient,
    /// Buys transit from the peer (value 3).
    Customer,
    /// A lateral peer (value 4).
    Peer,
}

impl Role {
    /// Every role, in value order.
    pub const ALL: [Role; 5] = [
        Role::Provider,
        Role::RsServer,
        Role::RsClient,
        Role::Customer,
        Role::Peer,
    ];

    /// The value in the BGP Role capability.
    pub fn value(self) -> u8 {
        self as u8
    }

    /// The role with this capability value, if it is one RFC 9234 defines.
    pub fn from_value(v: u8) -> Option<Role> {
        Role::ALL.get(usize::from(v)).copied()
    }

    /// The one role the peer may have when we have this one (RFC 9234 §4.2, Table 2).
    pub fn counterpart(self) -> Role {
        match self {
            Role::Provider => Role::Customer,
            Role::Customer => Role::Provider,
            Role::RsServer => Role::RsClient,
            Role::RsClient => Role::RsServer,
            Role::Peer => Role::Peer,
        }
    }

    /// Whether routes we send carry Only-to-Customer with our AS (RFC 9234 §5, egress: the
    /// receiver is a customer, a lateral peer or a route-server client).
    pub fn marks_only_to_customer(self) -> bool {
        matches!(self, Role::Provider | Role::Peer | Role::RsServer)
    }

    /// The name used in `BGPPeer.spec.role`, FRR's `local-role` and BIRD's `local role`
    /// (BIRD writes the route-server roles `rs_server`, `rs_client`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Provider => "provider",
            Role::RsServer => "rs-server",
            Role::RsClient => "rs-client",
            Role::Customer => "customer",
            Role::Peer => "peer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
