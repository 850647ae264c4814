//! Speaker membership: which speakers are alive, by SWIM gossip over UDP authenticated with a
//! shared key.
//!
//! # Layout
//! - [`auth`]: HMAC-SHA256 framing of datagrams. Pure.
//! - [`core`]: the SWIM state machine (the `foca` crate) behind that framing, bounded joins,
//!   per-member states. Pure: timers are outputs, randomness comes from a seed.
//! - [`states`]: the states members publish to each other (foca custom broadcasts). Pure.
//! - [`liveness`]: who is live for layer 2 each pass (join wait, leaving members, the rejoin
//!   settle), and what members publish ([`MemberState`]). Pure.
//! - [`sim`]: many cores on a simulated network with virtual time, for tests and the
//!   `gossip_sim` bench. Pure.
//! - [`partition`]: breaking a gossip partition's tie through one Lease on the API server.
//!   Pure.
//! - [`seeds`]: gossip seeds and the fallback live view from speaker Pods and Nodes. Pure.
//! - [`view_lease`]: the tokio shell of [`partition`]: watches and writes the view Lease.
//! - [`udp`]: the shell, on a thread of its own: one UDP socket, timers, watches of live
//!   nodes and their states; it blocks in one poll(2) (`wait`).
//!
//! Seeds come from the speaker Pods (`status.podIP`, `spec.nodeName`). When gossip cannot run
//! at all (no key, the port cannot be bound), the caller falls back to the Kubernetes view
//! (speaker Pod ready and Node ready).
pub mod auth;
pub mod core;
pub mod liveness;
pub mod partition;
pub mod seeds;
pub mod sim;
pub mod states;
pub mod udp;
pub mod view_lease;

pub use auth::{AuthFailure, GossipKey, KeyRing};
pub use core::{
    JOIN_FANOUT, Membership, MembershipConfig, MembershipCounters, Output, SpeakerId, StateError,
};
pub use liveness::{Liveness, MemberState};
pub use states::MAX_STATE_LEN;
pub use udp::{Gossip, MembershipError, States};

#[cfg(test)]
mod tests;
