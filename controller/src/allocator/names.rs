//! The Service annotations the allocator reads. Pure: constants only.
//!
//! The names are defined once, in `ferrolb_api::names`; this module re-exports those the
//! allocator consults. Spellings are consulted in order: `ferrolb.io/` first, then
//! `metallb.io/`, then the legacy `metallb.universe.tf/`, so Services move over from MetalLB
//! unchanged.

pub use ferrolb_api::names::{
    ADDRESS_POOL, ADDRESS_POOL_KEYS, ALLOW_SHARED_IP, ALLOW_SHARED_IP_KEYS, LEGACY_ADDRESS_POOL,
    LEGACY_ALLOW_SHARED_IP, LEGACY_LOAD_BALANCER_IPS, LOAD_BALANCER_IPS, LOAD_BALANCER_IPS_KEYS,
    METALLB_ADDRESS_POOL, METALLB_ALLOW_SHARED_IP, METALLB_LOAD_BALANCER_IPS,
};
