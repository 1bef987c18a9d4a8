//! The one decision path, from a call's subjects to a decision: [`Limiter::decide`].
//!
//! Async and blocking calls, with or without the overrides file, all go through it (a plain call
//! on the memory store takes its store call and its ending, and nothing else: `plain.rs`). It does
//! everything that needs no store (exemptions, missing subjects, the refusal cache) and stops
//! where a store's answer is needed: [`Step::Store`] hands back the store's future with the
//! decision so far. An awaited request (`request::CheckFuture`) polls that future, a blocking
//! one blocks on it (`io::block_on`), and each gives the answer to [`Deciding::answer`]; that
//! is the only difference between them. An in-memory store answers at once, and the whole decision
//! is then one call without a future.
//!
//! Under the overrides file (or with `mode = shadow`) the shadow limits, which only log and
//! count, are decided in the same store call as the enforced ones: the store decides the
//! enforced limits, and only if they admit the call, the shadow ones as a group, its answer
//! carrying their refusal ([`Decision::shadow_refusal`]). A second store step for the shadow
//! limits remains where they cannot ride along: a set with `sync` limits (whose reserves decide
//! first), a call whose shadow subject is missing (logged, no store call), and the shadow
//! limits of a call without enforced ones (then the only step).

use crate::context;
use crate::error::StoreError;
use crate::limiter::keys::Keys;
use crate::limiter::limit_set::LimitSet;
use crate::limiter::permit::Admitted;
use crate::limiter::rare::Rare;
use crate::limiter::refusal_cache;
use crate::limiter::snapshot::Snapshot;
use crate::limiter::switches::Switches;
use crate::limiter::under_override::UnderOverride;
use crate::limiter::Limiter;
use crate::metrics::Outcome;
use crate::model::decision::Decision;
use crate::model::refusal::Cause;
use crate::model::refusal::RateLimited;
use crate::model::subject::Subject;
use crate::store::{Call, Pending, RemoteDecision, StoreHandle, INTERNAL};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Where a decision stands: finished (see [`Deciding::decided`]), or waiting for a store's
/// answer. Small, so that steps cost no copies.
pub(crate) enum Step {
    Done,
    /// Finish the future (await it, or block on it) and give its answer to
    /// [`Deciding::answer`].
    Store(RemoteDecision),
}

/// Which limits the store is deciding.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Enforced,
    /// A synced limit's batch (or, while another call fills its reserve, this call alone).
    Sync,
    /// The limits without `sync` of a set that has some, once the `sync` ones passed.
    Exact,
    Shadow,
}

/// Where the `sync` limits of a decision stand.
#[derive(Clone, Copy, Default)]
pub(super) struct SyncStep {
    /// The `sync` limits before this one took their units (given back if a later limit refuses).
    pub(super) pos: usize,
    /// What the store is asked for the current one: a batch for its reserve (`batch` units), or
    /// just this call (`fill` false).
    pub(super) batch: u64,
    pub(super) fill: bool,
    /// The time the reserves are read at (µs, the refusal cache's clock).
    pub(super) now_us: u64,
}

/// A decision under way: the call, the limits in force, and what is decided so far.
pub(crate) struct Deciding<'l, 's, 'a> {
    pub(super) limiter: &'l Limiter,
    /// The limits in force under the overrides file (or a shadow limit), if any.
    pub(super) snapshot: Rare<Option<Arc<Snapshot>>>,
    pub(super) subjects: &'s [Subject<'a>],
    pub(super) cost: u64,
    /// The time pinned by the caller (µs since the Unix epoch).
    pub(super) pinned: Option<u64>,
    /// When the call left, on the refusal cache's clock, when the cache is on.
    pub(super) cache_at: Option<u64>,
    pub(super) phase: Phase,
    /// What the permit keeps of the enforced limits' decision, once allowed: taken from the
    /// store's answer where it lies (the whole decision moved here was one move more).
    pub(super) allowed: Option<Admitted>,
    pub(super) outcome: Outcome,
    /// The refusal, if the call is refused (else the call is permitted with `allowed`).
    pub(super) refused: Rare<Option<RateLimited>>,
    /// The store failed and the enforced limits are decided in process memory
    /// (`FailurePolicy::Local`).
    pub(super) local: bool,
    /// The shadow limits went to the store with the enforced ones: there is no shadow step
    /// (after a store failure either, which they shared).
    pub(super) shadow_asked: bool,
    pub(super) sync: SyncStep,
    /// The call's limits under runtime overrides, when the limiter honours them.
    pub(super) overriding: Rare<Option<Box<UnderOverride>>>,
}

impl Limiter {
    /// The one decision path: starts deciding a call of `cost` units for `subjects` (one per
    /// limit) in `tier` (which only chooses the limits in force) at the store's time, or at
    /// `pinned` µs since the epoch. Returns the decision under way and its first step: done, or
    /// the store call it waits for (see the module's documentation).
    #[inline(always)]
    pub(crate) fn decide<'l, 's, 'a>(
        &'l self,
        subjects: &'s [Subject<'a>],
        cost: u64,
        pinned: Option<u64>,
        tier: Option<&str>,
    ) -> Deciding<'l, 's, 'a> {
        Deciding {
            limiter: self,
            snapshot: Rare::new(self.snapshot_for(tier)),
            subjects,
            cost,
            pinned,
            cache_at: None,
            phase: Phase::Enforced,
            allowed: None,
            outcome: Outcome::Allowed,
            refused: Rare::new(None),
            local: false,
            shadow_asked: false,
            sync: SyncStep::default(),
            overriding: Rare::new(None),
        }
    }
}

impl<'l, 's, 'a> Deciding<'l, 's, 'a> {
    /// The first step: exemptions, then the enforced limits.
    #[inline(always)]
    pub(crate) fn start(&mut self) -> Step {
        if self.snapshot.as_ref().is_some_and(|s| s.is_exempt(self.subjects)) {
            return self.done(None, Outcome::Exempt);
        }
        self.enforce()
    }

    /// The set the current phase decides.
    #[inline(always)]
    pub(super) fn set(&self) -> &LimitSet {
        match self.phase {
            Phase::Enforced | Phase::Sync => self.enforced_set(),
            Phase::Exact => self.enforced_set().synced.as_deref().map_or(self.enforced_set(), |s| &s.exact),
            Phase::Shadow => self.snapshot.as_deref().map_or(self.limiter.own(), |s| &s.shadow),
        }
    }

    /// The enforced limits, all of them.
    #[inline]
    pub(super) fn enforced_set(&self) -> &LimitSet {
        if let Some(set) = self.overriding.as_ref().and_then(|o| o.set.as_ref()) {
            return set;
        }
        self.limiter.enforced(self.snapshot.as_deref())
    }

    /// The enforced limits: the refusal cache, then the store.
    #[inline(always)]
    pub(super) fn enforce(&mut self) -> Step {
        let store = self.limiter.store();
        let switches = self.limiter.switches();
        // A plain limiter finds its set once (it was found twice, a dozen instructions each).
        if !switches.plain() && !self.set().limits.is_empty() {
            self.switch_on(switches, store);
        }
        let set = self.set();
        if set.limits.is_empty() {
            return self.shadow();
        }
        let keys = match Keys::of(set, self.subjects) {
            Ok(keys) => keys,
            Err(i) => {
                let missing = self.refusal(set.limit_type(i), None, Duration::ZERO, Cause::SubjectMissing, None);
                return self.done(Some(missing), Outcome::SubjectMissing);
            }
        };
        // A cost above a rule's capacity would be refused by every store forever: say so at once,
        // without a store call and without a retry-after that could not be kept.
        if self.cost > set.min_capacity {
            if let Some((g, r)) =
                set.limits.iter().enumerate().find_map(|(g, l)| Some((g, l.rule_too_small(self.cost)?)))
            {
                let refused =
                    self.refusal(set.limit_type(g), set.policy_of(g, r), Duration::ZERO, Cause::CostTooHigh, None);
                return self.done(Some(refused), Outcome::Denied);
            }
        }
        if set.synced.is_some() {
            // Each reserve answers its key's refusals itself; the exact limits' refusals are
            // not cached (a cached refusal would name the whole set's keys).
            self.cache_at = None;
            self.sync.now_us = self.pinned.unwrap_or_else(|| store.now_us(INTERNAL));
            return self.sync_from(0, keys.as_slice());
        }
        if let Some(now) = self.cache_at {
            if let Some(refused) = self.cached_refusal(&keys, now) {
                return self.done(Some(refused), Outcome::Denied);
            }
        }
        // The shadow limits ride along when they have their subjects (else the shadow step
        // logs the missing one).
        let joined = self.snapshot.as_deref().and_then(|s| s.joined.as_ref()).filter(|_| self.overriding.is_none());
        let joined = joined.and_then(|j| Some((j, Keys::of(j, self.subjects).ok()?)));
        let call = match &joined {
            Some((j, both)) => Call {
                limits: &j.limits,
                subjects: both.as_slice(),
                cost: self.cost,
                now_us: self.pinned,
                shadow: j.limits.len().saturating_sub(set.limits.len()),
            },
            None => {
                Call { limits: &set.limits, subjects: keys.as_slice(), cost: self.cost, now_us: self.pinned, shadow: 0 }
            }
        };
        let pending = match self.overriding.as_deref() {
            Some(o) => store.decide_checked(&call, &o.checks),
            None => store.decide(&call),
        };
        self.shadow_asked = joined.is_some();
        match pending {
            // The usual answer of an in-memory store, read where it lies: moving the whole
            // decision again, fresh from the store, costs more than the rest of this step.
            Pending::Ready(Ok(ref d)) if d.allowed && self.overriding.is_none() => self.admit(d),
            Pending::Ready(answer) => self.answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    /// The subjects' runtime overrides and the refusal cache, for a limiter that has either.
    #[inline(never)]
    fn switch_on(&mut self, switches: Switches, store: &StoreHandle) {
        if self.phase == Phase::Enforced && self.overriding.is_none() && switches.overrides() {
            *self.overriding = UnderOverride::of(self.limiter, self.enforced_set(), self.subjects);
        }
        // A refusal cached here would hide an override set in another process: limiters that
        // honour overrides ask the store every time.
        if self.overriding.is_none() && switches.refusal_cache() {
            self.cache_at = Some(self.pinned.unwrap_or_else(|| store.now_us(INTERNAL)));
        }
    }

    /// The enforced limits allowed the call with `d` (its limit an index of the enforced set).
    #[inline(always)]
    pub(super) fn admit(&mut self, d: &Decision) -> Step {
        record_quota(|| self.set(), d);
        self.allowed = Some(Admitted::of(d));
        self.shadow_after(d)
    }

    /// Goes on with a store's answer, now or once it arrives.
    #[inline]
    pub(super) fn pending(&mut self, pending: Pending) -> Step {
        match pending {
            Pending::Ready(answer) => self.answer(answer),
            Pending::Remote(fut) => Step::Store(fut),
        }
    }

    /// A refusal the cache still holds for these keys at `now`: the remaining retry-after,
    /// counted as a local denial.
    pub(super) fn cached_refusal(&self, keys: &Keys<'_>, now: u64) -> Option<RateLimited> {
        let set = self.set();
        if !set.ever_refused.load(Ordering::Relaxed) {
            return None;
        }
        let owner = set.owner(self.limiter.store());
        let r = refusal_cache::global().get(owner, keys.as_slice(), self.cost, (now, self.pinned.is_some()))?;
        self.limiter.metrics().local_denial();
        let retry_after = Duration::from_micros(r.until_us.saturating_sub(now));
        Some(self.refusal(set.limit_type(r.limit), set.policy_of(r.limit, r.rule), retry_after, Cause::Exceeded, None))
    }

    /// Continues the decision with the store's answer to the step it waited for.
    #[inline(always)]
    pub(crate) fn answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        match self.phase {
            Phase::Enforced | Phase::Exact => self.enforced_answer(answer),
            Phase::Sync => self.sync_answer(answer),
            Phase::Shadow => {
                self.shadow_answer(answer);
                self.finish()
            }
        }
    }
}

/// Gives an HTTP request (a context) the quota `d` leaves in the set `set` finds, for its
/// headers; nothing else wants it. Inlined: a decision outside a request pays one look, not a
/// call, and does not look for the set (found first, it was a dozen instructions for nothing).
#[inline(always)]
pub(super) fn record_quota<'s>(set: impl FnOnce() -> &'s LimitSet, d: &Decision) {
    if let Some(ctx) = context::current() {
        record_quota_in(&ctx, set(), d);
    }
}

#[inline(never)]
fn record_quota_in(ctx: &context::RequestContext, set: &LimitSet, d: &Decision) {
    if let Some(q) = set.quota(d) {
        ctx.record_quota(q);
    }
}
