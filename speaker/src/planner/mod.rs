//! What to announce: from a snapshot of the cluster, the addresses this node answers for and
//! why any node is not eligible. Pure: no I/O, no clock.
//!
//! # Layout
//! - [`input`]: the snapshot as plain structs ([`Snapshot`], [`ServiceInfo`], [`NodeInfo`], ...),
//!   so tests and the BGP planner build them without Kubernetes objects; the cluster model
//!   ([`crate::cluster`]) converts Kubernetes objects into them.
//! - [`eligibility`]: the node checks shared by layer 2 and BGP (exclusion label,
//!   `NetworkUnavailable`, usable endpoints of the address's family, local ones for
//!   `externalTrafficPolicy: Local`).
//! - [`l2`]: the layer-2 plan: advertisement matching, owner election, interfaces.
//! - [`bgp`]: the BGP plan: which prefixes go to which peers, with which attributes.
//! - [`incremental`]: both plans kept up to date one changed Service at a time, for the
//!   speaker's sync loop.
//! - [`node`]: one node's decisions per sync, built on both trackers: the layer-2 answers and
//!   their interfaces, the BGP peers and paths, the status objects and Events; the shell
//!   applies them.

pub mod bgp;
pub mod eligibility;
pub mod incremental;
pub mod l2;
pub mod node;

pub use crate::cluster::input;
pub use crate::l2::election::HoldDown;
pub use eligibility::NotEligible;
pub use input::{
    AddressType, EndpointInfo, L2AdvertisementInfo, NodeInfo, PoolInfo, ServiceInfo, ServiceKey,
    ServiceLabels, Snapshot,
};
pub use l2::{AddressPlan, Interfaces, L2Plan, NotAnnounced, plan_l2};

#[cfg(test)]
mod preference_tests;
#[cfg(test)]
mod tests;
