//! Layer-2 announcement: owner election, gratuitous ARP / unsolicited NA schedule, ARP and NDP
//! frame parsing and building (all pure), and the pnet responder shell that applies them.
//!
//! # Layout
//! - [`election`]: which node owns an address (rendezvous hashing).
//! - [`schedule`]: when to repeat gratuitous ARP / unsolicited NA after taking an address.
//! - [`frame`]: ARP request / Neighbor Solicitation parsing, reply and announcement building.
pub mod election;
pub mod frame;
pub mod schedule;
