//! The allocator's decisions and refusals, as types. Pure: no I/O, no clock.

use std::fmt;
use std::net::IpAddr;

use super::family::IpFamily;
use super::pool::IpMode;
use super::request::{Protocol, ServiceKey};

/// The addresses a Service holds, and where they come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The addresses, in the order of the Service's `ipFamilies`.
    pub ips: Vec<IpAddr>,
    /// The pool they belong to.
    pub pool: String,
    /// That pool's `ipMode`.
    pub ip_mode: IpMode,
}

/// What [`super::Allocator::assign`] decided for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Service keeps the addresses it had.
    Unchanged(Assignment),
    /// The Service had no address and now has these.
    Assigned(Assignment),
    /// The Service's addresses changed: `old` could not be kept, for `reason`.
    Changed {
        /// The addresses it had.
        old: Vec<IpAddr>,
        /// What it has now.
        new: Assignment,
        /// Why the old addresses could not all be kept.
        reason: ChangeReason,
    },
    /// The Service lost its addresses (for `reason`) and could get no new ones (for `error`).
    Revoked {
        /// The addresses it had.
        old: Vec<IpAddr>,
        /// Why they could not be kept.
        reason: ChangeReason,
        /// Why no new ones could be given.
        error: AllocationError,
    },
    /// The Service had no address and gets none.
    Failed(AllocationError),
}

impl Outcome {
    /// The Service's addresses after the decision, if it has any.
    pub fn assignment(&self) -> Option<&Assignment> {
        match self {
            Outcome::Unchanged(a) | Outcome::Assigned(a) | Outcome::Changed { new: a, .. } => {
                Some(a)
            }
            Outcome::Revoked { .. } | Outcome::Failed(_) => None,
        }
    }

    /// The refusal, if the Service ends up with no address.
    pub fn error(&self) -> Option<&AllocationError> {
        match self {
            Outcome::Revoked { error, .. } | Outcome::Failed(error) => Some(error),
            _ => None,
        }
    }

    /// Whether the decision gave up addresses, so that waiting Services
    /// ([`super::Allocator::waiting`]) may now succeed.
    pub fn frees_addresses(&self) -> bool {
        matches!(self, Outcome::Changed { .. } | Outcome::Revoked { .. })
    }
}

/// Why a Service could not keep an address it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeReason {
    /// No pool contains the address any more (pool deleted or shrunk, or `avoidBuggyIPs` set).
    NotInAnyPool {
        /// The address.
        ip: IpAddr,
    },
    /// The pool holding the address no longer admits the Service (`serviceAllocation`).
    PoolNoLongerAdmits {
        /// The address.
        ip: IpAddr,
        /// The pool.
        pool: String,
    },
    /// The Service now asks for other addresses or another pool.
    RequestChanged {
        /// The address.
        ip: IpAddr,
    },
    /// The Service no longer wants an address of this family (`ipFamilies` / `ipFamilyPolicy`).
    FamilyNotWanted {
        /// The address.
        ip: IpAddr,
    },
    /// Another Service holds the address and the two may not share it.
    SharingNoLongerAllowed {
        /// The address.
        ip: IpAddr,
        /// The Service that keeps it.
        with: ServiceKey,
    },
    /// The Service's addresses lie in different pools; the one outside the first pool goes.
    AddressesInDifferentPools {
        /// The address.
        ip: IpAddr,
    },
    /// Nothing was lost: `ip` was added for a family the Service now wants (dual stack).
    Completed {
        /// The address added.
        ip: IpAddr,
    },
}

impl ChangeReason {
    /// A CamelCase reason for Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            ChangeReason::NotInAnyPool { .. } => "AddressNotInAnyPool",
            ChangeReason::PoolNoLongerAdmits { .. } => "PoolNoLongerAdmits",
            ChangeReason::RequestChanged { .. } => "RequestChanged",
            ChangeReason::FamilyNotWanted { .. } => "FamilyNotWanted",
            ChangeReason::SharingNoLongerAllowed { .. } => "SharingNoLongerAllowed",
            ChangeReason::AddressesInDifferentPools { .. } => "AddressesInDifferentPools",
            ChangeReason::Completed { .. } => "AddressAdded",
        }
    }
}

impl fmt::Display for ChangeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeReason::NotInAnyPool { ip } => {
                write!(
                    f,
                    "{ip} is no longer in any IPAddressPool (pool deleted or shrunk)"
                )
            }
            ChangeReason::PoolNoLongerAdmits { ip, pool } => write!(
                f,
                "pool `{pool}` holding {ip} no longer admits this Service (serviceAllocation changed)"
            ),
            ChangeReason::RequestChanged { ip } => write!(
                f,
                "{ip} is not what the Service now asks for (address-pool or loadBalancerIPs changed)"
            ),
            ChangeReason::FamilyNotWanted { ip } => {
                write!(
                    f,
                    "{ip} is of a family the Service no longer uses (ipFamilies changed)"
                )
            }
            ChangeReason::SharingNoLongerAllowed { ip, with } => write!(
                f,
                "{ip} is also held by {with} and the two may no longer share it (sharing key, ports or traffic policy)"
            ),
            ChangeReason::AddressesInDifferentPools { ip } => {
                write!(
                    f,
                    "{ip} is in another pool than the Service's other address"
                )
            }
            ChangeReason::Completed { ip } => {
                write!(f, "{ip} was added for a family the Service now asks for")
            }
        }
    }
}

fn pool_list(pools: &[String]) -> String {
    pools
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a Service gets no address. Each message says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// No ready, auto-assigning pool admits the Service.
    #[error(
        "no ready IPAddressPool with autoAssign admits this Service: add one, widen a pool's serviceAllocation (namespaces, namespaceSelectors, serviceSelectors), or name a pool with the address-pool annotation"
    )]
    NoPoolAdmitsService,
    /// Every candidate pool is out of addresses of `family`.
    #[error(
        "no free {family} address in pool(s) {}: add addresses to a pool, delete unused LoadBalancer Services, or use a sharing key", pool_list(.pools)
    )]
    PoolExhausted {
        /// The pools tried, in order.
        pools: Vec<String>,
        /// The family that ran out.
        family: IpFamily,
    },
    /// No candidate pool has addresses of `family` (or of both families, for dual stack).
    #[error(
        "no candidate pool ({}) has {family} addresses: add {family} addresses to a pool or change the Service's ipFamilies / ipFamilyPolicy", pool_list(.pools)
    )]
    FamilyNotAvailable {
        /// The pools tried.
        pools: Vec<String>,
        /// The family missing.
        family: IpFamily,
    },
    /// The named pool does not exist.
    #[error("IPAddressPool `{pool}` does not exist: create it or fix the address-pool annotation")]
    UnknownPool {
        /// The name asked for.
        pool: String,
    },
    /// The named pool exists but is held back (for example it overlaps an older pool).
    #[error(
        "IPAddressPool `{pool}` is not ready (see its status conditions): fix the pool or ask for another"
    )]
    PoolNotReady {
        /// The pool.
        pool: String,
    },
    /// The pool asked for (by name or through an address) does not admit the Service.
    #[error(
        "IPAddressPool `{pool}` does not admit this Service: add its namespace or labels to the pool's serviceAllocation, or ask for another pool"
    )]
    PoolDoesNotAdmitService {
        /// The pool.
        pool: String,
    },
    /// A requested address is in no pool.
    #[error(
        "requested address {ip} is in no IPAddressPool: add it to a pool or request an address from one"
    )]
    RequestedIpNotInAnyPool {
        /// The address.
        ip: IpAddr,
    },
    /// A requested address is not in the requested pool.
    #[error(
        "requested address {ip} is not in the requested pool `{pool}`: request an address from that pool or drop one of the two annotations"
    )]
    RequestedIpNotInPool {
        /// The address.
        ip: IpAddr,
        /// The pool named.
        pool: String,
    },
    /// The requested addresses belong to different pools.
    #[error(
        "requested addresses {first} (pool `{first_pool}`) and {second} (pool `{second_pool}`) are in different pools: request addresses from one pool"
    )]
    RequestedIpsInDifferentPools {
        /// The first address.
        first: IpAddr,
        /// Its pool.
        first_pool: String,
        /// The second address.
        second: IpAddr,
        /// Its pool.
        second_pool: String,
    },
    /// A requested address is held by a Service that may not share it.
    #[error(
        "requested address {ip} is in use by {by}: request another address, or give both Services the same allow-shared-ip key"
    )]
    RequestedIpInUse {
        /// The address.
        ip: IpAddr,
        /// The Service holding it.
        by: ServiceKey,
    },
    /// Sharing the address would put two Services on the same port and protocol.
    #[error(
        "{ip} is shared with {with}, which already uses {port}/{protocol}: use another port or another sharing key"
    )]
    SharingPortConflict {
        /// The address.
        ip: IpAddr,
        /// The Service using the port.
        with: ServiceKey,
        /// The port.
        port: u16,
        /// Its protocol.
        protocol: Protocol,
    },
    /// Sharing the address would mix incompatible `externalTrafficPolicy` settings.
    #[error(
        "{ip} is shared with {with}, whose externalTrafficPolicy or pod selector differs: both Cluster, or both Local with the same selector, may share"
    )]
    SharingPolicyConflict {
        /// The address.
        ip: IpAddr,
        /// The other Service.
        with: ServiceKey,
    },
    /// More than one address of one family was requested.
    #[error("more than one {family} address requested: request at most one address per family")]
    TooManyRequestedIps {
        /// The family.
        family: IpFamily,
    },
    /// A requested address is of a family the Service does not use.
    #[error(
        "requested address {ip} is {family} but the Service's ipFamilies do not include {family}: fix loadBalancerIPs or ipFamilies"
    )]
    RequestedFamilyNotOnService {
        /// The address.
        ip: IpAddr,
        /// Its family.
        family: IpFamily,
    },
    /// `RequireDualStack` with requested addresses of one family only.
    #[error(
        "ipFamilyPolicy RequireDualStack needs one requested address per family, but only {family} was requested: add the other address or relax the policy"
    )]
    DualStackNeedsBothAddresses {
        /// The only family requested.
        family: IpFamily,
    },
    /// Both the addresses annotation and `spec.loadBalancerIP` are set.
    #[error(
        "both the loadBalancerIPs annotation and spec.loadBalancerIP are set: remove spec.loadBalancerIP (deprecated) and keep the annotation"
    )]
    ConflictingRequestedIps,
    /// A requested address does not parse.
    #[error(
        "`{value}` is not an IP address: fix the loadBalancerIPs annotation or spec.loadBalancerIP"
    )]
    InvalidRequestedIp {
        /// The text.
        value: String,
    },
    /// Two spellings of one annotation disagree.
    #[error("annotations `{first}` and `{second}` disagree: keep only one of them")]
    ConflictingAnnotations {
        /// The first spelling found.
        first: String,
        /// The spelling that disagrees.
        second: String,
    },
}

impl AllocationError {
    /// The variant's name, for Event reasons and metric labels.
    pub fn reason(&self) -> &'static str {
        use AllocationError::*;
        match self {
            NoPoolAdmitsService => "NoPoolAdmitsService",
            PoolExhausted { .. } => "PoolExhausted",
            FamilyNotAvailable { .. } => "FamilyNotAvailable",
            UnknownPool { .. } => "UnknownPool",
            PoolNotReady { .. } => "PoolNotReady",
            PoolDoesNotAdmitService { .. } => "PoolDoesNotAdmitService",
            RequestedIpNotInAnyPool { .. } => "RequestedIpNotInAnyPool",
            RequestedIpNotInPool { .. } => "RequestedIpNotInPool",
            RequestedIpsInDifferentPools { .. } => "RequestedIpsInDifferentPools",
            RequestedIpInUse { .. } => "RequestedIpInUse",
            SharingPortConflict { .. } => "SharingPortConflict",
            SharingPolicyConflict { .. } => "SharingPolicyConflict",
            TooManyRequestedIps { .. } => "TooManyRequestedIps",
            RequestedFamilyNotOnService { .. } => "RequestedFamilyNotOnService",
            DualStackNeedsBothAddresses { .. } => "DualStackNeedsBothAddresses",
            ConflictingRequestedIps => "ConflictingRequestedIps",
            InvalidRequestedIp { .. } => "InvalidRequestedIp",
            ConflictingAnnotations { .. } => "ConflictingAnnotations",
        }
    }

    /// Whether addresses freed elsewhere could make a retry succeed (as opposed to a
    /// configuration mistake that only the user can fix).
    pub fn may_succeed_later(&self) -> bool {
        use AllocationError::*;
        matches!(
            self,
            PoolExhausted { .. }
                | RequestedIpInUse { .. }
                | SharingPortConflict { .. }
                | SharingPolicyConflict { .. }
        )
    }
}

/// What [`super::Allocator::set_pools`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolsChanged {
    /// Services that lost at least one address; assign them again to get an explicit
    /// [`Outcome::Changed`] or [`Outcome::Revoked`].
    pub invalidated: Vec<ServiceKey>,
    /// Services waiting for an address that may now get one.
    pub retry: Vec<ServiceKey>,
}

/// Use of one family of a pool. Counts saturate at `u128::MAX`; they never go negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FamilyStats {
    /// Addresses of the pool held by at least one Service.
    pub assigned: u128,
    /// Addresses of the pool still free.
    pub available: u128,
}

/// Use of a pool, per family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// IPv4.
    pub v4: FamilyStats,
    /// IPv6.
    pub v6: FamilyStats,
}
