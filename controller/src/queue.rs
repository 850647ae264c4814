//! The controller's work queue: the Services that changed since the last pass, deduplicated by
//! key (a burst of events for one Service costs one visit) and bounded by the number of
//! Services. A replica that does not lead records nothing: it starts every term with a pass
//! over every Service anyway, so a standby's memory stays flat however busy the cluster is.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::allocator::ServiceKey;

/// What changed since the last [`WorkQueue::take`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Services whose object changed.
    pub services: BTreeSet<ServiceKey>,
    /// Something every Service depends on changed (a namespace's labels).
    pub everything: bool,
    /// A configuration object changed (a pool, an advertisement, a peer, a community): its own
    /// status writes included, so whether Services must be looked at again is decided later.
    pub config: bool,
}

#[derive(Debug, Default)]
struct Inner {
    batch: Batch,
    accepting: bool,
}

/// A deduplicating queue shared by the watchers (producers) and the reconcile loop (consumer).
#[derive(Debug, Default)]
pub struct WorkQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    /// Every [`WorkQueue::add`] ever made, recorded or not.
    added: AtomicU64,
}

impl WorkQueue {
    /// An empty queue that records nothing until [`WorkQueue::set_accepting`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key` changed (once, however often it is called before the next take).
    /// Every call is counted ([`WorkQueue::changes`]), whether it is recorded or not.
    pub fn add(&self, key: ServiceKey) {
        self.added.fetch_add(1, Ordering::SeqCst);
        let mut inner = self.inner.lock().expect("queue lock");
        if inner.accepting && inner.batch.services.insert(key) {
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// How many times [`WorkQueue::add`] was called, ever: the safety net's sign that a
    /// Service's cached object changed, counted before any deduplication, leadership or
    /// batching could lose the change.
    pub fn changes(&self) -> u64 {
        self.added.load(Ordering::SeqCst)
    }

    /// Records that every Service must be looked at.
    pub fn add_everything(&self) {
        let mut inner = self.inner.lock().expect("queue lock");
        if inner.accepting && !inner.batch.everything {
            inner.batch.everything = true;
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Records that a configuration object changed.
    pub fn add_config(&self) {
        let mut inner = self.inner.lock().expect("queue lock");
        if inner.accepting && !inner.batch.config {
            inner.batch.config = true;
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Starts (on becoming leader) or stops (on losing it) recording; stopping forgets what
    /// was recorded.
    pub fn set_accepting(&self, accepting: bool) {
        let mut inner = self.inner.lock().expect("queue lock");
        inner.accepting = accepting;
        if !accepting {
            inner.batch = Batch::default();
        }
    }

    /// Takes what was recorded.
    pub fn take(&self) -> Batch {
        std::mem::take(&mut self.inner.lock().expect("queue lock").batch)
    }

    /// How many Services are recorded.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("queue lock").batch.services.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        let inner = self.inner.lock().expect("queue lock");
        inner.batch.services.is_empty() && !inner.batch.everything && !inner.batch.config
    }

    /// Resolves once something was recorded since the last time it resolved (at once when
    /// something was recorded meanwhile).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> ServiceKey {
        ServiceKey {
            namespace: "default".into(),
            name: n.into(),
        }
    }

    #[test]
    fn a_standby_records_nothing_however_many_services_change() {
        let q = WorkQueue::new();
        for i in 0..10_000 {
            q.add(key(&format!("s{i}")));
        }
        q.add_everything();
        assert!(q.is_empty());
    }

    #[test]
    fn repeated_changes_to_one_service_are_one_entry() {
        let q = WorkQueue::new();
        q.set_accepting(true);
        for _ in 0..100 {
            q.add(key("a"));
        }
        q.add(key("b"));
        assert_eq!(q.len(), 2);
        let batch = q.take();
        assert_eq!(batch.services.len(), 2);
        assert!(!batch.everything);
        assert!(q.is_empty());
    }

    #[test]
    fn losing_leadership_forgets_what_was_recorded() {
        let q = WorkQueue::new();
        q.set_accepting(true);
        q.add(key("a"));
        q.add_everything();
        q.set_accepting(false);
        assert_eq!(q.take(), Batch::default());
    }

    #[test]
    fn every_change_is_counted_even_by_a_standby_and_after_deduplication() {
        let q = WorkQueue::new();
        q.add(key("a"));
        q.set_accepting(true);
        q.add(key("a"));
        q.add(key("a"));
        assert_eq!(q.changes(), 3);
        assert_eq!(q.take().services.len(), 1);
    }

    #[tokio::test]
    async fn a_change_recorded_before_waiting_wakes_the_consumer_at_once() {
        let q = WorkQueue::new();
        q.set_accepting(true);
        q.add(key("a"));
        tokio::time::timeout(std::time::Duration::from_secs(1), q.changed())
            .await
            .expect("woken");
    }
}
