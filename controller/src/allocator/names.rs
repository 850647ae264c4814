//! The Service annotations the allocator reads. Pure: constants only.
//!
//! These are the same names `ferrolb_api::names` exports; once that module is published, this
//! file becomes `pub use ferrolb_api::names::*;` and nothing else in the allocator changes.
//! Spellings are consulted in order: `ferrolb.io/` first, then `metallb.io/`, then the legacy
//! `metallb.universe.tf/`, so Services move over from MetalLB unchanged.

/// Asks for a specific `IPAddressPool` by name.
pub const ADDRESS_POOL: &str = "ferrolb.io/address-pool";
/// Asks for specific addresses, comma-separated, at most one per IP family.
pub const LOAD_BALANCER_IPS: &str = "ferrolb.io/loadBalancerIPs";
/// A sharing key: Services with the same key may share an address.
pub const ALLOW_SHARED_IP: &str = "ferrolb.io/allow-shared-ip";

/// `metallb.io/` spelling of [`ADDRESS_POOL`].
pub const METALLB_ADDRESS_POOL: &str = "metallb.io/address-pool";
/// `metallb.io/` spelling of [`LOAD_BALANCER_IPS`].
pub const METALLB_LOAD_BALANCER_IPS: &str = "metallb.io/loadBalancerIPs";
/// `metallb.io/` spelling of [`ALLOW_SHARED_IP`].
pub const METALLB_ALLOW_SHARED_IP: &str = "metallb.io/allow-shared-ip";
/// Legacy `metallb.universe.tf/` spelling of [`ADDRESS_POOL`].
pub const LEGACY_ADDRESS_POOL: &str = "metallb.universe.tf/address-pool";
/// Legacy `metallb.universe.tf/` spelling of [`LOAD_BALANCER_IPS`].
pub const LEGACY_LOAD_BALANCER_IPS: &str = "metallb.universe.tf/loadBalancerIPs";
/// Legacy `metallb.universe.tf/` spelling of [`ALLOW_SHARED_IP`].
pub const LEGACY_ALLOW_SHARED_IP: &str = "metallb.universe.tf/allow-shared-ip";

/// Every spelling of the address-pool annotation, in the order they are consulted.
pub const ADDRESS_POOL_KEYS: [&str; 3] = [ADDRESS_POOL, METALLB_ADDRESS_POOL, LEGACY_ADDRESS_POOL];
/// Every spelling of the requested-addresses annotation, in the order they are consulted.
pub const LOAD_BALANCER_IPS_KEYS: [&str; 3] = [
    LOAD_BALANCER_IPS,
    METALLB_LOAD_BALANCER_IPS,
    LEGACY_LOAD_BALANCER_IPS,
];
/// Every spelling of the sharing-key annotation, in the order they are consulted.
pub const ALLOW_SHARED_IP_KEYS: [&str; 3] = [
    ALLOW_SHARED_IP,
    METALLB_ALLOW_SHARED_IP,
    LEGACY_ALLOW_SHARED_IP,
];
