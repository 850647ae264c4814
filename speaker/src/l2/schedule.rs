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
}
