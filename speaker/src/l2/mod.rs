//! Layer-2 announcement: owner election, gratuitous ARP / unsolicited NA schedule, ARP and NDP
//! frame parsing and building (all pure), and the pnet responder shell that applies them.
//!
//! # Layout
//! - [`election`]: which node owns an address (preferences, then rendezvous hashing). Pure.
//! - [`arrivals`]: when live speakers joined, for the preferred-node hold-down. Pure.
//! - [`schedule`]: when to repeat gratuitous ARP / unsolicited NA after taking an address. Pure.
//! - [`frame`]: ARP request / Neighbor Solicitation parsing, reply and announcement building. Pure.
//! - [`filter`]: the BPF program that keeps other traffic in the kernel. Pure data.
//! - [`iface`]: which interfaces answer for an address, or why none can ([`iface::diagnose`]).
//!   Pure, plus one reader of the host's interfaces.
//! - [`responder`]: packet sockets and threads that answer and announce ([`Responder`]).
//! - [`host`]: the host as read at one moment, its interfaces with their ARP sysctls.
//! - [`hostwatch`]: the kernel's notifications of interface and address changes, so the host
//!   is read again when it changed ([`hostwatch::reports_change`] is pure).
//! - [`kernel_arp`]: whether this node's own kernel answers ARP for a Service address too
//!   (kube-proxy's IPVS without `strictARP`). Pure, plus one reader of the sysctls.
//!
//! # Wiring
//! ```text
//! Snapshot ─► planner::plan_l2 ─► L2Plan.owned ─► iface::diagnose(ip, wanted, host interfaces)
//!                                                   ├─► Ok(names) ─► Responder::set_owned (full set,
//!                                                   │                each change)
//!                                                   └─► Err(InterfaceProblem) ─► log, Event,
//!                                                        metric (label()); the address must move
//! on a hostwatch notification (or every hostwatch::SAFETY_INTERVAL; every REFRESH_INTERVAL
//! without notifications): Responder::refresh(host interfaces) ─► Responder::interface_errors()
//!                          and kernel_arp::KernelView(host interfaces, ARP sysctls)
//!                               ─► check(each layer-2 address held here) ─► log, metric,
//!                                  ConfigurationState
//! ```
//! Live speakers come from [`crate::membership`]; the election inside the planner uses them.
pub mod arrivals;
pub mod election;
pub mod filter;
pub mod frame;
pub mod host;
pub mod hostwatch;
pub mod iface;
pub mod kernel_arp;
pub mod responder;
pub mod schedule;

mod counters;
mod error;

pub use counters::CounterSnapshot;
pub use error::{InterfaceFault, InterfaceProblem, L2Error, Unusable};
pub use responder::{OpenInterface, REFRESH_INTERVAL, Responder};
