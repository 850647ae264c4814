//! The IP allocator. Pure: no I/O, no clock, no Kubernetes client, no logging, no metrics.
//!
//! # Layout
//!
//! - [`pool`]: pools as plain data ([`Pool`], [`AddressRange`] and its parser), admission rules,
//!   the free-space search.
//! - [`family`]: [`IpFamily`], the one type every other module shares.
//! - [`request`]: Services as plain data ([`ServiceRequest`]); [`annotations`]: the annotation
//!   reader [`requested_from_annotations`]; [`names`]: the annotation names.
//! - [`sharing`]: when two Services may hold one address.
//! - [`outcome`]: decisions ([`Outcome`], [`ChangeReason`]) and refusals ([`AllocationError`]).
//! - [`ranges`] and `book`: the addresses in use, as interval sets with their holders.
//! - `assign`: the decision for one Service.
//!
//! # Guarantees
//!
//! - Stability: [`Allocator::from_snapshot`] keeps every still-valid address of every Service
//!   before anything new is given, and [`Allocator::assign`] never moves a valid address. An
//!   address is valid for a Service while a pool contains it and admits the Service, it matches
//!   what the Service asks for (pool, addresses, families), and every other holder may share
//!   it. Neither the order of calls nor the deletion of other Services changes a valid address.
//! - Determinism: new addresses are the lowest free ones, pools are tried by priority then
//!   name, and a snapshot is read in [`ServiceKey`] order; the same inputs give the same
//!   assignment.
//! - Scale: free space is found by walking the intervals of addresses in use, never the pool,
//!   so memory and time follow the number of addresses held, not the size of the pools.
//!
//! # Assumptions
//!
//! The caller hands in every pool at once ([`Allocator::set_pools`]) and decides readiness
//! (an overlapping pool is passed with `ready: false`). Each Service's request is complete: the
//! shell has already read its annotations with [`requested_from_annotations`].

pub mod annotations;
mod assign;
mod book;
pub mod family;
pub mod names;
pub mod outcome;
pub mod pool;
pub mod ranges;
pub mod request;
pub mod sharing;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

pub use annotations::{Requested, requested_from_annotations};
pub use family::IpFamily;
pub use outcome::{
    AllocationError, Assignment, ChangeReason, FamilyStats, Outcome, PoolStats, PoolsChanged,
};
pub use pool::{AddressRange, AddressRangeError, IpMode, Pool};
pub use request::{FamilyPolicy, Protocol, ServiceKey, ServiceRequest, TrafficPolicy};

use book::{AddressBook, Slot};
use family::numbered;
use pool::PoolEntry;

/// What the allocator remembers of one Service.
#[derive(Debug, Clone)]
struct Record {
    /// The request it was last decided on (`current_ips` emptied).
    req: ServiceRequest,
    /// The addresses it holds, in the order of its families.
    ips: Vec<IpAddr>,
    /// The pool they belong to (index into `Allocator::pools`); meaningless when `ips` is empty.
    pool: usize,
    /// Addresses taken away by a pool change, and why, until the next [`Allocator::assign`]
    /// reports it.
    pending: Option<Box<(Vec<IpAddr>, ChangeReason)>>,
}

/// Assigns LoadBalancer addresses from pools; see the [module documentation](self).
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Pools sorted by name.
    pools: Vec<PoolEntry>,
    by_name: HashMap<String, usize>,
    /// Ready auto-assign pools, in the order they are tried.
    auto_order: Vec<usize>,
    /// All pools in the order they own a contested address: ready first, then oldest, then name.
    owner_order: Vec<usize>,
    book: AddressBook,
    records: Vec<Option<Box<Record>>>,
    slots: HashMap<ServiceKey, Slot>,
    free_slots: Vec<Slot>,
    waiting: BTreeSet<ServiceKey>,
}

impl Allocator {
    /// An allocator with these pools and no Service.
    pub fn new(pools: Vec<Pool>) -> Self {
        let mut a = Self::default();
        a.install_pools(pools);
        a
    }

    /// An allocator that holds every Service's still-valid current addresses
    /// (`ServiceRequest::current_ips`) and has assigned nothing new.
    ///
    /// Services are read in key order, so when two hold an address they may not share (a
    /// state only corruption produces) the lower key keeps it. A Service whose addresses were
    /// not all kept gets [`Outcome::Changed`] or [`Outcome::Revoked`] at its next
    /// [`Allocator::assign`].
    pub fn from_snapshot(pools: Vec<Pool>, services: Vec<ServiceRequest>) -> Self {
        let mut a = Self::new(pools);
        let mut services = services;
        services.sort_by(|x, y| x.key.cmp(&y.key));
        services.dedup_by(|x, y| x.key == y.key);
        a.book.begin_loading();
        for mut req in services {
            let current = dedup(&std::mem::take(&mut req.current_ips));
            if current.is_empty() {
                continue;
            }
            let check = a.check_current(&req, None, &current);
            let pending = check.reason.map(|r| Box::new((current, r)));
            let slot = a.new_slot(req, check.pool.unwrap_or(0), pending);
            a.take(slot, &check.kept);
        }
        a.book.end_loading();
        a
    }

    /// Replaces every pool. Addresses no longer valid for their Service are released at once;
    /// those Services are listed in `invalidated` and their next [`Allocator::assign`] says what
    /// happened. Services waiting for an address are listed in `retry`.
    pub fn set_pools(&mut self, pools: Vec<Pool>) -> PoolsChanged {
        self.install_pools(pools);
        let mut invalidated = Vec::new();
        for slot in 0..self.records.len() as Slot {
            let Some(rec) = &self.records[slot as usize] else {
                continue;
            };
            if rec.ips.is_empty() {
                continue;
            }
            let check = self.check_current(&rec.req, Some(slot), &rec.ips);
            let key = rec.req.key.clone();
            let rec = self.records[slot as usize].as_mut().expect("checked above");
            rec.pool = check.pool.unwrap_or(0);
            let Some(reason) = check.reason else {
                continue;
            };
            let old = std::mem::replace(&mut rec.ips, check.kept.clone());
            let dropped: Vec<IpAddr> = old
                .iter()
                .copied()
                .filter(|ip| !check.kept.contains(ip))
                .collect();
            if rec.pending.is_none() {
                rec.pending = Some(Box::new((old, reason)));
            }
            self.give_back(slot, &dropped);
            invalidated.push(key);
        }
        invalidated.sort();
        PoolsChanged {
            invalidated,
            retry: self.waiting(),
        }
    }

    /// Forgets a deleted Service and frees its addresses. Returns the Services waiting for an
    /// address that may now get one (empty when nothing was freed).
    pub fn release(&mut self, key: &ServiceKey) -> Vec<ServiceKey> {
        self.waiting.remove(key);
        let Some(slot) = self.slots.remove(key) else {
            return Vec::new();
        };
        let rec = self.records[slot as usize].take().expect("slot in use");
        self.free_slots.push(slot);
        self.give_back_as(slot, rec.req.sharing_key.as_deref(), &rec.ips);
        if rec.ips.is_empty() {
            Vec::new()
        } else {
            self.waiting()
        }
    }

    /// The addresses `key` holds now.
    pub fn assignment(&self, key: &ServiceKey) -> Option<Assignment> {
        let rec = self.records[*self.slots.get(key)? as usize].as_ref()?;
        self.assignment_of(rec)
    }

    /// Every Service holding addresses, in key order.
    pub fn assignments(&self) -> Vec<(ServiceKey, Assignment)> {
        let mut all: Vec<_> = self
            .records
            .iter()
            .flatten()
            .filter_map(|r| Some((r.req.key.clone(), self.assignment_of(r)?)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// How many Services hold addresses (cheaper than `assignments().len()`).
    pub fn assigned_services(&self) -> usize {
        (self.records.iter().flatten())
            .filter(|r| !r.ips.is_empty())
            .count()
    }

    /// Whether the allocator holds a record of `key` (assigned or refused).
    pub fn has_record(&self, key: &ServiceKey) -> bool {
        self.slots.contains_key(key)
    }

    /// Every Service the allocator holds a record of (assigned or refused), in no order.
    pub fn services(&self) -> impl Iterator<Item = &ServiceKey> {
        self.records.iter().flatten().map(|r| &r.req.key)
    }

    /// Services whose last assignment failed for a reason that freed addresses may cure
    /// ([`AllocationError::may_succeed_later`]), in key order.
    pub fn waiting(&self) -> Vec<ServiceKey> {
        self.waiting.iter().cloned().collect()
    }

    /// Use of pool `name` per family, or `None` if there is no such pool.
    pub fn pool_stats(&self, name: &str) -> Option<PoolStats> {
        let entry = &self.pools[*self.by_name.get(name)?];
        let stats = |fam: IpFamily| {
            let (size, assigned) = entry.counts(fam, self.book.used(fam));
            FamilyStats {
                assigned,
                available: size.saturating_sub(assigned),
            }
        };
        Some(PoolStats {
            v4: stats(IpFamily::V4),
            v6: stats(IpFamily::V6),
        })
    }

    fn assignment_of(&self, rec: &Record) -> Option<Assignment> {
        if rec.ips.is_empty() {
            return None;
        }
        let pool = &self.pools[rec.pool].spec;
        Some(Assignment {
            ips: rec.ips.clone(),
            pool: pool.name.clone(),
            ip_mode: pool.ip_mode,
        })
    }

    fn install_pools(&mut self, pools: Vec<Pool>) {
        let mut pools = pools;
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        pools.dedup_by(|a, b| a.name == b.name);
        self.pools = pools.into_iter().map(PoolEntry::new).collect();
        self.by_name = (self.pools.iter().enumerate())
            .map(|(i, p)| (p.name().to_owned(), i))
            .collect();
        let mut auto: Vec<usize> = (0..self.pools.len())
            .filter(|&i| self.pools[i].spec.ready && self.pools[i].spec.auto_assign)
            .collect();
        auto.sort_by(|&a, &b| Pool::priority_order(&self.pools[a].spec, &self.pools[b].spec));
        self.auto_order = auto;
        let mut owners: Vec<usize> = (0..self.pools.len()).collect();
        owners.sort_by_key(|&i| {
            let p = &self.pools[i].spec;
            (!p.ready, p.created, p.name.clone())
        });
        self.owner_order = owners;
    }

    /// A record for a Service the allocator did not know (`req.current_ips` is dropped).
    fn new_slot(
        &mut self,
        mut req: ServiceRequest,
        pool: usize,
        pending: Option<Box<(Vec<IpAddr>, ChangeReason)>>,
    ) -> Slot {
        req.current_ips = Vec::new();
        let key = req.key.clone();
        let rec = Record {
            req,
            ips: Vec::new(),
            pool,
            pending,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.records[s as usize] = Some(Box::new(rec));
                s
            }
            None => {
                self.records.push(Some(Box::new(rec)));
                (self.records.len() - 1) as Slot
            }
        };
        self.slots.insert(key, slot);
        slot
    }

    fn record(&self, slot: Slot) -> &Record {
        self.records[slot as usize].as_ref().expect("slot in use")
    }

    /// Makes `slot` hold `ips` as well as what it holds.
    fn take(&mut self, slot: Slot, ips: &[IpAddr]) {
        let rec = self.records[slot as usize].as_mut().expect("slot in use");
        for &ip in ips {
            if !rec.ips.contains(&ip) {
                rec.ips.push(ip);
            }
            let (fam, n) = numbered(ip);
            self.book
                .claim(fam, n, slot, rec.req.sharing_key.as_deref());
        }
    }

    /// Frees `ips` held by `slot` (already removed from its record).
    fn give_back(&mut self, slot: Slot, ips: &[IpAddr]) {
        let key = self.record(slot).req.sharing_key.clone();
        self.give_back_as(slot, key.as_deref(), ips);
    }

    /// Frees `ips` held by `slot` under sharing key `key`.
    fn give_back_as(&mut self, slot: Slot, key: Option<&str>, ips: &[IpAddr]) {
        for &ip in ips {
            let (fam, n) = numbered(ip);
            if self.book.unclaim(fam, n, slot, key) {
                for p in &mut self.pools {
                    p.released(fam, n);
                }
            }
        }
    }
}

/// The addresses in `ips`, first occurrence of each kept.
fn dedup(ips: &[IpAddr]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::with_capacity(ips.len());
    for &ip in ips {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}
