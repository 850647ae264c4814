//! The records the cluster model keeps: a Service and an EndpointSlice, each stripped to what
//! the planners read, and the digest that names slices and their Services (Nodes are kept as
//! the planners' own [`super::input::NodeInfo`]). Pure: plain data.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::ops::Deref;

use super::input::{EndpointInfo, ServiceKey, ServiceLabels};

/// A Service as kept: what the planners read, no endpoints (those are in the slices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRec {
    /// Its key.
    pub key: ServiceKey,
    /// `status.loadBalancer.ingress[].ip`, sorted, without duplicates; never empty.
    pub ingress: Few<IpAddr>,
    /// `externalTrafficPolicy: Local`.
    pub local_traffic_policy: bool,
    /// `metadata.uid`, for Events about it.
    pub uid: Option<String>,
    /// `metadata.labels`, compact, for `serviceSelectors`.
    pub labels: ServiceLabels,
}

/// An EndpointSlice of a Service FerroLB handles, as kept: a digest and its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceRec {
    /// [`digest`] of the Service it belongs to (`kubernetes.io/service-name`, its namespace).
    pub service: Digest,
    /// Its endpoints.
    pub endpoints: Box<[EndpointInfo]>,
}

/// A 128-bit digest of a `namespace/name`: two independent 64-bit SipHashes. Identities of
/// slices and their Services are kept as digests instead of strings; two names sharing one is
/// as likely as a random 128-bit collision.
///
/// Two `u64` halves rather than a `u128`: a `u128` is aligned to 16 bytes, which pads every
/// table row that holds one (a row of `unclaimed_by_service`, a digest and a count, took 32
/// bytes instead of 24; there is one per Service with slices in the cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u64; 2]);

/// The [`Digest`] of `namespace/name`.
pub fn digest(namespace: &str, name: &str) -> Digest {
    let half = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        (salt, namespace, name).hash(&mut h);
        h.finish()
    };
    Digest([half(1), half(2)])
}

/// A list that is one item long almost always (a Service's addresses, the Services at an
/// address, a Service's slices), kept without an allocation of its own for that one item.
///
/// Why: the model holds three such lists per Service; as `Vec`s they were 30,000 small
/// allocations at 10,000 Services, made during the first lists among the watch's decoded
/// objects and left scattered between the holes those objects left. Reads go through the
/// slice ([`Deref`]); changes are rare and rebuild the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Few<T> {
    /// Exactly one item.
    One(T),
    /// Any other number of items (none, or two and more).
    More(Box<[T]>),
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few::More(Box::default())
    }
}

impl<T> Deref for Few<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Few::One(item) => std::slice::from_ref(item),
            Few::More(items) => items,
        }
    }
}

impl<'a, T> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> From<Vec<T>> for Few<T> {
    fn from(mut items: Vec<T>) -> Self {
        match items.pop() {
            Some(item) if items.is_empty() => Few::One(item),
            Some(item) => {
                items.push(item);
                Few::More(items.into_boxed_slice())
            }
            None => Few::default(),
        }
    }
}

impl<T> From<Few<T>> for Vec<T> {
    fn from(few: Few<T>) -> Self {
        match few {
            Few::One(item) => vec![item],
            Few::More(items) => items.into_vec(),
        }
    }
}

impl<T> Few<T> {
    /// Changes the list through a `Vec` (rare: a second item, or one going).
    pub fn edit(&mut self, change: impl FnOnce(&mut Vec<T>)) {
        let mut items = Vec::from(std::mem::take(self));
        change(&mut items);
        *self = items.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_holds_one_item_inline_and_any_other_number_in_a_slice() {
        let mut few = Few::from(vec![1]);
        assert_eq!(few, Few::One(1));
        few.edit(|v| v.push(2));
        assert_eq!(&*few, &[1, 2]);
        assert!(matches!(few, Few::More(_)));
        few.edit(|v| v.retain(|i| *i != 1));
        assert_eq!(few, Few::One(2));
        few.edit(Vec::clear);
        assert!(few.is_empty());
        assert_eq!(few, Few::default());
        assert_eq!((&Few::from(vec![3, 4])).into_iter().sum::<i32>(), 7);
    }
}
