//! Plain counters of the responder shell, read by metrics and tests.

use super::frame::DropReason;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, shared by the responder's threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub frames: AtomicU64,
    pub own_frames: AtomicU64,
    pub arp_requests: AtomicU64,
    pub ns_requests: AtomicU64,
    pub not_owned: AtomicU64,
    pub arp_replies: AtomicU64,
    pub na_replies: AtomicU64,
    pub gratuitous_arp: AtomicU64,
    pub unsolicited_na: AtomicU64,
    pub send_errors: AtomicU64,
    pub read_errors: AtomicU64,
    pub multicast_errors: AtomicU64,
    pub reopened: AtomicU64,
    pub stale_announcements_skipped: AtomicU64,
    pub stale_requests: AtomicU64,
    pub stood_still: AtomicU64,
    pub drops: [AtomicU64; DropReason::ALL.len()],
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn drop(&self, reason: DropReason) {
        let i = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        Self::bump(&self.drops[i]);
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            frames: get(&self.frames),
            own_frames: get(&self.own_frames),
            arp_requests: get(&self.arp_requests),
            ns_requests: get(&self.ns_requests),
            not_owned: get(&self.not_owned),
            arp_replies: get(&self.arp_replies),
            na_replies: get(&self.na_replies),
            gratuitous_arp: get(&self.gratuitous_arp),
            unsolicited_na: get(&self.unsolicited_na),
            send_errors: get(&self.send_errors),
            read_errors: get(&self.read_errors),
            multicast_errors: get(&self.multicast_errors),
            reopened: get(&self.reopened),
            stale_announcements_skipped: get(&self.stale_announcements_skipped),
            stale_requests: get(&self.stale_requests),
            stood_still: get(&self.stood_still),
            drops: DropReason::ALL
                .iter()
                .zip(&self.drops)
                .map(|(r, c)| (*r, get(c)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }
}

/// A copy of the responder's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Frames read from the interfaces, other than our own.
    pub frames: u64,
    /// Frames we sent that the packet socket also delivered back to us (ignored).
    pub own_frames: u64,
    /// Well-formed ARP requests received.
    pub arp_requests: u64,
    /// Well-formed Neighbor Solicitations received.
    pub ns_requests: u64,
    /// Requests for addresses this node does not own on that interface (not answered).
    pub not_owned: u64,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// Solicited Neighbor Advertisements sent.
    pub na_replies: u64,
    /// Gratuitous ARP frames sent (request and reply forms each count).
    pub gratuitous_arp: u64,
    /// Unsolicited Neighbor Advertisements sent.
    pub unsolicited_na: u64,
    /// Frames the packet socket refused to send.
    pub send_errors: u64,
    /// Read errors other than the periodic timeout.
    pub read_errors: u64,
    /// Failed solicited-node multicast joins or leaves.
    pub multicast_errors: u64,
    /// Ports opened again on an interface that had one (re-created, MAC changed, back up,
    /// or its socket failed).
    pub reopened: u64,
    /// Announcements skipped because they were missed by more than
    /// [`super::schedule::STALE_AFTER`] (the speaker stood still).
    pub stale_announcements_skipped: u64,
    /// Requests not answered because they were older than
    /// [`super::responder::STALE_REQUEST`] when read, or came while the responder kept quiet
    /// after the speaker stood still.
    pub stale_requests: u64,
    /// Times the responder found the speaker had stood still for over
    /// [`super::schedule::STOOD_STILL`] and kept quiet for
    /// [`super::schedule::QUIET_AFTER_STANDING_STILL`].
    pub stood_still: u64,
    /// Frames dropped by the parser, per reason (reasons with a zero count are left out).
    pub drops: BTreeMap<DropReason, u64>,
}

impl CounterSnapshot {
    /// Requests received (ARP and NDP).
    pub fn requests(&self) -> u64 {
        self.arp_requests + self.ns_requests
    }

    /// Answers sent (ARP replies and solicited advertisements).
    pub fn responses(&self) -> u64 {
        self.arp_replies + self.na_replies
    }

    /// Frames dropped as malformed (see [`DropReason::is_malformed`]).
    pub fn malformed(&self) -> u64 {
        self.drops
            .iter()
            .filter(|(r, _)| r.is_malformed())
            .map(|(_, n)| n)
            .sum()
    }
}
