//! Events on their own task, for the controller and the speaker: a bounded queue that coalesces
//! by (object, reason) and is drained at low concurrency, so publishing an Event never delays an
//! address, and a burst of changes to one Service leaves one Event per reason (the latest note),
//! not a backlog.
//!
//! Each Event is created as a new `events.k8s.io/v1` object. kube's `Recorder` is not used: it
//! keeps every Event of the last minutes in a cache that it scans on every publish (measured: 8 %
//! of the controller's CPU in a 1,000-Service burst, growing with the burst), to patch repeats
//! into a series; our Events are transitions, already coalesced here.
//!
//! ```text
//!  reconcile / sync ── push ──► EventQueue { order, pending by (object, reason) }
//!                               bounded: the oldest is dropped (and counted) when full
//!                                   │ run: 2 at a time
//!                                   ▼
//!                               POST events.k8s.io/v1 Event
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use tokio::sync::Notify;

/// Events waiting to be published at most (older ones are dropped beyond this).
pub const CAPACITY: usize = 4096;
/// Events published at once: few, so status writes keep most of the API server's capacity.
pub const CONCURRENCY: usize = 2;
/// Room kept by an empty queue; a larger one is given back.
const SHRINK_ABOVE: usize = 64;

type Key = (Option<String>, Option<String>, String);

/// A waiting Event, boxed: the map's table then holds a key and a pointer per slot, not the
/// 400-odd bytes of an `ObjectReference` and an `Event`, and a table grown for a burst (the
/// speaker's first pass queues one `nodeAssigned` per Service, up to [`CAPACITY`]) costs about
/// a sixth as much in its empty slots (80 bytes a slot against 488).
type Waiting = Box<(ObjectReference, Event)>;

#[derive(Default)]
struct Inner {
    order: VecDeque<Key>,
    pending: HashMap<Key, Waiting>,
}

/// The queue between the reconcile loop and the publishing task.
#[derive(Default)]
pub struct EventQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    capacity: usize,
    /// Holds in force ([`EventQueue::hold`]): while any is, nothing new is published.
    holds: AtomicUsize,
}

/// While alive, [`EventQueue::run`] publishes nothing new (Events still queue, and coalesce);
/// dropped, publishing resumes. A burst of status writes takes one, so its Events do not take
/// the API server's time from the writes: the addresses first, their Events right after.
#[must_use = "the hold ends when it is dropped"]
pub struct Hold(Arc<EventQueue>);

impl Drop for Hold {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.notify.notify_one();
        }
    }
}

/// What [`EventQueue::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// An Event for the same object and reason was waiting: its note was replaced.
    Coalesced,
    /// Queued, and the oldest waiting Event was dropped to make room.
    DroppedOldest,
}

impl EventQueue {
    /// A queue holding at most `capacity` Events.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ..Self::default()
        }
    }

    /// Queues `event` about `target`.
    pub fn push(&self, target: ObjectReference, event: Event) -> Pushed {
        let key = (
            target.namespace.clone(),
            target.name.clone(),
            event.reason.clone(),
        );
        let mut inner = self.inner.lock().expect("event queue lock");
        if let Some(slot) = inner.pending.get_mut(&key) {
            **slot = (target, event);
            return Pushed::Coalesced;
        }
        let mut pushed = Pushed::Queued;
        if inner.order.len() >= self.capacity
            && let Some(oldest) = inner.order.pop_front()
        {
            inner.pending.remove(&oldest);
            pushed = Pushed::DroppedOldest;
        }
        inner.order.push_back(key.clone());
        inner.pending.insert(key, Box::new((target, event)));
        drop(inner);
        self.notify.notify_one();
        pushed
    }

    /// Takes the oldest waiting Event.
    pub fn pop(&self) -> Option<(ObjectReference, Event)> {
        let mut inner = self.inner.lock().expect("event queue lock");
        let key = inner.order.pop_front()?;
        let item = inner.pending.remove(&key).map(|b| *b);
        if inner.order.is_empty() && inner.pending.capacity() > SHRINK_ABOVE {
            // A burst (thousands of Services assigned at start) grew the queue to its
            // capacity; an idle queue keeps none of that.
            inner.pending = HashMap::new();
            inner.order = VecDeque::new();
        }
        item
    }

    /// Holds publishing until the returned [`Hold`] is dropped.
    pub fn hold(self: &Arc<Self>) -> Hold {
        self.holds.fetch_add(1, Ordering::AcqRel);
        Hold(self.clone())
    }

    /// Whether a [`Hold`] is in force.
    pub fn held(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0
    }

    /// How many Events wait.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("event queue lock").order.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Publishes queued Events forever, [`CONCURRENCY`] at a time, none while held; a failure is handed to
    /// `failed` (to count and log it), never retried (an Event is informational, and the next
    /// transition brings a new one).
    pub async fn run(
        self: Arc<Self>,
        client: kube::Client,
        reporter: Reporter,
        failed: impl Fn(&Event, kube::Error) + Clone,
    ) {
        let next = futures::stream::unfold(self, |q| async move {
            loop {
                if !q.held()
                    && let Some(item) = q.pop()
                {
                    return Some((item, q));
                }
                // A push or the end of the last hold wakes it (a permit is kept when neither
                // finds it waiting yet).
                q.notify.notified().await;
            }
        });
        next.for_each_concurrent(CONCURRENCY, |(target, event)| {
            let client = client.clone();
            let failed = failed.clone();
            let object = to_object(&event, &target, &reporter, jiff_now());
            async move {
                let ns = target.namespace.as_deref().unwrap_or("default");
                let api: Api<K8sEvent> = Api::namespaced(client, ns);
                if let Err(e) = api.create(&PostParams::default(), &object).await {
                    failed(&event, e);
                }
            }
        })
        .await;
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The `events.k8s.io/v1` object for `event` about `target`, as kube's `Recorder` would write
/// it (name `<object>.<nanoseconds in hex>`, `eventTime`, reporting controller and instance).
pub fn to_object(
    event: &Event,
    target: &ObjectReference,
    reporter: &Reporter,
    now: k8s_openapi::jiff::Timestamp,
) -> K8sEvent {
    K8sEvent {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(target.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        metadata: ObjectMeta {
            namespace: target.namespace.clone(),
            name: Some(format!(
                "{}.{:x}",
                target.name.as_deref().unwrap_or(&reporter.controller),
                now.as_nanosecond()
            )),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    fn target(name: &str) -> ObjectReference {
        ObjectReference {
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Allocate".into(),
            secondary: None,
        }
    }

    #[test]
    fn events_for_one_object_and_reason_coalesce_into_the_latest_note() {
        let q = EventQueue::new(10);
        assert_eq!(q.push(target("a"), event("IPChanged", "1")), Pushed::Queued);
        assert_eq!(q.push(target("b"), event("IPChanged", "x")), Pushed::Queued);
        assert_eq!(
            q.push(target("a"), event("IPChanged", "2")),
            Pushed::Coalesced
        );
        assert_eq!(
            q.push(target("a"), event("IPAllocated", "3")),
            Pushed::Queued
        );
        let order: Vec<(String, String)> = std::iter::from_fn(|| q.pop())
            .map(|(t, e)| (t.name.unwrap(), e.note.unwrap()))
            .collect();
        assert_eq!(
            order,
            [("a", "2"), ("b", "x"), ("a", "3")].map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    #[test]
    fn an_event_object_names_its_object_reporter_and_type() {
        let reporter = Reporter {
            controller: "ferrolb-controller".into(),
            instance: Some("replica-a".into()),
        };
        let now = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let mut e = event("IPAllocated", "Assigned 10.0.0.1");
        e.type_ = EventType::Warning;
        let o = to_object(&e, &target("web"), &reporter, now);
        assert_eq!(o.metadata.namespace.as_deref(), Some("default"));
        assert!(o.metadata.name.unwrap().starts_with("web."));
        assert_eq!(o.type_.as_deref(), Some("Warning"));
        assert_eq!(o.reporting_instance.as_deref(), Some("replica-a"));
        assert_eq!(o.regarding.unwrap().name.as_deref(), Some("web"));
        assert_eq!(o.note.as_deref(), Some("Assigned 10.0.0.1"));
    }

    #[test]
    fn a_full_queue_drops_its_oldest_event() {
        let q = EventQueue::new(2);
        q.push(target("a"), event("R", "a"));
        q.push(target("b"), event("R", "b"));
        assert_eq!(q.push(target("c"), event("R", "c")), Pushed::DroppedOldest);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop().unwrap().0.name.as_deref(), Some("b"));
    }

    #[test]
    fn a_drained_queue_gives_back_the_room_a_burst_took() {
        let q = EventQueue::new(CAPACITY);
        for i in 0..2000 {
            q.push(target(&format!("svc-{i}")), event("R", "n"));
        }
        assert!(q.inner.lock().unwrap().pending.capacity() >= 2000);
        while q.pop().is_some() {}
        let inner = q.inner.lock().unwrap();
        assert!(inner.pending.capacity() <= SHRINK_ABOVE);
        assert!(inner.order.capacity() <= SHRINK_ABOVE);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_published_while_held_and_everything_waiting_is_once_the_hold_ends() {
        // A client whose server counts the Events posted to it (answered 201 with an empty
        // object; whether that parses as an Event does not matter here).
        let posted = Arc::new(AtomicUsize::new(0));
        let counted = posted.clone();
        let server = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                (http::StatusCode::CREATED, "{}")
            }
        });
        let client = kube::Client::new(server, "default");
        let q = Arc::new(EventQueue::new(16));
        let hold = q.hold();
        for name in ["a", "b", "c"] {
            q.push(target(name), event("IPAllocated", name));
        }
        let failed = |_: &Event, _| {};
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        tokio::spawn(q.clone().run(client, reporter, failed));
        // Time is paused: this returns once every task waits, so the publisher has had every
        // chance to post.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        assert!(q.held());
        assert_eq!(posted.load(Ordering::SeqCst), 0);
        assert_eq!(q.len(), 3);
        drop(hold);
        // Paused time: a minute of it passes in no time at all if nothing is posted.
        for _ in 0..6000 {
            if posted.load(Ordering::SeqCst) == 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(posted.load(Ordering::SeqCst), 3);
        assert!(q.is_empty());
    }
}
