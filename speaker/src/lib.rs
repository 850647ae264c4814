//! FerroLB speaker: what to announce, layer-2 and BGP announcement, membership.
//!
//! # Layout
//!
//! One direction, from the top: the shell drives the planners, the planners read the cluster
//! model, and the protocol cores below import none of the layers above them.
//!
//! - [`shell`]: the Kubernetes shell (`Speaker::sync`, which applies the node planner's
//!   effects; the status, session and configuration writers, metrics). The binary's `main.rs`
//!   wires it: flags, tasks, the sync loop.
//! - [`planner`]: what to announce from the model, pure: the layer-2 plan, the BGP plan, both
//!   kept up to date one changed Service at a time, and one node's decisions per sync
//!   ([`planner::node`]: time passed in, effects out).
//! - [`cluster`]: the model of the cluster, pure: Kubernetes objects converted into what the
//!   planners read ([`cluster::input`]), indexed, updated one watch event at a time.
//! - Leaves, each importing none of the above: [`l2`] (election, ARP/NDP frames, the
//!   responder), [`bgp`] (codec, session state machine, sessions), [`bfd`], [`membership`]
//!   (gossip and who is live), [`netdev`] (binding to a device), [`watch`] (publishing
//!   on a watch channel only on a change).
//!
//! The speaker's tool binaries (`l2-probe`, `bgp-probe`, ...) live in the `ferrolb-tests` crate,
//! not here.
pub mod bfd;
pub mod bgp;
pub mod cluster;
pub mod l2;
pub mod membership;
pub mod netdev;
pub mod planner;
pub mod shell;
mod wait;
pub mod watch;
