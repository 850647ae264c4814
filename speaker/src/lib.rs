//! FerroLB speaker: what to announce, layer-2 and BGP announcement, membership.
pub mod bfd;
pub mod bgp;
pub mod cluster;
pub mod l2;
pub mod membership;
pub mod netdev;
pub mod planner;
pub mod shell;
