//! Who holds which address: the allocator's only per-address state. Pure: no I/O, no clock.

use std::collections::{BTreeSet, HashMap};

use super::family::IpFamily;
use super::ranges::IntervalSet;

/// Index of a Service's record inside the allocator.
pub(crate) type Slot = u32;

/// The Services holding one address; almost always exactly one.
#[derive(Debug, Clone)]
enum Holders {
    One(Slot),
    /// Boxed so that the common single holder costs 16 bytes, not 32.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Slot>>),
}

impl Holders {
    fn as_slice(&self) -> &[Slot] {
        match self {
            Holders::One(s) => std::slice::from_ref(s),
            Holders::Many(v) => v,
        }
    }
}

/// Addresses in use, per family: who holds each, the intervals they form, and which sharing
/// key they were taken under. Memory is proportional to the addresses held.
#[derive(Debug, Clone, Default)]
pub(crate) struct AddressBook {
    used: [IntervalSet; 2],
    holders: [HashMap<u128, Holders>; 2],
    /// Sharing key → addresses whose holders carry it (all holders of an address carry the
    /// same key, or it has a single holder).
    shared: HashMap<String, [BTreeSet<u128>; 2]>,
    /// While loading a snapshot, `used` is left alone and rebuilt once at the end.
    loading: bool,
}

impl AddressBook {
    /// Every address in use, as intervals.
    pub(crate) fn used(&self, fam: IpFamily) -> &IntervalSet {
        &self.used[fam.index()]
    }

    /// The Services holding `n`.
    pub(crate) fn holders(&self, fam: IpFamily, n: u128) -> &[Slot] {
        self.holders[fam.index()]
            .get(&n)
            .map_or(&[], Holders::as_slice)
    }

    /// Records that `slot` holds `n`; `key` is its sharing key.
    pub(crate) fn claim(&mut self, fam: IpFamily, n: u128, slot: Slot, key: Option<&str>) {
        let f = fam.index();
        match self.holders[f].get_mut(&n) {
            None => {
                self.holders[f].insert(n, Holders::One(slot));
                if !self.loading {
                    self.used[f].insert(n);
                }
            }
            Some(h) => match h {
                Holders::One(s) if *s == slot => {}
                Holders::One(s) => *h = Holders::Many(Box::new(vec![*s, slot])),
                Holders::Many(v) if v.contains(&slot) => {}
                Holders::Many(v) => v.push(slot),
            },
        }
        if let Some(k) = key {
            match self.shared.get_mut(k) {
                Some(sets) => {
                    sets[f].insert(n);
                }
                None => {
                    let mut sets: [BTreeSet<u128>; 2] = Default::default();
                    sets[f].insert(n);
                    self.shared.insert(k.to_owned(), sets);
                }
            }
        }
    }

    /// Starts loading a snapshot: claims skip the interval sets until [`Self::end_loading`].
    /// Inserting addresses in Service order would split and merge intervals at random; one
    /// sorted pass at the end is linear.
    pub(crate) fn begin_loading(&mut self) {
        self.loading = true;
    }

    /// Rebuilds the interval sets from the holders.
    pub(crate) fn end_loading(&mut self) {
        self.loading = false;
        for f in 0..2 {
            let mut points: Vec<u128> = self.holders[f].keys().copied().collect();
            points.sort_unstable();
            self.used[f] = IntervalSet::from_sorted(points);
        }
    }

    /// Records that `slot` no longer holds `n`; true when nobody holds it any more.
    pub(crate) fn unclaim(
        &mut self,
        fam: IpFamily,
        n: u128,
        slot: Slot,
        key: Option<&str>,
    ) -> bool {
        let f = fam.index();
        let now_free = match self.holders[f].get_mut(&n) {
            None => return false,
            Some(Holders::One(s)) => *s == slot,
            Some(Holders::Many(v)) => {
                v.retain(|&s| s != slot);
                if v.len() == 1 {
                    let last = v[0];
                    self.holders[f].insert(n, Holders::One(last));
                }
                false
            }
        };
        if now_free {
            self.holders[f].remove(&n);
            self.used[f].remove(n);
            if let Some(k) = key
                && let Some(sets) = self.shared.get_mut(k)
            {
                sets[f].remove(&n);
                if sets.iter().all(BTreeSet::is_empty) {
                    self.shared.remove(k);
                }
            }
        }
        now_free
    }

    /// Addresses of `fam` in `[lo, hi]` taken under sharing key `key`, lowest first.
    pub(crate) fn shared_within(
        &self,
        key: &str,
        fam: IpFamily,
        lo: u128,
        hi: u128,
    ) -> impl Iterator<Item = u128> + '_ {
        self.shared
            .get(key)
            .into_iter()
            .flat_map(move |sets| sets[fam.index()].range(lo..=hi).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_free_only_when_its_last_holder_leaves() {
        let mut b = AddressBook::default();
        b.claim(IpFamily::V4, 7, 1, Some("k"));
        b.claim(IpFamily::V4, 7, 2, Some("k"));
        assert_eq!(b.holders(IpFamily::V4, 7), &[1, 2]);
        assert!(!b.unclaim(IpFamily::V4, 7, 1, Some("k")));
        assert!(b.used(IpFamily::V4).contains(7));
        assert_eq!(
            b.shared_within("k", IpFamily::V4, 0, 10)
                .collect::<Vec<_>>(),
            vec![7]
        );
        assert!(b.unclaim(IpFamily::V4, 7, 2, Some("k")));
        assert!(!b.used(IpFamily::V4).contains(7));
        assert_eq!(b.shared_within("k", IpFamily::V4, 0, 10).count(), 0);
    }

    #[test]
    fn families_are_kept_apart() {
        let mut b = AddressBook::default();
        b.claim(IpFamily::V6, 7, 1, None);
        assert!(b.holders(IpFamily::V4, 7).is_empty());
        assert!(b.used(IpFamily::V6).contains(7));
    }
}
