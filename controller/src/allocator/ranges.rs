//! Ordered sets of `u128` points kept as disjoint intervals. Pure: no I/O, no clock.
//!
//! Addresses of one family are numbers (`u32` widened for IPv4, `u128` for IPv6); the allocator
//! keeps the addresses in use as an [`IntervalSet`], so finding the lowest free address after a
//! point is one ordered lookup, whatever the size of the pool around it.

use std::collections::BTreeMap;
use std::ops::Bound;

/// A set of `u128` points stored as maximal intervals: no two stored intervals overlap or touch.
///
/// Memory is proportional to the number of intervals, never to the number of points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntervalSet {
    /// First point of each interval → its last point (inclusive).
    spans: BTreeMap<u128, u128>,
}

impl IntervalSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set of `points`, given in increasing order (duplicates allowed); linear time.
    pub fn from_sorted(points: impl IntoIterator<Item = u128>) -> Self {
        let mut spans: Vec<(u128, u128)> = Vec::new();
        for p in points {
            match spans.last_mut() {
                Some((_, e)) if p <= *e => {}
                Some((_, e)) if e.checked_add(1) == Some(p) => *e = p,
                _ => spans.push((p, p)),
            }
        }
        Self {
            spans: spans.into_iter().collect(),
        }
    }

    /// Whether the set holds no point.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// How many maximal intervals the set is made of.
    pub fn span_count(&self) -> usize {
        self.spans.len()
    }

    /// The maximal intervals, lowest first, as inclusive `(first, last)` pairs.
    pub fn spans(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.spans.iter().map(|(&s, &e)| (s, e))
    }

    /// The interval that holds `x`, if any.
    pub fn span_containing(&self, x: u128) -> Option<(u128, u128)> {
        self.spans
            .range(..=x)
            .next_back()
            .filter(|&(_, &end)| end >= x)
            .map(|(&s, &e)| (s, e))
    }

    /// Whether `x` is in the set.
    pub fn contains(&self, x: u128) -> bool {
        self.span_containing(x).is_some()
    }

    /// Adds `x`; returns false when it was already there.
    pub fn insert(&mut self, x: u128) -> bool {
        let before = self.spans.range(..=x).next_back().map(|(&s, &e)| (s, e));
        if let Some((_, e)) = before
            && e >= x
        {
            return false;
        }
        let mut first = x;
        let mut last = x;
        if let Some((s, e)) = before
            && e.checked_add(1) == Some(x)
        {
            first = s;
        }
        if let Some(next) = x.checked_add(1)
            && let Some(e) = self.spans.remove(&next)
        {
            last = e;
        }
        self.spans.insert(first, last);
        true
    }

    /// Removes `x`; returns false when it was not there.
    pub fn remove(&mut self, x: u128) -> bool {
        let Some((s, e)) = self.span_containing(x) else {
            return false;
        };
        self.spans.remove(&s);
        if s < x {
            self.spans.insert(s, x - 1);
        }
        if x < e {
            self.spans.insert(x + 1, e);
        }
        true
    }

    /// The lowest point in `[from, to]` that is not in the set.
    ///
    /// One lookup: intervals are maximal, so the point after an interval is never in the set.
    pub fn first_gap(&self, from: u128, to: u128) -> Option<u128> {
        if from > to {
            return None;
        }
        match self.span_containing(from) {
            None => Some(from),
            Some((_, e)) => e.checked_add(1).filter(|&g| g <= to),
        }
    }

    /// The parts of the set that fall inside `[lo, hi]`, lowest first, clipped to that range.
    pub fn spans_within(&self, lo: u128, hi: u128) -> impl Iterator<Item = (u128, u128)> + '_ {
        let head = self
            .span_containing(lo)
            .filter(|&(s, _)| s < lo && lo <= hi);
        let tail = self
            .spans
            .range((Bound::Included(lo), Bound::Included(hi.max(lo))))
            .map(|(&s, &e)| (s, e))
            .filter(move |_| lo <= hi);
        head.into_iter()
            .chain(tail)
            .map(move |(s, e)| (s.max(lo), e.min(hi)))
    }

    /// How many points of the set fall inside `[lo, hi]`, saturating at `u128::MAX`.
    pub fn count_within(&self, lo: u128, hi: u128) -> u128 {
        self.spans_within(lo, hi)
            .fold(0u128, |n, (s, e)| n.saturating_add(span_len(s, e)))
    }
}

/// Number of points in `[first, last]`, saturating (the whole IPv6 space has 2^128 points).
pub fn span_len(first: u128, last: u128) -> u128 {
    (last - first).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(points: &[u128]) -> IntervalSet {
        let mut s = IntervalSet::new();
        for &p in points {
            s.insert(p);
        }
        s
    }

    #[test]
    fn neighbouring_points_merge_into_one_interval() {
        let s = set(&[5, 7, 6, 1]);
        assert_eq!(s.spans().collect::<Vec<_>>(), vec![(1, 1), (5, 7)]);
    }

    #[test]
    fn building_from_sorted_points_equals_inserting_them() {
        let points = [1, 2, 2, 3, 7, 9, 10, u128::MAX - 1, u128::MAX];
        assert_eq!(IntervalSet::from_sorted(points), set(&points));
    }

    #[test]
    fn inserting_a_present_point_reports_it() {
        let mut s = set(&[3, 4]);
        assert!(!s.insert(4));
        assert!(s.insert(2));
        assert_eq!(s.spans().collect::<Vec<_>>(), vec![(2, 4)]);
    }

    #[test]
    fn removing_from_the_middle_splits_an_interval() {
        let mut s = set(&[1, 2, 3, 4, 5]);
        assert!(s.remove(3));
        assert!(!s.remove(3));
        assert_eq!(s.spans().collect::<Vec<_>>(), vec![(1, 2), (4, 5)]);
        assert!(s.remove(1));
        assert!(s.remove(5));
        assert_eq!(s.spans().collect::<Vec<_>>(), vec![(2, 2), (4, 4)]);
    }

    #[test]
    fn the_first_gap_is_after_the_interval_holding_the_start() {
        let s = set(&[10, 11, 12, 20]);
        assert_eq!(s.first_gap(10, 100), Some(13));
        assert_eq!(s.first_gap(9, 100), Some(9));
        assert_eq!(s.first_gap(10, 12), None);
        assert_eq!(s.first_gap(20, 20), None);
    }

    #[test]
    fn the_ends_of_the_number_space_do_not_overflow() {
        let mut s = set(&[u128::MAX, u128::MAX - 1, 0]);
        assert_eq!(s.first_gap(u128::MAX - 1, u128::MAX), None);
        assert_eq!(s.first_gap(0, 5), Some(1));
        assert!(s.remove(u128::MAX));
        assert_eq!(s.first_gap(u128::MAX - 1, u128::MAX), Some(u128::MAX));
        assert_eq!(span_len(0, u128::MAX), u128::MAX);
    }

    #[test]
    fn counting_clips_intervals_to_the_range() {
        let s = set(&[1, 2, 3, 4, 8, 9, 15]);
        assert_eq!(s.count_within(3, 8), 3);
        assert_eq!(s.count_within(0, 100), 7);
        assert_eq!(s.count_within(5, 7), 0);
        assert_eq!(s.count_within(9, 3), 0);
    }
}
