//! One kind's rows, keyed by `namespace/name` (or a digest of it), with the watch protocol's
//! re-list handled: rows not seen again between a restart and `Synced` are removed. Pure.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// What a watch stream says about one kind (kube's `watcher::Event`, objects already converted).
#[derive(Clone, Debug, PartialEq)]
pub enum Update<T> {
    /// A (re-)list begins: every row must be seen again before [`Update::Synced`].
    Restart,
    /// An object was added or changed (during a re-list or after it).
    Apply(T),
    /// An object was deleted.
    Delete(T),
    /// The (re-)list is complete.
    Synced,
}

/// Rows of one kind.
#[derive(Debug)]
pub struct Table<R, K = String> {
    rows: HashMap<K, R>,
    relist: Option<HashSet<K>>,
    synced: bool,
}

impl<R, K> Default for Table<R, K> {
    fn default() -> Self {
        Self {
            rows: HashMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<R: PartialEq, K: Hash + Eq + Clone> Table<R, K> {
    /// Starts a re-list. An empty table (the first list) has no row that could be gone, so
    /// it tracks nothing: the first list of 50,000 EndpointSlices does not build a set of their
    /// keys only to drop it at [`Update::Synced`].
    pub fn restart(&mut self) {
        self.relist = (!self.rows.is_empty()).then(HashSet::new);
    }

    /// Marks `key` as seen in the current re-list (a row the converter dropped, such as a
    /// Service FerroLB does not handle, must still not be taken for deleted later).
    pub fn seen<Q>(&mut self, key: &Q)
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        if let Some(seen) = &mut self.relist {
            seen.insert(key.to_owned());
        }
    }

    /// Sets `key` to `row`; returns the previous row when it differed (`Some(None)` for new).
    pub fn upsert(&mut self, key: K, row: R) -> Option<Option<R>> {
        self.seen(&key);
        match self.rows.get_mut(&key) {
            Some(old) if *old == row => None,
            Some(old) => Some(Some(std::mem::replace(old, row))),
            None => {
                self.rows.insert(key, row);
                Some(None)
            }
        }
    }

    /// Removes `key`; returns the row it held.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<R>
    where
        Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
        K: std::borrow::Borrow<Q>,
    {
        self.seen(key);
        self.rows.remove(key)
    }

    /// Ends a re-list: removes and returns the rows not seen since [`Table::restart`].
    pub fn synced(&mut self) -> Vec<(K, R)> {
        self.synced = true;
        let Some(seen) = self.relist.take() else {
            return Vec::new();
        };
        let gone: Vec<K> = self
            .rows
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|k| self.rows.remove(&k).map(|r| (k, r)))
            .collect()
    }
}

impl<R, K: Hash + Eq> Table<R, K> {
    /// Whether a first list has completed.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The row of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&R>
    where
        Q: Hash + Eq + ?Sized,
        K: std::borrow::Borrow<Q>,
    {
        self.rows.get(key)
    }

    /// Every row, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &R> {
        self.rows.values()
    }

    /// Every (key, row), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &R)> {
        self.rows.iter()
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// The key of an object: `namespace/name`, or `name` for cluster-scoped objects.
pub fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_removes_exactly_the_rows_not_seen_again() {
        let mut t: Table<i32> = Table::default();
        t.upsert("a".into(), 1);
        t.upsert("b".into(), 2);
        t.upsert("c".into(), 3);
        t.restart();
        t.upsert("a".into(), 1);
        t.seen("b");
        let gone = t.synced();
        assert_eq!(gone, vec![("c".to_string(), 3)]);
        assert_eq!(t.len(), 2);
        assert!(t.is_synced());
    }

    #[test]
    fn a_first_list_keeps_every_row_it_delivers_without_tracking_them() {
        let mut t: Table<i32> = Table::default();
        t.restart();
        assert!(t.relist.is_none(), "nothing to be gone from an empty table");
        t.upsert("a".into(), 1);
        t.seen("b");
        assert_eq!(t.synced(), vec![]);
        assert_eq!(t.len(), 1);
        assert!(t.is_synced());
        t.restart();
        assert!(t.relist.is_some());
        assert_eq!(t.synced(), vec![("a".to_string(), 1)]);
    }

    #[test]
    fn an_unchanged_row_is_not_reported_as_changed() {
        let mut t: Table<i32> = Table::default();
        assert_eq!(t.upsert("a".into(), 1), Some(None));
        assert_eq!(t.upsert("a".into(), 1), None);
        assert_eq!(t.upsert("a".into(), 2), Some(Some(1)));
    }
}
