//! Object storage: one global revision counter (like etcd's), one table per stored resource, each with
//! a bounded event history (the watch cache) and a broadcast channel for live watches. No I/O.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use super::resources::StorageKey;

/// Where an object lives in its table: namespace (empty for cluster-scoped) then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjKey {
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjKey {
    /// Key of `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// Watch event types as they appear on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct StoredEvent {
    /// Revision of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// Key of the object.
    pub key: ObjKey,
    /// The object after the change (for deletes: the last state, stamped with the delete's revision).
    pub object: Value,
    /// The object before the change (None for creates).
    pub prev: Option<Value>,
}

/// One resource's objects and recent history.
#[derive(Debug)]
pub struct Table {
    objects: BTreeMap<ObjKey, Value>,
    history: VecDeque<Arc<StoredEvent>>,
    /// Every event with a revision above this one is in `history`.
    window_start: u64,
    tx: broadcast::Sender<Arc<StoredEvent>>,
}

impl Table {
    fn new(window_start: u64) -> Self {
        let (tx, _) = broadcast::channel(4096);
        Self {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            window_start,
            tx,
        }
    }
}

/// Why history could not be served.
#[derive(Debug, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest revision still answerable.
    pub oldest: u64,
}

/// All stored objects.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    tables: BTreeMap<StorageKey, Table>,
    history_capacity: usize,
    /// Cluster IPs and node ports the stored Services hold, kept with every write, so a
    /// Service write checks what is taken without reading every Service.
    service_index: super::services::ServiceIndex,
}

fn is_services(table: &StorageKey) -> bool {
    table.group.is_empty() && table.plural == "services"
}

/// The serialisable part of a [`Store`], for `--state` files and restarts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    /// Current revision.
    pub rv: u64,
    /// Objects per table: `(group, plural, objects)`.
    pub tables: Vec<(String, String, Vec<Value>)>,
}

impl Store {
    /// An empty store whose tables keep `history_capacity` events each.
    pub fn new(history_capacity: usize) -> Self {
        Self {
            rv: 1,
            tables: BTreeMap::new(),
            history_capacity: history_capacity.max(1),
            service_index: Default::default(),
        }
    }

    /// What the stored Services hold (cluster IPs, node ports).
    pub fn service_index(&self) -> &super::services::ServiceIndex {
        &self.service_index
    }

    /// The current global revision.
    pub fn revision(&self) -> u64 {
        self.rv
    }

    fn table(&mut self, key: &StorageKey) -> &mut Table {
        // A table created now has lost no events: its history starts at revision 0.
        self.tables
            .entry(key.clone())
            .or_insert_with(|| Table::new(0))
    }

    /// One object.
    pub fn get(&self, table: &StorageKey, key: &ObjKey) -> Option<&Value> {
        self.tables.get(table).and_then(|t| t.objects.get(key))
    }

    /// All objects of a table in key order.
    pub fn objects(&self, table: &StorageKey) -> impl Iterator<Item = (&ObjKey, &Value)> {
        self.tables
            .get(table)
            .into_iter()
            .flat_map(|t| t.objects.iter())
    }

    /// Writes `object` under `key` with a new revision and returns the stored object.
    pub fn put(&mut self, table: &StorageKey, key: ObjKey, mut object: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        object["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let cap = self.history_capacity;
        let t = self.table(table);
        let prev = t.objects.insert(key.clone(), object.clone());
        if is_services(table) {
            if let Some(p) = &prev {
                self.service_index.remove(p);
            }
            self.service_index.add(&object);
        }
        let t = self.table(table);
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        push_event(
            t,
            cap,
            StoredEvent {
                rv,
                kind,
                key,
                object: object.clone(),
                prev,
            },
        );
        object
    }

    /// Removes the object under `key`; returns its last state stamped with the delete's revision.
    pub fn remove(&mut self, table: &StorageKey, key: &ObjKey) -> Option<Value> {
        let t = self.tables.get_mut(table)?;
        let prev = t.objects.remove(key)?;
        if is_services(table) {
            self.service_index.remove(&prev);
        }
        self.rv += 1;
        let rv = self.rv;
        let mut object = prev.clone();
        object["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let cap = self.history_capacity;
        let t = self.table(table);
        push_event(
            t,
            cap,
            StoredEvent {
                rv,
                kind: EventType::Deleted,
                key: key.clone(),
                object: object.clone(),
                prev: Some(prev),
            },
        );
        Some(object)
    }

    /// Events with a revision above `since`, or [`TooOld`] when some have left the history.
    pub fn events_since(
        &mut self,
        table: &StorageKey,
        since: u64,
    ) -> Result<Vec<Arc<StoredEvent>>, TooOld> {
        let t = self.table(table);
        if since < t.window_start {
            return Err(TooOld {
                oldest: t.window_start,
            });
        }
        Ok(t.history.iter().filter(|e| e.rv > since).cloned().collect())
    }

    /// The table's objects as they were at revision `at`, rebuilt by undoing later history.
    pub fn snapshot_at(
        &mut self,
        table: &StorageKey,
        at: u64,
    ) -> Result<BTreeMap<ObjKey, Value>, TooOld> {
        let later = self.events_since(table, at)?;
        let mut objects = self
            .tables
            .get(table)
            .map(|t| t.objects.clone())
            .unwrap_or_default();
        for e in later.iter().rev() {
            match &e.prev {
                Some(p) => objects.insert(e.key.clone(), p.clone()),
                None => objects.remove(&e.key),
            };
        }
        Ok(objects)
    }

    /// A receiver of every future event of the table.
    pub fn subscribe(&mut self, table: &StorageKey) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.table(table).tx.subscribe()
    }

    /// Forgets all history, so a watch from any earlier revision gets 410 Expired.
    pub fn expire_history(&mut self) {
        let rv = self.rv;
        for t in self.tables.values_mut() {
            t.history.clear();
            t.window_start = rv;
        }
    }

    /// The objects, for saving.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            rv: self.rv,
            tables: self
                .tables
                .iter()
                .map(|(k, t)| {
                    (
                        k.group.clone(),
                        k.plural.clone(),
                        t.objects.values().cloned().collect(),
                    )
                })
                .collect(),
        }
    }

    /// A store holding a saved snapshot (with no history: older watches get 410).
    pub fn restore(snapshot: Snapshot, history_capacity: usize) -> Self {
        let mut store = Store::new(history_capacity);
        store.rv = snapshot.rv;
        let mut store_index = super::services::ServiceIndex::default();
        for (group, plural, objects) in snapshot.tables {
            let (t_group, t_plural) = (group.clone(), plural.clone());
            let rv = store.rv;
            let t = store.table(&StorageKey { group, plural });
            t.window_start = rv;
            for o in objects {
                let ns = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let name = o
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if is_services(&StorageKey {
                    group: t_group.clone(),
                    plural: t_plural.clone(),
                }) {
                    store_index.add(&o);
                }
                t.objects.insert(ObjKey::new(ns, name), o);
            }
        }
        store.service_index = store_index;
        store
    }
}

fn push_event(t: &mut Table, cap: usize, e: StoredEvent) {
    let e = Arc::new(e);
    t.history.push_back(e.clone());
    while t.history.len() > cap {
        if let Some(old) = t.history.pop_front() {
            t.window_start = old.rv;
        }
    }
    // No receiver is not an error: nobody watches yet.
    let _ = t.tx.send(e);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> StorageKey {
        StorageKey {
            group: String::new(),
            plural: "services".into(),
        }
    }

    #[test]
    fn snapshot_at_an_old_revision_undoes_later_changes() {
        let mut s = Store::new(100);
        s.put(
            &key(),
            ObjKey::new("a", "x"),
            json!({"metadata": {"name": "x"}, "v": 1}),
        );
        let at = s.revision();
        s.put(
            &key(),
            ObjKey::new("a", "x"),
            json!({"metadata": {"name": "x"}, "v": 2}),
        );
        s.put(
            &key(),
            ObjKey::new("a", "y"),
            json!({"metadata": {"name": "y"}}),
        );
        s.remove(&key(), &ObjKey::new("a", "x"));
        let snap = s.snapshot_at(&key(), at).unwrap();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[&ObjKey::new("a", "x")]["v"], 1);
    }

    #[test]
    fn history_beyond_capacity_is_too_old() {
        let mut s = Store::new(2);
        let start = s.revision();
        for i in 0..5 {
            s.put(
                &key(),
                ObjKey::new("a", &format!("o{i}")),
                json!({"metadata": {}}),
            );
        }
        assert!(s.events_since(&key(), start).is_err());
        assert_eq!(s.events_since(&key(), s.revision() - 2).unwrap().len(), 2);
    }
}
