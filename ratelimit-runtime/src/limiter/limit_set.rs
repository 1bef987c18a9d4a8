//! A set of limits decided together in one store call, with what names their rules (policies)
//! and caches their refusals: a limiter's own limits, or the enforced (or shadow) part of the
//! limits in force under the overrides file. Below both the limiter and the snapshot, which
//! each hold some.

use crate::limiter::refusal_cache::{self, Owner};
use crate::limiter::sync::reserve::Reserves;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::limit_type::LimitType;
use crate::model::policy::{Headroom, Policy};
use crate::model::subject::Subject;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Limits decided together in one store call, with what names their rules and caches their
/// refusals: a limiter's own limits, or the enforced (or shadow) part of a snapshot.
pub(crate) struct LimitSet {
    pub(crate) limits: Vec<CompiledLimit>,
    /// Where each limit's subject sits among the limiter's subjects (`None`: limit `i` counts
    /// subject `i`).
    pub(crate) index: Option<Box<[usize]>>,
    /// Every rule, in limit order, for `RateLimit-Policy` and errors.
    pub(crate) policies: Arc<[Policy]>,
    /// This set's identity in the refusal cache: refusals under other rules never answer for
    /// these.
    pub(crate) cache_id: u64,
    /// Whether the cache ever held a refusal of this set (until then, no lookups).
    pub(crate) ever_refused: AtomicBool,
    /// The synced limits and the rest, when some limit has `sync`.
    pub(crate) synced: Option<Box<Synced>>,
    /// The smallest capacity of any rule of any limit: a call costing at most this fits them
    /// all, and no rule needs a look.
    pub(crate) min_capacity: u64,
    /// Whether some limit is a concurrency limit (a permit then holds slots to free).
    pub(crate) has_concurrency: bool,
}

/// A set's `sync` limits, decided from local reserves, and the others, decided by the store
/// together as a set of their own.
pub(crate) struct Synced {
    /// The position of each `sync` limit in the set, with its reserves.
    pub(crate) limits: Vec<(usize, Reserves)>,
    /// The other limits (possibly none), with their subjects' positions among the limiter's.
    pub(crate) exact: LimitSet,
    /// Where each of `exact`'s limits sits in the set.
    pub(crate) exact_at: Box<[usize]>,
}

impl LimitSet {
    pub(crate) fn new(limits: Vec<CompiledLimit>, index: Option<Box<[usize]>>, policies: Arc<[Policy]>) -> LimitSet {
        let mut set = LimitSet::decided_together(limits, index, policies);
        if set.limits.iter().any(|l| l.sync_us > 0) {
            set.synced = Some(Box::new(set.split_synced()));
        }
        set
    }

    /// A set whose limits the store decides together in one call, `sync` ones included (no
    /// local reserves).
    fn decided_together(limits: Vec<CompiledLimit>, index: Option<Box<[usize]>>, policies: Arc<[Policy]>) -> LimitSet {
        LimitSet {
            min_capacity: limits.iter().map(CompiledLimit::min_capacity).min().unwrap_or(u64::MAX),
            has_concurrency: limits.iter().any(CompiledLimit::is_concurrency),
            limits,
            index,
            policies,
            cache_id: refusal_cache::next_id(),
            ever_refused: AtomicBool::new(false),
            synced: None,
        }
    }

    /// The limits of `enforced` then those of `shadow`, decided in one store call (see
    /// `Call::shadow`); `None` when either is empty, or when `enforced` has `sync` limits (its
    /// reserves decide first, and the shadow limits after them, on their own). Only its limits
    /// and subjects' places are read: refusals are named and cached by the two sets.
    pub(crate) fn joined(enforced: &LimitSet, shadow: &LimitSet) -> Option<LimitSet> {
        if enforced.limits.is_empty() || shadow.limits.is_empty() || enforced.synced.is_some() {
            return None;
        }
        let limits = enforced.limits.iter().chain(&shadow.limits).cloned().collect();
        let index = (0..enforced.limits.len())
            .map(|i| enforced.subject_of(i))
            .chain((0..shadow.limits.len()).map(|i| shadow.subject_of(i)))
            .collect();
        // No reserves here: the enforced limits have no `sync` (see above), and a shadow
        // limit's `sync` is decided exactly, in this one call.
        Some(LimitSet::decided_together(limits, Some(index), enforced.policies.clone()))
    }

    /// Splits the `sync` limits from the others. The others keep their policies' places, so
    /// that their decisions name the same rules.
    fn split_synced(&self) -> Synced {
        let mut synced = Vec::new();
        let (mut exact, mut exact_at, mut subjects) = (Vec::new(), Vec::new(), Vec::new());
        for (i, limit) in self.limits.iter().enumerate() {
            if limit.sync_us > 0 {
                synced.push((i, Reserves::new(limit.sync_us, limit.sync_cap())));
            } else {
                exact.push(limit.clone());
                exact_at.push(i);
                subjects.push(self.subject_of(i));
            }
        }
        let exact = LimitSet::new(exact, Some(subjects.into()), self.policies.clone());
        Synced { limits: synced, exact, exact_at: exact_at.into() }
    }

    /// The position of limit `i`'s subject among the limiter's subjects.
    #[inline]
    pub(crate) fn subject_of(&self, i: usize) -> usize {
        self.index.as_ref().and_then(|x| x.get(i).copied()).unwrap_or(i)
    }

    /// The key bytes of each limit's subject, `None` where it is missing.
    pub(crate) fn targets<'s>(&self, subjects: &'s [Subject<'_>]) -> Vec<Option<&'s [u8]>> {
        (0..self.limits.len()).map(|i| subjects.get(self.subject_of(i)).and_then(Subject::key_bytes)).collect()
    }

    /// The rule a store's decision names (the tightest, or the one that refused).
    #[inline]
    pub(crate) fn policy_of(&self, limit: usize, rule: usize) -> Option<Policy> {
        let limit = self.limits.get(limit)?;
        // A concurrency limit has no rules: nothing to name.
        (rule < limit.rules.len()).then(|| self.policies.get(limit.policy_offset() + rule).copied())?
    }

    #[inline]
    pub(crate) fn limit_type(&self, limit: usize) -> LimitType {
        self.limits.get(limit).map_or(LimitType::Global, |l| l.limit_type)
    }

    /// The quota an allowed decision leaves.
    #[inline]
    pub(crate) fn quota(&self, d: &Decision) -> Option<Headroom> {
        let policy = self.policy_of(d.limit, d.rule)?;
        Some(Headroom {
            policy,
            remaining: d.remaining,
            reset: Duration::from_micros(d.reset_us),
            policies: self.policies.clone(),
        })
    }

    /// The refusal cache's key owner for this set on `store`.
    pub(crate) fn owner(&self, store: &crate::store::StoreHandle) -> Owner {
        Owner { limiter: self.cache_id, store: Arc::as_ptr(store).cast::<()>() as usize }
    }

    /// Forgets this process's `sync` reserves of these subjects (their counts are reset).
    pub(crate) fn forget_reserves(&self, subjects: &[Subject<'_>]) {
        let Some(synced) = self.synced.as_deref() else { return };
        let keys = self.targets(subjects);
        for (at, reserves) in &synced.limits {
            if let Some(Some(key)) = keys.get(*at) {
                reserves.forget(key);
            }
        }
    }

    /// Forgets the cached refusal of these subjects in this process.
    pub(crate) fn forget(&self, store: &crate::store::StoreHandle, subjects: &[Subject<'_>]) {
        let keys: Option<Vec<&[u8]>> = self.targets(subjects).into_iter().collect();
        if let Some(keys) = keys {
            self.forget_keys(store, &keys);
        }
    }

    /// Forgets the cached refusal of these subject keys (one per limit) in this process.
    pub(crate) fn forget_keys(&self, store: &crate::store::StoreHandle, keys: &[&[u8]]) {
        if self.ever_refused.load(std::sync::atomic::Ordering::Relaxed) {
            refusal_cache::global().forget(self.owner(store), keys);
        }
    }
}
