//! Per-member states: a small opaque value each member publishes to all others, versioned so
//! that a newer value replaces an older one everywhere. Pure: no I/O, no clock.
//!
//! A state travels two ways:
//! - as a foca custom broadcast (`StateHandler`), piggybacked on SWIM messages and spread
//!   epidemically like membership updates: how a change reaches the members already there;
//! - pushed directly to one member ([`auth::Channel::State`](super::auth::Channel)): to each
//!   member that comes up, which learns so the states published before it arrived (a custom
//!   broadcast is only retransmitted a few times after it is made); and, once per
//!   `announce_every`, to one random member, which repairs a member that missed every copy.
//!
//! Wire format of an item (all integers big-endian): node name length (1 octet, 1–253), node
//! name (UTF-8), generation (8), version (8), state length (2, at most [`MAX_STATE_LEN`]),
//! state.
//!
//! # Guarantees
//! - A record is replaced only by one of the same node with a larger (generation, version):
//!   a restarted member (larger generation) replaces its former self whatever the versions, and
//!   a delayed or replayed item never undoes a newer one.
//! - A state is shown only while its (node, generation) is a live member: a dead member's
//!   state disappears with it, and a restarted member shows nothing until its new self has
//!   published.
//!
//! # Caveats
//! - Like SWIM updates, a broadcast is retransmitted a bounded number of times (8); a member
//!   that misses every copy keeps the previous value until the owner's periodic push picks it
//!   (one random member per `announce_every`: in a cluster of N, after N / 2 periods on
//!   average) or the owner publishes again.
//! - A member that comes up while the push to it is lost learns that state the same way.

use foca::{BroadcastHandler, Invalidates};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Largest state a member may publish, in bytes. It rides in SWIM datagrams of at most 1,400
/// bytes alongside membership updates.
pub const MAX_STATE_LEN: usize = 512;

/// Longest node name (a Kubernetes object name).
pub(crate) const MAX_NODE_LEN: usize = 253;

/// One member's state as it travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateItem {
    pub node: String,
    pub generation: u64,
    pub version: u64,
    pub state: Vec<u8>,
}

/// Why bytes are not a state item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateDecodeError {
    /// Fewer bytes than the lengths announce.
    #[error("state item truncated")]
    Truncated,
    /// A node name that is empty, too long or not UTF-8.
    #[error("state item with an invalid node name")]
    BadNode,
    /// A state longer than [`MAX_STATE_LEN`].
    #[error("state item longer than {MAX_STATE_LEN} bytes")]
    TooLong,
    /// Bytes after the state.
    #[error("state item followed by trailing bytes")]
    Trailing,
}

impl StateItem {
    /// Encodes the item. The caller guarantees the node name and state lengths.
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!((1..=MAX_NODE_LEN).contains(&self.node.len()));
        debug_assert!(self.state.len() <= MAX_STATE_LEN);
        let mut out = Vec::with_capacity(1 + self.node.len() + 18 + self.state.len());
        out.push(self.node.len() as u8);
        out.extend_from_slice(self.node.as_bytes());
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&(self.state.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.state);
        out
    }

    /// Decodes exactly one item.
    pub fn decode(bytes: &[u8]) -> Result<StateItem, StateDecodeError> {
        let (&node_len, rest) = bytes.split_first().ok_or(StateDecodeError::Truncated)?;
        let node_len = usize::from(node_len);
        if node_len == 0 || node_len > MAX_NODE_LEN {
            return Err(StateDecodeError::BadNode);
        }
        let (node, rest) = rest
            .split_at_checked(node_len)
            .ok_or(StateDecodeError::Truncated)?;
        let node = std::str::from_utf8(node).map_err(|_| StateDecodeError::BadNode)?;
        let (generation, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(StateDecodeError::Truncated)?;
        let (version, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(StateDecodeError::Truncated)?;
        let (len, rest) = rest
            .split_first_chunk::<2>()
            .ok_or(StateDecodeError::Truncated)?;
        let len = usize::from(u16::from_be_bytes(*len));
        if len > MAX_STATE_LEN {
            return Err(StateDecodeError::TooLong);
        }
        let (state, rest) = rest
            .split_at_checked(len)
            .ok_or(StateDecodeError::Truncated)?;
        if !rest.is_empty() {
            return Err(StateDecodeError::Trailing);
        }
        Ok(StateItem {
            node: node.to_owned(),
            generation: u64::from_be_bytes(*generation),
            version: u64::from_be_bytes(*version),
            state: state.to_vec(),
        })
    }
}

/// What foca keeps to tell a newer broadcast from an older one of the same node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateKey {
    node: String,
    generation: u64,
    version: u64,
}

impl Invalidates for StateKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.node == other.node
            && (self.generation, self.version) >= (other.generation, other.version)
    }
}

/// The newest state known of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub generation: u64,
    pub version: u64,
    pub state: Vec<u8>,
}

/// The newest state known of every node, and whether it changed since last asked.
#[derive(Debug, Default)]
pub(crate) struct StateTable {
    records: BTreeMap<String, Record>,
    changed: bool,
}

impl StateTable {
    /// Keeps `item` when it is newer than what is known of its node; says whether it was.
    pub fn offer(&mut self, item: StateItem) -> bool {
        if let Some(r) = self.records.get(&item.node)
            && (r.generation, r.version) >= (item.generation, item.version)
        {
            return false;
        }
        self.records.insert(
            item.node,
            Record {
                generation: item.generation,
                version: item.version,
                state: item.state,
            },
        );
        self.changed = true;
        true
    }

    pub fn get(&self, node: &str) -> Option<&Record> {
        self.records.get(node)
    }

    /// Whether a record was replaced since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }
}

/// The table, shared between the membership core and the handler foca owns.
///
/// Foca takes its [`BroadcastHandler`] by value and offers no way back to it, so the core reads
/// the records through this handle. Both ends belong to one [`Membership`](super::Membership)
/// and are only used from the thread that drives it: the mutex is never contended; it is there
/// because the core must be `Send` to live in a task.
#[derive(Clone, Debug, Default)]
pub(crate) struct SharedTable(Arc<Mutex<StateTable>>);

impl SharedTable {
    pub fn with<R>(&self, f: impl FnOnce(&mut StateTable) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Foca's view of the table: an item is disseminated further only when it is news.
pub(crate) struct StateHandler(pub SharedTable);

impl<T> BroadcastHandler<T> for StateHandler {
    type Key = StateKey;
    type Error = StateDecodeError;

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&T>,
    ) -> Result<Option<StateKey>, StateDecodeError> {
        let item = StateItem::decode(data)?;
        let key = StateKey {
            node: item.node.clone(),
            generation: item.generation,
            version: item.version,
        };
        Ok(self.0.with(|t| t.offer(item)).then_some(key))
    }
}
