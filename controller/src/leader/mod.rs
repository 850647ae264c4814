//! Leader election over a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! [`Elector`] is the pure core: given what was read from the Lease and the current time, it
//! decides what to write and whether this replica may act as the leader. [`lease`] is the thin
//! shell that reads and writes the Lease, always guarded by `resourceVersion`, so of two
//! candidates racing for an expired Lease exactly one write succeeds (the other gets 409).
//!
//! # Guarantees
//! - A leader that cannot renew within `renew_deadline` stops leading before `lease_duration` has
//!   passed since its last successful renewal; another candidate only takes the Lease after it has
//!   seen the same record unchanged for `lease_duration` by its own clock. With
//!   `renew_deadline < lease_duration` there is no moment at which two replicas both lead.
//!
//! # Assumptions
//! - Clocks run at the same rate on every replica (not that they agree): expiry is measured from
//!   when a candidate *observed* a record, as client-go does, never from the `renewTime` written
//!   by another machine.

pub mod lease;

use std::time::{Duration, Instant};

/// Timing of the election (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What the Lease said when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `spec.holderIdentity` (empty when released).
    pub holder: String,
    /// `spec.renewTime` as written, compared only for equality (to notice a change).
    pub renew_time: Option<String>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
}

/// What the shell must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the Lease with this replica as holder (it does not exist yet).
    Create,
    /// Take the Lease over (expired or released): write this replica as holder, bump transitions.
    Acquire {
        /// The new `leaseTransitions`.
        transitions: i32,
    },
    /// Renew: write a fresh `renewTime`, keep the holder.
    Renew,
    /// Someone else holds a valid Lease; read again after the retry period.
    Wait,
}

/// Whether this replica may act as the leader now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Act: this replica holds a Lease it renewed within the renew deadline.
    Leader,
    /// Do not act.
    Follower,
}

/// The pure election state of one replica.
#[derive(Debug, Clone)]
pub struct Elector {
    identity: String,
    timing: Timing,
    /// The last record seen and when (by our clock) it was first seen.
    observed: Option<(Observed, Instant)>,
    /// When we last wrote the Lease successfully as its holder.
    last_renewed: Option<Instant>,
}

impl Elector {
    /// A candidate named `identity` (the Pod name, unique per replica).
    pub fn new(identity: impl Into<String>, timing: Timing) -> Self {
        Self {
            identity: identity.into(),
            timing,
            observed: None,
            last_renewed: None,
        }
    }

    /// This replica's identity, as written in `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The election timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Decides what to write after reading the Lease (`None`: it does not exist).
    pub fn decide(&mut self, now: Instant, read: Option<Observed>) -> Action {
        let Some(record) = read else {
            return Action::Create;
        };
        let first_seen = match &self.observed {
            Some((prev, at)) if *prev == record => *at,
            _ => now,
        };
        self.observed = Some((record.clone(), first_seen));
        if record.holder == self.identity {
            return Action::Renew;
        }
        let expired = now.duration_since(first_seen) >= self.timing.lease_duration;
        if record.holder.is_empty() || expired {
            Action::Acquire {
                transitions: record.transitions + 1,
            }
        } else {
            Action::Wait
        }
    }

    /// Records that our write (create, acquire or renew) succeeded. `sent` is when the request
    /// was *sent*, so that a slow answer never extends leadership.
    pub fn written(&mut self, sent: Instant) {
        self.last_renewed = Some(sent);
    }

    /// Until when this replica may act, if it leads at all.
    pub fn leading_until(&self) -> Option<Instant> {
        self.last_renewed.map(|at| at + self.timing.renew_deadline)
    }

    /// Whether this replica may act at `now`.
    pub fn role(&self, now: Instant) -> Role {
        match self.leading_until() {
            Some(until) if now < until => Role::Leader,
            _ => Role::Follower,
        }
    }

    /// Forgets leadership at once (on shutdown, before releasing the Lease).
    pub fn step_down(&mut self) {
        self.last_renewed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: &str, renew: &str) -> Option<Observed> {
        Some(Observed {
            holder: holder.into(),
            renew_time: Some(renew.into()),
            transitions: 3,
        })
    }

    #[test]
    fn a_missing_lease_is_created() {
        let mut e = Elector::new("a", Timing::default());
        assert_eq!(e.decide(Instant::now(), None), Action::Create);
    }

    #[test]
    fn the_holder_renews_its_own_lease() {
        let mut e = Elector::new("a", Timing::default());
        assert_eq!(e.decide(Instant::now(), rec("a", "t1")), Action::Renew);
    }

    #[test]
    fn a_lease_held_by_another_replica_is_left_alone_while_it_changes() {
        let mut e = Elector::new("b", Timing::default());
        let t0 = Instant::now();
        assert_eq!(e.decide(t0, rec("a", "t1")), Action::Wait);
        // Renewed in time: the clock restarts from when we saw the new record.
        assert_eq!(
            e.decide(t0 + Duration::from_secs(14), rec("a", "t2")),
            Action::Wait
        );
        assert_eq!(
            e.decide(t0 + Duration::from_secs(28), rec("a", "t2")),
            Action::Wait
        );
    }

    #[test]
    fn a_lease_unchanged_for_the_lease_duration_is_taken_over() {
        let mut e = Elector::new("b", Timing::default());
        let t0 = Instant::now();
        assert_eq!(e.decide(t0, rec("a", "t1")), Action::Wait);
        assert_eq!(
            e.decide(t0 + Duration::from_secs(15), rec("a", "t1")),
            Action::Acquire { transitions: 4 }
        );
    }

    #[test]
    fn expiry_is_measured_from_our_observation_not_from_the_written_renew_time() {
        // A record we see for the first time is fresh, however old its renewTime looks.
        let mut e = Elector::new("b", Timing::default());
        assert_eq!(
            e.decide(Instant::now(), rec("a", "1970-01-01T00:00:00.000000Z")),
            Action::Wait
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let mut e = Elector::new("b", Timing::default());
        assert_eq!(
            e.decide(Instant::now(), rec("", "t1")),
            Action::Acquire { transitions: 4 }
        );
    }

    #[test]
    fn leadership_lapses_at_the_renew_deadline_before_the_lease_expires() {
        let timing = Timing::default();
        let mut e = Elector::new("a", timing);
        let t0 = Instant::now();
        e.written(t0);
        assert_eq!(e.role(t0 + Duration::from_secs(9)), Role::Leader);
        assert_eq!(e.role(t0 + timing.renew_deadline), Role::Follower);
        assert!(timing.renew_deadline < timing.lease_duration);
    }

    #[test]
    fn a_candidate_that_never_wrote_is_a_follower() {
        let e = Elector::new("a", Timing::default());
        assert_eq!(e.role(Instant::now()), Role::Follower);
    }

    #[test]
    fn stepping_down_ends_leadership_immediately() {
        let mut e = Elector::new("a", Timing::default());
        let t0 = Instant::now();
        e.written(t0);
        e.step_down();
        assert_eq!(e.role(t0), Role::Follower);
    }
}
