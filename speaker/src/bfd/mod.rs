//! BFD (RFC 5880) in asynchronous mode, the sans-IO core: the Control packet codec and the
//! per-session state machine, for single-hop (RFC 5881) and multihop (RFC 5883) sessions alike.
//! Pure: no I/O, no clock, no tokio; except [`sessions`], the thin tokio shell that runs it.
//!
//! # Layout
//!
//! - [`packet`]: the 24-byte Control packet, and every reception check of RFC 5880 §6.8.6 that
//!   needs only the packet ([`decode`], [`PacketError`]).
//! - [`session`]: one session's state machine ([`Session`]): the state table, the Poll Sequence,
//!   timer negotiation, jittered transmission and the detection time.
//! - [`sessions`]: the shell (I/O, not pure): sockets, the TTL check, demultiplexing, and every
//!   session on one thread of its own ([`BfdSessions`], [`BfdHandle`], [`BfdStatus`]).
//!
//! ```text
//!   UDP datagram ──decode()──► ControlPacket ─┐
//!                  (PacketError: drop,        │  receive(&packet, now)
//!                   count, log)               ▼
//!   config / admin ──set_config()────────► Session ──► Vec<Output>
//!                    set_admin_down/up()      ▲          ├─ Send(ControlPacket) ─encode()─► UDP
//!   the shell's timer ──poll(now)─────────────┘          ├─ StateChanged { from, to, diag }
//!        ▲                                               └─ Discarded(Discard)
//!        └──── sleep until next_wakeup() ◄──────────────────
//! ```
//!
//! # Guarantees
//!
//! - [`decode`] never panics and accepts only what RFC 5880 §6.8.6 lets through; what a
//!   [`Session`] sends always passes [`decode`].
//! - The session is deterministic: the same packets at the same instants give the same outputs
//!   (jitter comes from a generator seeded by the discriminator).
//!
//! # Left to the shell ([`sessions`] does it)
//!
//! Sockets (UDP 3784 for single hop, 4784 for multihop, source port 49152–65535), TTL 255 on
//! sent packets and the received TTL / hop-limit check (RFC 5881 §5: 255 for single hop;
//! RFC 5883 §5: at least [`SessionConfig::minimum_ttl`] for multihop), choosing a unique nonzero
//! discriminator per session, and demultiplexing: by Your Discriminator when it is nonzero, by
//! addresses (and interface, for single hop) when it is zero (§6.8.6). The session still refuses a
//! packet whose Your Discriminator is not its own.
//!
//! # Caveats
//!
//! No authentication (a peer that sends it is refused, see [`PacketError`]), no Echo function,
//! no Demand mode of our own.
pub mod packet;
pub mod session;
pub mod sessions;

pub use packet::{ControlPacket, Diag, PacketError, State, decode};
pub use session::{ConfigError, Discard, Output, Session, SessionConfig};
pub use sessions::{
    BfdHandle, BfdPeer, BfdSessions, BfdStatus, DropReason, SessionKey, StartError,
};
