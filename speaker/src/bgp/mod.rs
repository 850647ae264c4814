//! BGP mode of the speaker: announce-only sessions that interoperate with BIRD, FRR and GoBGP.
//!
//! # Layout
//!
//! - [`wire`]: framing; [`message`] decodes what peers send (untrusted), the bodies with
//!   [`open`] and [`update_check`].
//! - [`update`]: encoding of our UPDATEs; [`rib`]: desired paths vs Adj-RIB-Out, and the
//!   path identifiers of ADD-PATH send (RFC 7911).
//! - [`fsm`]: the RFC 4271 session state machine, pure.
//! - [`error`]: every session error, each one the NOTIFICATION it sends.
//! - [`config`]: plain data for peers and advertisements; [`role`]: the BGP Role (RFC 9234).
//! - [`unnumbered`]: finding the router of an unnumbered peer by its router advertisements.
//! - [`speaker`] ([`BgpSpeaker`]), `peer` (one task per session), [`socket`]: the tokio shell.
pub mod config;
pub mod error;
pub mod fsm;
pub mod message;
pub mod open;
mod peer;
pub mod rib;
pub mod role;
pub mod socket;
pub mod speaker;
pub mod unnumbered;
pub mod update;
pub mod update_check;
pub mod wire;

pub use config::{
    Advertisement, AnyCommunity, Community, LargeCommunity, PeerConfig, PeerId, RouteAttrs,
};
pub use error::{CeaseReason, Notification, SessionError};
pub use fsm::{Event, Input, Output, Session, State, Timer};
pub use peer::{NotificationRecord, PeerStatus};
pub use speaker::BgpSpeaker;
