//! When to send gratuitous ARP / unsolicited Neighbor Advertisements after taking an address.
//! Pure: no I/O, no clock (the caller passes the times).
//!
//! A node that takes an address announces it at once, so that neighbours update their caches
//! without waiting for their entries to expire, then repeats the announcement a few times because
//! a single broadcast can be lost, and a switch or host that was busy re-learning may miss the
//! first one. RFC 4861 §7.2.6 allows up to `MAX_NEIGHBOR_ADVERTISEMENT` (3) unsolicited NAs
//! spaced by `RETRANS_TIMER`; RFC 5227 §3 uses two announcements two seconds apart. We send
//! five, front-loaded so that the first repeats cover a quickly lost first frame:
//!
//! | send | offset after taking the address |
//! | ---- | ------------------------------- |
//! | 1    | 0 s                             |
//! | 2    | 0.5 s                           |
//! | 3    | 1 s                             |
//! | 4    | 2 s                             |
//! | 5    | 4 s                             |
//!
//! Each send is one gratuitous ARP request and one gratuitous ARP reply (IPv4; some hosts only
//! update their cache from one of the two forms), or one unsolicited NA with the override flag
//! (IPv6).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Offsets, from the moment ownership was taken, at which announcements are due.
pub const ANNOUNCE_OFFSETS: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// How many announcements are due by `now` for an address taken at `taken_at` (0 to 5). A
/// caller that has already sent `sent` of them sends `due(...) - sent` more (several at once
/// only if it fell behind; sending the missed ones late is harmless).
///
/// `now` before `taken_at` (a clock read out of order) counts as `taken_at`.
pub fn due(taken_at: Instant, now: Instant) -> usize {
    let elapsed = now.saturating_duration_since(taken_at);
    ANNOUNCE_OFFSETS.iter().filter(|o| **o <= elapsed).count()
}

/// How late an announcement may go out. One due longer ago than this was missed because the
/// whole speaker stood still (a frozen process, a VM paused, a stalled host): meanwhile the
/// others may have declared this node dead and moved its addresses, so announcing them late
/// would pull the neighbours back to a node that no longer owns them. Well below the time the
/// others take to declare a silent node dead (80 ms probes, 150 ms suspicion), and far above
/// what a busy machine delays a thread by.
pub const STALE_AFTER: Duration = Duration::from_millis(200);

/// What to do at `now` with the announcements of an address taken at `taken_at`, of which
/// `sent` have gone out (or been skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due.
    Wait,
    /// Send one announcement; the schedule then stands at `sent` (several due at once after a
    /// short delay: one announcement covers them).
    Send {
        /// The new count of announcements done.
        sent: usize,
    },
    /// The due announcements were missed by more than [`STALE_AFTER`]: skip them, send nothing.
    Skip {
        /// The new count of announcements done.
        sent: usize,
        /// How late the latest of them is.
        late: Duration,
    },
}

/// The [`Step`] for an address taken at `taken_at` with `sent` announcements done, at `now`.
///
/// A `taken_at` after `now` is a schedule that starts later ([`starts_at`]): nothing is due.
pub fn step(taken_at: Instant, sent: usize, now: Instant) -> Step {
    if now < taken_at {
        return Step::Wait;
    }
    let due = due(taken_at, now);
    if due <= sent {
        return Step::Wait;
    }
    let latest = taken_at + ANNOUNCE_OFFSETS[due - 1];
    let late = now.saturating_duration_since(latest);
    if late > STALE_AFTER {
        Step::Skip { sent: due, late }
    } else {
        Step::Send { sent: due }
    }
}

/// When the announcement after the first `sent` ones is due, or `None` when the schedule is done.
pub fn next_at(taken_at: Instant, sent: usize) -> Option<Instant> {
    ANNOUNCE_OFFSETS.get(sent).map(|o| taken_at + *o)
}

/// A responder thread that wakes at least every few hundred milliseconds (the readers: every
/// [`READ_TIMEOUT`](super::responder::READ_TIMEOUT)) and finds more than this since its last
/// wake stood still with the whole speaker (a frozen process, a paused VM). Five read timeouts:
/// far above what a busy machine delays a real-time thread by, and above the time the others
/// take to declare a silent node dead, so that what it still believes it owns may be theirs.
pub const STOOD_STILL: Duration = Duration::from_secs(1);

/// How long a speaker that stood still stays quiet once it wakes: it answers no request and
/// starts no announcement. Meanwhile its membership hears whether the others declared it dead
/// (within a probe period of the wake) and what changed in the cluster arrives from its watch
/// connections; the shell's rejoin settle is as long.
pub const QUIET_AFTER_STANDING_STILL: Duration = Duration::from_millis(300);

/// Until when a thread whose previous wake was at `last` and whose current one is at `now`
/// keeps quiet, or `None` when it did not stand still.
pub fn quiet_after(last: Instant, now: Instant) -> Option<Instant> {
    (now.saturating_duration_since(last) > STOOD_STILL).then_some(now + QUIET_AFTER_STANDING_STILL)
}

/// When the schedule of an address taken at `now` starts: at once, or, while the speaker keeps
/// quiet after standing still, when the quiet ends (an announcement held is sent then, not
/// skipped as late).
pub fn starts_at(now: Instant, quiet_until: Option<Instant>) -> Instant {
    quiet_until.map_or(now, |q| q.max(now))
}

/// An owned (address, interface name) pair: what is announced.
pub type Pair = (IpAddr, String);

/// Progress of the announcements of one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announcing {
    /// Which opening of the interface they go out of: a reopened interface starts the
    /// schedule again.
    pub port: u64,
    /// When the schedule started.
    pub taken_at: Instant,
    /// Announcements done (or skipped).
    pub sent: usize,
}

/// An announcement due now: the pair, the port it goes out of, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueNow {
    /// The address and interface.
    pub pair: Pair,
    /// The port of its schedule.
    pub port: u64,
    /// [`Step::Send`] or [`Step::Skip`].
    pub step: Step,
}

/// The schedules of every owned pair, with the pairs still to announce ordered by when their
/// next announcement is due: what a wake looks at is what is due, not every owned address (a
/// node answering for 10,000 addresses whose schedules ended looks at one when an eleventh is
/// taken).
#[derive(Debug, Default)]
pub struct Schedules {
    pairs: BTreeMap<Pair, Announcing>,
    /// (next due, pair) of the pairs whose schedule has not ended.
    due: BTreeSet<(Instant, Pair)>,
}

impl Schedules {
    /// Starts (or starts again) the schedule of `pair` on `port` at `at`.
    pub fn start(&mut self, pair: Pair, port: u64, at: Instant) {
        self.remove(&pair);
        let a = Announcing {
            port,
            taken_at: at,
            sent: 0,
        };
        if let Some(next) = next_at(a.taken_at, a.sent) {
            self.due.insert((next, pair.clone()));
        }
        self.pairs.insert(pair, a);
    }

    /// Forgets `pair` (no longer owned).
    pub fn remove(&mut self, pair: &Pair) {
        if let Some(a) = self.pairs.remove(pair)
            && let Some(next) = next_at(a.taken_at, a.sent)
        {
            self.due.remove(&(next, pair.clone()));
        }
    }

    /// The schedule of `pair`, if it is owned.
    pub fn get(&self, pair: &Pair) -> Option<&Announcing> {
        self.pairs.get(pair)
    }

    /// Keeps the pairs `keep` says to keep (a look at every owned pair: for a whole new view).
    pub fn retain(&mut self, mut keep: impl FnMut(&Pair, &Announcing) -> bool) {
        let due = &mut self.due;
        self.pairs.retain(|pair, a| {
            let kept = keep(pair, a);
            if !kept && let Some(next) = next_at(a.taken_at, a.sent) {
                due.remove(&(next, pair.clone()));
            }
            kept
        });
    }

    /// Starts every owned pair's schedule again at `at`.
    pub fn restart_all(&mut self, at: Instant) {
        self.due.clear();
        for (pair, a) in &mut self.pairs {
            a.taken_at = at;
            a.sent = 0;
            if let Some(next) = next_at(at, 0) {
                self.due.insert((next, pair.clone()));
            }
        }
    }

    /// When the next announcement of any pair is due; `None` when every schedule has ended.
    pub fn next_at(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Pairs owned.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether no pair is owned.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Pairs whose schedule has not ended.
    pub fn pending(&self) -> usize {
        self.due.len()
    }

    /// Takes what is due at `now` (one [`DueNow`] per pair, the schedule moved on) and looks
    /// at nothing else.
    pub fn take_due(&mut self, now: Instant) -> Vec<DueNow> {
        let mut out = Vec::new();
        // Each pair's next announcement goes back in once every due one is taken.
        let mut again = Vec::new();
        while self.due.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, pair)) = self.due.pop_first() else {
                break;
            };
            let Some(a) = self.pairs.get_mut(&pair) else {
                continue;
            };
            let step = step(a.taken_at, a.sent, now);
            if let Step::Send { sent } | Step::Skip { sent, .. } = step {
                a.sent = sent;
            }
            if let Some(next) = next_at(a.taken_at, a.sent) {
                again.push((next, pair.clone()));
            }
            if step != Step::Wait {
                out.push(DueNow {
                    pair,
                    port: a.port,
                    step,
                });
            }
        }
        self.due.extend(again);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_announcement_is_due_the_moment_ownership_is_taken() {
        let t = Instant::now();
        assert_eq!(due(t, t), 1);
        assert_eq!(next_at(t, 0), Some(t));
    }

    #[test]
    fn announcements_repeat_at_half_one_two_and_four_seconds() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        assert_eq!(due(t, ms(499)), 1);
        assert_eq!(due(t, ms(500)), 2);
        assert_eq!(due(t, ms(999)), 2);
        assert_eq!(due(t, ms(1000)), 3);
        assert_eq!(due(t, ms(1999)), 3);
        assert_eq!(due(t, ms(2000)), 4);
        assert_eq!(due(t, ms(3999)), 4);
        assert_eq!(due(t, ms(4000)), 5);
    }

    #[test]
    fn the_schedule_ends_after_five_announcements() {
        let t = Instant::now();
        assert_eq!(due(t, t + Duration::from_secs(3600)), 5);
        assert_eq!(next_at(t, 4), Some(t + Duration::from_secs(4)));
        assert_eq!(next_at(t, 5), None);
    }

    #[test]
    fn a_clock_read_before_the_take_counts_as_the_take() {
        let t = Instant::now() + Duration::from_secs(10);
        assert_eq!(due(t, t - Duration::from_secs(5)), 1);
    }

    #[test]
    fn an_announcement_a_little_late_goes_out_and_covers_the_ones_due_with_it() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        assert_eq!(step(t, 0, t), Step::Send { sent: 1 });
        assert_eq!(step(t, 1, ms(499)), Step::Wait);
        assert_eq!(step(t, 1, ms(650)), Step::Send { sent: 2 });
        assert_eq!(step(t, 1, ms(1150)), Step::Send { sent: 3 });
    }

    #[test]
    fn announcements_missed_while_the_speaker_stood_still_are_skipped_not_sent_late() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        // Frozen from 1.5 s to 6.5 s: the ones due at 2 s and 4 s are 2.5 s late at the wake.
        assert_eq!(
            step(t, 3, ms(6500)),
            Step::Skip {
                sent: 5,
                late: Duration::from_millis(2500)
            }
        );
        // Just over the limit is a stall too; the schedule is then done.
        assert!(matches!(step(t, 1, ms(701)), Step::Skip { sent: 2, .. }));
        assert_eq!(step(t, 5, ms(60_000)), Step::Wait);
    }

    #[test]
    fn a_caller_that_fell_behind_catches_up_in_one_step() {
        let t = Instant::now();
        let sent = 1;
        assert_eq!(due(t, t + Duration::from_millis(2500)) - sent, 3);
        assert_eq!(next_at(t, 4), Some(t + Duration::from_secs(4)));
    }

    #[test]
    fn a_thread_that_slept_over_a_second_between_two_wakes_keeps_quiet_for_a_while() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        assert_eq!(quiet_after(t, ms(200)), None);
        assert_eq!(quiet_after(t, ms(1000)), None);
        assert_eq!(
            quiet_after(t, ms(5000)),
            Some(ms(5000) + QUIET_AFTER_STANDING_STILL)
        );
        // A clock read out of order is no stall.
        assert_eq!(quiet_after(ms(5000), t), None);
    }

    #[test]
    fn an_address_taken_while_quiet_is_first_announced_when_the_quiet_ends_not_skipped() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        assert_eq!(starts_at(t, None), t);
        assert_eq!(starts_at(t, Some(ms(300))), ms(300));
        assert_eq!(starts_at(ms(400), Some(ms(300))), ms(400));
        let start = starts_at(t, Some(ms(300)));
        assert_eq!(step(start, 0, ms(299)), Step::Wait);
        assert_eq!(step(start, 0, ms(300)), Step::Send { sent: 1 });
    }

    fn pair(i: u32) -> Pair {
        (
            IpAddr::from(std::net::Ipv4Addr::from(0x0a80_0000 + i)),
            "eth0".into(),
        )
    }

    #[test]
    fn an_address_taken_beside_thousands_whose_schedules_ended_is_the_only_one_looked_at() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        let mut s = Schedules::default();
        for i in 0..10_000 {
            s.start(pair(i), 1, t);
        }
        assert_eq!(s.take_due(t).len(), 10_000);
        for at in [500, 1000, 2000, 4000] {
            assert_eq!(s.take_due(ms(at)).len(), 10_000, "announcement at {at} ms");
        }
        assert_eq!((s.len(), s.pending(), s.next_at()), (10_000, 0, None));
        s.start(pair(10_000), 1, ms(5000));
        assert_eq!(s.pending(), 1);
        let due = s.take_due(ms(5000));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].pair, pair(10_000));
        assert_eq!(due[0].step, Step::Send { sent: 1 });
        assert_eq!(s.next_at(), Some(ms(5500)));
    }

    #[test]
    fn a_pair_given_up_before_its_next_announcement_is_not_announced_again() {
        let t = Instant::now();
        let mut s = Schedules::default();
        s.start(pair(1), 1, t);
        s.start(pair(2), 1, t);
        assert_eq!(s.take_due(t).len(), 2);
        s.remove(&pair(1));
        let due = s.take_due(t + Duration::from_millis(500));
        assert_eq!(
            due.iter().map(|d| d.pair.clone()).collect::<Vec<_>>(),
            [pair(2)]
        );
        s.retain(|p, _| *p != pair(2));
        assert_eq!((s.len(), s.pending(), s.next_at()), (0, 0, None));
    }

    #[test]
    fn restarting_announces_every_owned_pair_again_from_the_first() {
        let t = Instant::now();
        let later = t + Duration::from_secs(10);
        let mut s = Schedules::default();
        s.start(pair(1), 1, t);
        for at in [0, 500, 1000, 2000, 4000] {
            s.take_due(t + Duration::from_millis(at));
        }
        assert_eq!(s.pending(), 0);
        s.restart_all(later);
        assert_eq!(s.next_at(), Some(later));
        assert_eq!(s.take_due(later)[0].step, Step::Send { sent: 1 });
    }

    #[test]
    fn announcements_missed_by_a_stall_go_out_once_or_are_skipped_when_stale() {
        let t = Instant::now();
        let ms = |m| t + Duration::from_millis(m);
        let mut s = Schedules::default();
        s.start(pair(1), 7, t);
        s.take_due(t);
        // Woken 1.1 s late: the 0.5 s and 1 s announcements are one send (100 ms late).
        let due = s.take_due(ms(1100));
        assert_eq!((due[0].port, due[0].step), (7, Step::Send { sent: 3 }));
        // Woken 4.5 s after the start: the 2 s one and the 4 s one, 500 ms late, are skipped.
        let due = s.take_due(ms(4500));
        assert!(matches!(due[0].step, Step::Skip { sent: 5, .. }), "{due:?}");
        assert_eq!(s.pending(), 0);
    }
}
