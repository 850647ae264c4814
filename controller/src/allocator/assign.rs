//! The decision for one Service: keep what is valid, complete it, or find new addresses. Pure: no I/O, no clock.
//!
//! Order of preference, for a Service with addresses `current`:
//! 1. keep `current` when every address is valid and they satisfy the request;
//! 2. requested addresses: exactly those, or a refusal that names the obstacle;
//! 3. complete the valid part of `current` from its own pool (dual stack);
//! 4. fresh addresses: pools by priority then name; per pool and family, an address already
//!    held under the Service's sharing key when sharing is allowed, else the lowest free one.

use std::net::IpAddr;

use super::book::Slot;
use super::family::{IpFamily, numbered};
use super::outcome::{AllocationError, Assignment, ChangeReason, Outcome};
use super::request::{FamilyPolicy, ServiceRequest};
use super::sharing::may_share;
use super::{Allocator, dedup};

/// Which of a Service's current addresses it may keep.
pub(super) struct CurrentCheck {
    /// The valid addresses, in the Service's family order.
    pub(super) kept: Vec<IpAddr>,
    /// Their pool.
    pub(super) pool: Option<usize>,
    /// Why the first invalid address is invalid.
    pub(super) reason: Option<ChangeReason>,
}

struct Decision {
    ips: Vec<IpAddr>,
    pool: usize,
    reason: Option<ChangeReason>,
}

struct Refusal {
    error: AllocationError,
    reason: Option<ChangeReason>,
}

impl Allocator {
    /// Decides the addresses of one Service and records the decision.
    ///
    /// The Service's current addresses are the ones the allocator recorded for it, or, for a
    /// Service it has not seen, `req.current_ips`. When the outcome carries no assignment the
    /// Service holds nothing afterwards; when the refusal may be cured by freed addresses it is
    /// listed by [`Allocator::waiting`].
    pub fn assign(&mut self, req: &ServiceRequest) -> Outcome {
        let me = self.slots.get(&req.key).copied();
        let (current, pending) = match me {
            Some(s) => {
                let rec = self.record(s);
                (rec.ips.clone(), rec.pending.clone())
            }
            None => (dedup(&req.current_ips), None),
        };
        let decided = self.decide(req, me, &current);
        let (old, pending_reason) = match pending {
            Some(p) => (p.0, Some(p.1)),
            None => (current, None),
        };
        match decided {
            Ok(d) => {
                let slot = self.commit(req, me, &d.ips, d.pool);
                self.waiting.remove(&req.key);
                let new = self
                    .assignment_of(self.record(slot))
                    .expect("a decision holds addresses");
                let reason = pending_reason.or(d.reason);
                if old.is_empty() {
                    Outcome::Assigned(new)
                } else if reason.is_none() && same_set(&old, &new.ips) {
                    Outcome::Unchanged(new)
                } else {
                    let reason = reason.unwrap_or_else(|| added_or_changed(&old, &new));
                    Outcome::Changed { old, new, reason }
                }
            }
            Err(refusal) => {
                if let Some(slot) = me {
                    self.forget(slot);
                }
                if refusal.error.may_succeed_later() {
                    self.waiting.insert(req.key.clone());
                } else {
                    self.waiting.remove(&req.key);
                }
                if old.is_empty() {
                    Outcome::Failed(refusal.error)
                } else {
                    let reason = (pending_reason.or(refusal.reason))
                        .unwrap_or(ChangeReason::RequestChanged { ip: old[0] });
                    Outcome::Revoked {
                        old,
                        reason,
                        error: refusal.error,
                    }
                }
            }
        }
    }

    fn decide(
        &mut self,
        req: &ServiceRequest,
        me: Option<Slot>,
        current: &[IpAddr],
    ) -> Result<Decision, Box<Refusal>> {
        let check = self.check_current(req, me, current);
        let reason = check.reason.clone();
        let fail = |error| {
            Box::new(Refusal {
                error,
                reason: reason.clone(),
            })
        };
        validate_request(req).map_err(fail)?;
        if satisfied(req, &check.kept) {
            let pool = check.pool.expect("kept addresses have a pool");
            let mut ips = check.kept;
            if reason.is_some()
                && req.requested_ips.is_empty()
                && wants_dual(req)
                && ips.len() == 1
                && let Ok(more) = self.complete(req, me, pool, &ips)
            {
                ips = more;
            }
            return Ok(Decision { ips, pool, reason });
        }
        if !req.requested_ips.is_empty() {
            let (ips, pool) = self.claim_requested(req, me).map_err(fail)?;
            return Ok(Decision { ips, pool, reason });
        }
        if let Some(pool) = check.pool
            && let Ok(ips) = self.complete(req, me, pool, &check.kept)
        {
            return Ok(Decision { ips, pool, reason });
        }
        let (ips, pool) = self.fresh(req, me, &check.kept).map_err(fail)?;
        Ok(Decision { ips, pool, reason })
    }

    /// Checks each current address in turn; see [`ChangeReason`] for what makes one invalid.
    pub(super) fn check_current(
        &self,
        req: &ServiceRequest,
        me: Option<Slot>,
        current: &[IpAddr],
    ) -> CurrentCheck {
        let mut kept: Vec<IpAddr> = Vec::new();
        let mut pool = None;
        let mut reason = None;
        for &ip in current {
            match self.current_problem(req, me, ip, &kept, pool) {
                Ok(p) => {
                    kept.push(ip);
                    pool = Some(p);
                }
                Err(r) => {
                    reason.get_or_insert(r);
                }
            }
        }
        CurrentCheck {
            kept: ordered(req, kept),
            pool,
            reason,
        }
    }

    fn current_problem(
        &self,
        req: &ServiceRequest,
        me: Option<Slot>,
        ip: IpAddr,
        kept: &[IpAddr],
        kept_pool: Option<usize>,
    ) -> Result<usize, ChangeReason> {
        let (fam, n) = numbered(ip);
        if !family_allowed(req, fam) || kept.iter().any(|k| IpFamily::of(*k) == fam) {
            return Err(ChangeReason::FamilyNotWanted { ip });
        }
        if !req.requested_ips.is_empty() && !req.requested_ips.contains(&ip) {
            return Err(ChangeReason::RequestChanged { ip });
        }
        let containing =
            || (self.owner_order.iter().copied()).filter(move |&p| self.pools[p].contains(fam, n));
        let Some(first) = containing().next() else {
            return Err(ChangeReason::NotInAnyPool { ip });
        };
        let requested = |p: usize| {
            (req.requested_pool.as_deref()).is_none_or(|name| name == self.pools[p].name())
        };
        let Some(p) = containing().find(|&p| requested(p) && self.pools[p].spec.admits(req)) else {
            return Err(match containing().find(|&p| requested(p)) {
                Some(p) => ChangeReason::PoolNoLongerAdmits {
                    ip,
                    pool: self.pools[p].name().to_owned(),
                },
                None if req.requested_pool.is_some() => ChangeReason::RequestChanged { ip },
                None => ChangeReason::PoolNoLongerAdmits {
                    ip,
                    pool: self.pools[first].name().to_owned(),
                },
            });
        };
        if kept_pool.is_some_and(|q| q != p) {
            return Err(ChangeReason::AddressesInDifferentPools { ip });
        }
        for &s in self.book.holders(fam, n) {
            let other = &self.record(s).req;
            if Some(s) != me && may_share(req, other).is_err() {
                return Err(ChangeReason::SharingNoLongerAllowed {
                    ip,
                    with: other.key.clone(),
                });
            }
        }
        Ok(p)
    }

    /// Exactly the requested addresses, or why not.
    fn claim_requested(
        &self,
        req: &ServiceRequest,
        me: Option<Slot>,
    ) -> Result<(Vec<IpAddr>, usize), AllocationError> {
        let mut chosen: Option<(usize, IpAddr)> = None;
        for &ip in &req.requested_ips {
            let (fam, n) = numbered(ip);
            let p = match &req.requested_pool {
                Some(name) => {
                    let p = self.pool_named(name)?;
                    if !self.pools[p].contains(fam, n) {
                        return Err(AllocationError::RequestedIpNotInPool {
                            ip,
                            pool: name.clone(),
                        });
                    }
                    p
                }
                None => {
                    let mut containing = (self.owner_order.iter().copied())
                        .filter(|&p| self.pools[p].contains(fam, n))
                        .peekable();
                    let first = *containing
                        .peek()
                        .ok_or(AllocationError::RequestedIpNotInAnyPool { ip })?;
                    containing
                        .find(|&p| self.pools[p].spec.admits(req))
                        .unwrap_or(first)
                }
            };
            let pool = &self.pools[p];
            if !pool.spec.admits(req) {
                return Err(AllocationError::PoolDoesNotAdmitService {
                    pool: pool.name().to_owned(),
                });
            }
            let holders = self.book.holders(fam, n);
            let mine = me.is_some_and(|s| holders.contains(&s));
            if !pool.spec.ready && !mine {
                return Err(AllocationError::PoolNotReady {
                    pool: pool.name().to_owned(),
                });
            }
            if let Some((q, first)) = chosen
                && q != p
            {
                return Err(AllocationError::RequestedIpsInDifferentPools {
                    first,
                    first_pool: self.pools[q].name().to_owned(),
                    second: ip,
                    second_pool: pool.name().to_owned(),
                });
            }
            chosen = Some((p, ip));
            for &s in holders.iter().filter(|&&s| Some(s) != me) {
                let other = &self.record(s).req;
                may_share(req, other).map_err(|c| c.into_error(ip, other))?;
            }
        }
        let (pool, _) = chosen.expect("at least one requested address");
        Ok((ordered(req, req.requested_ips.clone()), pool))
    }

    /// The addresses `kept` plus the families they miss, all from pool `p`.
    fn complete(
        &mut self,
        req: &ServiceRequest,
        me: Option<Slot>,
        p: usize,
        kept: &[IpAddr],
    ) -> Result<Vec<IpAddr>, IpFamily> {
        let spec = &self.pools[p].spec;
        let allowed = spec.auto_assign || req.requested_pool.as_deref() == Some(&spec.name);
        let fams: Vec<IpFamily> = req
            .families
            .iter()
            .copied()
            .take(wanted_count(req))
            .collect();
        if !spec.ready || !allowed || fams.is_empty() {
            return Err(fams.first().copied().unwrap_or(IpFamily::V4));
        }
        self.take_from(p, &fams, req, me, kept)
    }

    /// New addresses from the candidate pools.
    fn fresh(
        &mut self,
        req: &ServiceRequest,
        me: Option<Slot>,
        kept: &[IpAddr],
    ) -> Result<(Vec<IpAddr>, usize), AllocationError> {
        let candidates: Vec<usize> = match &req.requested_pool {
            Some(name) => {
                let p = self.pool_named(name)?;
                let spec = &self.pools[p].spec;
                if !spec.admits(req) {
                    return Err(AllocationError::PoolDoesNotAdmitService { pool: name.clone() });
                }
                if !spec.ready {
                    return Err(AllocationError::PoolNotReady { pool: name.clone() });
                }
                vec![p]
            }
            None => (self.auto_order.iter().copied())
                .filter(|&p| self.pools[p].spec.admits(req))
                .collect(),
        };
        if candidates.is_empty() {
            return Err(AllocationError::NoPoolAdmitsService);
        }
        use IpFamily::{V4, V6};
        let f = &req.families;
        let stages: Vec<Vec<Vec<IpFamily>>> = match f.len() {
            0 => vec![vec![vec![V4], vec![V6]]],
            _ if !wants_dual(req) => vec![vec![vec![f[0]]]],
            _ if req.family_policy == FamilyPolicy::PreferDualStack => {
                vec![vec![vec![f[0], f[1]]], vec![vec![f[0]]]]
            }
            _ => vec![vec![vec![f[0], f[1]]]],
        };
        let mut ran_out = None;
        for stage in &stages {
            for &p in &candidates {
                for fams in stage {
                    if !fams.iter().all(|&f| self.pools[p].has_family(f)) {
                        continue;
                    }
                    match self.take_from(p, fams, req, me, kept) {
                        Ok(ips) => return Ok((ips, p)),
                        Err(fam) => ran_out = Some(fam),
                    }
                }
            }
        }
        let pools: Vec<String> = (candidates.iter())
            .map(|&p| self.pools[p].name().to_owned())
            .collect();
        if let Some(family) = ran_out {
            return Err(AllocationError::PoolExhausted { pools, family });
        }
        let wanted = &stages[0][0];
        let family = (wanted.iter().copied())
            .find(|&fam| !candidates.iter().any(|&p| self.pools[p].has_family(fam)))
            .unwrap_or(wanted[wanted.len() - 1]);
        Err(AllocationError::FamilyNotAvailable { pools, family })
    }

    /// One address per family in `fams`, all from pool `p`, or the family that ran out.
    fn take_from(
        &mut self,
        p: usize,
        fams: &[IpFamily],
        req: &ServiceRequest,
        me: Option<Slot>,
        kept: &[IpAddr],
    ) -> Result<Vec<IpAddr>, IpFamily> {
        let mut out = Vec::with_capacity(fams.len());
        for &fam in fams {
            let own = kept.iter().copied().find(|&ip| {
                let (f, n) = numbered(ip);
                f == fam && self.pools[p].contains(f, n)
            });
            match own.or_else(|| self.pick(p, fam, req, me).map(|n| fam.addr(n))) {
                Some(ip) => out.push(ip),
                None => return Err(fam),
            }
        }
        Ok(out)
    }

    /// An address of `fam` in pool `p` for `req`: shared under its key if allowed, else the
    /// lowest free one.
    fn pick(
        &mut self,
        p: usize,
        fam: IpFamily,
        req: &ServiceRequest,
        me: Option<Slot>,
    ) -> Option<u128> {
        if let Some(key) = &req.sharing_key {
            let pool = &self.pools[p];
            for &(lo, hi) in pool.ranges(fam) {
                let found = self.book.shared_within(key, fam, lo, hi).find(|&n| {
                    pool.contains(fam, n)
                        && (self.book.holders(fam, n).iter())
                            .all(|&s| Some(s) == me || may_share(req, &self.record(s).req).is_ok())
                });
                if found.is_some() {
                    return found;
                }
            }
        }
        self.pools[p].lowest_free(fam, self.book.used(fam))
    }

    fn pool_named(&self, name: &str) -> Result<usize, AllocationError> {
        (self.by_name.get(name).copied()).ok_or_else(|| AllocationError::UnknownPool {
            pool: name.to_owned(),
        })
    }

    /// Records that the Service holds exactly `ips` from pool `pool`.
    fn commit(
        &mut self,
        req: &ServiceRequest,
        me: Option<Slot>,
        ips: &[IpAddr],
        pool: usize,
    ) -> Slot {
        let slot = match me {
            None => self.new_slot(req.clone(), pool, None),
            Some(slot) => {
                let rec = self.record(slot);
                let old_key = rec.req.sharing_key.clone();
                // Under a new sharing key every address is re-registered.
                let dropped: Vec<IpAddr> = (rec.ips.iter().copied())
                    .filter(|ip| old_key != req.sharing_key || !ips.contains(ip))
                    .collect();
                self.give_back_as(slot, old_key.as_deref(), &dropped);
                let rec = self.records[slot as usize].as_mut().expect("slot in use");
                rec.req = ServiceRequest {
                    current_ips: Vec::new(),
                    ..req.clone()
                };
                rec.pending = None;
                slot
            }
        };
        let rec = self.records[slot as usize].as_mut().expect("slot in use");
        rec.ips = ips.to_vec();
        rec.pool = pool;
        for &ip in ips {
            let (fam, n) = numbered(ip);
            self.book.claim(fam, n, slot, req.sharing_key.as_deref());
        }
        slot
    }

    /// Drops a Service's record and frees what it holds.
    fn forget(&mut self, slot: Slot) {
        let rec = self.records[slot as usize].take().expect("slot in use");
        self.slots.remove(&rec.req.key);
        self.free_slots.push(slot);
        self.give_back_as(slot, rec.req.sharing_key.as_deref(), &rec.ips);
    }
}

/// Requested addresses must be one per family, of the Service's families, and both families
/// under `RequireDualStack`.
fn validate_request(req: &ServiceRequest) -> Result<(), AllocationError> {
    let mut seen: Vec<IpFamily> = Vec::new();
    for &ip in &req.requested_ips {
        let family = IpFamily::of(ip);
        if seen.contains(&family) {
            return Err(AllocationError::TooManyRequestedIps { family });
        }
        if !family_allowed(req, family) {
            return Err(AllocationError::RequestedFamilyNotOnService { ip, family });
        }
        seen.push(family);
    }
    if req.family_policy == FamilyPolicy::RequireDualStack
        && req.families.len() >= 2
        && seen.len() == 1
    {
        return Err(AllocationError::DualStackNeedsBothAddresses { family: seen[0] });
    }
    Ok(())
}

/// Whether the Service wants an address of both families.
fn wants_dual(req: &ServiceRequest) -> bool {
    req.families.len() >= 2 && req.family_policy != FamilyPolicy::SingleStack
}

/// How many of `req.families` the Service wants addresses for.
fn wanted_count(req: &ServiceRequest) -> usize {
    if wants_dual(req) { 2 } else { 1 }
}

/// Whether the Service may hold an address of `fam`.
fn family_allowed(req: &ServiceRequest, fam: IpFamily) -> bool {
    match req.families.first() {
        None => true,
        Some(&first) if !wants_dual(req) => first == fam,
        Some(_) => req.families.contains(&fam),
    }
}

/// Whether valid addresses `kept` are all the Service needs.
fn satisfied(req: &ServiceRequest, kept: &[IpAddr]) -> bool {
    if kept.is_empty() {
        return false;
    }
    if !req.requested_ips.is_empty() {
        return same_set(kept, &req.requested_ips);
    }
    let has = |fam: IpFamily| kept.iter().any(|ip| IpFamily::of(*ip) == fam);
    match req.families.as_slice() {
        [] => true,
        [first, ..] if !wants_dual(req) => has(*first),
        [first, second, ..] if req.family_policy == FamilyPolicy::RequireDualStack => {
            has(*first) && has(*second)
        }
        _ => true,
    }
}

/// `ips` sorted in the order of the Service's families (IPv4 first when it names none).
fn ordered(req: &ServiceRequest, mut ips: Vec<IpAddr>) -> Vec<IpAddr> {
    let rank = |ip: &IpAddr| {
        let fam = IpFamily::of(*ip);
        (req.families.iter().position(|&f| f == fam)).unwrap_or(fam.index())
    };
    ips.sort_by_key(rank);
    ips
}

fn same_set(a: &[IpAddr], b: &[IpAddr]) -> bool {
    a.len() == b.len() && a.iter().all(|ip| b.contains(ip))
}

/// The reason for a change that lost no address: an address was added or the request moved.
fn added_or_changed(old: &[IpAddr], new: &Assignment) -> ChangeReason {
    match new.ips.iter().find(|ip| !old.contains(ip)) {
        Some(&ip) if old.iter().all(|o| new.ips.contains(o)) => ChangeReason::Completed { ip },
        _ => ChangeReason::RequestChanged { ip: old[0] },
    }
}
