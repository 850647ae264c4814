//! When the sync loop runs after a watch event: at once after a quiet spell, at most once per
//! [`BURST_WINDOW`] during a burst. Pure: no I/O, time passed in.
//!
//! A change that arrives while nothing else is changing goes to the wire with no wait: the
//! first of 1,000 changes waits for nothing. Changes that arrive within [`BURST_WINDOW`] of the
//! last pass wait until the window ends and then go in one pass together, so a burst of 1,000
//! costs the pass that took its first change and one more per window it lasts, not 1,000.
//! (The loop used to wait 10 ms after every change, the first of a burst included: half of
//! its change-to-wire time.)

use std::time::{Duration, Instant};

/// The shortest time between two passes that a burst of changes can cause.
pub const BURST_WINDOW: Duration = Duration::from_millis(10);

/// The pacing state: when the last pass ran.
#[derive(Clone, Debug, Default)]
pub struct Pace {
    last_pass: Option<Instant>,
}

impl Pace {
    /// A pace with no pass run yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A pass runs at `now` (whatever woke it: a change, a timer, gossip).
    pub fn pass(&mut self, now: Instant) {
        self.last_pass = Some(now);
    }

    /// A change arrived at `now`: when its pass is to run. `None` is at once (the last pass
    /// was a window or more ago); otherwise when the window that pass opened ends.
    pub fn changed(&self, now: Instant) -> Option<Instant> {
        let due = self.last_pass? + BURST_WINDOW;
        (now < due).then_some(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_after_a_quiet_spell_runs_its_pass_at_once() {
        let t0 = Instant::now();
        let mut pace = Pace::new();
        assert_eq!(pace.changed(t0), None, "no pass yet");
        pace.pass(t0);
        let later = t0 + Duration::from_secs(5);
        assert_eq!(pace.changed(later), None);
        assert_eq!(
            pace.changed(t0 + BURST_WINDOW),
            None,
            "the window has ended"
        );
    }

    #[test]
    fn a_burst_of_a_thousand_changes_costs_one_pass_at_once_and_one_per_window_after() {
        let t0 = Instant::now();
        let mut pace = Pace::new();
        pace.pass(t0 - Duration::from_secs(30));
        // 1,000 changes arriving 10 µs apart (10 ms in all); the loop runs a pass whenever one
        // is due, as the speaker's does.
        let mut passes = Vec::new();
        let mut pending: Option<Instant> = None;
        for i in 0..1_000u32 {
            let now = t0 + Duration::from_micros(10 * u64::from(i));
            if let Some(due) = pending.filter(|d| *d <= now) {
                pace.pass(due);
                passes.push(due);
                pending = None;
            }
            if pending.is_none() {
                match pace.changed(now) {
                    None => {
                        pace.pass(now);
                        passes.push(now);
                    }
                    Some(due) => pending = Some(due),
                }
            }
        }
        passes.extend(pending);
        assert_eq!(passes[0], t0, "the first change waits for nothing");
        assert_eq!(
            passes,
            vec![t0, t0 + BURST_WINDOW],
            "the other 999 go in one more pass"
        );
    }
}
